"""Real-arm plumbing without a node: the hardware YAML, input validation, the Cartesian target
shaper, a DH kinematic model with a damped-least-squares IK step, and one output adapter per
controller interface. Everything here builds or reads plain ROS messages; `robot_rl.nodes.arm`
wires it to topics.

Interfaces (`interface:` in hardware/<arm>.yaml):

- `cartesian_pose`: a Cartesian impedance controller following `target_pose`
  (geometry_msgs/PoseStamped), e.g. CRISP on a Franka. Hold = the same target again.
- `servo_twist`: MoveIt Servo `delta_twist_cmds` (geometry_msgs/TwistStamped, Servo configured
  with `command_in_type: speed_units`). Hold = zero twist.
- `joint_trajectory`: ros2_control JointTrajectoryController (trajectory_msgs/JointTrajectory,
  one point). Joint targets come from a damped-least-squares IK step on the DH model.
  Hold = the same joint targets again.
- `forward_position`: ros2_control forward_command_controller (std_msgs/Float64MultiArray),
  same IK. Hold = the same joint targets again.

Every adapter output is bounded by construction: the Cartesian target moves at most
`max_speed / control_hz` per axis per control period and stays in the workspace box; joint
targets move at most `joints.max_speed / control_hz` per period and stay in the joint limits.
`Adapter.violations` checks an output message against those limits (for tests and audits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import PoseStamped, TwistStamped
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from robot_rl.hardware.files import load_hardware_file
from robot_rl.hardware.safety import Rejected, clamp_box, limit_step

__all__ = [
    "INTERFACES", "Adapter", "ArmHardware", "CartesianPoseAdapter", "CartesianTargetShaper", "DHChain",
    "ForwardPositionAdapter", "JointTrajectoryAdapter", "ServoTwistAdapter", "dls_step", "gripper_msg",
    "load_hardware", "make_adapter", "parse_command", "parse_ee_pose", "parse_gripper", "parse_joint_states",
    "quat_to_mat", "mat_to_quat",
]

INTERFACES = ("cartesian_pose", "servo_twist", "joint_trajectory", "forward_position")
JOINT_INTERFACES = ("joint_trajectory", "forward_position")


# ---- hardware description -------------------------------------------------------------------------


@dataclass(frozen=True)
class Kinematics:
    convention: str
    dh: np.ndarray  # (n, 4): a, d, alpha, theta_offset per joint
    tool_dh: np.ndarray  # (m, 4): fixed rows after the last joint (flange, tool centre point)
    damping: float
    orientation_weight: float


@dataclass(frozen=True)
class ArmHardware:
    """A parsed hardware/<arm>.yaml (see the examples there for every field)."""

    name: str
    interface: str
    joint_names: tuple[str, ...]
    joint_states_topic: str
    ee_pose_topic: str  # "" = computed from the kinematic model
    state_frame: str
    command_frame: str
    max_speed: np.ndarray  # m/s per axis
    output_topic: str
    output_frame: str
    time_from_start_s: float
    workspace_low: np.ndarray
    workspace_high: np.ndarray
    max_lead: float
    activation_margin: float
    state_margin: float
    joint_low: np.ndarray | None
    joint_high: np.ndarray | None
    joint_max_speed: float
    joint_state_margin: float
    home_position: np.ndarray
    home_speed: float
    home_tolerance: float
    gripper_topic: str
    gripper_open: float
    gripper_closed: float
    observation_ee_pose_topic: str
    kinematics: Kinematics | None = None
    source: str = field(default="", compare=False)

    def max_step(self, control_hz: float) -> np.ndarray:
        """Per-axis Cartesian limit per control period (m)."""
        return self.max_speed / control_hz

    def max_joint_step(self, control_hz: float) -> float:
        return self.joint_max_speed / control_hz


def _vec(section: dict, key: str, n: int | None, where: str, default: Any = None) -> np.ndarray:
    value = section.get(key, default)
    if value is None:
        raise ValueError(f"{where}.{key} is required")
    a = np.asarray(value, dtype=np.float64)
    if a.ndim == 0 and n is not None:
        a = np.full(n, float(a))
    if (n is not None and a.shape != (n,)) or not np.isfinite(a).all():
        raise ValueError(f"{where}.{key} must be {n or 'a list of'} finite numbers, got {value!r}")
    return a


def _num(section: dict, key: str, where: str, default: float | None = None, low: float = 0.0,
         positive: bool = False) -> float:
    value = section.get(key, default)
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}.{key} must be a number, got {value!r}") from None
    if not math.isfinite(x) or x < low or (positive and x <= 0):
        raise ValueError(f"{where}.{key} must be a finite number {'>' if positive else '>='} {low}, got {value!r}")
    return x


def _topic(section: dict, key: str, where: str, default: str | None = None, allow_empty: bool = False) -> str:
    value = section.get(key, default)
    if value is None or not isinstance(value, str) or (not value and not allow_empty):
        raise ValueError(f"{where}.{key} must be a topic name string, got {value!r}")
    return value


def load_hardware(name_or_path: str, share_dir: Path | None = None) -> ArmHardware:
    """Reads and checks a hardware YAML; raises ValueError naming the file and the bad field."""
    return load_hardware_file(name_or_path, parse_hardware, share_dir)


def parse_hardware(data: Any, name: str = "arm", source: str = "") -> ArmHardware:
    if not isinstance(data, dict):
        raise ValueError("the hardware description must be a mapping")
    sections = {k: data.get(k) or {} for k in ("state", "command", "output", "workspace", "joints", "home",
                                                "gripper", "observation")}
    for key, section in sections.items():
        if not isinstance(section, dict):
            raise ValueError(f"{key} must be a mapping")
    interface = data.get("interface")
    if interface not in INTERFACES:
        raise ValueError(f"interface must be one of {list(INTERFACES)}, got {interface!r}")
    names = data.get("joint_names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names) \
            or len(set(names)) != len(names):
        raise ValueError(f"joint_names must be a non-empty list of distinct names, got {names!r}")
    n = len(names)
    st, cmd, out, ws, jt, home, grip, obs = sections.values()
    low, high = _vec(ws, "low", 3, "workspace"), _vec(ws, "high", 3, "workspace")
    if not (low < high).all():
        raise ValueError(f"workspace.low {low.tolist()} must be below workspace.high {high.tolist()}")
    max_speed = _vec(cmd, "max_speed", 3, "command")
    if not (max_speed > 0).all():
        raise ValueError("command.max_speed must be > 0 on every axis")
    joint_low = joint_high = None
    if "low" in jt or "high" in jt or interface in JOINT_INTERFACES:
        joint_low, joint_high = _vec(jt, "low", n, "joints"), _vec(jt, "high", n, "joints")
        if not (joint_low < joint_high).all():
            raise ValueError("joints.low must be below joints.high")
    home_pos = _vec(home, "position", 3, "home")
    if not ((home_pos >= low) & (home_pos <= high)).all():
        raise ValueError(f"home.position {home_pos.tolist()} is outside the workspace box")
    kin = None
    kin_data = data.get("kinematics")
    if kin_data is not None:
        kin = _parse_kinematics(kin_data, n)
    ee_topic = _topic(st, "ee_pose_topic", "state", "", allow_empty=True)
    if interface in JOINT_INTERFACES and kin is None:
        raise ValueError(f"interface {interface} needs a kinematics section (DH parameters)")
    if not ee_topic and kin is None:
        raise ValueError("state.ee_pose_topic is empty and there is no kinematics section to compute the pose")
    hw = ArmHardware(
        name=name, interface=interface, joint_names=tuple(names),
        joint_states_topic=_topic(st, "joint_states_topic", "state", "joint_states"),
        ee_pose_topic=ee_topic,
        state_frame=_topic(st, "frame", "state"),
        command_frame=_topic(cmd, "frame", "command", "world"),
        max_speed=max_speed,
        output_topic=_topic(out, "topic", "output"),
        output_frame=_topic(out, "frame", "output", "", allow_empty=True),
        time_from_start_s=_num(out, "time_from_start_s", "output", 0.1, positive=True),
        workspace_low=low, workspace_high=high,
        max_lead=_num(ws, "max_lead", "workspace", 0.05, positive=True),
        activation_margin=_num(ws, "activation_margin", "workspace", 0.02),
        state_margin=_num(ws, "state_margin", "workspace", 0.5),
        joint_low=joint_low, joint_high=joint_high,
        joint_max_speed=_num(jt, "max_speed", "joints", 1.0, positive=True),
        joint_state_margin=_num(jt, "state_margin", "joints", 0.2),
        home_position=home_pos,
        home_speed=_num(home, "speed", "home", 0.1, positive=True),
        home_tolerance=_num(home, "tolerance", "home", 0.01, positive=True),
        gripper_topic=_topic(grip, "topic", "gripper", "", allow_empty=True),
        gripper_open=_num(grip, "open", "gripper", 0.08, low=-1e9),
        gripper_closed=_num(grip, "closed", "gripper", 0.0, low=-1e9),
        observation_ee_pose_topic=_topic(obs, "ee_pose_topic", "observation", "", allow_empty=True),
        kinematics=kin, source=source)
    return hw


def _parse_kinematics(data: Any, n: int) -> Kinematics:
    if not isinstance(data, dict):
        raise ValueError("kinematics must be a mapping")
    convention = data.get("convention", "modified")
    if convention not in ("modified", "standard"):
        raise ValueError(f"kinematics.convention must be 'modified' or 'standard', got {convention!r}")

    def rows(key: str, count: int | None) -> np.ndarray:
        value = data.get(key, [] if count is None else None)
        a = np.asarray(value, dtype=np.float64).reshape(-1, 4) if value else np.zeros((0, 4))
        if (count is not None and a.shape != (count, 4)) or not np.isfinite(a).all():
            raise ValueError(f"kinematics.{key} must be {count or 'some'} rows of [a, d, alpha, theta_offset]")
        return a

    return Kinematics(convention, rows("dh", n), rows("tool_dh", None),
                      _num(data, "damping", "kinematics", 0.05, positive=True),
                      _num(data, "orientation_weight", "kinematics", 0.5))


# ---- rotations ------------------------------------------------------------------------------------


def quat_to_mat(q_wxyz: np.ndarray) -> np.ndarray:
    w, x, y, z = np.asarray(q_wxyz, float) / np.linalg.norm(q_wxyz)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def mat_to_quat(r: np.ndarray) -> np.ndarray:
    """Rotation matrix -> unit quaternion (w, x, y, z) with w >= 0."""
    t = np.trace(r)
    if t > 0:
        s = 2.0 * math.sqrt(t + 1.0)
        q = [0.25 * s, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(r)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(max(1.0 + r[i, i] - r[j, j] - r[k, k], 1e-12))
        q = [0.0] * 4
        q[0] = (r[k, j] - r[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (r[j, i] + r[i, j]) / s
        q[1 + k] = (r[k, i] + r[i, k]) / s
    q = np.asarray(q)
    q /= np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def rotation_error(r_target: np.ndarray, r_current: np.ndarray) -> np.ndarray:
    """Rotation vector (world frame) taking r_current to r_target."""
    r = r_target @ r_current.T
    cos = float(np.clip((np.trace(r) - 1.0) / 2.0, -1.0, 1.0))
    angle = math.acos(cos)
    v = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]])
    if angle < 1e-9:
        return 0.5 * v
    if math.pi - angle < 1e-6:  # 180 degrees: axis from the symmetric part
        axis = np.sqrt(np.maximum((np.diag(r) + 1.0) / 2.0, 0.0))
        return angle * axis
    return angle * v / (2.0 * math.sin(angle))


# ---- kinematics -----------------------------------------------------------------------------------


def _dh_transform(a: float, d: float, alpha: float, theta: float, modified: bool) -> np.ndarray:
    ca, sa, ct, st = math.cos(alpha), math.sin(alpha), math.cos(theta), math.sin(theta)
    if modified:  # Craig: RotX(alpha_{i-1}) TransX(a_{i-1}) RotZ(theta_i) TransZ(d_i)
        return np.array([[ct, -st, 0.0, a],
                         [st * ca, ct * ca, -sa, -d * sa],
                         [st * sa, ct * sa, ca, d * ca],
                         [0.0, 0.0, 0.0, 1.0]])
    # standard: RotZ(theta_i) TransZ(d_i) TransX(a_i) RotX(alpha_i)
    return np.array([[ct, -st * ca, st * sa, a * ct],
                     [st, ct * ca, -ct * sa, a * st],
                     [0.0, sa, ca, d],
                     [0.0, 0.0, 0.0, 1.0]])


class DHChain:
    """Serial chain of revolute joints from DH parameters (no URDF needed)."""

    def __init__(self, kinematics: Kinematics):
        self.k = kinematics
        self.modified = kinematics.convention == "modified"
        self.n = len(kinematics.dh)

    def _frames(self, q: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
        """Joint axes and origins (world) and the tool transform."""
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (self.n,) or not np.isfinite(q).all():
            raise ValueError(f"joint vector must be {self.n} finite numbers")
        t = np.eye(4)
        axes, origins = [], []
        for (a, d, alpha, offset), qi in zip(self.k.dh, q):
            if self.modified:
                t = t @ _dh_transform(a, d, alpha, qi + offset, True)
                axes.append(t[:3, 2].copy())  # joint i turns about z_i of its own frame
                origins.append(t[:3, 3].copy())
            else:
                axes.append(t[:3, 2].copy())  # joint i turns about z_{i-1}
                origins.append(t[:3, 3].copy())
                t = t @ _dh_transform(a, d, alpha, qi + offset, False)
        for a, d, alpha, theta in self.k.tool_dh:
            t = t @ _dh_transform(a, d, alpha, theta, self.modified)
        return axes, origins, t

    def fk(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tool position (3,) and rotation matrix (3, 3) in the base frame."""
        _, _, t = self._frames(q)
        return t[:3, 3].copy(), t[:3, :3].copy()

    def jacobian(self, q: np.ndarray) -> np.ndarray:
        """Geometric Jacobian (6, n): rows 0-2 linear, 3-5 angular velocity of the tool."""
        axes, origins, t = self._frames(q)
        p = t[:3, 3]
        j = np.zeros((6, self.n))
        for i, (z, o) in enumerate(zip(axes, origins)):
            j[:3, i] = np.cross(z, p - o)
            j[3:, i] = z
        return j


def dls_step(jacobian: np.ndarray, error: np.ndarray, damping: float,
             weights: np.ndarray | None = None) -> np.ndarray:
    """Damped least squares: dq = J^T (J J^T + damping^2 I)^-1 e, rows weighted by `weights`.
    Well defined at singularities (the damping bounds |dq| by |e| / (2 damping))."""
    j = np.asarray(jacobian, float)
    e = np.asarray(error, float)
    if weights is not None:
        w = np.asarray(weights, float)
        j, e = j * w[:, None], e * w
    if not (np.isfinite(j).all() and np.isfinite(e).all()) or damping <= 0:
        raise ValueError("dls_step needs a finite Jacobian and error and a positive damping")
    jjt = j @ j.T + (damping ** 2) * np.eye(j.shape[0])
    return j.T @ np.linalg.solve(jjt, e)


# ---- input validation -----------------------------------------------------------------------------


@dataclass
class JointReading:
    positions: np.ndarray  # the configured joints, in configured order
    velocities: np.ndarray | None


def parse_joint_states(msg: JointState, hw: ArmHardware) -> JointReading:
    """Checks a joint_states message (stamps are checked by the node); raises Rejected."""
    names = list(msg.name)
    if not names:
        raise Rejected("joint_names", "empty joint name list")
    if len(set(names)) != len(names):
        raise Rejected("joint_names", "duplicate joint names")
    if len(msg.position) != len(names):
        raise Rejected("joint_lengths", f"{len(names)} names but {len(msg.position)} positions")
    for field_name in ("velocity", "effort"):
        n = len(getattr(msg, field_name))
        if n not in (0, len(names)):
            raise Rejected("joint_lengths", f"{len(names)} names but {n} {field_name} values")
    missing = [n for n in hw.joint_names if n not in names]
    if missing:
        raise Rejected("joint_names", f"missing joints {missing}")
    pos = np.asarray(msg.position, dtype=np.float64)
    vel = np.asarray(msg.velocity, dtype=np.float64) if len(msg.velocity) else None
    eff = np.asarray(msg.effort, dtype=np.float64)
    if not (np.isfinite(pos).all() and (vel is None or np.isfinite(vel).all()) and np.isfinite(eff).all()):
        raise Rejected("nan", "joint_states contains NaN or Inf")
    idx = [names.index(n) for n in hw.joint_names]
    q = pos[idx]
    if hw.joint_low is not None:
        m = hw.joint_state_margin
        if ((q < hw.joint_low - m) | (q > hw.joint_high + m)).any():
            raise Rejected("implausible", f"joint positions {np.round(q, 3).tolist()} beyond the joint limits")
    return JointReading(q, None if vel is None else vel[idx])


def parse_ee_pose(msg: PoseStamped, hw: ArmHardware) -> tuple[np.ndarray, np.ndarray]:
    """Checks a measured end-effector pose; returns (position, unit quaternion wxyz)."""
    if msg.header.frame_id != hw.state_frame:
        raise Rejected("frame", f"ee pose frame {msg.header.frame_id!r}, expected {hw.state_frame!r}")
    p, o = msg.pose.position, msg.pose.orientation
    pos, quat = np.array([p.x, p.y, p.z]), np.array([o.w, o.x, o.y, o.z])
    if not (np.isfinite(pos).all() and np.isfinite(quat).all()):
        raise Rejected("nan", "ee pose contains NaN or Inf")
    norm = float(np.linalg.norm(quat))
    if abs(norm - 1.0) > 0.01:
        raise Rejected("quaternion", f"orientation quaternion norm {norm:.4f} is not 1")
    m = hw.state_margin
    if ((pos < hw.workspace_low - m) | (pos > hw.workspace_high + m)).any():
        raise Rejected("implausible", f"ee position {np.round(pos, 3).tolist()} is far outside the workspace")
    return pos, quat / norm


def parse_command(msg: TwistStamped, hw: ArmHardware) -> tuple[np.ndarray, bool]:
    """arm/cmd -> (linear velocity clamped to max_speed, whether it was clamped). Angular
    velocity is ignored (the orientation is held) but must be finite. Stamps: see the node."""
    if msg.header.frame_id != hw.command_frame:
        raise Rejected("frame", f"command frame {msg.header.frame_id!r}, expected {hw.command_frame!r}")
    lin, ang = msg.twist.linear, msg.twist.angular
    v = np.array([lin.x, lin.y, lin.z])
    if not (np.isfinite(v).all() and all(math.isfinite(x) for x in (ang.x, ang.y, ang.z))):
        raise Rejected("nan", "command contains NaN or Inf")
    return clamp_box(v, -hw.max_speed, hw.max_speed)


def parse_gripper(value: float) -> tuple[float, bool]:
    """arm/gripper (0 open .. 1 closed) -> (clamped value, whether it was clamped)."""
    if not math.isfinite(value):
        raise Rejected("nan", "gripper command is NaN or Inf")
    g = min(max(float(value), 0.0), 1.0)
    return g, g != value


def gripper_msg(g: float, hw: ArmHardware) -> Float64:
    """Closure 0..1 -> gripper position (open .. closed, in the gripper's units)."""
    g = min(max(float(g), 0.0), 1.0)
    return Float64(data=float(hw.gripper_open + g * (hw.gripper_closed - hw.gripper_open)))


# ---- Cartesian target -----------------------------------------------------------------------------


class CartesianTargetShaper:
    """Keeps the end-effector target: starts at the measured pose, moves by the commanded velocity
    each control period, never more than `max_step` per axis, never further than `max_lead` per
    axis from the measured pose, always inside the workspace box."""

    def __init__(self, hw: ArmHardware, control_hz: float):
        self.low, self.high = hw.workspace_low, hw.workspace_high
        self.max_step = hw.max_step(control_hz)
        self.max_lead = hw.max_lead
        self.activation_margin = hw.activation_margin
        self.dt = 1.0 / control_hz
        self.target: np.ndarray | None = None

    def start(self, measured: np.ndarray) -> np.ndarray:
        outside = np.maximum(self.low - measured, 0.0) + np.maximum(measured - self.high, 0.0)
        if (outside > self.activation_margin).any():
            raise ValueError(f"the end effector at {np.round(measured, 3).tolist()} is outside the workspace box "
                             f"{self.low.tolist()}..{self.high.tolist()} by more than {self.activation_margin} m; "
                             "move it inside first")
        self.target, _ = clamp_box(measured, self.low, self.high)
        return self.target.copy()

    def advance(self, velocity: np.ndarray, measured: np.ndarray) -> tuple[np.ndarray, bool]:
        """One control period at `velocity` (m/s). Returns (new target, whether a limit acted)."""
        return self._move(self.target + np.asarray(velocity, float) * self.dt, measured, self.max_step)

    def toward(self, goal: np.ndarray, speed: float, measured: np.ndarray) -> tuple[np.ndarray, bool]:
        """One control period toward `goal` at most at `speed` (m/s per axis)."""
        return self._move(np.asarray(goal, float), measured, np.minimum(self.max_step, speed * self.dt))

    def _move(self, desired: np.ndarray, measured: np.ndarray, max_step: np.ndarray) -> tuple[np.ndarray, bool]:
        if self.target is None:
            raise RuntimeError("CartesianTargetShaper.start was not called")
        desired, lead = clamp_box(desired, measured - self.max_lead, measured + self.max_lead)
        desired, stepped = limit_step(desired, self.target, max_step)
        desired, boxed = clamp_box(desired, self.low, self.high)
        self.target = desired
        return desired.copy(), bool(stepped or boxed)


# ---- output adapters ------------------------------------------------------------------------------


@dataclass
class Measured:
    """What the node knows about the arm when it calls an adapter."""

    ee_pos: np.ndarray
    ee_quat: np.ndarray
    joints: np.ndarray | None


class Adapter:
    """Turns Cartesian targets into one controller interface's messages."""

    kind = ""
    msg_type: Any = None

    def __init__(self, hw: ArmHardware, control_hz: float):
        self.hw = hw
        self.control_hz = control_hz
        self.joint_clamps = 0

    def start(self, measured: Measured, target_pos: np.ndarray) -> None:
        """Called on activation with the measured state and the initial (clamped) target."""
        self.quat = np.asarray(measured.ee_quat, float)

    def command(self, prev_target: np.ndarray, target: np.ndarray, stamp: Any) -> Any:
        """The message moving the arm from `prev_target` to `target` within one control period."""
        raise NotImplementedError

    def hold(self, target: np.ndarray, stamp: Any) -> Any:
        """The message keeping the arm where it is commanded now (zero / same target)."""
        raise NotImplementedError

    def violations(self, msg: Any, previous: Any | None = None) -> list[str]:
        """Which configured limits `msg` breaks (vs the previous output message, for step limits)."""
        raise NotImplementedError


class CartesianPoseAdapter(Adapter):
    kind = "cartesian_pose"
    msg_type = PoseStamped

    def _pose(self, pos: np.ndarray, stamp: Any) -> PoseStamped:
        msg = PoseStamped()
        msg.header.stamp = stamp
        msg.header.frame_id = self.hw.output_frame
        p, o = msg.pose.position, msg.pose.orientation
        p.x, p.y, p.z = (float(v) for v in pos)
        o.w, o.x, o.y, o.z = (float(v) for v in self.quat)
        return msg

    def command(self, prev_target, target, stamp):
        return self._pose(target, stamp)

    def hold(self, target, stamp):
        return self._pose(target, stamp)

    def violations(self, msg, previous=None):
        hw, out = self.hw, []
        p = np.array([msg.pose.position.x, msg.pose.position.y, msg.pose.position.z])
        o = msg.pose.orientation
        if not np.isfinite(p).all() or not all(math.isfinite(v) for v in (o.w, o.x, o.y, o.z)):
            return ["non-finite pose"]
        if ((p < hw.workspace_low - 1e-9) | (p > hw.workspace_high + 1e-9)).any():
            out.append(f"position {p.tolist()} outside the workspace")
        if abs(math.sqrt(o.w ** 2 + o.x ** 2 + o.y ** 2 + o.z ** 2) - 1.0) > 1e-6:
            out.append("orientation is not a unit quaternion")
        if msg.header.frame_id != hw.output_frame:
            out.append(f"frame {msg.header.frame_id!r}")
        if previous is not None:
            q = np.array([previous.pose.position.x, previous.pose.position.y, previous.pose.position.z])
            if (np.abs(p - q) > hw.max_step(self.control_hz) + 1e-9).any():
                out.append(f"step {np.abs(p - q).tolist()} exceeds the per-step limit")
        return out


class ServoTwistAdapter(Adapter):
    kind = "servo_twist"
    msg_type = TwistStamped

    def _twist(self, v: np.ndarray, stamp: Any) -> TwistStamped:
        msg = TwistStamped()
        msg.header.stamp = stamp
        msg.header.frame_id = self.hw.output_frame
        msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = (float(x) for x in v)
        return msg

    def command(self, prev_target, target, stamp):
        # the velocity that covers this period's (limited, boxed) target step
        return self._twist((np.asarray(target) - np.asarray(prev_target)) * self.control_hz, stamp)

    def hold(self, target, stamp):
        return self._twist(np.zeros(3), stamp)

    def violations(self, msg, previous=None):
        lin, ang = msg.twist.linear, msg.twist.angular
        v = np.array([lin.x, lin.y, lin.z])
        w = np.array([ang.x, ang.y, ang.z])
        if not (np.isfinite(v).all() and np.isfinite(w).all()):
            return ["non-finite twist"]
        out = []
        if (np.abs(v) > self.hw.max_speed * (1 + 1e-9) + 1e-12).any():
            out.append(f"linear velocity {v.tolist()} exceeds max_speed")
        if (w != 0).any():
            out.append("non-zero angular velocity")
        if msg.header.frame_id != self.hw.output_frame:
            out.append(f"frame {msg.header.frame_id!r}")
        return out


class _JointAdapter(Adapter):
    """Differential IK on the DH model: the Cartesian target's motion is applied to the model's
    tool point (so a constant offset between the model and the measured pose does not matter),
    the orientation is held at its value on activation."""

    def __init__(self, hw: ArmHardware, control_hz: float):
        super().__init__(hw, control_hz)
        if hw.kinematics is None or hw.joint_low is None:
            raise ValueError(f"{self.kind} needs kinematics and joint limits")
        self.chain = DHChain(hw.kinematics)
        self.max_joint_step = hw.max_joint_step(control_hz)
        w = hw.kinematics.orientation_weight
        self.weights = np.array([1.0, 1.0, 1.0, w, w, w])
        self.q: np.ndarray | None = None

    def start(self, measured: Measured, target_pos: np.ndarray) -> None:
        super().start(measured, target_pos)
        if measured.joints is None:
            raise ValueError("joint interfaces need joint_states")
        q, _ = clamp_box(measured.joints, self.hw.joint_low, self.hw.joint_high)
        self.q = q
        self.model_target, self.model_rot = self.chain.fk(q)
        self.last_target = np.asarray(target_pos, float).copy()

    def _ik(self, target: np.ndarray) -> np.ndarray:
        self.model_target = self.model_target + (np.asarray(target, float) - self.last_target)
        self.last_target = np.asarray(target, float).copy()
        pos, rot = self.chain.fk(self.q)
        error = np.concatenate([self.model_target - pos, rotation_error(self.model_rot, rot)])
        dq = dls_step(self.chain.jacobian(self.q), error, self.hw.kinematics.damping, self.weights)
        q, stepped = limit_step(self.q + dq, self.q, self.max_joint_step)
        q, boxed = clamp_box(q, self.hw.joint_low, self.hw.joint_high)
        self.joint_clamps += int(stepped or boxed)
        self.q = q
        return q

    def command(self, prev_target, target, stamp):
        return self._msg(self._ik(target), stamp)

    def hold(self, target, stamp):
        self.last_target = np.asarray(target, float).copy()  # a held target is not motion to replay
        return self._msg(self.q, stamp)

    def _msg(self, q: np.ndarray, stamp: Any) -> Any:
        raise NotImplementedError

    def _joint_violations(self, q: np.ndarray, previous_q: np.ndarray | None) -> list[str]:
        hw, out = self.hw, []
        if q.shape != (len(hw.joint_names),):
            return [f"{q.shape[0]} joint values for {len(hw.joint_names)} joints"]
        if not np.isfinite(q).all():
            return ["non-finite joint targets"]
        if ((q < hw.joint_low - 1e-9) | (q > hw.joint_high + 1e-9)).any():
            out.append(f"joint targets {q.tolist()} outside the joint limits")
        if previous_q is not None and previous_q.shape == q.shape \
                and (np.abs(q - previous_q) > self.max_joint_step + 1e-9).any():
            out.append(f"joint step {np.abs(q - previous_q).max():.4f} rad exceeds {self.max_joint_step:.4f}")
        return out


class JointTrajectoryAdapter(_JointAdapter):
    kind = "joint_trajectory"
    msg_type = JointTrajectory

    def _msg(self, q, stamp):
        msg = JointTrajectory()
        # zero stamp: the controller starts the trajectory on receipt (a late stamp would skip it)
        msg.joint_names = list(self.hw.joint_names)
        sec, nsec = divmod(int(round(self.hw.time_from_start_s * 1e9)), 1_000_000_000)
        msg.points = [JointTrajectoryPoint(positions=[float(x) for x in q],
                                           time_from_start=Duration(sec=sec, nanosec=nsec))]
        return msg

    def violations(self, msg, previous=None):
        if list(msg.joint_names) != list(self.hw.joint_names):
            return [f"joint names {list(msg.joint_names)}"]
        if len(msg.points) != 1:
            return [f"{len(msg.points)} trajectory points"]
        prev = np.asarray(previous.points[0].positions) if previous is not None and previous.points else None
        return self._joint_violations(np.asarray(msg.points[0].positions, float), prev)


class ForwardPositionAdapter(_JointAdapter):
    kind = "forward_position"
    msg_type = Float64MultiArray

    def _msg(self, q, stamp):
        return Float64MultiArray(data=[float(x) for x in q])

    def violations(self, msg, previous=None):
        prev = np.asarray(previous.data, float) if previous is not None else None
        return self._joint_violations(np.asarray(msg.data, float), prev)


_ADAPTERS = {a.kind: a for a in (CartesianPoseAdapter, ServoTwistAdapter, JointTrajectoryAdapter,
                                 ForwardPositionAdapter)}


def make_adapter(hw: ArmHardware, control_hz: float) -> Adapter:
    return _ADAPTERS[hw.interface](hw, control_hz)


def joint_state_msg(names: Sequence[str], q: np.ndarray, stamp: Any) -> JointState:
    """A JointState (for fake drivers and tests)."""
    msg = JointState()
    msg.header.stamp = stamp
    msg.name = list(names)
    msg.position = [float(x) for x in q]
    return msg
