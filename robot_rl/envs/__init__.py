"""Environments of robot_rl.

Importing this package registers the gymnasium environments (MuJoCo is only imported
when an environment is created):

* ``robot_rl/ArmLift-v0`` -- :class:`robot_rl.robots.arm.lift.ArmLiftEnv` (simulated 7-DoF arm
  picking and lifting a cube).  Keyword arguments of ``gymnasium.make`` are forwarded to the
  constructor (``config``, ``image_obs``, ``max_episode_steps``, ``terminate_on_success``,
  ``render_mode``).  The horizon is enforced by the environment itself (default 50 steps).
* ``robot_rl/ArmPickCube-v0`` -- :class:`robot_rl.robots.arm.pick_cube.ArmPickCubeEnv` (the same arm
  picking the cube from two cameras + proprioception, sparse reward, randomized scenes).
* ``robot_rl/QuadJuggle-v0`` -- :class:`robot_rl.robots.quad.vec_env.QuadJuggleEnv` (a quadrotor
  with a racket juggling a ball, randomized; ``gymnasium.make_vec(..., vectorization_mode=
  "vector_entry_point")`` gives the batched :class:`~robot_rl.robots.quad.vec_env.QuadJuggleGymVectorEnv`).
* ``robot_rl/ArmPushCube-v0`` -- :class:`robot_rl.robots.arm.push_cube.ArmPushCubeEnv` (the same scenes
  and observations; push the cube 6 cm to the left along the table, sparse reward).
* ``robot_rl/CarRace-v0`` -- :class:`robot_rl.robots.car.sim.CarRaceEnv` (a 1/10-scale car racing a
  procedural track from 3 stacked camera frames and its IMU, with autonomous recovery: FastRLAP).
  Keyword arguments are fields of :class:`~robot_rl.robots.car.sim.CarRaceConfig`.

Headless rendering: if ``MUJOCO_GL`` is unset and there is no display, ``osmesa`` is selected when
``robot_rl`` is imported, before anything of it imports MuJoCo (set ``MUJOCO_GL=egl`` yourself on a GPU
machine).
"""

from gymnasium.envs.registration import register, registry

ARM_LIFT_ENV_ID = "robot_rl/ArmLift-v0"
ARM_PICK_CUBE_ENV_ID = "robot_rl/ArmPickCube-v0"
ARM_PUSH_CUBE_ENV_ID = "robot_rl/ArmPushCube-v0"
QUAD_JUGGLE_ENV_ID = "robot_rl/QuadJuggle-v0"

if ARM_LIFT_ENV_ID not in registry:
    register(id=ARM_LIFT_ENV_ID, entry_point="robot_rl.robots.arm.lift:ArmLiftEnv")
if ARM_PICK_CUBE_ENV_ID not in registry:
    register(id=ARM_PICK_CUBE_ENV_ID, entry_point="robot_rl.robots.arm.pick_cube:ArmPickCubeEnv")
if ARM_PUSH_CUBE_ENV_ID not in registry:
    register(id=ARM_PUSH_CUBE_ENV_ID, entry_point="robot_rl.robots.arm.push_cube:ArmPushCubeEnv")

if QUAD_JUGGLE_ENV_ID not in registry:
    register(id=QUAD_JUGGLE_ENV_ID, entry_point="robot_rl.robots.quad.vec_env:QuadJuggleEnv",
             vector_entry_point="robot_rl.robots.quad.vec_env:QuadJuggleGymVectorEnv")

CAR_RACE_ENV_ID = "robot_rl/CarRace-v0"
if CAR_RACE_ENV_ID not in registry:
    register(id=CAR_RACE_ENV_ID, entry_point="robot_rl.robots.car.sim:CarRaceEnv")

__all__ = ["CAR_RACE_ENV_ID", "ARM_LIFT_ENV_ID", "ARM_PICK_CUBE_ENV_ID", "ARM_PUSH_CUBE_ENV_ID", "QUAD_JUGGLE_ENV_ID"]
