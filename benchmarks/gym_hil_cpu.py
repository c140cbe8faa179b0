"""gym-hil's Panda pick-cube with its cameras rendered for a CPU: `gym_hil_cpu/PandaPickCube-v0`.

The same environment as `gym_hil/PandaPickCube-v0` (gym-hil's own classes, physics, task, reward, 100-step limit,
end-effector deltas + gripper), with one change: how its two cameras are drawn. gym-hil renders 128 px frames with
two shadow-casting lights (4096 px shadow maps) and 8x multisampling; in Mesa's software renderer (llvmpipe, no GPU)
that costs about 0.5 s per step on a 2-core CPU, so no graph of it could run at 10 Hz on the wall clock. Here the
frames are rendered without shadows or multisampling, at gym-hil's 128 px unless `image_size` says otherwise: about
70 ms per step (physics included) on the same CPU. The scene, the cameras' poses and fields of view, the colours
and the lighting's direct terms are gym-hil's.

Registered when this module is imported, so `--env gym_hil_cpu/PandaPickCube-v0` works with this folder on
PYTHONPATH (robot_rl imports an unregistered namespace's module). Keyword arguments are gym-hil's
(`image_obs`, `random_block_position`, `reset_delay_seconds`, ...) plus `image_size`.
"""

from __future__ import annotations

import gym_hil  # noqa: F401  (registers gym_hil/...)
import gymnasium as gym
import mujoco
from gym_hil.mujoco_gym_env import GymRenderingSpec
from gymnasium.envs.registration import load_env_creator

ENV_ID = "gym_hil_cpu/PandaPickCube-v0"
SOURCE = gym.spec("gym_hil/PandaPickCube-v0")
"""gym-hil's registration: its factory, the factory's options and the time limit are taken from it as they are."""


def make_pick_cube(image_size: int = 128, **kwargs) -> gym.Env:
    """gym-hil's wrapped pick-cube (as its factory builds it) with frames of `image_size` px, unshadowed."""
    env = load_env_creator(SOURCE.entry_point)(**{**SOURCE.kwargs, **kwargs},
                                               render_spec=GymRenderingSpec(height=image_size, width=image_size))
    base = env.unwrapped
    base.model.light_castshadow[:] = 0
    base.model.vis.quality.offsamples = 0
    # gym-hil builds its renderer in the constructor, from the model's settings of that moment: build it again.
    base._viewer.close()
    base._viewer = mujoco.Renderer(base.model, height=image_size, width=image_size)
    return env


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=make_pick_cube, max_episode_steps=SOURCE.max_episode_steps)
