"""A real arm's driver <-> numbers: validation of its state messages and of the actor's arm/cmd and
arm/gripper (raising `Rejected`), and the messages of each controller interface (hardware/<arm>.yaml
`interface:`) built from, and read back into, the outputs of `robot_rl.robots.arm.hardware`:

- `cartesian_pose`: geometry_msgs/PoseStamped, the target pose (position + orientation wxyz);
- `servo_twist`: geometry_msgs/TwistStamped (MoveIt Servo `delta_twist_cmds`), linear + angular velocity;
- `joint_trajectory`: trajectory_msgs/JointTrajectory with one point, the joint targets;
- `forward_position`: std_msgs/Float64MultiArray, the joint targets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import PoseStamped, TwistStamped
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from robot_rl.robots.arm.hardware import Adapter
from robot_rl.robots.arm.hardware_config import ArmHardware
from robot_rl.hardware.safety import Rejected, clamp_box

OUTPUT_TYPES = {"cartesian_pose": PoseStamped, "servo_twist": TwistStamped, "joint_trajectory": JointTrajectory,
                "forward_position": Float64MultiArray}
"""The message type of each controller interface's output topic."""


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



# ---- controller outputs ---------------------------------------------------------------------------


def output_msg(hw: ArmHardware, output: np.ndarray, stamp: Any) -> Any:
    """An adapter's output (see `robot_rl.robots.arm.hardware`) as the message of `hw.interface`."""
    values = [float(x) for x in output]
    if hw.interface == "cartesian_pose":
        msg = PoseStamped()
        msg.header.stamp = stamp
        msg.header.frame_id = hw.output_frame
        p, o = msg.pose.position, msg.pose.orientation
        p.x, p.y, p.z, o.w, o.x, o.y, o.z = values
        return msg
    if hw.interface == "servo_twist":
        msg = TwistStamped()
        msg.header.stamp = stamp
        msg.header.frame_id = hw.output_frame
        lin, ang = msg.twist.linear, msg.twist.angular
        lin.x, lin.y, lin.z, ang.x, ang.y, ang.z = values
        return msg
    if hw.interface == "joint_trajectory":
        msg = JointTrajectory()
        # zero stamp: the controller starts the trajectory on receipt (a late stamp would skip it)
        msg.joint_names = list(hw.joint_names)
        sec, nsec = divmod(int(round(hw.time_from_start_s * 1e9)), 1_000_000_000)
        msg.points = [JointTrajectoryPoint(positions=values, time_from_start=Duration(sec=sec, nanosec=nsec))]
        return msg
    return Float64MultiArray(data=values)


def output_values(hw: ArmHardware, msg: Any) -> tuple[np.ndarray | None, list[str]]:
    """An output message read back: (the adapter's output, or None when the message cannot carry
    one, and what is wrong with the message itself: frame, joint names, number of points)."""
    if hw.interface == "cartesian_pose":
        p, o = msg.pose.position, msg.pose.orientation
        wrong = [] if msg.header.frame_id == hw.output_frame else [f"frame {msg.header.frame_id!r}"]
        return np.array([p.x, p.y, p.z, o.w, o.x, o.y, o.z]), wrong
    if hw.interface == "servo_twist":
        lin, ang = msg.twist.linear, msg.twist.angular
        wrong = [] if msg.header.frame_id == hw.output_frame else [f"frame {msg.header.frame_id!r}"]
        return np.array([lin.x, lin.y, lin.z, ang.x, ang.y, ang.z]), wrong
    if hw.interface == "joint_trajectory":
        if list(msg.joint_names) != list(hw.joint_names):
            return None, [f"joint names {list(msg.joint_names)}"]
        if len(msg.points) != 1:
            return None, [f"{len(msg.points)} trajectory points"]
        return np.asarray(msg.points[0].positions, float), []
    return np.asarray(msg.data, float), []


def output_violations(adapter: Adapter, msg: Any, previous: Any | None = None) -> list[str]:
    """Which configured limits an output message breaks (vs the previous one, for step limits)."""
    values, wrong = output_values(adapter.hw, msg)
    if values is None:
        return wrong
    before = output_values(adapter.hw, previous)[0] if previous is not None else None
    return adapter.violations(values, before) + wrong
