"""The quadrotor's rate controller, X mixer and motor model as pure JAX functions, for simulators that
keep the whole control loop on the accelerator (:mod:`robot_rl.robots.quad.mjx`).

Same math as :class:`~robot_rl.robots.quad.control.QuadController` (its docstrings define every term);
the mixer's desaturation search is that module's own ``_desaturate`` on ``jax.numpy``. The rest is
written again because JAX traces pure functions over immutable arrays, where the numpy controller
updates its state in place and runs the search only on saturated rows (the CPU simulators' 500 Hz
loop depends on both). ``tests/test_quad_juggle_mjx.py`` holds the two to the same outputs, step by
step, on random commands that saturate the mixer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from robot_rl.robots.quad.control import ROTOR_SIGNS_XY, ROTOR_YAW_SIGNS, QuadController, _desaturate

__all__ = ["ControllerConstants", "ControllerState", "controller_reset", "controller_step", "mix"]


@dataclass(frozen=True)
class ControllerConstants:
    """What the controller assumes of the quadrotor (nominal, shared by every world) and its gains.
    Built from a :class:`QuadController` with :meth:`of`, so both controllers read one configuration."""

    mass: float
    inertia: tuple[float, float, float]
    arm_length: float
    yaw_moment_coeff: float
    max_thrust: float
    """k_f: one rotor's maximum thrust [N]."""
    hover_throttle: float
    kp: tuple[float, float, float]
    ki: tuple[float, float, float]
    kd: tuple[float, float, float]
    i_max: tuple[float, float, float]
    """Clamp of the integral itself (``i_limit / ki``; 0 where ``ki`` is 0)."""
    d_cutoff_hz: float
    gyroscopic: bool

    @classmethod
    def of(cls, controller: QuadController) -> ControllerConstants:
        p, g, r = controller.params, controller.rate.gains, controller.rate
        return cls(float(p.mass), tuple(float(v) for v in np.broadcast_to(p.inertia, (3,))), float(p.arm_length),
                   float(p.yaw_moment_coeff), float(p.max_rotor_thrust), float(p.hover_throttle),
                   tuple(g.kp), tuple(g.ki), tuple(g.kd), tuple(float(v) for v in r._i_max), float(g.d_cutoff_hz),
                   bool(g.gyroscopic))


class ControllerState(NamedTuple):
    """Per world: the rate PID's integral and derivative filter, the motors' throttle."""

    integral: jax.Array  # (N, 3)
    rate_dot: jax.Array  # (N, 3)
    prev_rates: jax.Array  # (N, 3)
    has_prev: jax.Array  # (N,) bool
    throttle: jax.Array  # (N, 4)

    @classmethod
    def zeros(cls, n: int, dtype=jnp.float32) -> ControllerState:
        z3 = jnp.zeros((n, 3), dtype)
        return cls(z3, z3, z3, jnp.zeros(n, bool), jnp.zeros((n, 4), dtype))


def controller_reset(state: ControllerState, mask: jax.Array, c: ControllerConstants) -> ControllerState:
    """PID state cleared and the motors at hover throttle where ``mask`` (N,) is set."""
    m = mask[:, None]
    return ControllerState(jnp.where(m, 0.0, state.integral), jnp.where(m, 0.0, state.rate_dot), state.prev_rates,
                           jnp.where(mask, False, state.has_prev), jnp.where(m, c.hover_throttle, state.throttle))


def mix(collective: jax.Array, torques: jax.Array, c: ControllerConstants) -> jax.Array:
    """X mixer with priority roll/pitch > collective > yaw: (N,) thrust [N], (N, 3) torques -> (N, 4)."""
    sx, sy = jnp.asarray(ROTOR_SIGNS_XY[:, 0]), jnp.asarray(ROTOR_SIGNS_XY[:, 1])
    d = c.arm_length / math.sqrt(2.0)
    fmax = c.max_thrust
    rp = (torques[:, 0:1] * sy - torques[:, 1:2] * sx) / (4.0 * d)
    yaw = torques[:, 2:3] * jnp.asarray(ROTOR_YAW_SIGNS) / (4.0 * c.yaw_moment_coeff)
    col = collective[:, None] / 4.0
    f = rp + col + yaw
    bad = jnp.any((f < 0.0) | (f > fmax), axis=-1, keepdims=True)
    # every row desaturated (shapes stay static), the saturated ones kept
    desaturated = _desaturate(rp, yaw, col, jnp.full_like(col, fmax), xp=jnp)
    return jnp.clip(jnp.where(bad, desaturated, f), 0.0, fmax)


def controller_step(state: ControllerState, ctbr: jax.Array, rates: jax.Array, dt: float, motor_tau: jax.Array,
                    c: ControllerConstants) -> tuple[ControllerState, jax.Array]:
    """One physics step: clamped CTBR (N, 4), measured body rates (N, 3), per-world motor time
    constants (N,) -> (new state, actual rotor thrusts (N, 4) [N])."""
    kp, ki, kd = (jnp.asarray(v, rates.dtype) for v in (c.kp, c.ki, c.kd))
    i_max, inertia = jnp.asarray(c.i_max, rates.dtype), jnp.asarray(c.inertia, rates.dtype)
    err = ctbr[:, 1:] - rates
    integral = jnp.clip(state.integral + err * dt, -i_max, i_max)
    raw = jnp.where(state.has_prev[:, None], (rates - state.prev_rates) / dt, 0.0)
    a = 1.0 - math.exp(-2.0 * math.pi * c.d_cutoff_hz * dt)
    rate_dot = state.rate_dot + a * (raw - state.rate_dot)
    torques = inertia * (kp * err + ki * integral - kd * rate_dot)
    if c.gyroscopic:
        torques = torques + jnp.cross(rates, inertia * rates)
    thrust_cmd = mix(c.mass * ctbr[:, 0], torques, c)
    throttle_cmd = jnp.sqrt(jnp.clip(thrust_cmd / c.max_thrust, 0.0, 1.0))
    throttle = state.throttle + (throttle_cmd - state.throttle) * (1.0 - jnp.exp(-dt / motor_tau))[:, None]
    new = ControllerState(integral, rate_dot, rates, jnp.ones_like(state.has_prev), throttle)
    return new, c.max_thrust * throttle ** 2
