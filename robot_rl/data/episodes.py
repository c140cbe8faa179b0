"""Episode datasets (zarr): scripted demonstrations, teleop recordings and what the learner loads.

Flat step arrays plus an episode index, as in LeRobot's and diffusion-policy's replay buffers, so one
dataset grows by appending. An episode of T steps stores T + 1 observations (its final next
observation too), so no observation is stored twice. With N committed steps in E episodes:

    <path>/                      zarr group; root attrs: format "robot_rl.episodes", schema_version,
                                 schema, task_config, created, updated, num_episodes, num_steps
      obs/<camera>   (N + E, H, W, 3) uint8     observations, T + 1 per episode
      obs/state      (N + E, D) float32
      step/action    (N, A) float32             the action taken from the step's observation
      step/reward    (N,) float32               rewards, flags and labels describe where the step led
      step/terminated, step/truncated, step/intervention   (N,) bool
      step/success_label  (N,) int8             1 success, 0 failure, -1 unlabelled: whether the
                                                observation the step reached shows success
      step/stamp     (N,) float64               time of the step's observation (seconds)
      episode_ends   (E,) int64                 cumulative step count at the end of each episode
    root attr success_checks  [E] of 1, 0, -1   the task's own success check where each episode ended
                                                (beside a person's label, which it may contradict);
                                                -1 unchecked, and absent in data written before it

Step k of episode e has observation k + e and next observation k + e + 1, so a transition never
reaches into the following episode.

Crash safety: a writer keeps the episode in progress in memory, writes it at `end_episode` and then
commits it by updating the root attributes (`num_episodes`, `num_steps`), one atomic file replace.
Readers use only the committed counts and ignore anything beyond them; a writer reopening the
dataset truncates such an uncommitted tail first. A crash therefore loses at most the episode in
progress. One writer at a time.

Integrity (`robot_rl.data.integrity`): chunks are checksummed and the commit also updates the chunk
manifest, so a reader refuses a dataset whose committed chunks are missing or damaged, naming the
array, chunk and episodes. An empty directory at the path counts as no dataset (the writer creates
one there: that is how a replacement is built beside the dataset it replaces).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import zarr

from robot_rl.data.dataset import (check_names, checked_flags, checked_frames, checked_real, chunk_rows, is_count,
                                   read_header)
from robot_rl.data.frames import FrameReplayBuffer
from robot_rl.data.integrity import MANIFEST_ATTR, ChunkGuard, array_options, manifest, writable
from robot_rl.data.replay import ReplayBuffer

FORMAT = "robot_rl.episodes"
SCHEMA_VERSION = 1
UNLABELLED = -1
# Per-step arrays and their dtypes (their row shapes are scalars, except action).
STEP_DTYPES = {"action": np.float32, "reward": np.float32, "terminated": np.bool_, "truncated": np.bool_,
               "intervention": np.bool_, "success_label": np.int8, "stamp": np.float64}


@dataclass(frozen=True)
class EpisodeSchema:
    """The streams every observation and step of a dataset carries."""

    cameras: Mapping[str, tuple[int, int, int]]
    """Camera name -> frame shape (H, W, 3); frames are uint8 RGB. May be empty (state-only data)."""
    state_dim: int
    """Length D of the float32 state vector of every observation (0: no state)."""
    action_dim: int
    """Length A of the float32 action vector of every step."""

    def __post_init__(self) -> None:
        if not isinstance(self.cameras, Mapping):
            raise ValueError(f"cameras must map names to (H, W, 3), got {self.cameras!r}")
        check_names(self.cameras, {"state", *STEP_DTYPES}, "camera")
        shapes = {}
        for name, shape in self.cameras.items():
            if (not isinstance(shape, (tuple, list)) or len(shape) != 3 or not all(is_count(n) for n in shape)
                    or min(shape) < 1 or shape[2] != 3):
                raise ValueError(f"camera {name!r} shape must be (H, W, 3) with positive H and W, got {shape!r}")
            shapes[name] = tuple(int(n) for n in shape)
        object.__setattr__(self, "cameras", shapes)
        if not is_count(self.state_dim) or self.state_dim < 0:
            raise ValueError(f"state_dim must be an integer >= 0, got {self.state_dim!r}")
        if not is_count(self.action_dim) or self.action_dim < 1:
            raise ValueError(f"action_dim must be an integer >= 1, got {self.action_dim!r}")

    def to_json(self) -> dict[str, Any]:
        return {"cameras": {k: list(v) for k, v in self.cameras.items()}, "state_dim": int(self.state_dim),
                "action_dim": int(self.action_dim)}

    @classmethod
    def from_json(cls, data: Any) -> EpisodeSchema:
        if not isinstance(data, Mapping) or set(data) != {"cameras", "state_dim", "action_dim"}:
            raise ValueError(f"schema must have exactly cameras, state_dim and action_dim, got {data!r}")
        return cls(data["cameras"], data["state_dim"], data["action_dim"])

    def arrays(self) -> dict[str, tuple[str, tuple[int, ...], type]]:
        """Every array of the layout: path -> (what its length counts, row shape, dtype)."""
        specs: dict[str, tuple[str, tuple[int, ...], type]] = {
            f"obs/{name}": ("observations", shape, np.uint8) for name, shape in self.cameras.items()}
        specs["obs/state"] = ("observations", (self.state_dim,), np.float32)
        for name, dtype in STEP_DTYPES.items():
            specs[f"step/{name}"] = ("steps", (self.action_dim,) if name == "action" else (), dtype)
        specs["episode_ends"] = ("episodes", (), np.int64)
        return specs


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _json_config(task_config: Mapping[str, Any]) -> dict[str, Any]:
    """The task config as stored in the attributes (JSON: tuples read back as lists)."""
    if not isinstance(task_config, Mapping):
        raise ValueError(f"task_config must be a dict, got {type(task_config).__name__}")
    try:
        return json.loads(json.dumps(dict(task_config), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"task_config must be JSON data (dicts, lists, strings, finite numbers): {exc}") from None


def _success_checks(attrs: Mapping[str, Any], episodes: int, path: Path) -> list[int]:
    """The `success_checks` attribute of a dataset with `episodes` committed: -1 for each episode when it is
    absent (written before it existed); ValueError when it is malformed."""
    checks = attrs.get("success_checks", [UNLABELLED] * episodes)
    if (not isinstance(checks, list) or len(checks) < episodes
            or any(c not in (1, 0, UNLABELLED) or isinstance(c, bool) for c in checks)):
        raise ValueError(f"{path}: success_checks attribute must list 1, 0 or -1 for each of the {episodes} "
                         f"episodes, got {checks!r}")
    return checks[:episodes]  # longer: an uncommitted tail


def _lengths(episodes: int, steps: int) -> dict[str, int]:
    """Rows of each kind of array with `episodes` episodes of `steps` steps in all (T + 1 observations each)."""
    return {"observations": steps + episodes, "steps": steps, "episodes": episodes}


def _write_rows(array: zarr.Array, start: int, rows: np.ndarray) -> None:
    """Writes `rows` from row `start` on, dropping whatever lay beyond (an uncommitted tail)."""
    array = writable(array)
    array.resize((start + len(rows), *array.shape[1:]))
    array[start:] = rows


class EpisodeDataset:
    """Read access to the episodes committed when it was opened."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._group, self.attrs = read_header(path, FORMAT, SCHEMA_VERSION)
        try:
            self.schema = EpisodeSchema.from_json(self.attrs.get("schema"))
        except ValueError as exc:
            raise ValueError(f"{path}: bad schema attribute: {exc}") from None
        self.task_config: dict[str, Any] = self.attrs.get("task_config")
        episodes, steps = self.attrs.get("num_episodes"), self.attrs.get("num_steps")
        if (not isinstance(self.task_config, dict) or not is_count(episodes) or not is_count(steps)
                or min(episodes, steps) < 0):
            raise ValueError(f"{path}: task_config, num_episodes or num_steps attribute missing or malformed")
        lengths = _lengths(episodes, steps)
        for key, (counts, row_shape, dtype) in self.schema.arrays().items():
            if key not in self._group:
                raise ValueError(f"{path}: array {key!r} is missing")
            array = self._group[key]
            if array.shape[1:] != row_shape or array.dtype != np.dtype(dtype):
                raise ValueError(f"{path}: array {key!r} is {array.dtype} rows of {array.shape[1:]}, "
                                 f"expected {np.dtype(dtype)} rows of {row_shape}")
        self.guard = ChunkGuard(self.path, self._group,
                                {key: lengths[counts] for key, (counts, _, _) in self.schema.arrays().items()},
                                {key: counts for key, (counts, _, _) in self.schema.arrays().items()},
                                self.attrs.get(MANIFEST_ATTR))
        self.guard.require_present(["episode_ends"])
        self.guard.set_episode_ends(self.guard.read("episode_ends", slice(0, episodes)), "array 'episode_ends'")
        self.episode_ends = self.guard.episode_ends
        self.guard.require_present()
        self.success_checks = np.array(_success_checks(self.attrs, episodes, self.path), np.int8)
        """Per episode: the task's own success check where it ended (1, 0; -1 unchecked)."""

    def __len__(self) -> int:
        return len(self.episode_ends)

    @property
    def num_steps(self) -> int:
        return int(self.episode_ends[-1]) if len(self) else 0

    def step_observations(self) -> np.ndarray:
        """Index of every step's observation: step k of episode e has observation k + e."""
        lengths = np.diff(self.episode_ends, prepend=0)
        return np.arange(self.num_steps) + np.repeat(np.arange(len(self)), lengths)

    def observations(self, stream: str) -> np.ndarray:
        """Every committed observation of a camera or of "state", all episodes in order (T + 1
        rows per episode; `step_observations` maps steps to rows)."""
        if stream not in (*self.schema.cameras, "state"):
            raise ValueError(f"{self.path} has no observation stream {stream!r}")
        return self.guard.read(f"obs/{stream}", slice(0, self.num_steps + len(self)))

    def episode(self, index: int) -> dict[str, np.ndarray]:
        """Episode `index` (negative counts from the end): each camera and `state` with T + 1 rows,
        every step field with T."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"episode {index} out of range: {self.path} has {len(self)}")
        index %= len(self)
        start = int(self.episode_ends[index - 1]) if index else 0
        stop = int(self.episode_ends[index])
        episode = {name: self.guard.read(f"obs/{name}", slice(start + index, stop + index + 1))
                   for name in (*self.schema.cameras, "state")}
        episode.update({name: self.guard.read(f"step/{name}", slice(start, stop)) for name in STEP_DTYPES})
        return episode

    def transitions(self, cameras: Sequence[str] = ()) -> dict[str, np.ndarray]:
        """All steps as flat transitions on the state vector (obs, action, reward, next_obs, terminated,
        truncated, intervention): the layout of `transport.layout.transition_layout` for `ReplayBuffer.add_batch`.
        With `cameras`, also each camera's `obs_<camera>` / `next_obs_<camera>` frames (the layout
        pixel tasks send to the learner)."""
        unknown = sorted(set(cameras) - set(self.schema.cameras))
        if unknown:
            raise ValueError(f"{self.path} has no camera(s) {unknown}; it has {sorted(self.schema.cameras)}")
        steps = self.num_steps
        index = self.step_observations()
        transitions = {name: self.guard.read(f"step/{name}", slice(0, steps))
                       for name in ("action", "reward", "terminated", "truncated", "intervention")}
        for stream, key in (("state", ""), *((camera, f"_{camera}") for camera in cameras)):
            observations = self.guard.read(f"obs/{stream}", slice(0, steps + len(self)))
            transitions[f"obs{key}"], transitions[f"next_obs{key}"] = observations[index], observations[index + 1]
        return transitions

    def labelled_frames(self, camera: str) -> tuple[np.ndarray, np.ndarray]:
        """(frames, success) of every labelled step: the camera's frame of the observation the step
        reached, and whether it shows success. Training data for a success classifier."""
        if camera not in self.schema.cameras:
            raise ValueError(f"{self.path} has no camera {camera!r}; it has {sorted(self.schema.cameras)}")
        labels = self.guard.read("step/success_label", slice(0, self.num_steps))
        labelled = np.flatnonzero(labels != UNLABELLED)
        if labelled.size == 0:
            return np.zeros((0, *self.schema.cameras[camera]), np.uint8), np.zeros(0, bool)
        frames = self.guard.read(f"obs/{camera}", self.step_observations()[labelled] + 1)
        return frames, labels[labelled] == 1

    def load_into(self, buffer: FrameReplayBuffer | ReplayBuffer,
                  encode: Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]] | None = None) -> int:
        """Adds every episode to `buffer` and returns the number of transitions added. A FrameReplayBuffer
        gets each observation once (the dataset's cameras it stores, `state`, and the features
        `encode(episode)` computes from an episode's T + 1 observations); a ReplayBuffer gets
        `transitions()`."""
        if isinstance(buffer, ReplayBuffer):
            if encode is not None:
                raise ValueError("encode applies to a FrameReplayBuffer only")
            return buffer.add_batch(self.transitions())
        if not isinstance(buffer, FrameReplayBuffer):
            raise TypeError(f"cannot load episodes into a {type(buffer).__name__}")
        missing = set(buffer.frame_shapes) - set(self.schema.cameras)
        if missing:
            raise ValueError(f"buffer stores cameras {sorted(missing)} that {self.path} does not have")
        if (buffer.state_dim, buffer.action_dim) != (self.schema.state_dim, self.schema.action_dim):
            raise ValueError(f"buffer has state_dim={buffer.state_dim}, action_dim={buffer.action_dim}; "
                             f"{self.path} has {self.schema.state_dim} and {self.schema.action_dim}")
        if bool(buffer.feature_dims) != (encode is not None):
            raise ValueError("pass encode exactly when the buffer stores features "
                             f"(it stores {sorted(buffer.feature_dims) or 'none'})")
        for index in range(len(self)):
            episode = self.episode(index)
            observations = {name: episode[name] for name in (*self.schema.cameras, "state")}
            if encode is not None:
                observations.update(encode(observations))
            buffer.add_episode(observations, episode["action"], episode["reward"], episode["terminated"],
                               episode["truncated"], episode["intervention"])
        return self.num_steps


def _holds_data(path: Path) -> bool:
    return path.exists() and not (path.is_dir() and not any(path.iterdir()))


class EpisodeWriter:
    """Appends episodes to the dataset at `path`, creating it if it does not exist (whether that may
    be done is the caller's call: `robot_rl.outputs.check_output`)."""

    def __init__(self, path: str | os.PathLike, schema: EpisodeSchema, task_config: Mapping[str, Any]):
        self.path = Path(path)
        self.schema = schema
        self.task_config = _json_config(task_config)
        if _holds_data(self.path):
            existing = EpisodeDataset(self.path)
            existing.guard.require_appendable()
            if existing.schema != schema:
                raise ValueError(f"{self.path} has schema {existing.schema.to_json()}, not {schema.to_json()}")
            if existing.task_config != self.task_config:
                raise ValueError(f"{self.path} was recorded with task_config {existing.task_config}, "
                                 f"not {self.task_config}")
            self.num_episodes, self.num_steps = len(existing), existing.num_steps
            self._success_checks = existing.success_checks.tolist()
            # Data written before checksums stay without a manifest: their chunks were not all written.
            self._keeps_manifest = existing.guard.checksummed
            self._group = zarr.open_group(str(self.path), mode="r+")
            self._truncate_uncommitted()
        else:
            self.num_episodes = self.num_steps = 0
            self._success_checks = []
            self._keeps_manifest = True
            self._group = self._create()
        self._pending: dict[str, list[np.ndarray]] = {key: [] for key in schema.arrays() if key != "episode_ends"}

    def _create(self) -> zarr.Group:
        # Built next to its final place and renamed into it, so no half-made dataset is ever at `path`.
        tmp = self.path.with_name(f".{self.path.name}.creating")
        shutil.rmtree(tmp, ignore_errors=True)
        group = zarr.open_group(str(tmp), mode="w-")
        for key, (_, row_shape, dtype) in self.schema.arrays().items():
            group.create_array(key, shape=(0, *row_shape), chunks=(chunk_rows(row_shape, dtype), *row_shape),
                               dtype=dtype, **array_options())
        now = _now()
        group.attrs.update({"format": FORMAT, "schema_version": SCHEMA_VERSION, "schema": self.schema.to_json(),
                            "task_config": self.task_config, "created": now, "updated": now,
                            "num_episodes": 0, "num_steps": 0, MANIFEST_ATTR: manifest(self._rows(0, 0))})
        os.rename(tmp, self.path)
        return zarr.open_group(str(self.path), mode="r+")

    def _lengths(self) -> dict[str, int]:
        return _lengths(self.num_episodes, self.num_steps)

    def _rows(self, episodes: int, steps: int) -> dict[str, int]:
        """Rows of every array with `episodes` and `steps` committed (the chunk manifest)."""
        lengths = _lengths(episodes, steps)
        return {key: lengths[counts] for key, (counts, _, _) in self.schema.arrays().items()}

    def _truncate_uncommitted(self) -> None:
        lengths = self._lengths()
        for key, (counts, _, _) in self.schema.arrays().items():
            array = self._group[key]
            if array.shape[0] > lengths[counts]:
                array.resize((lengths[counts], *array.shape[1:]))

    @property
    def steps_in_episode(self) -> int:
        """Steps of the episode in progress (not yet committed)."""
        return len(self._pending["step/action"])

    def _checked_observation(self, obs: Mapping[str, Any], what: str) -> dict[str, np.ndarray]:
        if not isinstance(obs, Mapping):
            raise ValueError(f"{what} must be a dict of camera frames and 'state', got {type(obs).__name__}")
        unknown = set(obs) - {*self.schema.cameras, "state"}
        if unknown:  # refused rather than silently dropped
            raise ValueError(f"{what} has entries {sorted(unknown)} that the schema does not declare")
        checked = {f"obs/{name}": checked_frames(obs.get(name), shape, f"{what}[{name!r}]")
                   for name, shape in self.schema.cameras.items()}
        checked["obs/state"] = checked_real(obs.get("state"), (self.schema.state_dim,), np.float32, f"{what}['state']")
        return checked

    def add_step(self, obs: Mapping[str, np.ndarray], action: Any, reward: float, terminated: bool, truncated: bool,
                 intervention: bool, success_label: bool | None, stamp: float) -> None:
        """Stages one step of the episode in progress: the action taken from `obs`, then the reward, flags
        and success label of where it led; `stamp` is the time of `obs`. Raises ValueError, staging nothing."""
        if self.steps_in_episode and (self._pending["step/terminated"][-1] or self._pending["step/truncated"][-1]):
            raise ValueError(f"the episode ended at step {self.steps_in_episode - 1}; call end_episode(final_obs) "
                             "or discard_episode() before adding steps")
        if success_label is not None and not isinstance(success_label, (bool, np.bool_)):
            raise ValueError(f"success_label must be True, False or None, got {success_label!r}")
        staged = self._checked_observation(obs, "obs")
        staged.update({
            "step/action": checked_real(action, (self.schema.action_dim,), np.float32, "action"),
            "step/reward": checked_real(reward, (), np.float32, "reward"),
            "step/terminated": checked_flags(terminated, (), "terminated"),
            "step/truncated": checked_flags(truncated, (), "truncated"),
            "step/intervention": checked_flags(intervention, (), "intervention"),
            "step/success_label": np.int8(UNLABELLED if success_label is None else success_label),
            "step/stamp": checked_real(stamp, (), np.float64, "stamp"),
        })
        for key, value in staged.items():
            self._pending[key].append(value)

    def end_episode(self, final_obs: Mapping[str, np.ndarray], success_check: bool | None = None) -> int:
        """Writes and commits the episode in progress, `final_obs` being the observation its last step
        reached, `success_check` the task's own success check there (None: not checked); returns the
        episode's index. A last step neither terminated nor truncated was cut off by the recorder and is
        stored as truncated."""
        if success_check is not None and not isinstance(success_check, (bool, np.bool_)):
            raise ValueError(f"success_check must be True, False or None, got {success_check!r}")
        steps = self.steps_in_episode
        if steps == 0:
            raise ValueError("end_episode: the episode in progress has no steps")
        final = self._checked_observation(final_obs, "final_obs")
        rows = {key: np.stack([*values, final[key]] if key in final else values)  # T + 1 observations, T steps
                for key, values in self._pending.items()}
        if not (rows["step/terminated"][-1] or rows["step/truncated"][-1]):
            rows["step/truncated"][-1] = True
        lengths = self._lengths()
        for key, (counts, _, _) in self.schema.arrays().items():
            if key != "episode_ends":
                _write_rows(self._group[key], lengths[counts], rows[key])
        _write_rows(self._group["episode_ends"], self.num_episodes, np.array([self.num_steps + steps], np.int64))
        # The commit: one atomic replace of the root attributes. Before it, readers see none of this episode.
        checks = [*self._success_checks, UNLABELLED if success_check is None else int(success_check)]
        commit = {"num_episodes": self.num_episodes + 1, "num_steps": self.num_steps + steps, "updated": _now(),
                  "success_checks": checks}
        if self._keeps_manifest:
            commit[MANIFEST_ATTR] = manifest(self._rows(self.num_episodes + 1, self.num_steps + steps))
        self._group.attrs.update(commit)
        self._success_checks = checks
        self.num_episodes += 1
        self.num_steps += steps
        self.discard_episode()
        return self.num_episodes - 1

    def discard_episode(self) -> None:
        """Drops the episode in progress; nothing of it was written."""
        for values in self._pending.values():
            values.clear()
