"""The teleop node as a separate process over loopback DDS: the keyboard backend typed into through a
pseudo-terminal, the joy backend fed by a test publisher on `joy`; teleop/cmd, teleop/gripper,
teleop/engaged, teleop/event, e-stop, silence and rejected inputs on /diagnostics."""

from __future__ import annotations

import copy
import os
import pty
import subprocess
import sys

import pytest

pytest.importorskip("rclpy")

from geometry_msgs.msg import TwistStamped  # noqa: E402
from sensor_msgs.msg import Joy  # noqa: E402
from std_msgs.msg import Bool, Float32, String  # noqa: E402

from robot_rl.ros.probe import RosProbe, start_node, stop_node  # noqa: E402
from robot_rl.ros import qos  # noqa: E402
from robot_rl.ros.graph import loopback_environment  # noqa: E402

UP, SPACE = b"\x1b[A", b" "


class Harness(RosProbe):
    """Observes everything the teleop node publishes; publishes /estop and joy."""

    watched = "teleop"

    def __init__(self, domain_id: int):
        super().__init__(domain_id, "teleop_test_harness")
        n = self.node
        deep = copy.copy(qos.COMMAND)
        deep.depth = 100  # keep every message, even several in one spin
        self.log: list[tuple[str, object]] = []  # (topic, value) in arrival order
        n.create_subscription(TwistStamped, "teleop/cmd", lambda m: self.log.append(("cmd", m)), deep)
        n.create_subscription(Float32, "teleop/gripper", lambda m: self.log.append(("gripper", m.data)), deep)
        n.create_subscription(Bool, "teleop/engaged", lambda m: self.log.append(("engaged", m.data)), deep)
        n.create_subscription(String, "teleop/event", lambda m: self.log.append(("event", m.data)), qos.EVENTS)
        self.estop_pub = n.create_publisher(Bool, "/estop", qos.LATCHED)
        self.joy_pub = n.create_publisher(Joy, "joy", 10)
        self.joy_axes, self.joy_buttons = [0.0] * 6, [0] * 11
        self.joy_streaming = False
        n.create_timer(0.02, self._stream_joy)

    def _stream_joy(self):
        if self.joy_streaming:
            self.publish_joy(self.joy_axes, self.joy_buttons)

    def publish_joy(self, axes, buttons):
        msg = Joy()
        msg.header.stamp = self.node.get_clock().now().to_msg()
        msg.axes = [float(a) for a in axes]
        msg.buttons = [int(b) for b in buttons]
        self.joy_pub.publish(msg)

    def mark(self) -> int:
        return len(self.log)

    def since(self, mark: int, topic: str) -> list:
        return [v for t, v in self.log[mark:] if t == topic]

    def engaged(self) -> bool | None:
        values = self.since(0, "engaged")
        return values[-1] if values else None

    def events(self, mark: int) -> list[str]:
        return self.since(mark, "event")

    def wait_event(self, mark: int, event: str, timeout: float = 5.0) -> None:
        self.wait_for(lambda: event in self.events(mark), timeout, f"event {event!r}")


def _linear(msg: TwistStamped) -> tuple[float, float, float]:
    return msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z


def _is_zero(msg: TwistStamped) -> bool:
    t = msg.twist
    return not any((t.linear.x, t.linear.y, t.linear.z, t.angular.x, t.angular.y, t.angular.z))


def _assert_released(h: Harness, releases: int) -> None:
    """Control went back: one zero command per release so far (the node's count), the last command
    received is that zero, and nothing follows it."""
    h.wait_for(lambda: h.value("zero_commands") == releases and h.value("engaged") == 0.0, 5, "the release")
    h.wait_for(lambda: h.since(0, "cmd") and _is_zero(h.since(0, "cmd")[-1]), 2, "the zero command")
    received = len(h.since(0, "cmd"))
    h.spin(0.4)
    assert len(h.since(0, "cmd")) == received  # nothing after the zero
    assert h.value("commands") + h.value("zero_commands") >= received  # nothing published besides
    assert h.engaged() is False


def _type(master: int, keys: bytes, times: int = 1, period: float = 0.0, h: Harness | None = None) -> None:
    for _ in range(times):
        os.write(master, keys)
        if h is not None:
            h.spin(period)


def test_keyboard_node_on_a_pty(tmp_path):
    master, slave = pty.openpty()
    log = tmp_path / "teleop.log"
    proc, domain_id = start_node("robot_rl.nodes.teleop", log, "device:=keyboard",
                                 f"device_path:={os.ttyname(slave)}", "rate_hz:=50.0", "hold_s:=0.3",
                                 "silence_timeout_s:=0.5", "diagnostics_period_s:=0.2")
    h = Harness(domain_id)
    try:
        h.wait_for(lambda: h.diag.get("device_status") == "connected", 20, "the terminal opened in raw mode")
        h.wait_for(lambda: h.engaged() is False, 5, "teleop/engaged False")
        assert h.since(0, "cmd") == []  # nobody in control: nothing on teleop/cmd

        # labels and an unknown key
        mark = h.mark()
        _type(master, b"sq")
        h.wait_event(mark, "success")
        h.wait_for(lambda: h.value("rejected_unknown_key") >= 1, 5, "the unknown key counted")
        assert "'q'" in h.diag["last_rejection"]

        # a motion key takes over; c closes the gripper; letting go hands back after hold_s
        mark = h.mark()
        _type(master, UP, times=10, period=0.03, h=h)  # auto-repeat
        _type(master, b"c")
        _type(master, UP, times=5, period=0.03, h=h)
        h.wait_event(mark, "handback")
        assert h.events(mark) == ["takeover", "handback"]
        moving = [m for m in h.since(mark, "cmd") if not _is_zero(m)]
        assert moving and all(_linear(m)[0] == _linear(m)[2] == 0.0 < _linear(m)[1] for m in moving)  # up: +y
        ys = [_linear(m)[1] for m in moving]
        assert ys[0] < 0.5 and max(ys) > ys[0]  # a fine step first, faster while held
        assert all(m.header.frame_id == "world" for m in moving)
        assert 1.0 in h.since(mark, "gripper") and h.since(mark, "gripper")[0] == -1.0  # open until c
        assert True in h.since(mark, "engaged")
        _assert_released(h, 1)

        # e-stop while toggled on: released at once (one zero), keys ignored while it is set
        mark = h.mark()
        _type(master, SPACE)
        h.wait_event(mark, "takeover")
        h.estop_pub.publish(Bool(data=True))
        h.wait_event(mark, "handback", 2.0)
        _assert_released(h, 2)
        mark = h.mark()
        _type(master, UP + SPACE, times=5, period=0.05, h=h)
        h.spin(0.3)
        assert h.since(mark, "cmd") == [] and not any(h.since(mark, "engaged"))
        assert h.value("estop_handbacks") == 1
        h.estop_pub.publish(Bool(data=False))
        h.spin(0.3)
        mark = h.mark()
        _type(master, SPACE)
        h.wait_event(mark, "takeover")
        _type(master, SPACE)
        h.wait_event(mark, "handback")
        _assert_released(h, 3)
    finally:
        h.close()
        stop_node(proc, log)
        os.close(master)
        os.close(slave)


def test_joy_node_button_takeover_silence_and_bad_messages(tmp_path):
    log = tmp_path / "teleop.log"
    proc, domain_id = start_node("robot_rl.nodes.teleop", log, "device:=joy", "rate_hz:=50.0", "hold_s:=0.2",
                                 "silence_timeout_s:=0.3", "diagnostics_period_s:=0.2")
    h = Harness(domain_id)
    try:
        h.wait_for(lambda: h.diag.get("device_status") == "waiting for joy", 20, "the node up, waiting for joy")
        h.joy_streaming = True
        h.wait_for(lambda: h.diag.get("device_status") == "connected", 5, "joy received")

        # teleop_gamepad.yaml: a deflected stick alone never takes over; holding RB (10) does
        mark = h.mark()
        h.joy_axes[1] = 0.55  # left stick forward: x = (0.55 - 0.1) / 0.9 = 0.5
        h.spin(0.5)
        assert h.since(mark, "cmd") == [] and h.events(mark) == []
        h.joy_buttons[10] = 1
        h.wait_event(mark, "takeover")
        h.joy_buttons[9] = 1  # LB: close
        h.spin(0.3)
        h.joy_buttons[9] = 0
        h.joy_buttons[10] = 0
        h.wait_event(mark, "handback")
        moving = [m for m in h.since(mark, "cmd") if not _is_zero(m)]
        assert moving and all(_linear(m) == pytest.approx((0.5, 0.0, 0.0)) for m in moving)
        assert h.since(mark, "gripper")[-1] == 1.0
        _assert_released(h, 1)

        # Y: success, once per press
        mark = h.mark()
        h.joy_buttons[3] = 1
        h.spin(0.3)
        h.joy_buttons[3] = 0
        h.spin(0.2)
        assert h.events(mark) == ["success"]

        # malformed messages are counted, never applied, never fatal
        h.joy_streaming = False
        h.publish_joy([float("nan")] * 6, [0] * 11)
        h.publish_joy([0.0] * 2, [0] * 11)
        h.publish_joy([0.0] * 6, [1] + [7] * 10)
        h.wait_for(lambda: h.value("rejected_nan") == 1 and h.value("rejected_joy_layout") == 1
                   and h.value("rejected_bad_button") == 1, 5, "three rejections")

        # the joy stream stops while engaged: control is handed back after silence_timeout_s
        h.joy_streaming = True
        h.joy_buttons[10] = 1
        mark = h.mark()
        h.wait_event(mark, "takeover")
        h.joy_streaming = False
        h.wait_event(mark, "handback", 3.0)
        _assert_released(h, 2)
        h.wait_for(lambda: h.value("silence_handbacks") == 1 and h.diag.get("device_status") == "silent", 5,
                   "silence reported")
        assert h.diag["last_handback_reason"] == "silence" and h.diag["_message"] == "silent"
        # back with RB still held: no takeover until it was released once
        mark = h.mark()
        h.joy_streaming = True
        h.spin(0.5)
        assert h.events(mark) == []
        h.joy_buttons[10] = 0
        h.spin(0.2)
        h.joy_buttons[10] = 1
        h.wait_event(mark, "takeover")
    finally:
        h.close()
        stop_node(proc, log)


def test_bad_parameters_exit_with_a_clear_message(tmp_path):
    for params, expected in ((["device:=joy", "mapping:=/no/such/teleop.yaml"], "does not exist"),
                             (["device:=keyboard", "mapping:=teleop_gamepad"], "no 'keyboard' section"),
                             (["device:=joy", "rate_hz:=0.0"], "rate_hz")):
        args = [sys.executable, "-m", "robot_rl.nodes.teleop", "--ros-args"]
        for p in params:
            args += ["-p", p]
        result = subprocess.run(args, env=loopback_environment(231), capture_output=True, text=True, timeout=60,
                                stdin=subprocess.DEVNULL)
        assert result.returncode == 2, result.stderr[-2000:]
        assert expected in result.stderr
