"""A Crazyflie 2.x over cflib: the `CrazyflieLink`, its thrust model and the conversions it needs.

Conversions (hand-checkable, see tests/test_quadrotor.py): `MotorThrustModel`: a -> total force
m*a -> per-motor force -> PWM (0..65535) by inverting a quadratic per-motor fit
f(pwm) = c2 pwm^2 + c1 pwm + c0 [N]; then the PWM -> the thrust percentage of cflib's
`send_setpoint_manual` (which maps 0..100 % to 10001..60000).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

from robot_rl.control.checks import finite
from robot_rl.robots.quad.links.link import (
    CLOSED, CONTROLLING, DISCONNECTED, FLYING, IDLE, KILLED, STOPPED, Geofence, LinkError, QuadLink,
)

log = logging.getLogger(__name__)

# cflib's Commander.send_setpoint_manual maps thrust 0..100 % linearly to these raw values.
CF_MANUAL_THRUST_MIN = 10001
CF_MANUAL_THRUST_MAX = 60000
CF_PWM_MAX = 65535


def crazyflie_rates_deg(rates_flu_rad_s: Any) -> tuple[float, float, float]:
    """FLU body rates (rad/s) -> the roll, pitch, yawrate arguments (deg/s) of cflib's
    `send_setpoint_manual(..., rate=True)`.

    The arguments are the FLU rates in deg/s, unchanged: cflib negates `pitch` on the wire, the
    firmware's manual decoder passes the packet's values through, and the PID rate controller
    compares (roll, pitch, yaw) with (gyro.x, -gyro.y, gyro.z), so the two negations cancel and
    a positive argument is a positive FLU rate on every axis (the bytes on the wire are
    (p, -q, r) in deg/s)."""
    r = finite("rates", rates_flu_rad_s, 3)
    return float(math.degrees(r[0])), float(math.degrees(r[1])), float(math.degrees(r[2]))


def crazyflie_thrust_percentage(pwm: float) -> float:
    """Raw thrust (PWM units) -> the thrust percentage of cflib's `send_setpoint_manual`, which
    sends `int(10001 + pct/100 * 49999)`: chosen so that the raw value on the wire is
    `round(pwm)` clipped to [10001, 60000] (cflib truncates, hence the +0.25)."""
    p = float(finite("pwm", pwm, 1)[0])
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
        a = float(finite("thrust", accel, 1)[0])
        f = max(a, 0.0) * self.mass_kg / self.motors
        c2, c1, c0 = self.coefficients
        if f <= c0:
            return 0.0
        if c2 == 0:
            p = (f - c0) / c1
        else:
            p = (-c1 + math.sqrt(c1 * c1 + 4.0 * c2 * (f - c0))) / (2.0 * c2)
        return float(min(max(p, 0.0), self.pwm_max))



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
