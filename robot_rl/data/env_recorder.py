"""Episodes of any Gymnasium environment into an episode dataset, as its adapter sees them.

What is stored is what `robot-rl train --env --demos` loads back: each camera at the adapter's size,
the state entries concatenated but not normalised (the normalisation is the training run's; a
dataset outlives it), and the action in the environment's own units, its entries concatenated
(the adapter maps it to the agent's [-1, 1] when it is loaded). The dataset's task config names the
environment, its options and the adapter's entries, so a dataset recorded from one environment is
not mistaken for another's.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import numpy as np

from robot_rl.data.episodes import EpisodeSchema, EpisodeWriter
from robot_rl.envs.adapter import EnvAdapter


def env_schema(adapter: EnvAdapter) -> EpisodeSchema:
    size = adapter.image_size
    return EpisodeSchema({k: (size, size, 3) for k in adapter.cameras}, adapter.state_dim, adapter.action_dim)


def env_task_config(env_id: str, env_kwargs: Mapping[str, Any], adapter: EnvAdapter) -> dict[str, Any]:
    return {"env_id": env_id, "env_kwargs": dict(env_kwargs), "state_keys": list(adapter.state_keys),
            "cameras": list(adapter.camera_keys), "image_size": adapter.image_size,
            "actions": [a.path for a in adapter.actions]}


class EnvEpisodeRecorder:
    """Appends episodes to the dataset at `path` (created if absent; whether that is allowed is the caller's
    check). Observations are raw canonical ones (`CanonicalEnv(..., normalize=False)`)."""

    def __init__(self, path, env_id: str, env_kwargs: Mapping[str, Any], adapter: EnvAdapter):
        self.adapter = adapter
        self.writer = EpisodeWriter(path, env_schema(adapter), env_task_config(env_id, env_kwargs, adapter))

    def _obs(self, raw) -> dict[str, np.ndarray]:
        if not self.adapter.cameras:
            return {"state": np.asarray(raw, np.float32)}
        return {**{k: raw[k] for k in self.adapter.cameras}, "state": np.asarray(raw["state"], np.float32)}

    def add_step(self, raw_obs, agent_action: np.ndarray, reward: float, terminated: bool, truncated: bool,
                 intervention: bool, success: bool | None = None) -> None:
        """One step from `raw_obs`; `agent_action` in the agent's [-1, 1] (stored in the environment's units)."""
        env_action = self.adapter.env_action(agent_action)
        flat = np.concatenate([np.asarray(env_action[a.path] if self.adapter.action_is_dict else env_action,
                                          np.float32).ravel() for a in self.adapter.actions])
        self.writer.add_step(self._obs(raw_obs), flat, reward, terminated, truncated, intervention=intervention,
                             success_label=None if success is None else bool(success), stamp=time.time())

    def end_episode(self, final_obs, success_check: bool | None = None) -> int:
        """Commits the episode; `success_check`: the environment's own success where it ended (beside a label)."""
        return self.writer.end_episode(self._obs(final_obs), success_check)

    def discard_episode(self) -> None:
        self.writer.discard_episode()

    @property
    def num_episodes(self) -> int:
        return self.writer.num_episodes
