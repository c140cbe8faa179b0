"""On-policy runner: PPO on any vectorized env with the Isaac Lab / rsl_rl calling convention.

The env has ``num_envs``, ``num_actions``, ``reset() -> (obs, extras)`` and
``step(actions) -> (obs, reward, terminated, truncated, extras)`` with torch tensors, ``obs`` a dict
with ``"policy"`` and optionally ``"critic"`` (privileged; the critic sees the policy obs without
it), finished sub-environments reset inside ``step``. ``extras["log"]`` (scalars) is averaged into
the iteration's statistics. So :class:`~robot_rl.robots.quad.vec_env.QuadJuggleVecEnv` and an
Isaac Lab ``ManagerBasedRLEnv`` / ``DirectRLEnv`` task plug in alike.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import deque
from typing import Any, Callable, Iterator

import torch

from robot_rl.agents.ppo import PPO, PPOConfig
from robot_rl.artifacts import load_checkpoint

__all__ = ["OnPolicyRunner", "Stopped", "sigint_stops"]


class Stopped(KeyboardInterrupt):
    """Raised at the runner's next network call once its `stop` event is set. A KeyboardInterrupt: whatever
    stops a run on Ctrl-C stops it on this, and the compiled losses' fallback (`except Exception`) lets it pass."""


@contextlib.contextmanager
def sigint_stops() -> Iterator[threading.Event]:
    """An event Ctrl-C sets while it also raises KeyboardInterrupt, as Python's own handler does: one that lands
    in a finalizer (a `__del__` or weakref callback, which torch runs at any moment) is printed as "Exception
    ignored" and dropped, and the run went on; the event, a runner's `stop`, ends it at its next network call.
    A SIGINT that is ignored (a background job's) stays ignored. Main thread only."""
    stop = threading.Event()
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        yield stop
        return

    def interrupt(signum, frame) -> None:
        stop.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


class OnPolicyRunner:
    """Collects ``num_steps_per_env`` steps of every env, updates, logs; repeats.

    Args:
        env: the vectorized environment (see the module docstring).
        config: PPO hyperparameters.
        log_dir: TensorBoard directory (None: no TensorBoard).
        device: the learner's torch device (the env's tensors are moved there).
        seed: seed of the networks and minibatch order.
        log_fn: called with each iteration's statistics.
        stop: once set, the iteration in progress ends at its next network call (every rollout step and
            minibatch makes one) by raising :class:`Stopped`.
    """

    def __init__(self, env: Any, config: PPOConfig, log_dir: str | None = None, device: str | torch.device = "cpu",
                 seed: int = 0, log_fn: Callable[[dict[str, float]], None] | None = None,
                 stop: threading.Event | None = None) -> None:
        self.env, self.config, self.device = env, config, torch.device(device)
        obs, _ = env.reset()
        self.obs, self.critic_obs = self._split(obs)
        self.alg = PPO(self.obs.shape[1], self.critic_obs.shape[1], int(env.num_actions), int(env.num_envs), config,
                       self.device, seed)
        if stop is not None:
            def raise_if_stopping(*_) -> None:
                if stop.is_set():
                    raise Stopped

            for network in self.alg.actor_critic.children():
                network.register_forward_pre_hook(raise_if_stopping)
        self.writer = None
        if log_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir)
        self.log_fn = log_fn
        self.iteration = 0
        self.total_env_steps = 0
        self.episode_returns: deque[float] = deque(maxlen=100)
        self.episode_lengths: deque[float] = deque(maxlen=100)
        self._ret = torch.zeros(env.num_envs, device=self.device)
        self._len = torch.zeros(env.num_envs, device=self.device)

    def _split(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        policy = obs["policy"].to(self.device, torch.float32)
        critic = obs.get("critic")
        return policy, (critic.to(self.device, torch.float32) if critic is not None else policy)

    def learn(self, num_iterations: int) -> list[dict[str, float]]:
        """Runs ``num_iterations`` rounds; returns their statistics."""
        history = []
        for _ in range(num_iterations):
            started = time.perf_counter()
            logs: dict[str, list[float]] = {}
            self.alg.actor_critic.train()
            with torch.inference_mode():
                for _ in range(self.config.num_steps_per_env):
                    actions = self.alg.act(self.obs, self.critic_obs)
                    obs, reward, terminated, truncated, extras = self.env.step(actions)
                    reward = reward.to(self.device, torch.float32)
                    terminated, truncated = terminated.to(self.device), truncated.to(self.device)
                    self.alg.process_env_step(reward, terminated, truncated)
                    self.obs, self.critic_obs = self._split(obs)
                    self._track_episodes(reward, terminated | truncated)
                    for key, value in extras.get("log", {}).items():
                        logs.setdefault(key, []).append(float(value))
                self.alg.compute_returns(self.critic_obs)
            collected = time.perf_counter()
            losses = self.alg.update()
            learned = time.perf_counter()
            steps = self.config.num_steps_per_env * int(self.env.num_envs)
            self.total_env_steps += steps
            self.iteration += 1
            stats = {"iteration": self.iteration, "env_steps": self.total_env_steps,
                     "collection_s": collected - started, "learning_s": learned - collected,
                     "steps_per_s": steps / (learned - started), **losses,
                     **{key: sum(v) / len(v) for key, v in logs.items()}}
            if self.episode_returns:
                stats["mean_return"] = sum(self.episode_returns) / len(self.episode_returns)
                stats["mean_length"] = sum(self.episode_lengths) / len(self.episode_lengths)
            self._log(stats)
            history.append(stats)
        return history

    def _track_episodes(self, reward: torch.Tensor, done: torch.Tensor) -> None:
        self._ret += reward
        self._len += 1
        if done.any():
            self.episode_returns.extend(self._ret[done].tolist())
            self.episode_lengths.extend(self._len[done].tolist())
            self._ret[done] = 0.0
            self._len[done] = 0.0

    def _log(self, stats: dict[str, float]) -> None:
        if self.writer is not None:
            for key, value in stats.items():
                if key not in ("iteration", "env_steps"):
                    name = key if "/" in key else (f"Perf/{key}" if key.endswith(("_s", "per_s")) else f"Train/{key}")
                    self.writer.add_scalar(name, value, self.total_env_steps)
            self.writer.flush()
        if self.log_fn is not None:
            self.log_fn(stats)

    def save(self, path: str) -> None:
        torch.save({"alg": self.alg.state_dict(), "iteration": self.iteration,
                    "total_env_steps": self.total_env_steps}, path)

    def load(self, path: str) -> None:
        state = load_checkpoint(path, self.device, weights_only=False)
        self.alg.load_state_dict(state["alg"])
        self.iteration, self.total_env_steps = int(state["iteration"]), int(state["total_env_steps"])
