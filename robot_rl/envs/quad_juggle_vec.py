"""Quadrotor juggling environments: many quadrotors stepped in one call, and the single env.

* :class:`QuadJuggleVecEnv` -- N quadrotor + ball pairs with the Isaac Lab / rsl_rl calling
  convention (torch tensors on the learner's device; ``reset() -> (obs, extras)``,
  ``step(actions) -> (obs, reward, terminated, truncated, extras)``, ``obs = {"policy": ...,
  "critic": ...}``; finished pairs are reset inside ``step``), so the PPO runner
  (:mod:`robot_rl.training.ppo_runner`) trains on it or on an Isaac Lab task alike.
* :class:`QuadJuggleGymVectorEnv` -- the same batch as a ``gymnasium.vector.VectorEnv`` (numpy,
  same-step autoreset with ``final_obs`` in the infos).
* :class:`QuadJuggleEnv` -- one pair as a ``gymnasium.Env`` (``robot_rl/QuadJuggle-v0``) on
  :class:`~robot_rl.envs.quad_juggle.QuadJuggleSim`; what a plain ``SyncVectorEnv`` vectorizes.

Physics: one MuJoCo model per pair (so masses, inertia and restitution are randomized per pair),
stepped by ``mujoco.rollout`` on a thread pool one 2 ms physics step at a time, because the
batched rate controller + mixer + motor model (:class:`~robot_rl.control.quad_rate.QuadController`)
closes the loop at 500 Hz on the measured body rates between physics steps.  The 50 Hz policy
step is 10 of those.  All the task logic (hits, rewards, terminations, observations) is
:mod:`robot_rl.envs.juggle_task`, batched; every physics back end feeds it the same state (on a
GPU: MuJoCo Warp, :mod:`robot_rl.envs.quad_juggle_warp`, with the same controller).

Randomization (``sim/quad/randomization.yaml``, the format of
:mod:`robot_rl.envs.randomization`): drawn per pair at every reset; parameters a split omits stay
nominal (:data:`NOMINAL_PLANT`).
"""

from __future__ import annotations

import copy
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import gymnasium as gym
import mujoco
import numpy as np

from robot_rl.control.quad_rate import CTBR_THRUST_RANGE, GRAVITY, QuadController, ctbr_from_action
from robot_rl.envs.juggle_task import OBS_DIM, PRIVILEGED_DIM, JuggleConfig, JuggleState, JuggleTask
from robot_rl.envs.quad_juggle import QuadJuggleConfig, QuadJuggleSim, solref_for_restitution_fast
from robot_rl.envs.randomization import Randomization
from robot_rl.resources import package_path

__all__ = [
    "BatchedPhysics",
    "DEFAULT_RANDOMIZATION",
    "NOMINAL_PLANT",
    "PHYSICS_BACKENDS",
    "JuggleCore",
    "QuadJuggleEnv",
    "QuadJuggleGymVectorEnv",
    "QuadJuggleVecEnv",
    "RolloutPhysics",
    "SimPhysics",
    "plant_model_fields",
]

DEFAULT_RANDOMIZATION: Path = package_path(Path("sim") / "quad" / "randomization.yaml")

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

HOVER_ACTION = 2.0 * GRAVITY / CTBR_THRUST_RANGE[1] - 1.0
"""The thrust action that holds a nominal quadrotor in the air (the latency queue starts with it)."""


def _check_plant_names(names) -> None:
    unknown = sorted(set(names) - set(NOMINAL_PLANT))
    if unknown:
        raise ValueError(f"unknown quadrotor randomization parameter(s) {unknown}; known: {sorted(NOMINAL_PLANT)}")


# --------------------------------------------------------------------------- physics back ends


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


# --------------------------------------------------------------------------- the environment core


class JuggleCore:
    """Randomization, resets, action latency, observation noise and the task over a physics back end
    (numpy in, numpy out; the env classes convert).

    Args:
        physics: :class:`RolloutPhysics`, :class:`~robot_rl.envs.quad_juggle_warp.WarpPhysics` or
            :class:`SimPhysics`.
        config: the task.
        randomization: YAML path, mapping or :class:`Randomization`; None: nominal plant, fixed start.
        split: randomization split to draw from ("train" or "eval").
        overrides: parameters fixed for every draw (e.g. ``{"ball_mass": 0.005}``).
        seed: seed of the draws and the noise.
        auto_reset: reset finished pairs inside :meth:`step` (vector envs) or leave them to the caller.
        variant_refresh_steps: with shared models (:class:`RolloutPhysics`), one variant is redrawn
            every this many steps (all of 64 about once per training episode; the pairs on it see
            the change mid-episode, like periodic re-randomization); 0: never.
    """

    def __init__(self, physics: RolloutPhysics | SimPhysics, config: JuggleConfig | None = None,
                 randomization: str | os.PathLike | Mapping | Randomization | None = DEFAULT_RANDOMIZATION,
                 split: str = "train", overrides: Mapping[str, Any] | None = None, seed: int = 0,
                 auto_reset: bool = True, variant_refresh_steps: int = 10) -> None:
        self.physics = physics
        self.n = physics.n
        self.config = config if config is not None else JuggleConfig()
        self.task = JuggleTask(self.n, self.config)
        self.randomization = Randomization.load(randomization) if randomization is not None else None
        if self.randomization is not None:
            _check_plant_names(self.randomization.parameters(split))
        self.split = split
        self.overrides = dict(overrides or {})
        _check_plant_names(self.overrides)
        self.rng = np.random.default_rng(seed)
        self.auto_reset = auto_reset
        self.plant = {name: np.array([np.asarray(v, dtype=np.float64)] * self.n) for name, v in NOMINAL_PLANT.items()}
        self.latency = np.zeros(self.n, dtype=np.int64)
        self.queue = np.full((self.n, 3, 4), 0.0)
        self.ret = np.zeros(self.n)
        self.ball_pos_measured = np.zeros((self.n, 3))
        self.ball_vel_measured = np.zeros((self.n, 3))
        self.shared_variants = isinstance(physics, RolloutPhysics) and not physics.own_models
        self.variant_refresh_steps = int(variant_refresh_steps)
        self._steps = 0
        if self.shared_variants:
            for variant in range(len(physics.variants)):
                self._redraw_variant(variant)

    def _draw(self, k: int) -> dict[str, np.ndarray]:
        """``k`` draws of every plant parameter: nominal, then the split's, then the overrides."""
        values = {name: np.array([np.asarray(v, dtype=np.float64)] * k) for name, v in NOMINAL_PLANT.items()}
        if self.randomization is not None:
            values.update(self.randomization.sample_batch(self.split, self.rng, k))
        for name, v in self.overrides.items():
            values[name] = np.array([np.asarray(v, dtype=np.float64)] * k)
        return values

    def _redraw_variant(self, variant: int) -> None:
        values = {name: float(v[0]) for name, v in self._draw(1).items() if name in MODEL_PARAMS}
        self.physics.set_variant(variant, values)
        on_it = self.physics.variant_of == variant
        for name, v in values.items():
            self.plant[name][on_it] = v

    def reset(self, ids: np.ndarray | None = None) -> None:
        """New episodes for pairs ``ids`` (default all): fresh plant draw, start state, task state."""
        ids = np.arange(self.n) if ids is None else np.asarray(ids, dtype=np.int64)
        if ids.size == 0:
            return
        k = ids.size
        values = self._draw(k)
        self.physics.set_plant(ids, values, self.rng)
        for name, v in values.items():
            self.plant[name][ids] = v
        home = np.asarray(self.config.home)
        quad_pos = home + values["quad_start_offset"]
        ball_pos = np.column_stack([quad_pos[:, :2], np.full(k, home[2])]) + values["ball_start_offset"]
        self.physics.set_state(ids, quad_pos, ball_pos)
        self.latency[ids] = values["action_latency_steps"].astype(np.int64)
        self.queue[ids] = 0.0
        self.queue[ids, :, 0] = HOVER_ACTION
        self.ret[ids] = 0.0
        self.task.reset(ids, self.physics.state())
        self._measure_ball(ids)

    def _measure_ball(self, ids: np.ndarray | None = None) -> None:
        """What motion capture gives: a noisy ball position, and the velocity by differencing it over
        the policy step (as the ROS actor computes it from ``ball/pose``). ``ids``: pairs that start
        an episode (ball at rest: velocity 0)."""
        pos = self.physics.state().ball_pos
        if ids is None:
            noisy = pos + self.rng.normal(size=pos.shape) * self.plant["position_noise"][:, None]
            self.ball_vel_measured = (noisy - self.ball_pos_measured) * self.config.policy_hz
            self.ball_pos_measured = noisy
        else:
            self.ball_pos_measured[ids] = pos[ids] + (self.rng.normal(size=(len(ids), 3))
                                                      * self.plant["position_noise"][ids, None])
            self.ball_vel_measured[ids] = 0.0

    def observations(self) -> tuple[np.ndarray, np.ndarray]:
        """(policy obs (N, OBS_DIM): noisy quadrotor state, measured ball position and differenced
        velocity; critic obs (N, OBS_DIM + PRIVILEGED_DIM): the true state plus the plant)."""
        s = self.physics.state()
        clean = self.task.observation(s)
        p, rng = self.plant, self.rng
        noisy = JuggleState(
            s.quad_pos + rng.normal(size=(self.n, 3)) * p["position_noise"][:, None], s.quad_quat,
            s.quad_vel + rng.normal(size=(self.n, 3)) * p["velocity_noise"][:, None],
            s.quad_rates + rng.normal(size=(self.n, 3)) * p["rate_noise"][:, None],
            self.ball_pos_measured, self.ball_vel_measured)
        critic = np.concatenate([clean, self.task.privileged(p, self.latency)], axis=1)
        return self.task.observation(noisy), critic

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One policy step for every pair. ``actions`` (N, 4) in [-1, 1] (clipped).

        Returns ``(reward, terminated, truncated, info)``; ``info["log"]`` holds the means over
        the episodes that ended in this step (``Episode/...``) and the reward terms' means over the
        pairs (``Reward/...``), ``info["ended"]`` their indices and ``info["episode_hits"]`` their
        hit counts, ``info["terms"]`` the terms per pair. With ``auto_reset`` the ended pairs are
        already in new episodes when this returns.

        Raises:
            ValueError: wrong shape or a non-finite action (nothing is simulated).
        """
        a = np.asarray(actions, dtype=np.float64)
        if a.shape != (self.n, 4):
            raise ValueError(f"actions must have shape ({self.n}, 4), got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"actions must be finite; non-finite rows {np.flatnonzero(~np.isfinite(a).all(1))[:8]}")
        a = np.clip(a, -1.0, 1.0)
        self._steps += 1
        if self.shared_variants and self.variant_refresh_steps and self._steps % self.variant_refresh_steps == 0:
            self._redraw_variant((self._steps // self.variant_refresh_steps) % len(self.physics.variants))
        self.queue[:, 1:] = self.queue[:, :-1].copy()
        self.queue[:, 0] = a
        executed = self.queue[np.arange(self.n), self.latency]
        self.physics.step(ctbr_from_action(executed))
        self._measure_ball()
        state = self.physics.state()
        terms, terminated, events = self.task.step(state, a)
        reward = sum(terms.values())
        self.ret += reward
        truncated = (self.task.steps >= self.config.max_episode_steps) & ~terminated
        ended = np.flatnonzero(terminated | truncated)
        log = {f"Reward/{name}": float(v.mean()) for name, v in terms.items()}
        info: dict[str, Any] = {"terms": terms, "events": events, "ended": ended,
                                "episode_hits": self.task.hits[ended].copy(),
                                "episode_steps": self.task.steps[ended].copy(),
                                "episode_returns": self.ret[ended].copy()}
        if ended.size:
            t = self.task
            apexes = t.apexes[ended]
            log.update({
                "Episode/hits": float(t.hits[ended].mean()),
                "Episode/contacts": float(t.contacts[ended].mean()),
                "Episode/length_s": float(t.steps[ended].mean() / self.config.policy_hz),
                "Episode/apex_height": float(t.apex_sum[ended].sum() / max(apexes.sum(), 1)),
                "Episode/ball_lost": float(events["ball_lost"][ended].mean()),
                "Episode/crash": float(events["crash"][ended].mean()),
                "Episode/timeout": float(truncated[ended].mean()),
            })
            if self.auto_reset:
                self.reset(ended)
        info["log"] = log
        return reward, terminated, truncated, info


# --------------------------------------------------------------------------- the API wrappers


PHYSICS_BACKENDS = ("auto", "rollout", "warp")
"""``rollout``: :class:`RolloutPhysics` (CPU threads); ``warp``: MuJoCo Warp
(:class:`~robot_rl.envs.quad_juggle_warp.WarpPhysics`, GPU); ``auto``: Warp when the env's torch
device is a GPU and MuJoCo Warp is installed, else rollout."""


def _make_core(num_envs: int, config: JuggleConfig | None, sim_config: QuadJuggleConfig | None,
               randomization, split: str, overrides, seed: int, nthread: int | None, auto_reset: bool,
               physics: str = "rollout", device: str = "cpu") -> JuggleCore:
    sim_config = sim_config if sim_config is not None else QuadJuggleConfig()
    if config is not None and abs(config.policy_hz - sim_config.policy_hz) > 1e-9:
        raise ValueError(f"task policy_hz {config.policy_hz} != simulator policy_hz {sim_config.policy_hz}")
    if physics not in PHYSICS_BACKENDS:
        raise ValueError(f"physics must be one of {PHYSICS_BACKENDS}, got {physics!r}")
    if physics == "auto":
        from robot_rl.envs.quad_juggle_warp import warp_available

        physics = "warp" if str(device).startswith("cuda") and warp_available() else "rollout"
    if physics == "warp":
        from robot_rl.envs.quad_juggle_warp import WarpPhysics

        backend: BatchedPhysics = WarpPhysics(num_envs, sim_config, _warp_device(device))
    else:
        backend = RolloutPhysics(num_envs, sim_config, nthread)
    return JuggleCore(backend, config, randomization, split, overrides, seed, auto_reset)


def _warp_device(device: str) -> str | None:
    """The Warp device of a torch device string (``cuda`` -> ``cuda:0``; ``cpu`` -> Warp's default)."""
    device = str(device)
    if device == "cuda":
        return "cuda:0"
    return device if device.startswith("cuda:") else None


class QuadJuggleVecEnv:
    """N pairs with the Isaac Lab / rsl_rl calling convention (torch tensors on ``device``).

    ``obs = {"policy": (N, OBS_DIM), "critic": (N, OBS_DIM + PRIVILEGED_DIM)}`` float32; reward
    float32 (N,); terminated / truncated bool (N,); ``extras["log"]`` episode statistics and
    ``extras["time_outs"]`` (= truncated, rsl_rl's name). Keyword arguments as
    :class:`JuggleCore`, plus ``sim_config`` and ``nthread`` of :class:`RolloutPhysics` and
    ``physics`` (:data:`PHYSICS_BACKENDS`; ``auto``: MuJoCo Warp on a GPU ``device``).
    """

    num_actions = 4
    num_obs = OBS_DIM
    num_privileged_obs = OBS_DIM + PRIVILEGED_DIM

    def __init__(self, num_envs: int, device: str = "cpu", config: JuggleConfig | None = None,
                 sim_config: QuadJuggleConfig | None = None,
                 randomization: str | os.PathLike | Mapping | Randomization | None = DEFAULT_RANDOMIZATION,
                 split: str = "train", overrides: Mapping[str, Any] | None = None, seed: int = 0,
                 nthread: int | None = None, physics: str = "auto") -> None:
        import torch

        self._torch = torch
        self.core = _make_core(num_envs, config, sim_config, randomization, split, overrides, seed, nthread, True,
                               physics, device)
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.max_episode_length = self.core.config.max_episode_steps

    @property
    def episode_length_buf(self):
        return self._torch.as_tensor(self.core.task.steps, device=self.device)

    def _obs(self) -> dict[str, Any]:
        policy, critic = self.core.observations()
        t = self._torch
        return {"policy": t.from_numpy(policy).to(self.device), "critic": t.from_numpy(critic).to(self.device)}

    def reset(self) -> tuple[dict[str, Any], dict[str, Any]]:
        self.core.reset()
        return self._obs(), {}

    def step(self, actions) -> tuple[dict[str, Any], Any, Any, Any, dict[str, Any]]:
        t = self._torch
        a = actions.detach().to("cpu", t.float64).numpy() if isinstance(actions, t.Tensor) else actions
        reward, terminated, truncated, info = self.core.step(a)
        obs = self._obs()
        dev = self.device
        truncated_t = t.from_numpy(truncated).to(dev)
        extras = {"log": info["log"], "time_outs": truncated_t, "episode_hits": info["episode_hits"]}
        return (obs, t.from_numpy(reward.astype(np.float32)).to(dev), t.from_numpy(terminated).to(dev),
                truncated_t, extras)

    def close(self) -> None:
        self.core.physics.close()


class QuadJuggleGymVectorEnv(gym.vector.VectorEnv):
    """The batch as a ``gymnasium.vector.VectorEnv`` (numpy; same-step autoreset: an ended pair's
    last observation is in ``infos["final_obs"]`` and the returned one starts its next episode)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        self.core = _make_core(num_envs, kwargs.pop("config", None), kwargs.pop("sim_config", None),
                               kwargs.pop("randomization", DEFAULT_RANDOMIZATION), kwargs.pop("split", "train"),
                               kwargs.pop("overrides", None), kwargs.pop("seed", 0), kwargs.pop("nthread", None),
                               False)
        if kwargs:
            raise TypeError(f"unexpected arguments {sorted(kwargs)}")
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.core.rng = np.random.default_rng(seed)
        self.core.reset()
        return self.core.observations()[0], {}

    def step(self, actions):
        reward, terminated, truncated, info = self.core.step(actions)
        obs = self.core.observations()[0]
        infos: dict[str, Any] = {}
        ended = info["ended"]
        if ended.size:
            final = np.zeros_like(obs)
            final[ended] = obs[ended]
            infos = {"final_obs": final, "_final_obs": np.isin(np.arange(self.num_envs), ended),
                     "episode_hits": info["episode_hits"]}
            self.core.reset(ended)
            obs = self.core.observations()[0]
        return obs, reward, terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        self.core.physics.close()


class QuadJuggleEnv(gym.Env):
    """One quadrotor + ball (``robot_rl/QuadJuggle-v0``): observation (OBS_DIM,) float32, action
    (4,) in [-1, 1] (collective thrust and body rates, see
    :func:`~robot_rl.control.quad_rate.ctbr_from_action`). Keyword arguments as :class:`JuggleCore`
    (``randomization``, ``split``, ``overrides``) plus ``config`` and ``sim_config``."""

    metadata = {"render_modes": []}

    def __init__(self, config: JuggleConfig | None = None, sim_config: QuadJuggleConfig | None = None,
                 randomization: str | os.PathLike | Mapping | Randomization | None = DEFAULT_RANDOMIZATION,
                 split: str = "train", overrides: Mapping[str, Any] | None = None) -> None:
        self.core = JuggleCore(SimPhysics(sim_config), config, randomization, split, overrides, 0, auto_reset=False)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.core.rng = np.random.default_rng(seed)
        self.core.reset()
        return self.core.observations()[0][0], {}

    def step(self, action):
        reward, terminated, truncated, info = self.core.step(np.asarray(action, dtype=np.float64).reshape(1, 4))
        obs = self.core.observations()[0][0]
        return obs, float(reward[0]), bool(terminated[0]), bool(truncated[0]), {
            "hits": int(self.core.task.hits[0]), "terms": {k: float(v[0]) for k, v in info["terms"].items()}}
