"""Scripted episodes of a Gymnasium task, recorded to an episode dataset (zarr).

Demonstrations for learned rewards need what a person's recording would hold: every camera frame,
the success label of every step, and a few frames past the first success (a person keeps holding
the lifted cube for a moment before labelling the episode), so done detectors see more than one
positive frame per episode. `rollout` is the one loop; `record_scripted_episodes` writes its
episodes with the task's goal sentence in the dataset's task config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np

from robot_rl.data.episodes import EpisodeSchema, EpisodeWriter

Policy = Callable[[Mapping[str, np.ndarray], np.random.Generator], np.ndarray]
"""(true state, rng) -> action."""


@dataclass
class Rollout:
    """One episode: T + 1 observations and T steps."""

    observations: list[dict[str, np.ndarray]] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    success: list[bool] = field(default_factory=list)
    """Whether the observation each step reached shows success."""
    states: list[dict[str, np.ndarray]] = field(default_factory=list)
    """True state of every observation (T + 1)."""
    truncated: bool = False

    @property
    def succeeded(self) -> bool:
        return any(self.success)


def rollout(env: gym.Env, policy: Policy, rng: np.random.Generator, seed: int,
            steps_after_success: int = 0, max_steps: int | None = None,
            stop: Callable[[Mapping[str, np.ndarray]], bool] | None = None) -> Rollout:
    """Runs `policy` on the env's true state (`info["state"]`) from a reset with `seed`, until the
    env truncates, `stop(state)` says so, or `steps_after_success` steps after the first success
    (the env's own termination on success is ignored for those steps)."""
    obs, info = env.reset(seed=seed)
    episode = Rollout(observations=[obs], states=[info["state"]])
    remaining = None
    limit = max_steps if max_steps is not None else getattr(env.unwrapped, "max_episode_steps", 200)
    for _ in range(limit + steps_after_success):
        action = np.asarray(policy(info["state"], rng), np.float32)
        obs, reward, terminated, truncated, info = env.step(action)
        success = bool(info.get("is_success", info.get("success", False)))
        episode.observations.append(obs)
        episode.states.append(info["state"])
        episode.actions.append(action)
        episode.rewards.append(float(reward))
        episode.success.append(success)
        if success and remaining is None:
            remaining = steps_after_success
        if remaining is not None:
            if remaining == 0:
                break
            remaining -= 1
        elif truncated or terminated:
            episode.truncated = bool(truncated)
            break
        elif stop is not None and stop(info["state"]):
            break
    return episode


def random_actions(action_dim: int) -> Callable[..., np.ndarray]:
    """A stand-in for an expert that acts uniformly at random (expert signature): recorded with
    `successful_only=False`, its episodes are the failures a reward model needs as negatives (SERL
    trains its classifiers on such rollouts)."""
    return lambda state, rng, noise=0.0: rng.uniform(-1.0, 1.0, action_dim).astype(np.float32)


def record_scripted_episodes(path: str, env_id: str, expert: Callable[..., np.ndarray], episodes: int, *,
                             goal: str, seed: int = 0, noise: float = 0.1, env_kwargs: Mapping[str, Any] | None = None,
                             steps_after_success: int = 5, successful_only: bool = True) -> dict[str, Any]:
    """Records `episodes` scripted episodes (`expert(state, rng, noise)`) to the dataset at `path`.

    With `successful_only`, failed attempts are not written (at most 3x `episodes` + 10 attempts).
    Returns counts: written, attempts, successes, steps.

    Raises:
        RuntimeError: the expert failed too often to record `episodes` successful episodes.
    """
    import robot_rl.envs  # noqa: F401 - registers the environments

    env_kwargs = dict(env_kwargs or {})
    env = gym.make(env_id, **env_kwargs).unwrapped
    space = env.observation_space
    cameras = {k: s.shape for k, s in space.spaces.items() if k != "state"} if isinstance(space, gym.spaces.Dict) else {}
    state_dim = space["state"].shape[0] if cameras else space.shape[0]
    writer = EpisodeWriter(path, EpisodeSchema(cameras, state_dim, env.action_space.shape[0]), {
        "env_id": env_id, "env_kwargs": env_kwargs, "goal": goal, "source": "scripted_expert", "noise": noise,
        "steps_after_success": steps_after_success})
    rng = np.random.default_rng(seed)
    written = attempts = successes = steps = 0
    try:
        while written < episodes:
            if attempts >= 3 * episodes + 10:
                raise RuntimeError(f"{env_id}: the scripted expert succeeded in {successes} of {attempts} episodes")
            attempts += 1
            episode = rollout(env, lambda state, r: expert(state, r, noise), rng, int(rng.integers(2**31)),
                              steps_after_success)
            successes += episode.succeeded
            if successful_only and not episode.succeeded:
                continue
            as_dict = (lambda o: o) if cameras else (lambda o: {"state": o})
            last = len(episode.actions) - 1
            for t, action in enumerate(episode.actions):
                writer.add_step(as_dict(episode.observations[t]), action, episode.rewards[t],
                                terminated=t == last and episode.succeeded,
                                truncated=t == last and not episode.succeeded, intervention=False,
                                success_label=episode.success[t],
                                stamp=float(np.asarray(episode.states[t].get("time", t))))
            writer.end_episode(as_dict(episode.observations[-1]))
            written += 1
            steps += len(episode.actions)
    finally:
        env.close()
    return {"episodes": written, "attempts": attempts, "successes": successes, "steps": steps}
