"""The actor's step timing: act latency (observation stamp to command), its control and wait parts, missed
control periods and the frame age, as percentiles over the last steps (/diagnostics, eval.json) and, when asked,
one CSV row per step (the actor's `timing_log`), with what a slow callback spent its time on: its thread's CPU
time and the process's garbage collections during it."""

from __future__ import annotations

import gc
import time
from collections import deque

from robot_rl.ros.node_utils import latency_percentiles

LATENCY_WINDOW = 1000
"""Steps over which the act latency percentiles on /diagnostics are taken."""

TIMING_LOG_COLUMNS = ("command_wall_ns", "stamp_ns", "episode", "act_ms", "control_ms", "learner_wait_ms",
                      "frame_age_ms", "control_cpu_ms", "gc_ms")
"""The timing log's columns (`timing_log`): one row per step; frame_age_ms is empty for a task without cameras.
control_cpu_ms: the CPU time the control callback's thread used (far below control_ms: the thread was kept off the
CPU, by other processes or by another thread holding the GIL); gc_ms: the time Python's garbage collector ran
during the callback (the process's collections, on any thread)."""


class GcPauses:
    """The garbage collector's collections as intervals on time.monotonic(), the last `keep` of them."""

    def __init__(self, keep: int = 256):
        self.intervals: deque[tuple[float, float]] = deque(maxlen=keep)
        self._started: float | None = None
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.monotonic()
        elif self._started is not None:
            self.intervals.append((self._started, time.monotonic()))
            self._started = None

    def within(self, start: float, end: float) -> float:
        """Seconds of collections that overlapped [start, end] (newest first: they end in order, so the walk stops
        at the first that ended before `start`, a step or two back, instead of reading all `keep` every step)."""
        total = 0.0
        for a, b in reversed(self.intervals):
            if b <= start:
                break
            total += max(0.0, min(end, b) - max(start, a))
        return total

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)


class ActTiming:
    """The act latency (observation to command) and its two parts, each over the last LATENCY_WINDOW steps: the
    control callback's own time (observation in hand to command out) and how long a step waited before it could
    be taken (for the learner, under lockstep's update ratio, or for late rewards; a waiting actor is not a slow
    robot); the steps whose act latency missed their control period; with cameras (`frames`), the frame age: from
    the capture stamp of the oldest camera frame a step used to its command. `log_path`: every step's figures are
    also appended there (`TIMING_LOG_COLUMNS`, a line at a time, so a reader sees each step as it is taken)."""

    def __init__(self, period_s: float, frames: bool = False, log_path: str = ""):
        self.period_s = period_s
        self.frames = frames
        self.act_ms: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.control_ms: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.wait_ms: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.frame_age_ms: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.missed_periods = 0
        self._deferred: tuple[int, float] | None = None
        """(stamp, since when): the step at this observation is waiting."""
        self._log = open_timing_log(log_path) if log_path else None
        self.gc_pauses = GcPauses() if log_path else None

    def deferred(self, stamp: int, now: float) -> None:
        if self._deferred is None or self._deferred[0] != stamp:
            self._deferred = (stamp, now)

    def acted(self, stamp: int, started: float, now: float, latency_s: float, frames_stamp: int | None = None,
              episode: int = -1, cpu_s: float | None = None) -> None:
        """The step at `stamp` (of `episode`) was taken by the callback that began at `started` and published at
        `now` (time.monotonic()), `latency_s` after its observation, using `cpu_s` of its thread's CPU time; its
        oldest camera frame is stamped `frames_stamp`."""
        waited = started - self._deferred[1] if self._deferred is not None and self._deferred[0] == stamp else 0.0
        self._deferred = None
        act_ms, control_ms, wait_ms = latency_s * 1e3, (now - started) * 1e3, waited * 1e3
        self.act_ms.append(act_ms)
        self.missed_periods += int(latency_s > self.period_s)
        self.control_ms.append(control_ms)
        self.wait_ms.append(wait_ms)
        # The frames are older than the observation's stamp by what they precede it (the act latency is measured
        # on the node's own clock under simulated time, where the stamps are not on the wall clock).
        frame_age_ms = act_ms + (stamp - frames_stamp) * 1e-6 if frames_stamp is not None else None
        if frame_age_ms is not None:
            self.frame_age_ms.append(frame_age_ms)
        if self._log is not None:
            age = "" if frame_age_ms is None else f"{frame_age_ms:.3f}"
            cpu = "" if cpu_s is None else f"{cpu_s * 1e3:.3f}"
            gc_ms = self.gc_pauses.within(started, now) * 1e3
            self._log.write(f"{time.time_ns()},{stamp},{episode},{act_ms:.3f},{control_ms:.3f},{wait_ms:.3f},{age},"
                            f"{cpu},{gc_ms:.3f}\n")

    def summary(self) -> dict[str, float | str | int]:
        frames = latency_percentiles(self.frame_age_ms, "frame_age_ms") if self.frames else {}
        return {**latency_percentiles(self.act_ms), **latency_percentiles(self.control_ms, "control_ms"),
                **latency_percentiles(self.wait_ms, "learner_wait_ms"), **frames, "missed_periods": self.missed_periods}

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self.gc_pauses.close()


def open_timing_log(path: str):
    """`path` opened for appending a line at a time, its header written if it is new. A file that is not a timing
    log of these columns (another file, or one an older version wrote) is refused, not appended to."""
    log = open(path, "a+", buffering=1)
    if log.tell() == 0:
        log.write(",".join(TIMING_LOG_COLUMNS) + "\n")
        return log
    log.seek(0)
    header = log.readline().rstrip("\n")
    if header != ",".join(TIMING_LOG_COLUMNS):
        log.close()
        raise ValueError(f"{path} is not a timing log with the columns {','.join(TIMING_LOG_COLUMNS)} (its first "
                         f"line: {header[:120]!r}); give a new file")
    return log
