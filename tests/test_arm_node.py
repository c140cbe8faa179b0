"""The real-arm node: adapters against their limits (pure), then the node as a separate process
with a fake driver (a test-side node publishing joint_states and the end-effector pose and
following the node's output), over loopback DDS with a domain id of its own."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("rclpy")

from geometry_msgs.msg import PoseStamped, TwistStamped  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float32, Float64MultiArray  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from robot_rl.ros.probe import RosProbe, start_node, stop_node  # noqa: E402
from robot_rl.robots.arm.kinematics import DHChain, dls_step  # noqa: E402
from robot_rl.robots.arm.hardware import CartesianTargetShaper, Measured, make_adapter  # noqa: E402
from robot_rl.robots.arm.hardware_config import load_hardware, parse_hardware  # noqa: E402
from robot_rl.ros.arm_driver_io import (  # noqa: E402
    output_msg, output_violations, parse_command, parse_ee_pose, parse_gripper, parse_joint_states,
)
from robot_rl.hardware.safety import Rejected  # noqa: E402
from robot_rl.ros.messages import ns_to_stamp  # noqa: E402
from robot_rl.ros.probe import fresh_domain_id  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FRANKA_READY = [0.0, -math.pi / 4, 0.0, -3 * math.pi / 4, 0.0, math.pi / 2, math.pi / 4]


# ---- pure: hardware files, validation, adapters ----------------------------------------------------


def test_example_hardware_files_load_and_bad_fields_are_named():
    for name in ("franka_cartesian", "ur_servo", "ros2_control_jtc"):
        hw = load_hardware(name)
        assert hw.interface in ("cartesian_pose", "servo_twist", "joint_trajectory")
    data = yaml.safe_load((ROOT / "hardware" / "franka_cartesian.yaml").read_text())
    for path, value, match in ((("workspace", "low"), [1, 0, 0], "workspace.low"),
                               (("command", "max_speed"), [0.1, float("nan"), 0.1], "command.max_speed"),
                               (("interface",), "torque", "interface"),
                               (("home", "position"), [5.0, 0.0, 0.0], "home.position")):
        bad = yaml.safe_load(yaml.safe_dump(data))
        section = bad
        for key in path[:-1]:
            section = section[key]
        section[path[-1]] = value
        with pytest.raises(ValueError, match=match):
            parse_hardware(bad)
    with pytest.raises(ValueError, match="does not exist"):
        load_hardware("no_such_arm")


def _joint_msg(names, q):
    msg = JointState()
    msg.name = list(names)
    msg.position = [float(x) for x in q]
    return msg


def test_input_validation_rejects_malformed_messages():
    hw = load_hardware("franka_cartesian")
    ok = _joint_msg(hw.joint_names, FRANKA_READY)
    assert parse_joint_states(ok, hw).positions.shape == (7,)
    cases = {
        "joint_names": _joint_msg([], []),
        "joint_lengths": _joint_msg(hw.joint_names, FRANKA_READY[:5]),
        "nan": _joint_msg(hw.joint_names, [*FRANKA_READY[:6], float("nan")]),
        "implausible": _joint_msg(hw.joint_names, [*FRANKA_READY[:6], 1e6]),
    }
    missing = _joint_msg([*hw.joint_names[:6], "other"], FRANKA_READY)
    for reason, msg in [*cases.items(), ("joint_names", missing)]:
        with pytest.raises(Rejected) as exc:
            parse_joint_states(msg, hw)
        assert exc.value.reason == reason
    pose = PoseStamped()
    pose.header.frame_id = hw.state_frame
    pose.pose.position.x, pose.pose.orientation.w = 0.5, 1.0
    assert parse_ee_pose(pose, hw)[0][0] == 0.5
    for mutate, reason in ((lambda p: setattr(p.header, "frame_id", "elsewhere"), "frame"),
                           (lambda p: setattr(p.pose.position, "y", float("inf")), "nan"),
                           (lambda p: setattr(p.pose.orientation, "w", 0.5), "quaternion"),
                           (lambda p: setattr(p.pose.position, "z", 1e9), "implausible")):
        bad = PoseStamped()
        bad.header.frame_id = hw.state_frame
        bad.pose.orientation.w = 1.0
        mutate(bad)
        with pytest.raises(Rejected) as exc:
            parse_ee_pose(bad, hw)
        assert exc.value.reason == reason
    cmd = TwistStamped()
    cmd.header.frame_id = "world"
    cmd.twist.linear.x = 100.0
    v, clamped = parse_command(cmd, hw)
    assert clamped and v[0] == hw.max_speed[0]
    cmd.twist.angular.z = float("nan")
    with pytest.raises(Rejected, match="nan"):
        parse_command(cmd, hw)
    assert parse_gripper(1.5) == (1.0, True)
    with pytest.raises(Rejected):
        parse_gripper(float("nan"))


def _drive(name: str, steps: int = 400, seed: int = 0, follow: float = 1.0):
    """Runs an adapter through random (often huge) velocities with a measured pose lagging the
    target; returns the hardware, adapter and output messages."""
    hw = load_hardware(name)
    control_hz = 10.0
    rng = np.random.default_rng(seed)
    adapter = make_adapter(hw, control_hz)
    shaper = CartesianTargetShaper(hw, control_hz)
    measured = (hw.workspace_low + hw.workspace_high) / 2
    joints = np.array(FRANKA_READY if len(hw.joint_names) == 7 else [0.0, -1.57, 1.57, -1.57, -1.57, 0.0])
    target = shaper.start(measured)
    adapter.start(Measured(measured, np.array([0.0, 1.0, 0.0, 0.0]), joints), target)
    msgs = []
    for i in range(steps):
        v = rng.normal(size=3) * rng.choice([0.01, 0.3, 100.0])
        velocity, _ = parse_command(_twist(v), hw)
        prev = shaper.target.copy()
        if i % 7 == 3:
            msgs.append(output_msg(hw, adapter.hold(prev), ns_to_stamp(i)))
        else:
            new, _ = shaper.advance(velocity, measured)
            msgs.append(output_msg(hw, adapter.command(prev, new), ns_to_stamp(i)))
        measured = measured + follow * (shaper.target - measured)
    return hw, adapter, msgs


def _twist(v):
    msg = TwistStamped()
    msg.header.frame_id = "world"
    msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = (float(x) for x in v)
    return msg


def test_cartesian_pose_adapter_respects_workspace_and_step():
    hw, adapter, msgs = _drive("franka_cartesian", follow=0.5)
    step = hw.max_speed / 10.0
    prev = None
    for msg in msgs:
        assert isinstance(msg, PoseStamped) and msg.header.frame_id == hw.output_frame
        p = np.array([msg.pose.position.x, msg.pose.position.y, msg.pose.position.z])
        assert ((p >= hw.workspace_low) & (p <= hw.workspace_high)).all()
        if prev is not None:
            assert (np.abs(p - prev) <= step + 1e-12).all()
        assert output_violations(adapter, msg) == []
        prev = p
    # the check itself catches a violation
    bad = PoseStamped()
    bad.header.frame_id = hw.output_frame
    bad.pose.position.x, bad.pose.orientation.w = 5.0, 1.0
    assert output_violations(adapter, bad, msgs[-1])


def test_servo_twist_adapter_respects_speed():
    hw, adapter, msgs = _drive("ur_servo")
    for msg in msgs:
        v = np.array([msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z])
        assert (np.abs(v) <= hw.max_speed + 1e-9).all() and msg.header.frame_id == hw.output_frame
        assert output_violations(adapter, msg) == []
    assert any(np.abs(m.twist.linear.x) > 0.2 for m in msgs)  # it does move, up to the limit
    holds = msgs[3::7]
    assert all(m.twist.linear.x == m.twist.linear.y == m.twist.linear.z == 0.0 for m in holds)


@pytest.mark.parametrize("interface", ["joint_trajectory", "forward_position"])
def test_joint_adapters_respect_joint_limits_and_steps(interface, tmp_path):
    data = yaml.safe_load((ROOT / "hardware" / "ros2_control_jtc.yaml").read_text())
    data["interface"] = interface
    path = tmp_path / "arm.yaml"
    path.write_text(yaml.safe_dump(data))
    hw, adapter, msgs = _drive(str(path))
    step = hw.joint_max_speed / 10.0
    prev = None
    for msg in msgs:
        if interface == "joint_trajectory":
            assert isinstance(msg, JointTrajectory) and list(msg.joint_names) == list(hw.joint_names)
            q = np.array(msg.points[0].positions)
        else:
            assert isinstance(msg, Float64MultiArray)
            q = np.array(msg.data)
        assert ((q >= hw.joint_low) & (q <= hw.joint_high)).all()
        if prev is not None:
            assert (np.abs(q - prev) <= step + 1e-12).all()
        prev = q
    assert all(output_violations(adapter, m, p) == [] for p, m in zip(msgs, msgs[1:]))


def test_dls_ik_follows_a_cartesian_target():
    hw = load_hardware("ros2_control_jtc")
    chain = DHChain(hw.kinematics)
    q = np.array(FRANKA_READY)
    p0, r0 = chain.fk(q)
    assert np.allclose(p0, [0.307, 0.0, 0.487], atol=2e-3)  # the Panda's well-known ready pose
    eps = 1e-6
    numeric = np.stack([(chain.fk(q + eps * np.eye(7)[i])[0] - p0) / eps for i in range(7)], 1)
    assert np.abs(chain.jacobian(q)[:3] - numeric).max() < 1e-5
    goal = p0 + np.array([0.05, -0.03, 0.02])
    for _ in range(30):
        p, _ = chain.fk(q)
        q = q + dls_step(chain.jacobian(q), np.concatenate([goal - p, np.zeros(3)]), 0.05)
    assert np.linalg.norm(chain.fk(q)[0] - goal) < 1e-3
    # damped: bounded even at a singularity (stretched arm)
    dq = dls_step(chain.jacobian(np.zeros(7)), np.array([1.0, 0, 0, 0, 0, 0]), 0.05)
    assert np.isfinite(dq).all() and np.linalg.norm(dq) <= 1.0 / (2 * 0.05) + 1e-9


# ---- the node as a process ---------------------------------------------------------------------------


class Harness(RosProbe):
    """Test-side node: a fake driver that follows the arm node's output, plus an observer of
    /diagnostics and outputs, a command publisher and service clients."""

    watched = "arm"

    def __init__(self, domain_id: int, hardware: str, drive: bool = True):
        from std_msgs.msg import Bool

        from robot_rl.ros import qos

        super().__init__(domain_id, "arm_test_harness")
        self.hw = load_hardware(hardware)
        self.outputs: list[tuple[int, object]] = []  # (header stamp ns, msg)
        self.ee = (self.hw.workspace_low + self.hw.workspace_high) / 2
        self.joints = np.array(FRANKA_READY if len(self.hw.joint_names) == 7 else [0, -1.57, 1.57, -1.57, -1.57, 0.0])
        self.driving = drive
        n = self.node
        out_type = {"cartesian_pose": PoseStamped, "servo_twist": TwistStamped}[self.hw.interface]
        deep = copy.copy(qos.COMMAND)
        deep.depth = 50  # keep every output, even two in one spin
        n.create_subscription(out_type, self.hw.output_topic, self._on_output, deep)
        self.joint_pub = n.create_publisher(JointState, self.hw.joint_states_topic, qos.SENSOR)
        self.ee_pub = n.create_publisher(PoseStamped, self.hw.ee_pose_topic, qos.SENSOR)
        self.cmd_pub = n.create_publisher(TwistStamped, "arm/cmd", qos.COMMAND)
        self.grip_pub = n.create_publisher(Float32, "arm/gripper", qos.COMMAND)
        self.estop_pub = n.create_publisher(Bool, "/estop", qos.LATCHED)
        n.create_timer(0.02, self._publish_state)

    # fake driver
    def _publish_state(self):
        if not self.driving:
            return
        stamp = self.node.get_clock().now().to_msg()
        js = _joint_msg(self.hw.joint_names, self.joints)
        js.header.stamp = stamp
        self.joint_pub.publish(js)
        pose = PoseStamped()
        pose.header.stamp = stamp
        pose.header.frame_id = self.hw.state_frame
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = (float(v) for v in self.ee)
        pose.pose.orientation.x, pose.pose.orientation.w = 1.0, 0.0  # tool pointing down
        self.ee_pub.publish(pose)

    def _on_output(self, msg):
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        self.outputs.append((stamp, msg))
        if isinstance(msg, PoseStamped):  # the arm follows its impedance target
            self.ee = np.array([msg.pose.position.x, msg.pose.position.y, msg.pose.position.z])
        else:  # Servo moves one period at the commanded velocity
            self.ee = self.ee + np.array([msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z]) / 50.0

    # actor side
    def command(self, v, frame="world"):
        msg = _twist(v)
        msg.header.frame_id = frame
        msg.header.stamp = self.node.get_clock().now().to_msg()
        sent = time.time_ns()
        self.cmd_pub.publish(msg)
        return sent

    def estop(self, value: bool) -> int:
        from std_msgs.msg import Bool

        sent = time.time_ns()
        self.estop_pub.publish(Bool(data=value))
        return sent


def _start_arm(tmp_path: Path, hardware: str, *params: str):
    return start_node("robot_rl.nodes.arm", tmp_path / "arm.log", f"hardware:={hardware}",
                      "diagnostics_period_s:=0.2", "activation_retry_s:=0.2", *params)


def _stop(proc, tmp_path):
    stop_node(proc, tmp_path / "arm.log")


def _pose_of(msg):
    return np.array([msg.pose.position.x, msg.pose.position.y, msg.pose.position.z])


def test_refuses_to_activate_while_state_silent(tmp_path):
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState

    proc, domain_id = _start_arm(tmp_path, "franka_cartesian", "autostart:=false")
    h = Harness(domain_id, "franka_cartesian", drive=False)
    try:
        def change(transition_id):
            req = ChangeState.Request()
            req.transition.id = transition_id
            return h.call(ChangeState, "/arm/change_state", req, 15.0).success

        assert change(Transition.TRANSITION_CONFIGURE)
        assert not change(Transition.TRANSITION_ACTIVATE)  # the driver is silent
        h.wait_for(lambda: "silent" in h.diag.get("activation_refusal", ""), 5, "refusal on /diagnostics")
        assert "joint_states" in h.diag["activation_refusal"] and h.diag["lifecycle"] == "inactive"
        h.command([0.1, 0, 0])
        h.spin(0.5)
        assert h.outputs == []  # never commands before activation
        h.driving = True
        h.spin(0.3)
        assert change(Transition.TRANSITION_ACTIVATE)
        h.wait_for(lambda: len(h.outputs) >= 2, 5, "outputs once active")
        first = _pose_of(h.outputs[0][1])
        assert np.allclose(first, (h.hw.workspace_low + h.hw.workspace_high) / 2)  # target = measured pose
        n = len(h.outputs)
        assert change(Transition.TRANSITION_DEACTIVATE)
        h.spin(0.5)
        assert len(h.outputs) <= n + 2  # the last safe output, then silence
        m = len(h.outputs)
        h.spin(0.4)
        assert len(h.outputs) == m
    finally:
        h.close()
        _stop(proc, tmp_path)


@pytest.mark.wall_clock
def test_commands_clamped_hold_within_two_periods_and_reset_home(tmp_path):
    proc, domain_id = _start_arm(tmp_path, "franka_cartesian", "control_hz:=10.0", "command_timeout_s:=0.15")
    h = Harness(domain_id, "franka_cartesian")
    hw, period_ns = h.hw, 100_000_000
    try:
        h.wait_for(lambda: h.diag.get("lifecycle") == "active", 15, "autostart activation")
        # 1) far too fast, and towards the box wall: clamped to max_speed, then to the box
        for _ in range(10):
            h.command([5.0, 0.0, -5.0])
            h.spin(0.1)
        h.spin(0.3)
        step = hw.max_speed / 10.0
        poses = [_pose_of(m) for _, m in h.outputs]
        for a, b in zip(poses, poses[1:]):
            assert (np.abs(b - a) <= step + 1e-9).all()
        for p in poses:
            assert ((p >= hw.workspace_low - 1e-12) & (p <= hw.workspace_high + 1e-12)).all()
        assert poses[-1][2] == pytest.approx(hw.workspace_low[2])  # pinned at the floor of the box
        h.wait_for(lambda: h.value("clamped_velocity") >= 10, 3, "clamps counted")
        # 2) watchdog: move at 0.1 m/s, stop commanding, measure when the output holds
        h.outputs.clear()
        last_sent = 0
        for _ in range(8):
            last_sent = h.command([-0.1, 0.05, 0.1])
            h.spin(0.1)
        h.spin(0.6)
        after = [(s, _pose_of(m)) for s, m in h.outputs]
        first_hold = next(s for (s0, p0), (s, p) in zip(after, after[1:]) if s > last_sent and np.array_equal(p, p0))
        periods = (first_hold - last_sent) / period_ns
        assert 0 < periods <= 2.0, periods
        moving_after = [s for (s0, p0), (s, p) in zip(after, after[1:]) if s > first_hold and not np.array_equal(p, p0)]
        assert not moving_after  # holds from then on
        assert h.value("stale") >= 1
        # 3) ~/reset moves home; answered success once there
        from std_srvs.srv import Trigger

        end = time.monotonic() + 10
        while True:
            response = h.call(Trigger, "/arm/reset", Trigger.Request())
            if response.success or time.monotonic() > end:
                break
            h.spin(0.3)
        assert response.success, response.message
        assert json.loads(response.message)["stamp_ns"] > 0
        assert np.allclose(h.ee, hw.home_position, atol=hw.home_tolerance)
    finally:
        h.close()
        _stop(proc, tmp_path)


def test_estop_latency_latch_and_reset(tmp_path):
    from std_srvs.srv import Trigger

    proc, domain_id = _start_arm(tmp_path, "ur_servo", "control_hz:=50.0", "command_timeout_s:=0.1")
    h = Harness(domain_id, "ur_servo")
    try:
        h.wait_for(lambda: h.diag.get("lifecycle") == "active", 15, "autostart activation")

        def stream(seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                h.command([0.0, 0.0, 0.05])
                h.spin(0.02)

        def zero(msg):
            return msg.twist.linear.x == msg.twist.linear.y == msg.twist.linear.z == 0.0

        latencies = []
        for attempt in range(3):
            stream(0.4)
            assert not zero(h.outputs[-1][1])  # moving
            h.outputs.clear()
            sent = h.estop(True)
            stream(0.3)  # the actor keeps commanding: must not matter
            stops = [s for s, m in h.outputs if s > sent and zero(m)]
            assert stops and all(zero(m) for s, m in h.outputs if s >= stops[0])
            latencies.append((stops[0] - sent) / 1e6)
            response = h.call(Trigger, "/arm/reset_estop", Trigger.Request())
            assert not response.success and "asserted" in response.message  # /estop still True
            h.estop(False)
            h.spin(0.1)
            assert h.call(Trigger, "/arm/reset_estop", Trigger.Request()).success
        assert sorted(latencies)[1] <= 20.0, latencies  # median of three
        stream(0.4)
        assert not zero(h.outputs[-1][1])  # recovered: moving again
        h.wait_for(lambda: h.value("estop_trips") == 3 and h.value("estop_resets") == 3, 3, "counters")
    finally:
        h.close()
        _stop(proc, tmp_path)


def test_joint_trajectory_node_from_joint_states_only(tmp_path):
    """ros2_control JTC: no pose topic (pose from the DH model, republished on arm/ee_pose), joint
    targets from the IK step, within joint limits and per-step limits, moving the right way."""
    import rclpy

    from robot_rl.ros import qos
    from robot_rl.ros.graph import loopback_environment

    hw = load_hardware("ros2_control_jtc")
    domain_id = fresh_domain_id()
    proc = subprocess.Popen([sys.executable, "-m", "robot_rl.nodes.arm", "--ros-args", "-p",
                             "hardware:=ros2_control_jtc", "-p", "activation_retry_s:=0.2"],
                            env=loopback_environment(domain_id), stdout=open(tmp_path / "arm.log", "wb"),
                            stderr=subprocess.STDOUT)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain_id)
    node = rclpy.create_node("jtc_fake_driver", context=context)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    q = np.array(FRANKA_READY)
    got = {"traj": [], "ee": []}

    def on_traj(msg):
        got["traj"].append(msg)
        q[:] = msg.points[0].positions  # the controller reaches each target

    deep = copy.copy(qos.COMMAND)
    deep.depth = 50
    node.create_subscription(JointTrajectory, hw.output_topic, on_traj, deep)
    node.create_subscription(PoseStamped, "arm/ee_pose", lambda m: got["ee"].append(m), qos.SENSOR)
    joint_pub = node.create_publisher(JointState, hw.joint_states_topic, qos.SENSOR)
    cmd_pub = node.create_publisher(TwistStamped, "arm/cmd", qos.COMMAND)

    def publish_joints():
        msg = _joint_msg([*hw.joint_names, "panda_finger_joint1"], [*q, 0.04])
        msg.header.stamp = node.get_clock().now().to_msg()
        joint_pub.publish(msg)

    node.create_timer(0.02, publish_joints)

    def spin(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.01)

    try:
        end = time.monotonic() + 15
        while not got["traj"] and time.monotonic() < end:
            spin(0.1)
        assert got["traj"], (tmp_path / "arm.log").read_text()[-2000:]
        start = np.array([got["ee"][-1].pose.position.x, got["ee"][-1].pose.position.y, got["ee"][-1].pose.position.z])
        assert np.allclose(start, [0.307, 0.0, 0.487], atol=2e-3)  # FK of the ready pose, republished
        for _ in range(15):  # +x at 0.1 m/s for 1.5 s
            cmd = _twist([0.1, 0.0, 0.0])
            cmd.header.stamp = node.get_clock().now().to_msg()
            cmd_pub.publish(cmd)
            spin(0.1)
        spin(0.3)
        adapter = make_adapter(hw, 10.0)
        assert all(output_violations(adapter, m, p) == [] for p, m in zip(got["traj"], got["traj"][1:]))
        end_pos = np.array([got["ee"][-1].pose.position.x, got["ee"][-1].pose.position.y,
                            got["ee"][-1].pose.position.z])
        assert 0.08 < end_pos[0] - start[0] < 0.17 and np.abs(end_pos[1:] - start[1:]).max() < 0.01
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
        _stop(proc, tmp_path)
