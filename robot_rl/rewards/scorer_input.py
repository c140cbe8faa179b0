"""Camera frames on their way to the scorer: the shape a model's input imposes, and the pairing of
several cameras' frames by stamp; and the scorer's partial answer, `UnreadableScores`. Decoding image
messages into frames is `robot_rl.ros.reward_io`'s job."""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

import numpy as np

__all__ = ["FrameRejected", "StampPairer", "UnreadableScores", "check_frame_shape", "processor_frames"]


class FrameRejected(ValueError):
    """A frame the stream refuses: `reason` is a short key for counting."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def check_frame_shape(frame: np.ndarray, square: bool = False, size: int | None = None) -> None:
    """Refuses an (H, W, 3) frame the model cannot read.

    Raises:
        FrameRejected: reason ``shape`` (not square where the model needs square frames) or ``size``
            (not the model's size).
    """
    height, width = frame.shape[:2]
    if (square or size is not None) and height != width:
        raise FrameRejected("shape", f"{width}x{height} image; the model needs square frames")
    if size is not None and height != size:
        raise FrameRejected("size", f"{width}x{height} image; the model needs {size}x{size}")


class StampPairer:
    """Pairs frames of several cameras by stamp: a set completes when every camera has a frame
    within `tolerance_ns` of the newest frame's stamp (the closest one). Frames older than a
    completed set, repeats and overflow of the per-camera queue are dropped and counted in
    `dropped`. The set's stamp is the first camera's."""

    def __init__(self, cameras: Sequence[str], tolerance_ns: int = 0, queue_size: int = 8):
        if not cameras:
            raise ValueError("need at least one camera to pair")
        if tolerance_ns < 0 or queue_size < 1:
            raise ValueError("tolerance_ns must be >= 0 and queue_size >= 1")
        self.cameras = tuple(cameras)
        self.tolerance_ns = int(tolerance_ns)
        self._queues: dict[str, deque[tuple[int, Any]]] = {c: deque() for c in self.cameras}
        self._last_used = dict.fromkeys(self.cameras, -1)
        self.queue_size = queue_size
        self.dropped = 0
        self.paired = 0

    def add(self, camera: str, stamp_ns: int, frame: Any) -> tuple[int, dict[str, Any]] | None:
        """Adds a frame; returns (stamp, {camera: frame}) when it completes a set."""
        if camera not in self._queues:
            raise KeyError(f"unknown camera {camera!r}; pairing {list(self.cameras)}")
        if stamp_ns <= self._last_used[camera]:
            self.dropped += 1  # a repeat or a frame older than a set already used
            return None
        queue = self._queues[camera]
        if any(s == stamp_ns for s, _ in queue):
            self.dropped += 1  # a repeat of a frame still waiting
            return None
        queue.append((stamp_ns, frame))
        if len(queue) > 1 and stamp_ns < queue[-2][0]:  # out of order: keep the queue sorted
            self._queues[camera] = queue = deque(sorted(queue, key=lambda e: e[0]))
        if len(queue) > self.queue_size:
            self.dropped += 1
            if queue.popleft()[0] == stamp_ns:  # the new frame was the oldest
                return None
        chosen = {camera: (stamp_ns, frame)}
        for other in self.cameras:
            if other == camera:
                continue
            match = min((e for e in self._queues[other] if abs(e[0] - stamp_ns) <= self.tolerance_ns),
                        key=lambda e: abs(e[0] - stamp_ns), default=None)
            if match is None:
                return None
            chosen[other] = match
        for c, (used, _) in chosen.items():
            q = self._queues[c]
            while q and q[0][0] <= used:
                if q.popleft()[0] != used:
                    self.dropped += 1  # older than the set: it will never be paired
            self._last_used[c] = used
        self.paired += 1
        return chosen[self.cameras[0]][0], {c: chosen[c][1] for c in self.cameras}

    def clear(self) -> int:
        """Drops every waiting frame (counted); returns how many."""
        n = sum(len(q) for q in self._queues.values())
        for q in self._queues.values():
            q.clear()
        self.dropped += n
        return n


class UnreadableScores(ValueError):
    """Rows of a batch a scorer could not read: `delta` and `done` hold the batch's readings, NaN in those
    rows; the message names each."""

    def __init__(self, message: str, delta: np.ndarray, done: np.ndarray):
        super().__init__(message)
        self.delta, self.done = delta, done


def processor_frames(frames: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Frames as a `transformers` image processor takes them: C-contiguous and writable, copied only where they
    are not. A first frame broadcast over a batch, or a frame decoded from read-only bytes, is a read-only view,
    and the processors' `torch.from_numpy` on one warns that writing to it is undefined."""
    return [np.require(frame, requirements=["C", "W"]) for frame in frames]
