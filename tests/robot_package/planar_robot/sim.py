"""The planar arm in MuJoCo: two hinge joints in the table plane, position-controlled; an action in [-1, 1]^2 moves
each joint's target by up to `JOINT_STEP` radians per control step. The target is a point on the table within
reach; one overhead camera sees both."""

from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import mujoco  # after robot_rl (this package's __init__), which chooses headless rendering where there is no display
import numpy as np

LINKS_M = (0.12, 0.10)
CONTROL_HZ = 10.0
PHYSICS_DT = 0.01
JOINT_STEP = 0.5
"""Radians a joint's target moves per control step at action 1."""
REACH_M = 0.03
"""The fingertip within this of the target is success (the target marker is 1.2 cm, the fingertip 1 cm)."""
ENV_ID = "planar_robot/PlanarReach-v0"
CAMERA = "overhead"

XML = f"""
<mujoco model="planar_arm">
  <compiler angle="radian"/>
  <option timestep="{PHYSICS_DT}" integrator="implicitfast"/>
  <visual><global offwidth="128" offheight="128"/></visual>
  <worldbody>
    <light pos="0 0 1"/>
    <geom type="plane" size="0.3 0.3 0.01" rgba="0.9 0.9 0.9 1"/>
    <camera name="{CAMERA}" pos="0 0 0.55" quat="1 0 0 0" fovy="60"/>
    <body name="upper" pos="0 0 0.02">
      <joint name="shoulder" type="hinge" axis="0 0 1" damping="0.5"/>
      <geom type="capsule" fromto="0 0 0 {LINKS_M[0]} 0 0" size="0.01" rgba="0.2 0.4 0.8 1" mass="0.2"/>
      <body name="fore" pos="{LINKS_M[0]} 0 0">
        <joint name="elbow" type="hinge" axis="0 0 1" range="-2.8 2.8" damping="0.5"/>
        <geom type="capsule" fromto="0 0 0 {LINKS_M[1]} 0 0" size="0.008" rgba="0.2 0.7 0.4 1" mass="0.1"/>
        <site name="tip" pos="{LINKS_M[1]} 0 0" size="0.01"/>
      </body>
    </body>
    <site name="target" pos="0.15 0 0.02" size="0.012" rgba="0.9 0.2 0.2 1"/>
  </worldbody>
  <actuator>
    <position name="shoulder" joint="shoulder" kp="20" kv="1"/>
    <position name="elbow" joint="elbow" kp="12" kv="0.6"/>
  </actuator>
</mujoco>
"""


def fingertip(q: np.ndarray) -> np.ndarray:
    """Forward kinematics: the fingertip's (x, y) for joint angles `q` (what the actor computes from topics)."""
    a, b = float(q[0]), float(q[0] + q[1])
    return np.array([LINKS_M[0] * np.cos(a) + LINKS_M[1] * np.cos(b),
                     LINKS_M[0] * np.sin(a) + LINKS_M[1] * np.sin(b)], np.float32)


def sample_target(rng: np.random.Generator) -> np.ndarray:
    """A point on the table the fingertip can reach comfortably (between 0.06 and 0.20 m from the shoulder)."""
    radius, angle = rng.uniform(0.06, 0.20), rng.uniform(-np.pi, np.pi)
    return np.array([radius * np.cos(angle), radius * np.sin(angle)], np.float32)


def expert_action(state: Mapping[str, np.ndarray], rng: np.random.Generator, noise: float = 0.0) -> np.ndarray:
    """Damped least-squares steps of the fingertip toward the target, in action units, with Gaussian `noise`."""
    q = np.asarray(state["q"], np.float64)
    a, b = q[0], q[0] + q[1]
    jacobian = np.array([[-LINKS_M[0] * np.sin(a) - LINKS_M[1] * np.sin(b), -LINKS_M[1] * np.sin(b)],
                         [LINKS_M[0] * np.cos(a) + LINKS_M[1] * np.cos(b), LINKS_M[1] * np.cos(b)]])
    error = np.asarray(state["target"], np.float64) - fingertip(q)
    dq = jacobian.T @ np.linalg.solve(jacobian @ jacobian.T + 1e-4 * np.eye(2), error)
    action = np.clip(dq / JOINT_STEP, -1.0, 1.0) + noise * rng.standard_normal(2)
    return np.clip(action, -1.0, 1.0).astype(np.float32)


class PlanarArm:
    """The simulated arm (robot_rl.training.in_process's Robot protocol): reset, step, state, render."""

    def __init__(self):
        self.model = mujoco.MjModel.from_xml_string(XML)
        self.data = mujoco.MjData(self.model)
        self.target_site = self.model.site("target").id
        self.tip_site = self.model.site("tip").id
        self.substeps = int(round(1.0 / (CONTROL_HZ * PHYSICS_DT)))
        self.renderers: dict[int, mujoco.Renderer] = {}

    def reset(self, rng: np.random.Generator) -> None:
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = [rng.uniform(-np.pi, np.pi), rng.uniform(-2.0, 2.0)]
        self.data.ctrl[:] = self.data.qpos
        self.model.site_pos[self.target_site, :2] = sample_target(rng)
        mujoco.mj_forward(self.model, self.data)

    def step(self, action: np.ndarray) -> None:
        action = np.asarray(action, np.float64)
        if action.shape != (2,) or not np.isfinite(action).all():
            raise ValueError(f"planar arm action must be 2 finite values, got {action!r}")
        low, high = self.model.jnt_range[1]
        target = self.data.qpos + JOINT_STEP * np.clip(action, -1.0, 1.0)
        target[1] = np.clip(target[1], low, high)
        self.data.ctrl[:] = target
        for _ in range(self.substeps):
            mujoco.mj_step(self.model, self.data)

    def set_target(self, xy: np.ndarray) -> None:
        self.model.site_pos[self.target_site, :2] = xy
        mujoco.mj_forward(self.model, self.data)

    def state(self) -> dict[str, np.ndarray]:
        q = self.data.qpos.astype(np.float32).copy()
        return {"q": q, "qd": self.data.qvel.astype(np.float32).copy(),
                "target": self.model.site_pos[self.target_site, :2].astype(np.float32).copy(), "tip": fingertip(q)}

    def render(self, camera: str = CAMERA, size: int | None = None) -> np.ndarray:
        """The camera's RGB frame, `size` pixels square (default 128)."""
        size = size or 128
        if size not in self.renderers:
            self.renderers[size] = mujoco.Renderer(self.model, size, size)
        self.renderers[size].update_scene(self.data, camera=camera)
        return self.renderers[size].render()

    def close(self) -> None:
        for renderer in self.renderers.values():
            renderer.close()
        self.renderers.clear()


class PlanarReachEnv(gym.Env):
    """The task as a Gymnasium environment (evaluation in simulation): the task's observation vector, its
    reward, success (info's is_success, with the state), terminated at success, truncated at the horizon."""

    def __init__(self):
        from planar_robot.tasks import planar_reach

        self.task = planar_reach()
        self.arm = PlanarArm()
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self.task.obs_dim,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.arm.reset(self.np_random)
        self.steps = 0
        state = self.arm.state()
        return self.task.observation(state), {"is_success": False, "state": state}

    def step(self, action):
        self.arm.step(action)
        self.steps += 1
        state = self.arm.state()
        success = self.task.success(state)
        return (self.task.observation(state), self.task.reward(state), success,
                self.steps >= self.task.max_episode_steps and not success, {"is_success": success, "state": state})

    def close(self):
        self.arm.close()


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point="planar_robot.sim:PlanarReachEnv")


def record_demonstrations(config: Mapping[str, Any], task, episodes: int, seed: int,
                          noise: float) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The scripted expert's episodes in process (robot_rl's `Robot.demonstrations`)."""
    from robot_rl.training.in_process import collect_demonstrations

    arm = PlanarArm()
    try:
        return collect_demonstrations(task, arm, episodes, seed, noise)
    finally:
        arm.close()
