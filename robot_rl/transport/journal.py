"""Append-only journal of received payloads: the learner's durable replay memory.

The learner appends every transition payload (already codec-encoded and CRC-checked)
here *before* acknowledging it, so a learner killed at any instant loses nothing it
acknowledged: on restart it replays the journal into its buffer. Segments rotate and
whole old segments are dropped once the newer ones already hold a buffer's worth of
transitions. Records are `u32 length | payload`; a torn record at the tail (a kill
mid-write) is detected and dropped. The format is this simple on purpose: the payload
carries its own CRC and version, so no general-purpose log library is needed.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Iterator

_LEN = struct.Struct("<I")


class PayloadJournal:
    def __init__(self, directory: str | os.PathLike, segment_records: int = 256, fsync: bool = False):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_records = segment_records
        self.fsync = fsync
        self._file = None
        self._records_in_segment = 0
        # transitions held by each segment, learned on append or replay (for pruning)
        self.segment_transitions: dict[int, int] = {}

    def _segments(self) -> list[int]:
        return sorted(int(p.stem.split("-")[1]) for p in self.directory.glob("segment-*.log"))

    def _path(self, index: int) -> Path:
        return self.directory / f"segment-{index:08d}.log"

    def replay(self) -> Iterator[tuple[int, bytes]]:
        """Yields (segment index, payload) oldest first; truncates a torn tail record."""
        for index in self._segments():
            path = self._path(index)
            data = path.read_bytes()
            offset = 0
            while offset + _LEN.size <= len(data):
                (length,) = _LEN.unpack_from(data, offset)
                end = offset + _LEN.size + length
                if end > len(data):
                    break
                yield index, data[offset + _LEN.size:end]
                offset = end
            if offset != len(data):
                with open(path, "r+b") as f:  # drop the torn record so later appends stay aligned
                    f.truncate(offset)

    def append(self, payload: bytes | memoryview, transitions: int) -> None:
        if self._file is None or self._records_in_segment >= self.segment_records:
            self._open_next_segment()
        self._file.write(_LEN.pack(len(payload)))
        self._file.write(payload)
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
        self._records_in_segment += 1
        self.segment_transitions[self._current] = self.segment_transitions.get(self._current, 0) + transitions

    def note_replayed(self, index: int, transitions: int) -> None:
        self.segment_transitions[index] = self.segment_transitions.get(index, 0) + transitions

    def _open_next_segment(self) -> None:
        if self._file is not None:
            self._file.close()
        segments = self._segments()
        self._current = (segments[-1] + 1) if segments else 0
        self._file = open(self._path(self._current), "ab")
        self._records_in_segment = 0

    def prune(self, keep_transitions: int) -> None:
        """Deletes the oldest segments that the newer ones make unreachable (ring overwritten)."""
        held = 0
        for index in sorted(self.segment_transitions, reverse=True):
            if held >= keep_transitions:
                self._path(index).unlink(missing_ok=True)
                del self.segment_transitions[index]
            else:
                held += self.segment_transitions[index]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
