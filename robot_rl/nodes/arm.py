"""Real-arm node: takes the actor's `arm/cmd` (end-effector velocity) and `arm/gripper` and drives
the arm's controller through one adapter (hardware/<arm>.yaml `interface:`), safely.

- Lifecycle node (`HardwareNode`): nothing is sent before activation; activation is refused
  while the driver's state topics (joint_states, end-effector pose) are silent or the end
  effector is outside the workspace box. With `autostart` it retries every second.
- Every message is validated (NaN/Inf, frame, stamp, names/lengths) and every refusal counted
  on /diagnostics per input and per reason; command velocities above `command.max_speed` and
  gripper values outside [0, 1] are clamped (counted).
- The target pose starts at the measured pose and moves by the commanded velocity each control
  period: at most `max_speed / control_hz` per axis, never more than `workspace.max_lead` ahead of
  the measured pose, always inside the workspace box.
- Stale command (older than `command_timeout_s`), no state, or e-stop -> hold (same target /
  zero twist / same joint targets), sent at once, not at the next period. `/estop` latches;
  `~/reset_estop` releases it.
- `~/reset` (std_srvs/Trigger) moves the arm home at `home.speed` and opens the gripper; it
  answers success (message `{"stamp_ns": <newest joint_states stamp>}`, what the actor expects
  from `/arm_sim/reset`) once the arm is home, and failure ("homing: ... to go") while it is on its
  way, so a caller retries until it is there (the executor is never blocked).

The task world frame is the robot's base frame (no tf2 on PyPI): `command.frame` (the actor's
"world") and the driver's `state.frame` name the same frame.
"""

from __future__ import annotations

import copy
import json
import math
from typing import NoReturn

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped
from sensor_msgs.msg import JointState
from std_msgs.msg import Float32, Float64
from std_srvs.srv import Trigger

from robot_rl.robots.arm.kinematics import DHChain
from robot_rl.control.rotations import mat_to_quat
from robot_rl.robots.arm.hardware import Adapter, CartesianTargetShaper, Measured, make_adapter
from robot_rl.robots.arm.hardware_config import load_hardware
from robot_rl.hardware.safety import StopReason
from robot_rl.ros import qos
from robot_rl.ros.arm_driver_io import (
    OUTPUT_TYPES,
    gripper_msg,
    output_msg,
    parse_command,
    parse_ee_pose,
    parse_gripper,
    parse_joint_states,
)
from robot_rl.ros.hardware_node import HardwareError, HardwareNode
from robot_rl.ros.messages import stamp_to_ns
from robot_rl.ros.node_utils import Param, ParameterError, reset_done, run_node

PARAMS = [
    Param("hardware", "franka_cartesian", "Hardware description: a name in the package's hardware/ folder or a "
          "path to a YAML file."),
]

# Driver state: qos.SENSOR (best effort, matches any publisher) with room for a burst, so a busy
# executor validates (and counts) what arrived instead of the reader silently overwriting it.
INPUT_STATE = copy.copy(qos.SENSOR)
INPUT_STATE.depth = 20


class ArmNode(HardwareNode):
    def __init__(self):
        super().__init__("arm", PARAMS, safety_defaults={"max_command_age_s": 0.5})
        try:
            self.hw = load_hardware(self.params["hardware"])
        except ValueError as exc:
            raise ParameterError(f"parameter 'hardware': {exc}") from None
        hw = self.hw
        self.chain = DHChain(hw.kinematics) if hw.kinematics is not None else None
        self.adapter: Adapter | None = None
        self.shaper: CartesianTargetShaper | None = None
        self.output_pub = None
        self.gripper_pub = None
        self.observation_pub = None
        self.velocity = np.zeros(3)
        self.gripper_cmd: float | None = None
        self.gripper_sent: float | None = None
        self.joints = None
        self.joints_time: float | None = None
        self.ee: tuple[np.ndarray, np.ndarray] | None = None
        self.ee_time: float | None = None
        self.newest_state_stamp_ns = 0
        self.homing = False
        self.counts = {"outputs": 0, "gripper_outputs": 0, "clamped_velocity": 0, "clamped_gripper": 0,
                       "limited_target": 0, "homings": 0}
        # Driver state feeds the gate even while inactive (activation needs a fresh state).
        self.create_checked_subscription(JointState, hw.joint_states_topic, self._on_joint_states, INPUT_STATE,
                                         "joint_states")
        if hw.ee_pose_topic:
            self.create_checked_subscription(PoseStamped, hw.ee_pose_topic, self._on_ee_pose, INPUT_STATE, "ee_pose")
        self.create_checked_subscription(TwistStamped, "arm/cmd", self._on_cmd, qos.COMMAND_INPUT, "arm_cmd")
        self.create_checked_subscription(Float32, "arm/gripper", self._on_gripper, qos.COMMAND_INPUT, "arm_gripper")
        self.create_service(Trigger, "~/reset", self._on_reset)
        if hw.observation_ee_pose_topic and hw.observation_ee_pose_topic != hw.ee_pose_topic:
            self.observation_pub = self.create_publisher(PoseStamped, hw.observation_ee_pose_topic, qos.SENSOR)
        self.get_logger().info(f"hardware {hw.name} ({hw.source}): {hw.interface} -> {hw.output_topic}")

    # ---- lifecycle hooks -------------------------------------------------------------------------

    def configure_hardware(self) -> None:
        self.adapter = make_adapter(self.hw, self.control_hz)
        self.shaper = CartesianTargetShaper(self.hw, self.control_hz)
        output_type = OUTPUT_TYPES[self.hw.interface]
        self.output_pub = self.create_lifecycle_publisher(output_type, self.hw.output_topic, qos.COMMAND)
        if self.hw.gripper_topic:
            self.gripper_pub = self.create_lifecycle_publisher(Float64, self.hw.gripper_topic, qos.COMMAND)

    def cleanup_hardware(self) -> None:
        if self.output_pub is not None:
            self.destroy_lifecycle_publisher(self.output_pub)
        if self.gripper_pub is not None:
            self.destroy_lifecycle_publisher(self.gripper_pub)
        self.output_pub = self.gripper_pub = self.adapter = self.shaper = None

    def activation_check(self) -> str | None:
        now, timeout = self.now(), self.params["state_timeout_s"] or 1.0
        silent = []
        if self.joints_time is None or now - self.joints_time > timeout:
            silent.append(self._silence("joint_states", self.hw.joint_states_topic, self.joints_time, now))
        if self.hw.ee_pose_topic and (self.ee_time is None or now - self.ee_time > timeout):
            silent.append(self._silence("ee_pose", self.hw.ee_pose_topic, self.ee_time, now))
        if silent:
            return "robot state topic silent: " + "; ".join(silent)
        return None

    def _silence(self, label: str, topic: str, last: float | None, now: float) -> str:
        name = self.resolve_topic_name(topic)
        what = f"no valid {label} on {name}" if last is None else \
            f"last valid {label} on {name} {now - last:.1f} s ago (state_timeout_s)"
        received = self.input_counts.get(label, 0)
        if received and self.input_rejections.get(label, 0):
            return f"{what}: {received} received, {self.input_rejections[label]} rejected, last because " \
                   f"{self.input_last_reject.get(label, '?')}"
        return what + (" yet (is the driver running?)" if last is None else "")

    def on_hardware_activate(self) -> None:
        pos, quat = self.ee
        try:
            target = self.shaper.start(pos)
            self.adapter.start(Measured(pos, quat, None if self.joints is None else self.joints.positions), target)
        except ValueError as exc:
            raise HardwareError(str(exc)) from None
        self.velocity = np.zeros(3)
        self.homing = False
        self.gripper_sent = None

    # ---- inputs ----------------------------------------------------------------------------------

    def _state_age_limit(self) -> float:
        return self.params["state_timeout_s"]

    def _on_joint_states(self, msg: JointState) -> None:
        self.check_stamp(msg.header.stamp, self._state_age_limit())
        reading = parse_joint_states(msg, self.hw)
        self.joints, self.joints_time = reading, self.now()
        self.newest_state_stamp_ns = max(self.newest_state_stamp_ns, stamp_to_ns(msg.header.stamp))
        if not self.hw.ee_pose_topic:  # pose from the kinematic model
            pos, rot = self.chain.fk(reading.positions)
            self._set_ee(pos, mat_to_quat(rot), msg.header.stamp)
        self._maybe_state_fresh()

    def _on_ee_pose(self, msg: PoseStamped) -> None:
        self.check_stamp(msg.header.stamp, self._state_age_limit())
        pos, quat = parse_ee_pose(msg, self.hw)
        self._set_ee(pos, quat, msg.header.stamp)
        self._maybe_state_fresh()

    def _set_ee(self, pos: np.ndarray, quat: np.ndarray, stamp) -> None:
        self.ee, self.ee_time = (pos, quat), self.now()
        if self.observation_pub is not None:
            out = PoseStamped()
            out.header.stamp = stamp
            out.header.frame_id = self.hw.command_frame
            out.pose.position.x, out.pose.position.y, out.pose.position.z = (float(v) for v in pos)
            o = out.pose.orientation
            o.w, o.x, o.y, o.z = (float(v) for v in quat)
            self.observation_pub.publish(out)

    def _maybe_state_fresh(self) -> None:
        now, timeout = self.now(), self.params["state_timeout_s"] or math.inf
        if self.joints_time is not None and self.ee_time is not None \
                and now - self.joints_time <= timeout and now - self.ee_time <= timeout:
            self.state_received()

    def _on_cmd(self, msg: TwistStamped) -> None:
        age = self.check_stamp(msg.header.stamp)
        velocity, clamped = parse_command(msg, self.hw)
        if not self.accept_command(age):
            return
        if clamped:
            self.counts["clamped_velocity"] += 1
            self.gate.count_clamped()
        self.velocity = velocity

    def _on_gripper(self, msg: Float32) -> None:
        g, clamped = parse_gripper(msg.data)
        if clamped:
            self.counts["clamped_gripper"] += 1
            self.gate.count_clamped()
        self.gripper_cmd = g

    # ---- control ---------------------------------------------------------------------------------

    def control_step(self, verdict: StopReason) -> None:
        if self.adapter is None or self.shaper is None or self.shaper.target is None:
            return
        stamp = self.get_clock().now().to_msg()
        prev = self.shaper.target.copy()
        moving = verdict.allows_motion or (self.homing and verdict is StopReason.STALE_COMMAND)
        if moving and self.ee is not None:
            measured = self.ee[0]
            if self.homing:
                target, limited = self.shaper.toward(self.hw.home_position, self.hw.home_speed, measured)
                if self._at_home():
                    self._home_reached()
            else:
                target, limited = self.shaper.advance(self.velocity, measured)
            self.counts["limited_target"] += int(limited)
            output = self.adapter.command(prev, target)
        else:
            if verdict.is_estop and self.homing:
                self.homing = False
                self.get_logger().warning("homing aborted by the e-stop")
            output = self.adapter.hold(prev)
        self.output_pub.publish(output_msg(self.hw, output, stamp))
        self.counts["outputs"] += 1
        if moving and self.gripper_pub is not None and self.gripper_cmd is not None \
                and (self.gripper_sent is None or abs(self.gripper_cmd - self.gripper_sent) > 1e-4):
            self.gripper_pub.publish(gripper_msg(self.gripper_cmd, self.hw))
            self.gripper_sent = self.gripper_cmd
            self.counts["gripper_outputs"] += 1

    # ---- reset -----------------------------------------------------------------------------------

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success = False
        if not self.is_active or self.shaper is None or self.shaper.target is None:
            response.message = f"not active ({self.lifecycle_state}): {self.activation_refusal or 'not activated'}"
        elif self.gate.estop_latched:
            response.message = "e-stop latched: call ~/reset_estop first"
        else:
            home = self.hw.home_position
            target_gap = float(np.max(np.abs(self.shaper.target - home)))
            measured_gap = float(np.max(np.abs(self.ee[0] - home))) if self.ee is not None else math.inf
            if self._at_home():
                self._home_reached()
                reset_done(response, self.newest_state_stamp_ns)
            else:
                if not self.homing:
                    self.homing = True
                    self.counts["homings"] += 1
                    if self.gripper_pub is not None:
                        self.gripper_cmd = 0.0  # open
                    self.get_logger().info(f"moving home to {home.tolist()}")
                response.message = f"homing: {max(target_gap, measured_gap):.3f} m to go"
        return response

    def _at_home(self) -> bool:
        home = self.hw.home_position
        return self.ee is not None and bool(np.array_equal(self.shaper.target, home)) \
            and float(np.max(np.abs(self.ee[0] - home))) <= self.hw.home_tolerance

    def _home_reached(self) -> None:
        if self.homing:
            self.get_logger().info("home reached")
        self.homing = False
        self.velocity = np.zeros(3)
        self.gate.forget_command()  # commands from before the reset do not resume

    def diagnostic_values(self) -> dict:
        values = {"hardware": self.hw.name, "interface": self.hw.interface, "homing": self.homing, **self.counts}
        if self.shaper is not None and self.shaper.target is not None:
            values["target"] = json.dumps([round(float(x), 4) for x in self.shaper.target])
        if self.adapter is not None:
            values["joint_clamps"] = self.adapter.joint_clamps
        return values


def main(args=None) -> NoReturn:
    run_node(ArmNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
