"""The actor's step timing: act latency (observation stamp to command), its control and wait parts, missed
control periods and the frame age, as percentiles over the last steps (/diagnostics, eval.json) and, when asked,
one CSV row per step (the actor's `timing_log`)."""

from __future__ import annotations

import time
from collections import deque

from robot_rl.ros.node_utils import latency_percentiles

LATENCY_WINDOW = 1000
"""Steps over which the act latency percentiles on /diagnostics are taken."""

TIMING_LOG_COLUMNS = ("command_wall_ns", "stamp_ns", "episode", "act_ms", "control_ms", "learner_wait_ms",
                      "frame_age_ms")
"""The timing log's columns (`timing_log`): one row per step; frame_age_ms is empty for a task without cameras."""


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
        self._log = open(log_path, "a", buffering=1) if log_path else None
        if self._log is not None and self._log.tell() == 0:
            self._log.write(",".join(TIMING_LOG_COLUMNS) + "\n")

    def deferred(self, stamp: int, now: float) -> None:
        if self._deferred is None or self._deferred[0] != stamp:
            self._deferred = (stamp, now)

    def acted(self, stamp: int, started: float, now: float, latency_s: float, frames_stamp: int | None = None,
              episode: int = -1) -> None:
        """The step at `stamp` (of `episode`) was taken by the callback that began at `started` and published at
        `now`, `latency_s` after its observation; its oldest camera frame is stamped `frames_stamp`."""
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
            self._log.write(f"{time.time_ns()},{stamp},{episode},{act_ms:.3f},{control_ms:.3f},{wait_ms:.3f},{age}\n")

    def summary(self) -> dict[str, float | str | int]:
        frames = latency_percentiles(self.frame_age_ms, "frame_age_ms") if self.frames else {}
        return {**latency_percentiles(self.act_ms), **latency_percentiles(self.control_ms, "control_ms"),
                **latency_percentiles(self.wait_ms, "learner_wait_ms"), **frames, "missed_periods": self.missed_periods}

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
