"""The safety benchmark's real-arm part: `robot_rl.nodes.arm` (hardware `franka_cartesian`) as its own
process; this side plays the driver (joint_states, the end-effector pose, following the node's target
like an impedance controller), the actor and the operator. It measures the watchdog and e-stop
latencies, then fuzzes every input while checking every output against the limits."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
from safety_fuzz import Fuzz
from safety_harness import (
    FUTURE_TOLERANCE_S, MAX_COMMAND_AGE_S, Bench, deep, fuzz_inputs, log, start_node_under_test, stop_node_under_test,
)

from robot_rl.ros.messages import ns_to_stamp, stamp_to_ns

HARDWARE = "franka_cartesian"
CONTROL_HZ = 10.0
COMMAND_TIMEOUT_S = 0.15
STATE_TIMEOUT_S = 0.5


class ArmBench(Bench):
    """The driver (joint_states and the end-effector pose at 50 Hz), the actor, the operator (/estop) and
    the observer of every output (target pose, gripper) the node sends to the robot."""

    watched = "arm"

    def __init__(self, domain_id: int, hw):
        super().__init__(domain_id)
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Bool, Float32, Float64

        from robot_rl.ros import qos

        self.hw = hw
        self.ee = (hw.workspace_low + hw.workspace_high) / 2
        self.joints = np.clip([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785], hw.joint_low, hw.joint_high)
        self.publish_joints = self.publish_ee = True
        self.outputs: list[tuple[int, object]] = []
        self.keep_outputs = True
        self.out_checked = 0
        self.out_of_limit: list[str] = []
        self.prev_output = None
        self.gripper_outputs = 0
        n = self.node
        n.create_subscription(PoseStamped, hw.output_topic, self._on_output, deep(qos.COMMAND, 50))
        if hw.gripper_topic:
            n.create_subscription(Float64, hw.gripper_topic, self._on_gripper_output, deep(qos.COMMAND, 50))
        self.joint_pub = n.create_publisher(JointState, hw.joint_states_topic, deep(qos.SENSOR))
        self.ee_pub = n.create_publisher(PoseStamped, hw.ee_pose_topic, deep(qos.SENSOR))
        self.cmd_pub = n.create_publisher(TwistStamped, "arm/cmd", deep(qos.COMMAND))
        self.grip_pub = n.create_publisher(Float32, "arm/gripper", deep(qos.COMMAND))
        self.estop_pub = n.create_publisher(Bool, "/estop", deep(qos.LATCHED))
        n.create_timer(0.02, self._publish_state)

    def _publish_state(self) -> None:
        from geometry_msgs.msg import PoseStamped
        from sensor_msgs.msg import JointState

        now = ns_to_stamp(time.time_ns())
        if self.publish_joints:
            js = JointState()
            js.header.stamp = now
            js.name = list(self.hw.joint_names)
            js.position = [float(x) for x in self.joints]
            self.joint_pub.publish(js)
        if self.publish_ee:
            pose = PoseStamped()
            pose.header.stamp = now
            pose.header.frame_id = self.hw.state_frame
            pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = (float(v) for v in self.ee)
            pose.pose.orientation.x, pose.pose.orientation.w = 1.0, 0.0
            self.ee_pub.publish(pose)

    def _on_output(self, msg) -> None:
        t = stamp_to_ns(msg.header.stamp)
        p = np.array([msg.pose.position.x, msg.pose.position.y, msg.pose.position.z])
        o = msg.pose.orientation
        hw, problems = self.hw, []
        if not (np.isfinite(p).all() and all(math.isfinite(v) for v in (o.w, o.x, o.y, o.z))):
            problems.append("non-finite")
        else:
            if ((p < hw.workspace_low) | (p > hw.workspace_high)).any():
                problems.append(f"outside the workspace: {p.tolist()}")
            if abs(math.sqrt(o.w ** 2 + o.x ** 2 + o.y ** 2 + o.z ** 2) - 1.0) > 1e-6:
                problems.append("non-unit quaternion")
            if self.prev_output is not None:
                step = np.abs(p - self.prev_output)
                if (step > hw.max_speed / CONTROL_HZ + 1e-12).any():
                    problems.append(f"step {step.tolist()} above the limit")
        if msg.header.frame_id != hw.output_frame:
            problems.append(f"frame {msg.header.frame_id!r}")
        self.out_checked += 1
        self.out_of_limit += problems
        if np.isfinite(p).all():
            self.prev_output = p
            self.ee = p  # the arm follows its impedance target
        if self.keep_outputs:
            self.outputs.append((t, p))

    def _on_gripper_output(self, msg) -> None:
        lo, hi = sorted((self.hw.gripper_open, self.hw.gripper_closed))
        self.out_checked += 1
        self.gripper_outputs += 1
        if not (math.isfinite(msg.data) and lo <= msg.data <= hi):
            self.out_of_limit.append(f"gripper {msg.data}")

    def command(self, v) -> int:
        from geometry_msgs.msg import TwistStamped

        msg = TwistStamped()
        msg.header.frame_id = self.hw.command_frame
        msg.header.stamp = ns_to_stamp(time.time_ns())
        msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = (float(x) for x in v)
        sent = time.time_ns()
        self.cmd_pub.publish(msg)
        return sent

    def estop(self, value: bool) -> int:
        from std_msgs.msg import Bool

        sent = time.time_ns()
        self.estop_pub.publish(Bool(data=value))
        return sent

    def reset_estop(self) -> bool:
        from std_srvs.srv import Trigger

        return self.call(Trigger, "/arm/reset_estop", Trigger.Request()).success

    def stream(self, seconds: float, v) -> int:
        end, sent = time.monotonic() + seconds, 0
        nxt = time.monotonic()
        while time.monotonic() < end:
            sent = self.command(v)
            nxt += 1.0 / CONTROL_HZ
            self.spin_until(nxt)
        return sent


def _direction(rng, ee, hw) -> np.ndarray:
    """A 0.1 m/s velocity pointing into the box from the current pose (so the target really moves)."""
    centre = (hw.workspace_low + hw.workspace_high) / 2
    d = centre - ee + rng.normal(size=3) * 0.02
    return 0.1 * d / max(np.linalg.norm(d), 1e-6)


def measure_watchdog(b: ArmBench, repeats: int, rng) -> list[float]:
    periods = []
    for _ in range(repeats):
        b.outputs.clear()
        last = b.stream(0.5, _direction(rng, b.ee, b.hw))
        b.spin(0.5)
        outs = [(t, p) for t, p in b.outputs]
        hold = next((t for (t0, p0), (t, p) in zip(outs, outs[1:]) if t > last and np.array_equal(p, p0)), None)
        if hold is None:
            raise RuntimeError("no hold output after the last command")
        periods.append((hold - last) * 1e-9 * CONTROL_HZ)
    return periods


def measure_estop(b: ArmBench, repeats: int, rng) -> list[float]:
    latencies = []
    for _ in range(repeats):
        v = _direction(rng, b.ee, b.hw)
        b.stream(0.3 + rng.uniform(0, 0.1), v)
        prev = b.outputs[-1][1]  # the last output before the e-stop (moving)
        b.outputs.clear()
        sent = b.estop(True)
        b.stream(0.2, v)  # the actor keeps commanding: must not matter
        outs = b.outputs
        hold = None
        for t, p in outs:
            if t > sent and np.array_equal(p, prev):
                hold = t
                break
            prev = p
        if hold is None:
            raise RuntimeError("no hold output after /estop")
        if any(not np.array_equal(p, outs[-1][1]) for t, p in outs if t >= hold):
            raise RuntimeError("the arm moved during the e-stop")
        latencies.append((hold - sent) / 1e6)
        b.estop(False)
        b.spin(0.05)
        if not b.reset_estop():
            raise RuntimeError("reset_estop refused")
    return latencies


def fuzz_arm(b: ArmBench, proc, n: int, seed: int) -> dict:
    from std_msgs.msg import Bool

    hw = b.hw
    fz = Fuzz(seed)
    rng = np.random.default_rng(seed + 1)

    def send(topic: str, now_ns: int) -> bool:
        if topic == "arm_cmd":
            msg, bad = fz.twist(now_ns, hw.command_frame, MAX_COMMAND_AGE_S)
            b.cmd_pub.publish(msg)
        elif topic == "arm_gripper":
            msg, bad = fz.gripper()
            b.grip_pub.publish(msg)
        elif topic == "joint_states":
            msg, bad = fz.joint_states(now_ns, hw.joint_names, hw.joint_low, hw.joint_high,
                                       hw.joint_state_margin, STATE_TIMEOUT_S)
            b.joint_pub.publish(msg)
        elif topic == "ee_pose":
            msg, bad = fz.pose(now_ns, hw.state_frame, hw.workspace_low, hw.workspace_high, hw.state_margin,
                               STATE_TIMEOUT_S)
            b.ee_pub.publish(msg)
        else:
            msg, bad = Bool(data=bool(fz.chance(0.1))), False
            b.estop_pub.publish(msg)
        return bad

    def keep_commanded(topic: str) -> None:
        if topic != "arm_cmd":
            b.command(rng.normal(size=3) * rng.choice([0.05, 5.0]))

    def prepare(topic: str) -> None:
        b.publish_joints = topic != "joint_states"
        b.publish_ee = topic != "ee_pose"

    def finish(topic: str) -> None:
        b.publish_joints = b.publish_ee = True
        if topic == "estop":
            b.estop_pub.publish(Bool(data=False))
            b.spin(0.1)
            b.reset_estop()

    b.keep_outputs = False
    try:
        return fuzz_inputs(b, proc, ["arm_cmd", "arm_gripper", "joint_states", "ee_pose", "estop"], send, n,
                           keep_commanded, CONTROL_HZ, prepare, finish)
    finally:
        b.keep_outputs = True


def run_arm(quick: bool, n_fuzz: int, tmp: Path) -> dict:
    from robot_rl.robots.arm.hardware_config import load_hardware

    hw = load_hardware(HARDWARE)
    params = {"hardware": HARDWARE, "control_hz": CONTROL_HZ, "command_timeout_s": COMMAND_TIMEOUT_S,
              "state_timeout_s": STATE_TIMEOUT_S, "max_command_age_s": MAX_COMMAND_AGE_S,
              "stamp_future_tolerance_s": FUTURE_TOLERANCE_S, "diagnostics_period_s": 0.2,
              "activation_retry_s": 0.2}
    proc, domain_id = start_node_under_test("robot_rl.nodes.arm", params, tmp / "arm.log")
    b = ArmBench(domain_id, hw)
    rng = np.random.default_rng(7)
    try:
        b.wait_for(lambda: b.diag.get("lifecycle") == "active", 60, "arm node activation")
        b.spin(0.3)
        watchdog = measure_watchdog(b, 5 if quick else 20, rng)
        log(f"watchdog periods: {[round(p, 3) for p in watchdog]}")
        estop = measure_estop(b, 10 if quick else 30, rng)
        log(f"e-stop ms: {[round(x, 2) for x in estop]}")
        fuzz = fuzz_arm(b, proc, n_fuzz, seed=11)
        crashed = proc.poll() is not None
        return {"watchdog": watchdog, "estop": estop, "fuzz": fuzz, "crashed": crashed,
                "out_of_limit": list(b.out_of_limit), "outputs_checked": b.out_checked,
                "gripper_outputs": b.gripper_outputs}
    finally:
        b.close()
        stop_node_under_test(proc, tmp / "arm.log")

