"""Quadrotor juggling state <-> ROS messages, without a node (the sim node and the actor share it).

Conventions (as the real `quadrotor` node, robot_rl/nodes/quadrotor.py, and hardware/*.yaml):

* ``quad/odom`` nav_msgs/Odometry: ``header.frame_id`` the world frame (ENU, z up, e.g. ``map``),
  ``child_frame_id`` the FLU body frame (``base_link``); pose in the world frame; twist in the
  child (body) frame as REP-105 says: ``twist.linear`` the body-frame velocity, ``twist.angular``
  the body rates.
* ``ball/pose`` geometry_msgs/PoseStamped in the world frame; the orientation is unused (all zeros:
  a tracker without orientation). The ball's velocity is not measured: :class:`JuggleObserver`
  differences consecutive positions over their stamps, as the training env does.
* ``quad/cmd_ctbr`` geometry_msgs/TwistStamped: ``linear.z`` mass-normalised thrust [m/s^2],
  ``angular`` body rates [rad/s], ``linear.x/y`` 0, ``frame_id`` the body frame, stamped with the
  observation it answers.
"""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped
from nav_msgs.msg import Odometry

from robot_rl.control.checks import finite
from robot_rl.control.rotations import quat_to_mat
from robot_rl.robots.quad.juggling import JuggleState
from robot_rl.robots.quad.links.config import QuadHardware
from robot_rl.hardware.safety import Rejected, clamp_box
from robot_rl.ros.messages import ns_to_stamp

__all__ = ["JuggleObserver", "ctbr_to_msg", "parse_ball", "parse_ctbr", "parse_odom", "state_to_msgs"]


def state_to_msgs(state: JuggleState, index: int, stamp_ns: int, world_frame: str,
                  body_frame: str) -> tuple[Odometry, PoseStamped]:
    """Odometry and ball pose of pair ``index`` of ``state``, stamped ``stamp_ns``."""
    stamp = ns_to_stamp(stamp_ns)
    rot = quat_to_mat(state.quad_quat[index])
    odom = Odometry()
    odom.header.stamp, odom.header.frame_id, odom.child_frame_id = stamp, world_frame, body_frame
    p, q = state.quad_pos[index], state.quad_quat[index] / np.linalg.norm(state.quad_quat[index])
    pose = odom.pose.pose
    pose.position.x, pose.position.y, pose.position.z = (float(v) for v in p)
    pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z = (float(v) for v in q)
    v_body = rot.T @ state.quad_vel[index]
    twist = odom.twist.twist
    twist.linear.x, twist.linear.y, twist.linear.z = (float(v) for v in v_body)
    twist.angular.x, twist.angular.y, twist.angular.z = (float(v) for v in state.quad_rates[index])
    ball = PoseStamped()
    ball.header.stamp, ball.header.frame_id = stamp, world_frame
    ball.pose.position.x, ball.pose.position.y, ball.pose.position.z = (float(v) for v in state.ball_pos[index])
    return odom, ball


def ctbr_to_msg(ctbr: np.ndarray, stamp_ns: int, body_frame: str) -> TwistStamped:
    msg = TwistStamped()
    msg.header.stamp, msg.header.frame_id = ns_to_stamp(stamp_ns), body_frame
    msg.twist.linear.z = float(ctbr[0])
    msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = (float(v) for v in ctbr[1:4])
    return msg


# ---- validation of what a real vehicle's node receives (messages in, numbers out) -----------------


def parse_ctbr(msg: TwistStamped, hw: QuadHardware) -> tuple[float, np.ndarray, bool, bool]:
    """Validates a quad/cmd_ctbr command; returns (thrust m/s^2, FLU rates rad/s, thrust clamped,
    rates clamped). Raises Rejected ("frame", "nan", "lateral")."""
    if msg.header.frame_id != hw.command_frame:
        raise Rejected("frame", f"frame_id {msg.header.frame_id!r}, expected {hw.command_frame!r} (FLU body)")
    t, r = msg.twist.linear, msg.twist.angular
    values = finite("command", [t.x, t.y, t.z, r.x, r.y, r.z], error=Rejected.nan)
    if values[0] != 0.0 or values[1] != 0.0:
        raise Rejected("lateral", f"twist.linear.x/y must be 0 for a CTBR command, got {values[:2].tolist()}")
    lo, hi = hw.thrust_limits
    thrust, thrust_clamped = clamp_box(values[2], lo, hi)
    rates, rates_clamped = clamp_box(values[3:], -hw.max_rates, hw.max_rates)
    return float(thrust), rates, thrust_clamped, rates_clamped


def _check_quaternion(o, tolerance: float) -> np.ndarray:
    q = finite("orientation", [o.x, o.y, o.z, o.w], error=Rejected.nan)
    if abs(float(np.linalg.norm(q)) - 1.0) > tolerance:
        raise Rejected("quaternion", f"orientation norm {np.linalg.norm(q):.4f} is not 1")
    return q


def _check_position(p, max_position_m: float) -> np.ndarray:
    pos = finite("position", [p.x, p.y, p.z], error=Rejected.nan)
    if float(np.abs(pos).max()) > max_position_m:
        raise Rejected("implausible", f"position {pos.tolist()} is further than {max_position_m:g} m")
    return pos


def parse_odom(msg: Odometry, hw: QuadHardware, quaternion_tolerance: float = 0.05,
               max_position_m: float = 1000.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validates quad/odom; returns (position, quaternion xyzw, linear velocity, angular velocity)."""
    if msg.header.frame_id != hw.state_frame:
        raise Rejected("frame", f"frame_id {msg.header.frame_id!r}, expected {hw.state_frame!r}")
    pose, twist = msg.pose.pose, msg.twist.twist
    pos = _check_position(pose.position, max_position_m)
    quat = _check_quaternion(pose.orientation, quaternion_tolerance)
    vel = finite("linear velocity", [twist.linear.x, twist.linear.y, twist.linear.z], error=Rejected.nan)
    ang = finite("angular velocity", [twist.angular.x, twist.angular.y, twist.angular.z], error=Rejected.nan)
    return pos, quat, vel, ang


def parse_ball(msg: PoseStamped, hw: QuadHardware, quaternion_tolerance: float = 0.05,
               max_position_m: float = 1000.0) -> np.ndarray:
    """Validates ball/pose; returns its position (the orientation must be a unit quaternion or all
    zeros, as trackers without orientation send)."""
    if msg.header.frame_id != hw.state_frame:
        raise Rejected("frame", f"frame_id {msg.header.frame_id!r}, expected {hw.state_frame!r}")
    pos = _check_position(msg.pose.position, max_position_m)
    o = msg.pose.orientation
    if any(v != 0.0 for v in (o.x, o.y, o.z, o.w)):
        _check_quaternion(o, quaternion_tolerance)
    return pos


class JuggleObserver:
    """Rebuilds the task's :class:`JuggleState` from validated odometry and ball positions; the
    ball's velocity is the difference of its last two positions over their stamps (0 for the first
    observation of an episode)."""

    def __init__(self) -> None:
        self._ball: tuple[int, np.ndarray] | None = None

    def reset(self) -> None:
        self._ball = None

    def state(self, stamp_ns: int, position: np.ndarray, quat_xyzw: np.ndarray, vel_body: np.ndarray,
              rates: np.ndarray, ball: np.ndarray) -> JuggleState:
        """A one-pair state. Raises ValueError for a stamp that does not advance."""
        quat = np.array([quat_xyzw[3], quat_xyzw[0], quat_xyzw[1], quat_xyzw[2]], dtype=np.float64)
        rot = quat_to_mat(quat)
        ball = np.asarray(ball, dtype=np.float64)
        if self._ball is None:
            ball_vel = np.zeros(3)
        else:
            dt = (stamp_ns - self._ball[0]) * 1e-9
            if dt <= 0:
                raise ValueError(f"ball pose stamps must advance (got {stamp_ns} after {self._ball[0]})")
            ball_vel = (ball - self._ball[1]) / dt
        self._ball = (stamp_ns, ball)
        return JuggleState(np.asarray(position, np.float64)[None], quat[None], (rot @ np.asarray(vel_body))[None],
                           np.asarray(rates, np.float64)[None], ball[None], ball_vel[None])
