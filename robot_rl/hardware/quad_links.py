"""Quadrotor vehicle links without ROS: one interface, a MAVLink (PX4 / ArduPilot) and a Crazyflie
(cflib) implementation, the thrust/rate conversions they need and the hardware YAML.

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

Conversions (hand-checkable, see tests/test_quadrotor.py):
- FLU -> FRD body rates: (p, q, r) -> (p, -q, -r) (MAVLink body rates are FRD).
- PX4/ArduPilot thrust: `thrust_01 = clip(a * hover_thrust / g, 0, 1)`, i.e. linear with the
  normalised hover thrust at a = g (PX4 MPC_THR_HOVER / ArduCopter MOT_THST_HOVER); the largest
  acceleration is g / hover_thrust.
- Crazyflie: `MotorThrustModel`: a -> total force m*a -> per-motor force -> PWM (0..65535) by
  inverting a quadratic per-motor fit f(pwm) = c2 pwm^2 + c1 pwm + c0 [N]; then the PWM -> the
  thrust percentage of cflib's `send_setpoint_manual` (which maps 0..100 % to 10001..60000).
"""

from __future__ import annotations

import logging
import math
import select
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from robot_rl.hardware.files import load_hardware_file, number_field, section_field, string_field

__all__ = [
    "ARMING", "DISCONNECTED", "FLYING", "IDLE", "KILLED", "LANDING", "STOPPED", "CLOSED", "GRAVITY",
    "CF_MANUAL_THRUST_MAX", "CF_MANUAL_THRUST_MIN", "CommandRefused", "CrazyflieConfig", "CrazyflieLink", "Geofence",
    "LinkError",
    "LinkStatus", "MavlinkConfig", "MavlinkLink", "MotorThrustModel", "QuadHardware", "QuadLink",
    "crazyflie_rates_deg", "crazyflie_thrust_percentage", "flu_to_frd", "load_quad_hardware", "make_link",
    "parse_quad_hardware", "px4_thrust",
]

log = logging.getLogger(__name__)

GRAVITY = 9.80665
"""Standard gravity (m/s^2), the default `gravity` of the thrust mapping."""

DISCONNECTED, IDLE, ARMING, FLYING, LANDING, STOPPED, KILLED, CLOSED = (
    "disconnected", "idle", "arming", "flying", "landing", "stopped", "killed", "closed")
CONTROLLING = (ARMING, FLYING)

# cflib's Commander.send_setpoint_manual maps thrust 0..100 % linearly to these raw values.
CF_MANUAL_THRUST_MIN = 10001
CF_MANUAL_THRUST_MAX = 60000
CF_PWM_MAX = 65535


class LinkError(RuntimeError):
    """The link cannot do what was asked (not connected, command denied or unanswered...)."""


class CommandRefused(LinkError):
    """The vehicle answered a command with a COMMAND_ACK other than ACCEPTED."""


# ---- conversions ----------------------------------------------------------------------------------


def _finite_vec(name: str, value: Any, n: int) -> np.ndarray:
    a = np.asarray(value, dtype=np.float64).reshape(-1)
    if a.shape != (n,):
        raise ValueError(f"{name} must have {n} elements, got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or Inf")
    return a


def _finite_scalar(name: str, value: Any) -> float:
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} is NaN or Inf")
    return v


def flu_to_frd(v: Any) -> np.ndarray:
    """A body vector (e.g. body rates) from FLU (x forward, y left, z up) to FRD (x forward, y right,
    z down): (x, y, z) -> (x, -y, -z). Its own inverse."""
    a = _finite_vec("vector", v, 3)
    return np.array([a[0], -a[1], -a[2]])


def px4_thrust(accel: float, hover_thrust: float, gravity: float = GRAVITY) -> float:
    """Mass-normalised collective thrust (m/s^2) -> normalised thrust [0, 1] of SET_ATTITUDE_TARGET,
    linear through the hover point: `a * hover_thrust / gravity`, clipped to [0, 1]."""
    a = _finite_scalar("thrust", accel)
    return float(min(max(a * hover_thrust / gravity, 0.0), 1.0))


def crazyflie_rates_deg(rates_flu_rad_s: Any) -> tuple[float, float, float]:
    """FLU body rates (rad/s) -> the roll, pitch, yawrate arguments (deg/s) of cflib's
    `send_setpoint_manual(..., rate=True)`.

    The arguments are the FLU rates in deg/s, unchanged: cflib negates `pitch` on the wire, the
    firmware's manual decoder passes the packet's values through, and the PID rate controller
    compares (roll, pitch, yaw) with (gyro.x, -gyro.y, gyro.z), so the two negations cancel and
    a positive argument is a positive FLU rate on every axis (the bytes on the wire are
    (p, -q, r) in deg/s)."""
    r = _finite_vec("rates", rates_flu_rad_s, 3)
    return float(math.degrees(r[0])), float(math.degrees(r[1])), float(math.degrees(r[2]))


def crazyflie_thrust_percentage(pwm: float) -> float:
    """Raw thrust (PWM units) -> the thrust percentage of cflib's `send_setpoint_manual`, which
    sends `int(10001 + pct/100 * 49999)`: chosen so that the raw value on the wire is
    `round(pwm)` clipped to [10001, 60000] (cflib truncates, hence the +0.25)."""
    p = _finite_scalar("pwm", pwm)
    raw = min(max(round(p), CF_MANUAL_THRUST_MIN), CF_MANUAL_THRUST_MAX)
    if raw >= CF_MANUAL_THRUST_MAX:
        return 100.0
    pct = (raw + 0.25 - CF_MANUAL_THRUST_MIN) * 100.0 / (CF_MANUAL_THRUST_MAX - CF_MANUAL_THRUST_MIN)
    return float(min(max(pct, 0.0), 100.0))


@dataclass(frozen=True)
class MotorThrustModel:
    """Collective thrust (m/s^2) -> raw motor command (PWM, 0..65535) of a Crazyflie-like vehicle.

    Per motor, f(pwm) = c2 pwm^2 + c1 pwm + c0 newtons (`coefficients` = [c2, c1, c0]); the
    commanded collective thrust is split evenly over `motors`. The defaults are the Crazyflie 2.0
    identification of Förster (ETH Zurich, 2015) with a 32 g vehicle: measure your own."""

    mass_kg: float = 0.032
    coefficients: tuple[float, float, float] = (2.130295e-11, 1.032633e-6, 5.484560e-4)
    motors: int = 4
    pwm_max: float = CF_PWM_MAX

    def __post_init__(self) -> None:
        c2, c1, c0 = (float(c) for c in self.coefficients)
        if not all(math.isfinite(c) for c in (c2, c1, c0, self.mass_kg, self.pwm_max)):
            raise ValueError("thrust model values must be finite")
        if self.mass_kg <= 0 or self.motors < 1 or self.pwm_max <= 0:
            raise ValueError("thrust model: mass_kg > 0, motors >= 1 and pwm_max > 0 required")
        if c2 < 0 or c1 < 0 or (c2 == 0 and c1 == 0):
            raise ValueError("thrust model: f(pwm) must increase with pwm (c2 >= 0, c1 >= 0, not both 0)")

    def motor_force(self, pwm: float) -> float:
        c2, c1, c0 = self.coefficients
        return c2 * pwm * pwm + c1 * pwm + c0

    def max_accel(self) -> float:
        return self.motors * self.motor_force(self.pwm_max) / self.mass_kg

    def pwm(self, accel: float) -> float:
        """PWM for a mass-normalised collective thrust (m/s^2), clipped to [0, pwm_max]."""
        a = _finite_scalar("thrust", accel)
        f = max(a, 0.0) * self.mass_kg / self.motors
        c2, c1, c0 = self.coefficients
        if f <= c0:
            return 0.0
        if c2 == 0:
            p = (f - c0) / c1
        else:
            p = (-c1 + math.sqrt(c1 * c1 + 4.0 * c2 * (f - c0))) / (2.0 * c2)
        return float(min(max(p, 0.0), self.pwm_max))


# ---- geofence -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Geofence:
    """Axis-aligned box (metres, in the odometry's frame) the vehicle must stay in."""

    low: tuple[float, float, float]
    high: tuple[float, float, float]

    def __post_init__(self) -> None:
        lo, hi = _finite_vec("geofence.low", self.low, 3), _finite_vec("geofence.high", self.high, 3)
        if (lo >= hi).any():
            raise ValueError(f"geofence.low {lo.tolist()} must be below geofence.high {hi.tolist()} on every axis")
        object.__setattr__(self, "low", tuple(float(x) for x in lo))
        object.__setattr__(self, "high", tuple(float(x) for x in hi))

    def contains(self, position: Any) -> bool:
        p = _finite_vec("position", position, 3)
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
        p = _finite_vec("position", position, 3)
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


# ---- MAVLink (PX4 / ArduPilot) --------------------------------------------------------------------

# MAVLink constants used here (values from the common message set).
MAV_CMD_NAV_LAND = 21
MAV_CMD_DO_SET_MODE = 176
MAV_CMD_COMPONENT_ARM_DISARM = 400
MAV_MODE_FLAG_CUSTOM_MODE_ENABLED = 1
MAV_MODE_FLAG_SAFETY_ARMED = 128
MAV_RESULT_ACCEPTED = 0
MAV_RESULT_IN_PROGRESS = 5
MAV_RESULT_NAMES = {0: "ACCEPTED", 1: "TEMPORARILY_REJECTED", 2: "DENIED", 3: "UNSUPPORTED", 4: "FAILED",
                    5: "IN_PROGRESS", 6: "CANCELLED"}
MAV_TYPE_GCS = 6
MAV_TYPE_ONBOARD_CONTROLLER = 18
MAV_AUTOPILOT_INVALID = 8
MAV_STATE_ACTIVE = 4
ATTITUDE_TARGET_TYPEMASK_ATTITUDE_IGNORE = 128
FORCE_DISARM_MAGIC = 21196
"""param2 of MAV_CMD_COMPONENT_ARM_DISARM that disarms even in flight (PX4 and ArduPilot): a kill."""

PX4_MAIN_MODES = {1: "MANUAL", 2: "ALTCTL", 3: "POSCTL", 4: "AUTO", 5: "ACRO", 6: "OFFBOARD", 7: "STABILIZED",
                  8: "RATTITUDE"}
PX4_AUTO_SUB_MODES = {1: "READY", 2: "TAKEOFF", 3: "LOITER", 4: "MISSION", 5: "RTL", 6: "LAND", 8: "FOLLOW"}
PX4_OFFBOARD = 6
ARDUCOPTER_MODES = {0: "STABILIZE", 1: "ACRO", 2: "ALT_HOLD", 3: "AUTO", 4: "GUIDED", 5: "LOITER", 6: "RTL",
                    9: "LAND", 16: "POSHOLD", 17: "BRAKE", 20: "GUIDED_NOGPS"}
ARDUCOPTER_GUIDED = 4


def _mode_name(autopilot: str, custom_mode: int) -> str:
    if autopilot == "px4":
        main, sub = (custom_mode >> 16) & 0xFF, (custom_mode >> 24) & 0xFF
        name = PX4_MAIN_MODES.get(main, f"MAIN{main}")
        if main == 4:
            name += "." + PX4_AUTO_SUB_MODES.get(sub, f"SUB{sub}")
        return name
    return ARDUCOPTER_MODES.get(custom_mode, f"MODE{custom_mode}")


def _is_offboard(autopilot: str, custom_mode: int) -> bool:
    if autopilot == "px4":
        return (custom_mode >> 16) & 0xFF == PX4_OFFBOARD
    return custom_mode == ARDUCOPTER_GUIDED


@dataclass(frozen=True)
class MavlinkConfig:
    """Everything a `MavlinkLink` needs (the `mavlink:` section of the hardware YAML plus the
    shared safety settings)."""

    connection: str = "udpin:127.0.0.1:14550"
    """pymavlink connection string: `udpin:<ip>:<port>` (listen; PX4 SITL sends to 14550),
    `udpout:<ip>:<port>`, `tcp:<ip>:<port>`, or a serial device `/dev/ttyUSB0` with `baud`."""
    baud: int = 921600
    autopilot: str = "px4"
    """`px4` (mode OFFBOARD) or `ardupilot` (ArduCopter mode GUIDED; set GUID_OPTIONS bit 3 so that
    SET_ATTITUDE_TARGET's thrust is a thrust, not a climb rate)."""
    hover_thrust: float = 0.5
    gravity: float = GRAVITY
    source_system: int = 255
    source_component: int = 191  # MAV_COMP_ID_ONBOARD_COMPUTER
    target_system: int = 0
    """0: the first autopilot heard."""
    target_component: int = 0
    heartbeat_hz: float = 20.0
    link_timeout_s: float = 1.0
    setpoint_timeout_s: float = 0.3
    offboard_stream_s: float = 1.0
    stream_hz: float = 20.0
    ack_timeout_s: float = 1.0
    command_retries: int = 3
    estop_action: str = "land"
    mode_grace_s: float = 0.5
    """A vehicle leaving OFFBOARD/GUIDED this long after we took control counts as a pilot override."""
    geofence: Geofence | None = None

    def __post_init__(self) -> None:
        if self.autopilot not in ("px4", "ardupilot"):
            raise ValueError(f"mavlink.autopilot must be 'px4' or 'ardupilot', got {self.autopilot!r}")
        if self.estop_action not in ("land", "kill"):
            raise ValueError(f"estop_action must be 'land' or 'kill' for MAVLink, got {self.estop_action!r}")
        if not isinstance(self.connection, str) or not self.connection:
            raise ValueError("connection must be a non-empty pymavlink connection string")
        if not 0.05 <= self.hover_thrust <= 0.95:
            raise ValueError(f"mavlink.hover_thrust must be in [0.05, 0.95], got {self.hover_thrust}")
        if not 1.0 <= self.gravity <= 20.0:
            raise ValueError(f"gravity must be in [1, 20] m/s^2, got {self.gravity}")
        if self.heartbeat_hz < 10.0:
            raise ValueError(f"mavlink.heartbeat_hz must be >= 10, got {self.heartbeat_hz}")
        if self.offboard_stream_s < 1.0:
            raise ValueError(f"mavlink.offboard_stream_s must be >= 1 s (PX4 needs a setpoint stream before "
                             f"OFFBOARD), got {self.offboard_stream_s}")
        if self.stream_hz < 2.0:
            raise ValueError(f"mavlink.stream_hz must be >= 2 (PX4's offboard minimum), got {self.stream_hz}")
        for name in ("link_timeout_s", "setpoint_timeout_s", "ack_timeout_s", "mode_grace_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be > 0, got {value}")
        if not 1 <= self.command_retries <= 20:
            raise ValueError(f"mavlink.command_retries must be in [1, 20], got {self.command_retries}")
        for name in ("source_system", "target_system"):
            if not 0 <= getattr(self, name) <= 255:
                raise ValueError(f"mavlink.{name} must be in [0, 255]")

    @property
    def max_accel(self) -> float:
        return self.gravity / self.hover_thrust


class MavlinkLink(QuadLink):
    """A PX4 / ArduPilot vehicle over MAVLink (pymavlink), commanded with SET_ATTITUDE_TARGET body
    rates + thrust (attitude ignored).

    Its thread sends our HEARTBEAT at `heartbeat_hz` (MAV_TYPE_ONBOARD_CONTROLLER), parses
    everything the vehicle sends (HEARTBEAT: armed flag, mode; COMMAND_ACK; STATUSTEXT), re-sends
    an unacknowledged land / kill, and runs the setpoint watchdog and the lost-link check.
    Sending is serialised by a lock; only the link thread receives."""

    kind = "mavlink"
    safe_action = "land"

    def __init__(self, config: MavlinkConfig):
        super().__init__(config.geofence, config.setpoint_timeout_s, config.estop_action)
        self.config = config
        self._conn: Any = None
        self._send_lock = threading.Lock()
        self._ack_cv = threading.Condition(self._lock)
        self._acks: dict[int, tuple[int, float]] = {}
        self._t0 = time.monotonic()
        self._target = (config.target_system, config.target_component)
        self._vehicle_heartbeat: float | None = None
        self._vehicle_armed: bool | None = None
        self._custom_mode: int | None = None
        self._arm_sent = False
        # command -> [params, next retry time, retries left, confirmation]
        self._pending: dict[int, list[Any]] = {}
        self.last_statustext = ""

    # -- connection ---------------------------------------------------------------------------------

    def connect(self, wait_s: float = 0.0) -> bool:
        if self._conn is None:
            from pymavlink import mavutil

            cfg = self.config
            try:
                self._conn = mavutil.mavlink_connection(cfg.connection, baud=cfg.baud, source_system=cfg.source_system,
                                                        source_component=cfg.source_component)
            except Exception as exc:  # noqa: BLE001 - socket/serial errors of any kind
                raise LinkError(f"cannot open {cfg.connection!r}: {exc}") from None
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="mavlink-link", daemon=True)
            self._thread.start()
        end = time.monotonic() + max(wait_s, 0.0)
        with self._lock:
            while not self._connected and time.monotonic() < end:
                self._ack_cv.wait(timeout=max(0.0, min(0.05, end - time.monotonic())))
            return self._connected

    def _close_transport(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    # -- sending ------------------------------------------------------------------------------------

    def _time_boot_ms(self) -> int:
        return int((time.monotonic() - self._t0) * 1000.0) & 0xFFFFFFFF

    def _send_setpoint(self, thrust01: float, rates_frd: np.ndarray) -> None:
        ts, tc = self._target
        with self._send_lock:
            self._conn.mav.set_attitude_target_send(
                self._time_boot_ms(), ts, tc, ATTITUDE_TARGET_TYPEMASK_ATTITUDE_IGNORE, [1.0, 0.0, 0.0, 0.0],
                float(rates_frd[0]), float(rates_frd[1]), float(rates_frd[2]), float(thrust01))
        self.counters["setpoints_sent"] += 1

    def _send_command(self, command: int, params: Sequence[float], confirmation: int = 0) -> None:
        ts, tc = self._target
        p = [float(x) for x in params] + [0.0] * (7 - len(params))
        with self._send_lock:
            self._conn.mav.command_long_send(ts, tc, command, confirmation, *p)
        self.counters[f"cmd_{command}_sent"] += 1

    def _send_with_retry(self, command: int, params: Sequence[float]) -> None:
        """Sends a COMMAND_LONG now and lets the link thread re-send it until it is acknowledged
        (call with the lock held)."""
        self._acks.pop(command, None)
        self._send_command(command, params)
        retry = min(0.3, self.config.ack_timeout_s)
        self._pending[command] = [list(params), time.monotonic() + retry, self.config.command_retries, 0]

    def send_heartbeat(self) -> bool:
        if self._conn is None:
            return False
        with self._send_lock:
            self._conn.mav.heartbeat_send(MAV_TYPE_ONBOARD_CONTROLLER, MAV_AUTOPILOT_INVALID, 0, 0, MAV_STATE_ACTIVE)
        self.counters["heartbeats_sent"] += 1
        return True

    def send_ctbr(self, thrust_normalised: float, rates_rad_s: Sequence[float]) -> bool:
        frd = flu_to_frd(rates_rad_s)
        thrust01 = px4_thrust(thrust_normalised, self.config.hover_thrust, self.config.gravity)
        with self._lock:
            if self._state != FLYING or self._conn is None:
                return False
            self._send_setpoint(thrust01, frd)
            self._last_setpoint = time.monotonic()
            return True

    # -- start sequence -----------------------------------------------------------------------------

    def arm(self, timeout_s: float | None = None) -> None:
        """The offboard sequence, blocking: stream neutral setpoints for `offboard_stream_s`
        (thrust 0 on a disarmed vehicle, hover thrust on an armed one; zero rates), request
        OFFBOARD (PX4) / GUIDED (ArduPilot) with MAV_CMD_DO_SET_MODE and wait for its COMMAND_ACK,
        then arm with MAV_CMD_COMPONENT_ARM_DISARM (unless the vehicle already is) and wait for
        that ACK, streaming all along. Then the link is `flying` and `send_ctbr` takes over.
        Raises LinkError on a refusal, a missing ACK or an abort (safe_stop/estop/land/close)."""
        cfg = self.config
        with self._lock:
            if self._state == FLYING:
                return
            self._check_can_arm()
            self._state = ARMING
            self._abort.clear()
            self._arm_sent = False
            self._estopped = False
            self.counters["arm_attempts"] += 1
        try:
            neutral = cfg.hover_thrust if self._vehicle_armed else 0.0
            stream_period = 1.0 / cfg.stream_hz
            next_stream = time.monotonic()

            def stream() -> None:
                nonlocal next_stream
                now = time.monotonic()
                if now >= next_stream:
                    with self._lock:
                        self._check_arming()
                        self._send_setpoint(neutral, np.zeros(3))
                    next_stream = max(next_stream + stream_period, now)

            end = time.monotonic() + cfg.offboard_stream_s
            while time.monotonic() < end:
                stream()
                if self._abort.wait(timeout=max(0.0, min(next_stream, end) - time.monotonic())):
                    self._check_arming()
            if cfg.autopilot == "px4":
                mode = [MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, PX4_OFFBOARD, 0]
            else:
                mode = [MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, ARDUCOPTER_GUIDED, 0]
            self._command_with_ack(MAV_CMD_DO_SET_MODE, mode, stream, "set mode")
            if not self._vehicle_armed:
                self._arm_sent = True
                self._command_with_ack(MAV_CMD_COMPONENT_ARM_DISARM, [1, 0], stream, "arm")
            with self._lock:
                self._check_arming()
                self._state = FLYING
                self._last_setpoint = time.monotonic()
                self.counters["armed"] += 1
        except LinkError as exc:
            with self._lock:
                if self._state == ARMING:
                    self._state = IDLE if self._connected else DISCONNECTED
                    if self._arm_sent and not isinstance(exc, CommandRefused):
                        # the arm command went unanswered: the vehicle may be armed without a stream
                        self.land("arm_failed")
                self.counters["arm_failures"] += 1
                self.last_error = f"arm: {exc}"
            raise

    def _check_arming(self) -> None:
        if self._abort.is_set() or self._state != ARMING:
            raise LinkError(f"arming aborted ({self.last_safe_reason or self._state})")

    def _command_with_ack(self, command: int, params: Sequence[float], stream, what: str) -> None:
        cfg = self.config
        for attempt in range(cfg.command_retries):
            with self._lock:
                self._check_arming()
                self._acks.pop(command, None)
                self._send_command(command, params, confirmation=attempt)
            deadline = time.monotonic() + cfg.ack_timeout_s
            while True:
                stream()
                with self._lock:
                    ack = self._acks.get(command)
                    if ack is not None and ack[0] != MAV_RESULT_IN_PROGRESS:
                        if ack[0] == MAV_RESULT_ACCEPTED:
                            return
                        raise CommandRefused(f"{what} refused by the vehicle: {MAV_RESULT_NAMES.get(ack[0], ack[0])}"
                                        + (f" ({self.last_statustext})" if self.last_statustext else ""))
                    if ack is not None:  # in progress: the vehicle is working on it
                        deadline = max(deadline, ack[1] + cfg.ack_timeout_s)
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._ack_cv.wait(timeout=min(remaining, 1.0 / cfg.stream_hz))
                    self._check_arming()
        raise LinkError(f"{what}: no COMMAND_ACK after {cfg.command_retries} tries")

    # -- safe actions -------------------------------------------------------------------------------

    def land(self, reason: str = "land") -> bool:
        """MAV_CMD_NAV_LAND at the current position (re-sent until acknowledged). Idempotent."""
        with self._lock:
            if self._conn is None or self._state in (LANDING, KILLED, CLOSED):
                return False
            self._abort.set()
            self._state = LANDING
            self.last_safe_reason = reason
            self.counters["lands"] += 1
            self.counters[f"land_{reason}"] += 1
            nan = float("nan")
            self._send_with_retry(MAV_CMD_NAV_LAND, [0, 0, 0, nan, nan, nan, nan])
            return True

    def disarm(self, kill: bool = False) -> bool:
        """MAV_CMD_COMPONENT_ARM_DISARM(0); `kill`: forced (param2 21196), which stops the motors
        even in flight. Re-sent until acknowledged."""
        with self._lock:
            if self._conn is None or self._state == CLOSED:
                return False
            self._abort.set()
            self._state = KILLED if kill else STOPPED
            self._pending.pop(MAV_CMD_NAV_LAND, None)
            self.counters["kills" if kill else "disarms"] += 1
            self._send_with_retry(MAV_CMD_COMPONENT_ARM_DISARM, [0, FORCE_DISARM_MAGIC if kill else 0])
            return True

    def estop(self) -> bool:
        """E-stop: land (or, with `estop_action: kill`, a forced disarm) whenever the vehicle may
        be flying: we control it or it reports itself armed. Idempotent until the next `arm()`."""
        with self._lock:
            self._abort.set()
            first = not self._estopped
            self._estopped = True
            if first:
                self.counters["estops"] += 1
            self.last_safe_reason = "estop"
            if self.estop_action == "kill":
                if self._state == KILLED:
                    return False
                return self.disarm(kill=True)
            if self._state == ARMING and not self._arm_sent and not self._vehicle_armed:
                self._state = IDLE  # aborted before anything could spin up
                return False
            if self._state in CONTROLLING or self._vehicle_armed:
                return self.land("estop")
            return False

    def safe_stop(self, reason: str) -> bool:
        with self._lock:
            if self._state == ARMING and not self._arm_sent and not self._vehicle_armed:
                self._abort.set()  # still on the ground, disarmed: abort the sequence, nothing to land
                self.last_safe_reason = reason
                self._state = IDLE
                return False
        return super().safe_stop(reason)

    # -- the link thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        period = 1.0 / self.config.heartbeat_hz
        next_heartbeat = time.monotonic()
        fd = getattr(self._conn, "fd", None)
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if now >= next_heartbeat:
                    self.send_heartbeat()
                    next_heartbeat += period
                    if next_heartbeat < now:  # fell behind (suspended): restart the schedule
                        next_heartbeat = now + period
                self._watchdogs(now)
                timeout = max(0.0, min(next_heartbeat - time.monotonic(), 0.01))
                if fd is not None:
                    ready, _, _ = select.select([fd], [], [], timeout)
                    if not ready:
                        continue
                else:
                    time.sleep(timeout)
                for _ in range(200):
                    msg = self._conn.recv_msg()
                    if msg is None:
                        break
                    self._handle(msg)
            except Exception as exc:  # noqa: BLE001 - the link thread must keep heart-beating
                if self._stop.is_set():
                    break
                self._note_error(f"mavlink link thread: {type(exc).__name__}: {exc}")
                time.sleep(0.01)

    def _watchdogs(self, now: float) -> None:
        with self._lock:
            hb = self._vehicle_heartbeat
            if self._connected and hb is not None and now - hb > self.config.link_timeout_s:
                self._connected = False
                self.counters["link_lost"] += 1
                self.last_error = f"no vehicle heartbeat for {now - hb:.2f} s"
                log.error(self.last_error)
                if self._state in CONTROLLING:
                    self.land("link_lost")  # blind: it may still get through
            if self._stale(now):
                self.counters["stale_setpoints"] += 1
                self.land("stale_setpoints")
            for command, entry in list(self._pending.items()):
                params, due, left, confirmation = entry
                if now < due:
                    continue
                if left <= 0:
                    del self._pending[command]
                    self._note_error(f"command {command}: no COMMAND_ACK")
                    continue
                entry[1], entry[2], entry[3] = now + min(0.3, self.config.ack_timeout_s), left - 1, confirmation + 1
                self._send_command(command, params, confirmation=min(confirmation + 1, 255))

    def _handle(self, msg: Any) -> None:
        kind = msg.get_type()
        if kind == "HEARTBEAT":
            self._on_heartbeat(msg)
        elif kind == "COMMAND_ACK":
            with self._lock:
                self._acks[int(msg.command)] = (int(msg.result), time.monotonic())
                if int(msg.result) != MAV_RESULT_IN_PROGRESS:
                    self._pending.pop(int(msg.command), None)
                self.counters["acks"] += 1
                self._ack_cv.notify_all()
        elif kind == "STATUSTEXT":
            self.last_statustext = str(getattr(msg, "text", ""))

    def _on_heartbeat(self, msg: Any) -> None:
        if msg.type in (MAV_TYPE_GCS, MAV_TYPE_ONBOARD_CONTROLLER) or msg.autopilot == MAV_AUTOPILOT_INVALID:
            return  # another ground station or companion computer
        sysid, compid = msg.get_srcSystem(), msg.get_srcComponent()
        with self._lock:
            ts, tc = self._target
            if ts and sysid != ts:
                return
            if ts == 0:
                self._target = (sysid, tc or compid)
            elif tc == 0:
                self._target = (ts, compid)
            now = time.monotonic()
            self._vehicle_heartbeat = now
            armed = bool(msg.base_mode & MAV_MODE_FLAG_SAFETY_ARMED)
            self._vehicle_armed = armed
            self._custom_mode = int(msg.custom_mode)
            self.counters["vehicle_heartbeats"] += 1
            if not self._connected:
                self._connected = True
                if self._state == DISCONNECTED:
                    self._state = IDLE
                self._ack_cv.notify_all()
            # A heartbeat sent before the vehicle acted on our last command may arrive after its
            # COMMAND_ACK: states younger than mode_grace_s ignore what it says.
            settled = now - self._state_since > self.config.mode_grace_s
            if not armed and self._state in (LANDING, STOPPED, KILLED) and settled:
                self._state = IDLE  # landed / disarmed: ready for the next start sequence
                self._pending.clear()
            elif not armed and self._state == FLYING and settled:
                self._state = IDLE
                self.counters["disarmed_externally"] += 1
                self.last_error = "the vehicle disarmed while we were flying it"
            elif self._state == FLYING and settled and not _is_offboard(self.config.autopilot, self._custom_mode):
                self._state = IDLE  # a pilot took over: stop streaming, never take it back by ourselves
                self.counters["mode_overrides"] += 1
                self.last_error = f"vehicle left offboard control (mode {self._mode()})"
                log.warning(self.last_error)

    def _mode(self) -> str:
        return "" if self._custom_mode is None else _mode_name(self.config.autopilot, self._custom_mode)

    def status(self) -> LinkStatus:
        with self._lock:
            st = super().status()
            st.armed = self._vehicle_armed
            st.mode = self._mode()
            if self._vehicle_heartbeat is not None:
                st.heartbeat_age_s = time.monotonic() - self._vehicle_heartbeat
            return st


# ---- Crazyflie (cflib) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CrazyflieConfig:
    """Everything a `CrazyflieLink` needs (the `crazyflie:` section of the hardware YAML)."""

    uri: str = "radio://0/80/2M"
    thrust_model: MotorThrustModel = field(default_factory=MotorThrustModel)
    setpoint_timeout_s: float = 0.2
    estop_action: str = "stop"
    """`stop`: a stop setpoint (motors off). `kill`: also the supervisor's emergency stop, which
    locks the Crazyflie until it is rebooted."""
    arming_request: bool = True
    """Send the supervisor's arming request in `arm()` (firmwares that require arming)."""
    geofence: Geofence | None = None

    def __post_init__(self) -> None:
        if self.estop_action not in ("stop", "kill"):
            raise ValueError(f"estop_action must be 'stop' or 'kill' for a Crazyflie, got {self.estop_action!r}")
        if not isinstance(self.uri, str) or not self.uri:
            raise ValueError("uri must be a non-empty cflib URI, e.g. radio://0/80/2M")
        if not (math.isfinite(self.setpoint_timeout_s) and 0 < self.setpoint_timeout_s <= 0.5):
            raise ValueError("setpoint_timeout_s must be in (0, 0.5] (the firmware levels after 0.5 s)")


class CrazyflieLink(QuadLink):
    """A Crazyflie 2.x over cflib, commanded with `Commander.send_setpoint_manual(roll_rate,
    pitch_rate, yaw_rate, thrust_percentage, rate=True)`: CRTP port COMMANDER_GENERIC, packet type
    11 (manual), `<BfffHB` = type, roll, -pitch (deg/s), yaw (deg/s), raw thrust, rate flag. Needs
    a firmware whose generic commander decodes the manual setpoint type (type 11).

    Mapping: rates as in `crazyflie_rates_deg`; thrust m/s^2 -> PWM by the `MotorThrustModel`
    -> `crazyflie_thrust_percentage` (the manual setpoint covers raw 10001..60000 only: 0 m/s^2 is
    sent as 10001 = idle, and the top 60000..65535 is not reachable).

    Watchdog semantics: the firmware's commander watchdog levels the vehicle (attitude 0) 500 ms
    after the last setpoint and cuts the motors after 2 s. This link sends a stop setpoint itself
    `setpoint_timeout_s` (<= 0.5 s) after the last `send_ctbr`, on `safe_stop`, `land` and `estop`.
    There is no autonomous land in rate mode: the safe action cuts the motors (fly over a net).
    `send_heartbeat` sends nothing: the setpoint stream is the Crazyflie's heartbeat.

    `crazyflie`: an already-built `cflib.crazyflie.Crazyflie` (or any object with `send_packet`,
    e.g. a test double) instead of opening `uri`."""

    kind = "crazyflie"
    safe_action = "stop"

    def __init__(self, config: CrazyflieConfig, crazyflie: Any = None):
        super().__init__(config.geofence, config.setpoint_timeout_s, config.estop_action)
        self.config = config
        self._cf = crazyflie
        self._owns_cf = crazyflie is None
        self._commander: Any = None

    def connect(self, wait_s: float = 0.0) -> bool:
        from cflib.crazyflie.commander import Commander

        if not hasattr(Commander, "send_setpoint_manual"):
            raise LinkError("this cflib has no Commander.send_setpoint_manual (body-rate setpoints): "
                            "install a newer cflib (tested with 0.1.34)")
        if self._commander is None:
            if self._cf is None:
                try:
                    import cflib.crtp
                    from cflib.crazyflie import Crazyflie

                    cflib.crtp.init_drivers()
                    self._cf = Crazyflie(rw_cache=None)
                    self._watch_callbacks(self._cf)
                    self._cf.open_link(self.config.uri)
                except Exception as exc:  # noqa: BLE001 - radio / USB errors
                    raise LinkError(f"cannot open {self.config.uri!r}: {exc}") from None
            else:
                self._watch_callbacks(self._cf)
                with self._lock:
                    self._connected = getattr(self._cf, "link", True) is not None
                    if self._connected and self._state == DISCONNECTED:
                        self._state = IDLE
            commander = getattr(self._cf, "commander", None)
            self._commander = commander if isinstance(commander, Commander) else Commander(self._cf)
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="crazyflie-link", daemon=True)
            self._thread.start()
        end = time.monotonic() + max(wait_s, 0.0)
        while not self._connected and time.monotonic() < end:
            time.sleep(0.02)
        return self._connected

    def _watch_callbacks(self, cf: Any) -> None:
        for name, callback in (("connected", self._on_connected), ("connection_lost", self._on_lost),
                               ("connection_failed", self._on_lost), ("disconnected", self._on_lost)):
            caller = getattr(cf, name, None)
            if caller is not None and hasattr(caller, "add_callback"):
                caller.add_callback(callback)

    def _on_connected(self, *_: Any) -> None:
        with self._lock:
            self._connected = True
            if self._state == DISCONNECTED:
                self._state = IDLE

    def _on_lost(self, *args: Any) -> None:
        with self._lock:
            if self._connected:
                self.counters["link_lost"] += 1
                self.last_error = f"link lost: {args[-1] if args else ''}"
            self._connected = False
            if self._state in CONTROLLING:  # nothing gets through; the firmware watchdog takes over
                self._abort.set()
                self._state = STOPPED
                self.last_safe_reason = "link_lost"
            elif self._state != CLOSED:
                self._state = DISCONNECTED

    # -- sending ------------------------------------------------------------------------------------

    def send_ctbr(self, thrust_normalised: float, rates_rad_s: Sequence[float]) -> bool:
        roll, pitch, yaw = crazyflie_rates_deg(rates_rad_s)
        pct = crazyflie_thrust_percentage(self.config.thrust_model.pwm(thrust_normalised))
        with self._lock:
            if self._state != FLYING:
                return False
            self._commander.send_setpoint_manual(roll, pitch, yaw, pct, True)
            self._last_setpoint = time.monotonic()
            self.counters["setpoints_sent"] += 1
            return True

    def send_heartbeat(self) -> bool:
        return False  # the setpoint stream is the heartbeat (commander watchdog)

    def arm(self, timeout_s: float | None = None) -> None:
        """Unlocks the thrust lock (one zero setpoint), sends the supervisor's arming request and
        takes control: `send_ctbr` setpoints are sent from now on (the first one must follow
        within `setpoint_timeout_s`)."""
        with self._lock:
            if self._state == FLYING:
                return
            if self._state == STOPPED and self._connected:
                self._state = IDLE
            self._check_can_arm()
            self._abort.clear()
            self._estopped = False
            self.counters["arm_attempts"] += 1
            try:
                self._commander.send_setpoint(0.0, 0.0, 0.0, 0)
                if self.config.arming_request and hasattr(self._cf, "supervisor"):
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        self._cf.supervisor.send_arming_request(True)
                    for w in caught:  # e.g. old firmware: cflib falls back to the legacy platform request
                        log.warning("cflib: %s", w.message)
            except Exception as exc:  # noqa: BLE001
                self.counters["arm_failures"] += 1
                raise LinkError(f"arming failed: {exc}") from None
            self._state = FLYING
            self._last_setpoint = time.monotonic()
            self.counters["armed"] += 1

    def _stop_setpoint(self, reason: str, state: str) -> bool:
        with self._lock:
            if self._commander is None or self._state == CLOSED:
                return False
            self._abort.set()
            self._commander.send_stop_setpoint()
            self._state = state
            self.last_safe_reason = reason
            self.counters["stops"] += 1
            self.counters[f"stop_{reason}"] += 1
            return True

    def land(self, reason: str = "land") -> bool:
        """No autonomous landing in rate mode: a stop setpoint (motors off). Idempotent."""
        with self._lock:
            if self._state in (STOPPED, KILLED, CLOSED, DISCONNECTED):
                return False
            return self._stop_setpoint(reason, STOPPED)

    def disarm(self, kill: bool = False) -> bool:
        with self._lock:
            if self._commander is None or self._state == CLOSED:
                return False
            sent = self._stop_setpoint("kill" if kill else "disarm", KILLED if kill else STOPPED)
            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")  # cflib's legacy-firmware notes: not now, mid-stop
                supervisor = getattr(self._cf, "supervisor", None)
                try:
                    if kill and supervisor is not None:
                        supervisor.send_emergency_stop()
                    elif supervisor is not None and self.config.arming_request:
                        supervisor.send_arming_request(False)
                except Exception as exc:  # noqa: BLE001
                    self._note_error(f"disarm: {exc}")
            return sent

    def estop(self) -> bool:
        """Always a stop setpoint (even when we do not control the vehicle: it costs nothing), plus
        the emergency stop with `estop_action: kill`. Idempotent until the next `arm()`."""
        with self._lock:
            if self._estopped and self._state in (STOPPED, KILLED):
                return False
            self._estopped = True
            self.counters["estops"] += 1
            if self.estop_action == "kill":
                return self.disarm(kill=True)
            return self._stop_setpoint("estop", STOPPED)

    def _close_transport(self) -> None:
        if self._owns_cf and self._cf is not None:
            self._cf.close_link()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            try:
                with self._lock:
                    if self._stale(time.monotonic()):
                        self.counters["stale_setpoints"] += 1
                        self._stop_setpoint("stale_setpoints", STOPPED)
            except Exception as exc:  # noqa: BLE001
                self._note_error(f"crazyflie link thread: {type(exc).__name__}: {exc}")


# ---- hardware description -------------------------------------------------------------------------


@dataclass(frozen=True)
class QuadHardware:
    """A checked hardware/<quad>.yaml."""

    name: str
    source: str
    link: str
    connection: str
    command_frame: str
    thrust_limits: tuple[float, float]
    max_rates: np.ndarray
    state_frame: str
    odom_topic: str
    ball_topic: str
    observation_odom_topic: str
    observation_ball_topic: str
    geofence: Geofence | None
    estop_action: str
    mavlink: MavlinkConfig | None
    crazyflie: CrazyflieConfig | None

    def link_config(self, connection: str = "") -> MavlinkConfig | CrazyflieConfig:
        """The link's configuration, with `connection` (if given) replacing the YAML's."""
        from dataclasses import replace

        if self.mavlink is not None:
            return replace(self.mavlink, connection=connection) if connection else self.mavlink
        return replace(self.crazyflie, uri=connection) if connection else self.crazyflie


COMMAND_THRUST_RANGE = (0.0, 15.0)
"""What quad/cmd_ctbr's thrust (m/s^2) may span; a YAML's limits must lie inside."""
COMMAND_MAX_RATE = math.pi
"""Body-rate magnitude limit (rad/s) of quad/cmd_ctbr; a YAML's limits must be at most this."""


def load_quad_hardware(name_or_path: str, share_dir: Path | None = None) -> QuadHardware:
    """Reads and checks a quadrotor hardware YAML; raises ValueError naming the file and the bad field."""
    return load_hardware_file(name_or_path, parse_quad_hardware, share_dir)


def _vector(section: dict, key: str, n: int, where: str, default: Any = None) -> np.ndarray:
    value = section.get(key, default)
    try:
        return _finite_vec(f"{where}.{key}", value, n)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}.{key} must be {n} finite numbers ({exc})") from None


def parse_quad_hardware(data: Any, name: str = "quad", source: str = "") -> QuadHardware:
    if not isinstance(data, dict):
        raise ValueError("the hardware description must be a mapping")
    link = data.get("link")
    if link not in ("mavlink", "crazyflie"):
        raise ValueError(f"link must be 'mavlink' or 'crazyflie', got {link!r}")
    connection = string_field(data, "connection", "", "")
    command, state = section_field(data, "command"), section_field(data, "state")
    obs = section_field(data, "observation")
    safety = section_field(data, "safety")

    thrust = _vector(command, "thrust", 2, "command", COMMAND_THRUST_RANGE)
    lo_t, hi_t = COMMAND_THRUST_RANGE
    if not lo_t <= thrust[0] < thrust[1] <= hi_t:
        raise ValueError(f"command.thrust must be [low, high] with {lo_t} <= low < high <= {hi_t} m/s^2, "
                         f"got {thrust.tolist()}")
    rates = _vector(command, "max_rate", 3, "command", [COMMAND_MAX_RATE] * 3)
    if (rates <= 0).any() or (rates > COMMAND_MAX_RATE + 1e-9).any():
        raise ValueError(f"command.max_rate must be in (0, pi] rad/s per axis, got {rates.tolist()}")

    fence = None
    fence_data = data.get("geofence")
    if fence_data is not None:
        if not isinstance(fence_data, dict):
            raise ValueError("geofence must be a mapping with low and high")
        try:
            fence = Geofence(tuple(_vector(fence_data, "low", 3, "geofence")),
                             tuple(_vector(fence_data, "high", 3, "geofence")))
        except ValueError as exc:
            raise ValueError(str(exc) if "geofence" in str(exc) else f"geofence: {exc}") from None

    setpoint_timeout = number_field(safety, "setpoint_timeout_s", 0.3 if link == "mavlink" else 0.2, "safety",
                                    0.01, 5.0)
    estop_action = string_field(safety, "estop_action", "land" if link == "mavlink" else "stop", "safety")
    mav = cf = None
    if link == "mavlink":
        m = section_field(data, "mavlink")
        try:
            mav = MavlinkConfig(
                connection=connection, baud=int(number_field(m, "baud", 921600, "mavlink", 1200, 10_000_000)),
                autopilot=string_field(m, "autopilot", "px4", "mavlink"),
                hover_thrust=number_field(m, "hover_thrust", 0.5, "mavlink", 0.05, 0.95),
                gravity=number_field(m, "gravity", GRAVITY, "mavlink", 1.0, 20.0),
                source_system=int(number_field(m, "source_system", 255, "mavlink", 1, 255)),
                source_component=int(number_field(m, "source_component", 191, "mavlink", 0, 255)),
                target_system=int(number_field(m, "target_system", 0, "mavlink", 0, 255)),
                target_component=int(number_field(m, "target_component", 0, "mavlink", 0, 255)),
                heartbeat_hz=number_field(m, "heartbeat_hz", 20.0, "mavlink", 10.0, 100.0),
                link_timeout_s=number_field(safety, "link_timeout_s", 1.0, "safety", 0.1, 30.0),
                setpoint_timeout_s=setpoint_timeout,
                offboard_stream_s=number_field(m, "offboard_stream_s", 1.0, "mavlink", 1.0, 10.0),
                stream_hz=number_field(m, "stream_hz", 20.0, "mavlink", 2.0, 200.0),
                ack_timeout_s=number_field(m, "ack_timeout_s", 1.0, "mavlink", 0.05, 10.0),
                command_retries=int(number_field(m, "command_retries", 3, "mavlink", 1, 20)),
                estop_action=estop_action, geofence=fence)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
    else:
        c = section_field(data, "crazyflie")
        model = section_field(c, "thrust_model")
        try:
            coeffs = _vector(model, "coefficients", 3, "crazyflie.thrust_model", MotorThrustModel().coefficients)
            thrust_model = MotorThrustModel(
                mass_kg=number_field(model, "mass_kg", 0.032, "crazyflie.thrust_model", 0.005, 5.0),
                coefficients=tuple(float(x) for x in coeffs),
                motors=int(number_field(model, "motors", 4, "crazyflie.thrust_model", 1, 8)))
            if thrust_model.max_accel() < thrust[1]:
                raise ValueError(f"crazyflie.thrust_model reaches only {thrust_model.max_accel():.2f} m/s^2 at full "
                                 f"PWM: lower command.thrust's high limit ({thrust[1]:g})")
            arming = c.get("arming_request", True)
            if not isinstance(arming, bool):
                raise ValueError("crazyflie.arming_request must be true or false")
            cf = CrazyflieConfig(uri=connection, thrust_model=thrust_model, setpoint_timeout_s=setpoint_timeout,
                                 estop_action=estop_action, arming_request=arming, geofence=fence)
        except ValueError as exc:
            raise ValueError(str(exc) if "crazyflie" in str(exc) or "estop" in str(exc) or "setpoint" in str(exc)
                             else f"crazyflie: {exc}") from None
    return QuadHardware(
        name=name, source=source, link=link, connection=connection,
        command_frame=string_field(command, "frame", "base_link", "command"),
        thrust_limits=(float(thrust[0]), float(thrust[1])), max_rates=rates,
        state_frame=string_field(state, "frame", "map", "state"),
        odom_topic=string_field(state, "odom_topic", "quad/odom", "state"),
        ball_topic=string_field(state, "ball_topic", "ball/pose", "state", allow_empty=True),
        observation_odom_topic=string_field(obs, "odom_topic", "", "observation", allow_empty=True),
        observation_ball_topic=string_field(obs, "ball_topic", "", "observation", allow_empty=True),
        geofence=fence, estop_action=estop_action, mavlink=mav, crazyflie=cf)


def make_link(hw: QuadHardware, connection: str = "", crazyflie: Any = None) -> QuadLink:
    """The link a hardware description names (not connected yet)."""
    config = hw.link_config(connection)
    if isinstance(config, MavlinkConfig):
        return MavlinkLink(config)
    return CrazyflieLink(config, crazyflie)
