"""Pairs messages from several topics by header stamp (message_filters is not on PyPI, and the
actor needs only this: newest complete set wins, older partial sets are dropped and counted)."""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence


class StampSynchronizer:
    def __init__(self, names: Sequence[str], slop_ns: int = 0, queue_size: int = 10):
        if not names:
            raise ValueError("need at least one topic to synchronize")
        self.names = list(names)
        self.slop_ns = slop_ns
        self._queues: dict[str, deque[tuple[int, Any]]] = {n: deque(maxlen=queue_size) for n in names}
        self.dropped = 0
        self.emitted = 0
        self._last_emitted = -1

    def add(self, name: str, stamp_ns: int, msg: Any) -> tuple[int, dict[str, Any]] | None:
        """Adds a message; returns (stamp of the set, {name: msg}) when it completes a set."""
        if stamp_ns <= self._last_emitted:
            # a repeat of the set already used is not a loss; anything older is stale
            self.dropped += int(stamp_ns < self._last_emitted)
            return None
        self._queues[name].append((stamp_ns, msg))
        chosen = {name: msg}
        for other in self.names:
            if other == name:
                continue
            match = min((entry for entry in self._queues[other] if abs(entry[0] - stamp_ns) <= self.slop_ns),
                        key=lambda entry: abs(entry[0] - stamp_ns), default=None)
            if match is None:
                return None
            chosen[other] = match[1]
        stale = {s for q in self._queues.values() for s, _ in q if s < stamp_ns - self.slop_ns}
        self.dropped += len(stale)
        for q in self._queues.values():
            q.clear()
        self._last_emitted = stamp_ns
        self.emitted += 1
        return stamp_ns, chosen
