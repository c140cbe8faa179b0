"""The planar arm's task: bring the fingertip within 3 cm of the target, from joint angles, velocities and the
target's position (what the actor rebuilds from `planar/joint_states` and `planar/target`)."""

from __future__ import annotations

import numpy as np

from robot_rl.tasks import State, TaskSpec

OBS_DIM = 10


def observation(state: State) -> np.ndarray:
    q, qd = np.asarray(state["q"], np.float32), np.asarray(state["qd"], np.float32)
    target, tip = np.asarray(state["target"], np.float32), np.asarray(state["tip"], np.float32)
    return np.concatenate([np.cos(q), np.sin(q), 0.1 * qd, 10.0 * target, 10.0 * (target - tip)]).astype(np.float32)


def distance(state: State) -> float:
    return float(np.linalg.norm(np.asarray(state["target"]) - np.asarray(state["tip"])))


def planar_reach() -> TaskSpec:
    from planar_robot import sim

    return TaskSpec(
        name="planar_reach", obs_dim=OBS_DIM, action_dim=2, max_episode_steps=20, control_hz=sim.CONTROL_HZ,
        observation=observation, reward=lambda s: -10.0 * distance(s), success=lambda s: distance(s) < sim.REACH_M,
        terminate_on_success=True, expert=sim.expert_action, env_id=sim.ENV_ID, actor_node="planar_actor",
    )
