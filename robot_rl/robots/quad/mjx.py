"""The juggling vector env with everything on the accelerator: MuJoCo MJX physics on JAX, and the
rate controller, mixer, motor model, plant randomization, action latency, sensor noise, task
(hits, rewards, terminations, observations) and resets in the same jitted step. No host round trip
per 2 ms substep (the MuJoCo Warp back end reads the body rates back for the numpy controller at
every one), none per policy step but the few scalars of the training log.

Why MJX and not MuJoCo Warp on the GPU machine: its wheel (7 MB) runs on the machine's own JAX,
while warp-lang alone is 149 MB, more than a run may carry. Against CPU MuJoCo on this scene:

* contacts: the ball-racket pair (sphere-cylinder, MJX's SDF collider), elliptic cone, Euler
  integrator and the direct-form ``solref`` that sets the restitution are all supported;
  ``tests/test_quad_juggle_mjx.py`` holds MJX to ``mujoco.mj_step`` through bounces;
* fluid: MJX has only the inertia-box drag model, so the ball (``fluidshape="ellipsoid"`` on CPU)
  gets the box model's quadratic drag, about 1.5x the ellipsoid model's for a sphere (a 47 g ball
  at 3 m/s: ~4.6 % of its weight instead of 3 %) and no Magnus lift; the quadrotor's drag is the
  inertia-box model on both. Policies trained here are evaluated on CPU MuJoCo
  (``robot-rl juggle eval``), where that difference is part of the sim-to-sim gap measured;
* per-world plants: masses, inertia and the restitution's ``solref`` are batched model fields; the
  constants ``mj_setConst`` derives from them (``*_invweight0``) stay nominal, since they only
  scale the contact's regularizer, which this scene's impedance 0.9999 keeps at 1e-4 of the force.

The torch side (the PPO runner) reaches it through :class:`QuadJuggleMJXVecEnv`, with the same
calling convention as :class:`~robot_rl.robots.quad.vec_env.QuadJuggleVecEnv`, exchanging tensors
with JAX through DLPack on the same device. Set ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` when torch
shares the GPU (:func:`share_gpu_with_torch` does it before JAX starts).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from robot_rl.robots.quad.juggling import OBS_DIM, PRIVILEGED_DIM, JuggleConfig
from robot_rl.robots.quad.env import QuadJuggleConfig, _restitution_table
from robot_rl.robots.quad.physics import NOMINAL_PLANT, BatchedPhysics
from robot_rl.robots.quad.vec_env import (DEFAULT_RANDOMIZATION, HOVER_ACTION, MAX_LATENCY_STEPS, _check_plant_names,
                                           check_plant_overrides)
from robot_rl.robots.quad.mjx_step import LOG_KEYS, EnvState, JuggleSpec, StepOut, build_step_functions
from robot_rl.envs.randomization import Choice, LogUniform, Randomization, Uniform

__all__ = ["MJXJuggleEnv", "QuadJuggleMJXVecEnv", "mjx_available", "share_gpu_with_torch"]


def share_gpu_with_torch() -> None:
    """JAX allocates memory as it needs it instead of 75 % of the GPU at start (call before importing jax)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def mjx_available() -> bool:
    """Whether MuJoCo MJX and JAX can be imported (``pip install mujoco-mjx``)."""
    try:
        from mujoco import mjx  # noqa: F401
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------- plant draws on the device


def _sampler(name: str, dist) -> tuple[str, Any]:
    """(kind, parameters) of one distribution, as arrays the jitted draw reads."""
    if isinstance(dist, Uniform):
        return "uniform", (np.asarray(dist.low, np.float32), np.asarray(dist.high, np.float32))
    if isinstance(dist, LogUniform):
        return "loguniform", (np.log(np.asarray(dist.low, np.float32)), np.log(np.asarray(dist.high, np.float32)))
    values = dist.values if isinstance(dist, Choice) else (dist.value,)
    try:
        table = np.asarray(values, np.float32)
    except (TypeError, ValueError):
        raise ValueError(f"randomization parameter {name}: only numbers can be drawn on the device, got {values!r}")
    return "choice", (table,)


def _bounds(kind: str, params: tuple) -> tuple[float, float]:
    lo, hi = (params[0].min(), params[0].max()) if kind == "choice" else (params[0].min(), params[1].max())
    return (float(np.exp(lo)), float(np.exp(hi))) if kind == "loguniform" else (float(lo), float(hi))


@dataclass(frozen=True)
class _PlantDraws:
    """How every plant parameter is drawn, in :meth:`JuggleCore._draw`'s order: nominal, then the split's
    distributions (a ``hard_fraction`` of draws from ``train_hard``), then the overrides."""

    base: dict[str, tuple[str, Any]]
    hard: dict[str, tuple[str, Any]]
    hard_fraction: float
    fixed: dict[str, np.ndarray]

    @classmethod
    def build(cls, randomization: Randomization | None, split: str, hard_fraction: float,
              overrides: Mapping[str, Any]) -> _PlantDraws:
        base = {name: ("choice", (np.asarray([value], np.float32),)) for name, value in NOMINAL_PLANT.items()}
        hard: dict[str, tuple[str, Any]] = {}
        if randomization is not None:
            _check_plant_names(randomization.parameters(split))
            base.update({name: _sampler(name, d) for name, d in randomization.distributions[split].items()})
            if hard_fraction > 0.0:
                _check_plant_names(randomization.parameters("train_hard"))
                hard = {name: _sampler(name, d) for name, d in randomization.distributions["train_hard"].items()}
        fixed = {name: np.asarray(value, np.float32) for name, value in overrides.items()}
        for name, (kind, params) in [*base.items(), *hard.items(), *((k, ("choice", (v[None],))) for k, v in
                                                                     fixed.items())]:
            lo, hi = _bounds(kind, params)
            if name == "restitution" and not 0.3 <= lo <= hi <= 1.0:
                raise ValueError(f"restitution must be drawn from [0.3, 1] on the device, got [{lo}, {hi}]")
            if name == "action_latency_steps" and (lo < 0 or hi > MAX_LATENCY_STEPS
                                                   or (kind == "choice" and np.any(params[0] != np.round(params[0])))
                                                   or (kind != "choice" and lo != hi)):
                raise ValueError(f"action_latency_steps must be whole steps in [0, {MAX_LATENCY_STEPS}], drawn from "
                                 f"a choice; got {kind} over [{lo}, {hi}]")
        return cls(base, hard, float(hard_fraction), fixed)

    def max_latency(self) -> int:
        if "action_latency_steps" in self.fixed:
            return int(self.fixed["action_latency_steps"])
        specs = [self.base["action_latency_steps"], self.hard.get("action_latency_steps",
                                                                  self.base["action_latency_steps"])]
        return int(max(_bounds(*spec)[1] for spec in specs))

    def draw(self, key, n: int) -> dict[str, Any]:
        import jax
        import jax.numpy as jnp

        keys = jax.random.split(key, 2 * len(self.base) + 1)
        values = {name: _draw(keys[i], spec, n) for i, (name, spec) in enumerate(self.base.items())}
        if self.hard:
            hard = jax.random.uniform(keys[-1], (n,)) < self.hard_fraction
            for i, (name, spec) in enumerate(self.hard.items()):
                v = _draw(keys[len(self.base) + i], spec, n)
                values[name] = jnp.where(hard.reshape((n,) + (1,) * (v.ndim - 1)), v, values[name])
        values.update({name: jnp.broadcast_to(jnp.asarray(v), (n,) + v.shape) for name, v in self.fixed.items()})
        return values


def _draw(key, spec: tuple[str, Any], n: int):
    import jax
    import jax.numpy as jnp

    kind, params = spec
    if kind == "choice":
        table = jnp.asarray(params[0])
        return table[jax.random.randint(key, (n,), 0, table.shape[0])]
    low, high = (jnp.asarray(p) for p in params)
    x = jax.random.uniform(key, (n,) + low.shape, minval=low, maxval=high)
    return jnp.exp(x) if kind == "loguniform" else x


# --------------------------------------------------------------------------- the env


class MJXJuggleEnv:
    """N quadrotor + ball pairs as one JAX program (numpy-free inside its step).

    Args:
        num_envs: pairs (worlds).
        config: the task (as :class:`~robot_rl.robots.quad.vec_env.JuggleCore`'s).
        sim_config: physics configuration.
        randomization: YAML path, mapping or :class:`Randomization`; None: nominal plant.
        split: randomization split to draw from.
        overrides: plant parameters fixed for every draw.
        seed: seed of the draws and the noise.
        hard_fraction: share of draws from the ``train_hard`` split.
        device: JAX device (default: JAX's default, the GPU when there is one).
        xml_path: MJCF scene.
    """

    def __init__(self, num_envs: int, config: JuggleConfig | None = None, sim_config: QuadJuggleConfig | None = None,
                 randomization: Any = DEFAULT_RANDOMIZATION, split: str = "train",
                 overrides: Mapping[str, Any] | None = None, seed: int = 0, hard_fraction: float = 0.0,
                 device: Any = None, xml_path: str | os.PathLike | None = None) -> None:
        import jax
        from mujoco import mjx

        from robot_rl.robots.quad.control_jax import ControllerConstants

        self._jax = jax
        if not 0.0 <= hard_fraction <= 1.0:
            raise ValueError(f"hard_fraction must be in [0, 1], got {hard_fraction}")
        overrides = dict(overrides or {})
        check_plant_overrides(overrides)
        self.config = config if config is not None else JuggleConfig()
        self.config.validate()
        sim_config = sim_config if sim_config is not None else QuadJuggleConfig()
        if abs(self.config.policy_hz - sim_config.policy_hz) > 1e-9:
            raise ValueError(f"task policy_hz {self.config.policy_hz} != simulator policy_hz {sim_config.policy_hz}")
        rand = Randomization.load(randomization) if randomization is not None else None
        if hard_fraction > 0.0 and rand is None:
            raise ValueError("hard_fraction needs a randomization with a train_hard split")
        self.draws = _PlantDraws.build(rand, split, hard_fraction, overrides)
        scene = BatchedPhysics(num_envs, sim_config, xml_path)  # the batched back ends' shared scene and controller
        self.n = scene.n
        self.device = device if device is not None else jax.devices()[0]
        self.model = mjx.put_model(scene.base.model, device=self.device)
        base = scene.base
        grid, damping = _restitution_table(float(scene.dt), float(scene.contact_frequency), float(base.params.gravity))
        self.spec = JuggleSpec(n=self.n, n_substeps=int(scene.n_substeps), dt=float(scene.dt), ids=dict(scene.ids),
                               qq=base._qq, qv=base._qv, bq=base._bq, bv=base._bv,
                               act=(base._act_sl.start, base._act_sl.stop), queue_len=self.draws.max_latency() + 1,
                               hover_action=float(HOVER_ACTION), contact_frequency=float(scene.contact_frequency),
                               restitution_grid=grid, restitution_damping=damping,
                               ball_radius=float(scene.nominal.geom_size[scene.ids["ball_geom"]][0]),
                               controller=ControllerConstants.of(scene.controller))
        self._fns = build_step_functions(self.model, self.spec, self.config, self.draws)
        self._key = jax.random.PRNGKey(seed)
        self.state: EnvState | None = None
        self.obs: tuple[Any, Any] | None = None
        """(policy observation (N, OBS_DIM) with sensor noise, critic observation (N, OBS_DIM + PRIVILEGED_DIM))."""

    def reset(self) -> tuple[Any, Any]:
        """Every pair in a new episode (fresh plant draws, start states); returns the observations."""
        with self._jax.default_device(self.device):
            self.state, self.obs = self._fns.reset_all(self._jax.device_put(self._key, self.device))
        return self.obs

    def step(self, actions) -> StepOut:
        """One policy step of every pair; finished pairs start new episodes inside it (``self.obs``
        then holds their first observation). ``actions``: (N, 4) in [-1, 1] (clipped), a JAX array on
        the env's device; :class:`QuadJuggleMJXVecEnv` refuses non-finite ones (checking here would
        wait for the device every step)."""
        if self.state is None:
            raise RuntimeError("call reset() before step()")
        self.state, out, self.obs = self._fns.step(self.state, actions)
        return out

    def raw_physics(self, ctrl, data=None):
        """One policy period of bare MJX steps of every pair's model with constant rotor thrusts
        ``ctrl`` (N, 4): the reference the benchmark measures the full step against."""
        return self._fns.raw_step(self.state.fields, self.state.data if data is None else data, ctrl)


class QuadJuggleMJXVecEnv:
    """:class:`MJXJuggleEnv` with the Isaac Lab / rsl_rl calling convention of
    :class:`~robot_rl.robots.quad.vec_env.QuadJuggleVecEnv` (torch tensors on ``device``, exchanged
    with JAX through DLPack), so the PPO runner trains on it unchanged."""

    num_actions = 4
    num_obs = OBS_DIM
    num_privileged_obs = OBS_DIM + PRIVILEGED_DIM

    def __init__(self, num_envs: int, device: str = "cpu", **kwargs: Any) -> None:
        share_gpu_with_torch()
        import jax
        import torch

        self._torch, self._jax = torch, jax
        self.device = torch.device(device)
        platform = "gpu" if self.device.type == "cuda" else "cpu"
        jax_device = jax.devices(platform)[self.device.index or 0]
        self.env = MJXJuggleEnv(num_envs, device=jax_device, **kwargs)
        self.num_envs = num_envs
        self.max_episode_length = self.env.config.max_episode_steps

    def _to_torch(self, x):
        return self._torch.from_dlpack(x)

    @property
    def episode_length_buf(self):
        return self._to_torch(self.env.state.task.steps)

    def _obs(self) -> dict[str, Any]:
        policy, critic = self.env.obs
        return {"policy": self._to_torch(policy), "critic": self._to_torch(critic)}

    def reset(self) -> tuple[dict[str, Any], dict[str, Any]]:
        self.env.reset()
        return self._obs(), {}

    def step(self, actions) -> tuple[dict[str, Any], Any, Any, Any, dict[str, Any]]:
        """As :meth:`QuadJuggleVecEnv.step`; ValueError for a wrong shape or a non-finite action
        (nothing is simulated)."""
        t = self._torch
        a = t.as_tensor(actions).detach().to(self.device, t.float32).contiguous()
        if a.shape != (self.num_envs, 4):
            raise ValueError(f"actions must have shape ({self.num_envs}, 4), got {tuple(a.shape)}")
        finite_rows = t.isfinite(a).all(1)
        if not bool(finite_rows.all()):
            bad = t.nonzero(~finite_rows).flatten()[:8].tolist()
            raise ValueError(f"actions must be finite; non-finite rows {bad}")
        out = self.env.step(self._jax.dlpack.from_dlpack(a))
        values = np.asarray(out.log)  # the one wait for the device per step: the log's scalars
        log = {f"Reward/{name}": float(v) for name, v in zip(LOG_KEYS, values)}
        ended, hits, steps, apex, lost, crash = values[len(LOG_KEYS):]
        if ended:
            log.update({"Episode/hits": hits / ended, "Episode/length_s": steps / ended / self.env.config.policy_hz,
                        "Episode/apex_height": apex / ended, "Episode/ball_lost": lost / ended,
                        "Episode/crash": crash / ended})
        truncated = self._to_torch(out.truncated)
        extras = {"log": log, "time_outs": truncated}
        return self._obs(), self._to_torch(out.reward), self._to_torch(out.terminated), truncated, extras

    def close(self) -> None:
        pass
