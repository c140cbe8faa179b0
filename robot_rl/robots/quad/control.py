"""Quadrotor low-level control: CTBR command -> body-rate PID -> X mixer -> motor model.

The JuggleRL-style policy outputs a *collective thrust and body rates* (CTBR) command at 50 Hz;
this module turns it into per-rotor thrusts at the physics rate (500 Hz).  The same
:class:`QuadController` runs inside the simulator (:mod:`robot_rl.robots.quad.env`) and will run
in the sim node, so the plant a policy is trained on is the one it is evaluated on.

Conventions (as `quad/cmd_ctbr`, see :mod:`robot_rl.nodes.quadrotor`):

* body frame FLU: x forward, y left, z up; body rates ``(p, q, r)`` in rad/s about x, y, z.
* CTBR command ``(thrust, p, q, r)``: ``thrust`` is the *mass-normalised* collective thrust in
  m/s^2 along body z, in ``[0, 15]`` (hover = g); rates in ``[-pi, pi]`` rad/s.
* rotors in PX4 quad-X order, arm length ``L`` (rotor centres at ``(sx, sy) * L / sqrt(2)``):

  ======  ===========  ====  ====  ====================================
  rotor   position     sx    sy    spin / reaction moment about body z
  ======  ===========  ====  ====  ====================================
  0       front-right  +1    -1    CCW from above -> ``-k_m * f``
  1       back-left    -1    +1    CCW            -> ``-k_m * f``
  2       front-left   +1    +1    CW             -> ``+k_m * f``
  3       back-right   -1    -1    CW             -> ``+k_m * f``
  ======  ===========  ====  ====  ====================================

  so ``tau_x = sum(y_i f_i)``, ``tau_y = -sum(x_i f_i)``, ``tau_z = sum(s_i k_m f_i)``.

Pipeline of :meth:`QuadController.step` (one physics step ``dt``):

1. clamp the command to its limits (non-finite values raise ``ValueError``);
2. :class:`RateController`: body-rate PID in angular-acceleration units, times the inertia,
   plus the gyroscopic term ``w x (J w)`` -> desired body torques; collective force =
   ``mass * thrust``;
3. :func:`mix`: X-configuration allocation with saturation (priority roll/pitch > collective
   thrust > yaw, see :func:`mix`) -> per-rotor thrust in ``[0, max_thrust]``;
4. :class:`MotorModel`: commanded throttle ``sqrt(f / k_f)`` -> first-order lag (time constant
   ``tau``, exact discretisation) -> thrust ``k_f * throttle^2`` (``k_f`` = one rotor's
   maximum thrust, so ``thrust_to_weight = 4 k_f / (m g)``).

Everything is numpy and works on a leading batch dimension: a controller built with ``n=N``
takes ``(N, 4)`` commands and ``(N, 3)`` rates and returns ``(N, 4)`` thrusts; with ``n=None``
shapes are unbatched (``(4,)``, ``(3,)``).  Physical parameters (mass, inertia, thrust-to-weight,
arm length, yaw coefficient, motor time constant) may be scalars or per-quadrotor arrays
(``(N,)``; inertia ``(N, 3)``) so domain randomisation needs no Python loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from robot_rl.control.checks import finite

__all__ = [
    "CTBR_MAX_RATE",
    "CTBR_THRUST_RANGE",
    "GRAVITY",
    "ROTOR_SIGNS_XY",
    "ROTOR_YAW_SIGNS",
    "MotorModel",
    "QuadController",
    "QuadParams",
    "RateController",
    "RateGains",
    "ctbr_from_action",
    "mix",
    "rotor_positions",
]

#: Standard gravity used for "mass-normalised" thrust [m/s^2].
GRAVITY = 9.81
#: Limits of the mass-normalised collective thrust command [m/s^2] (JuggleRL: 0..15).
CTBR_THRUST_RANGE: tuple[float, float] = (0.0, 15.0)
#: Limit of each commanded body rate [rad/s] (JuggleRL: +-pi).
CTBR_MAX_RATE: float = math.pi

#: Rotor position signs (sx, sy), rotor i at ``(sx, sy) * arm_length / sqrt(2)`` (PX4 quad-X order).
ROTOR_SIGNS_XY = np.array([[1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [-1.0, -1.0]])
#: Sign of each rotor's reaction moment about body +z (``+k_m f`` or ``-k_m f``).
ROTOR_YAW_SIGNS = np.array([-1.0, -1.0, 1.0, 1.0])


def rotor_positions(arm_length: float) -> np.ndarray:
    """Rotor centres (4, 2) in the body xy plane [m] for a given arm length (centre to rotor)."""
    return ROTOR_SIGNS_XY * (float(arm_length) / math.sqrt(2.0))


# --------------------------------------------------------------------------- parameters


@dataclass
class QuadParams:
    """Physical parameters the controller assumes (nominal; the plant may be randomised).

    Every field may be a float or, for a batch of ``N`` quadrotors, an array ``(N,)``
    (``inertia``: ``(3,)`` or ``(N, 3)``).
    """

    mass: Any = 1.0
    """Total mass [kg] (frame + racket)."""
    inertia: Any = (5.57e-3, 5.57e-3, 8.8e-3)
    """Principal moments of inertia about the centre of mass, body x, y, z [kg m^2]."""
    arm_length: Any = 0.17
    """Distance from the centre to each rotor axis [m]."""
    thrust_to_weight: Any = 2.5
    """Total maximum thrust / weight; one rotor's maximum is ``ttw * m * g / 4``."""
    yaw_moment_coeff: Any = 0.016
    """k_m: reaction moment per newton of thrust [m] (moment = k_m * thrust)."""
    motor_tau: Any = 0.027
    """Time constant of the throttle's first-order lag [s] (JuggleRL: 0.02716)."""
    gravity: float = GRAVITY
    """Gravity [m/s^2] (converts thrust-to-weight into newtons)."""

    @property
    def max_rotor_thrust(self) -> np.ndarray:
        """Maximum thrust of one rotor [N] (``()`` or ``(N,)``)."""
        return (np.asarray(self.thrust_to_weight, np.float64) * np.asarray(self.mass, np.float64)
                * self.gravity / 4.0)

    @property
    def hover_throttle(self) -> np.ndarray:
        """Throttle (0..1) at which the four rotors carry the weight: ``sqrt(1 / ttw)``."""
        return np.sqrt(1.0 / np.asarray(self.thrust_to_weight, np.float64))

    def validate(self) -> None:
        """ValueError unless every parameter is finite and positive (thrust-to-weight > 1)."""
        for name in ("mass", "inertia", "arm_length", "thrust_to_weight", "yaw_moment_coeff", "motor_tau"):
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if not np.all(np.isfinite(value)) or np.any(value <= 0):
                raise ValueError(f"QuadParams.{name} must be finite and positive, got {value}")
        if np.any(np.asarray(self.thrust_to_weight) <= 1.0):
            raise ValueError("QuadParams.thrust_to_weight must exceed 1 (the quadrotor could not hover)")
        inertia = np.asarray(self.inertia, dtype=np.float64)
        if inertia.shape[-1:] != (3,):
            raise ValueError(f"QuadParams.inertia must have shape (3,) or (N, 3), got {inertia.shape}")


@dataclass
class RateGains:
    """Body-rate PID gains in angular-acceleration units (multiplied by the inertia).

    ``alpha = kp * e + ki * integral(e) - kd * d(w_measured)/dt`` [rad/s^2] with
    ``e = w_desired - w_measured``; the derivative acts on the (low-pass filtered) measurement,
    so rate steps do not kick.  Tuned for the 0.027 s motor lag: the roll/pitch loop without
    the integral has the characteristic polynomial ``tau_m s^2 + (1 + kd) s + kp``, i.e. about
    36 rad/s natural frequency and damping 0.9; in the simulator a 1 rad/s roll step enters
    the +-10 % band after ~0.09 s with ~1 % overshoot, and stays stable with the plant's
    inertia halved or doubled.  The integral is small (it removes offsets from off-centre
    masses and mis-modelled rotors; on a nominal plant it only adds a ~1 % slow tail).
    """

    kp: tuple[float, float, float] = (36.0, 36.0, 18.0)
    """Proportional gain [1/s]."""
    ki: tuple[float, float, float] = (10.0, 10.0, 3.0)
    """Integral gain [1/s^2]."""
    kd: tuple[float, float, float] = (0.8, 0.8, 0.0)
    """Derivative gain on the measured rate [-] (rad/s^2 per rad/s^2)."""
    i_limit: tuple[float, float, float] = (20.0, 20.0, 5.0)
    """Clamp of the integral term's contribution ``|ki * integral|`` [rad/s^2] (anti-windup)."""
    d_cutoff_hz: float = 60.0
    """Cut-off of the first-order low-pass on the measured-rate derivative [Hz]."""
    gyroscopic: bool = True
    """Add the feed-forward ``w x (J w)`` to the torques."""

    def validate(self) -> None:
        for name in ("kp", "ki", "kd", "i_limit"):
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if value.shape != (3,) or not np.all(np.isfinite(value)) or np.any(value < 0):
                raise ValueError(f"RateGains.{name} must be 3 finite non-negative values, got {value}")
        if not (math.isfinite(self.d_cutoff_hz) and self.d_cutoff_hz > 0):
            raise ValueError("RateGains.d_cutoff_hz must be finite and positive")


# --------------------------------------------------------------------------- helpers


def ctbr_from_action(action: Any) -> np.ndarray:
    """Policy action in ``[-1, 1]^4`` (tanh-squashed upstream) -> CTBR command.

    ``action[..., 0]`` maps affinely to the collective thrust ``(a + 1) / 2 * 15`` m/s^2
    (-1 -> 0, 0 -> 7.5, 1 -> 15); ``action[..., 1:4]`` map to roll, pitch, yaw rates
    ``a * pi`` rad/s.  Values outside [-1, 1] are clipped; shape ``(..., 4)`` is kept (batched
    or not).  Raises ``ValueError`` for a wrong last dimension or any non-finite value.
    """
    a = np.asarray(action, dtype=np.float64)
    if a.ndim == 0 or a.shape[-1] != 4:
        raise ValueError(f"action must have shape (..., 4), got {a.shape}")
    finite("action", a)
    a = np.clip(a, -1.0, 1.0)
    lo, hi = CTBR_THRUST_RANGE
    out = np.empty_like(a)
    out[..., 0] = lo + (a[..., 0] + 1.0) * 0.5 * (hi - lo)
    out[..., 1:] = a[..., 1:] * CTBR_MAX_RATE
    return out


def mix(
    collective: Any,
    torques: Any,
    arm_length: Any,
    yaw_moment_coeff: Any,
    max_thrust: Any,
) -> np.ndarray:
    """X-configuration mixer: total thrust [N] ``(...)`` and body torques [N m] ``(..., 3)`` ->
    per-rotor thrusts [N] ``(..., 4)`` in ``[0, max_thrust]``.

    A request the rotors can meet is allocated exactly: ``f_i = T/4 + tau_x sy_i / (4 d)
    - tau_y sx_i / (4 d) + tau_z s_i / (4 k_m)`` with ``d = arm_length / sqrt(2)``.  Otherwise
    the priority is **roll/pitch > collective thrust > yaw** (lexicographic, continuous in the
    request):

    1. roll/pitch: kept; scaled down (direction kept) only if their spread ``max - min`` over
       the rotors alone exceeds ``max_thrust``;
    2. collective: the value closest to ``T/4`` per rotor for which *some* yaw fraction
       ``alpha`` in [0, 1] fits every rotor in range -- so a zero-thrust command still gets
       the thrust the attitude torques need ("air mode") and a full-thrust one gives some up;
    3. yaw: the largest fraction ``alpha`` in [0, 1] of the requested yaw torque that fits with
       that collective (yaw is the weakest axis and, for a round racket, the least important).

    The result is clipped to ``[0, max_thrust]`` for round-off.  Parameters broadcast
    (scalars or ``(N,)``).
    """
    T = np.asarray(collective, dtype=np.float64)
    tau = np.asarray(torques, dtype=np.float64)
    if tau.shape[-1:] != (3,):
        raise ValueError(f"torques must have shape (..., 3), got {tau.shape}")
    d = np.asarray(arm_length, dtype=np.float64)[..., None] / math.sqrt(2.0)
    km = np.asarray(yaw_moment_coeff, dtype=np.float64)[..., None]
    fmax = np.asarray(max_thrust, dtype=np.float64)[..., None]
    sx, sy = ROTOR_SIGNS_XY[:, 0], ROTOR_SIGNS_XY[:, 1]
    rp = (tau[..., 0:1] * sy - tau[..., 1:2] * sx) / (4.0 * d)
    yaw = tau[..., 2:3] * ROTOR_YAW_SIGNS / (4.0 * km)
    c = T[..., None] / 4.0
    rp, yaw, c, fmax = np.broadcast_arrays(rp, yaw, c, fmax)
    f = rp + c + yaw
    bad = np.any((f < 0.0) | (f > fmax), axis=-1)
    if np.any(bad):  # the common, unsaturated case skips the search below
        if f.ndim == 1:
            f = _desaturate(rp[None], yaw[None], c[None, :1], fmax[None, :1])[0]
        else:
            f = f.copy()
            f[bad] = _desaturate(rp[bad], yaw[bad], c[bad][:, :1], fmax[bad][:, :1])
    return np.clip(f, 0.0, fmax)


def _desaturate(rp: Any, yaw: Any, c: Any, fmax: Any, xp: Any = np) -> Any:
    """Saturated rows of :func:`mix`: roll/pitch ``rp`` (M, 4), full yaw part ``yaw`` (M, 4),
    requested collective per rotor ``c`` (M, 1), limit ``fmax`` (M, 1) -> thrusts (M, 4).
    ``xp``: the array namespace (numpy here; ``jax.numpy`` in :mod:`robot_rl.robots.quad.control_jax`,
    one implementation for both): divisions take a safe denominator where their result is discarded."""
    # 1. roll/pitch, scaled only if they cannot fit on their own
    spread = rp.max(axis=-1, keepdims=True) - rp.min(axis=-1, keepdims=True)
    too_wide = spread > fmax
    rp = rp * xp.where(too_wide, fmax / xp.where(too_wide, spread, 1.0), 1.0)
    # largest yaw fraction whose spread still fits: (a_i - a_j) + alpha (b_i - b_j) <= fmax
    da = rp[:, :, None] - rp[:, None, :]
    db = yaw[:, :, None] - yaw[:, None, :]
    safe_db = xp.where(xp.abs(db) > 1e-15, db, 1.0)
    pair_bound = xp.where(db > 1e-15, (fmax[:, :, None] - da) / safe_db, xp.inf)
    crossings = xp.where(xp.abs(db) > 1e-15, -da / safe_db, xp.nan)
    alpha_s = xp.clip(pair_bound.min(axis=(1, 2)), 0.0, 1.0)[:, None]
    # 2. collective band over alpha in [0, alpha_s]: the extremes of the convex / concave
    #    piecewise-linear bounds lie at an end or where two rotors' yaw-shifted values cross
    cand = xp.concatenate([xp.zeros_like(alpha_s), alpha_s, crossings.reshape(rp.shape[0], -1)], axis=1)
    valid = xp.isfinite(cand) & (cand >= 0.0) & (cand <= alpha_s)
    cand = xp.where(valid, cand, 0.0)
    u = rp[:, None, :] + cand[:, :, None] * yaw[:, None, :]
    lower = xp.where(valid, -u.min(axis=-1), xp.inf).min(axis=-1, keepdims=True)
    upper = xp.where(valid, fmax - u.max(axis=-1), -xp.inf).max(axis=-1, keepdims=True)
    c = xp.clip(c, lower, upper)
    # 3. yaw: the largest fraction that fits with that collective
    base = rp + c
    safe_yaw = xp.where(yaw != 0, yaw, 1.0)
    room = xp.where(yaw > 0, (fmax - base) / safe_yaw, xp.where(yaw < 0, base / -safe_yaw, xp.inf))
    alpha = xp.clip(room.min(axis=-1, keepdims=True), 0.0, alpha_s)
    return base + alpha * yaw


# --------------------------------------------------------------------------- motor model


class MotorModel:
    """Per-rotor first-order throttle lag and quadratic thrust curve.

    ``throttle' = (throttle_cmd - throttle) / tau`` integrated exactly over ``dt``
    (``throttle += (cmd - throttle) * (1 - exp(-dt / tau))``); ``thrust = k_f * throttle^2`` with
    throttle in [0, 1] and ``k_f`` = one rotor's maximum thrust [N]; reaction moment
    ``k_m * thrust`` (applied by the plant, e.g. the MuJoCo actuator gear).

    Args:
        max_thrust: ``k_f`` [N], scalar or ``(N,)``.
        tau: time constant [s], scalar or ``(N,)``.
        n: batch size (``None``: unbatched, shapes ``(4,)``).
    """

    def __init__(self, max_thrust: Any, tau: Any = 0.027, n: int | None = None) -> None:
        self.n = n
        shape = (4,) if n is None else (int(n), 4)
        self.k_f = self._per_quad(max_thrust, "max_thrust")
        self.tau = self._per_quad(tau, "tau")
        self.throttle = np.zeros(shape)

    def _per_quad(self, value: Any, name: str) -> np.ndarray:
        v = np.asarray(value, dtype=np.float64)
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(f"MotorModel {name} must be finite and positive, got {v}")
        return v[..., None] if v.ndim else v  # (N, 1) broadcasts against (N, 4)

    def throttle_for_thrust(self, thrust: Any) -> np.ndarray:
        """Throttle in [0, 1] whose steady-state thrust is ``thrust`` (clipped to [0, k_f])."""
        return np.sqrt(np.clip(np.asarray(thrust, dtype=np.float64) / self.k_f, 0.0, 1.0))

    @property
    def thrust(self) -> np.ndarray:
        """Current thrust per rotor [N]."""
        return self.k_f * self.throttle**2

    def reset(self, throttle: Any = 0.0, mask: Any = None) -> None:
        """Set the actual throttle: a scalar, one value per quadrotor ``(N,)``, or per rotor (the
        full state shape); for all quadrotors or those selected by a boolean ``mask`` ``(N,)``."""
        value = np.asarray(throttle, dtype=np.float64)
        if value.shape != self.throttle.shape and self.n is not None and value.shape == (self.n,):
            value = value[:, None]
        value = np.clip(np.broadcast_to(value, self.throttle.shape), 0.0, 1.0)
        if mask is None:
            self.throttle[...] = value
        else:
            m = np.asarray(mask, dtype=bool)
            self.throttle[m] = value[m]

    def step(self, throttle_cmd: Any, dt: float) -> np.ndarray:
        """Advance by ``dt`` toward ``throttle_cmd`` (clipped to [0, 1]); returns the thrusts [N]."""
        cmd = np.clip(np.asarray(throttle_cmd, dtype=np.float64), 0.0, 1.0)
        self.throttle += (cmd - self.throttle) * (1.0 - np.exp(-dt / self.tau))
        return self.thrust


# --------------------------------------------------------------------------- rate controller


class RateController:
    """Body-rate PID -> body torques [N m] (see :class:`RateGains`).

    ``tau = J * (kp e + ki int(e) - kd dw_f/dt) + w x (J w)``, ``J`` the principal inertia.
    The integral's contribution is clamped to ``i_limit`` and the measured-rate derivative is
    low-pass filtered (``d_cutoff_hz``).  State: ``integral`` and the filter, ``(N, 3)`` or ``(3,)``.
    """

    def __init__(self, inertia: Any, gains: RateGains | None = None, n: int | None = None) -> None:
        self.gains = gains if gains is not None else RateGains()
        self.gains.validate()
        self.n = n
        shape = (3,) if n is None else (int(n), 3)
        self.inertia = np.asarray(inertia, dtype=np.float64)
        if self.inertia.shape[-1:] != (3,):
            raise ValueError(f"inertia must have shape (3,) or (N, 3), got {self.inertia.shape}")
        self._kp = np.asarray(self.gains.kp, np.float64)
        self._ki = np.asarray(self.gains.ki, np.float64)
        self._kd = np.asarray(self.gains.kd, np.float64)
        with np.errstate(divide="ignore"):
            self._i_max = np.where(self._ki > 0, np.asarray(self.gains.i_limit, np.float64) / self._ki, 0.0)
        self.integral = np.zeros(shape)
        self.rate_dot = np.zeros(shape)
        self._prev = np.zeros(shape)
        self._has_prev = np.zeros(shape[:-1], dtype=bool)

    def reset(self, mask: Any = None) -> None:
        """Zero the integral and the derivative filter (all, or where the boolean ``mask`` is set)."""
        if mask is None:
            self.integral[...] = 0.0
            self.rate_dot[...] = 0.0
            self._has_prev[...] = False
        else:
            m = np.asarray(mask, dtype=bool)
            self.integral[m] = 0.0
            self.rate_dot[m] = 0.0
            self._has_prev[m] = False

    def step(self, rates_desired: np.ndarray, rates_measured: np.ndarray, dt: float) -> np.ndarray:
        """Torques ``(..., 3)`` for one control period ``dt`` (inputs already validated)."""
        g = self.gains
        err = rates_desired - rates_measured
        self.integral = np.clip(self.integral + err * dt, -self._i_max, self._i_max)
        raw = np.where(self._has_prev[..., None], (rates_measured - self._prev) / dt, 0.0)
        a = 1.0 - math.exp(-2.0 * math.pi * g.d_cutoff_hz * dt)
        self.rate_dot += a * (raw - self.rate_dot)
        self._prev = rates_measured.copy()
        self._has_prev[...] = True
        alpha = self._kp * err + self._ki * self.integral - self._kd * self.rate_dot
        tau = self.inertia * alpha
        if g.gyroscopic:
            tau = tau + np.cross(rates_measured, self.inertia * rates_measured)
        return tau


# --------------------------------------------------------------------------- full controller


class QuadController:
    """CTBR command -> rotor thrusts: rate PID + mixer + motor model, one call per physics step.

    Args:
        params: the quadrotor's (nominal) physical parameters.
        gains: rate-PID gains.
        n: batch size (``None``: one quadrotor, unbatched shapes).
        thrust_range: limits of the mass-normalised collective command [m/s^2].
        max_rate: limit of each commanded body rate [rad/s].

    After :meth:`step`, ``torques`` (desired body torques), ``thrust_cmd`` (mixer output, the
    rotor thrusts asked of the motors) and ``thrusts`` (actual, after the lag) hold that step's
    values.  :meth:`reset` puts the motors at hover throttle by default, so a quadrotor
    released mid-air with a hover command does not sag.
    """

    def __init__(
        self,
        params: QuadParams | None = None,
        gains: RateGains | None = None,
        n: int | None = None,
        thrust_range: tuple[float, float] = CTBR_THRUST_RANGE,
        max_rate: float = CTBR_MAX_RATE,
    ) -> None:
        self.params = params if params is not None else QuadParams()
        self.params.validate()
        if n is not None and int(n) < 1:
            raise ValueError("n must be >= 1 or None")
        self.n = None if n is None else int(n)
        self.thrust_low, self.thrust_high = float(thrust_range[0]), float(thrust_range[1])
        if not (0.0 <= self.thrust_low < self.thrust_high and math.isfinite(self.thrust_high)):
            raise ValueError(f"thrust_range must satisfy 0 <= low < high, got {thrust_range}")
        if not (math.isfinite(max_rate) and max_rate > 0):
            raise ValueError("max_rate must be finite and positive")
        self.max_rate = float(max_rate)
        p = self.params
        self._mass = np.asarray(p.mass, dtype=np.float64)
        self._arm = np.asarray(p.arm_length, dtype=np.float64)
        self._km = np.asarray(p.yaw_moment_coeff, dtype=np.float64)
        self.max_thrust = p.max_rotor_thrust
        self.rate = RateController(p.inertia, gains, n)
        self.motors = MotorModel(self.max_thrust, p.motor_tau, n)
        shape4 = (4,) if n is None else (self.n, 4)
        self.torques = np.zeros(shape4[:-1] + (3,))
        self.thrust_cmd = np.zeros(shape4)
        self.reset()

    @property
    def thrusts(self) -> np.ndarray:
        """Actual rotor thrusts [N] (after the motor lag)."""
        return self.motors.thrust

    def reset(self, mask: Any = None, throttle: Any = None) -> None:
        """Zero the PID state and set the motors to ``throttle`` (default: hover throttle),
        for all quadrotors or those selected by a boolean ``mask`` ``(N,)``."""
        self.rate.reset(mask)
        self.motors.reset(self.params.hover_throttle if throttle is None else throttle, mask)

    def clamp_ctbr(self, ctbr: Any) -> np.ndarray:
        """Validated, clamped copy of a CTBR command; ValueError on a wrong shape or non-finite value."""
        c = np.asarray(ctbr, dtype=np.float64)
        expected = (4,) if self.n is None else (self.n, 4)
        if c.shape != expected:
            raise ValueError(f"ctbr must have shape {expected}, got {c.shape}")
        finite("ctbr", c)
        out = np.empty_like(c)
        out[..., 0] = np.clip(c[..., 0], self.thrust_low, self.thrust_high)
        out[..., 1:] = np.clip(c[..., 1:], -self.max_rate, self.max_rate)
        return out

    def step(self, ctbr: Any, body_rates_measured: Any, dt: float, *, validated: bool = False) -> np.ndarray:
        """One control + motor step of ``dt`` seconds; returns the actual rotor thrusts [N].

        ``ctbr``: ``(thrust m/s^2, p, q, r rad/s)``, shape ``(4,)`` / ``(N, 4)`` (clamped to the
        limits; non-finite raises ``ValueError``).  ``body_rates_measured``: gyro rates in the
        body frame ``(3,)`` / ``(N, 3)``.  ``validated=True`` skips the checks for a command that
        already went through :meth:`clamp_ctbr` (the simulator's substeps).
        """
        c = ctbr if validated else self.clamp_ctbr(ctbr)
        w = np.asarray(body_rates_measured, dtype=np.float64)
        if not validated:
            if w.shape != c.shape[:-1] + (3,):
                raise ValueError(f"body_rates_measured must have shape {c.shape[:-1] + (3,)}, got {w.shape}")
            finite("body_rates_measured", w)
            if not (dt > 0 and math.isfinite(dt)):
                raise ValueError(f"dt must be finite and positive, got {dt}")
        self.torques = self.rate.step(c[..., 1:], w, dt)
        collective = self._mass * c[..., 0]
        self.thrust_cmd = mix(collective, self.torques, self._arm, self._km, self.max_thrust)
        return self.motors.step(self.motors.throttle_for_thrust(self.thrust_cmd), dt)

    def with_params(self, **changes: Any) -> QuadController:
        """A fresh controller with some parameters replaced (same gains, batch and limits)."""
        return QuadController(replace(self.params, **changes), self.rate.gains, self.n,
                              (self.thrust_low, self.thrust_high), self.max_rate)
