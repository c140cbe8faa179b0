"""The safety benchmark's quadrotor part: `robot_rl.nodes.quadrotor` (hardware `px4_quad`, `auto_arm`)
as its own process, flying the fake PX4 of `robot_rl.robots.quad.fake_autopilot` with fake odometry and a
20 Hz actor, fuzzed on quad/cmd_ctbr, quad/odom and ball/pose; every SET_ATTITUDE_TARGET the fake
receives must be finite, thrust in [0, 1] (at most that of the YAML's max thrust) and FRD rates within
the YAML's max_rate."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
from safety_fuzz import Fuzz
from safety_harness import (
    FUTURE_TOLERANCE_S, MAX_COMMAND_AGE_S, Bench, deep, fuzz_inputs, log, start_node_under_test, stop_node_under_test,
)

from robot_rl.robots.quad.fake_autopilot import FakeAutopilot, free_udp_port
from robot_rl.robots.quad.links.config import load_quad_hardware
from robot_rl.robots.quad.links.mavlink import flu_to_frd, px4_thrust
from robot_rl.ros.messages import ns_to_stamp

QUAD_HARDWARE = "px4_quad"
QUAD_QUATERNION_TOLERANCE = 0.05  # the node's defaults (quaternion_tolerance, max_position_m)
QUAD_MAX_POSITION_M = 1000.0
# Long enough that the quiet snapshots around each fuzzed topic (its publisher paused) do not land it;
# the fuzz's bad stamps are >= 2 s old, so the labels do not change.
QUAD_COMMAND_TIMEOUT_S = 1.0
QUAD_STATE_TIMEOUT_S = 1.5
FLOAT32_TOLERANCE = 1e-6  # setpoints cross MAVLink as float32


def setpoint_problems(msg, max_thrust01: float, max_rates: np.ndarray) -> list[str]:
    """What breaks the limits in one SET_ATTITUDE_TARGET: anything non-finite, thrust outside [0, 1] or
    above `max_thrust01`, FRD body rates (converted back to FLU) beyond +-`max_rates`."""
    frd = [msg.body_roll_rate, msg.body_pitch_rate, msg.body_yaw_rate]
    if not all(math.isfinite(v) for v in [*frd, msg.thrust]):
        return [f"non-finite setpoint {frd + [msg.thrust]}"]
    problems = []
    if not (0.0 <= msg.thrust <= 1.0 and msg.thrust <= max_thrust01 + FLOAT32_TOLERANCE):
        problems.append(f"thrust {msg.thrust} outside [0, {max_thrust01:.4f}]")
    flu = flu_to_frd(frd)
    if (np.abs(flu) > max_rates * (1 + FLOAT32_TOLERANCE)).any():
        problems.append(f"rates (FLU) {flu.tolist()} beyond {max_rates.tolist()}")
    return problems


class QuadBench(Bench):
    """Fake motion capture (quad/odom at 50 Hz, hovering at (0, 0, 1)), the actor (valid quad/cmd_ctbr
    at 20 Hz, often beyond the limits: clamped) and the ball tracker's publisher (ball/pose)."""

    watched = "quadrotor"

    def __init__(self, domain_id: int, hw):
        super().__init__(domain_id)
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from nav_msgs.msg import Odometry

        from robot_rl.ros import qos

        self.hw = hw
        self.publish_odom = self.actor = True
        self.rng = np.random.default_rng(13)
        n = self.node
        self.cmd_pub = n.create_publisher(TwistStamped, "quad/cmd_ctbr", deep(qos.COMMAND))
        self.odom_pub = n.create_publisher(Odometry, hw.odom_topic, deep(qos.SENSOR))
        self.ball_pub = n.create_publisher(PoseStamped, hw.ball_topic, deep(qos.SENSOR))
        n.create_timer(0.02, self._publish_odom)
        n.create_timer(0.05, self._act)

    def _act(self) -> None:
        if self.actor:
            rng = self.rng
            self.command(9.8 + rng.normal() * rng.choice([1.0, 20.0]), rng.normal(size=3) * rng.choice([0.3, 10.0]))

    def _publish_odom(self) -> None:
        from nav_msgs.msg import Odometry

        if not self.publish_odom:
            return
        msg = Odometry()
        msg.header.stamp = ns_to_stamp(time.time_ns())
        msg.header.frame_id = self.hw.state_frame
        msg.child_frame_id = self.hw.command_frame
        msg.pose.pose.position.z = 1.0
        msg.pose.pose.orientation.w = 1.0
        self.odom_pub.publish(msg)

    def command(self, thrust: float, rates) -> None:
        """A valid command (thrust and rates may be beyond the limits: clamped)."""
        from geometry_msgs.msg import TwistStamped

        msg = TwistStamped()
        msg.header.frame_id = self.hw.command_frame
        msg.header.stamp = ns_to_stamp(time.time_ns())
        msg.twist.linear.z = float(thrust)
        msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = (float(r) for r in rates)
        self.cmd_pub.publish(msg)


def run_quad(n_fuzz: int, tmp: Path) -> dict:
    hw = load_quad_hardware(QUAD_HARDWARE)
    port = free_udp_port()
    fake = FakeAutopilot(port, disarm_after_land_s=0.1)
    params = {"hardware": QUAD_HARDWARE, "connection": f"udpin:127.0.0.1:{port}", "auto_arm": "true",
              "arm_retry_s": 0.2, "control_hz": 50.0, "command_timeout_s": QUAD_COMMAND_TIMEOUT_S,
              "state_timeout_s": QUAD_STATE_TIMEOUT_S, "max_command_age_s": MAX_COMMAND_AGE_S,
              "stamp_future_tolerance_s": FUTURE_TOLERANCE_S, "diagnostics_period_s": 0.2,
              "activation_retry_s": 0.2, "quaternion_tolerance": QUAD_QUATERNION_TOLERANCE,
              "max_position_m": QUAD_MAX_POSITION_M}
    proc, domain_id = start_node_under_test("robot_rl.nodes.quadrotor", params, tmp / "quadrotor.log")
    b = QuadBench(domain_id, hw)
    fz = Fuzz(31)
    low, high = (np.asarray(hw.geofence.low), np.asarray(hw.geofence.high)) if hw.geofence is not None \
        else (np.array([-2.0, -2.0, 0.0]), np.array([2.0, 2.0, 2.5]))

    def send(topic: str, now_ns: int) -> bool:
        if topic == "cmd_ctbr":
            msg, bad = fz.ctbr(now_ns, hw.command_frame, MAX_COMMAND_AGE_S)
            b.cmd_pub.publish(msg)
        elif topic == "odom":
            msg, bad = fz.odometry(now_ns, hw.state_frame, low, high, QUAD_STATE_TIMEOUT_S,
                                   QUAD_QUATERNION_TOLERANCE, QUAD_MAX_POSITION_M)
            b.odom_pub.publish(msg)
        else:
            msg, bad = fz.ball(now_ns, hw.state_frame, low, high, QUAD_STATE_TIMEOUT_S, QUAD_QUATERNION_TOLERANCE,
                               QUAD_MAX_POSITION_M)
            b.ball_pub.publish(msg)
        return bad

    def prepare(topic: str) -> None:  # the actor's own timer keeps it commanded (and flying)
        b.actor = topic != "cmd_ctbr"  # meanwhile the fuzz's valid commands fly it (auto_arm)
        b.publish_odom = topic != "odom"  # the fuzz's poses outside the geofence land it

    def flying() -> bool:
        return b.diag.get("link_state") == "flying"

    def finish(topic: str) -> None:  # fly again (e.g. after a geofence landing) before the next topic
        b.actor = b.publish_odom = True
        if topic == "ball":  # the last one
            return
        try:
            b.wait_for(flying, 10, "auto_arm: flying again")
        except TimeoutError as exc:
            log(f"quadrotor: {exc}")

    try:
        b.wait_for(lambda: b.diag.get("lifecycle") == "active", 60, "quadrotor activation")
        b.wait_for(flying, 20, "auto_arm: flying")
        fuzz = fuzz_inputs(b, proc, ["cmd_ctbr", "odom", "ball"], send, n_fuzz, prepare=prepare, finish=finish)
        final = b.settle(["arm_successes", "geofence_actions", "safe_actions", "clamped_thrust", "clamped_rates"])
        crashed = proc.poll() is not None
        setpoints = [m for _, m in fake.messages("SET_ATTITUDE_TARGET")]
        max_thrust01 = px4_thrust(hw.thrust_limits[1], hw.mavlink.hover_thrust, hw.mavlink.gravity)
        max_rates = np.asarray(hw.max_rates, dtype=np.float64)
        out_of_limit = [p for m in setpoints for p in setpoint_problems(m, max_thrust01, max_rates)]
        return {"fuzz": fuzz, "crashed": crashed, "out_of_limit": out_of_limit, "setpoints": len(setpoints),
                "counters": {k: int(v) for k, v in final.items()}}
    finally:
        b.close()
        stop_node_under_test(proc, tmp / "quadrotor.log")
        fake.close()

