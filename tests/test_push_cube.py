"""Arm push-cube env (`robot_rl/ArmPushCube-v0`): success, scripted expert, observations, snapshots."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from robot_rl.envs import ARM_PUSH_CUBE_ENV_ID
from robot_rl.robots.arm.sim import CUBE_REST_Z, CUBE_SIZE
from robot_rl.robots.arm.pick_cube import ACTION_HISTORY, PROPRIO_DIM, STATE_DIM
from robot_rl.robots.arm.push_cube import (PUSH_DIRECTION, PUSH_DISTANCE, ArmPushCubeEnv, push_progress, push_success,
                                     scripted_push_action)
from robot_rl.tasks import expert_for_env, task_names

START = np.array([0.5, 0.01, CUBE_REST_Z])


def _state(offset, cube_size=CUBE_SIZE):
    return {"cube_pos": START + np.asarray(offset, float), "cube_start": START.copy(), "cube_size": np.array(cube_size)}


def test_success_and_progress_on_hand_built_states():
    assert PUSH_DIRECTION @ PUSH_DIRECTION == pytest.approx(1.0) and PUSH_DIRECTION[2] == 0.0
    pushed = _state([0.0, 0.07, 0.0])
    assert push_success(pushed) and push_progress(pushed) == 1.0
    assert not push_success(_state([0.0, 0.07, 0.03]))  # lifted: not a push
    back = _state([0.0, -0.07, 0.0])
    assert not push_success(back) and push_progress(back) == 0.0
    half = _state([0.02, 0.5 * PUSH_DISTANCE, 0.0])  # sideways drift neither helps nor hurts
    assert not push_success(half) and push_progress(half) == pytest.approx(0.5)
    assert push_success(_state([0.0, PUSH_DISTANCE + 1e-4, 0.0], cube_size=0.036))


def test_expert_pushes_the_cube_with_sparse_terminal_reward():
    expert = expert_for_env(ARM_PUSH_CUBE_ENV_ID)
    assert expert is not None and "arm_push_cube" not in task_names()
    env = ArmPushCubeEnv(observation="state", randomization_split="train")
    rng = np.random.default_rng(0)
    successes = 0
    for episode in range(20):
        obs, info = env.reset(seed=episode)
        assert obs.shape == (STATE_DIM + 4 * ACTION_HISTORY,)
        np.testing.assert_array_equal(info["state"]["cube_start"], info["state"]["cube_pos"])
        rewards, done = [], False
        while not done:
            obs, reward, terminated, truncated, info = env.step(expert(info["state"], rng, 0.1))
            rewards.append(reward)
            done = terminated or truncated
        assert set(rewards) <= {0.0, 1.0} and sum(rewards) == float(terminated)
        assert terminated == info["is_success"] == push_success(info["state"])
        successes += info["is_success"]
    assert successes >= 18


def test_pixel_observations_through_gymnasium_make():
    env = gym.make(ARM_PUSH_CUBE_ENV_ID, image_size=64)
    obs, info = env.reset(seed=0)
    assert set(obs) == {"front", "wrist", "state"}
    assert obs["front"].shape == obs["wrist"].shape == (64, 64, 3) and obs["front"].dtype == np.uint8
    assert obs["state"].shape == (PROPRIO_DIM + 4 * ACTION_HISTORY,) and obs["state"][-1] == -1.0  # gripper open
    assert info["state"]["cube_start"].shape == (3,) and not info["success"]
    env.close()
    check_env(ArmPushCubeEnv(image_size=32), skip_render_check=True)


def test_snapshot_keeps_the_start_and_success_ends_the_episode():
    env = ArmPushCubeEnv(observation="state")
    _, info = env.reset(seed=3)
    start = info["state"]["cube_start"].copy()
    rng = np.random.default_rng(0)
    for _ in range(8):  # partway: the expert is on its way to the cube
        _, _, terminated, _, info = env.step(scripted_push_action(info["state"], rng, gain=0.5))
        assert not terminated
    snapshot = env.snapshot()
    env.reset(seed=99)  # another scene in between
    _, info = env.reset(options={"snapshot": snapshot})
    np.testing.assert_array_equal(info["state"]["cube_start"], start)
    np.testing.assert_array_equal(env.snapshot()["cube_start"], start)
    # Teleport the cube 7 cm along the push direction: the next step succeeds, pays 1 and ends.
    env.sim.set_cube_pose(start + 0.07 * PUSH_DIRECTION)
    _, reward, terminated, truncated, info = env.step(np.zeros(4, np.float32))
    assert reward == 1.0 and terminated and info["success"] and not truncated
    assert push_progress(info["state"]) == 1.0
