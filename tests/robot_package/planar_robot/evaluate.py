"""A graph run's planar policy judged in simulation (robot_rl's `Robot.graph_evaluators`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym

from planar_robot import sim
from robot_rl.training.evaluate import evaluate_policy


def episodes(run: Path, policy, task, count: int, seed: int, split: str, max_s: float | None,
             max_failures: int | None) -> dict[str, Any]:
    """Deterministic episodes of the task's environment, the reset seeds drawn from `seed` (no randomization
    splits: `split` does not apply, nor `max_s`: the horizon ends an episode)."""
    result = evaluate_policy(lambda obs, info: policy.act(obs, True), gym.make(sim.ENV_ID), count, seed,
                             max_failures)
    return {"env_id": sim.ENV_ID, "episodes": count, **result,
            "rule": "deterministic policy; success = the fingertip within 3 cm of the target at any step"}
