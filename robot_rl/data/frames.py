"""Replay memory for pixel observations: every uint8 frame is stored once.

A transition's next observation is the following observation of the same stream, so storing
(obs, next_obs) for every transition would keep each camera frame twice. Here observations
live in slots of one ring; a transition is kept in the slot of its observation together with
the slot index of its next observation. Consecutive transitions of a stream share the slot in
between; an episode's final observation gets a slot that carries no transition. Several actors
may interleave their streams (each has a stream id). When the ring wraps, a transition whose
next observation was overwritten stops being sampled (generation counters tell).
Per transition that costs (T + 1) / T frames for episodes of T steps, plus a few bytes.

An observation is a dict: one uint8 frame per camera, the float32 `state` vector and, optionally,
pre-computed feature vectors (float16 or float32), e.g. a frozen encoder's output cached once per
stored frame. A buffer built with no cameras and some features keeps only the features.
`sample` returns every stored entry `name` with its `next_name`.

`save` / `load` persist the whole buffer (contents, cursor, generations, stream tails) so a restarted
learner samples exactly what the old one would have. On disk:

    <path>/snapshot-<n>.zarr    the newest complete save; zarr group, attrs = header (format
                                "robot_rl.frame_replay", schema_version, layout, cursor, stream tails)
        frames/<camera>  features/<name>  state  action  reward  terminated  truncated
        intervention  next_slot  next_generation  generation        one row per slot

A save is written to a hidden temporary directory and renamed into place, and only then are older
snapshots deleted, so a crash at any point leaves the previous save intact.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import zarr

from robot_rl.data.dataset import (check_names, checked_flags, checked_frames, checked_real, chunk_rows, is_count,
                                   read_header)

FORMAT = "robot_rl.frame_replay"
SCHEMA_VERSION = 1
FEATURE_DTYPES = ("float16", "float32")
# Keys of a sampled batch besides the observation entries; observation names may not take them.
STEP_FIELDS = ("action", "reward", "terminated", "truncated", "intervention")
_SNAPSHOT = re.compile(r"snapshot-(\d+)\.zarr")
_TMP_PREFIX = ".tmp-snapshot-"


class FrameReplayBuffer:
    def __init__(self, capacity: int, frame_shapes: Mapping[str, tuple[int, ...]], state_dim: int, action_dim: int,
                 features: Mapping[str, int] | None = None, feature_dtype: str = "float16"):
        """`frame_shapes`: camera -> uint8 frame shape; `features`: name -> length of a cached feature
        vector stored per slot as `feature_dtype` (float16 halves the memory of float32)."""
        if not is_count(capacity) or capacity < 2:
            raise ValueError(f"capacity must be an integer >= 2, got {capacity!r}")
        features = dict(features or {})
        check_names([*frame_shapes, *features], {"state", *STEP_FIELDS}, "observation entry")
        if not (is_count(state_dim) and is_count(action_dim) and state_dim >= 0 and action_dim >= 1):
            raise ValueError(f"need integers state_dim >= 0 and action_dim >= 1, got {state_dim!r} and {action_dim!r}")
        if not all(is_count(dim) and dim >= 1 for dim in features.values()):
            raise ValueError(f"feature lengths must be positive integers, got {features}")
        if feature_dtype not in FEATURE_DTYPES:
            raise ValueError(f"feature_dtype must be one of {FEATURE_DTYPES}, got {feature_dtype!r}")
        # Plain ints: they go into the JSON header of a save.
        self.capacity = int(capacity)
        self.frame_shapes = {k: tuple(int(n) for n in v) for k, v in frame_shapes.items()}
        self.state_dim, self.action_dim = int(state_dim), int(action_dim)
        self.feature_dims = {k: int(dim) for k, dim in features.items()}
        self.feature_dtype = feature_dtype
        # np.zeros maps pages lazily: memory is committed as the ring fills.
        self.frames = {k: np.zeros((capacity, *shape), np.uint8) for k, shape in self.frame_shapes.items()}
        self.features = {k: np.zeros((capacity, dim), feature_dtype) for k, dim in self.feature_dims.items()}
        self.state = np.zeros((capacity, state_dim), np.float32)
        self.action = np.zeros((capacity, action_dim), np.float32)
        self.reward = np.zeros(capacity, np.float32)
        self.terminated = np.zeros(capacity, bool)
        self.truncated = np.zeros(capacity, bool)
        self.intervention = np.zeros(capacity, bool)
        self.next_slot = np.full(capacity, -1, np.int64)  # -1: this slot holds no transition
        self.next_generation = np.zeros(capacity, np.int64)
        self.generation = np.zeros(capacity, np.int64)  # bumped whenever a slot is rewritten
        self.cursor = 0
        self.slots_written = 0
        self._stream_tail: dict[str, tuple[int, int]] = {}  # stream -> (slot, generation) of its last obs

    def _observation_arrays(self) -> dict[str, np.ndarray]:
        return {**self.frames, "state": self.state, **self.features}

    def _arrays(self) -> dict[str, np.ndarray]:
        """Every per-slot array by its name on disk."""
        return {**{f"frames/{k}": v for k, v in self.frames.items()},
                **{f"features/{k}": v for k, v in self.features.items()},
                "state": self.state, "action": self.action, "reward": self.reward, "terminated": self.terminated,
                "truncated": self.truncated, "intervention": self.intervention, "next_slot": self.next_slot,
                "next_generation": self.next_generation, "generation": self.generation}

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._arrays().values())

    def __len__(self) -> int:
        return int(self._valid_mask().sum())

    # ---- validation: everything is checked before any array is touched --------------------------

    def _checked_observations(self, obs: Mapping[str, Any], lead: tuple[int, ...], what: str) -> dict[str, np.ndarray]:
        """The stored entries of `obs` (leading shape `lead`), converted; entries the buffer does not store
        are ignored."""
        checked = {name: checked_frames(obs.get(name), (*lead, *shape), f"{what}[{name!r}]")
                   for name, shape in self.frame_shapes.items()}
        checked["state"] = checked_real(obs.get("state"), (*lead, self.state_dim), np.float32, f"{what}['state']")
        for name, dim in self.feature_dims.items():
            checked[name] = checked_real(obs.get(name), (*lead, dim), self.feature_dtype, f"{what}[{name!r}]")
        return checked

    def _checked_steps(self, lead: tuple[int, ...], action: Any, reward: Any, terminated: Any, truncated: Any,
                       intervention: Any) -> dict[str, np.ndarray]:
        return {"action": checked_real(action, (*lead, self.action_dim), np.float32, "action"),
                "reward": checked_real(reward, lead, np.float32, "reward"),
                "terminated": checked_flags(terminated, lead, "terminated"),
                "truncated": checked_flags(truncated, lead, "truncated"),
                "intervention": checked_flags(intervention, lead, "intervention")}

    # ---- writing --------------------------------------------------------------------------------

    def _write_observations(self, observations: Mapping[str, np.ndarray], count: int) -> np.ndarray:
        """Writes `count` checked observations at the cursor and returns their slots. Beyond the ring's
        capacity the earlier ones are overwritten within this call, as if written one by one."""
        slots = (self.cursor + np.arange(count)) % self.capacity
        np.add.at(self.generation, slots, 1)
        self.next_slot[slots] = -1
        kept = slice(max(0, count - self.capacity), count)
        for name, array in self._observation_arrays().items():
            array[slots[kept]] = observations[name][kept]
        self.cursor = int((self.cursor + count) % self.capacity)
        self.slots_written += count
        return slots

    def _record_transitions(self, slots: np.ndarray, next_slots: np.ndarray, steps: Mapping[str, np.ndarray]) -> None:
        for name, values in steps.items():
            getattr(self, name)[slots] = values
        self.next_slot[slots] = next_slots
        self.next_generation[slots] = self.generation[next_slots]

    def add(self, obs: Mapping[str, np.ndarray], action: np.ndarray, reward: float,
            next_obs: Mapping[str, np.ndarray], terminated: bool, truncated: bool, intervention: bool = False,
            stream: str = "default") -> None:
        """Adds one transition. Within a stream, `obs` is recognised as the previous `next_obs`
        (same slot, not stored again) unless the previous transition ended its episode."""
        obs = self._checked_observations(obs, (), "obs")
        next_obs = self._checked_observations(next_obs, (), "next_obs")
        steps = self._checked_steps((), action, reward, terminated, truncated, intervention)
        tail = self._stream_tail.get(stream)
        # The tail is reused only if it still holds obs and the next write (at the cursor) will not replace it.
        if (tail is not None and self.generation[tail[0]] == tail[1] and tail[0] != self.cursor
                and self._holds(tail[0], obs)):
            slot = np.array([tail[0]])
        else:
            slot = self._write_observations({k: v[None] for k, v in obs.items()}, 1)
        nxt = self._write_observations({k: v[None] for k, v in next_obs.items()}, 1)
        self._record_transitions(slot, nxt, {k: v[None] for k, v in steps.items()})
        if terminated or truncated:
            self._stream_tail.pop(stream, None)
        else:
            self._stream_tail[stream] = (int(nxt[0]), int(self.generation[nxt[0]]))

    def add_episode(self, observations: Mapping[str, np.ndarray], action: np.ndarray, reward: np.ndarray,
                    terminated: np.ndarray, truncated: np.ndarray, intervention: np.ndarray) -> None:
        """Adds a whole episode of T steps: T + 1 observations per entry (the last one is the final next
        observation) and T of each step field. Each observation is written once, nothing is compared."""
        action = np.asarray(action)
        if action.ndim != 2 or len(action) < 1:
            raise ValueError(f"action must be (T, {self.action_dim}) with T >= 1, got shape {action.shape}")
        steps_count = len(action)
        observations = self._checked_observations(observations, (steps_count + 1,), "observations")
        steps = self._checked_steps((steps_count,), action, reward, terminated, truncated, intervention)
        slots = self._write_observations(observations, steps_count + 1)
        first = max(0, steps_count + 1 - self.capacity)  # transitions whose observation is still in the ring
        self._record_transitions(slots[first:-1], slots[first + 1:], {k: v[first:] for k, v in steps.items()})

    def _holds(self, slot: int, obs: Mapping[str, np.ndarray]) -> bool:
        return all(np.array_equal(array[slot], obs[name]) for name, array in self._observation_arrays().items())

    # ---- sampling -------------------------------------------------------------------------------

    def _valid_mask(self) -> np.ndarray:
        has = self.next_slot >= 0
        nxt = np.where(has, self.next_slot, 0)
        return has & (self.generation[nxt] == self.next_generation)

    def sample(self, count: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        valid = np.flatnonzero(self._valid_mask())
        if valid.size == 0:
            raise ValueError("cannot sample from an empty buffer")
        idx = rng.choice(valid, size=count)
        nxt = self.next_slot[idx]
        batch = {name: getattr(self, name)[idx] for name in STEP_FIELDS}
        for name, array in self._observation_arrays().items():
            batch[name] = array[idx]
            batch[f"next_{name}"] = array[nxt]
        return batch

    # ---- persistence ----------------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> Path:
        """Saves the whole buffer as a new snapshot under the directory `path`; returns the snapshot's path."""
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(f"{_TMP_PREFIX}*"):  # left by a crash during an earlier save
            shutil.rmtree(stale)
        previous = _snapshots(root)
        number = previous[-1][0] + 1 if previous else 1
        tmp = root / f"{_TMP_PREFIX}{number:08d}"
        group = zarr.open_group(str(tmp), mode="w-")
        for key, array in self._arrays().items():
            group.create_array(key, data=array, chunks=(chunk_rows(array.shape[1:], array.dtype), *array.shape[1:]))
        group.attrs.update({
            "format": FORMAT, "schema_version": SCHEMA_VERSION, "capacity": self.capacity,
            "frame_shapes": {k: list(v) for k, v in self.frame_shapes.items()}, "state_dim": self.state_dim,
            "action_dim": self.action_dim, "features": self.feature_dims, "feature_dtype": self.feature_dtype,
            "cursor": self.cursor, "slots_written": self.slots_written,
            "stream_tails": {stream: list(tail) for stream, tail in self._stream_tail.items()},
        })
        # Flushed before the rename, so the new snapshot is complete on disk before the old ones go.
        _fsync_tree(tmp)
        final = root / f"snapshot-{number:08d}.zarr"
        os.rename(tmp, final)
        _fsync(root)
        for _, old in previous:
            shutil.rmtree(old)
        return final

    @classmethod
    def load(cls, path: str | os.PathLike) -> FrameReplayBuffer:
        """The buffer of the newest snapshot saved under `path`. Raises FileNotFoundError or ValueError."""
        snapshots = _snapshots(Path(path))
        if not snapshots:
            raise FileNotFoundError(f"no saved frame buffer (snapshot-<n>.zarr) in {path}")
        location = snapshots[-1][1]
        group, attrs = read_header(location, FORMAT, SCHEMA_VERSION)
        try:
            buffer = cls(attrs["capacity"], attrs["frame_shapes"], attrs["state_dim"], attrs["action_dim"],
                         attrs["features"], attrs["feature_dtype"])
            cursor, slots_written = attrs["cursor"], attrs["slots_written"]
            tails = {stream: (int(slot), int(generation))
                     for stream, (slot, generation) in attrs["stream_tails"].items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{location}: bad or missing header attribute: {exc}") from None
        if not (isinstance(cursor, int) and isinstance(slots_written, int) and slots_written >= 0
                and cursor == slots_written % buffer.capacity):
            raise ValueError(f"{location}: cursor {cursor!r} does not follow from slots_written {slots_written!r}")
        for key, target in buffer._arrays().items():
            if key not in group:
                raise ValueError(f"{location}: array {key!r} is missing")
            source = group[key]
            if source.shape != target.shape or source.dtype != target.dtype:
                raise ValueError(f"{location}: array {key!r} is {source.dtype} {source.shape}, "
                                 f"expected {target.dtype} {target.shape}")
            rows = source.chunks[0]
            for start in range(0, buffer.capacity, rows):  # chunk by chunk: no second full-size copy in memory
                target[start:start + rows] = source[start:start + rows]
        if not ((buffer.next_slot >= -1) & (buffer.next_slot < buffer.capacity)).all():
            raise ValueError(f"{location}: next_slot holds slots outside [-1, {buffer.capacity})")
        if any(not 0 <= slot < buffer.capacity for slot, _ in tails.values()):
            raise ValueError(f"{location}: a stream tail points outside the ring: {tails}")
        buffer.cursor, buffer.slots_written, buffer._stream_tail = cursor, slots_written, tails
        return buffer


def _snapshots(root: Path) -> list[tuple[int, Path]]:
    """Complete snapshots under `root`, oldest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), entry) for entry in root.iterdir()
             if entry.is_dir() and (m := _SNAPSHOT.fullmatch(entry.name))]
    return sorted(found)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            _fsync(Path(directory) / name)
        _fsync(Path(directory))
