"""The simulated planar arm as a ROS 2 node (`planar_sim`), built from robot_rl's simulator parts: its time
(`robot_rl.ros.sim_time`: lockstep or wall clock), its latched e-stop and its reset service.

Publishes `planar/target` (geometry_msgs/PointStamped) then `planar/joint_states` (sensor_msgs/JointState:
shoulder and elbow, position and velocity), both stamped with the simulated time, and the overhead camera as
`overhead/color/image_raw` when `publish_images`. Takes `planar/cmd` (JointState, velocity = the action in
[-1, 1], stamped with the observation it answers): lockstep steps on the answer to the current observation;
realtime steps at the control rate and holds still on a command older than `command_timeout_s`.
"""

from __future__ import annotations

import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PointStamped
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState

from planar_robot import sim
from planar_robot.topics import COMMAND_TOPIC, JOINTS, JOINTS_TOPIC, TARGET_TOPIC, command_action
from robot_rl.ros import qos
from robot_rl.ros.hardware_node import SimEstop
from robot_rl.ros.messages import image_to_msg, ns_to_stamp, stamp_to_ns
from robot_rl.ros.node_utils import Param, declare_params, diagnostics, run_node
from robot_rl.ros.sim_time import SimulatedTime

PARAMS = [
    Param("clock_mode", "lockstep", "Simulated-time lockstep or wall-clock real time.",
          choices=["lockstep", "realtime"]),
    Param("command_timeout_s", 0.3, "Realtime mode: hold still when the last command is older.", 0.01, 10.0),
    Param("republish_period_s", 0.2, "Lockstep mode: republish the observation if no command came.", 0.01, 10.0),
    Param("publish_images", False, "Publish the overhead camera (for the person's view)."),
    Param("image_size", 64, "Camera frame height and width [px].", 8, 128),
    Param("seed", 0, "Seed of the arm's start poses and targets.", 0, 2**31 - 1),
]


class PlanarSimNode(Node):
    def __init__(self):
        super().__init__("planar_sim")
        p = self.params = declare_params(self, PARAMS)
        self.arm = sim.PlanarArm()
        self.rng = np.random.default_rng(p["seed"])
        self.last_cmd: tuple[np.ndarray, int, float] | None = None  # action, stamp it answers, wall time received
        self.counters = {"steps": 0, "resets": 0, "commands_received": 0, "rejected_commands": 0,
                         "stale_commands": 0, "estopped_commands": 0, "republished": 0}
        self.target_pub = self.create_publisher(PointStamped, TARGET_TOPIC, qos.SENSOR)
        self.joints_pub = self.create_publisher(JointState, JOINTS_TOPIC, qos.SENSOR)
        self.image_pub = (self.create_publisher(Image, f"{sim.CAMERA}/color/image_raw", qos.SENSOR)
                          if p["publish_images"] else None)
        self.create_subscription(JointState, COMMAND_TOPIC, self._on_cmd, qos.COMMAND_INPUT)
        self.estop = SimEstop(self, self.counters, "the arm holds still")
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_timer(1.0, lambda: self.diag_pub.publish(diagnostics(self, dict(self.counters))))
        self.time = SimulatedTime(self, 1.0 / sim.CONTROL_HZ, p["clock_mode"] == "lockstep",
                                  p["republish_period_s"], self.counters, self._publish_observation,
                                  self._realtime_step, self._on_reset)
        self.arm.reset(self.rng)
        self.time.publish()

    def _on_cmd(self, msg: JointState) -> None:
        self.counters["commands_received"] += 1
        try:
            action = command_action(msg)
        except ValueError as exc:
            self.counters["rejected_commands"] += 1
            self.get_logger().warning(f"rejected command: {exc}", throttle_duration_sec=5.0)
            return
        if self.estop.active:
            self.counters["estopped_commands"] += 1
            return
        self.last_cmd = (action, stamp_to_ns(msg.header.stamp), time.monotonic())
        if self.time.lockstep and self.last_cmd[1] == self.time.now_ns:
            self._step(action)

    def _realtime_step(self) -> None:
        if self.estop.active:
            return
        cmd = self.last_cmd
        fresh = cmd is not None and time.monotonic() - cmd[2] <= self.params["command_timeout_s"]
        self.counters["stale_commands"] += int(cmd is not None and not fresh)
        self._step(cmd[0] if fresh else np.zeros(len(JOINTS)))

    def _step(self, action: np.ndarray) -> None:
        self.arm.step(action)
        self.time.advance()
        self.counters["steps"] += 1
        self.time.publish()

    def _publish_observation(self, stamp_ns: int) -> None:
        state, stamp = self.arm.state(), ns_to_stamp(stamp_ns)
        if self.image_pub is not None:
            frame = self.arm.render(sim.CAMERA, self.params["image_size"])
            self.image_pub.publish(image_to_msg(frame, stamp, f"{sim.CAMERA}_color_optical_frame"))
        target = PointStamped()
        target.header.stamp, target.header.frame_id = stamp, "world"
        target.point.x, target.point.y = (float(v) for v in state["target"])
        self.target_pub.publish(target)
        joints = JointState()
        joints.header.stamp = stamp
        joints.name = list(JOINTS)
        joints.position, joints.velocity = state["q"].tolist(), state["qd"].tolist()
        self.joints_pub.publish(joints)  # last: the actor takes its repeat as "my command was lost"

    def _on_reset(self) -> None:
        self.arm.reset(self.rng)
        self.last_cmd = None

    def close(self) -> None:
        self.arm.close()


def main(args=None) -> int:
    return run_node(PlanarSimNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
