"""Simulated quadrotor with a racket and a ball (JuggleRL physics; pure Python + MuJoCo, no ROS).

* :class:`QuadJuggleSim` -- the physics of ``sim/quad/quad_juggle.xml`` at 500 Hz with the
  low-level stack of :mod:`robot_rl.robots.quad.control` (rate PID + X mixer + motor lag) run
  inside every physics step, and :meth:`QuadJuggleSim.step` taking one 50 Hz CTBR command
  (10 physics steps).  The gymnasium environment, rewards and randomisation build on it.
* :func:`solref_for_restitution` / :func:`contact_restitution` -- the ball-racket contact's
  MuJoCo parameters for a requested coefficient of restitution, and the inverse.

Thrust: each rotor is a ``motor`` actuator on its site with gear ``(0, 0, 1, 0, 0, s_i k_m)``,
so ``ctrl[i]`` (the motor model's actual thrust in newtons) pushes along the body z axis at the
rotor and adds that rotor's reaction moment about z.  The simulator writes the gears' ``k_m`` and
the ``ctrlrange`` from its :class:`~robot_rl.robots.quad.control.QuadParams` at construction, so
the controller's allocation and the plant agree exactly (unless a randomiser changes one of them
on purpose).

Restitution: MuJoCo has no restitution coefficient; a contact is a soft constraint whose
penetration ``r`` (< 0 inside) follows the reference dynamics ``a = -b v - k r``.  With the
"direct" solref form ``(-k, -b)`` and a constant impedance ``solimp = (d, d, ...)``,
``d = 0.9999``, the constraint-space acceleration is ``d * a_ref + (1 - d) * a_free``: the
relative normal motion is a linear spring-damper **independent of the masses and (nearly) of
gravity**, released when the contact force would become negative.  The coefficient of
restitution of that law, integrated the way MuJoCo integrates it (semi-implicit Euler at the
physics timestep, contact active while ``r < 0``), is computed by :func:`contact_restitution`
(averaged over the phase at which the ball first penetrates, which a discrete-time contact
depends on), and :func:`solref_for_restitution` inverts it for the damping ``b`` at a fixed
stiffness ``k = natural_frequency^2`` by bisection.  The stiffness trades contact duration and
penetration (``~pi/w`` and ``v/w``: 21 ms and 2 cm at the default 150 rad/s and 3 m/s) against
the phase-to-phase spread of the realised restitution (about +-0.01 to +-0.03 at 150 rad/s,
growing roughly with ``(w dt)^2`` and ``b dt``).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from robot_rl.robots.quad.control import (
    GRAVITY, ROTOR_YAW_SIGNS, QuadController, QuadParams, RateGains, ctbr_from_action,
)
from robot_rl.resources import package_path

__all__ = [
    "BALL_RACKET_IMPEDANCE",
    "DEFAULT_QUAD_XML",
    "QuadJuggleConfig",
    "QuadJuggleSim",
    "contact_restitution",
    "load_quad_juggle_model",
    "solref_for_restitution",
    "solref_for_restitution_fast",
]


def _find_xml() -> Path:
    env = os.environ.get("ROBOT_RL_QUAD_XML")
    return Path(env) if env else package_path(Path("sim") / "quad" / "quad_juggle.xml")


#: Path of the MJCF scene (override with the ``ROBOT_RL_QUAD_XML`` environment variable).
DEFAULT_QUAD_XML: Path = _find_xml()

#: Constant impedance of the ball-racket contact (solimp dmin = dmax); MuJoCo's maximum.
BALL_RACKET_IMPEDANCE = 0.9999

ROTOR_SITES = ("rotor0", "rotor1", "rotor2", "rotor3")


# --------------------------------------------------------------------------- restitution


def contact_restitution(
    stiffness: float,
    damping: float,
    dt: float = 0.002,
    *,
    impact_speed: float = 3.0,
    gravity: float = GRAVITY,
    impedance: float = BALL_RACKET_IMPEDANCE,
    phases: int = 32,
) -> float:
    """Coefficient of restitution of a MuJoCo contact with ``solref = (-stiffness, -damping)``.

    Simulates the normal motion of a ball hitting a fixed plane at ``impact_speed`` exactly as
    MuJoCo discretises it (constraint acceleration ``(1 - d) a_free + (-damping v - stiffness r)``
    while the contact force is non-negative, free flight otherwise; ``v += dt a``, ``r += dt v``;
    contact while ``r < 0``) and returns ``v_out / v_in`` averaged over ``phases`` evenly spaced
    first-penetration depths in ``(-v dt, 0]``.  ``v_in`` is the speed at the first
    penetrating sample, ``v_out`` the speed at the first sample back above the surface (the
    largest rebound speed; gravity acts afterwards).
    """
    k, b, g, d = float(stiffness), float(damping), float(gravity), float(impedance)
    v0 = float(impact_speed)
    if not (v0 > 0 and dt > 0 and k > 0 and b >= 0 and 0 < d <= 1 and phases >= 1):
        raise ValueError("need impact_speed, dt, stiffness > 0, damping >= 0, 0 < impedance <= 1, phases >= 1")
    r = -(np.arange(phases) + 0.5) / phases * v0 * dt
    v = np.full(phases, -v0)
    out = np.zeros(phases)
    active = np.ones(phases, dtype=bool)
    # a contact lasts about pi / sqrt(k) (longer when overdamped); bound the loop generously.
    max_steps = int((20.0 * math.pi / math.sqrt(k) + 20.0 * b / k) / dt) + 1000
    for _ in range(max_steps):
        spring = -b * v - k * r
        a = np.where(spring >= -g * d, (1.0 - d) * -g + spring, -g)
        v = np.where(active, v + dt * a, v)
        r = np.where(active, r + dt * v, r)
        left = active & (r >= 0.0)
        out[left] = v[left]
        active &= ~left
        if not active.any():
            break
    return float(np.mean(out) / v0)


@functools.lru_cache(maxsize=8)
def _restitution_table(dt: float, natural_frequency: float, gravity: float) -> tuple[np.ndarray, np.ndarray]:
    """Restitution -> damping at 0.01 steps over [0.3, 1.0] (bisections are ~ms each; resets are many)."""
    grid = np.round(np.arange(0.30, 1.0001, 0.01), 2)
    damping = [-solref_for_restitution(e, dt, natural_frequency=natural_frequency, gravity=gravity)[1]
               for e in grid]
    return grid, np.asarray(damping)


def solref_for_restitution_fast(e: Any, dt: float = 0.002, *, natural_frequency: float = 150.0,
                                gravity: float = GRAVITY) -> np.ndarray:
    """:func:`solref_for_restitution` for one or many ``e`` in [0.3, 1] by interpolation in a cached
    table (within 1e-3 in restitution); shape ``(..., 2)``. ValueError outside [0.3, 1]."""
    e = np.asarray(e, dtype=np.float64)
    if not np.all(np.isfinite(e)) or np.any(e < 0.3) or np.any(e > 1.0):
        raise ValueError(f"restitution must be in [0.3, 1], got {e}")
    grid, damping = _restitution_table(float(dt), float(natural_frequency), float(gravity))
    out = np.empty(e.shape + (2,))
    out[..., 0] = -natural_frequency ** 2
    out[..., 1] = -np.interp(e, grid, damping)
    return out


def solref_for_restitution(
    e: float,
    dt: float = 0.002,
    *,
    natural_frequency: float = 150.0,
    impact_speed: float = 3.0,
    gravity: float = GRAVITY,
    impedance: float = BALL_RACKET_IMPEDANCE,
    phases: int = 32,
    tol: float = 1e-4,
) -> np.ndarray:
    """MuJoCo ``solref`` (direct form ``[-stiffness, -damping]``) giving restitution ``e``.

    Stiffness is ``natural_frequency^2`` [1/s^2] (must satisfy ``natural_frequency * dt <= 1``
    for the semi-implicit integration to resolve the contact); the damping [1/s] is found by
    bisection on :func:`contact_restitution` (monotone in the damping).  Use it with
    ``solimp = (impedance, impedance, ...)``.  ``e = 1`` is reachable (zero damping: the
    symplectic integration conserves the bounce's energy on average); ``ValueError`` for
    ``e`` outside ``(0, 1]`` or not reachable at this stiffness.
    """
    e = float(e)
    if not (math.isfinite(e) and 0.0 < e <= 1.0):
        raise ValueError(f"restitution must be in (0, 1], got {e}")
    w = float(natural_frequency)
    if not (w > 0 and w * dt <= 1.0):
        raise ValueError(f"natural_frequency * dt must be in (0, 1], got {w} * {dt}")
    k = w * w
    kw = dict(impact_speed=impact_speed, gravity=gravity, impedance=impedance, phases=phases)

    def cor(b: float) -> float:
        return contact_restitution(k, b, dt, **kw)

    lo, hi = 0.0, 1.0 / dt
    e_lo, e_hi = cor(lo), cor(hi)
    if e > e_lo + 0.01 or e < e_hi:
        raise ValueError(f"restitution {e} not reachable at natural_frequency {w} "
                         f"(range {e_hi:.3f}..{e_lo:.3f})")
    if e >= e_lo:
        return np.array([-k, 0.0])
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if cor(mid) > e:
            lo = mid
        else:
            hi = mid
    return np.array([-k, -0.5 * (lo + hi)])


# --------------------------------------------------------------------------- model


def load_quad_juggle_model(xml_path: str | os.PathLike | None = None, fix_quad: bool = False) -> mujoco.MjModel:
    """Compiled scene; ``fix_quad`` removes the quadrotor's free joint (welded to the world, an
    immovable racket: what restitution is measured against)."""
    spec = mujoco.MjSpec.from_file(str(Path(xml_path) if xml_path is not None else DEFAULT_QUAD_XML))
    if fix_quad:
        spec.delete(spec.joint("quad_root"))
    return spec.compile()


def _composite_inertia(model: mujoco.MjModel, root: int) -> tuple[float, np.ndarray]:
    """Mass and principal-axis-aligned diagonal inertia (body frame) of ``root``'s subtree about
    its centre of mass, at the model's default pose with the root unrotated."""
    d = mujoco.MjData(model)
    mujoco.mj_kinematics(model, d)
    bodies = [i for i in range(model.nbody) if i == root or _is_descendant(model, i, root)]
    mass = float(sum(model.body_mass[i] for i in bodies))
    com = sum(model.body_mass[i] * d.xipos[i] for i in bodies) / mass
    root_rot = d.xmat[root].reshape(3, 3)
    inertia = np.zeros((3, 3))
    for i in bodies:
        rot = root_rot.T @ d.ximat[i].reshape(3, 3)
        p = root_rot.T @ (d.xipos[i] - com)
        inertia += rot @ np.diag(model.body_inertia[i]) @ rot.T
        inertia += model.body_mass[i] * (p @ p * np.eye(3) - np.outer(p, p))
    return mass, np.diag(inertia).copy()


def _is_descendant(model: mujoco.MjModel, body: int, root: int) -> bool:
    while body > 0:
        body = int(model.body_parentid[body])
        if body == root:
            return True
    return False


# --------------------------------------------------------------------------- simulator


@dataclass
class QuadJuggleConfig:
    """Configuration of :class:`QuadJuggleSim`."""

    policy_hz: float = 50.0
    """Rate of :meth:`QuadJuggleSim.step` calls (CTBR commands) [Hz]."""
    physics_dt: float = 0.002
    """MuJoCo timestep = rate-controller period [s]; ``1/policy_hz`` must be a multiple."""
    restitution: float = 0.8
    """Ball-racket coefficient of restitution (JuggleRL: 0.8)."""
    contact_frequency: float = 150.0
    """Natural frequency of the ball-racket contact [rad/s] (see :func:`solref_for_restitution`)."""
    thrust_to_weight: float = 2.5
    """Total maximum rotor thrust / weight."""
    motor_tau: float = 0.027
    """Motor (throttle) time constant [s]."""
    yaw_moment_coeff: float = 0.016
    """Rotor reaction moment per newton of thrust [m]."""
    gains: RateGains = field(default_factory=RateGains)
    """Body-rate PID gains."""
    quad_start: tuple[float, float, float] = (0.0, 0.0, 1.0)
    """Default quadrotor position at reset (body origin, world frame) [m]."""
    ball_start: tuple[float, float, float] = (0.0, 0.0, 1.6)
    """Default ball centre at reset [m]."""
    fix_quad: bool = False
    """Weld the quadrotor to the world (no free joint; commands have no effect). For tests of
    the ball-racket contact."""


class QuadJuggleSim:
    """Quadrotor + racket + ball physics with the CTBR low-level stack.

    One :meth:`step` = one policy period (default 20 ms): the command is validated and clamped
    once, then for each of the ``n_substeps`` physics steps the controller reads the body rates
    (the free joint's angular velocity, body frame, = an ideal gyro), computes rotor thrusts
    (rate PID -> mixer -> motor lag) and MuJoCo integrates with them as actuator controls.

    Args:
        config: simulation configuration.
        xml_path: MJCF file (default :data:`DEFAULT_QUAD_XML`).
    """

    def __init__(self, config: QuadJuggleConfig | None = None, xml_path: str | os.PathLike | None = None) -> None:
        self.config = cfg = config if config is not None else QuadJuggleConfig()
        if cfg.policy_hz <= 0 or cfg.physics_dt <= 0:
            raise ValueError("policy_hz and physics_dt must be positive")
        n_sub = (1.0 / cfg.policy_hz) / cfg.physics_dt
        if abs(n_sub - round(n_sub)) > 1e-6 or round(n_sub) < 1:
            raise ValueError(f"1/policy_hz ({1.0 / cfg.policy_hz}) must be a multiple of physics_dt ({cfg.physics_dt})")
        self.n_substeps = int(round(n_sub))
        self.model = m = load_quad_juggle_model(xml_path, fix_quad=cfg.fix_quad)
        m.opt.timestep = cfg.physics_dt
        self.data = mujoco.MjData(m)

        self._quad = m.body("quad").id
        self._ball = m.body("ball").id
        self._racket_geom = m.geom("racket").id
        self._ball_geom = m.geom("ball").id
        self._racket_site = m.site("racket_center").id
        self._pair = m.pair("ball_racket").id
        self._act = np.array([m.actuator(s).id for s in ROTOR_SITES])
        self._act_sl = slice(int(self._act[0]), int(self._act[0]) + 4)
        if not np.array_equal(self._act, np.arange(self._act[0], self._act[0] + 4)):
            raise ValueError("rotor actuators must be contiguous")
        self.quad_free = not cfg.fix_quad
        if self.quad_free:
            j = m.joint("quad_root").id
            self._qq = int(m.jnt_qposadr[j])
            self._qv = int(m.jnt_dofadr[j])
        jb = m.joint("ball_root").id
        self._bq = int(m.jnt_qposadr[jb])
        self._bv = int(m.jnt_dofadr[jb])

        mass, inertia = _composite_inertia(m, self._quad)
        self.params = QuadParams(mass=mass, inertia=tuple(inertia), arm_length=self._arm_length(),
                                 thrust_to_weight=cfg.thrust_to_weight,
                                 yaw_moment_coeff=cfg.yaw_moment_coeff, motor_tau=cfg.motor_tau,
                                 gravity=float(-m.opt.gravity[2]))
        self.controller = QuadController(self.params, cfg.gains)
        self.thrust_scale = 1.0
        """Plant rotor thrust / what the controller's motor model predicts (domain randomization of
        the thrust-to-weight ratio; the controller keeps assuming the nominal one)."""
        self._apply_rotor_params()
        self.set_restitution(cfg.restitution)
        self._quat = np.empty(4)
        self.reset()

    # ------------------------------------------------------------------ setup

    def _arm_length(self) -> float:
        xy = self.model.site_pos[[self.model.site(s).id for s in ROTOR_SITES], :2]
        lengths = np.linalg.norm(xy, axis=1)
        if np.ptp(lengths) > 1e-6:
            raise ValueError("rotor sites must be at equal distances from the body origin")
        return float(lengths[0])

    def _apply_rotor_params(self) -> None:
        """Plant = controller model: gears' yaw coefficients and thrust ranges from ``params``."""
        m = self.model
        m.actuator_gear[self._act_sl] = 0.0
        m.actuator_gear[self._act_sl, 2] = 1.0
        m.actuator_gear[self._act_sl, 5] = ROTOR_YAW_SIGNS * float(self.params.yaw_moment_coeff)
        # headroom for a randomized plant whose rotors are stronger than the controller assumes
        m.actuator_ctrlrange[self._act_sl] = (0.0, 2.0 * float(self.params.max_rotor_thrust))

    def set_restitution(self, e: float) -> None:
        """Ball-racket coefficient of restitution (rewrites the contact pair's solref/solimp)."""
        solref = solref_for_restitution(e, self.model.opt.timestep,
                                        natural_frequency=self.config.contact_frequency,
                                        gravity=self.params.gravity)
        self.model.pair_solref[self._pair] = solref
        self.model.pair_solimp[self._pair, :2] = BALL_RACKET_IMPEDANCE
        self.restitution = float(e)

    # ------------------------------------------------------------------ properties

    @property
    def time(self) -> float:
        """Simulation time [s]."""
        return float(self.data.time)

    @property
    def control_dt(self) -> float:
        """Duration of one :meth:`step` [s]."""
        return self.n_substeps * self.model.opt.timestep

    @property
    def racket_top_offset(self) -> float:
        """Height of the racket's top surface above the quadrotor body origin (body z) [m]."""
        return float(self.model.body_pos[self.model.body("racket").id][2] + self.model.geom_size[self._racket_geom][1])

    # ------------------------------------------------------------------ core API

    def reset(
        self,
        quad_pos: Any = None,
        quad_quat: Any = None,
        quad_vel: Any = None,
        quad_rates: Any = None,
        ball_pos: Any = None,
        ball_vel: Any = None,
        throttle: Any = None,
    ) -> None:
        """Put the quadrotor (body origin, wxyz quaternion, world velocity, body rates) and the
        ball (centre, world velocity) in a state; defaults: config positions, level, at rest,
        motors at hover throttle (or ``throttle``), controller state cleared, time 0."""
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        pos = np.asarray(self.config.quad_start if quad_pos is None else quad_pos, dtype=np.float64)
        quat = np.array([1.0, 0.0, 0.0, 0.0]) if quad_quat is None else np.asarray(quad_quat, dtype=np.float64)
        for name, value, n in (("quad_pos", pos, 3), ("quad_quat", quat, 4)):
            if value.shape != (n,) or not np.all(np.isfinite(value)):
                raise ValueError(f"{name} must be {n} finite values, got {value}")
        quat = quat / np.linalg.norm(quat)
        if self.quad_free:
            q, v = self._qq, self._qv
            d.qpos[q:q + 3] = pos
            d.qpos[q + 3:q + 7] = quat
            d.qvel[v:v + 3] = 0.0 if quad_vel is None else np.asarray(quad_vel, dtype=np.float64)
            d.qvel[v + 3:v + 6] = 0.0 if quad_rates is None else np.asarray(quad_rates, dtype=np.float64)
        else:
            m.body_pos[self._quad] = pos
            m.body_quat[self._quad] = quat
        b = self._bq
        d.qpos[b:b + 3] = np.asarray(self.config.ball_start if ball_pos is None else ball_pos, dtype=np.float64)
        d.qpos[b + 3:b + 7] = (1.0, 0.0, 0.0, 0.0)
        d.qvel[self._bv:self._bv + 3] = 0.0 if ball_vel is None else np.asarray(ball_vel, dtype=np.float64)
        if not (np.all(np.isfinite(d.qpos)) and np.all(np.isfinite(d.qvel))):
            raise ValueError("reset state must be finite")
        self.controller.reset(throttle=throttle)
        d.ctrl[self._act_sl] = self.controller.thrusts * self.thrust_scale
        mujoco.mj_forward(m, d)

    def step(self, ctbr: Any) -> None:
        """Apply a CTBR command ``(thrust m/s^2, p, q, r rad/s)`` for one policy period.

        Clamped to the controller's limits; a wrong shape or a non-finite value raises
        ``ValueError`` (nothing is simulated)."""
        c = self.controller.clamp_ctbr(ctbr)
        self._substeps(c, self.n_substeps)

    def step_physics(self, ctbr: Any, n: int = 1) -> None:
        """Apply a CTBR command for ``n`` physics steps only (e.g. a 500 Hz sim node, or tests
        that look inside a policy period); validated and clamped as in :meth:`step`."""
        c = self.controller.clamp_ctbr(ctbr)
        self._substeps(c, int(n))

    def step_action(self, action: Any) -> None:
        """:meth:`step` with a policy action in [-1, 1]^4 (:func:`ctbr_from_action`)."""
        self.step(ctbr_from_action(action))

    def _substeps(self, ctbr: np.ndarray, n: int) -> None:
        m, d = self.model, self.data
        ctrl = self.controller
        dt = m.opt.timestep
        zero = np.zeros(3)
        for _ in range(n):
            rates = d.qvel[self._qv + 3:self._qv + 6] if self.quad_free else zero
            d.ctrl[self._act_sl] = ctrl.step(ctbr, rates, dt, validated=True) * self.thrust_scale
            mujoco.mj_step(m, d)

    def ball_racket_contact(self) -> bool:
        """Whether the ball touches the racket (the pair's contact is active) now."""
        d = self.data
        if d.ncon == 0:
            return False
        g = d.contact.geom[:d.ncon]
        return bool(np.any(((g[:, 0] == self._ball_geom) & (g[:, 1] == self._racket_geom))
                           | ((g[:, 0] == self._racket_geom) & (g[:, 1] == self._ball_geom))))

    def state(self) -> dict[str, np.ndarray]:
        """Current state as float64 arrays (world frame z up unless noted).

        ``quad_pos`` (3) body origin [m], ``quad_quat`` (4, wxyz), ``quad_rotmat`` (9, row-major
        body-to-world), ``quad_vel`` (3) [m/s], ``quad_rates`` (3) body-frame FLU rates [rad/s],
        ``racket_pos`` (3) centre of the racket's top surface [m], ``racket_normal`` (3) unit,
        ``ball_pos`` (3) centre [m], ``ball_vel`` (3) [m/s], ``rotor_thrusts`` (4) actual [N],
        ``time`` (scalar) [s].
        """
        d = self.data
        if self.quad_free:
            q, v = self._qq, self._qv
            quad_pos, quad_quat = d.qpos[q:q + 3].copy(), d.qpos[q + 3:q + 7].copy()
            quad_vel, rates = d.qvel[v:v + 3].copy(), d.qvel[v + 3:v + 6].copy()
        else:
            quad_pos, quad_quat = d.xpos[self._quad].copy(), d.xquat[self._quad].copy()
            quad_vel, rates = np.zeros(3), np.zeros(3)
        rot = d.xmat[self._quad].copy()
        b, bv = self._bq, self._bv
        return {
            "quad_pos": quad_pos,
            "quad_quat": quad_quat,
            "quad_rotmat": rot,
            "quad_vel": quad_vel,
            "quad_rates": rates,
            "racket_pos": d.site_xpos[self._racket_site].copy(),
            "racket_normal": rot.reshape(3, 3)[:, 2].copy(),
            "ball_pos": d.qpos[b:b + 3].copy(),
            "ball_vel": d.qvel[bv:bv + 3].copy(),
            "rotor_thrusts": self.controller.thrusts.copy(),
            "time": np.array(d.time, dtype=np.float64),
        }
