"""The arm lift task as a gymnasium environment (``robot_rl/ArmLift-v0``) on :class:`~robot_rl.robots.arm.sim.ArmSim`,
with the task functions of :mod:`robot_rl.robots.arm.sim`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from robot_rl.robots.arm.sim import (
    LIFT_OBS_DIM, ArmSim, ArmSimConfig, cube_grasped, cube_rest_z, lift_observation, lift_reward, lift_success,
)

__all__ = ["ArmLiftEnv"]


class ArmLiftEnv(gym.Env):
    """Pick-and-lift a cube with the simulated 7-DoF arm.

    Observation: ``Box(LIFT_OBS_DIM,)`` float32 (``image_obs=False``) or ``Dict`` with
    ``state`` and one uint8 ``(H, W, 3)`` image per camera in ``config.cameras``
    (``image_obs=True``; ``None`` follows ``config.render``).
    Action: ``Box(-1, 1, (4,))`` = (dx, dy, dz, gripper).  Reward: :func:`lift_reward`.
    Episodes are truncated after ``max_episode_steps``; with ``terminate_on_success`` they
    terminate on the first successful step.  ``info`` has ``success``/``is_success``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        config: ArmSimConfig | None = None,
        image_obs: bool | None = None,
        max_episode_steps: int = 50,
        terminate_on_success: bool = False,
        render_mode: str | None = None,
        render_camera: str = "front",
    ) -> None:
        super().__init__()
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unsupported render_mode {render_mode!r}")
        cfg = config if config is not None else ArmSimConfig()
        if image_obs is None:
            image_obs = cfg.render
        if image_obs and not cfg.render:
            cfg = replace(cfg, render=True)
        self.config = cfg
        self.image_obs = bool(image_obs)
        self.max_episode_steps = int(max_episode_steps)
        self.terminate_on_success = bool(terminate_on_success)
        self.render_mode = render_mode
        self.render_camera = render_camera
        self.metadata = {**self.metadata, "render_fps": cfg.control_hz}
        self.sim = ArmSim(cfg)
        state_space = spaces.Box(-np.inf, np.inf, shape=(LIFT_OBS_DIM,), dtype=np.float32)
        if self.image_obs:
            s = cfg.image_size
            self.observation_space = spaces.Dict(
                {
                    "state": state_space,
                    **{
                        cam: spaces.Box(0, 255, shape=(s, s, 3), dtype=np.uint8)
                        for cam in cfg.cameras
                    },
                }
            )
        else:
            self.observation_space = state_space
        self.action_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self._steps = 0
        self._state: dict[str, np.ndarray] | None = None

    def _obs(self, state: dict[str, np.ndarray]) -> Any:
        vec = lift_observation(state)
        if not self.image_obs:
            return vec
        return {"state": vec, **self.sim.render_all()}

    def _info(self, state: dict[str, np.ndarray]) -> dict[str, Any]:
        ok = lift_success(state)
        return {
            "success": ok,
            "is_success": ok,
            "grasped": cube_grasped(state),
            "cube_height": float(state["cube_pos"][2] - cube_rest_z(state)),
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.sim.reset(self.np_random)
        self._steps = 0
        self._state = self.sim.state()
        return self._obs(self._state), self._info(self._state)

    def step(self, action):
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        self.sim.step(action)
        self._steps += 1
        self._state = state = self.sim.state()
        reward = lift_reward(state)
        info = self._info(state)
        terminated = bool(self.terminate_on_success and info["success"])
        truncated = self._steps >= self.max_episode_steps
        return self._obs(state), reward, terminated, truncated, info

    @property
    def state(self) -> dict[str, np.ndarray] | None:
        """Last state dict (for scripted experts)."""
        return self._state

    def render(self):
        if self.render_mode == "rgb_array":
            return self.sim.render(self.render_camera)
        return None

    def close(self) -> None:
        self.sim.close()
