"""LeRobotDataset v3 import and export, and LeRobot datasets read as episodes.

`lerobot` itself does not install beside torch 2.13 (0.4.x pins torch < 2.11, 0.5+ needs Python 3.12),
so the format is written with the libraries LeRobot uses underneath: pyarrow for the parquet files and
PyAV (FFmpeg) for the MP4 videos (the `lerobot` extra). The layout is LeRobot's codebase v3.0:

    meta/info.json                               fps, features (dtype, shape, names), path templates, totals
    meta/stats.json                              per feature min, max, mean, std, count, q01 ... q99
    meta/tasks.parquet                           task text (the pandas index) -> task_index
    meta/episodes/chunk-000/file-000.parquet     one row per episode: length, tasks, its rows in the data
                                                 files (dataset_from_index/to_index) and its span in each
                                                 camera's video (videos/<key>/from_timestamp/to_timestamp)
    data/chunk-000/file-000.parquet              one row per frame, many episodes per file
    videos/observation.images.<camera>/chunk-000/file-000.mp4   many episodes per file, one after another

Mapping (an episode of T steps has T + 1 observations here; LeRobot stores T frames, each an
observation with the action taken from it):

    ours                     LeRobot frame k (k < T)
    camera <name>            observation.images.<name> (video; export's camera_names may rename it)
    state                    observation.state
    action                   action
    reward                   next.reward
    terminated, truncated    next.done (either), next.truncated, complementary_info.terminated
    intervention             complementary_info.is_intervention (HIL-SERL's name)
    success_label            next.success (label == 1), complementary_info.success_label (-1 unlabelled)
    stamp                    complementary_info.stamp (float64; `timestamp` is LeRobot's k / fps)
    (none)                   complementary_info.discrete_penalty (float32 zeros) where the action ends in a
                             discrete gripper, see DISCRETE_PENALTY

The observation the last step reached (T + 1-th) has no frame row: its camera frames are one more frame
at the end of the episode's span in each video (to_timestamp covers it; LeRobot never queries it) and
its state is the episode's `robot_rl/final_state`; `robot_rl/final_observation` says it is there.
`meta/robot_rl.json` keeps the dataset's task_config and the cameras' names where export renamed them
(import gives them back). So export -> import gives back every array exactly, camera frames through the
video codec (`lerobot_export.VideoSettings`; export lives there).

A dataset recorded by LeRobot has no final observation: the last one is repeated, and the last step is
terminated where next.done says so (and next.truncated, if present, does not), truncated otherwise.
Without next.reward rewards are 0, without next.success steps are unlabelled, and without
`complementary_info.is_intervention` no step is an intervention. Several state features are
concatenated in `STATE_ORDER`, then the other numeric `observation.*` features in info.json order
(text features are left out, as are columns this mapping does not name). A dataset's
complementary_info.discrete_penalty is read as the episode's `discrete_penalty`, which an export carries
on and an import, having no place for it, leaves out.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from robot_rl.data.episodes import UNLABELLED, EpisodeDataset, EpisodeSchema, EpisodeWriter
from robot_rl.outputs import UserError

CODEBASE_VERSION = "v3.0"
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = "meta/episodes/" + CHUNK_FILE + ".parquet"
INFO_PATH, STATS_PATH, TASKS_PATH = "meta/info.json", "meta/stats.json", "meta/tasks.parquet"
ROBOT_RL_PATH = "meta/robot_rl.json"
"""Our own file beside LeRobot's metadata (LeRobot ignores it): the dataset's task_config and, under
"camera_names", our name -> the exported one of each renamed camera."""
CHUNKS_SIZE = 1000
"""Files per chunk directory (LeRobot's default)."""
DATA_FILE_MB, VIDEO_FILE_MB = 100, 200
"""A data (video) file is closed and the next one begun once it reaches this size (LeRobot's defaults)."""

CAMERA_PREFIX = "observation.images."
STATE_ORDER = ("observation.state", "observation.environment_state")
"""State features concatenated first, in this order; other numeric observation.* features follow."""
NUMERIC = ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")
"""Feature dtypes read as numbers; observation.* features of other dtypes (text) are not state."""
INDEX_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")
FINAL_FLAG, FINAL_STATE = "robot_rl/final_observation", "robot_rl/final_state"
DISCRETE_PENALTY = "complementary_info.discrete_penalty"
"""HIL-SERL's penalty for a needless gripper command, added to the reward by LeRobot's discrete gripper critic.
LeRobot 0.4.4's recorder (rl/gym_manipulator.py) writes it, float32 of shape [1], whenever the action ends in
its discrete gripper command (0, 1 or 2), and its actor sends it with every online transition; a learner whose
offline rows lack it merges a half-sized penalty batch and fails at its first update. For gym-hil the value
LeRobot records is always 0 (its GymHILAdapterProcessorStep does not pass gym-hil's info["discrete_penalty"]
on), so export writes zeros where a dataset has none of its own."""
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
# Step fields as LeRobot features: ours -> (LeRobot key, dtype).
STEP_FEATURES = {
    "reward": ("next.reward", "float32"),
    "done": ("next.done", "bool"),
    "truncated": ("next.truncated", "bool"),
    "success": ("next.success", "bool"),
    "terminated": ("complementary_info.terminated", "bool"),
    "intervention": ("complementary_info.is_intervention", "bool"),
    "success_label": ("complementary_info.success_label", "int8"),
    "stamp": ("complementary_info.stamp", "float64"),
}


def lerobot_libraries():
    """pyarrow, pyarrow.parquet and av, or a clear error naming the extra that installs them."""
    try:
        import av
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise UserError(f"LeRobot datasets need pyarrow and av ({exc.name} is missing): "
                        "pip install 'robot_rl[lerobot]'") from None
    return pa, pq, av


# ---- reading ------------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from None


def _read_parquet(path: Path, columns: list[str] | None = None):
    """The table at `path`, or an error naming the file."""
    pa, pq, _ = lerobot_libraries()
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{path}: not a readable parquet file ({exc})") from None


def is_lerobot_dataset(path: str | os.PathLike) -> bool:
    """Whether `path` is a LeRobot dataset directory (it has meta/info.json)."""
    return (Path(path) / INFO_PATH).is_file()


def _rows(column, rows: int, shape: tuple[int, ...], what: str) -> np.ndarray:
    """A parquet column (scalars or lists of a fixed length) as a (rows, *shape) array; shape (1,) gives (rows,)."""
    pa, _, _ = lerobot_libraries()
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    while pa.types.is_list(values.type) or pa.types.is_fixed_size_list(values.type) \
            or pa.types.is_large_list(values.type):
        values = values.flatten()
    flat = values.to_numpy(zero_copy_only=False)
    size = int(np.prod(shape))
    if flat.size != rows * size:
        raise ValueError(f"{what} holds {flat.size} values for {rows} rows of shape {tuple(shape)}")
    return flat.reshape(rows) if size == 1 and len(shape) <= 1 else flat.reshape(rows, *shape)


def _camera_name(key: str) -> str:
    return key[len(CAMERA_PREFIX):] if key.startswith(CAMERA_PREFIX) else key.removeprefix("observation.")


def _frame_size(key: str, feature: Mapping[str, Any], where: Path) -> tuple[int, int]:
    """(H, W) of a video feature, whose shape is (H, W, C) or, named so, (C, H, W)."""
    shape, names = list(feature.get("shape") or ()), feature.get("names") or []
    if len(shape) != 3:
        raise ValueError(f"{where}: video feature {key!r} has shape {shape}, expected (H, W, C) or (C, H, W)")
    if len(names) == 3 and names[0] in ("channel", "channels"):
        return shape[1], shape[2]
    return shape[0], shape[1]


class LeRobotEpisodes:
    """A LeRobotDataset v3 directory read as episodes, with EpisodeDataset's reading API
    (`schema`, `len`, `num_steps`, `episode(i)`, `path`, `task_config`); read-only."""

    def __init__(self, path: str | os.PathLike):
        lerobot_libraries()
        self.path = Path(path)
        info_path = self.path / INFO_PATH
        self.info = _read_json(info_path)
        version = self.info.get("codebase_version") if isinstance(self.info, dict) else None
        if not isinstance(version, str) or not version.startswith("v3."):
            raise ValueError(f"{info_path}: codebase_version {version!r}; only LeRobotDataset v3.x is read "
                             "(convert v2.1 datasets with lerobot's convert_dataset_v21_to_v30)")
        try:
            self.fps = self.info["fps"]
            features: dict[str, dict] = self.info["features"]
            self._data_path: str = self.info["data_path"]
            self._video_path: str | None = self.info.get("video_path")
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{info_path}: {exc} missing or malformed") from None
        if not isinstance(self.fps, (int, float)) or self.fps <= 0 or not isinstance(features, dict):
            raise ValueError(f"{info_path}: fps must be a positive number and features a dict")
        self.features = features
        for key, feature in features.items():
            if feature.get("dtype") == "image":
                raise ValueError(f"{info_path}: feature {key!r} keeps its frames as images in the parquet files; "
                                 "only video features are read")
        self.camera_keys = [k for k, f in features.items() if f.get("dtype") == "video"]
        if self.camera_keys and not self._video_path:
            raise ValueError(f"{info_path}: video features {self.camera_keys} but no video_path template")
        if "action" not in features:
            raise ValueError(f"{info_path}: no 'action' feature")
        numeric = [k for k, f in features.items() if k.startswith("observation.") and f.get("dtype") in NUMERIC]
        self.state_keys = [k for k in STATE_ORDER if k in numeric] + [k for k in numeric if k not in STATE_ORDER]
        for key in (*self.state_keys, "action"):
            shape = features[key].get("shape")
            if not isinstance(shape, list) or len(shape) != 1 or features[key].get("dtype") not in NUMERIC:
                raise ValueError(f"{info_path}: feature {key!r} is {features[key].get('dtype')} of shape {shape}; "
                                 "state and action features must be numeric vectors")
        ours = self._robot_rl_metadata()
        renamed = {exported: name for name, exported in (ours or {}).get("camera_names", {}).items()}
        self.camera_names = {k: renamed.get(_camera_name(k), _camera_name(k)) for k in self.camera_keys}
        """Our name of each camera key: its name in the key, or the one it had before an export renamed it."""
        cameras = {self.camera_names[k]: (*_frame_size(k, features[k], info_path), 3) for k in self.camera_keys}
        try:
            self.schema = EpisodeSchema(cameras, sum(features[k]["shape"][0] for k in self.state_keys),
                                        features["action"]["shape"][0])
        except ValueError as exc:
            raise ValueError(f"{info_path}: {exc}") from None
        self.tasks = self._read_tasks()
        self._episodes = self._read_episodes()
        self._final_stored = FINAL_FLAG in self._episodes
        self.task_config = ours["task_config"] if ours else self._foreign_task_config()
        self._table: tuple[Path, Any] | None = None  # the data file read last (episodes share files)

    def _robot_rl_metadata(self) -> dict[str, Any] | None:
        """ROBOT_RL_PATH of a dataset we exported (None for one LeRobot recorded)."""
        path = self.path / ROBOT_RL_PATH
        if not path.is_file():
            return None
        ours = _read_json(path)
        names = ours.get("camera_names", {}) if isinstance(ours, dict) else None
        if not isinstance(names, dict) or not isinstance(ours.get("task_config"), dict) \
                or not all(isinstance(name, str) for name in names.values()):
            raise ValueError(f"{path}: expected a task_config object and camera_names (our name -> exported name)")
        return ours

    def _read_tasks(self) -> list[str]:
        """Task texts by task_index: LeRobot writes them as the pandas index of meta/tasks.parquet."""
        path = self.path / TASKS_PATH
        table = _read_parquet(path)
        pandas_meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
        index_columns = [c for c in pandas_meta.get("index_columns", []) if isinstance(c, str)]
        text_column = index_columns[0] if index_columns else "task"
        if text_column not in table.column_names or "task_index" not in table.column_names:
            raise ValueError(f"{path}: expected task texts and a task_index column, got {table.column_names}")
        tasks = dict(zip(table["task_index"].to_pylist(), table[text_column].to_pylist()))
        if sorted(tasks) != list(range(len(tasks))):
            raise ValueError(f"{path}: task_index must count 0, 1, ..., got {sorted(tasks)}")
        return [tasks[i] for i in range(len(tasks))]

    def _read_episodes(self) -> dict[str, list]:
        """The episodes' metadata, columns -> values in episode order (per-episode stats left out)."""
        _, pq, _ = lerobot_libraries()
        files = sorted((self.path / "meta" / "episodes").glob("*/*.parquet"))
        if not files:
            raise FileNotFoundError(f"{self.path / 'meta' / 'episodes'} has no parquet files")
        columns: dict[str, list] = {}
        for file in files:
            try:
                names = [n for n in pq.read_schema(file).names if not n.startswith("stats/")]
            except Exception as exc:  # pyarrow raises ArrowInvalid for a damaged footer
                raise ValueError(f"{file}: not a readable parquet file ({exc})") from None
            for name, values in _read_parquet(file, names).to_pydict().items():
                columns.setdefault(name, []).extend(values)
        required = ["episode_index", "length", "data/chunk_index", "data/file_index"]
        required += [f"videos/{k}/{c}" for k in self.camera_keys
                     for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
        missing = [c for c in required if c not in columns]
        if missing:
            raise ValueError(f"{self.path / 'meta' / 'episodes'}: columns {missing} missing")
        order = np.argsort(columns["episode_index"], kind="stable")
        columns = {name: [values[i] for i in order] for name, values in columns.items()}
        if columns["episode_index"] != list(range(len(order))):
            raise ValueError(f"{self.path / 'meta' / 'episodes'}: episode_index must count 0, 1, ..., "
                             f"got {columns['episode_index'][:10]}...")
        short = [i for i, n in enumerate(columns["length"]) if not n or n < 1]
        if short:
            raise ValueError(f"{self.path}: episodes {short} have no frames")
        return columns

    def _foreign_task_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"source": "lerobot", "fps": self.fps, "robot_type": self.info.get("robot_type"),
                                  "tasks": self.tasks}
        if len(self.tasks) == 1:
            config["goal"] = self.tasks[0]
        return config

    def __len__(self) -> int:
        return len(self._episodes["episode_index"])

    @property
    def num_steps(self) -> int:
        return int(sum(self._episodes["length"]))

    def _data_rows(self, index: int):
        """Episode `index`'s frame rows, by frame_index."""
        pc = lerobot_libraries()[0].compute
        meta = self._episodes
        path = self.path / self._data_path.format(chunk_index=meta["data/chunk_index"][index],
                                                  file_index=meta["data/file_index"][index])
        if self._table is None or self._table[0] != path:
            self._table = (path, _read_parquet(path))
        table = self._table[1]
        missing = [k for k in (*INDEX_FEATURES, "action", *self.state_keys) if k not in table.column_names]
        if missing:
            raise ValueError(f"{path}: columns {missing} missing")
        rows = table.filter(pc.equal(table["episode_index"], index))
        rows = rows.take(pc.sort_indices(rows["frame_index"]))
        length = meta["length"][index]
        if rows.num_rows != length or rows["frame_index"].to_pylist() != list(range(length)):
            raise ValueError(f"{path}: episode {index} has {rows.num_rows} frames numbered "
                             f"{rows['frame_index'].to_pylist()[:5]}..., its metadata says {length}")
        return path, rows

    def _frames(self, index: int, key: str, timestamps: np.ndarray) -> np.ndarray:
        """The frames of camera `key` at the episode's `timestamps` (seconds from its start)."""
        _, _, av = lerobot_libraries()
        meta = self._episodes
        path = self.path / self._video_path.format(video_key=key, chunk_index=meta[f"videos/{key}/chunk_index"][index],
                                                   file_index=meta[f"videos/{key}/file_index"][index])
        start = float(meta[f"videos/{key}/from_timestamp"][index])
        wanted = start + timestamps
        tolerance = 0.5 / self.fps  # the nearest frame is the right one while frames sit on the fps grid
        found: dict[int, np.ndarray] = {}
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing (camera {key!r}, episode {index})")
        try:
            with av.open(str(path)) as container:
                stream = container.streams.video[0]
                stream.thread_type = "AUTO"
                container.seek(int(max(wanted[0] - tolerance, 0) / stream.time_base), stream=stream, backward=True)
                for frame in container.decode(stream):
                    if frame.pts is None:
                        continue
                    time = float(frame.pts * stream.time_base)
                    if time > wanted[-1] + tolerance:
                        break
                    nearest = int(np.argmin(np.abs(wanted - time)))
                    if abs(wanted[nearest] - time) < tolerance:
                        found[nearest] = frame.to_ndarray(format="rgb24")
        except (av.error.FFmpegError, IndexError) as exc:
            raise ValueError(f"{path}: not a readable video ({exc})") from None
        if len(found) != len(wanted):
            raise ValueError(f"{path}: camera {key!r} has {len(found)} of episode {index}'s {len(wanted)} frames "
                             f"between {wanted[0]:.3f} s and {wanted[-1]:.3f} s")
        frames = np.stack([found[i] for i in range(len(wanted))])
        expected = self.schema.cameras[self.camera_names[key]]
        if frames.shape[1:] != expected:
            raise ValueError(f"{path}: frames are {frames.shape[1:]}, info.json says {expected} for {key!r}")
        return frames

    def episode(self, index: int) -> dict[str, np.ndarray]:
        """Episode `index` (negative counts from the end) as EpisodeDataset.episode gives it: each camera and
        `state` with T + 1 rows, every step field with T; and `discrete_penalty` (T) where the dataset has one."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"episode {index} out of range: {self.path} has {len(self)}")
        index %= len(self)
        path, rows = self._data_rows(index)
        steps = rows.num_rows
        names = rows.column_names

        def column(key: str, dtype: str, default) -> np.ndarray:
            if key not in names:
                return np.full(steps, default, dtype)
            return _rows(rows[key], steps, (1,), f"{path}: {key!r}").astype(dtype)

        state = np.concatenate(
            [np.zeros((steps, 0), np.float32),
             *(_rows(rows[k], steps, tuple(self.features[k]["shape"]), f"{path}: {k!r}").astype(np.float32)
               for k in self.state_keys)], axis=1)
        final = self._final_stored and bool(self._episodes[FINAL_FLAG][index])
        if final and self.schema.state_dim:
            final_state = np.asarray(self._episodes[FINAL_STATE][index], np.float32).reshape(1, -1)
        else:  # LeRobot keeps no final observation: the last one stands in for it
            final_state = state[-1:]
        timestamps = column("timestamp", "float64", 0.0)
        times = np.append(timestamps, timestamps[-1] + 1.0 / self.fps) if final else timestamps
        episode = {}
        for key in self.camera_keys:
            frames = self._frames(index, key, times)
            episode[self.camera_names[key]] = frames if final else np.concatenate([frames, frames[-1:]])
        episode["state"] = np.concatenate([state, final_state])
        episode.update(self._steps(path, index, rows, column, timestamps))
        if DISCRETE_PENALTY in names:
            episode["discrete_penalty"] = column(DISCRETE_PENALTY, "float32", 0.0)
        return episode

    def _actions(self, path: Path, rows) -> np.ndarray:
        return _rows(rows["action"], rows.num_rows, tuple(self.features["action"]["shape"]),
                     f"{path}: 'action'").astype(np.float32).reshape(rows.num_rows, -1)

    def actions(self) -> np.ndarray:
        """Every frame's action, episodes in order, read without decoding a video."""
        return np.concatenate([self._actions(*self._data_rows(index)) for index in range(len(self))])

    def _steps(self, path: Path, index: int, rows, column, timestamps: np.ndarray) -> dict[str, np.ndarray]:
        """The step fields of one episode's frame rows (the flags as the module docstring says)."""
        steps = rows.num_rows
        names = rows.column_names
        field = {name: key for name, (key, _) in STEP_FEATURES.items()}
        done = column(field["done"], "bool", False)
        truncated = column(field["truncated"], "bool", False)
        terminated = column(field["terminated"], "bool", False) if field["terminated"] in names \
            else done & ~truncated
        truncated = truncated | (done & ~terminated)
        ended = np.flatnonzero(terminated[:-1] | truncated[:-1])
        if ended.size:
            raise ValueError(f"{path}: episode {index} ends (next.done) at frame {ended[0]}, before its last frame")
        if not terminated[-1]:
            truncated[-1] = True  # cut off where the recording stopped, as EpisodeWriter stores it
        if field["success_label"] in names:
            success_label = column(field["success_label"], "int8", UNLABELLED)
        elif field["success"] in names:
            success_label = column(field["success"], "bool", False).astype(np.int8)
        else:
            success_label = np.full(steps, UNLABELLED, np.int8)
        return {"action": self._actions(path, rows), "reward": column(field["reward"], "float32", 0.0),
                "terminated": terminated, "truncated": truncated,
                "intervention": column(field["intervention"], "bool", False), "success_label": success_label,
                "stamp": column(field["stamp"], "float64", 0.0) if field["stamp"] in names else timestamps}


def open_episodes(path: str | os.PathLike) -> EpisodeDataset | LeRobotEpisodes:
    """The episodes at `path`: our zarr dataset, or a LeRobotDataset v3 directory."""
    path = Path(path)
    if is_lerobot_dataset(path):
        return LeRobotEpisodes(path)
    if (path / "zarr.json").is_file() or (path / ".zgroup").is_file():
        return EpisodeDataset(path)
    what = "does not exist" if not path.exists() else "is neither"
    raise ValueError(f"{path} {what}: expected a robot_rl episode dataset (zarr, robot-rl demos/record) or a "
                     f"LeRobotDataset v3 directory (with {INFO_PATH})")


# ---- import -------------------------------------------------------------------------------------


def _observations(episode: Mapping[str, np.ndarray], streams: list[str]) -> Iterator[dict[str, np.ndarray]]:
    for t in range(len(episode["state"])):
        yield {name: episode[name][t] for name in streams}


def import_lerobot(src_dir: str | os.PathLike, out_zarr: str | os.PathLike) -> EpisodeDataset:
    """Writes the LeRobot dataset at `src_dir` as our episode dataset at `out_zarr` (through EpisodeWriter, so
    it is checked and checksummed like any recording); returns it opened."""
    source = LeRobotEpisodes(src_dir)
    writer = EpisodeWriter(out_zarr, source.schema, source.task_config)
    streams = [*source.schema.cameras, "state"]
    for index in range(len(source)):
        episode = source.episode(index)
        observations = list(_observations(episode, streams))
        for t, obs in enumerate(observations[:-1]):
            label = int(episode["success_label"][t])
            writer.add_step(obs, episode["action"][t], episode["reward"][t], episode["terminated"][t],
                            episode["truncated"][t], episode["intervention"][t],
                            None if label == UNLABELLED else label == 1, episode["stamp"][t])
        writer.end_episode(observations[-1])
    return EpisodeDataset(out_zarr)
