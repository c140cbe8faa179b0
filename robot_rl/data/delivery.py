"""At-least-once delivery of transition batches from actors to the learner, exactly-once storage.

Actor side: `Outbox` keeps every batch until the learner acknowledges it, resends the
unacknowledged ones after a timeout, and spills to disk past a memory bound so a long
learner outage costs disk, not RAM, and loses nothing.
Learner side: `SequenceTracker` recognises duplicates (resends, and replays of captured
payloads) per actor and reports gaps; its state is saved so that a restarted learner still knows
the sequence numbers whose journal segments were pruned.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
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


@dataclass
class _Pending:
    seq: int
    size: int
    last_sent: float  # monotonic seconds, -inf if never sent
    payload: bytes | None  # None when spilled to disk


class Outbox:
    """Unacknowledged payloads by sequence number, bounded in memory, spilling the oldest to disk.

    A spill directory left by an earlier run of the same actor is reloaded, so even an actor
    restart loses nothing that was spilled.
    """

    def __init__(self, spill_dir: str | os.PathLike, max_memory_bytes: int = 256 << 20,
                 resend_after_s: float = 2.0):
        self.spill_dir = Path(spill_dir)
        self.spill_dir.mkdir(parents=True, exist_ok=True)
        self.max_memory_bytes = max_memory_bytes
        self.resend_after_s = resend_after_s
        self._pending: dict[int, _Pending] = {}
        self.memory_bytes = 0
        self.resends = 0
        for path in sorted(self.spill_dir.glob("*.payload")):
            seq = int(path.stem)
            self._pending[seq] = _Pending(seq, path.stat().st_size, float("-inf"), None)
        seq_file = self.spill_dir / "next_seq"
        stored = int(seq_file.read_text()) if seq_file.exists() else 0
        self._next_seq = max(stored, max(self._pending, default=-1) + 1)

    def __len__(self) -> int:
        return len(self._pending)

    def allocate_seq(self) -> int:
        """The next sequence number, persisted so a restarted actor never reuses one."""
        seq = self._next_seq
        self._next_seq += 1
        tmp = self.spill_dir / "next_seq.tmp"
        tmp.write_text(str(self._next_seq))
        os.replace(tmp, self.spill_dir / "next_seq")
        return seq

    def put(self, seq: int, payload: bytes) -> None:
        self._pending[seq] = _Pending(seq, len(payload), float("-inf"), bytes(payload))
        self.memory_bytes += len(payload)
        self._spill_oldest()

    def ack(self, seq: int) -> bool:
        entry = self._pending.pop(seq, None)
        if entry is None:
            return False
        if entry.payload is None:
            self._spill_path(seq).unlink(missing_ok=True)
        else:
            self.memory_bytes -= entry.size
        return True

    def due(self, now: float | None = None, limit: int = 64) -> list[tuple[int, bytes]]:
        """Payloads never sent or unacknowledged for resend_after_s, oldest first; marks them sent."""
        now = time.monotonic() if now is None else now
        out = []
        for seq in sorted(self._pending):
            entry = self._pending[seq]
            if now - entry.last_sent < self.resend_after_s:
                continue
            if entry.last_sent != float("-inf"):
                self.resends += 1
            entry.last_sent = now
            payload = entry.payload if entry.payload is not None else self._spill_path(seq).read_bytes()
            out.append((seq, payload))
            if len(out) >= limit:
                break
        return out

    def _spill_path(self, seq: int) -> Path:
        return self.spill_dir / f"{seq:012d}.payload"

    def _spill_oldest(self) -> None:
        for seq in sorted(self._pending):
            if self.memory_bytes <= self.max_memory_bytes:
                return
            entry = self._pending[seq]
            if entry.payload is None:
                continue
            tmp = self._spill_path(seq).with_suffix(".tmp")
            tmp.write_bytes(entry.payload)
            os.replace(tmp, self._spill_path(seq))
            entry.payload = None
            self.memory_bytes -= entry.size

    @property
    def spilled(self) -> int:
        return sum(1 for e in self._pending.values() if e.payload is None)
