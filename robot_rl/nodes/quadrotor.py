"""Real-quadrotor node: takes the actor's collective-thrust / body-rate commands and flies a PX4 /
ArduPilot vehicle over MAVLink or a Crazyflie over cflib (hardware/<quad>.yaml `link:`), safely.

Command interface
-----------------
`quad/cmd_ctbr` (geometry_msgs/TwistStamped, reliable), one message per policy step:

- `twist.linear.z`: mass-normalised collective thrust in m/s^2 along the body z axis, 0..15 (what
  the JuggleRL policy outputs; hover = g = 9.81). Clamped to the YAML's `command.thrust`.
- `twist.angular.x/y/z`: body rates in rad/s in the FLU body frame (x forward, y left, z up:
  roll, pitch, yaw rate), each limited to +-pi and clamped to the YAML's `command.max_rate`.
- `twist.linear.x`, `twist.linear.y`: must be 0 (a CTBR command has no lateral thrust): refused.
- `header.frame_id`: the YAML's `command.frame` (the FLU body frame, e.g. `base_link`): refused
  otherwise. `header.stamp`: the stamp of the observation the command answers; commands whose
  stamp is older than `max_command_age_s` on arrival are refused (counted `late`).

State in: `quad/odom` (nav_msgs/Odometry, from motion capture or an estimator, in `state.frame`)
feeds the safety gate (`state_timeout_s`) and the geofence; `ball/pose` (PoseStamped, same frame)
is validated and passed through for the actor. Validated copies are republished on the YAML's
`observation.*` topics (sensor-data QoS).

Safety
------
- Lifecycle node (`HardwareNode`): nothing is sent before activation; activation is refused while
  `quad/odom` is silent or the vehicle link is down (no vehicle heartbeat / radio not connected).
  With `autostart` it retries every `activation_retry_s`.
- Every message is validated (NaN/Inf, frame, stamp, lateral thrust); refusals are counted on
  /diagnostics per input and per reason; clamps are counted (`clamped_thrust`, `clamped_rates`).
- Arming: the link's start sequence (MAVLink: >= 1 s of neutral setpoints, OFFBOARD/GUIDED via
  MAV_CMD_DO_SET_MODE, then MAV_CMD_COMPONENT_ARM_DISARM, each checked by COMMAND_ACK; Crazyflie:
  thrust unlock + arming request) runs on a worker thread, never blocking the executor. It starts
  on `~/arm` (std_srvs/Trigger: success once flying, failure with the reason while on the way)
  or, with `auto_arm`, on the first valid command while the vehicle is disarmed. A vehicle that a
  pilot flies (armed, not in offboard) is never taken over automatically: call `~/arm`.
- While flying, the latest command is sent every control period. Stale command (older than
  `command_timeout_s`), lost odometry, deactivation -> the safe action (MAVLink: MAV_CMD_NAV_LAND;
  Crazyflie: stop setpoint), sent at once (the command watchdog fires when the command expires,
  not at the next period). `/estop` -> land, or forced disarm / emergency stop with
  `safety.estop_action: kill`, sent from the /estop callback itself; latched until
  `~/reset_estop`. Leaving the geofence while flying -> the safe action. After a safe action the
  vehicle is re-armed only by a new start sequence (`~/arm` or `auto_arm`, once it has disarmed).
- The link has its own watchdogs (no setpoint for `safety.setpoint_timeout_s` -> safe action; no
  vehicle heartbeat for `safety.link_timeout_s` -> link down, land) and a heartbeat thread, so a
  stalled executor still ends in a safe state. `~/land` lands (or stops) on request.
"""

from __future__ import annotations

import copy
import math
import threading
from typing import NoReturn

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped
from nav_msgs.msg import Odometry
from std_srvs.srv import Trigger

from robot_rl.robots.quad.links.config import load_quad_hardware, make_link
from robot_rl.robots.quad.links.link import FLYING, IDLE, LinkError, QuadLink
from robot_rl.hardware.safety import StopReason
from robot_rl.ros import qos
from robot_rl.ros.hardware_node import HardwareError, HardwareNode
from robot_rl.ros.quad_io import parse_ball, parse_ctbr, parse_odom
from robot_rl.ros.node_utils import Param, ParameterError, run_node

__all__ = ["QuadrotorNode", "main"]

PARAMS = [
    Param("hardware", "px4_quad", "Hardware description: a name in the package's hardware/ folder "
          "(px4_quad, crazyflie) or a path to a YAML file."),
    Param("connection", "", "Overrides the YAML's connection string (pymavlink string such as "
          "udpin:127.0.0.1:14550, or a cflib URI such as radio://0/80/2M). Empty: the YAML's."),
    Param("auto_arm", False, "Run the start sequence (offboard + arm) on the first valid command while the "
          "vehicle is disarmed. False: only ~/arm starts it."),
    Param("arm_retry_s", 2.0, "auto_arm: time between two start sequences after a failed one.", 0.05, 60.0),
    Param("quaternion_tolerance", 0.05, "Odometry/ball orientations whose quaternion norm differs from 1 by "
          "more than this are refused.", 0.001, 0.5),
    Param("max_position_m", 1000.0, "Positions further than this from the origin are refused as implausible.",
          1.0, 1e6),
]

SAFETY_DEFAULTS = {"control_hz": 50.0, "command_timeout_s": 0.1, "max_command_age_s": 0.2, "state_timeout_s": 0.25}

# Actor -> quad: reliable like qos.COMMAND (matches the actor's publisher), a few deep so a burst is
# still validated and counted message by message; the newest one wins.
INPUT_COMMAND = copy.copy(qos.COMMAND)
INPUT_COMMAND.depth = 10
# Motion capture / ball tracker: best effort (matches any publisher) with room for a burst.
INPUT_STATE = copy.copy(qos.SENSOR)
INPUT_STATE.depth = 20


# ---- the node -------------------------------------------------------------------------------------


class QuadrotorNode(HardwareNode):
    def __init__(self):
        super().__init__("quadrotor", PARAMS, safety_defaults=SAFETY_DEFAULTS)
        try:
            self.hw = load_quad_hardware(self.params["hardware"])
        except ValueError as exc:
            raise ParameterError(f"parameter 'hardware': {exc}") from None
        hw = self.hw
        try:
            hw.link_config(self.params["connection"])
        except ValueError as exc:
            raise ParameterError(f"parameter 'connection': {exc}") from None
        self.link: QuadLink | None = None
        self.command: tuple[float, np.ndarray] | None = None
        self.position: np.ndarray | None = None
        self.odom_time: float | None = None
        self.ball_time: float | None = None
        self.counts = {"outputs": 0, "clamped_thrust": 0, "clamped_rates": 0, "safe_actions": 0, "estop_actions": 0,
                       "geofence_actions": 0, "arm_requests": 0, "arm_successes": 0, "arm_failures": 0}
        self.last_arm_error = ""
        self._arm_thread: threading.Thread | None = None
        self._last_arm_start = -math.inf
        self.create_checked_subscription(Odometry, hw.odom_topic, self._on_odom, INPUT_STATE, "odom")
        if hw.ball_topic:
            self.create_checked_subscription(PoseStamped, hw.ball_topic, self._on_ball, INPUT_STATE, "ball")
        self.create_checked_subscription(TwistStamped, "quad/cmd_ctbr", self._on_cmd, INPUT_COMMAND, "cmd_ctbr")
        self.create_service(Trigger, "~/arm", self._on_arm)
        self.create_service(Trigger, "~/land", self._on_land)
        self.odom_pub = self.create_publisher(Odometry, hw.observation_odom_topic, qos.SENSOR) \
            if hw.observation_odom_topic else None
        self.ball_pub = self.create_publisher(PoseStamped, hw.observation_ball_topic, qos.SENSOR) \
            if hw.observation_ball_topic and hw.ball_topic else None
        self.get_logger().info(f"hardware {hw.name} ({hw.source}): {hw.link} at "
                               f"{self.params['connection'] or hw.connection}")

    # ---- lifecycle hooks -------------------------------------------------------------------------

    def configure_hardware(self) -> None:
        link = make_link(self.hw, self.params["connection"])
        try:
            link.connect(0.0)
        except LinkError as exc:
            raise HardwareError(str(exc)) from None
        self.link = link

    def cleanup_hardware(self) -> None:
        if self.link is not None:
            self.link.close()
        self.link = None

    def activation_check(self) -> str | None:
        problems = []
        if self.link is None:
            problems.append("vehicle link not configured")
        elif not self.link.status().connected:
            target = self.params["connection"] or self.hw.connection
            problems.append(f"vehicle link down: nothing heard from the vehicle on {target}")
        now, timeout = self.now(), self.params["state_timeout_s"] or 1.0
        topic = self.resolve_topic_name(self.hw.odom_topic)
        if self.odom_time is None:
            problems.append(f"no valid odometry received on {topic} yet (is motion capture running?)")
        elif now - self.odom_time > timeout:
            problems.append(f"odometry silent: last valid message on {topic} was {now - self.odom_time:.1f} s ago")
        return "; ".join(problems) or None

    def on_hardware_activate(self) -> None:
        self.command = None

    def close(self) -> None:
        super().close()  # deactivates: the last safe output
        if self.link is not None:
            self.link.close()

    # ---- inputs ----------------------------------------------------------------------------------

    def _on_odom(self, msg: Odometry) -> None:
        self.check_stamp(msg.header.stamp, self.params["state_timeout_s"])
        pos, _, _, _ = parse_odom(msg, self.hw, self.params["quaternion_tolerance"], self.params["max_position_m"])
        self.position, self.odom_time = pos, self.now()
        self.state_received()
        if self.link is not None and self.link.observe_position(pos):
            self.counts["geofence_actions"] += 1
            self.get_logger().error(f"GEOFENCE: left the box at {np.round(pos, 3).tolist()}: "
                                    f"{self.link.safe_action} sent")
        if self.odom_pub is not None:
            self.odom_pub.publish(msg)

    def _on_ball(self, msg: PoseStamped) -> None:
        self.check_stamp(msg.header.stamp, self.params["state_timeout_s"])
        parse_ball(msg, self.hw, self.params["quaternion_tolerance"], self.params["max_position_m"])
        self.ball_time = self.now()
        if self.ball_pub is not None:
            self.ball_pub.publish(msg)

    def _on_cmd(self, msg: TwistStamped) -> None:
        age = self.check_stamp(msg.header.stamp)
        thrust, rates, thrust_clamped, rates_clamped = parse_ctbr(msg, self.hw)
        if not self.accept_command(age):
            return
        if thrust_clamped or rates_clamped:
            self.counts["clamped_thrust"] += int(thrust_clamped)
            self.counts["clamped_rates"] += int(rates_clamped)
            self.gate.count_clamped()
        self.command = (thrust, rates)

    # ---- arming ----------------------------------------------------------------------------------

    def _start_arming(self, why: str) -> bool:
        """Starts the link's start sequence on a worker thread (False: one is already running, or
        the last one failed less than `arm_retry_s` ago)."""
        if self._arm_thread is not None and self._arm_thread.is_alive():
            return False
        now = self.now()
        if why == "auto_arm" and now - self._last_arm_start < self.params["arm_retry_s"]:
            return False
        self._last_arm_start = now
        self.counts["arm_requests"] += 1
        link = self.link
        self.get_logger().info(f"start sequence ({why}): {link.kind}")

        def worker() -> None:
            try:
                link.arm()
            except LinkError as exc:
                self.last_arm_error = str(exc)
                self.counts["arm_failures"] += 1
                self.get_logger().warning(f"start sequence failed: {exc}")
            except Exception as exc:  # noqa: BLE001 - never let the worker die silently
                self.last_arm_error = f"{type(exc).__name__}: {exc}"
                self.counts["arm_failures"] += 1
                self.get_logger().error(f"start sequence crashed: {self.last_arm_error}")
            else:
                self.last_arm_error = ""
                self.counts["arm_successes"] += 1
                self.get_logger().info("flying: forwarding commands")

        self._arm_thread = threading.Thread(target=worker, name="quad-arm", daemon=True)
        self._arm_thread.start()
        return True

    def _on_arm(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success = False
        link = self.link
        if not self.is_active or link is None:
            response.message = f"not active ({self.lifecycle_state}): {self.activation_refusal or 'not activated'}"
        elif self.gate.estop_latched:
            response.message = "e-stop latched: call ~/reset_estop first"
        elif link.state == FLYING:
            response.success, response.message = True, "flying"
        elif self._arm_thread is not None and self._arm_thread.is_alive():
            response.message = "arming: start sequence in progress"
        else:
            try:
                self._start_arming("service")
                response.message = "arming: start sequence started; call again to confirm"
            except Exception as exc:  # noqa: BLE001
                response.message = f"cannot start: {exc}"
        return response

    def _on_land(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        if self.link is None:
            response.success, response.message = False, "no vehicle link"
            return response
        sent = self.link.land("service")
        self.gate.forget_command()  # do not fly on with the last command
        response.success = True
        response.message = f"{self.link.safe_action} sent" if sent else f"nothing to do ({self.link.state})"
        return response

    # ---- control ---------------------------------------------------------------------------------

    def control_step(self, verdict: StopReason) -> None:
        link = self.link
        if link is None:
            return
        if verdict.allows_motion:
            state = link.state
            if state == FLYING:
                if self.command is not None and link.send_ctbr(*self.command):
                    self.counts["outputs"] += 1
            elif state == IDLE and self.params["auto_arm"]:
                status = link.status()
                if status.connected and status.armed is not True:
                    self._start_arming("auto_arm")
            return
        if verdict.is_estop:
            if link.estop():
                self.counts["estop_actions"] += 1
                self.get_logger().error(f"e-stop: {link.estop_action} sent to the vehicle")
            return
        if link.safe_stop(verdict.value):
            self.counts["safe_actions"] += 1
            self.get_logger().warning(f"{verdict.value}: {link.safe_action} sent to the vehicle")

    def diagnostic_values(self) -> dict:
        values = {"hardware": self.hw.name, "auto_arm": self.params["auto_arm"], **self.counts,
                  "last_arm_error": self.last_arm_error}
        if self.command is not None:
            thrust, rates = self.command
            values["command"] = f"[{thrust:.3f}, {rates[0]:.3f}, {rates[1]:.3f}, {rates[2]:.3f}]"
        if self.position is not None:
            values["position"] = str([round(float(x), 3) for x in self.position])
        if self.link is not None:
            values.update(self.link.status().as_dict())
        return values


def main(args=None) -> NoReturn:
    run_node(QuadrotorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
