"""LeRobotDataset v3 export: our episode datasets as LeRobot lays them out (the layout and the field mapping
are in `robot_rl.data.lerobot_format`, which reads them back)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from robot_rl.data.lerobot_format import (
    CAMERA_PREFIX,
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    DATA_FILE_MB,
    DATA_PATH,
    DISCRETE_PENALTY,
    EPISODES_PATH,
    FINAL_FLAG,
    FINAL_STATE,
    INFO_PATH,
    QUANTILES,
    ROBOT_RL_PATH,
    STATS_PATH,
    STEP_FEATURES,
    TASKS_PATH,
    VIDEO_FILE_MB,
    VIDEO_PATH,
    LeRobotEpisodes,
    lerobot_libraries,
    open_episodes,
)

DISCRETE_GRIPPER_CHOICES = (0, 1, 2)
"""The commands of LeRobot's discrete gripper (HIL-SERL's `num_discrete_actions` 3, gym-hil's 0..2 gripper): its
critic reads the action's last entry rounded to one of them."""
STAMP_SPREAD = 1.5
"""Stamps tell the frame rate only where the steps are evenly paced: the middle 80 % of the gaps between them
within this factor of each other (a paced loop's misses stay rarer; an unpaced scripted expert's do not)."""
CAMERA_NAME = re.compile(r"[A-Za-z0-9_-]+")
"""An exported camera name: one path component of `videos/observation.images.<name>/`."""


@dataclass(frozen=True)
class VideoSettings:
    """How camera frames are encoded into the MP4 files."""

    codec: str = "h264"
    """FFmpeg encoder: `h264` (libx264), `hevc` (libx265) or `libsvtav1` (AV1, LeRobot's default), all of
    which LeRobot decodes."""
    pix_fmt: str = "yuv444p"
    """Pixel format. 4:4:4 keeps colour edges: 4:2:0 (what AV1 here can encode) measured 23-31 dB PSNR on
    our 64 px renders even losslessly coded, below the 35 dB a round trip must keep."""
    crf: int = 0
    """Constant rate factor: 0 is lossless for h264 (frames come back within the RGB <-> YUV rounding,
    about 50 dB); larger gives smaller files (LeRobot records with 30)."""
    gop: int = 2
    """Frames between keyframes; LeRobot's 2 keeps random access to a frame cheap."""

    def check(self) -> None:
        """Refuses an encoder this PyAV build lacks or a pixel format it cannot encode."""
        _, _, av = lerobot_libraries()
        try:
            encoder = av.codec.Codec(self.codec, "w")
        except Exception:  # PyAV raises UnknownCodecError / ValueError depending on the name
            raise ValueError(f"video codec {self.codec!r} cannot encode with this PyAV build") from None
        formats = [f.name for f in encoder.video_formats or ()]
        if self.pix_fmt not in formats:
            raise ValueError(f"video codec {self.codec!r} encodes pixel formats {formats}, not {self.pix_fmt!r}")
        if not 0 <= self.crf <= 63 or self.gop < 1:
            raise ValueError(f"crf must be 0-63 and gop >= 1, got crf={self.crf}, gop={self.gop}")

    def options(self) -> dict[str, str]:
        options = {"g": str(self.gop), "crf": str(self.crf)}
        if self.codec == "libsvtav1":
            options["preset"] = "12"  # LeRobot's choice: fastest
        return options


@dataclass(frozen=True)
class ExportSummary:
    """What `export_lerobot` wrote."""

    path: Path
    """The LeRobot dataset directory."""
    episodes: int
    """Episodes written."""
    frames: int
    """Frame rows written (steps: one per action)."""
    fps: int
    """Frames per second in info.json and the videos."""
    fps_from: str
    """Where `fps` came from: "given", "the recorded rate" or "the stamps' rate" (`_frame_rate`)."""


# ---- writing ------------------------------------------------------------------------------------


def _next_file(chunk_index: int, file_index: int) -> tuple[int, int]:
    return (chunk_index + 1, 0) if file_index + 1 == CHUNKS_SIZE else (chunk_index, file_index + 1)


class _VideoWriter:
    """One camera's videos: episodes one after another in a file, a new file past VIDEO_FILE_MB."""

    def __init__(self, root: Path, key: str, shape: tuple[int, int, int], fps: int, settings: VideoSettings):
        self.root, self.key, self.shape, self.fps, self.settings = root, key, shape, fps, settings
        self.chunk_index, self.file_index = 0, 0
        self.container = None
        self.frames_in_file = self.bytes_in_file = 0

    @property
    def path(self) -> Path:
        return self.root / VIDEO_PATH.format(video_key=self.key, chunk_index=self.chunk_index,
                                             file_index=self.file_index)

    def _open(self) -> None:
        _, _, av = lerobot_libraries()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.container = av.open(str(self.path), "w", options={"movflags": "faststart"})
        self.stream = self.container.add_stream(self.settings.codec, rate=self.fps, options=self.settings.options())
        self.stream.height, self.stream.width = self.shape[:2]
        self.stream.pix_fmt = self.settings.pix_fmt
        self.stream.codec_context.time_base = Fraction(1, self.fps)
        self.frames_in_file = self.bytes_in_file = 0

    def _mux(self, packets) -> None:
        for packet in packets:
            self.bytes_in_file += packet.size
            self.container.mux(packet)

    def close(self) -> None:
        if self.container is not None:
            self._mux(self.stream.encode())
            self.container.close()
            self.container = None

    def add_episode(self, frames: np.ndarray) -> dict[str, Any]:
        """Appends one episode's frames; returns its episodes-metadata columns."""
        _, _, av = lerobot_libraries()
        # Encoders hold frames back (AV1 looks ahead), so the file is measured by the packets muxed so far.
        if self.container is not None and self.bytes_in_file >= VIDEO_FILE_MB * 2**20:
            self.close()
            self.chunk_index, self.file_index = _next_file(self.chunk_index, self.file_index)
        if self.container is None:
            self._open()
        start = self.frames_in_file
        for frame in frames:
            video_frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
            video_frame.pts, video_frame.time_base = self.frames_in_file, Fraction(1, self.fps)
            self._mux(self.stream.encode(video_frame))
            self.frames_in_file += 1
        prefix = f"videos/{self.key}/"
        return {prefix + "chunk_index": self.chunk_index, prefix + "file_index": self.file_index,
                prefix + "from_timestamp": start / self.fps, prefix + "to_timestamp": self.frames_in_file / self.fps}


class _ChannelHistogram:
    """Exact statistics of a camera's uint8 pixels, per channel, from counts of each value."""

    def __init__(self):
        self.counts = np.zeros((3, 256), np.int64)
        self.frames = 0

    def add(self, frames: np.ndarray) -> None:
        for channel in range(3):
            self.counts[channel] += np.bincount(frames[..., channel].ravel(), minlength=256)
        self.frames += len(frames)

    def stats(self) -> dict[str, Any]:
        """LeRobot's image statistics: per channel, shape (3, 1, 1), pixels scaled to [0, 1]."""
        values = np.arange(256) / 255.0
        total = self.counts.sum(axis=1)
        mean = self.counts @ values / total
        std = np.sqrt(np.maximum(self.counts @ values**2 / total - mean**2, 0.0))
        cumulative = np.cumsum(self.counts, axis=1)
        present = self.counts > 0
        stats = {"min": values[present.argmax(axis=1)], "max": values[255 - present[:, ::-1].argmax(axis=1)],
                 "mean": mean, "std": std}
        for q in QUANTILES:
            stats[f"q{round(q * 100):02d}"] = values[(cumulative < q * total[:, None]).sum(axis=1)]
        out = {name: value.reshape(3, 1, 1).tolist() for name, value in stats.items()}
        out["count"] = [self.frames]
        return out


def _numeric_stats(values: np.ndarray) -> dict[str, Any]:
    """LeRobot's statistics of a numeric feature, over its rows."""
    data = values.reshape(len(values), -1).astype(np.float64)
    stats = {"min": data.min(0), "max": data.max(0), "mean": data.mean(0), "std": data.std(0)}
    stats.update({f"q{round(q * 100):02d}": np.quantile(data, q, axis=0) for q in QUANTILES})
    out = {name: value.tolist() for name, value in stats.items()}
    out["count"] = [len(data)]
    return out


def _feature(dtype: str, shape: tuple[int, ...], names: list[str] | None = None) -> dict[str, Any]:
    return {"dtype": dtype, "shape": list(shape), "names": names}


def _fixed_lists(values: np.ndarray):
    """A (rows, n) array as the fixed-size list column LeRobot's `datasets` features describe."""
    pa = lerobot_libraries()[0]
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(values).ravel()), values.shape[1])


def _frame_columns(episode: Mapping[str, np.ndarray], state: bool, episode_index: int, first_index: int,
                   task_index: int, fps: int, discrete_penalty: bool) -> dict[str, np.ndarray]:
    """One episode's frame rows (T of them) as LeRobot feature -> values; with `discrete_penalty`, the episode's
    own or zeros (DISCRETE_PENALTY)."""
    steps = len(episode["action"])
    values = {name: episode[name] for name in ("reward", "truncated", "terminated", "intervention", "success_label",
                                               "stamp")}
    values.update(done=episode["terminated"] | episode["truncated"], success=episode["success_label"] == 1)
    columns = {"observation.state": episode["state"][:-1]} if state else {}
    columns["action"] = episode["action"]
    columns.update({key: values[name].astype(dtype) for name, (key, dtype) in STEP_FEATURES.items()})
    frame_index = np.arange(steps, dtype=np.int64)
    columns.update({"timestamp": (frame_index / fps).astype(np.float32), "frame_index": frame_index,
                    "episode_index": np.full(steps, episode_index, np.int64),
                    "index": first_index + frame_index, "task_index": np.full(steps, task_index, np.int64)})
    if discrete_penalty:
        columns[DISCRETE_PENALTY] = np.asarray(episode.get("discrete_penalty", np.zeros(steps)), np.float32)
    return columns


def _write_table(columns: Mapping[str, list[np.ndarray]], path: Path) -> None:
    pa, pq, _ = lerobot_libraries()
    arrays = {}
    for key, parts in columns.items():
        values = np.concatenate(parts)
        arrays[key] = _fixed_lists(values) if values.ndim == 2 else pa.array(values)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(arrays), path, compression="snappy")


def _write_tasks(tasks: list[str], root: Path) -> None:
    """meta/tasks.parquet as pandas writes LeRobot's DataFrame (task texts the index), so pandas reads it back
    with the texts as index (LeRobot looks tasks up by it)."""
    pa, pq, _ = lerobot_libraries()
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    pandas_meta = {"index_columns": ["task"],
                   "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                                       "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
                   "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                                "numpy_type": "int64", "metadata": None},
                               {"name": "task", "field_name": "task", "pandas_type": "unicode",
                                "numpy_type": "object", "metadata": None}],
                   "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.2.3"}
    pq.write_table(table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()}), root / TASKS_PATH)


def _estimated_fps(source) -> int:
    """Frames per second from the stamps' median step, where the steps are evenly paced (STAMP_SPREAD)."""
    gaps = np.concatenate([np.diff(source.episode(i)["stamp"]) for i in range(min(len(source), 5))])
    gaps = gaps[gaps > 0]
    if not gaps.size:
        raise ValueError("cannot tell the frame rate from the dataset's stamps; give fps (--fps)")
    low, median, high = np.quantile(gaps, [0.1, 0.5, 0.9])
    if high > STAMP_SPREAD * low:
        raise ValueError(f"the steps' stamps are {low:.3g} s to {high:.3g} s apart, not evenly paced (a scripted "
                         "expert records as fast as it can), so they do not tell the frame rate; give fps (--fps)")
    if round(1.0 / median) < 1:
        raise ValueError(f"the steps' stamps are {median:.3g} s apart, under one frame per second; give fps (--fps)")
    return round(1.0 / median)


def _frame_rate(source, fps: int | None) -> tuple[int, str]:
    """The export's frames per second and where it came from: `fps`, else the rate the dataset was recorded at (a
    LeRobot dataset's fps, a graph or bag recording's control_hz), else its stamps'."""
    if fps is not None:
        return fps, "given"
    recorded = source.fps if isinstance(source, LeRobotEpisodes) else source.task_config.get("control_hz")
    if recorded is None:
        return _estimated_fps(source), "the stamps' rate"
    if isinstance(recorded, bool) or not isinstance(recorded, (int, float)) or recorded < 1 \
            or recorded != round(recorded):
        raise ValueError(f"the dataset was recorded at {recorded!r} Hz, not a whole number of frames per second as "
                         "LeRobot's fps is; give fps (--fps)")
    return round(recorded), "the recorded rate"


def _camera_keys(cameras: Mapping[str, Any], camera_names: Mapping[str, str]) -> dict[str, str]:
    """Each camera's LeRobot feature key, `camera_names` renaming some (ours -> LeRobot's)."""
    unknown = sorted(set(camera_names) - set(cameras))
    if unknown:
        raise ValueError(f"camera names (--camera-names): the dataset has no camera {', '.join(unknown)} "
                         f"(it has {', '.join(cameras) or 'none'})")
    bad = [name for name in camera_names.values() if not CAMERA_NAME.fullmatch(name)]
    if bad:
        raise ValueError(f"camera names (--camera-names): {bad[0]!r} is not a camera name (letters, digits, _ and -; "
                         f"the key is {CAMERA_PREFIX}<name>)")
    names = {camera: camera_names.get(camera, camera) for camera in cameras}
    for name in set(names.values()):
        shared = [camera for camera, new in names.items() if new == name]
        if len(shared) > 1:
            raise ValueError(f"camera names (--camera-names): cameras {' and '.join(shared)} would both be {name!r}")
    return {camera: CAMERA_PREFIX + name for camera, name in names.items()}


def _writes_discrete_penalty(source) -> bool:
    """Whether the export has DISCRETE_PENALTY: where the source has one, or where the action ends in a discrete
    gripper as LeRobot's recordings of gym-hil do (more entries than the gripper, its every value rounding to
    one of DISCRETE_GRIPPER_CHOICES). A continuous gripper within 0..2 gets the zeros too, at no cost: only the
    discrete critic reads them."""
    if isinstance(source, LeRobotEpisodes):
        if DISCRETE_PENALTY in source.features:
            return True
        actions = source.actions()
    else:
        actions = source.transitions()["action"]
    return actions.shape[1] > 1 and bool(np.isin(np.rint(actions[:, -1]), DISCRETE_GRIPPER_CHOICES).all())


def _task_text(task_config: Mapping[str, Any], task: str | None) -> str:
    text = task if task is not None else task_config.get("goal") or task_config.get("task")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the dataset has no goal sentence or task name to use as LeRobot's task; give task (--task)")
    return text


def export_lerobot(dataset_path: str | os.PathLike, out_dir: str | os.PathLike, fps: int | None = None,
                   task: str | None = None, video: VideoSettings = VideoSettings(),
                   camera_names: Mapping[str, str] | None = None) -> ExportSummary:
    """Writes the episodes at `dataset_path` (ours, or a LeRobot dataset) as a LeRobotDataset v3 in `out_dir`,
    which must not exist or be empty. `fps` defaults to the rate the dataset was recorded at (`_frame_rate`),
    `task` to the dataset's goal; `camera_names` renames cameras (ours -> LeRobot's, e.g. gym-hil's
    pixels_front -> front, as LeRobot's HIL-SERL names them)."""
    lerobot_libraries()
    video.check()
    source = open_episodes(dataset_path)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty directory")
    if len(source) == 0:
        raise ValueError(f"{dataset_path} has no episodes to export")
    schema, has_state = source.schema, source.schema.state_dim > 0
    keys = _camera_keys(schema.cameras, camera_names or {})
    fps, fps_from = _frame_rate(source, fps)
    if not isinstance(fps, int) or isinstance(fps, bool) or fps < 1:
        raise ValueError(f"fps must be a positive integer, got {fps!r}")
    text = _task_text(source.task_config, task)
    discrete_penalty = _writes_discrete_penalty(source)
    videos = {camera: _VideoWriter(out, keys[camera], shape, fps, video) for camera, shape in schema.cameras.items()}
    histograms = {camera: _ChannelHistogram() for camera in schema.cameras}
    all_columns: dict[str, list[np.ndarray]] = {}
    file_columns: dict[str, list[np.ndarray]] = {}
    data_file = (0, 0)
    episodes: dict[str, list] = {}
    frames = 0
    try:
        for index in range(len(source)):
            episode = source.episode(index)
            columns = _frame_columns(episode, has_state, index, frames, 0, fps, discrete_penalty)
            steps = len(episode["action"])
            if file_columns and sum(c.nbytes for parts in file_columns.values() for c in parts) >= DATA_FILE_MB * 2**20:
                _write_table(file_columns, out / DATA_PATH.format(chunk_index=data_file[0], file_index=data_file[1]))
                file_columns, data_file = {}, _next_file(*data_file)
            row = {"episode_index": index, "tasks": [text], "length": steps, "data/chunk_index": data_file[0],
                   "data/file_index": data_file[1], "dataset_from_index": frames, "dataset_to_index": frames + steps}
            for key, values in columns.items():
                file_columns.setdefault(key, []).append(values)
                all_columns.setdefault(key, []).append(values)
            for camera in schema.cameras:
                row.update(videos[camera].add_episode(episode[camera]))
                histograms[camera].add(episode[camera][:-1])
            row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0, FINAL_FLAG: True})
            if has_state:
                row[FINAL_STATE] = episode["state"][-1].tolist()
            for key, value in row.items():
                episodes.setdefault(key, []).append(value)
            frames += steps
        _write_table(file_columns, out / DATA_PATH.format(chunk_index=data_file[0], file_index=data_file[1]))
    finally:
        for writer in videos.values():
            writer.close()
    _write_metadata(out, source, fps, text, keys, all_columns, histograms, episodes, frames)
    return ExportSummary(out, len(source), frames, fps, fps_from)


def _write_metadata(out: Path, source, fps: int, text: str, keys: Mapping[str, str],
                    columns: Mapping[str, list[np.ndarray]], histograms: Mapping[str, _ChannelHistogram],
                    episodes: Mapping[str, list], frames: int) -> None:
    pa, pq, av = lerobot_libraries()
    schema = source.schema
    features: dict[str, dict] = {}
    stats: dict[str, dict] = {}
    for camera, key in keys.items():
        height, width, _ = schema.cameras[camera]
        with av.open(str(out / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0))) as container:
            stream = container.streams.video[0]
            info = {"video.height": stream.height, "video.width": stream.width,
                    "video.codec": stream.codec_context.codec.canonical_name, "video.pix_fmt": stream.pix_fmt,
                    "video.is_depth_map": False, "video.fps": fps, "video.channels": 3, "has_audio": False}
        features[key] = {**_feature("video", (height, width, 3), ["height", "width", "channels"]), "info": info}
        stats[key] = histograms[camera].stats()
    for key, parts in columns.items():
        values = np.concatenate(parts)
        features[key] = _feature(str(values.dtype), values.shape[1:] or (1,),
                                 ["discrete_penalty"] if key == DISCRETE_PENALTY else None)  # as LeRobot names it
        stats[key] = _numeric_stats(values)
    info = {"codebase_version": CODEBASE_VERSION, "robot_type": None, "total_episodes": len(source),
            "total_frames": frames, "total_tasks": 1, "chunks_size": CHUNKS_SIZE,
            "data_files_size_in_mb": DATA_FILE_MB, "video_files_size_in_mb": VIDEO_FILE_MB, "fps": fps,
            "splits": {"train": f"0:{len(source)}"}, "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if keys else None, "features": features}
    (out / "meta").mkdir(parents=True, exist_ok=True)
    (out / INFO_PATH).write_text(json.dumps(info, indent=4))
    (out / STATS_PATH).write_text(json.dumps(stats, indent=4))
    renamed = {camera: key[len(CAMERA_PREFIX):] for camera, key in keys.items() if key != CAMERA_PREFIX + camera}
    (out / ROBOT_RL_PATH).write_text(json.dumps({"task_config": source.task_config, "camera_names": renamed},
                                                indent=4))
    _write_tasks([text], out)
    path = out / EPISODES_PATH.format(chunk_index=0, file_index=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = {key: pa.array(values, pa.list_(pa.float32())) if key == FINAL_STATE else pa.array(values)
             for key, values in episodes.items()}
    pq.write_table(pa.table(table), path, compression="snappy")
