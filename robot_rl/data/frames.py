"""Replay memory for pixel observations: every uint8 frame is stored once.

A transition's next observation is the following observation of the same stream, so storing
(obs, next_obs) for every transition would keep each camera frame twice. Here observations
live in slots of one ring; a transition is kept in the slot of its observation together with
the slot index of its next observation. Consecutive transitions of a stream share the slot in
between; an episode's final observation gets a slot that carries no transition. Several actors
may interleave their streams (each has a stream id). When the ring wraps, a transition whose
next observation was overwritten stops being sampled (generation counters tell).
Per transition that costs (T + 1) / T frames for episodes of T steps, plus a few bytes.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np


class FrameReplayBuffer:
    def __init__(self, capacity: int, frame_shapes: Mapping[str, tuple[int, ...]], state_dim: int, action_dim: int):
        if capacity < 2:
            raise ValueError("capacity must be >= 2")
        self.capacity = capacity
        self.frame_shapes = {k: tuple(v) for k, v in frame_shapes.items()}
        self.state_dim, self.action_dim = state_dim, action_dim
        # np.zeros maps pages lazily: memory is committed as the ring fills.
        self.frames = {k: np.zeros((capacity, *shape), np.uint8) for k, shape in self.frame_shapes.items()}
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

    def nbytes(self) -> int:
        arrays = [*self.frames.values(), self.state, self.action, self.reward, self.terminated, self.truncated,
                  self.intervention, self.next_slot, self.next_generation, self.generation]
        return sum(a.nbytes for a in arrays)

    def __len__(self) -> int:
        return int(self._valid_mask().sum())

    def _write_observation(self, obs: Mapping[str, np.ndarray]) -> int:
        slot = self.cursor
        for name, shape in self.frame_shapes.items():
            self.frames[name][slot] = obs[name]
        self.state[slot] = obs["state"]
        self.next_slot[slot] = -1
        self.generation[slot] += 1
        self.cursor = (self.cursor + 1) % self.capacity
        self.slots_written += 1
        return slot

    def validate_observation(self, obs: Mapping[str, np.ndarray], what: str) -> None:
        for name, shape in self.frame_shapes.items():
            frame = obs.get(name)
            if frame is None or frame.shape != shape or frame.dtype != np.uint8:
                got = None if frame is None else (frame.shape, frame.dtype)
                raise ValueError(f"{what}[{name!r}] must be uint8 {shape}, got {got}")
        state = np.asarray(obs.get("state"))
        if state.shape != (self.state_dim,) or not np.isfinite(state).all():
            raise ValueError(f"{what}['state'] must be {self.state_dim} finite values")

    def add(self, obs: Mapping[str, np.ndarray], action: np.ndarray, reward: float,
            next_obs: Mapping[str, np.ndarray], terminated: bool, truncated: bool, intervention: bool = False,
            stream: str = "default") -> None:
        """Adds one transition. Within a stream, `obs` is recognised as the previous `next_obs`
        (same slot, not stored again) unless the previous transition ended its episode."""
        self.validate_observation(obs, "obs")
        self.validate_observation(next_obs, "next_obs")
        action = np.asarray(action, np.float32)
        if action.shape != (self.action_dim,) or not np.isfinite(action).all() or not np.isfinite(reward):
            raise ValueError(f"action must be {self.action_dim} finite values and reward finite")
        tail = self._stream_tail.get(stream)
        if tail is not None and self.generation[tail[0]] == tail[1] and self._same(tail[0], obs):
            slot = tail[0]
        else:
            slot = self._write_observation(obs)
        generation = self.generation[slot]
        nxt = self._write_observation(next_obs)
        if self.generation[slot] != generation:  # capacity 2 edge: the next obs overwrote this one
            raise ValueError("capacity too small for one transition")
        self.action[slot], self.reward[slot] = action, reward
        self.terminated[slot], self.truncated[slot], self.intervention[slot] = terminated, truncated, intervention
        self.next_slot[slot], self.next_generation[slot] = nxt, self.generation[nxt]
        if terminated or truncated:
            self._stream_tail.pop(stream, None)
        else:
            self._stream_tail[stream] = (nxt, int(self.generation[nxt]))

    def _same(self, slot: int, obs: Mapping[str, np.ndarray]) -> bool:
        if not np.array_equal(self.state[slot], np.asarray(obs["state"], np.float32)):
            return False
        return all(np.array_equal(self.frames[name][slot], obs[name]) for name in self.frame_shapes)

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
        batch = {"state": self.state[idx], "next_state": self.state[nxt], "action": self.action[idx],
                 "reward": self.reward[idx], "terminated": self.terminated[idx], "truncated": self.truncated[idx],
                 "intervention": self.intervention[idx]}
        for name in self.frame_shapes:
            batch[name] = self.frames[name][idx]
            batch[f"next_{name}"] = self.frames[name][nxt]
        return batch
