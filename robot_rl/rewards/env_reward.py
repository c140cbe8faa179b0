"""A progress backend as a Gymnasium environment's reward: RL without the environment's reward.

`ProgressReward` watches the env's cameras (`env.unwrapped.camera_frames()`) and replaces reward
and termination:

    reward_t     = progress_weight * (v_{t+1} - v_t) + done_reward * [done]
    terminated_t = done (done probability >= threshold for `done_consecutive` steps in a row)

where v is the VLAC value accumulated from the backend's deltas (`score(first, previous, current,
goal)`, v <- v + (1 - v) c). The progress part is potential-based shaping with the value as the
potential (its sum over an episode is the final value), so it guides without changing which
behaviour is best; the done part is the learned sparse reward (SERL's classifier reward, from the
same model). The env's own termination (on its true success) is ignored: no true signal leaks
into training. `info` keeps `env_reward`, `env_terminated` and the env's success for evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.rewards.progress import ProgressScorer

__all__ = ["LearnedRewardConfig", "LearnedRewardShaper", "ProgressReward", "relabel_episodes"]


@dataclass(frozen=True)
class LearnedRewardConfig:
    """Where a learned reward comes from and how it is shaped."""

    model: str
    """Directory of a progress model (`robot-rl reward train`)."""
    goal: str
    """Goal sentence the frames are scored against."""
    progress_weight: float = 1.0
    """Weight of the value change per step."""
    done_reward: float = 1.0
    """Reward on the step the model declares done (which ends the episode)."""
    done_consecutive: int = 1
    """Consecutive steps at or above the done threshold before the episode ends."""
    done_threshold: float | None = None
    """Done probability threshold; None: the model's own."""

    def __post_init__(self) -> None:
        if self.progress_weight < 0 or self.done_reward < 0:
            raise ValueError("progress_weight and done_reward must be >= 0")
        if self.done_consecutive < 1:
            raise ValueError(f"done_consecutive must be >= 1, got {self.done_consecutive}")
        if self.done_threshold is not None and not 0.0 < self.done_threshold < 1.0:
            raise ValueError(f"done_threshold must be in (0, 1), got {self.done_threshold}")


class LearnedRewardShaper:
    """The reward formula of the module docstring, one step at a time (shared by the env wrapper and
    offline relabelling)."""

    def __init__(self, config: LearnedRewardConfig, threshold: float):
        self.config, self.threshold = config, float(threshold)
        self.value, self.done_streak = 0.0, 0

    def reset(self) -> None:
        self.value, self.done_streak = 0.0, 0

    def step(self, delta: float, done_probability: float) -> tuple[float, bool]:
        """(reward, done) for a step the backend scored (delta, done probability)."""
        value = self.value + (1.0 - self.value) * float(delta)
        self.done_streak = self.done_streak + 1 if done_probability >= self.threshold else 0
        done = self.done_streak >= self.config.done_consecutive
        reward = self.config.progress_weight * (value - self.value) + self.config.done_reward * done
        self.value = value
        return float(reward), done


def _threshold(scorer: ProgressScorer, config: LearnedRewardConfig) -> float:
    threshold = config.done_threshold if config.done_threshold is not None else getattr(scorer, "done_threshold", None)
    if threshold is None:
        raise ValueError("give done_threshold: the scorer has no threshold of its own")
    return float(threshold)


class ProgressReward(gym.Wrapper):
    """Replaces an env's reward and termination with a progress backend's (module docstring)."""

    def __init__(self, env: gym.Env, scorer: ProgressScorer, config: LearnedRewardConfig):
        super().__init__(env)
        if not callable(getattr(env.unwrapped, "camera_frames", None)):
            raise ValueError(f"{env.unwrapped} has no camera_frames(): a learned reward needs the env's cameras")
        self.scorer, self.config = scorer, config
        self.shaper = LearnedRewardShaper(config, _threshold(scorer, config))
        self._first: dict[str, np.ndarray] = {}
        self._previous: dict[str, np.ndarray] = {}

    def _frames(self) -> dict[str, np.ndarray]:
        return {c: f[None] for c, f in self.env.unwrapped.camera_frames().items()}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._first = self._previous = self._frames()
        self.shaper.reset()
        return obs, info

    def step(self, action):
        obs, env_reward, env_terminated, truncated, info = self.env.step(action)
        current = self._frames()
        delta, done_probability = self.scorer.score(self._first, self._previous, current, self.config.goal)
        reward, done = self.shaper.step(float(delta[0]), float(done_probability[0]))
        self._previous = current
        info = {**info, "env_reward": float(env_reward), "env_terminated": bool(env_terminated),
                "progress_value": self.shaper.value, "done_probability": float(done_probability[0]),
                "predicted_done": done}
        return obs, reward, done, truncated, info

    @property
    def value(self) -> float:
        """The accumulated value of the episode so far."""
        return self.shaper.value


def relabel_episodes(dataset_path: str, scorer: ProgressScorer, config: LearnedRewardConfig,
                     cameras: Any = None) -> dict[str, np.ndarray]:
    """The transitions of an episode dataset (`EpisodeDataset.transitions` layout) with rewards and
    terminations from the backend instead of the recorded ones: what a learner trained on learned
    rewards must load as demonstrations. An episode is cut at the first step the backend calls done
    (that step is terminal); the rest of it would never have happened under the learned reward."""
    from robot_rl.data.episodes import EpisodeDataset
    from robot_rl.rewards.quality import trajectory_scores

    dataset = EpisodeDataset(dataset_path)
    cameras = tuple(dataset.schema.cameras) if cameras is None else tuple(cameras)
    transitions = dataset.transitions(cameras)
    shaper = LearnedRewardShaper(config, _threshold(scorer, config))
    keep, rewards, terminated, last = [], [], [], []
    start = 0
    for index in range(len(dataset)):
        episode = dataset.episode(index)
        frames = {c: episode[c] for c in cameras}
        deltas, done_probability = trajectory_scores(scorer, {c: f[0] for c, f in frames.items()}, frames, config.goal)
        shaper.reset()
        for t in range(len(deltas)):
            reward, done = shaper.step(deltas[t], done_probability[t])
            keep.append(start + t)
            rewards.append(reward)
            terminated.append(done)
            if done:
                break
        last.append(len(keep) - 1)
        start += len(deltas)
    keep = np.asarray(keep, np.int64)
    out = {k: np.asarray(v)[keep] for k, v in transitions.items()}
    out["reward"] = np.asarray(rewards, np.float32)
    out["terminated"] = np.asarray(terminated, bool)
    out["truncated"] = np.zeros(len(keep), bool)
    out["truncated"][last] = ~out["terminated"][last]  # an episode the backend never called done was cut off
    return out


def learned_reward_env(env: gym.Env, config: LearnedRewardConfig, device: str = "cpu") -> ProgressReward:
    """`env` wrapped with the progress model in `config.model`."""
    from robot_rl.rewards.progress import ProgressModel

    return ProgressReward(env, ProgressModel.load(config.model, device=device), config)
