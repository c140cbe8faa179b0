"""The environment both systems of benchmarks/peer_lerobot.py train on: `gym_hil/PandaPickCubeRandomCpu-v0`.

gym-hil's pick-cube with its cameras drawn for a CPU (`benchmarks/gym_hil_cpu.py`: the scene without shadows or
multisampling, 128 px) with the cube placed at random and no reset delay. It lives in gym-hil's namespace because
LeRobot's actor makes `gym_hil/<env.task>` and passes only image_obs, render_mode, use_gripper and gripper_penalty:
registering this id in its process is the one way to give it a random cube and the CPU scene without changing its
code. robot_rl reaches the same registration as `random_cube_env:gym_hil/PandaPickCubeRandomCpu-v0`.

Importing this module registers the id; it needs `benchmarks/` on sys.path (gym_hil_cpu) and gym-hil installed
(both venvs have it).
"""

from __future__ import annotations

import gymnasium as gym

from gym_hil_cpu import SOURCE, make_pick_cube

TASK = "PandaPickCubeRandomCpu-v0"
"""LeRobot's `env.task` (it prepends gym_hil/)."""
ENV_ID = f"gym_hil/{TASK}"
ROBOT_RL_ENV_ID = f"random_cube_env:{ENV_ID}"
"""The id as robot-rl's --env takes it: the module that registers it, then the id."""
DEFAULTS = {"random_block_position": True, "reset_delay_seconds": 0}
"""What this id changes from gym-hil's `PandaPickCube-v0` besides the renderer; a caller's keyword wins."""

if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=make_pick_cube, max_episode_steps=SOURCE.max_episode_steps, kwargs=DEFAULTS)
