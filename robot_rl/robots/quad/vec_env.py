"""Quadrotor juggling environments: many quadrotors stepped in one call, and the single env.

* :class:`QuadJuggleVecEnv` -- N quadrotor + ball pairs with the Isaac Lab / rsl_rl calling
  convention (torch tensors on the learner's device; ``reset() -> (obs, extras)``,
  ``step(actions) -> (obs, reward, terminated, truncated, extras)``, ``obs = {"policy": ...,
  "critic": ...}``; finished pairs are reset inside ``step``), so the PPO runner
  (:mod:`robot_rl.training.ppo_runner`) trains on it or on an Isaac Lab task alike.
* :class:`QuadJuggleGymVectorEnv` -- the same batch as a ``gymnasium.vector.VectorEnv`` (numpy,
  same-step autoreset with ``final_obs`` in the infos).
* :class:`QuadJuggleEnv` -- one pair as a ``gymnasium.Env`` (``robot_rl/QuadJuggle-v0``) on
  :class:`~robot_rl.robots.quad.env.QuadJuggleSim`; what a plain ``SyncVectorEnv`` vectorizes.

Physics (:mod:`robot_rl.robots.quad.physics`): one MuJoCo model per pair (so masses, inertia
and restitution are randomized per pair), stepped by ``mujoco.rollout`` on a thread pool one 2 ms
physics step at a time, because the batched rate controller + mixer + motor model
(:class:`~robot_rl.robots.quad.control.QuadController`) closes the loop at 500 Hz on the measured
body rates between physics steps.  The 50 Hz policy step is 10 of those.  All the task logic (hits,
rewards, terminations, observations) is :mod:`robot_rl.robots.quad.juggling`, batched; every physics
back end feeds it the same state (on a GPU: MuJoCo Warp, :mod:`robot_rl.robots.quad.warp`,
with the same controller).

Randomization (``sim/quad/randomization.yaml``, the format of
:mod:`robot_rl.envs.randomization`): drawn per pair at every reset; parameters a split omits stay
nominal (:data:`NOMINAL_PLANT`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import gymnasium as gym
import numpy as np

from robot_rl.robots.quad.control import CTBR_THRUST_RANGE, GRAVITY, ctbr_from_action
from robot_rl.robots.quad.juggling import OBS_DIM, PRIVILEGED_DIM, JuggleConfig, JuggleState, JuggleTask
from robot_rl.robots.quad.env import QuadJuggleConfig
from robot_rl.robots.quad.physics import MODEL_PARAMS, NOMINAL_PLANT, BatchedPhysics, RolloutPhysics, SimPhysics
from robot_rl.envs.randomization import Randomization
from robot_rl.resources import package_path

__all__ = [
    "DEFAULT_RANDOMIZATION",
    "PHYSICS_BACKENDS",
    "JuggleCore",
    "QuadJuggleEnv",
    "QuadJuggleGymVectorEnv",
    "QuadJuggleVecEnv",
]

DEFAULT_RANDOMIZATION: Path = package_path(Path("sim") / "quad" / "randomization.yaml")

HOVER_ACTION = 2.0 * GRAVITY / CTBR_THRUST_RANGE[1] - 1.0
"""The thrust action that holds a nominal quadrotor in the air (the latency queue starts with it)."""
MAX_LATENCY_STEPS = 50
"""Longest action latency a plant may have (1 s at 50 Hz)."""


def _check_plant_names(names) -> None:
    unknown = sorted(set(names) - set(NOMINAL_PLANT))
    if unknown:
        raise ValueError(f"unknown quadrotor randomization parameter(s) {unknown}; known: {sorted(NOMINAL_PLANT)}")


_POSITIVE = ("ball_mass", "mass_scale", "inertia_scale", "thrust_scale", "motor_tau")
_NON_NEGATIVE = ("position_noise", "velocity_noise", "rate_noise")


def check_plant_overrides(overrides: Mapping[str, Any]) -> None:
    """Refuses a fixed plant parameter no simulation can run (a typo, a non-physical value, a wrong
    size) naming it; whole latency steps are checked where they are drawn (``JuggleCore.reset``)."""
    _check_plant_names(overrides)
    for name, value in overrides.items():
        shape = np.shape(NOMINAL_PLANT[name])
        v = np.asarray(value, dtype=np.float64)
        if v.shape != shape or not np.all(np.isfinite(v)):
            raise ValueError(f"plant parameter {name} takes {shape[0] if shape else 1} finite number(s), got {value!r}")
        if (name in _POSITIVE and not np.all(v > 0)) or (name in _NON_NEGATIVE and not np.all(v >= 0)):
            raise ValueError(f"plant parameter {name} must be {'positive' if name in _POSITIVE else '>= 0'}, "
                             f"got {value!r}")
        if name == "restitution" and not 0.0 <= float(v) <= 1.0:
            raise ValueError(f"plant parameter restitution must be in [0, 1], got {value!r}")


# --------------------------------------------------------------------------- the environment core


class JuggleCore:
    """Randomization, resets, action latency, observation noise and the task over a physics back end
    (numpy in, numpy out; the env classes convert).

    Args:
        physics: :class:`RolloutPhysics`, :class:`~robot_rl.robots.quad.warp.WarpPhysics` or
            :class:`SimPhysics`.
        config: the task.
        randomization: YAML path, mapping or :class:`Randomization`; None: nominal plant, fixed start.
        split: randomization split to draw from ("train" or "eval").
        overrides: parameters fixed for every draw (e.g. ``{"ball_mass": 0.005}``).
        seed: seed of the draws and the noise.
        auto_reset: reset finished pairs inside :meth:`step` (vector envs) or leave them to the caller.
        hard_fraction: share of draws (each episode's, each shared model variant's) taken from the
            ``train_hard`` split instead of ``split``, all its parameters together: independent
            uniform draws rarely put every parameter near the hard end of its range at once, and a
            policy trained so fails there (benchmarks/juggle_eval.py's ``mean_hits_train_hard``).
        variant_refresh_steps: with shared models (:class:`RolloutPhysics`), one variant is redrawn
            every this many steps (all of 64 about once per training episode; the pairs on it see
            the change mid-episode, like periodic re-randomization); 0: never.
    """

    def __init__(self, physics: RolloutPhysics | SimPhysics, config: JuggleConfig | None = None,
                 randomization: str | os.PathLike | Mapping | Randomization | None = DEFAULT_RANDOMIZATION,
                 split: str = "train", overrides: Mapping[str, Any] | None = None, seed: int = 0,
                 auto_reset: bool = True, variant_refresh_steps: int = 10, hard_fraction: float = 0.0) -> None:
        self.physics = physics
        self.n = physics.n
        self.config = config if config is not None else JuggleConfig()
        self.task = JuggleTask(self.n, self.config)
        self.randomization = Randomization.load(randomization) if randomization is not None else None
        if self.randomization is not None:
            _check_plant_names(self.randomization.parameters(split))
        self.split = split
        if not 0.0 <= hard_fraction <= 1.0:
            raise ValueError(f"hard_fraction must be in [0, 1], got {hard_fraction}")
        if hard_fraction > 0.0:
            if self.randomization is None:
                raise ValueError("hard_fraction needs a randomization with a train_hard split")
            _check_plant_names(self.randomization.parameters("train_hard"))
        self.hard_fraction = float(hard_fraction)
        self.overrides = dict(overrides or {})
        check_plant_overrides(self.overrides)
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
        """``k`` draws of every plant parameter: nominal, then the split's (a ``hard_fraction`` of
        them from ``train_hard``), then the overrides."""
        values = {name: np.array([np.asarray(v, dtype=np.float64)] * k) for name, v in NOMINAL_PLANT.items()}
        if self.randomization is not None:
            values.update(self.randomization.sample_batch(self.split, self.rng, k))
            if self.hard_fraction > 0.0:
                hard = self.rng.random(k) < self.hard_fraction
                for name, v in self.randomization.sample_batch("train_hard", self.rng, int(hard.sum())).items():
                    values[name][hard] = v
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
        latency = np.asarray(values["action_latency_steps"], np.float64)
        if not (np.all(latency >= 0) and np.all(latency <= MAX_LATENCY_STEPS) and np.all(latency == np.round(latency))):
            raise ValueError(f"action_latency_steps must be whole steps in [0, {MAX_LATENCY_STEPS}], got "
                             f"{sorted(set(latency.tolist()))}")
        self.latency[ids] = latency.astype(np.int64)
        if self.latency.max() >= self.queue.shape[1]:  # a longer delay than any drawn so far: a longer queue
            grown = np.zeros((self.n, int(self.latency.max()) + 1, 4))
            grown[:, :self.queue.shape[1]] = self.queue
            grown[:, self.queue.shape[1]:, 0] = HOVER_ACTION
            self.queue = grown
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


PHYSICS_BACKENDS = ("auto", "rollout", "warp", "mjx")
"""``rollout``: :class:`RolloutPhysics` (CPU threads); ``warp``: MuJoCo Warp
(:class:`~robot_rl.robots.quad.warp.WarpPhysics`, GPU, numpy controller); ``mjx``: the whole
env on JAX (:class:`~robot_rl.robots.quad.mjx.QuadJuggleMJXVecEnv`: physics, controller, task
and resets on the device; built by :func:`robot_rl.robots.quad.backends.make_vec_env`); ``auto``:
on a GPU ``device`` MJX when installed, else Warp when installed, else rollout; on CPU rollout."""


def _make_core(num_envs: int, config: JuggleConfig | None, sim_config: QuadJuggleConfig | None,
               randomization, split: str, overrides, seed: int, nthread: int | None, auto_reset: bool,
               physics: str = "rollout", device: str = "cpu", hard_fraction: float = 0.0) -> JuggleCore:
    sim_config = sim_config if sim_config is not None else QuadJuggleConfig()
    if config is not None and abs(config.policy_hz - sim_config.policy_hz) > 1e-9:
        raise ValueError(f"task policy_hz {config.policy_hz} != simulator policy_hz {sim_config.policy_hz}")
    if physics not in ("auto", "rollout", "warp"):
        raise ValueError(f"physics must be one of auto, rollout, warp here (mjx: make_vec_env), got {physics!r}")
    if physics == "auto":
        from robot_rl.robots.quad.warp import warp_available

        physics = "warp" if str(device).startswith("cuda") and warp_available() else "rollout"
    if physics == "warp":
        from robot_rl.robots.quad.warp import WarpPhysics

        backend: BatchedPhysics = WarpPhysics(num_envs, sim_config, _warp_device(device))
    else:
        backend = RolloutPhysics(num_envs, sim_config, nthread)
    return JuggleCore(backend, config, randomization, split, overrides, seed, auto_reset,
                      hard_fraction=hard_fraction)


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
                 nthread: int | None = None, physics: str = "auto", hard_fraction: float = 0.0) -> None:
        import torch

        self._torch = torch
        self.core = _make_core(num_envs, config, sim_config, randomization, split, overrides, seed, nthread, True,
                               physics, device, hard_fraction)
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
    :func:`~robot_rl.robots.quad.control.ctbr_from_action`). Keyword arguments as :class:`JuggleCore`
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
