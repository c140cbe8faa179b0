"""A graph run's arm policy judged in simulation: deterministic episodes of the task's environment, each
observation built as arm_actor builds it from the robot's topics."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from robot_rl.training.evaluate import env_accepts, evaluate_policy, node_params


def graph_episodes(run: Path, policy, task, episodes: int, seed: int, split: str, max_s: float | None,
                   max_failures: int | None) -> dict[str, Any]:
    """Episodes whose reset seeds come from `seed`, in randomization split `split` and the scenes the run's
    arm_sim trained in (its cube range); `max_s` does not apply (the task's horizon ends an episode)."""
    import gymnasium as gym

    import robot_rl.envs  # noqa: F401 - registers the environments

    kwargs: dict[str, Any] = {"image_size": task.image_size} if task.cameras else {}
    if env_accepts(task.env_id, "randomization_split"):
        kwargs["randomization_split"] = split
    sim = node_params(run, "arm_sim")
    if "cube_xy_range" in sim and env_accepts(task.env_id, "cube_xy_range"):
        kwargs["cube_xy_range"] = float(sim["cube_xy_range"])
    if env_accepts(task.env_id, "action_history"):
        kwargs["action_history"] = task.action_history
    result = evaluate_policy(lambda obs, info: policy.act(actor_view(obs, info, task), True),
                             gym.make(task.env_id, **kwargs), episodes, seed, max_failures)
    return {"env_id": task.env_id, "env_kwargs": kwargs, "episodes": episodes, **result,
            "rule": "deterministic policy; success = the environment's success flag at any step"}


def actor_view(obs, info: Mapping, task) -> Any:
    """The simulated env's observation as the graph's actor builds it from the robot's topics: a flat task's
    vector as it is (the env builds it with `task.observation`); a camera task's frames as they are, with the
    gripper entry from the fingers' opening (there is no gripper command topic) and the rest (noise
    included) as is."""
    if not task.cameras:
        return obs
    state = np.array(obs["state"], dtype=np.float32)
    state[-1] = task.observation(info["state"])[-1]
    return {**obs, "state": state}
