"""The arm's tasks: lift (state) and pick-cube (two cameras + proprioception), as the simulator, the ROS actor
and the learner all see them."""

from __future__ import annotations

from functools import partial
from typing import Callable

import numpy as np

from robot_rl.tasks import LAST_ACTIONS, State, TaskSpec


def arm_lift() -> TaskSpec:
    from robot_rl.robots.arm import sim as arm_sim

    return TaskSpec(
        name="arm_lift", obs_dim=arm_sim.LIFT_OBS_DIM, action_dim=4, max_episode_steps=50, control_hz=10.0,
        observation=arm_sim.lift_observation, reward=arm_sim.lift_reward, success=arm_sim.lift_success,
        terminate_on_success=False, expert=arm_sim.scripted_lift_action, env_id="robot_rl/ArmLift-v0",
        actor_node="arm_actor",
    )


def arm_pick_cube() -> TaskSpec:
    from robot_rl.robots.arm import pick_cube
    from robot_rl.robots.arm import sim as arm_sim

    # Through ROS the gripper command is not a topic of its own: the proprioception's last entry
    # is rebuilt from the gripper opening (closed when the fingers are within the cube's width).
    def observation(state: State) -> np.ndarray:
        closed = float(np.asarray(state["gripper"]).reshape(-1)[0]) < arm_sim.CUBE_SIZE + 0.004
        return pick_cube.proprioception(state, 1.0 if closed else -1.0, state.get(LAST_ACTIONS))

    history = pick_cube.ACTION_HISTORY
    return TaskSpec(
        name="arm_pick_cube", obs_dim=pick_cube.PROPRIO_DIM + history * pick_cube.HOLD_ACTION.size, action_dim=4,
        max_episode_steps=60,
        control_hz=10.0, action_history=history, rest_action=tuple(pick_cube.HOLD_ACTION),
        observation=observation, reward=lambda s: float(arm_sim.lift_success(s)), success=arm_sim.lift_success,
        terminate_on_success=True, expert=partial(arm_sim.scripted_lift_action, gain=0.5),  # latency-tolerant
        env_id="robot_rl/ArmPickCube-v0", cameras=("front", "wrist"), image_size=64, actor_node="arm_actor",
    )


def push_cube_expert() -> Callable[..., np.ndarray]:
    """Push-cube is a simulation, not (yet) a task: its success needs the cube's position at the episode start
    (`cube_start`), which the ROS actor's state, rebuilt from topics, lacks."""
    from robot_rl.robots.arm import push_cube

    return partial(push_cube.scripted_push_action, gain=0.5)  # latency-tolerant, as pick-cube's
