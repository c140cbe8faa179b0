"""Arm pick-cube from pixels with a sparse reward, in randomized scenes (`robot_rl/ArmPickCube-v0`).

The policy sees two cameras (front, wrist) and proprioception, never the cube's pose; the
reward is 1 when the cube is grasped and lifted (which ends the episode, as in SERL) and 0
otherwise. Every reset draws a scene from `sim/arm/randomization.yaml` (train or eval ranges):
cube size, mass and friction, arm damping, controller gains, lighting, colours, textures,
camera poses, action latency and proprioceptive noise. `info["state"]` carries the true state
for scripted experts and interventions.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from robot_rl.config_fields import settings_of
from robot_rl.robots.arm.sim import LIFT_OBS_DIM, ArmSim, ArmSimConfig, lift_observation, lift_success
from robot_rl.envs.randomization import Randomization
from robot_rl.resources import package_path
from robot_rl.tasks import ActionHistory

DEFAULT_RANDOMIZATION = Path("sim") / "arm" / "randomization.yaml"
PROPRIO_DIM = 12
"""Proprioception: EE position (3) [m], finger opening (1) [m], joint velocities (7) / 10 [rad/s],
gripper command (1, +1 closed / -1 open; last, so the grasp critic finds it at index -1). With an action
history of k, the last k actions decided (4 each, newest first) come before the gripper command."""
ACTION_HISTORY = 2
"""The pick-cube task's history: the last two commands, which up to 2 steps of action latency hold in flight (with
it the held-out 2-step latency row went from 36 to 72 % success, BENCHMARKS.md)."""
MAX_ACTION_HISTORY = 8
HOLD_ACTION = np.array([0.0, 0.0, 0.0, -1.0], np.float32)
"""What the arm does before its first decision arrives: holds still, gripper open."""
STATE_DIM = LIFT_OBS_DIM + 1
"""State-based variant: the privileged lift observation (`arm.lift_observation`) + the gripper
command, last as in the proprioception (the grasp critic and the policy read it there)."""

_TEXTURES = {"table_texture": ("table_top", {"plain": "table_mat", "checker": "table_checker_mat",
                                              "speckle": "table_speckle_mat"}),
             "floor_texture": ("floor", {"plain": "floor_mat", "gradient": "floor_gradient_mat",
                                         "speckle": "floor_speckle_mat"})}
_COLOURS = {"cube_rgb": ("cube_mat",), "table_rgb": ("table_mat", "table_checker_mat", "table_speckle_mat"),
            "floor_rgb": ("floor_mat", "floor_gradient_mat", "floor_speckle_mat"), "arm_rgb": ("link_mat",)}


def _axis_angle_quat(rotvec: np.ndarray) -> np.ndarray:
    angle = float(np.linalg.norm(rotvec))
    if angle < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    axis = rotvec / angle
    return np.concatenate([[math.cos(angle / 2)], math.sin(angle / 2) * axis])


class ArmRandomizer:
    """Applies randomization samples to an ArmSim; every sample starts from the nominal model.

    Scene parameters change the model; `action_latency_steps` and `observation_noise` belong to
    whoever executes actions and reads observations (the env here).
    """

    SCENE_PARAMETERS = frozenset({"cube_size", "cube_mass", "cube_friction", "joint_damping_scale",
                                  "controller_gain_scale", "light_diffuse_scale", "light_dir_offset", "ambient",
                                  "front_camera_offset", "front_camera_rotation", "wrist_camera_offset",
                                  "wrist_camera_rotation", *_TEXTURES, *_COLOURS})

    def __init__(self, sim: ArmSim):
        self.model = m = sim.model
        self.arm_sim = sim
        self.cube_geom, self.cube_body = m.geom("cube").id, m.body("cube").id
        self.arm_dofs = sim._dadr
        self.key_light = m.light("key").id
        self.cameras = {name: m.camera(name).id for name in ("front", "wrist")}
        self.nominal = {
            "geom_size": m.geom_size.copy(), "body_mass": m.body_mass.copy(), "body_inertia": m.body_inertia.copy(),
            "geom_friction": m.geom_friction.copy(),
            "geom_rbound": m.geom_rbound.copy(), "geom_aabb": m.geom_aabb.copy(), "dof_damping": m.dof_damping.copy(),
            "light_diffuse": m.light_diffuse.copy(), "light_dir": m.light_dir.copy(),
            "ambient": m.vis.headlight.ambient.copy(), "mat_rgba": m.mat_rgba.copy(), "geom_matid": m.geom_matid.copy(),
            "cam_pos": m.cam_pos.copy(), "cam_quat": m.cam_quat.copy(), "gains": sim.controller.gains,
        }

    def apply(self, sample: dict[str, Any]) -> None:
        m, n = self.model, self.nominal
        for name in ("geom_size", "geom_rbound", "geom_aabb", "body_mass", "body_inertia", "geom_friction", "dof_damping", "light_diffuse",
                     "light_dir", "mat_rgba", "geom_matid", "cam_pos", "cam_quat"):
            getattr(m, name)[:] = n[name]
        m.vis.headlight.ambient[:] = n["ambient"]
        self.arm_sim.controller.gains = n["gains"]
        unknown = set(sample) - self.SCENE_PARAMETERS - {"action_latency_steps", "observation_noise"}
        if unknown:
            raise ValueError(f"unknown arm randomization parameters {sorted(unknown)}")
        size = float(sample.get("cube_size", 2 * n["geom_size"][self.cube_geom][0]))
        mass = float(sample.get("cube_mass", n["body_mass"][self.cube_body]))
        m.geom_size[self.cube_geom] = size / 2
        # Collision broadphase uses the bounding sphere and box: they must follow the size.
        m.geom_rbound[self.cube_geom] = math.sqrt(3) * size / 2
        m.geom_aabb[self.cube_geom][3:] = size / 2
        m.body_mass[self.cube_body] = mass
        m.body_inertia[self.cube_body] = mass * size ** 2 / 6  # solid cube
        if "cube_friction" in sample:
            m.geom_friction[self.cube_geom][0] = float(sample["cube_friction"])
        m.dof_damping[self.arm_dofs] = n["dof_damping"][self.arm_dofs] * float(sample.get("joint_damping_scale", 1.0))
        scale = float(sample.get("controller_gain_scale", 1.0))
        self.arm_sim.controller.gains = replace(n["gains"], kp_pos=n["gains"].kp_pos * scale,
                                                kp_rot=n["gains"].kp_rot * scale)
        m.light_diffuse[self.key_light] = n["light_diffuse"][self.key_light] * float(sample.get("light_diffuse_scale", 1))
        direction = n["light_dir"][self.key_light] + np.asarray(sample.get("light_dir_offset", np.zeros(3)))
        m.light_dir[self.key_light] = direction / np.linalg.norm(direction)
        if "ambient" in sample:
            m.vis.headlight.ambient[:] = float(sample["ambient"])
        for key, materials in _COLOURS.items():
            if key in sample:
                for material in materials:
                    m.mat_rgba[m.material(material).id][:3] = np.asarray(sample[key])
        for key, (geom, choices) in _TEXTURES.items():
            if key in sample:
                if sample[key] not in choices:
                    raise ValueError(f"{key} must be one of {sorted(choices)}, got {sample[key]!r}")
                m.geom_matid[m.geom(geom).id] = m.material(choices[sample[key]]).id
        for camera, cam in self.cameras.items():
            m.cam_pos[cam] = n["cam_pos"][cam] + np.asarray(sample.get(f"{camera}_camera_offset", np.zeros(3)))
            jitter = _axis_angle_quat(np.asarray(sample.get(f"{camera}_camera_rotation", np.zeros(3)), float))
            quat = np.empty(4)
            mujoco.mju_mulQuat(quat, n["cam_quat"][cam], jitter)
            m.cam_quat[cam] = quat
        # Constants derived from masses (constraint softness scaling, ...) must follow them.
        mujoco.mj_setConst(m, self.arm_sim.data)


class CommandDelay:
    """Action latency: each command runs `steps` control steps after it was decided (0: at once); until the first
    decision has travelled through, the arm holds still, gripper open (`HOLD_ACTION`). One queue for the env here
    and the simulator node (robot_rl/nodes/arm_sim.py), so a drawn latency means the same in one process and
    through the graph.

    Args:
        steps: control steps between a decision and its execution.
        in_flight: the commands already under way, oldest first (a snapshot's); default `steps` holds.
    """

    def __init__(self, steps: int, in_flight: list | None = None) -> None:
        if steps < 0:
            raise ValueError(f"action latency must be >= 0 steps, got {steps}")
        commands = [HOLD_ACTION] * steps if in_flight is None else in_flight
        if len(commands) != steps:
            raise ValueError(f"{len(commands)} commands in flight for a latency of {steps} steps")
        self._queue = deque(np.array(a, np.float32) for a in commands)

    def __call__(self, action: np.ndarray) -> np.ndarray:
        """Sends `action`; returns the command due now."""
        self._queue.append(np.array(action, np.float32))
        return self._queue.popleft()

    def cancel(self, hold: np.ndarray) -> None:
        """Every command in flight becomes `hold` (an e-stop: nothing decided before it runs after it)."""
        self._queue = deque(np.array(hold, np.float32) for _ in self._queue)

    @property
    def in_flight(self) -> list[np.ndarray]:
        """The commands under way, oldest first."""
        return [a.copy() for a in self._queue]


PROPRIOCEPTION_SENSORS = (("ee_pos", 1.0), ("gripper", 1.0), ("joint_vel", 10.0))
"""The proprioception's sensor readings, in its order, and how much of a reading one observation unit is (joint
velocities are observed / 10)."""


def read_sensors(state: dict[str, np.ndarray], noise: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """`state` with its proprioceptive sensors read through Gaussian noise of std `noise` in the observation's
    units (one draw for all of them, in the proprioception's order); the commands and the cube are untouched."""
    if noise <= 0:
        return state
    sizes = [np.asarray(state[key]).size for key, _ in PROPRIOCEPTION_SENSORS]
    draws = np.split(rng.normal(0.0, noise, sum(sizes)), np.cumsum(sizes)[:-1])
    read = dict(state)
    for (key, unit), draw in zip(PROPRIOCEPTION_SENSORS, draws):
        read[key] = np.asarray(state[key]) + unit * draw.reshape(np.shape(state[key]))
    return read


def proprioception(state: dict[str, np.ndarray], gripper_command: float,
                   last_actions: np.ndarray | None = None) -> np.ndarray:
    """`last_actions`: the k actions decided last, newest first ((k, 4); None: no history)."""
    history = np.zeros(0) if last_actions is None else np.asarray(last_actions, np.float32).reshape(-1)
    return np.concatenate([state["ee_pos"], np.asarray(state["gripper"]).reshape(1),
                           np.asarray(state["joint_vel"]) / 10.0, history, [gripper_command]]).astype(np.float32)


class ArmPickCubeEnv(gym.Env):
    """Pick up the cube seen through the cameras; sparse reward; randomized scenes.

    Observation: Dict(front, wrist: uint8 (S, S, 3); state: PROPRIO_DIM float32), or with
    `observation="state"` the privileged lift observation + gripper command (`STATE_DIM`).
    Action: Box(-1, 1, (4,)) = (dx, dy, dz, gripper: > 0 close).
    The cube starts anywhere in a square of half-width `cube_xy_range` [m] around its nominal place,
    at any yaw (0.15: arm_pick_cube_wide's 30 x 30 cm).
    `overrides`: randomization values that replace the split's draws of those parameters. Every value is still
    drawn, so everything else a reset seed gives is the split's own (e.g. action latency 0 and no sensor noise
    to meet the scenes the graph's `arm_sim` simulates, whose pipeline brings its own delay).
    `action_history`: the last k actions decided (newest first) join the observation before the gripper command,
    so a policy can tell which of its commands are still in flight under action latency (0: none; the task's
    `ACTION_HISTORY` by default).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, image_size: int = 64, randomization: str | Path | dict | bool | None = None,
                 randomization_split: str = "train", cameras: tuple[str, ...] = ("front", "wrist"),
                 max_episode_steps: int = 60, observation: str = "pixels", render_mode: str | None = None,
                 cube_xy_range: float = ArmSimConfig.cube_xy_range, overrides: Mapping[str, float] | None = None,
                 action_history: int = ACTION_HISTORY):
        super().__init__()
        if observation not in ("pixels", "state"):
            raise ValueError(f"observation must be 'pixels' or 'state', got {observation!r}")
        if max_episode_steps < 1:
            raise ValueError("max_episode_steps must be >= 1")
        if not 0 <= action_history <= MAX_ACTION_HISTORY:
            raise ValueError(f"action_history must be in [0, {MAX_ACTION_HISTORY}], got {action_history}")
        limits = settings_of(ArmSimConfig)["cube_xy_range"][1]  # the sim node's parameter range
        if not limits.low <= cube_xy_range <= limits.high:
            raise ValueError(f"cube_xy_range must be in [{limits.low}, {limits.high}] m, got {cube_xy_range}")
        self.sim = ArmSim(ArmSimConfig(image_size=image_size, cameras=tuple(cameras), render=observation == "pixels",
                                       cube_xy_range=cube_xy_range))
        self.randomizer = ArmRandomizer(self.sim)
        if randomization is False:
            self.randomization = None
        else:
            source = package_path(DEFAULT_RANDOMIZATION) if randomization in (None, True) else randomization
            self.randomization = Randomization.load(source)
            self.randomization.check_split(randomization_split)
        self.overrides = dict(overrides or {})
        unknown = set(self.overrides) - (set(self.randomization.parameters(randomization_split))
                                         if self.randomization else set())
        if unknown:
            raise ValueError(f"overrides name {sorted(unknown)}, which split {randomization_split!r} does not draw")
        self.split, self.cameras, self.observation = randomization_split, tuple(cameras), observation
        self.max_episode_steps, self.render_mode = max_episode_steps, render_mode
        self.action_history = action_history
        history_dim = HOLD_ACTION.size * action_history
        proprio = spaces.Box(-np.inf, np.inf, (PROPRIO_DIM + history_dim,), np.float32)
        if observation == "pixels":
            self.observation_space = spaces.Dict({
                **{c: spaces.Box(0, 255, (image_size, image_size, 3), np.uint8) for c in self.cameras},
                "state": proprio})
        else:
            self.observation_space = spaces.Box(-np.inf, np.inf, (STATE_DIM + history_dim,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.sample: dict[str, Any] = {}
        self._delay = CommandDelay(0)
        self._decided = ActionHistory(action_history, HOLD_ACTION)
        self._state: dict[str, np.ndarray] | None = None

    @property
    def model(self):
        """The MuJoCo model, where Gymnasium's MuJoCo environments keep theirs."""
        return self.sim.model

    @property
    def data(self):
        """The MuJoCo state (`mujoco.MjData`), where Gymnasium's MuJoCo environments keep theirs."""
        return self.sim.data

    def _gripper_command(self) -> float:
        return 1.0 if self.sim.data.ctrl[self.sim._grip_act] < 0.5 * self.sim.model.actuator_ctrlrange[
            self.sim._grip_act][1] else -1.0

    def _obs(self) -> Any:
        state = self._state
        history = self._decided.array
        if self.observation == "state":
            vector = np.concatenate([lift_observation(state), history.reshape(-1),
                                     [self._gripper_command()]]).astype(np.float32)
            noise = float(self.sample.get("observation_noise", 0.0))
            if noise > 0:  # sensors are noisy; the commands the robot was sent are not
                sensors = vector.size - 1 - history.size
                vector[:sensors] += self.np_random.normal(0.0, noise, sensors).astype(np.float32)
            return vector
        vector = proprioception(read_sensors(state, float(self.sample.get("observation_noise", 0.0)), self.np_random),
                                self._gripper_command(), history)
        return {**{c: self.sim.render(c) for c in self.cameras}, "state": vector}

    def _read_state(self) -> dict[str, np.ndarray]:
        """The state dict of the simulation now (a task adds what its success needs)."""
        return self.sim.state()

    def _success(self, state: dict[str, np.ndarray]) -> bool:
        """Whether the task is solved (reward 1, episode over)."""
        return lift_success(state)

    def _info(self) -> dict[str, Any]:
        success = self._success(self._state)
        return {"success": success, "is_success": success, "state": self._state}

    def snapshot(self) -> dict[str, Any]:
        """The scene and simulation now: `reset(options={"snapshot": ...})` starts an episode here
        (VLAC's return-and-explore starts exploring from demonstration states)."""
        if self._state is None:
            raise RuntimeError("call reset() before snapshot()")
        return {"sample": dict(self.sample), "sim": self.sim.snapshot(), "pending": self._delay.in_flight,
                "decided": self._decided.oldest_first()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """options={"snapshot": snapshot()}: start from that state (its scene, physics and actions
        in flight) instead of a fresh draw; the episode's step budget starts anew."""
        super().reset(seed=seed)
        snapshot = (options or {}).get("snapshot")
        if snapshot is not None:
            self.sample = dict(snapshot["sample"])
        else:
            drawn = self.randomization.sample(self.split, self.np_random) if self.randomization else {}
            self.sample = {**drawn, **self.overrides}
        self.randomizer.apply(self.sample)
        self.sim.reset(self.np_random)
        latency = int(self.sample.get("action_latency_steps", 0))
        self._delay = CommandDelay(latency, snapshot["pending"] if snapshot is not None else None)
        self._decided.reset()
        if snapshot is not None:
            self.sim.restore(snapshot["sim"])
            self._decided.reset(snapshot["decided"])
        self._steps = 0
        self._instabilities_at_reset = self._instabilities()
        self._state = self._read_state()
        return self._obs(), self._info()

    def step(self, action):
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        action = np.asarray(action, np.float32)
        if action.shape != (4,) or not np.isfinite(action).all():
            raise ValueError(f"action must be 4 finite values, got {action}")
        self._decided.push(action)
        self.sim.step(self._delay(action))
        self._steps += 1
        self._state = self._read_state()
        info = self._info()
        terminated = bool(info["success"])
        # MuJoCo resets a diverged simulation to its initial pose: that episode cannot go on.
        info["sim_unstable"] = self._instabilities() > self._instabilities_at_reset
        truncated = self._steps >= self.max_episode_steps or info["sim_unstable"]
        return self._obs(), float(terminated), terminated, truncated, info

    def _instabilities(self) -> int:
        warnings = self.sim.data.warning
        return sum(int(warnings[w].number) for w in (mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL,
                                                      mujoco.mjtWarning.mjWARN_BADQACC))

    @property
    def state(self) -> dict[str, np.ndarray] | None:
        return self._state

    def render(self):
        return self.sim.render("front") if self.render_mode == "rgb_array" else None

    def camera_frames(self) -> dict[str, np.ndarray]:
        """The cameras' current frames, whatever the observation mode (a learned reward watches the
        cameras while a state-based policy acts)."""
        return {c: self.sim.render(c) for c in self.cameras}

    def close(self) -> None:
        self.sim.close()
