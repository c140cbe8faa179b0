"""Replay memory: a ring buffer of transitions and the RLPD half-demo/half-online sampler."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from robot_rl.transport.layout import validate_transitions


class ReplayBuffer:
    """Fixed-capacity ring buffer; the oldest transitions are overwritten first."""

    def __init__(self, capacity: int, layout: Mapping[str, tuple[tuple[int, ...], np.dtype]]):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.layout = dict(layout)
        self.storage = {name: np.zeros((capacity, *shape), dtype=dtype) for name, (shape, dtype) in layout.items()}
        self.size = 0
        self.cursor = 0
        self.total_added = 0

    def __len__(self) -> int:
        return self.size

    def validate(self, batch: Mapping[str, np.ndarray]) -> int:
        """Checks field names, shapes and finiteness; returns the batch length. Raises ValueError."""
        return validate_transitions(self.layout, batch)

    def add_batch(self, batch: Mapping[str, np.ndarray]) -> int:
        """Appends N transitions (validated first, so a bad batch changes nothing)."""
        n = self.validate(batch)
        if n == 0:
            return 0
        if n > self.capacity:  # only the newest `capacity` rows can survive anyway
            batch = {k: np.asarray(v)[-self.capacity:] for k, v in batch.items()}
            self.total_added += n - self.capacity
            n = self.capacity
        idx = (self.cursor + np.arange(n)) % self.capacity
        for name in self.layout:
            self.storage[name][idx] = batch[name]
        self.cursor = int((self.cursor + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        self.total_added += n
        return n

    def sample_indices(self, count: int, rng: np.random.Generator) -> np.ndarray:
        if self.size == 0:
            raise ValueError("cannot sample from an empty buffer")
        return rng.integers(0, self.size, size=count)

    def gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        return {name: arr[indices] for name, arr in self.storage.items()}

    def sample(self, count: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return self.gather(self.sample_indices(count, rng))

    def ordered(self) -> dict[str, np.ndarray]:
        """All stored transitions, oldest first (for persistence and inspection)."""
        order = (self.cursor - self.size + np.arange(self.size)) % self.capacity
        return self.gather(order)


class MixedSampler:
    """RLPD sampling: a fixed fraction of every batch from the demonstration buffer.

    Falls back to the online buffer alone while there are no demonstrations, and to the
    demonstrations alone before the first online transition arrives.
    """

    def __init__(self, online: ReplayBuffer, demos: ReplayBuffer, demo_fraction: float = 0.5):
        if not 0.0 <= demo_fraction <= 1.0:
            raise ValueError("demo_fraction must be in [0, 1]")
        self.online, self.demos, self.demo_fraction = online, demos, demo_fraction

    def sample(self, count: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        n_demo = int(round(count * self.demo_fraction)) if len(self.demos) else 0
        if len(self.online) == 0:
            n_demo = count
        parts = []
        if n_demo:
            parts.append(self.demos.sample(n_demo, rng))
        if count - n_demo:
            parts.append(self.online.sample(count - n_demo, rng))
        if len(parts) == 1:  # uniform draws from one memory: already in random order
            return parts[0]
        batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        # Shuffle so the utd minibatch split sees the same mix in every minibatch.
        perm = rng.permutation(count)
        return {k: v[perm] for k, v in batch.items()}
