"""The arm's frames for pretraining an image encoder (`robot-rl pretrain-encoder`, the default scenes): scripted
grasps with noise and random excursions in randomized pick-cube scenes, each frame with the simulator's privileged
state as its targets."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from robot_rl.robots.arm.sim import cube_grasped
from robot_rl.tasks import expert_for_env
from robot_rl.training.pretrain_encoder import PretrainConfig

TARGET_NAMES = ("cube_x", "cube_y", "cube_z", "ee_x", "ee_y", "ee_z", "offset_x", "offset_y", "offset_z",
                    "gripper_opening", "cube_grasped")
"""The privileged targets read from the simulator state, in this order (metres; flags 0/1)."""


def state_targets(state: dict) -> np.ndarray:
    cube, ee = np.asarray(state["cube_pos"]), np.asarray(state["ee_pos"])
    return np.concatenate([cube, ee, cube - ee, np.asarray(state["gripper"]).reshape(1),
                           [float(cube_grasped(state))]]).astype(np.float32)


def scene_frames(config: PretrainConfig, count: int, seed: int,
                 progress=lambda n: None) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]:
    """`count` frames of scripted/perturbed episodes of `config.env_id` (an arm simulation with a scripted
    expert) and their privileged state targets."""
    expert = expert_for_env(config.env_id)
    env = gym.make(config.env_id, **config.env_kwargs)
    rng = np.random.default_rng(seed)
    cameras = config.encoder.cameras
    frames = {k: np.empty((count, *env.observation_space[k].shape), np.uint8) for k in cameras}
    targets = np.empty((count, len(TARGET_NAMES)), np.float32)
    n = 0
    while n < count:
        obs, info = env.reset(seed=int(rng.integers(2**31)))
        done = False
        while not done and n < count:
            target = state_targets(info["state"])
            if np.abs(target[:6]).max() < 2.0:  # a diverged simulation's frame teaches nothing
                for k in cameras:
                    frames[k][n] = obs[k]
                targets[n] = target
                n += 1
                progress(n)
            if rng.random() < config.random_action_prob:
                action = rng.uniform(-1, 1, 4).astype(np.float32)
            else:
                action = expert(info["state"], rng, config.expert_noise)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
    env.close()
    return frames, targets, list(TARGET_NAMES)
