"""Autonomous practice for the race car (FastRLAP): detect being stuck or crashed, recover alone.

The same logic runs in the simulated car env, the car sim node and the real car node, so the
car practises for hours without a person resetting it:

- **stuck**: the last `stuck_window` positions all lie within `stuck_radius` of their centroid
  (FastRLAP: 30 positions within 0.3 m). The episode is *truncated* (being slow is not a
  terminal state of the task), then the car recovers.
- **crash**: an acceleration spike, the norm of the accelerometer above `crash_accel`, or the car
  upside down, its z acceleration below `flip_accel_z` (FastRLAP: max accel > 20, accel_z < -4 m/s^2).
  The episode *terminates* (a crash is a failure the critic must not bootstrap through).
- **recovery**: reverse at `recovery_speed` with a random steering angle held for `recovery_s`
  (FastRLAP: 1 s), then practice goes on from wherever the car is.

Pure numpy, no ROS, no MuJoCo: the callers feed positions and accelerations in and execute the
recovery commands; tests drive it with recorded trajectories.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = ["PracticeConfig", "PracticeMonitor", "Recovery"]


@dataclass(frozen=True)
class PracticeConfig:
    """Thresholds of the stuck and crash detectors and the recovery manoeuvre."""

    stuck_window: int = 30
    """Positions (control steps) the stuck detector looks back over."""
    stuck_radius: float = 0.3
    """Stuck when every one of those positions is within this distance of their centroid [m]."""
    crash_accel: float = 20.0
    """Crash when the accelerometer's norm exceeds this [m/s^2] (gravity included)."""
    flip_accel_z: float = -4.0
    """Crash when the body-z acceleration falls below this (the car lies on its side or roof)."""
    recovery_s: float = 1.0
    """Duration of the reverse manoeuvre [s]."""
    recovery_speed: float = -1.0
    """Speed command while recovering [m/s] (negative: reverse)."""
    recovery_max_steer: float = 1.0
    """The recovery steering is drawn uniformly in [-max, max] (normalized action units)."""

    def __post_init__(self) -> None:
        if self.stuck_window < 2 or not self.stuck_radius > 0:
            raise ValueError(f"stuck_window >= 2 and stuck_radius > 0 required, got {self.stuck_window}, "
                             f"{self.stuck_radius}")
        if not self.crash_accel > 9.81:
            raise ValueError(f"crash_accel must exceed gravity (9.81), got {self.crash_accel}")
        if not self.recovery_s > 0 or not 0 <= self.recovery_max_steer <= 1:
            raise ValueError("recovery_s > 0 and recovery_max_steer in [0, 1] required")


class PracticeMonitor:
    """Watches one episode of driving: `update` returns "crash", "stuck" or None per step."""

    def __init__(self, config: PracticeConfig = PracticeConfig()):
        self.config = config
        self._positions: deque[np.ndarray] = deque(maxlen=config.stuck_window)

    def reset(self) -> None:
        """A new episode: forget the positions (the stuck window restarts)."""
        self._positions.clear()

    def crashed(self, accel: np.ndarray) -> bool:
        """An accelerometer sample (3,) in the body frame, gravity included (as an IMU reports it)."""
        a = np.asarray(accel, float)
        if a.shape != (3,) or not np.isfinite(a).all():
            raise ValueError(f"acceleration must be 3 finite values, got {accel!r}")
        return bool(np.linalg.norm(a) > self.config.crash_accel or a[2] < self.config.flip_accel_z)

    def stuck(self, position: np.ndarray) -> bool:
        p = np.asarray(position, float)[:2]
        if not np.isfinite(p).all():
            raise ValueError(f"position must be finite, got {position!r}")
        self._positions.append(p)
        if len(self._positions) < self.config.stuck_window:
            return False
        window = np.asarray(self._positions)
        return bool(np.linalg.norm(window - window.mean(axis=0), axis=1).max() <= self.config.stuck_radius)

    def update(self, position: np.ndarray, peak_accel: np.ndarray) -> str | None:
        """One control step: the position reached and the largest acceleration sample since the
        last step (a spike lasts milliseconds: the caller keeps the peak over its sensor samples)."""
        if self.crashed(peak_accel):
            return "crash"
        return "stuck" if self.stuck(position) else None


class Recovery:
    """The reverse manoeuvre: `command()` gives (speed m/s, steer in [-1, 1]) until `done`."""

    def __init__(self, config: PracticeConfig, control_hz: float, rng: np.random.Generator):
        if not control_hz > 0:
            raise ValueError(f"control_hz must be > 0, got {control_hz}")
        self.config = config
        self.steps_left = max(1, round(config.recovery_s * control_hz))
        self.steer = float(rng.uniform(-config.recovery_max_steer, config.recovery_max_steer))

    @property
    def done(self) -> bool:
        return self.steps_left == 0

    def command(self) -> tuple[float, float]:
        if self.done:
            raise RuntimeError("the recovery manoeuvre is over")
        self.steps_left -= 1
        return self.config.recovery_speed, self.steer
