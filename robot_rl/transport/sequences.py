"""The learner's side of exactly-once storage: `SequenceTracker` recognises duplicates (resends,
and replays of captured payloads) per actor and reports gaps; its state is saved so that a
restarted learner still knows the sequence numbers whose journal segments were pruned.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from robot_rl.outputs import atomic_write_text


class SequenceTracker:
    """Per-actor set of received sequence numbers, stored as a watermark plus stragglers."""

    def __init__(self):
        self._watermark: dict[str, int] = {}  # every seq < watermark has been received
        self._ahead: dict[str, set[int]] = {}

    def add(self, actor_id: str, seq: int) -> bool:
        """Records seq; returns False if it was already received (a duplicate)."""
        if self.seen(actor_id, seq):
            return False
        mark = self._watermark.get(actor_id, 0)
        ahead = self._ahead.setdefault(actor_id, set())
        ahead.add(seq)
        while mark in ahead:
            ahead.remove(mark)
            mark += 1
        self._watermark[actor_id] = mark
        return True

    def seen(self, actor_id: str, seq: int) -> bool:
        return seq < self._watermark.get(actor_id, 0) or seq in self._ahead.get(actor_id, ())

    def received(self, actor_id: str) -> int:
        return self._watermark.get(actor_id, 0) + len(self._ahead.get(actor_id, ()))

    def missing(self, actor_id: str) -> list[int]:
        """Sequence numbers below the highest one seen that have not arrived."""
        ahead = self._ahead.get(actor_id, set())
        if not ahead:
            return []
        mark = self._watermark.get(actor_id, 0)
        return [s for s in range(mark, max(ahead)) if s not in ahead]

    def actors(self) -> list[str]:
        return sorted(self._watermark)

    def merge(self, other: "SequenceTracker") -> None:
        """Adds every sequence number `other` has received."""
        for actor_id, other_mark in other._watermark.items():
            mark = max(self._watermark.get(actor_id, 0), other_mark)
            ahead = {s for s in self._ahead.get(actor_id, set()) | other._ahead[actor_id] if s >= mark}
            while mark in ahead:
                ahead.remove(mark)
                mark += 1
            self._watermark[actor_id], self._ahead[actor_id] = mark, ahead

    def save(self, path: str | os.PathLike) -> None:
        atomic_write_text(path, json.dumps({a: [self._watermark[a], sorted(self._ahead.get(a, ()))]
                                            for a in self._watermark}))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "SequenceTracker":
        tracker = cls()
        for actor_id, (mark, ahead) in json.loads(Path(path).read_text()).items():
            tracker._watermark[actor_id], tracker._ahead[actor_id] = int(mark), {int(s) for s in ahead}
        return tracker
