"""The actor's side of at-least-once delivery: `Outbox` keeps every transition batch until the
learner acknowledges it, resends the unacknowledged ones after a timeout, and spills to disk past a
memory bound so a long learner outage costs disk, not RAM, and loses nothing. While the learner answers
nothing (starting, loading demonstrations, gone) only a few of the oldest are resent per timeout: resending
every unacknowledged payload each time filled a starting learner's transport queue with copies (two pixel
actors: ~90 MB/s) until the kernel killed it. (The learner's side,
which makes storage exactly-once, is `sequences.SequenceTracker`.)
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from robot_rl.outputs import atomic_write_bytes, atomic_write_text


@dataclass
class _Pending:
    seq: int
    size: int
    last_sent: float  # monotonic seconds, -inf if never sent
    payload: bytes | None  # None when spilled to disk


class Outbox:
    """Unacknowledged payloads by sequence number, bounded in memory, spilling the oldest to disk.

    A spill directory left by an earlier run of the same actor is reloaded, so even an actor
    restart loses nothing that was spilled. Thread-safe: an actor packs into it on one thread
    (batch_packer.py) while its executor sends and takes acknowledgements.
    """

    def __init__(self, spill_dir: str | os.PathLike, max_memory_bytes: int = 256 << 20,
                 resend_after_s: float = 2.0, silent_resends: int = 2):
        self.spill_dir = Path(spill_dir)
        self.spill_dir.mkdir(parents=True, exist_ok=True)
        self.max_memory_bytes = max_memory_bytes
        self.resend_after_s = resend_after_s
        self.silent_resends = silent_resends
        """Payloads resent per resend_after_s while no acknowledgement came since the last resend."""
        self._acks = 0
        self._acks_at_last_resend: int | None = None  # None: nothing resent yet
        self._last_resend = float("-inf")
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self.memory_bytes = 0
        self.resends = 0
        for path in sorted(self.spill_dir.glob("*.payload")):
            seq = int(path.stem)
            self._pending[seq] = _Pending(seq, path.stat().st_size, float("-inf"), None)
        seq_file = self.spill_dir / "next_seq"
        stored = int(seq_file.read_text()) if seq_file.exists() else 0
        self._next_seq = self._persisted_seq = max(stored, max(self._pending, default=-1) + 1)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def allocate_seq(self) -> int:
        """The next sequence number (persisted by `put`, so a restarted actor never reuses one that was sent)."""
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            return seq

    def put(self, seq: int, payload: bytes) -> None:
        """Adds a payload; the files (next_seq, spills) are written outside the lock that sending and
        acknowledging take, so they never wait for a disk's fsync."""
        with self._write_lock:
            self._persisted_seq = max(self._persisted_seq, seq + 1)
            atomic_write_text(self.spill_dir / "next_seq", str(self._persisted_seq))
            with self._lock:
                replaced = self._pending.get(seq)  # a batch packed again after a failed try
                if replaced is not None and replaced.payload is not None:
                    self.memory_bytes -= replaced.size
                self._pending[seq] = _Pending(seq, len(payload), float("-inf"), bytes(payload))
                self.memory_bytes += len(payload)
                to_spill = self._over_budget()
            for entry in to_spill:
                # Synced before the rename: a power cut must not leave a truncated payload under its name.
                atomic_write_bytes(self.spill_path(entry.seq), entry.payload)
            with self._lock:
                for entry in to_spill:
                    if self._pending.get(entry.seq) is not entry:  # acknowledged while it was written
                        self.spill_path(entry.seq).unlink(missing_ok=True)
                    elif entry.payload is not None:
                        entry.payload = None
                        self.memory_bytes -= entry.size

    def newest(self) -> tuple[int, bytes] | None:
        """(sequence number, payload) of the unacknowledged payload with the highest sequence number,
        or None when all are acknowledged."""
        with self._lock:
            if not self._pending:
                return None
            entry = self._pending[max(self._pending)]
            return entry.seq, self._payload(entry)

    def ack(self, seq: int) -> bool:
        with self._lock:
            entry = self._pending.pop(seq, None)
            if entry is None:
                return False
            self._acks += 1
            if entry.payload is None:
                self.spill_path(seq).unlink(missing_ok=True)
            else:
                self.memory_bytes -= entry.size
            return True

    def due(self, now: float | None = None, limit: int = 64) -> list[tuple[int, bytes]]:
        """Payloads never sent or unacknowledged for resend_after_s, longest waiting first; marks them sent. While the
        learner acknowledged nothing since the last resend, resends are `silent_resends` per resend_after_s."""
        with self._lock:
            now = time.monotonic() if now is None else now
            silent = self._acks_at_last_resend == self._acks
            budget = (self.silent_resends if now - self._last_resend >= self.resend_after_s else 0) if silent else limit
            out = []
            # the longest unanswered first: never-sent ones, then the resends in the order they were last tried
            for entry in sorted(self._pending.values(), key=lambda e: (e.last_sent, e.seq)):
                seq = entry.seq
                if now - entry.last_sent < self.resend_after_s:
                    continue
                if entry.last_sent != float("-inf"):
                    if budget <= 0:
                        continue
                    budget -= 1
                    self.resends += 1
                    self._acks_at_last_resend, self._last_resend = self._acks, now
                entry.last_sent = now
                out.append((seq, self._payload(entry)))
                if len(out) >= limit:
                    break
            return out

    def _payload(self, entry: _Pending) -> bytes:
        """The entry's payload, from memory or from its spill file."""
        return entry.payload if entry.payload is not None else self.spill_path(entry.seq).read_bytes()

    def spill_path(self, seq: int) -> Path:
        return self.spill_dir / f"{seq:012d}.payload"

    def _over_budget(self) -> list[_Pending]:
        """The oldest payloads in memory whose spilling brings it within max_memory_bytes."""
        spill, memory = [], self.memory_bytes
        for seq in sorted(self._pending):
            if memory <= self.max_memory_bytes:
                break
            entry = self._pending[seq]
            if entry.payload is not None:
                spill.append(entry)
                memory -= entry.size
        return spill

    @property
    def spilled(self) -> int:
        with self._lock:
            return sum(1 for e in self._pending.values() if e.payload is None)
