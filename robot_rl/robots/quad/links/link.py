"""The interface every quadrotor link implements, its states and errors, and the geofence.

Interface (`QuadLink`), what `robot_rl.nodes.quadrotor` calls:

- `connect(wait_s)`: open the link and start its own thread (heartbeat, watchdogs, receiving).
  Returns whether the vehicle is heard; `status().connected` tells later.
- `send_ctbr(thrust_normalised, rates_rad_s)`: one collective-thrust / body-rate setpoint.
  `thrust_normalised` is the mass-normalised collective thrust in m/s^2 (hover = g), the rates
  are body rates in rad/s in the FLU body frame (x forward, y left, z up). Sent only while the
  link is `FLYING` (returns False otherwise): no setpoint reaches the vehicle before `arm()`
  succeeded or after a safe stop.
- `arm()`: blocking start sequence (MAVLink: the offboard sequence; Crazyflie: unlock + arming
  request). Call it from a worker thread, never from the control loop; `safe_stop`, `estop`,
  `land` and `close` abort it. Raises `LinkError`.
- `land(reason)`, `disarm(kill)`, `safe_stop(reason)` (the vehicle's safe action while we control
  it: land for MAVLink, stop setpoint for the Crazyflie), `estop()` (always acts; land, or
  disarm/kill when `estop_action: kill`), `observe_position(p)` (geofence), `send_heartbeat()`,
  `status()`, `close()`.

Link state (`LinkStatus.state`): `disconnected` -> `idle` -> `arming` -> `flying` -> `landing`
(MAVLink) / `stopped` -> `idle` again once the vehicle reports it is disarmed (MAVLink) or at once
(Crazyflie). `killed`: forced disarm / Crazyflie emergency stop. All the safe actions are
idempotent: calling them every control period sends the action once (MAVLink re-sends an
unacknowledged command from the link thread).

Safety inside the link, independent of the node (defense in depth, the node reacts faster):
- setpoint watchdog: `flying` and no `send_ctbr` for `setpoint_timeout_s` -> safe action;
- lost link (MAVLink): no vehicle HEARTBEAT for `link_timeout_s` -> `connected` False and, while
  controlling, a (blind) land; the autopilot's own offboard-loss failsafe covers the rest;
- geofence: `observe_position` outside the box while controlling -> safe action; `arm()` is
  refused while the last observed position is outside the box.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from robot_rl.control.checks import finite

log = logging.getLogger(__name__)

DISCONNECTED, IDLE, ARMING, FLYING, LANDING, STOPPED, KILLED, CLOSED = (
    "disconnected", "idle", "arming", "flying", "landing", "stopped", "killed", "closed")
CONTROLLING = (ARMING, FLYING)


class LinkError(RuntimeError):
    """The link cannot do what was asked (not connected, command denied or unanswered...)."""


class CommandRefused(LinkError):
    """The vehicle answered a command with a COMMAND_ACK other than ACCEPTED."""





@dataclass(frozen=True)
class Geofence:
    """Axis-aligned box (metres, in the odometry's frame) the vehicle must stay in."""

    low: tuple[float, float, float]
    high: tuple[float, float, float]

    def __post_init__(self) -> None:
        lo, hi = finite("geofence.low", self.low, 3), finite("geofence.high", self.high, 3)
        if (lo >= hi).any():
            raise ValueError(f"geofence.low {lo.tolist()} must be below geofence.high {hi.tolist()} on every axis")
        object.__setattr__(self, "low", tuple(float(x) for x in lo))
        object.__setattr__(self, "high", tuple(float(x) for x in hi))

    def contains(self, position: Any) -> bool:
        p = finite("position", position, 3)
        return bool((p >= np.asarray(self.low)).all() and (p <= np.asarray(self.high)).all())


# ---- link interface -------------------------------------------------------------------------------


@dataclass
class LinkStatus:
    """A snapshot of a link for the node and /diagnostics."""

    kind: str
    state: str
    connected: bool
    armed: bool | None = None
    """The vehicle's own report (MAVLink heartbeat); None when the link cannot tell (Crazyflie)."""
    mode: str = ""
    heartbeat_age_s: float | None = None
    """Age of the last vehicle heartbeat (MAVLink), None if never heard or not applicable."""
    fence_ok: bool | None = None
    """Whether the last observed position was inside the geofence (None: no fence / no position)."""
    last_safe_reason: str = ""
    last_error: str = ""
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def controlling(self) -> bool:
        return self.state in CONTROLLING

    def as_dict(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "link": self.kind, "link_state": self.state, "link_connected": self.connected,
            "vehicle_armed": "unknown" if self.armed is None else self.armed, "vehicle_mode": self.mode,
            "vehicle_heartbeat_age_s": "never" if self.heartbeat_age_s is None else f"{self.heartbeat_age_s:.3f}",
            "geofence_ok": "unknown" if self.fence_ok is None else self.fence_ok,
            "last_safe_reason": self.last_safe_reason, "link_last_error": self.last_error,
        }
        values.update({f"link_{k}": v for k, v in sorted(self.counters.items())})
        return values


class QuadLink:
    """Common part of the links: state, counters, the geofence and the setpoint watchdog clock.
    Thread-safe: the node's executor, the arming worker and the link's own thread all call in."""

    kind = "quad"
    safe_action = "land"

    def __init__(self, geofence: Geofence | None, setpoint_timeout_s: float, estop_action: str):
        if not (math.isfinite(setpoint_timeout_s) and setpoint_timeout_s > 0):
            raise ValueError("setpoint_timeout_s must be > 0")
        self.geofence = geofence
        self.setpoint_timeout_s = float(setpoint_timeout_s)
        self.estop_action = estop_action
        self._lock = threading.RLock()
        self._state_value = DISCONNECTED
        self._state_since = time.monotonic()
        self._connected = False
        self._abort = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_setpoint: float | None = None
        self._position: np.ndarray | None = None
        self._fence_breached = False
        self._estopped = False
        self.counters: Counter[str] = Counter()
        self.last_safe_reason = ""
        self.last_error = ""

    # -- the interface ------------------------------------------------------------------------------

    def connect(self, wait_s: float = 0.0) -> bool:
        raise NotImplementedError

    def send_ctbr(self, thrust_normalised: float, rates_rad_s: Sequence[float]) -> bool:
        raise NotImplementedError

    def send_heartbeat(self) -> bool:
        raise NotImplementedError

    def arm(self, timeout_s: float | None = None) -> None:
        raise NotImplementedError

    def disarm(self, kill: bool = False) -> bool:
        raise NotImplementedError

    def land(self, reason: str = "land") -> bool:
        raise NotImplementedError

    def estop(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        """Leaves the vehicle safe (best effort), stops the link's thread, closes the transport."""
        try:
            self.safe_stop("close")
        except Exception:  # noqa: BLE001 - closing must not fail on a dead link
            pass
        self._join_thread()
        with self._lock:
            self._state, self._connected = CLOSED, False
        try:
            self._close_transport()
        except Exception:  # noqa: BLE001
            pass

    def _close_transport(self) -> None:
        raise NotImplementedError

    def status(self) -> LinkStatus:
        with self._lock:
            return LinkStatus(kind=self.kind, state=self._state, connected=self._connected,
                              fence_ok=self._fence_ok(), last_safe_reason=self.last_safe_reason,
                              last_error=self.last_error, counters=dict(self.counters))

    @property
    def state(self) -> str:
        return self._state_value

    def _get_state(self) -> str:
        return self._state_value

    def _set_state(self, value: str) -> None:
        if value != self._state_value:
            self._state_value = value
            self._state_since = time.monotonic()

    _state = property(_get_state, _set_state)

    def safe_stop(self, reason: str) -> bool:
        """The vehicle's safe action if we control it (arming or flying): MAVLink lands, the
        Crazyflie gets a stop setpoint. Idempotent; returns True if something was sent now."""
        with self._lock:
            if self._state not in CONTROLLING:
                return False
            return self.land(reason)

    def observe_position(self, position: Sequence[float]) -> bool:
        """Feeds the vehicle's measured position (odometry frame) to the geofence. Leaving the box
        while we control the vehicle triggers the safe action (returns True when it did)."""
        p = finite("position", position, 3)
        with self._lock:
            self._position = p
            if self.geofence is None:
                return False
            if self.geofence.contains(p):
                self._fence_breached = False
                return False
            if not self._fence_breached:
                self._fence_breached = True
                self.counters["geofence_breaches"] += 1
            return self.safe_stop("geofence")

    # -- shared helpers -----------------------------------------------------------------------------

    def _fence_ok(self) -> bool | None:
        if self.geofence is None or self._position is None:
            return None
        return not self._fence_breached

    def _check_can_arm(self) -> None:
        """Raises LinkError when a start sequence must not begin (call with the lock held)."""
        if not self._connected:
            raise LinkError("link down: the vehicle is not heard")
        if self._state == ARMING:
            raise LinkError("already arming")
        if self._state in (LANDING, KILLED, CLOSED):
            raise LinkError(f"link is {self._state}: wait until the vehicle is disarmed")
        if self.geofence is not None:
            if self._position is None:
                raise LinkError("no position observed yet: the geofence cannot be checked")
            if not self.geofence.contains(self._position):
                raise LinkError(f"outside the geofence at {np.round(self._position, 3).tolist()}")

    def _stale(self, now: float) -> bool:
        return self._state == FLYING and self._last_setpoint is not None \
            and now - self._last_setpoint > self.setpoint_timeout_s

    def _note_error(self, text: str) -> None:
        self.last_error = text
        self.counters["errors"] += 1
        log.warning(text)

    def _join_thread(self) -> None:
        self._stop.set()
        self._abort.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        self._thread = None
