"""The planar arm's topics and their messages, in one place for its simulator and its actor."""

from __future__ import annotations

import math

import numpy as np
from geometry_msgs.msg import PointStamped
from sensor_msgs.msg import JointState

from planar_robot.sim import fingertip
from robot_rl.ros.messages import ns_to_stamp

JOINTS = ("shoulder", "elbow")
JOINTS_TOPIC, TARGET_TOPIC, COMMAND_TOPIC = "planar/joint_states", "planar/target", "planar/cmd"


def command_msg(action: np.ndarray, stamp_ns: int) -> JointState:
    msg = JointState()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.name = list(JOINTS)
    msg.velocity = np.clip(np.asarray(action, np.float64), -1.0, 1.0).tolist()
    return msg


def command_action(msg: JointState) -> np.ndarray:
    """The action a command carries; ValueError for other joints, a wrong count or a non-finite value."""
    if tuple(msg.name) != JOINTS or len(msg.velocity) != len(JOINTS):
        raise ValueError(f"{COMMAND_TOPIC} must name {JOINTS} with one velocity each, got {list(msg.name)} and "
                         f"{len(msg.velocity)} values")
    action = np.asarray(msg.velocity, np.float64)
    if not np.isfinite(action).all():
        raise ValueError(f"{COMMAND_TOPIC} contains NaN or Inf")
    return np.clip(action, -1.0, 1.0)


def msgs_to_state(joints: JointState, target: PointStamped) -> dict[str, np.ndarray]:
    """The task's state (planar_robot.tasks) from one synchronized pair; ValueError when malformed."""
    if tuple(joints.name) != JOINTS or len(joints.position) != 2 or len(joints.velocity) != 2:
        raise ValueError(f"{JOINTS_TOPIC} must carry {JOINTS} with a position and velocity each")
    values = [*joints.position, *joints.velocity, target.point.x, target.point.y]
    if not all(math.isfinite(v) for v in values):
        raise ValueError("planar state contains NaN or Inf")
    q = np.asarray(joints.position, np.float32)
    return {"q": q, "qd": np.asarray(joints.velocity, np.float32), "tip": fingertip(q),
            "target": np.array([target.point.x, target.point.y], np.float32)}
