"""Simulated 7-DoF arm pick/lift task (pure Python + MuJoCo, no ROS).

Layers:

* :class:`ArmSim` -- physics (``sim/arm/arm_scene.xml``), an operational-space controller
  that tracks an end-effector position target at a fixed top-down orientation, and
  offscreen rendering of the ``front`` / ``wrist`` cameras.
* Task functions that only take the ``state`` dict (so a ROS actor can rebuild the same
  state from messages): :func:`lift_observation`, :func:`lift_reward`, :func:`lift_success`,
  :func:`cube_grasped` and the scripted expert :func:`scripted_lift_action`.
* :class:`~robot_rl.robots.arm.lift.ArmLiftEnv` -- the gymnasium environment on them (registered as
  ``robot_rl/ArmLift-v0``).

Action (4,) in [-1, 1]: ``dx, dy, dz`` (scaled by ``action_scale``; the EE target moves by
that delta and is clamped to the workspace box) and ``gripper`` (> 0 close, <= 0 open).

Headless rendering: see the package (``robot_rl``) for how ``MUJOCO_GL`` is chosen.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

from robot_rl.config_fields import setting
from robot_rl.robots.arm.control import TOP_DOWN_QUAT, OperationalSpaceController, OSCGains
from robot_rl.control.rotations import quat_to_mat
from robot_rl.resources import package_path

__all__ = [
    "ARM_JOINT_NAMES",
    "CUBE_REST_Z",
    "CUBE_SIZE",
    "DEFAULT_SCENE_XML",
    "HOME_QPOS",
    "LIFT_OBS_DIM",
    "LIFT_OBS_LAYOUT",
    "LIFT_HEIGHT",
    "ArmSim",
    "ArmSimConfig",
    "cube_grasped",
    "lift_observation",
    "lift_reward",
    "lift_success",
    "scripted_lift_action",
]

# --------------------------------------------------------------------------- constants

ARM_JOINT_NAMES: tuple[str, ...] = tuple(f"joint{i}" for i in range(1, 8))
ARM_ACTUATOR_NAMES: tuple[str, ...] = tuple(f"j{i}" for i in range(1, 8))
FINGER_JOINT_NAMES: tuple[str, str] = ("finger_left", "finger_right")

#: Home joint configuration: EE at (0.5, 0, 0.19) pointing straight down (solved by IK).
HOME_QPOS = np.array([0.0, 0.0664, 0.0, -2.3825, 0.0, 2.4489, 0.7854])

#: Full side length of the cube [m].
CUBE_SIZE = 0.04
#: Height of the cube centre when resting on the table [m] (table top at z = 0; includes
#: the ~0.1 mm soft-contact penetration measured in simulation).
CUBE_REST_Z = 0.01997
#: Lift height above ``CUBE_REST_Z`` that counts as success [m].
LIFT_HEIGHT = 0.05
#: Maximum gripper opening (finger pad distance) [m].
GRIPPER_MAX_OPENING = 0.08

_GRIPPER_OPEN = GRIPPER_MAX_OPENING
_GRIPPER_CLOSED = 0.0


def _find_scene_xml() -> Path:
    env = os.environ.get("ROBOT_RL_ARM_XML")
    return Path(env) if env else package_path(Path("sim") / "arm" / "arm_scene.xml")


#: Path of the MJCF scene (override with the ``ROBOT_RL_ARM_XML`` environment variable).
DEFAULT_SCENE_XML: Path = _find_scene_xml()


# --------------------------------------------------------------------------- config


@dataclass
class ArmSimConfig:
    """Configuration of :class:`ArmSim` / :class:`~robot_rl.robots.arm.lift.ArmLiftEnv`; the `setting` fields are
    the simulator node's parameters of the same name (`render` is its `publish_images`)."""

    control_hz: float = setting(10.0, "Control rate.", low=1.0, high=1000.0)
    """Rate of ``ArmSim.step`` calls (agent actions) [Hz]."""
    physics_dt: float = 0.002
    """MuJoCo integration timestep [s]. A control period that is no multiple of it (30 Hz) is split into the fewest
    equal timesteps no longer than it (17 of 1.96 ms)."""
    action_scale: float = setting(0.03, "End-effector metres per step at action 1.", low=1e-4, high=1.0)
    """EE target displacement per step at action 1.0 [m]."""
    workspace_low: tuple[float, float, float] = (0.30, -0.22, 0.015)
    """Lower corner of the box the EE target is clamped to (world frame) [m]."""
    workspace_high: tuple[float, float, float] = (0.70, 0.22, 0.35)
    """Upper corner of the box the EE target is clamped to (world frame) [m]."""
    cube_xy_nominal: tuple[float, float] = (0.5, 0.0)
    """Nominal cube xy position on the table (world frame) [m]."""
    cube_xy_range: float = setting(0.05, "Half-width of the random cube position.", low=0.0, high=0.2)
    """Half-width of the uniform random cube xy offset around ``cube_xy_nominal`` [m]."""
    cube_random_yaw: bool = True
    """Randomise the cube yaw uniformly on reset."""
    image_size: int = setting(128, "Rendered image height and width.", low=16, high=1024)
    """Height and width of rendered camera images [px]."""
    cameras: tuple[str, ...] = setting(("front", "wrist"), "Cameras to publish when publish_images is set.")
    """Cameras rendered for image observations (names in the MJCF)."""
    render: bool = False
    """``ArmLiftEnv`` adds camera images to observations (unless ``image_obs`` overrides it);
    ``ArmSim.render`` works either way."""
    osc_decimation: int = 2
    """Physics substeps per OSC torque update (torques held in between); 1 = every substep."""
    settle_steps: int = 25
    """Physics steps run at reset so contacts settle (arm held at home)."""


# --------------------------------------------------------------------------- simulator


class ArmSim:
    """Physics + OSC + rendering of the arm/cube scene.

    Attributes ``target_pos`` (EE position target, world frame, clamped to the workspace by
    :meth:`step`) and ``target_quat`` (wxyz, default top-down) are what the OSC tracks.

    Args:
        config: simulation configuration.
        xml_path: MJCF file (defaults to :data:`DEFAULT_SCENE_XML`).
        osc_gains: controller gains (defaults to :class:`OSCGains`).
    """

    def __init__(
        self,
        config: ArmSimConfig | None = None,
        xml_path: str | os.PathLike | None = None,
        osc_gains: OSCGains | None = None,
    ) -> None:
        self.config = cfg = config if config is not None else ArmSimConfig()
        if cfg.control_hz <= 0 or cfg.physics_dt <= 0:
            raise ValueError("control_hz and physics_dt must be positive")
        n_sub = (1.0 / cfg.control_hz) / cfg.physics_dt
        exact = abs(n_sub - round(n_sub)) <= 1e-6 and round(n_sub) >= 1
        if cfg.osc_decimation < 1:
            raise ValueError("osc_decimation must be >= 1")
        if cfg.image_size < 1:
            raise ValueError("image_size must be >= 1")
        self.n_substeps = int(round(n_sub)) if exact else math.ceil(n_sub)
        self._low = np.asarray(cfg.workspace_low, dtype=np.float64)
        self._high = np.asarray(cfg.workspace_high, dtype=np.float64)
        if self._low.shape != (3,) or self._high.shape != (3,) or np.any(self._low >= self._high):
            raise ValueError("workspace_low/high must be 3-vectors with low < high")

        path = Path(xml_path) if xml_path is not None else DEFAULT_SCENE_XML
        self.model = m = mujoco.MjModel.from_xml_path(str(path))
        m.opt.timestep = cfg.physics_dt if exact else 1.0 / cfg.control_hz / self.n_substeps
        self.data = mujoco.MjData(m)

        self.joint_names: list[str] = list(ARM_JOINT_NAMES)
        self._jnt = np.array([m.joint(n).id for n in ARM_JOINT_NAMES])
        self._qadr = m.jnt_qposadr[self._jnt]
        self._dadr = m.jnt_dofadr[self._jnt]
        if not np.all(np.diff(self._qadr) == 1) or not np.all(np.diff(self._dadr) == 1):
            raise ValueError("arm joints must be contiguous in qpos/qvel")
        self._q = slice(int(self._qadr[0]), int(self._qadr[0]) + 7)
        self._v = slice(int(self._dadr[0]), int(self._dadr[0]) + 7)
        self._act = np.array([m.actuator(n).id for n in ARM_ACTUATOR_NAMES])
        self._act_sl = slice(int(self._act[0]), int(self._act[0]) + 7)
        self._grip_act = m.actuator("gripper").id
        self._finger_q = np.array([m.jnt_qposadr[m.joint(n).id] for n in FINGER_JOINT_NAMES])
        self._finger_v = np.array([m.jnt_dofadr[m.joint(n).id] for n in FINGER_JOINT_NAMES])
        self._site = m.site("ee").id
        self._cube_geom = m.geom("cube").id
        cube_j = m.joint("cube").id
        self._cube_q = int(m.jnt_qposadr[cube_j])
        self._cube_v = int(m.jnt_dofadr[cube_j])
        for cam in cfg.cameras:
            if mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_CAMERA, cam) < 0:
                raise ValueError(f"unknown camera {cam!r}")

        self.controller = OperationalSpaceController(
            m, self._site, self._jnt, self._act, home_qpos=HOME_QPOS, gains=osc_gains
        )
        self.target_quat = TOP_DOWN_QUAT.copy()
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        self._ee_quat = np.empty(4)

        # Home EE position from forward kinematics.
        self._set_home()
        mujoco.mj_kinematics(m, self.data)
        self.home_ee_pos = self.data.site_xpos[self._site].copy()
        self.target_pos = np.clip(self.home_ee_pos, self._low, self._high)

    # ------------------------------------------------------------------ properties

    @property
    def time(self) -> float:
        """Simulation time [s]."""
        return float(self.data.time)

    @property
    def control_dt(self) -> float:
        """Duration of one :meth:`step` [s]."""
        return self.n_substeps * self.model.opt.timestep

    # ------------------------------------------------------------------ core API

    def _set_home(self) -> None:
        d = self.data
        mujoco.mj_resetData(self.model, d)
        d.qpos[self._q] = HOME_QPOS
        d.qpos[self._finger_q] = _GRIPPER_OPEN / 2
        d.ctrl[self._grip_act] = _GRIPPER_OPEN

    def reset(self, rng: np.random.Generator | None = None) -> None:
        """Arm to home (EE ~17 cm above the cube), gripper open, cube at a random pose."""
        if rng is None:
            rng = np.random.default_rng()
        cfg = self.config
        d = self.data
        self._set_home()
        xy = np.asarray(cfg.cube_xy_nominal, dtype=np.float64) + rng.uniform(
            -cfg.cube_xy_range, cfg.cube_xy_range, size=2
        )
        yaw = rng.uniform(-math.pi, math.pi) if cfg.cube_random_yaw else 0.0
        c = self._cube_q
        d.qpos[c : c + 3] = (xy[0], xy[1], self.model.geom_size[self._cube_geom][2])
        d.qpos[c + 3 : c + 7] = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))
        self.target_pos = np.clip(self.home_ee_pos, self._low, self._high)
        for _ in range(cfg.settle_steps):
            self._substep()
        d.time = 0.0
        self._refresh()

    def step(self, action: np.ndarray) -> None:
        """Apply one action (4,) in [-1, 1] for ``1/control_hz`` seconds of simulation.

        Values outside [-1, 1] are clipped; wrong shapes or non-finite values raise
        ``ValueError``.
        """
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (4,):
            raise ValueError(f"action must have shape (4,), got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"action must be finite, got {a}")
        a = np.clip(a, -1.0, 1.0)
        self.target_pos = np.clip(
            self.target_pos + a[:3] * self.config.action_scale, self._low, self._high
        )
        self.data.ctrl[self._grip_act] = _GRIPPER_CLOSED if a[3] > 0.0 else _GRIPPER_OPEN
        k = self.config.osc_decimation
        n = self.n_substeps
        while n > 0:
            n -= self._substep(min(k, n))
        self._refresh()

    def _substep(self, nstep: int = 1) -> int:
        """One OSC update followed by ``nstep`` physics steps with torques held."""
        m, d = self.model, self.data
        mujoco.mj_step1(m, d)
        d.ctrl[self._act_sl] = self.controller.compute(d, self.target_pos, self.target_quat)
        mujoco.mj_step2(m, d)
        if nstep > 1:
            mujoco.mj_step(m, d, nstep - 1)
        return nstep

    def _refresh(self) -> None:
        """Make positions, site frames and cameras consistent with qpos (for state/render)."""
        m, d = self.model, self.data
        mujoco.mj_kinematics(m, d)
        mujoco.mj_comPos(m, d)
        mujoco.mj_camlight(m, d)

    _SNAPSHOT = mujoco.mjtState.mjSTATE_INTEGRATION

    def snapshot(self) -> np.ndarray:
        """Everything that determines the future of the simulation (MuJoCo's integration state,
        controls included, and the controller's target), as one float64 vector."""
        size = mujoco.mj_stateSize(self.model, self._SNAPSHOT)
        state = np.empty(size + 3)
        mujoco.mj_getState(self.model, self.data, state[:size], self._SNAPSHOT)
        state[size:] = self.target_pos
        return state

    def restore(self, snapshot: np.ndarray) -> None:
        """Returns the simulation to a `snapshot()` of the same model; ValueError if it does not fit."""
        size = mujoco.mj_stateSize(self.model, self._SNAPSHOT)
        snapshot = np.asarray(snapshot, dtype=np.float64)
        if snapshot.shape != (size + 3,) or not np.isfinite(snapshot).all():
            raise ValueError(f"snapshot must be {size + 3} finite values of this model, got shape {snapshot.shape}")
        mujoco.mj_setState(self.model, self.data, snapshot[:size], self._SNAPSHOT)
        self.target_pos = snapshot[size:].copy()
        mujoco.mj_forward(self.model, self.data)
        self._refresh()

    def set_cube_pose(self, pos: np.ndarray, quat: np.ndarray | None = None) -> None:
        """Teleport the cube (world position (3,), optional wxyz quaternion) and zero its velocity."""
        c, v = self._cube_q, self._cube_v
        self.data.qpos[c : c + 3] = np.asarray(pos, dtype=np.float64)
        if quat is not None:
            q = np.asarray(quat, dtype=np.float64)
            self.data.qpos[c + 3 : c + 7] = q / np.linalg.norm(q)
        self.data.qvel[v : v + 6] = 0.0
        self._refresh()

    def stop_here(self) -> None:
        """The end-effector target becomes where the hand is now, so the arm stops there (an e-stop) instead of
        finishing its motion toward a target ahead of it."""
        self.target_pos = np.clip(self.data.site_xpos[self._site].copy(), self._low, self._high)

    def state(self) -> dict[str, np.ndarray]:
        """Current state as float64 arrays.

        ``joint_pos`` (7) [rad], ``joint_vel`` (7) [rad/s], ``gripper`` (1) finger-pad
        opening [m], ``ee_pos`` (3) [m], ``ee_quat`` (4, wxyz), ``cube_pos`` (3) [m],
        ``cube_quat`` (4, wxyz), ``cube_size`` (scalar, edge length) [m], ``time`` (scalar) [s].
        World frame, table top at z = 0.
        """
        d = self.data
        mujoco.mju_mat2Quat(self._ee_quat, d.site_xmat[self._site])
        c = self._cube_q
        return {
            "joint_pos": d.qpos[self._q].copy(),
            "joint_vel": d.qvel[self._v].copy(),
            "gripper": np.array([d.qpos[self._finger_q].sum()]),
            "ee_pos": d.site_xpos[self._site].copy(),
            "ee_quat": self._ee_quat.copy(),
            "cube_pos": d.qpos[c : c + 3].copy(),
            "cube_quat": d.qpos[c + 3 : c + 7].copy(),
            "cube_size": np.array(2.0 * self.model.geom_size[self._cube_geom][0]),
            "time": np.array(d.time, dtype=np.float64),
        }

    def render(self, camera: str, size: int | None = None) -> np.ndarray:
        """RGB image (size, size, 3) uint8, C-contiguous, from the named camera."""
        if mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, camera) < 0:
            raise ValueError(f"unknown camera {camera!r}")
        s = int(size) if size is not None else self.config.image_size
        r = self._renderers.get((s, s))
        if r is None:
            r = mujoco.Renderer(self.model, height=s, width=s)
            self._renderers[(s, s)] = r
        r.update_scene(self.data, camera=camera)
        return np.ascontiguousarray(r.render())

    def render_all(self) -> dict[str, np.ndarray]:
        """Images of all ``config.cameras``."""
        return {cam: self.render(cam) for cam in self.config.cameras}

    def close(self) -> None:
        """Release rendering contexts."""
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()

    def __del__(self) -> None:  # best effort
        try:
            self.close()
        except Exception:
            pass


# --------------------------------------------------------------------------- task functions

#: Layout of :func:`lift_observation` (name -> slice).
LIFT_OBS_LAYOUT: dict[str, slice] = {
    "ee_pos": slice(0, 3),
    "ee_quat": slice(3, 7),
    "gripper": slice(7, 8),
    "cube_pos": slice(8, 11),
    "cube_quat": slice(11, 15),
    "cube_rel": slice(15, 18),
    "cube_lift": slice(18, 19),
    "joint_pos": slice(19, 26),
    "joint_vel": slice(26, 33),
}
#: Length of the :func:`lift_observation` vector.
LIFT_OBS_DIM = 33


def _canon_quat(q: np.ndarray) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    return -q if q[0] < 0 else q


def lift_observation(state: dict[str, np.ndarray]) -> np.ndarray:
    """State vector (float32, ``LIFT_OBS_DIM`` = 33) for the lift task.

    Layout (``LIFT_OBS_LAYOUT``): ``ee_pos`` [0:3], ``ee_quat`` (wxyz, w >= 0) [3:7],
    ``gripper`` opening [7], ``cube_pos`` [8:11], ``cube_quat`` (wxyz, w >= 0) [11:15],
    ``cube_pos - ee_pos`` [15:18], cube height above rest ``cube_z - CUBE_REST_Z`` [18],
    ``joint_pos`` [19:26], ``joint_vel`` [26:33].  Metres / radians / rad/s, world frame.
    """
    ee = np.asarray(state["ee_pos"], dtype=np.float64)
    cube = np.asarray(state["cube_pos"], dtype=np.float64)
    return np.concatenate(
        [
            ee,
            _canon_quat(state["ee_quat"]),
            np.asarray(state["gripper"], dtype=np.float64).reshape(1),
            cube,
            _canon_quat(state["cube_quat"]),
            cube - ee,
            [cube[2] - cube_rest_z(state)],
            np.asarray(state["joint_pos"], dtype=np.float64),
            np.asarray(state["joint_vel"], dtype=np.float64),
        ]
    ).astype(np.float32)


def cube_size(state: dict[str, np.ndarray]) -> float:
    """Edge length of the cube (randomized in simulation; the nominal size where a state lacks it)."""
    return float(state.get("cube_size", CUBE_SIZE))


def cube_rest_z(state: dict[str, np.ndarray]) -> float:
    """Height of the cube's centre when it rests on the table."""
    return cube_size(state) / 2 - (CUBE_SIZE / 2 - CUBE_REST_Z)


def _grasp_geometry(state: dict[str, np.ndarray]) -> tuple[np.ndarray, float]:
    """(cube offset in the EE frame, cube width along the finger closing axis)."""
    r_ee = quat_to_mat(state["ee_quat"])
    r_cube = quat_to_mat(state["cube_quat"])
    rel_local = r_ee.T @ (np.asarray(state["cube_pos"]) - np.asarray(state["ee_pos"]))
    width = cube_size(state) * float(np.abs(r_cube.T @ r_ee[:, 1]).sum())
    return rel_local, width


def cube_grasped(state: dict[str, np.ndarray]) -> bool:
    """True if the cube sits between the finger pads and the fingers are closed on it."""
    rel, width = _grasp_geometry(state)
    opening = float(np.asarray(state["gripper"]).reshape(-1)[0])
    return bool(
        abs(rel[0]) < 0.02
        and abs(rel[1]) < 0.012
        and abs(rel[2]) < 0.015
        and cube_size(state) - 0.006 < opening < width + 0.004
    )


def lift_success(state: dict[str, np.ndarray]) -> bool:
    """Cube lifted >= ``LIFT_HEIGHT`` above its resting height and held by the gripper."""
    cube = np.asarray(state["cube_pos"])
    held = np.linalg.norm(cube - np.asarray(state["ee_pos"])) < 0.03
    return bool(cube[2] - cube_rest_z(state) >= LIFT_HEIGHT and held)


def lift_reward(state: dict[str, np.ndarray]) -> float:
    """Dense staged reward in [0, 1]: 0.1 reach + 0.25 grasp + 0.65 lift progress."""
    cube = np.asarray(state["cube_pos"], dtype=np.float64)
    dist = float(np.linalg.norm(cube - np.asarray(state["ee_pos"], dtype=np.float64)))
    reach = 1.0 - math.tanh(10.0 * dist)
    grasp = 1.0 if cube_grasped(state) else 0.0
    lift = min(max((cube[2] - cube_rest_z(state)) / LIFT_HEIGHT, 0.0), 1.0)
    return float(0.1 * reach + 0.25 * grasp + 0.65 * lift)


def scripted_lift_action(
    state: dict[str, np.ndarray],
    rng: np.random.Generator | None = None,
    noise: float = 0.0,
    action_scale: float = 0.03,
    gain: float = 1.0,
) -> np.ndarray:
    """Stateless scripted expert: hover over the cube, descend, close, wait for grip, lift.

    Works from the ``state`` dict alone.  ``noise`` adds N(0, noise^2) to the motion
    components (needs ``rng`` or uses a fresh generator).  ``gain`` < 1 covers only that share
    of the remaining distance per step, which keeps it stable under action latency (a
    deadbeat step overshoots when executed a step late).  Returns float32 (4,) in [-1, 1].
    """
    ee = np.asarray(state["ee_pos"], dtype=np.float64)
    cube = np.asarray(state["cube_pos"], dtype=np.float64)
    opening = float(np.asarray(state["gripper"]).reshape(-1)[0])
    rel, width = _grasp_geometry(state)
    xy_err = float(np.linalg.norm(cube[:2] - ee[:2]))
    # Contact with the cube established: fingers closed down to the cube's width.
    gripping = (
        cube_size(state) - 0.006 < opening < width + 0.003
        and abs(rel[0]) < 0.02
        and abs(rel[1]) < 0.012
        and abs(rel[2]) < 0.015
    )
    at_grasp = xy_err < 0.012 and abs(ee[2] - cube[2]) < 0.01

    if gripping:
        goal = np.array([ee[0], ee[1], cube_rest_z(state) + 0.12])
        grip = 1.0
    elif at_grasp and opening > cube_size(state) - 0.006:
        goal = np.array([cube[0], cube[1], cube[2]])
        grip = 1.0
    else:
        # Stay high enough above the cube while misaligned so the fingers clear it.
        clearance = min(max(3.0 * (xy_err - 0.006), 0.0), 0.08)
        goal = np.array([cube[0], cube[1], cube[2] + clearance])
        grip = -1.0
        if opening < width - 0.01 and ee[2] < cube[2] + 0.05:
            goal[2] = max(goal[2], ee[2] + 0.02)  # missed grasp: back off while reopening
    a = np.empty(4)
    a[:3] = np.clip(gain * (goal - ee) / action_scale, -1.0, 1.0)
    a[3] = grip
    if noise > 0.0:
        if rng is None:
            rng = np.random.default_rng()
        a[:3] += rng.normal(0.0, noise, size=3)
    return np.clip(a, -1.0, 1.0).astype(np.float32)
