"""Environments of robot_rl.

Importing this package registers the gymnasium environments (MuJoCo is only imported
when an environment is created):

* ``robot_rl/ArmLift-v0`` -- :class:`robot_rl.envs.arm.ArmLiftEnv` (simulated 7-DoF arm
  picking and lifting a cube).  Keyword arguments of ``gymnasium.make`` are forwarded to the
  constructor (``config``, ``image_obs``, ``max_episode_steps``, ``terminate_on_success``,
  ``render_mode``).  The horizon is enforced by the environment itself (default 50 steps).
"""

from gymnasium.envs.registration import register, registry

ARM_LIFT_ENV_ID = "robot_rl/ArmLift-v0"

if ARM_LIFT_ENV_ID not in registry:
    register(id=ARM_LIFT_ENV_ID, entry_point="robot_rl.envs.arm:ArmLiftEnv")

__all__ = ["ARM_LIFT_ENV_ID"]
