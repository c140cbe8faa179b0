"""Race car state and commands <-> standard ROS messages, and the practice state machine, without a
node: the simulated car (`car_sim`), the real car (`car`) and the car actor share them, so what a car
publishes is exactly what the actor rebuilds, and both cars practise alike.

Conventions
-----------
* ``car/cmd_vel`` geometry_msgs/Twist: ``linear.x`` the speed [m/s] (negative: reverse),
  ``angular.z`` the Ackermann (bicycle-model) steering angle [rad] (positive: left). NaN or Inf in
  any field: refused. Outside the hardware YAML's limits: clamped and counted. Other fields must be
  0: nonzero ones are ignored and reported. A Twist has no stamp: in lockstep every valid command
  advances the simulated car one control period (it answers the newest observation), so an actor
  sends exactly one command per new observation stamp and never resends (the topic is reliable).
* ``car/odom`` nav_msgs/Odometry: ``frame_id`` ``odom``, ``child_frame_id`` ``base_link``; the pose
  in ``odom``, the twist in the body frame (REP-105): ``linear`` the body velocity, ``angular`` the
  body rates (the gyro).
* ``car/imu`` sensor_msgs/Imu: ``linear_acceleration`` with gravity (REP-145), ``angular_velocity``,
  ``orientation`` (``orientation_covariance[0] = -1`` when the IMU gives none).
* ``front/color/image_raw``: the forward camera (rgb8); in simulation stamped like odom and imu.
* ``car/practice`` std_msgs/String, JSON ``{"state": "driving"|"recovering", "event":
  "crash"|"stuck"|null, "stamp_ns": <stamp of the observation that shows it>}``, published when the
  state changes: while recovering the car ignores the actor and backs out on its own.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu
from std_msgs.msg import String

from robot_rl.robots.car.control import PracticeConfig, PracticeMonitor, Recovery
from robot_rl.control.checks import finite
from robot_rl.hardware.safety import Rejected
from robot_rl.robots.car.hardware import CarLimits
from robot_rl.ros.messages import ns_to_stamp

__all__ = ["BODY_FRAME", "ODOM_FRAME", "PRACTICE_EVENTS", "PRACTICE_STATES", "CarCommand", "CarPractice",
           "PracticeEvent", "cmd_vel_msg", "imu_msg", "msgs_to_sensors", "odometry_msg", "parse_cmd_vel", "parse_imu",
           "parse_practice", "practice_msg", "quat_yaw"]

ODOM_FRAME, BODY_FRAME = "odom", "base_link"
PRACTICE_STATES = ("driving", "recovering")
PRACTICE_EVENTS = ("crash", "stuck", None)
QUATERNION_TOLERANCE = 0.05
_CMD_FIELDS = ("linear.x", "linear.y", "linear.z", "angular.x", "angular.y", "angular.z")
_USED_FIELDS = ("linear.x", "angular.z")


# ---- commands ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CarCommand:
    speed: float
    """m/s, within the limits."""
    steer: float
    """rad, within the limits."""
    clamped: tuple[str, ...] = ()
    """Fields that were outside the limits ("linear.x", "angular.z")."""
    ignored: tuple[str, ...] = ()
    """Nonzero fields a car/cmd_vel does not use."""


def parse_cmd_vel(msg: Twist, limits: CarLimits) -> CarCommand:
    """Validates a car/cmd_vel; raises Rejected("nan") for NaN/Inf in any field."""
    lin, ang = msg.linear, msg.angular
    values = dict(zip(_CMD_FIELDS, (lin.x, lin.y, lin.z, ang.x, ang.y, ang.z)))
    bad = [f"{name}={value}" for name, value in values.items() if not math.isfinite(value)]
    if bad:
        raise Rejected("nan", f"car/cmd_vel has NaN or Inf: {', '.join(bad)}")
    speed = min(max(values["linear.x"], -limits.max_reverse_speed), limits.max_speed)
    steer = min(max(values["angular.z"], -limits.max_steer), limits.max_steer)
    clamped = tuple(name for name, v in (("linear.x", speed), ("angular.z", steer)) if v != values[name])
    ignored = tuple(name for name, value in values.items() if name not in _USED_FIELDS and value != 0.0)
    return CarCommand(float(speed), float(steer), clamped, ignored)


def cmd_vel_msg(speed: float, steer: float) -> Twist:
    msg = Twist()
    msg.linear.x, msg.angular.z = float(speed), float(steer)
    return msg


# ---- state -------------------------------------------------------------------------------------------


def quat_yaw(quat_wxyz: np.ndarray) -> float:
    w, x, y, z = (float(v) for v in quat_wxyz)
    return math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def odometry_msg(sensors: dict[str, np.ndarray], stamp_ns: int) -> Odometry:
    """car/odom from a CarSim.sensors()-like dict (position, quat (w, x, y, z), body velocity, gyro)."""
    msg = Odometry()
    msg.header.stamp, msg.header.frame_id, msg.child_frame_id = ns_to_stamp(stamp_ns), ODOM_FRAME, BODY_FRAME
    pose, twist = msg.pose.pose, msg.twist.twist
    pose.position.x, pose.position.y, pose.position.z = (float(v) for v in sensors["position"])
    q = np.asarray(sensors["quat"], float)
    pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z = (float(v) for v in
                                                                                      q / np.linalg.norm(q))
    twist.linear.x, twist.linear.y, twist.linear.z = (float(v) for v in sensors["velocity"])
    twist.angular.x, twist.angular.y, twist.angular.z = (float(v) for v in sensors["gyro"])
    return msg


def imu_msg(sensors: dict[str, np.ndarray], stamp_ns: int, frame_id: str = BODY_FRAME) -> Imu:
    """car/imu from a CarSim.sensors()-like dict (accel with gravity, gyro, quat (w, x, y, z))."""
    msg = Imu()
    msg.header.stamp, msg.header.frame_id = ns_to_stamp(stamp_ns), frame_id
    q = np.asarray(sensors["quat"], float)
    o = msg.orientation
    o.w, o.x, o.y, o.z = (float(v) for v in q / np.linalg.norm(q))
    a, g = msg.linear_acceleration, msg.angular_velocity
    a.x, a.y, a.z = (float(v) for v in sensors["accel"])
    g.x, g.y, g.z = (float(v) for v in sensors["gyro"])
    return msg


def _unit_quat(o, what: str) -> np.ndarray:
    q = finite(f"{what} orientation", [o.w, o.x, o.y, o.z], error=Rejected.nan)
    if abs(float(np.linalg.norm(q)) - 1.0) > QUATERNION_TOLERANCE:
        raise Rejected("quaternion", f"{what} orientation norm {np.linalg.norm(q):.4f} is not 1")
    return q / np.linalg.norm(q)


def parse_imu(msg: Imu) -> dict[str, np.ndarray | None]:
    """Validates an Imu; returns accel, gyro and quat (w, x, y, z; None when the IMU gives no orientation)."""
    a, g = msg.linear_acceleration, msg.angular_velocity
    quat = None if msg.orientation_covariance[0] == -1 else _unit_quat(msg.orientation, "imu")
    return {"accel": finite("imu linear_acceleration", [a.x, a.y, a.z], error=Rejected.nan),
            "gyro": finite("imu angular_velocity", [g.x, g.y, g.z], error=Rejected.nan), "quat": quat}


def msgs_to_sensors(odom: Odometry, imu: Imu) -> dict[str, np.ndarray]:
    """Rebuilds the CarSim.sensors() dict (what `car_state_observation` takes) from car/odom and
    car/imu. Raises Rejected ("frame", "nan", "quaternion")."""
    if odom.header.frame_id != ODOM_FRAME or odom.child_frame_id != BODY_FRAME:
        raise Rejected("frame", f"car/odom frames {odom.header.frame_id!r} -> {odom.child_frame_id!r}, expected "
                       f"{ODOM_FRAME!r} -> {BODY_FRAME!r}")
    pose, twist = odom.pose.pose, odom.twist.twist
    quat = _unit_quat(pose.orientation, "odom")
    inertial = parse_imu(imu)
    velocity = finite("odom twist", [twist.linear.x, twist.linear.y, twist.linear.z], error=Rejected.nan)
    position = finite("odom position", [pose.position.x, pose.position.y, pose.position.z], error=Rejected.nan)
    return {"accel": inertial["accel"], "gyro": inertial["gyro"], "velocity": velocity, "position": position,
            "yaw": np.array(quat_yaw(quat)), "quat": quat}


# ---- practice ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PracticeEvent:
    state: str
    """"driving" or "recovering"."""
    event: str | None
    """What started the recovery ("crash", "stuck"); None when driving again."""
    stamp_ns: int


def practice_msg(event: PracticeEvent) -> String:
    return String(data=json.dumps({"state": event.state, "event": event.event, "stamp_ns": int(event.stamp_ns)}))


def parse_practice(msg: String) -> PracticeEvent:
    """Validates a car/practice message; raises Rejected("practice") naming what is wrong."""
    try:
        data = json.loads(msg.data)
        event = PracticeEvent(data["state"], data["event"], data["stamp_ns"])
    except (ValueError, KeyError, TypeError) as exc:
        raise Rejected("practice", f"car/practice is not JSON with state, event and stamp_ns: {exc}") from None
    if event.state not in PRACTICE_STATES or event.event not in PRACTICE_EVENTS or \
            not isinstance(event.stamp_ns, int) or isinstance(event.stamp_ns, bool):
        raise Rejected("practice", f"car/practice {msg.data!r}: state must be one of {PRACTICE_STATES}, event one of "
                       f"{PRACTICE_EVENTS}, stamp_ns an integer")
    return event


class CarPractice:
    """FastRLAP's autonomous practice as both car nodes run it, one control step at a time: while
    driving, the stuck and crash detectors watch every commanded step; on an event the car ignores
    the actor and executes the reverse manoeuvre, then drives again. Steps in which the car was not
    commanded (e-stop, stale command) are not shown to it, so standing still is not "stuck"."""

    def __init__(self, config: PracticeConfig, control_hz: float, max_steer: float, rng: np.random.Generator):
        self.config, self.control_hz, self.max_steer, self.rng = config, control_hz, max_steer, rng
        self.monitor = PracticeMonitor(config)
        self.recovery: Recovery | None = None
        self.counts = {"crash": 0, "stuck": 0, "recoveries_done": 0}

    @property
    def state(self) -> str:
        return "driving" if self.recovery is None else "recovering"

    def recovery_command(self) -> tuple[float, float]:
        """This step's (speed m/s, steer rad) of the manoeuvre under way."""
        if self.recovery is None:
            raise RuntimeError("no recovery manoeuvre under way: the car is driving")
        speed, steer = self.recovery.command()
        return speed, steer * self.max_steer

    def after_step(self, position: np.ndarray, peak_accel: np.ndarray | None, stamp_ns: int) -> PracticeEvent | None:
        """After a commanded step: the position reached and the peak acceleration since the last
        step (None: no IMU sample, so no crash check). Returns the event when the state changes."""
        if self.recovery is not None:
            if not self.recovery.done:
                return None
            self.recovery = None
            self.counts["recoveries_done"] += 1
            self.monitor.reset()
            return PracticeEvent("driving", None, stamp_ns)
        if peak_accel is not None:
            event = self.monitor.update(position, peak_accel)
        else:
            event = "stuck" if self.monitor.stuck(position) else None
        if event is None:
            return None
        self.counts[event] += 1
        self.recovery = Recovery(self.config, self.control_hz, self.rng)
        return PracticeEvent("recovering", event, stamp_ns)

    def reset(self, stamp_ns: int) -> PracticeEvent | None:
        """A new episode (teleported): any manoeuvre is dropped; the driving event if one was under way."""
        self.monitor.reset()
        was_recovering, self.recovery = self.recovery is not None, None
        return PracticeEvent("driving", None, stamp_ns) if was_recovering else None
