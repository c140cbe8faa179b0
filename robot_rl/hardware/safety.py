"""Safety logic shared by every hardware-facing node, without ROS.

A `SafetyGate` decides, every control period, whether the robot may move. It is fed the
events a node sees (an /estop message, a valid command, a fresh robot state, a lifecycle
change) with the time they happened as an argument (`now`: monotonic seconds, e.g.
`time.monotonic()`), so it is deterministic and unit-tested without clocks or threads.

Rules (`verdict(now)` returns the first that applies):

1. `ESTOP`: a `True` was received on /estop. Latched: it stays until `reset_estop(now)` is
   called while the latest /estop value is `False` (and the heartbeat is fresh, if required).
2. `ESTOP_HEARTBEAT`: `estop_heartbeat_timeout_s > 0` and /estop has been silent for longer
   than that (or has never been heard). A heartbeat that was heard and then went silent trips a
   latched stop (counted in `estop_trips`) that also needs `reset_estop`; a heartbeat that was
   never heard only holds the robot until it appears.
3. `INACTIVE`: the node is not active (lifecycle): it never commands the hardware.
4. `NO_STATE`: `state_timeout_s > 0` and the robot's measured state is missing or older than that.
5. `STALE_COMMAND`: no valid command yet, or the last one is older than `command_timeout_s`.
   Commands received while the gate is stopped by rules 1-3 do not count: after an e-stop
   reset or an activation the robot waits for a new command.
6. `NONE`: motion allowed.

The helpers `clamp_box` and `limit_step` refuse NaN/Inf with ValueError, so a bad value can
never be clamped into a plausible-looking command.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

import numpy as np

from robot_rl.config_fields import setting
from robot_rl.control.checks import finite

__all__ = ["Rejected", "SafetyConfig", "SafetyGate", "StopReason", "clamp_box", "limit_step"]


class Rejected(ValueError):
    """An incoming message refused by validation; `reason` is the short key it is counted under
    (e.g. "nan", "frame", "bad_stamp"), `detail` the human-readable explanation."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail

    @classmethod
    def nan(cls, detail: str) -> Rejected:
        """A message holding NaN or Inf (what message parsers pass `finite` as its error)."""
        return cls("nan", detail)


class StopReason(Enum):
    """Why the robot may not move right now (`NONE`: it may)."""

    NONE = "none"
    ESTOP = "estop"
    ESTOP_HEARTBEAT = "estop_heartbeat"
    STALE_COMMAND = "stale_command"
    INACTIVE = "inactive"
    NO_STATE = "no_state"

    @property
    def allows_motion(self) -> bool:
        return self is StopReason.NONE

    @property
    def is_estop(self) -> bool:
        return self in (StopReason.ESTOP, StopReason.ESTOP_HEARTBEAT)


@dataclass(frozen=True)
class SafetyConfig:
    """Timeouts of a `SafetyGate`, all in seconds (monotonic time)."""

    command_timeout_s: float = setting(0.15, "A command older than this no longer moves the robot (watchdog -> "
                                       "safe output). Choose just above the command period (1.5 actor periods).",
                                       low=0.001, high=10.0)
    """A command older than this (time since it was received) no longer moves the robot: the gate
    says STALE_COMMAND and the node sends its safe output (hold / zero / land). Choose it just
    above the command period, e.g. 1.5 periods of the actor (0.15 s at 10 Hz). Must be > 0."""

    estop_heartbeat_timeout_s: float = setting(0.0, "0: /estop is an event. > 0: /estop must be republished at "
                                               "least this often; silence trips a latched stop.", low=0.0,
                                               high=60.0)
    """0: no heartbeat required; /estop is only an event (a `True` latches the stop).
    > 0: /estop must be (re)published at least this often; a silent /estop publisher trips a
    latched ESTOP_HEARTBEAT stop, and until a heartbeat has been heard at all the robot holds."""

    state_timeout_s: float = setting(0.5, "The robot's measured state older than this stops motion (NO_STATE) "
                                     "and refuses activation.", low=0.0, high=60.0)
    """The robot's measured state (joint states, pose, odometry) older than this, or never
    received, gives NO_STATE. 0 disables the check (a node without a state feedback)."""

    max_command_age_s: float = setting(0.0, "Refuse commands whose header stamp is older than this on arrival "
                                       "(counted late). 0: off.", low=0.0, high=60.0)
    """A command whose header stamp is older than this when it arrives is refused and counted as
    `late` (and `rejected`). 0 disables the check (e.g. stamps from another clock)."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < 0:
                raise ValueError(f"SafetyConfig.{name} must be a finite number >= 0, got {value!r}")
        if self.command_timeout_s <= 0:
            raise ValueError("SafetyConfig.command_timeout_s must be > 0")


class SafetyGate:
    """Decides whether motion is allowed; counts what it refused. Not thread-safe: call it from
    one thread (the node's executor). Times are monotonic seconds passed in by the caller."""

    COUNTER_KEYS = ("accepted", "rejected", "clamped", "late", "stale", "estop_trips", "estop_resets")

    def __init__(self, config: SafetyConfig | None = None):
        self.config = config if config is not None else SafetyConfig()
        self._counters = dict.fromkeys(self.COUNTER_KEYS, 0)
        self.reject_reasons: Counter[str] = Counter()
        """Rejections by reason (the `reason` passed to `reject`, and "late")."""
        self.last_reject_reason = ""
        self._active = False
        self._latched: StopReason | None = None
        self._estop_value: bool | None = None  # latest /estop value (None: never heard)
        self._estop_time: float | None = None
        self._last_command: float | None = None
        self._stale_counted: float | None = None  # command time whose expiry was already counted
        self._last_state: float | None = None

    # ---- inputs ---------------------------------------------------------------------------------

    def on_estop(self, value: bool, now: float) -> bool:
        """An /estop message. Returns True when it tripped a (new) latched stop."""
        tripped = False
        if self._heartbeat_required and self._estop_time is not None \
                and now - self._estop_time > self.config.estop_heartbeat_timeout_s:
            tripped = self._trip(StopReason.ESTOP_HEARTBEAT)  # a gap between two heartbeats
        self._estop_value = bool(value)
        self._estop_time = now
        if value:
            tripped = self._trip(StopReason.ESTOP) or tripped
        return tripped

    def reset_estop(self, now: float) -> tuple[bool, str]:
        """Releases a latched stop if /estop's latest value is False and its heartbeat (if
        required) is fresh. Returns (released or nothing to release, explanation)."""
        if self._estop_value:
            return False, "e-stop is still asserted: the latest /estop value is True"
        if self._heartbeat_required:
            if self._estop_time is None:
                return False, "no /estop heartbeat heard yet"
            age = now - self._estop_time
            if age > self.config.estop_heartbeat_timeout_s:
                return False, (f"/estop heartbeat is stale: last message {age:.3f} s ago "
                               f"(timeout {self.config.estop_heartbeat_timeout_s:g} s)")
        if self._latched is None:
            return True, "e-stop was not latched"
        released = self._latched
        self._latched = None
        self._last_command = None  # wait for a new command
        self._counters["estop_resets"] += 1
        return True, f"{released.value} released"

    def on_command(self, now: float, stamp_age_s: float | None = None) -> bool:
        """A command that passed validation arrived (`stamp_age_s`: its header stamp's age when
        received, if known). Returns False if it is refused as late (counted)."""
        if stamp_age_s is not None and self.config.max_command_age_s > 0 \
                and stamp_age_s > self.config.max_command_age_s:
            self.reject("late")
            self._counters["late"] += 1
            return False
        self._counters["accepted"] += 1
        if self._hard_stop(now) is None:
            self._last_command = now
        return True

    def on_state(self, now: float) -> None:
        """A valid measurement of the robot's state arrived."""
        self._last_state = now

    def reject(self, reason: str) -> None:
        """Counts an incoming message refused by validation (NaN, wrong frame, bad stamp...)."""
        self._counters["rejected"] += 1
        self.reject_reasons[reason] += 1
        self.last_reject_reason = reason

    def count_clamped(self, n: int = 1) -> None:
        """Counts commands that had to be clamped to the configured limits."""
        self._counters["clamped"] += int(n)

    def set_active(self, active: bool, now: float | None = None) -> None:
        """Lifecycle activation (True) / deactivation (False). Either way the last command is
        forgotten: an activated node waits for a new command."""
        self._active = bool(active)
        self._last_command = None

    def forget_command(self) -> None:
        """Treat the last command as stale from now on (e.g. after a reset or a mode change)."""
        self._last_command = None

    # ---- decision -------------------------------------------------------------------------------

    def verdict(self, now: float) -> StopReason:
        """Whether motion is allowed at `now`; call it every control period. It also counts
        watchdog events (a heartbeat that went silent, a command that expired)."""
        cfg = self.config
        hard = self._hard_stop(now)
        if hard is not None:
            return hard
        if cfg.state_timeout_s > 0 and (self._last_state is None or now - self._last_state > cfg.state_timeout_s):
            return StopReason.NO_STATE
        if self._last_command is None:
            return StopReason.STALE_COMMAND
        if now - self._last_command > cfg.command_timeout_s:
            if self._stale_counted != self._last_command:
                self._stale_counted = self._last_command
                self._counters["stale"] += 1
            return StopReason.STALE_COMMAND
        return StopReason.NONE

    def command_expires_at(self) -> float | None:
        """Monotonic time after which the last command is stale (None: no fresh command)."""
        return None if self._last_command is None else self._last_command + self.config.command_timeout_s

    # ---- introspection --------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self._active

    @property
    def estop_latched(self) -> bool:
        return self._latched is not None

    @property
    def estop_value(self) -> bool | None:
        """The latest /estop value (None: never heard)."""
        return self._estop_value

    @property
    def counters(self) -> dict[str, int]:
        return dict(self._counters)

    def status(self, now: float) -> dict[str, Any]:
        """Flat key -> value summary for /diagnostics (does not count events: no `verdict` call)."""

        def age(t: float | None) -> str:
            return "never" if t is None else f"{now - t:.3f}"

        return {
            "active": self._active,
            "estop_latched": self.estop_latched,
            "estop_value": "unknown" if self._estop_value is None else self._estop_value,
            "estop_age_s": age(self._estop_time),
            "command_age_s": age(self._last_command),
            "state_age_s": age(self._last_state),
            **self._counters,
            "last_reject_reason": self.last_reject_reason,
        }

    # ---- internals ------------------------------------------------------------------------------

    @property
    def _heartbeat_required(self) -> bool:
        return self.config.estop_heartbeat_timeout_s > 0

    def _hard_stop(self, now: float) -> StopReason | None:
        """Rules 1-3 (e-stop, heartbeat, inactive); trips a heartbeat that went silent."""
        if self._heartbeat_required and self._estop_time is not None \
                and now - self._estop_time > self.config.estop_heartbeat_timeout_s:
            self._trip(StopReason.ESTOP_HEARTBEAT)
        if self._latched is not None:
            return self._latched
        if self._heartbeat_required and self._estop_time is None:
            return StopReason.ESTOP_HEARTBEAT  # never heard: hold until it appears
        if not self._active:
            return StopReason.INACTIVE
        return None

    def _trip(self, reason: StopReason) -> bool:
        """Latches a stop; returns True when the gate was not already latched."""
        self._last_command = None
        if self._latched is None:
            self._latched = reason
            self._counters["estop_trips"] += 1
            return True
        if reason is StopReason.ESTOP:
            self._latched = StopReason.ESTOP  # an explicit e-stop is reported over a heartbeat loss
        return False


# ---- vector helpers -------------------------------------------------------------------------------


def clamp_box(v: Any, low: Any, high: Any) -> tuple[np.ndarray, bool]:
    """Clamps `v` element-wise into [low, high] (scalars or arrays broadcast to v's shape).
    Returns (clamped copy as float64, whether anything changed). Raises ValueError on NaN/Inf,
    on low > high or on shapes that do not fit."""
    v, lo, hi = finite("value", v), finite("low", low), finite("high", high)
    try:
        shape = np.broadcast_shapes(v.shape, lo.shape, hi.shape)
    except ValueError:
        raise ValueError(f"shapes do not fit: value {v.shape}, low {lo.shape}, high {hi.shape}") from None
    if shape != v.shape:
        raise ValueError(f"limits of shape {lo.shape}/{hi.shape} do not fit a value of shape {v.shape}")
    if (lo > hi).any():
        raise ValueError(f"low {lo.tolist()} exceeds high {hi.tolist()}")
    out = np.minimum(np.maximum(v, lo), hi)
    return out, bool((out != v).any())


def limit_step(target: Any, current: Any, max_step: Any) -> tuple[np.ndarray, bool]:
    """Moves from `current` toward `target` by at most `max_step` per element (scalar or array,
    >= 0). Returns (the limited target as float64, whether it was limited); an unlimited element
    equals the target exactly. Raises ValueError on NaN/Inf, negative steps or shape mismatch."""
    t, c, m = finite("target", target), finite("current", current), finite("max_step", max_step)
    if t.shape != c.shape:
        raise ValueError(f"target shape {t.shape} differs from current shape {c.shape}")
    try:
        m = np.broadcast_to(m, t.shape)
    except ValueError:
        raise ValueError(f"max_step of shape {m.shape} does not fit a target of shape {t.shape}") from None
    if (m < 0).any():
        raise ValueError(f"max_step must be >= 0, got {m.tolist()}")
    delta = t - c
    over = np.abs(delta) > m
    if not over.any():
        return t.copy(), False
    out = np.where(over, c + np.sign(delta) * m, t)
    return out, True
