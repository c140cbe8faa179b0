"""A third-party-style environment for `robot-rl train --env` tests: nothing in it follows our conventions.

Nested Dict observations (joint positions in millimetres next to a gripper opening in metres, a target
in millimetres, two cameras: one CHW and one HWC of another size), a gripper action in [0, 2]
(2 closes), success under info["succeed"], and (optionally) a person's takeover reported in info as
LeRobot's gym environments report it. Registered as "dict_grip_env:DictGrip-v0" (PYTHONPATH=tests).

Task: move the hand (2-D, 0.15 of the workspace per step at full action) within 60 mm of the
target and close the gripper there.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from robot_rl.envs.adapter import AdapterConfig

WORKSPACE_MM = 400.0
REACH_MM = 60.0

ADAPTER = AdapterConfig(image_size=16, gripper_index=2, gripper_open=0.0, gripper_close=2.0)
"""What a user declares about this environment: one camera size, the [0, 2] gripper that closes at 2."""
ADAPTER_FLAGS = ["--set", "adapter.image_size=16", "--set", "adapter.gripper_index=2",
                 "--set", "adapter.gripper_open=0", "--set", "adapter.gripper_close=2"]
"""The same declarations on the command line."""


def expert_action(hand_mm: np.ndarray, target_mm: np.ndarray) -> np.ndarray:
    """The environment's own action (gripper in [0, 2]) that a careful person would give."""
    delta = (target_mm - hand_mm) / (0.15 * WORKSPACE_MM)
    move = np.clip(delta, -1.0, 1.0)
    close = np.linalg.norm(target_mm - hand_mm) < REACH_MM * 0.8
    return np.array([*move, 2.0 if close else 0.0], np.float32)


class GripExpert:
    """The careful person's actions as a scripted expert (robot_rl.training.experts), loaded as
    "dict_grip_env:GripExpert": the raw observation in, the environment's action out; counts its episodes."""

    def __init__(self):
        self.episodes = 0

    def reset(self) -> None:
        self.episodes += 1

    def __call__(self, observation, info) -> np.ndarray:
        return expert_action(observation["robot"]["joint_pos_mm"], observation["target_mm"])


def open_hand_expert(observation, info) -> np.ndarray:
    """An expert that reaches the target but never closes the gripper: it never succeeds."""
    return expert_action(observation["robot"]["joint_pos_mm"], observation["target_mm"]) * np.array([1, 1, 0])


class DictGrip(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, max_steps: int = 12, intervene_every: int = 0):
        self.observation_space = spaces.Dict({
            "robot": spaces.Dict({
                "joint_pos_mm": spaces.Box(-np.inf, np.inf, (2,), np.float32),
                "gripper_m": spaces.Box(-np.inf, np.inf, (1,), np.float32)}),
            "target_mm": spaces.Box(-np.inf, np.inf, (2,), np.float32),
            "pixels": spaces.Dict({
                "top": spaces.Box(0, 255, (3, 24, 24), np.uint8),
                "wrist": spaces.Box(0, 255, (16, 16, 3), np.uint8)})})
        self.action_space = spaces.Box(np.array([-1, -1, 0], np.float32), np.array([1, 1, 2], np.float32))
        self.max_steps, self.intervene_every = max_steps, intervene_every
        self.person_actions: list[np.ndarray] = []
        """Every action a person applied (the environment's units), in order."""

    def _obs(self):
        top = np.zeros((3, 24, 24), np.uint8)
        r, c = np.clip(((self.target / WORKSPACE_MM + 1) * 11.5).round().astype(int), 0, 23)
        top[0, max(r - 1, 0):r + 2, max(c - 1, 0):c + 2] = 255
        wrist = np.full((16, 16, 3), 40 + int(200 * self.closed), np.uint8)
        return {"robot": {"joint_pos_mm": self.hand.astype(np.float32),
                          "gripper_m": np.array([0.0 if self.closed else 0.08], np.float32)},
                "target_mm": self.target.astype(np.float32), "pixels": {"top": top, "wrist": wrist}}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.hand = np.zeros(2)
        self.target = self.np_random.uniform(-0.8, 0.8, 2) * WORKSPACE_MM
        self.closed, self.t = False, 0
        return self._obs(), {"succeed": False}

    def step(self, action):
        action = np.asarray(action, np.float64)
        if not self.action_space.contains(action.astype(np.float32)):
            raise ValueError(f"action {action} outside {self.action_space}")
        info = {}
        self.t += 1
        if self.intervene_every and self.t % self.intervene_every == 0:
            action = expert_action(self.hand, self.target).astype(np.float64)
            info.update(is_intervention=True, action_intervention=action.astype(np.float32))
            self.person_actions.append(action.astype(np.float32))
        self.hand = np.clip(self.hand + action[:2] * 0.15 * WORKSPACE_MM, -WORKSPACE_MM, WORKSPACE_MM)
        self.closed = action[2] > 1.0
        distance = np.linalg.norm(self.hand - self.target)
        success = bool(self.closed and distance < REACH_MM)
        reward = -distance / WORKSPACE_MM + (1.0 if success else 0.0)
        info["succeed"] = success
        return self._obs(), float(reward), success, self.t >= self.max_steps, info


gym.register("DictGrip-v0", entry_point=DictGrip)
