"""A PX4 / ArduPilot vehicle over MAVLink (pymavlink): the `MavlinkLink` and the conversions it needs.

Conversions (hand-checkable, see tests/test_quadrotor.py):
- FLU -> FRD body rates: (p, q, r) -> (p, -q, -r) (MAVLink body rates are FRD).
- PX4/ArduPilot thrust: `thrust_01 = clip(a * hover_thrust / g, 0, 1)`, i.e. linear with the
  normalised hover thrust at a = g (PX4 MPC_THR_HOVER / ArduCopter MOT_THST_HOVER); the largest
  acceleration is g / hover_thrust.
"""

from __future__ import annotations

import logging
import math
import select
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from robot_rl.control.checks import finite
from robot_rl.robots.quad.links.link import (
    ARMING, CLOSED, CONTROLLING, DISCONNECTED, FLYING, IDLE, KILLED, LANDING, STOPPED, CommandRefused, Geofence,
    LinkError, LinkStatus, QuadLink,
)

log = logging.getLogger(__name__)

GRAVITY = 9.80665
"""Standard gravity (m/s^2), the default `gravity` of the thrust mapping."""


def flu_to_frd(v: Any) -> np.ndarray:
    """A body vector (e.g. body rates) from FLU (x forward, y left, z up) to FRD (x forward, y right,
    z down): (x, y, z) -> (x, -y, -z). Its own inverse."""
    a = finite("vector", v, 3)
    return np.array([a[0], -a[1], -a[2]])


def px4_thrust(accel: float, hover_thrust: float, gravity: float = GRAVITY) -> float:
    """Mass-normalised collective thrust (m/s^2) -> normalised thrust [0, 1] of SET_ATTITUDE_TARGET,
    linear through the hover point: `a * hover_thrust / gravity`, clipped to [0, 1]."""
    a = float(finite("thrust", accel, 1)[0])
    return float(min(max(a * hover_thrust / gravity, 0.0), 1.0))


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

