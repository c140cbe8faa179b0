"""Physics back ends of the juggling environments: the quadrotor + ball plant stepped one policy
period at a time, with the rate controller + mixer + motor model closing the loop at 500 Hz on the
measured body rates.

* :class:`RolloutPhysics` -- N pairs stepped by ``mujoco.rollout`` on a thread pool (CPU), sharing
  a few randomized model variants;
* :class:`SimPhysics` -- one pair on :class:`~robot_rl.robots.quad.env.QuadJuggleSim` (the single
  env and the ROS sim node);
* :class:`BatchedPhysics` -- what the batched back ends share, this one's and MuJoCo Warp's
  (:mod:`robot_rl.robots.quad.warp`).

Each gives :class:`~robot_rl.robots.quad.vec_env.JuggleCore` the same state and takes the same
plant draws (:data:`NOMINAL_PLANT`, of which :data:`MODEL_PARAMS` live in the MuJoCo model).
"""

from __future__ import annotations

import copy
import os
from dataclasses import replace
from typing import Any, Mapping

import mujoco
import numpy as np

from robot_rl.robots.quad.control import QuadController
from robot_rl.robots.quad.juggling import JuggleState
from robot_rl.robots.quad.env import QuadJuggleConfig, QuadJuggleSim, solref_for_restitution_fast

__all__ = ["BatchedPhysics", "MODEL_PARAMS", "NOMINAL_PLANT", "RolloutPhysics", "SimPhysics", "plant_model_fields"]

NOMINAL_PLANT: dict[str, Any] = {
    "restitution": 0.8,
    "ball_mass": 0.047,
    "mass_scale": 1.0,
    "inertia_scale": 1.0,
    "thrust_scale": 1.0,
    "motor_tau": 0.027,
    "action_latency_steps": 0,
    "position_noise": 0.0,
    "velocity_noise": 0.0,
    "rate_noise": 0.0,
    "quad_start_offset": np.zeros(3),
    "ball_start_offset": np.array([0.0, 0.0, 0.65]),
}
"""Every parameter a randomization split may set (names as in the YAML) and its nominal value.
``quad_start_offset``: quadrotor start - home [m]; ``ball_start_offset``: ball start - (quadrotor
start xy, home z) [m]; the noise entries are standard deviations of the policy's observation
noise on positions [m] (quadrotor and ball; the ball's velocity is differenced from its noisy
positions, as from motion capture), the quadrotor's velocity [m/s] and body rates [rad/s]."""

MODEL_PARAMS = ("restitution", "ball_mass", "mass_scale", "inertia_scale")
"""Plant parameters that live in the MuJoCo model (the rest are per pair in the controller / env)."""


def plant_model_fields(nominal: mujoco.MjModel, ids: Mapping[str, int], values: Mapping[str, np.ndarray], dt: float,
                       contact_frequency: float) -> dict[str, np.ndarray]:
    """MuJoCo model fields of ``k`` plant draws (``values``: :data:`MODEL_PARAMS` arrays of ``k``):
    ``body_mass`` (k, nbody), ``body_inertia`` (k, nbody, 3), ``pair_solref`` (k, npair, 2); every
    field not drawn is the nominal model's."""
    quad, ball, pair = ids["quad"], ids["ball"], ids["pair"]
    ball_mass = np.asarray(values["ball_mass"], dtype=np.float64)
    k = ball_mass.size
    mass = np.tile(nominal.body_mass, (k, 1))
    inertia = np.tile(nominal.body_inertia, (k, 1, 1))
    solref = np.tile(nominal.pair_solref, (k, 1, 1))
    mass_scale = np.asarray(values["mass_scale"], dtype=np.float64)
    mass[:, quad] *= mass_scale
    inertia[:, quad] *= (mass_scale * np.asarray(values["inertia_scale"], dtype=np.float64))[:, None]
    radius = float(nominal.geom_size[ids["ball_geom"]][0])
    mass[:, ball] = ball_mass
    inertia[:, ball] = (0.4 * ball_mass * radius ** 2)[:, None]
    solref[:, pair] = solref_for_restitution_fast(values["restitution"], dt, natural_frequency=contact_frequency)
    return {"body_mass": mass, "body_inertia": inertia, "pair_solref": solref}


def _apply_model_params(model: mujoco.MjModel, nominal: mujoco.MjModel, ids: dict[str, int],
                        values: Mapping[str, float], dt: float, contact_frequency: float) -> None:
    """One plant draw (scalars) written into one pair's own model."""
    fields = plant_model_fields(nominal, ids, {name: np.atleast_1d(values[name]) for name in MODEL_PARAMS}, dt,
                                contact_frequency)
    for name, value in fields.items():
        getattr(model, name)[:] = value[0]
    # the free ball is a "simple" body whose mass matrix MuJoCo takes from constants derived at compile
    # time: without rebuilding them a new ball mass changes only its weight (a 5 g ball fell at 1 m/s^2)
    mujoco.mj_setConst(model, mujoco.MjData(model))


class BatchedPhysics:
    """What every batched back end shares: the scene (floor collisions off: terminations end an
    episode long before anything reaches it), one batched rate controller + mixer + motor model
    closing the loop at 500 Hz on the measured body rates, per-pair rotor strength and motor lag.
    A back end provides :meth:`state`, :meth:`set_state`, :meth:`set_plant` (model parameters,
    then :meth:`_set_actuation`), :meth:`_body_rates` and :meth:`_substep`."""

    def __init__(self, n: int, sim_config: QuadJuggleConfig | None, xml_path: str | os.PathLike | None) -> None:
        if n < 1:
            raise ValueError(f"need at least one pair, got {n}")
        self.n = int(n)
        self.base = base = QuadJuggleSim(sim_config, xml_path)
        self.n_substeps, self.dt = base.n_substeps, base.model.opt.timestep
        self.contact_frequency = base.config.contact_frequency
        m = base.model
        floor = m.geom("floor").id
        m.geom_contype[floor] = m.geom_conaffinity[floor] = 0
        self.nominal = copy.deepcopy(m)
        self.ids = {"quad": base._quad, "ball": base._ball, "pair": base._pair, "ball_geom": base._ball_geom}
        params = replace(base.params, motor_tau=np.full(self.n, float(base.params.motor_tau)))
        self.controller = QuadController(params, base.config.gains, n=self.n)
        self.thrust_scale = np.ones(self.n)

    def _set_actuation(self, ids: np.ndarray, values: dict[str, np.ndarray]) -> None:
        self.thrust_scale[ids] = values["thrust_scale"]
        self.controller.motors.tau[ids, 0] = values["motor_tau"]

    def _reset_controller(self, ids: np.ndarray) -> None:
        mask = np.zeros(self.n, dtype=bool)
        mask[ids] = True
        self.controller.reset(mask)

    def step(self, ctbr: np.ndarray) -> None:
        """One policy period of the clamped CTBR commands ``ctbr`` (N, 4)."""
        for _ in range(self.n_substeps):
            thrust = self.controller.step(ctbr, self._body_rates(), self.dt, validated=True)
            self._substep(thrust * self.thrust_scale[:, None])

    def _body_rates(self) -> np.ndarray:
        raise NotImplementedError

    def _substep(self, rotor_thrust: np.ndarray) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class RolloutPhysics(BatchedPhysics):
    """N pairs stepped by ``mujoco.rollout`` with a batched controller.

    The pairs share ``model_variants`` MuJoCo models (each a draw of :data:`MODEL_PARAMS`; a pair
    takes a random one at reset), as Isaac Lab shares 64 material buckets: one model per pair
    doubles the physics cost through cache misses (10.9 vs 4.9 us per pair and 2 ms step here).
    With ``model_variants >= n`` every pair has its own model (evaluation).

    Args:
        n: number of pairs.
        sim_config: physics configuration (policy rate, timestep, gains, ...).
        nthread: rollout threads (default: the CPUs this process may use, at most 8).
        model_variants: number of shared models.
        xml_path: MJCF scene.
    """

    def __init__(self, n: int, sim_config: QuadJuggleConfig | None = None, nthread: int | None = None,
                 model_variants: int = 64, xml_path: str | os.PathLike | None = None) -> None:
        from mujoco import rollout

        if model_variants < 1:
            raise ValueError(f"need at least one model variant, got {model_variants}")
        super().__init__(n, sim_config, xml_path)
        base, m = self.base, self.base.model
        self.own_models = model_variants >= self.n
        self.variants = [copy.deepcopy(m) for _ in range(self.n if self.own_models else model_variants)]
        self.variant_values = {name: np.full(len(self.variants), float(NOMINAL_PLANT[name])) for name in MODEL_PARAMS}
        self.variant_of = np.arange(self.n) % len(self.variants)
        self.models = [self.variants[v] for v in self.variant_of]
        self.nthread = nthread if nthread is not None else max(1, min(8, len(os.sched_getaffinity(0))))
        self._rollout = rollout.Rollout(nthread=self.nthread)
        self._datas = [mujoco.MjData(m) for _ in range(self.nthread)]
        self._spec = int(mujoco.mjtState.mjSTATE_FULLPHYSICS)
        self._ctrl_spec = int(mujoco.mjtState.mjSTATE_CTRL)
        size = mujoco.mj_stateSize(m, self._spec)
        s0 = np.empty(size)
        mujoco.mj_getState(m, base.data, s0, self._spec)
        self.state_vec = np.tile(s0, (self.n, 1))
        self._out = np.empty((self.n, 1, size))
        self._control = np.zeros((self.n, 1, m.nu))
        q, v, bq, bv = 1 + base._qq, 1 + m.nq + base._qv, 1 + base._bq, 1 + m.nq + base._bv
        self._cols = {"quad_pos": slice(q, q + 3), "quad_quat": slice(q + 3, q + 7), "quad_vel": slice(v, v + 3),
                      "quad_rates": slice(v + 3, v + 6), "ball_pos": slice(bq, bq + 3),
                      "ball_quat": slice(bq + 3, bq + 7), "ball_vel": slice(bv, bv + 3),
                      "ball_spin": slice(bv + 3, bv + 6)}

    def set_variant(self, variant: int, values: Mapping[str, float]) -> None:
        """Write one draw of :data:`MODEL_PARAMS` into shared model ``variant``."""
        _apply_model_params(self.variants[variant], self.nominal, self.ids, values, self.dt, self.contact_frequency)
        for name in MODEL_PARAMS:
            self.variant_values[name][variant] = values[name]

    def set_plant(self, ids: np.ndarray, values: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        """Plant of pairs ``ids``. With shared models the pairs take random variants and ``values``'
        model parameters are overwritten with theirs (what the pairs really get)."""
        if self.own_models:
            for k, i in enumerate(ids):
                self.set_variant(i, {name: values[name][k] for name in MODEL_PARAMS})
        else:
            self.variant_of[ids] = rng.integers(len(self.variants), size=len(ids))
            for i in ids:
                self.models[i] = self.variants[self.variant_of[i]]
            for name in MODEL_PARAMS:
                values[name] = self.variant_values[name][self.variant_of[ids]]
        self._set_actuation(ids, values)

    def state(self) -> JuggleState:
        st, c = self.state_vec, self._cols
        return JuggleState(st[:, c["quad_pos"]].copy(), st[:, c["quad_quat"]].copy(), st[:, c["quad_vel"]].copy(),
                           st[:, c["quad_rates"]].copy(), st[:, c["ball_pos"]].copy(), st[:, c["ball_vel"]].copy())

    def set_state(self, ids: np.ndarray, quad_pos: np.ndarray, ball_pos: np.ndarray) -> None:
        """Pairs ``ids``: quadrotor level and at rest at ``quad_pos``, ball at rest at ``ball_pos``,
        controller cleared with the motors at hover throttle, time 0."""
        st, c = self.state_vec, self._cols
        st[ids] = 0.0
        st[ids, c["quad_pos"]] = quad_pos
        st[ids, c["quad_quat"]] = (1.0, 0.0, 0.0, 0.0)
        st[ids, c["ball_pos"]] = ball_pos
        st[ids, c["ball_quat"]] = (1.0, 0.0, 0.0, 0.0)
        self._reset_controller(ids)

    def _body_rates(self) -> np.ndarray:
        return self.state_vec[:, self._cols["quad_rates"]]

    def _substep(self, rotor_thrust: np.ndarray) -> None:
        self._control[:, 0, :] = rotor_thrust
        self._rollout.rollout(self.models, self._datas, self.state_vec, self._control,
                              control_spec=self._ctrl_spec, skip_checks=True, nstep=1, state=self._out)
        self.state_vec[:] = self._out[:, 0]

    def close(self) -> None:
        self._rollout.close()


class SimPhysics:
    """One pair on :class:`QuadJuggleSim` (plain ``mj_step`` with the unbatched controller): the
    single environment, and the ROS sim node's plant."""

    def __init__(self, sim_config: QuadJuggleConfig | None = None, xml_path: str | os.PathLike | None = None) -> None:
        self.n = 1
        self.sim = sim = QuadJuggleSim(sim_config, xml_path)
        self.nominal = copy.deepcopy(sim.model)
        self.ids = {"quad": sim._quad, "ball": sim._ball, "pair": sim._pair, "ball_geom": sim._ball_geom}

    def state(self) -> JuggleState:
        s = self.sim.state()
        return JuggleState(*(s[k][None] for k in ("quad_pos", "quad_quat", "quad_vel", "quad_rates",
                                                  "ball_pos", "ball_vel")))

    def set_plant(self, ids: np.ndarray, values: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        sim = self.sim
        _apply_model_params(sim.model, self.nominal, self.ids, {name: v[0] for name, v in values.items()},
                            sim.model.opt.timestep, sim.config.contact_frequency)
        sim.restitution = float(values["restitution"][0])
        sim.thrust_scale = float(values["thrust_scale"][0])
        sim.controller.motors.tau = np.asarray(float(values["motor_tau"][0]))

    def set_state(self, ids: np.ndarray, quad_pos: np.ndarray, ball_pos: np.ndarray) -> None:
        self.sim.reset(quad_pos=quad_pos[0], ball_pos=ball_pos[0])

    def step(self, ctbr: np.ndarray) -> None:
        self.sim._substeps(ctbr[0], self.sim.n_substeps)

    def close(self) -> None:
        pass
