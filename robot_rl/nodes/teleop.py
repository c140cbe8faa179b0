"""Teleop node: a person takes over from the policy with a SpaceMouse, a gamepad or a keyboard.

- `device` picks the backend (`robot_rl.teleop.devices`): spacemouse (HID), evdev (a gamepad
  read from /dev/input), joy (`sensor_msgs/Joy` on `joy`, e.g. from the `joy` package's
  joy_node) or keyboard (a terminal in raw mode: works over SSH). The device is read on a thread
  of its own, never on the executor; an absent or unplugged device is reported on /diagnostics
  and reopened every `reconnect_s`.
- `mapping` (hardware/teleop_*.yaml) maps raw axes and buttons to the task's action frame and
  says what takes over; the arbitration (`robot_rl.teleop.arbitration`) decides who drives.
- Publishes at `rate_hz` and at once on every device input (an input is on the topic within a
  millisecond or two, not up to a period later): `teleop/engaged` (Bool) always; while engaged `teleop/cmd`
  (TwistStamped: the person's twist, each axis in the task's action scale [-1, 1]) and
  `teleop/gripper` (Float32: -1 open, +1 close, held between presses: the 4th entry of the arm
  action); exactly one zero `teleop/cmd` on release. `teleop/event` (String): success, failure,
  rerecord, reset, pause, help, takeover, handback.
- `/estop` (latched Bool): while True nobody has control; only the release's zero command and
  `teleop/engaged` False are published, and after it the person must let go before taking over.
- `/diagnostics`: device status and errors, engagement, events, rejected inputs by reason.
"""

from __future__ import annotations

import time
from collections import deque
from typing import NoReturn

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import TwistStamped
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Joy
from std_msgs.msg import Bool, Float32, String

from robot_rl.config_fields import config_from_params
from robot_rl.hardware.safety import Rejected
from robot_rl.ros import qos
from robot_rl.ros.hardware_node import ESTOP_QOS
from robot_rl.ros.node_utils import Param, ParameterError, declare_params, diagnostics, params_from_dataclass, \
    run_node
from robot_rl.teleop.arbitration import ArbitrationConfig, Arbitrator
from robot_rl.teleop.devices import backend_opener
from robot_rl.teleop.inputs import InputRejections, TeleopInput
from robot_rl.teleop.joy import JoyDecoder
from robot_rl.teleop.mapping import DEFAULT_MAPPINGS, DEVICE_KINDS, load_mapping
from robot_rl.teleop.reader import DeviceReader

PARAMS = [
    Param("device", "spacemouse", "Input device backend.", choices=DEVICE_KINDS),
    Param("mapping", "", "Mapping file: a name in the package's hardware/ folder or a path. Empty: the device's "
          "default (teleop_spacemouse, teleop_gamepad or teleop_keyboard)."),
    Param("device_path", "", "Which device: spacemouse a /dev/hidraw* path (empty: the first known USB id); evdev "
          "/dev/input/eventN or a device name substring (empty: the mapping's evdev.name); keyboard a terminal "
          "such as /dev/pts/3 (empty: stdin). Unused for joy."),
    Param("rate_hz", 50.0, "Rate of teleop/engaged, and of teleop/cmd while engaged.", 1.0, 1000.0),
    *params_from_dataclass(ArbitrationConfig),
    Param("speed", 1.0, "Scale of the person's motion commands (lower for fine positioning with a keyboard; the "
          "engage threshold applies before it).", 0.01, 1.0),
    Param("frame_id", "world", "header.frame_id of teleop/cmd: the task's action frame."),
    Param("reconnect_s", 1.0, "Time between attempts to open an absent device.", 0.05, 60.0),
    Param("diagnostics_period_s", 1.0, "Period of /diagnostics.", 0.05, 60.0),
]

# sensor_msgs/Joy input: best effort matches any publisher (joy_node publishes reliable), and a
# queue of 20 keeps a burst for validation rather than overwriting it unread.
JOY_INPUT = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=20, reliability=ReliabilityPolicy.BEST_EFFORT)

_OK, _WARN, _ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR


class TeleopNode(Node):
    def __init__(self):
        super().__init__("teleop")
        p = self.params = declare_params(self, PARAMS)
        self.device = p["device"]
        self.rejections = InputRejections()
        try:
            self.mapping = load_mapping(p["mapping"] or DEFAULT_MAPPINGS[self.device], self.device)
            self.arbitrator = Arbitrator(config_from_params(ArbitrationConfig, p, engage=self.mapping.engage))
            opener = None if self.device == "joy" else \
                backend_opener(self.device, self.mapping, p["device_path"], self.rejections)
        except ValueError as exc:
            raise ParameterError(f"teleop: {exc}") from None
        self._cmd_pub = self.create_publisher(TwistStamped, "teleop/cmd", qos.COMMAND)
        self._gripper_pub = self.create_publisher(Float32, "teleop/gripper", qos.COMMAND)
        self._engaged_pub = self.create_publisher(Bool, "teleop/engaged", qos.COMMAND)
        self._event_pub = self.create_publisher(String, "teleop/event", qos.EVENTS)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(Bool, "/estop", self._on_estop, ESTOP_QOS)

        self._samples: deque[TeleopInput] = deque()  # reader thread / joy callback -> executor
        self._joy_connected = False
        self._reported_rejections = 0
        self._reader: DeviceReader | None = None
        # The reader thread wakes the executor through this when input arrives.
        self._input_ready = self.create_guard_condition(self._tick)
        self.get_logger().info(f"device {self.device}, mapping {self.mapping.source}")
        if opener is None:
            self._joy = JoyDecoder(self.mapping)
            self.create_subscription(Joy, "joy", self._on_joy, JOY_INPUT)
        else:
            # Poll fast enough that a connected, quiet device refreshes its state well within the
            # silence timeout.
            self._reader = DeviceReader(opener, self.device, min(0.05, p["silence_timeout_s"] / 4), p["reconnect_s"],
                                        self._on_samples, self._log).start()
        # Timers run on the steady clock: teleop never follows a simulated /clock.
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(1.0 / p["rate_hz"], self._tick, clock=steady)
        self.create_timer(p["diagnostics_period_s"], self._publish_diagnostics, clock=steady)

    # ---- device side (own thread / joy callback) -----------------------------------------------------

    def _on_samples(self, samples: list[TeleopInput]) -> None:
        self._samples.extend(samples)
        self._input_ready.trigger()

    def _log(self, level: str, message: str) -> None:
        (self.get_logger().error if level == "error" else self.get_logger().info)(message)

    def _on_joy(self, msg: Joy) -> None:
        try:
            self._samples.append(self._joy(msg.axes, msg.buttons, time.monotonic()))
        except Rejected as exc:
            self.rejections.record(exc.reason, exc.detail)
        except Exception as exc:  # noqa: BLE001 - a malformed message must never kill the node
            self.rejections.record("error", f"{type(exc).__name__}: {exc}")
        else:
            self._joy_connected = True
            self._tick()

    # ---- executor side ---------------------------------------------------------------------------------

    def _on_estop(self, msg: Bool) -> None:
        if bool(msg.data) != self.arbitrator.estop:  # log changes, not every (re)published value
            self.get_logger().warning("e-stop: teleop disengaged" if msg.data else "e-stop released")
        self.arbitrator.set_estop(msg.data)
        self._tick()  # the release's zero goes out now, not at the next period

    def _tick(self) -> None:
        while self._samples:
            self.arbitrator.on_input(self._samples.popleft())
        out = self.arbitrator.step(time.monotonic())
        if out.command is not None:
            self._publish_command(out.command)
        if out.engaged:
            self._gripper_pub.publish(Float32(data=float(out.gripper)))
        self._engaged_pub.publish(Bool(data=out.engaged))
        for event in out.events:
            self._event_pub.publish(String(data=event))
            reason = self.arbitrator.last_handback_reason
            if event == "handback" and reason == "silence":
                self.get_logger().warning(f"handback: no input for {self.params['silence_timeout_s']} s")
            else:
                self.get_logger().info(f"{event} ({reason})" if event == "handback" else event)

    def _publish_command(self, twist) -> None:
        msg = TwistStamped()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self.params["frame_id"]
        t = msg.twist
        scaled = np.asarray(twist, dtype=float) * self.params["speed"]
        t.linear.x, t.linear.y, t.linear.z, t.angular.x, t.angular.y, t.angular.z = (float(v) for v in scaled)
        self._cmd_pub.publish(msg)

    def _publish_diagnostics(self) -> None:
        now = time.monotonic()
        counts, last_rejection = self.rejections.snapshot()
        total = sum(counts.values())
        new = total - self._reported_rejections
        self._reported_rejections = total
        if new:
            self.get_logger().warning(f"{new} input(s) rejected; last: {last_rejection}")
        reader = self._reader
        if (reader.connected if reader is not None else self._joy_connected):
            status = "silent" if self.arbitrator.silent(now) else "connected"
        else:
            status = "waiting for joy" if self.device == "joy" else "disconnected"
        if status == "disconnected":
            level, message = _ERROR, f"disconnected: {reader.error or 'not opened yet'}"
        elif status != "connected":
            level, message = _WARN, status
        elif new:
            level, message = _WARN, f"{new} input(s) rejected"
        else:
            level, message = _OK, "engaged" if self.arbitrator.engaged else "idle"
        values = {"device": self.device, "device_status": status,
                  "device_description": reader.description if reader is not None else "",
                  "last_device_error": reader.error if reader is not None else "",
                  "disconnects": reader.disconnects if reader is not None else 0,
                  "mapping": self.mapping.source, **self.arbitrator.status(now), "rejected": total,
                  **{f"rejected_{reason}": n for reason, n in sorted(counts.items())},
                  "last_rejection": last_rejection}
        self._diag_pub.publish(diagnostics(self, values, level, message))

    def close(self) -> None:
        """Stops the reader (which releases the device and restores a terminal); a person in
        control gets the release's zero command on the way out."""
        if self._reader is not None:
            self._reader.close()
        if self.arbitrator.engaged and self.context.ok():  # after a Ctrl-C the context is gone: nothing to send on
            try:
                self._publish_command([0.0] * 6)
                self._engaged_pub.publish(Bool(data=False))
            except RuntimeError:  # rclpy's RCLError: the Ctrl-C took the context down between the check and now
                pass


def main(args=None) -> NoReturn:
    run_node(TeleopNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
