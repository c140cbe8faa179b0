"""The quadrotor: conversions against hand-computed values; the MAVLink link against a test-side
fake autopilot on loopback (pymavlink parses the bytes the link sends); the Crazyflie link's CRTP
packets built by cflib's own Commander and captured from a fake radio link; the node as a
separate process with the fake autopilot and a fake motion-capture publisher (loopback DDS with a
domain id of its own)."""

from __future__ import annotations

import math
import struct
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymavlink")
pytest.importorskip("cflib")
pytest.importorskip("rclpy")

from geometry_msgs.msg import TwistStamped  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from pymavlink import mavutil  # noqa: E402

from robot_rl.robots.quad.fake_autopilot import FakeAutopilot, free_udp_port  # noqa: E402
from robot_rl.ros.probe import RosProbe, start_node, stop_node  # noqa: E402
from robot_rl.robots.quad.links.link import FLYING, IDLE, KILLED, LANDING, STOPPED, Geofence, LinkError  # noqa: E402
from robot_rl.robots.quad.links.config import load_quad_hardware, parse_quad_hardware  # noqa: E402
from robot_rl.robots.quad.links.crazyflie import (  # noqa: E402
    CF_MANUAL_THRUST_MAX, CF_MANUAL_THRUST_MIN, CrazyflieConfig, CrazyflieLink, MotorThrustModel, crazyflie_rates_deg,
    crazyflie_thrust_percentage,
)
from robot_rl.robots.quad.links.mavlink import MavlinkConfig, MavlinkLink, flu_to_frd, px4_thrust  # noqa: E402
from robot_rl.hardware.safety import Rejected  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MAV = mavutil.mavlink
PX4_OFFBOARD = 6 << 16
FENCE = Geofence((-2.0, -2.0, -0.2), (2.0, 2.0, 2.5))


# ---- conversions ----------------------------------------------------------------------------------


def test_conversions_against_hand_computed_values():
    assert flu_to_frd([0.1, 0.2, -0.3]).tolist() == [0.1, -0.2, 0.3]
    # PX4: thrust_01 = a * hover / g
    assert px4_thrust(9.80665, 0.42) == pytest.approx(0.42)
    assert px4_thrust(15.0, 0.42) == pytest.approx(0.6424212142, rel=1e-9)  # 6.3 / 9.80665
    assert px4_thrust(4.903325, 0.5) == pytest.approx(0.25)
    assert px4_thrust(30.0, 0.5) == 1.0 and px4_thrust(-2.0, 0.5) == 0.0
    with pytest.raises(ValueError):
        px4_thrust(float("nan"), 0.5)
    # Crazyflie rates: FLU rad/s -> deg/s, signs kept (cflib negates pitch on the wire)
    assert crazyflie_rates_deg([math.pi / 2, -math.pi / 4, math.pi]) == pytest.approx((90.0, -45.0, 180.0))
    # thrust model: 32 g, 4 motors, f = 2.130295e-11 p^2 + 1.032633e-6 p + 5.48456e-4 N per motor.
    # Hover: 0.032 * 9.80665 / 4 = 0.0784532 N per motor ->
    # p = (-1.032633e-6 + sqrt(1.032633e-6^2 + 4 * 2.130295e-11 * (0.0784532 - 5.48456e-4))) / (2 * 2.130295e-11)
    #   = (-1.032633e-6 + 2.77574e-6) / 4.26059e-11 = 40 912
    model = MotorThrustModel()
    assert model.pwm(9.80665) == pytest.approx(40912, abs=1)
    assert model.motor_force(model.pwm(9.80665)) == pytest.approx(0.0784532, rel=1e-6)
    assert model.pwm(0.0) == 0.0 and model.pwm(100.0) == 65535
    # cflib's manual setpoint: raw = int(10001 + pct/100 * 49999)
    assert crazyflie_thrust_percentage(10001) < 1e-3 and crazyflie_thrust_percentage(60000) == 100.0
    assert crazyflie_thrust_percentage(3000) == crazyflie_thrust_percentage(10001)  # clipped to raw 10001
    assert crazyflie_thrust_percentage(65535) == 100.0
    assert crazyflie_thrust_percentage(35000.4) == pytest.approx((35000.25 - 10001) / 49999 * 100)


@settings(max_examples=300, deadline=None)
@given(a=st.floats(-50, 50), b=st.floats(-50, 50), hover=st.floats(0.05, 0.95),
       rates=st.lists(st.floats(-10, 10), min_size=3, max_size=3), pwm=st.floats(0, 70000))
def test_conversion_properties(a, b, hover, rates, pwm):
    ta, tb = px4_thrust(a, hover), px4_thrust(b, hover)
    assert 0.0 <= ta <= 1.0 and (ta <= tb if a <= b else ta >= tb)  # monotone, bounded
    assert flu_to_frd(flu_to_frd(rates)).tolist() == pytest.approx(rates)
    raw = int(10001 + 0.01 * crazyflie_thrust_percentage(pwm) * (60000 - 10001))  # what cflib sends
    assert raw == min(max(round(pwm), CF_MANUAL_THRUST_MIN), CF_MANUAL_THRUST_MAX)


def test_example_hardware_files_load_and_bad_fields_are_named():
    import yaml

    px4, cf = load_quad_hardware("px4_quad"), load_quad_hardware("crazyflie")
    assert px4.link == "mavlink" and px4.mavlink.connection.startswith("udpin:127.0.0.1")
    assert cf.link == "crazyflie" and cf.crazyflie.uri == "radio://0/80/2M"
    assert px4.geofence is not None and px4.thrust_limits == (0.0, 15.0)
    data = yaml.safe_load((ROOT / "hardware" / "px4_quad.yaml").read_text())
    for path, value, match in ((("command", "thrust"), [0.0, 20.0], "command.thrust"),
                               (("command", "max_rate"), [4.0, 1.0, 1.0], "command.max_rate"),
                               (("geofence", "low"), [3.0, 0.0, 0.0], "geofence"),
                               (("mavlink", "heartbeat_hz"), 5, "heartbeat_hz"),
                               (("mavlink", "offboard_stream_s"), 0.5, "offboard_stream_s"),
                               (("safety", "estop_action"), "pray", "estop_action"),
                               (("link",), "carrier_pigeon", "link")):
        bad = yaml.safe_load(yaml.safe_dump(data))
        section = bad
        for key in path[:-1]:
            section = section[key]
        section[path[-1]] = value
        with pytest.raises(ValueError, match=match):
            parse_quad_hardware(bad)


def _ctbr(thrust=9.8, rates=(0.0, 0.0, 0.0), frame="base_link", lateral=(0.0, 0.0)):
    msg = TwistStamped()
    msg.header.frame_id = frame
    msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = float(lateral[0]), float(lateral[1]), float(thrust)
    msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = (float(r) for r in rates)
    return msg


def test_command_and_state_validation():
    from robot_rl.ros.quad_io import parse_ctbr, parse_odom

    hw = load_quad_hardware("px4_quad")
    thrust, rates, tc, rc = parse_ctbr(_ctbr(9.0, (0.5, -0.5, 1.0)), hw)
    assert thrust == 9.0 and rates.tolist() == [0.5, -0.5, 1.0] and not tc and not rc
    thrust, rates, tc, rc = parse_ctbr(_ctbr(40.0, (10.0, -10.0, 0.1)), hw)
    assert thrust == 15.0 and rates.tolist() == [3.14159, -3.14159, 0.1] and tc and rc
    assert parse_ctbr(_ctbr(-3.0), hw)[0] == 0.0
    for msg, reason in ((_ctbr(frame="map"), "frame"), (_ctbr(float("nan")), "nan"),
                        (_ctbr(rates=(0, float("inf"), 0)), "nan"), (_ctbr(lateral=(0.1, 0.0)), "lateral")):
        with pytest.raises(Rejected) as exc:
            parse_ctbr(msg, hw)
        assert exc.value.reason == reason
    odom = Odometry()
    odom.header.frame_id = "map"
    odom.pose.pose.position.z, odom.pose.pose.orientation.w = 1.0, 1.0
    assert parse_odom(odom, hw)[0].tolist() == [0.0, 0.0, 1.0]
    for mutate, reason in ((lambda o: setattr(o.header, "frame_id", "odom"), "frame"),
                           (lambda o: setattr(o.pose.pose.position, "x", float("nan")), "nan"),
                           (lambda o: setattr(o.pose.pose.orientation, "w", 0.5), "quaternion"),
                           (lambda o: setattr(o.twist.twist.angular, "z", float("inf")), "nan"),
                           (lambda o: setattr(o.pose.pose.position, "y", 1e7), "implausible")):
        bad = Odometry()
        bad.header.frame_id = "map"
        bad.pose.pose.orientation.w = 1.0
        mutate(bad)
        with pytest.raises(Rejected) as exc:
            parse_odom(bad, hw)
        assert exc.value.reason == reason


# ---- MAVLink: the link against a fake autopilot on loopback ----------------------------------------


def _link(port: int, **overrides) -> MavlinkLink:
    cfg = dict(connection=f"udpin:127.0.0.1:{port}", hover_thrust=0.42, offboard_stream_s=1.0, stream_hz=20.0,
               heartbeat_hz=20.0, setpoint_timeout_s=0.2, link_timeout_s=0.6, ack_timeout_s=0.5, geofence=FENCE)
    cfg.update(overrides)
    return MavlinkLink(MavlinkConfig(**cfg))


# The links' and the node's tests are marked wall_clock: their watchdogs and command timeouts act within
# 0.1-0.6 s, and under a second test process's load a starved thread missed them in CI (a stop setpoint
# 0.76 s late, arming aborted as link_lost or stale_command), so `make test` runs them alone.
@pytest.fixture
def autopilot():
    fakes, links = [], []

    def make(link_overrides=None, **fake_kwargs):
        port = free_udp_port()
        link = _link(port, **(link_overrides or {}))
        link.connect()
        fake = FakeAutopilot(port, **fake_kwargs)
        fakes.append(fake)
        links.append(link)
        return link, fake

    yield make
    for link in links:
        link.close()
    for fake in fakes:
        fake.close()


@pytest.mark.wall_clock
def test_mavlink_offboard_sequence_heartbeat_and_setpoint_encoding(autopilot):
    link, fake = autopilot()
    assert link.connect(wait_s=3.0), "the link never heard the fake autopilot"
    link.observe_position([0.0, 0.0, 1.0])
    assert link.send_ctbr(9.8, [0, 0, 0]) is False  # nothing reaches the vehicle before arm()
    time.sleep(0.1)
    assert fake.messages("SET_ATTITUDE_TARGET") == []
    started = time.monotonic()
    link.arm()
    assert link.state == FLYING
    # offboard sequence: >= 1 s of neutral setpoints, then DO_SET_MODE(OFFBOARD), ACK, then ARM, ACK
    (t_mode, mode), = fake.commands(MAV.MAV_CMD_DO_SET_MODE)
    (t_arm, arm), = fake.commands(MAV.MAV_CMD_COMPONENT_ARM_DISARM)
    before = [(t, m) for t, m in fake.messages("SET_ATTITUDE_TARGET") if t < t_mode]
    assert before and t_mode - before[0][0] >= 1.0 - 0.02, t_mode - before[0][0]
    gaps = np.diff([t for t, _ in before])
    assert len(before) >= 15 and gaps.max() < 0.3  # a steady stream (PX4 needs > 2 Hz)
    for _, m in before:
        assert m.type_mask == MAV.ATTITUDE_TARGET_TYPEMASK_ATTITUDE_IGNORE
        assert m.thrust == 0.0 and m.body_roll_rate == m.body_pitch_rate == m.body_yaw_rate == 0.0
    assert mode.param1 == MAV.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED and mode.param2 == 6  # PX4 OFFBOARD
    assert arm.param1 == 1.0 and t_arm > t_mode
    assert mode.target_system == 1 and mode.target_component == 1
    assert fake.armed and fake.custom_mode == PX4_OFFBOARD
    assert link.status().counters["acks"] >= 2
    # setpoints: FLU -> FRD rates, thrust 15 m/s^2 -> 15 * 0.42 / 9.80665
    t0 = time.monotonic()
    assert link.send_ctbr(15.0, [1.0, 0.5, -0.25])
    fake.wait_for(lambda: fake.messages("SET_ATTITUDE_TARGET", t0), 2.0, "the setpoint")
    (_, sp), = fake.messages("SET_ATTITUDE_TARGET", t0)
    assert sp.type_mask == 128 and list(sp.q) == [1.0, 0.0, 0.0, 0.0]
    assert sp.thrust == pytest.approx(0.6424212, rel=1e-6)
    assert (sp.body_roll_rate, sp.body_pitch_rate, sp.body_yaw_rate) == pytest.approx((1.0, -0.5, 0.25))
    # our heartbeat, from the link's own thread, >= 10 Hz all along
    beats = [t for t, m in fake.messages("HEARTBEAT") if t >= started and m.type == MAV.MAV_TYPE_ONBOARD_CONTROLLER]
    span = beats[-1] - beats[0]
    assert span > 0.9 and (len(beats) - 1) / span >= 10.0, (len(beats), span)
    assert np.diff(beats).max() < 0.2
    # the link learns the vehicle's mode from its next HEARTBEAT (10 Hz), not from the ACK
    fake.wait_for(lambda: link.status().mode == "OFFBOARD" and link.status().armed, 1.0,
                  "the vehicle's heartbeat reporting OFFBOARD and armed")


@pytest.mark.wall_clock
def test_mavlink_lands_on_stale_setpoints(autopilot):
    link, fake = autopilot({"setpoint_timeout_s": 0.2})
    assert link.connect(wait_s=3.0)
    link.observe_position([0.0, 0.0, 1.0])
    link.arm()
    for _ in range(6):
        assert link.send_ctbr(9.8, [0.0, 0.0, 0.1])
        time.sleep(0.05)
    fake.wait_for(lambda: fake.commands(MAV.MAV_CMD_NAV_LAND), 2.0, "NAV_LAND")
    (t_land, _), = fake.commands(MAV.MAV_CMD_NAV_LAND)[:1]
    t_last = max(t for t, _ in fake.messages("SET_ATTITUDE_TARGET") if t < t_land)
    assert 0.2 - 0.02 <= t_land - t_last <= 0.2 + 0.08, t_land - t_last
    assert link.state == LANDING and link.status().last_safe_reason == "stale_setpoints"
    assert link.send_ctbr(9.8, [0, 0, 0]) is False  # no more setpoints once landing
    time.sleep(0.2)
    assert not [t for t, _ in fake.messages("SET_ATTITUDE_TARGET") if t > t_land]
    # the vehicle lands and disarms: the link is ready for the next start sequence
    fake.wait_for(lambda: link.state == IDLE, 3.0, "idle after the vehicle disarmed")


@pytest.mark.wall_clock
def test_mavlink_geofence_and_estop_land_and_kill(autopilot):
    link, fake = autopilot(disarm_after_land_s=0.1)
    assert link.connect(wait_s=3.0)
    with pytest.raises(LinkError, match="geofence"):  # no position yet
        link.arm()
    link.observe_position([0.0, 0.0, 1.0])
    link.arm()
    # geofence: leaving the box while flying -> land
    assert link.observe_position([1.9, 0.0, 1.0]) is False
    t_out = time.monotonic()
    assert link.observe_position([2.1, 0.0, 1.0]) is True
    fake.wait_for(lambda: fake.commands(MAV.MAV_CMD_NAV_LAND, t_out), 1.0, "geofence NAV_LAND")
    assert link.status().last_safe_reason == "geofence" and link.status().fence_ok is False
    fake.wait_for(lambda: link.state == IDLE, 3.0, "idle after landing")
    with pytest.raises(LinkError, match="outside the geofence"):
        link.arm()
    # e-stop -> land, sent at once, once
    link.observe_position([0.0, 0.0, 1.0])
    link.arm()
    t_stop = time.monotonic()
    assert link.estop() is True
    assert link.estop() is False  # idempotent
    fake.wait_for(lambda: fake.commands(MAV.MAV_CMD_NAV_LAND, t_stop), 1.0, "e-stop NAV_LAND")
    assert fake.commands(MAV.MAV_CMD_NAV_LAND, t_stop)[0][0] - t_stop < 0.05
    assert link.status().last_safe_reason == "estop"
    fake.wait_for(lambda: link.state == IDLE, 3.0, "idle after landing")


@pytest.mark.wall_clock
def test_mavlink_estop_kill_denied_arm_and_lost_link(autopilot):
    link, fake = autopilot({"estop_action": "kill"}, deny={MAV.MAV_CMD_COMPONENT_ARM_DISARM})
    assert link.connect(wait_s=3.0)
    link.observe_position([0.0, 0.0, 1.0])
    with pytest.raises(LinkError, match="DENIED"):
        link.arm()
    assert link.state == IDLE and link.status().counters["arm_failures"] == 1
    fake.deny.clear()
    link.arm()
    t_kill = time.monotonic()
    assert link.estop()
    fake.wait_for(lambda: fake.commands(MAV.MAV_CMD_COMPONENT_ARM_DISARM, t_kill), 1.0, "forced disarm")
    (_, kill), = fake.commands(MAV.MAV_CMD_COMPONENT_ARM_DISARM, t_kill)[:1]
    assert kill.param1 == 0.0 and kill.param2 == 21196.0
    assert link.state == KILLED
    fake.wait_for(lambda: link.state == IDLE, 3.0, "idle once the vehicle reports disarmed")
    # lost link: the autopilot goes silent while we fly -> link down and a (blind) land
    link.arm()
    for _ in range(3):
        link.send_ctbr(9.8, [0, 0, 0])
        time.sleep(0.05)
    fake.heartbeat = False
    t_silent = time.monotonic()
    end = time.monotonic() + 3.0
    while link.status().connected and time.monotonic() < end:
        link.send_ctbr(9.8, [0, 0, 0])  # the commands keep coming: the heartbeat decides
        time.sleep(0.05)
    assert not link.status().connected
    assert 0.6 - 0.15 <= time.monotonic() - t_silent <= 0.6 + 0.4
    assert link.status().counters["link_lost"] == 1 and link.status().last_safe_reason == "link_lost"
    # the fake's receive thread records the blind land a moment after the link thread sends it
    fake.wait_for(lambda: fake.commands(MAV.MAV_CMD_NAV_LAND, t_silent), 1.0, "blind NAV_LAND on link loss")
    with pytest.raises(LinkError, match="link down"):
        link.arm()


# ---- Crazyflie: cflib's packets ----------------------------------------------------------------------


class CaptureRadio:
    """Stands in for cflib's radio driver: `Crazyflie.send_packet` hands it every CRTP packet."""

    needs_resending = False

    def __init__(self):
        self.packets: list[tuple[float, int, int, bytes]] = []

    def send_packet(self, pk):
        self.packets.append((time.monotonic(), pk.port, pk.channel, bytes(pk.data)))

    def close(self):
        pass

    def since(self, t: float):
        return [p for p in self.packets if p[0] >= t]


COMMANDER_GENERIC = 0x07
STOP = (COMMANDER_GENERIC, 0, b"\x00")


def _crazyflie(**overrides):
    from cflib.crazyflie import Crazyflie

    cf = Crazyflie()
    radio = CaptureRadio()
    cf.link = radio
    cfg = dict(setpoint_timeout_s=0.1, geofence=FENCE)
    cfg.update(overrides)
    link = CrazyflieLink(CrazyflieConfig(**cfg), crazyflie=cf)
    assert link.connect()
    return link, radio


@pytest.mark.wall_clock
def test_crazyflie_setpoint_packets_and_stop_behaviour():
    link, radio = _crazyflie()
    try:
        assert link.send_ctbr(9.8, [0, 0, 0]) is False and radio.packets == []  # not before arm()
        link.observe_position([0.0, 0.0, 0.5])
        link.arm()
        unlock = [struct.unpack("<fffH", p[3]) for p in radio.packets if p[1] == 0x03]  # legacy RPYT port
        assert unlock == [(0.0, 0.0, 0.0, 0)]  # one zero-thrust setpoint: releases the firmware's thrust lock
        t0 = time.monotonic()
        assert link.send_ctbr(9.80665, [math.pi / 2, -math.pi / 4, math.pi / 6])
        (_, port, channel, data), = radio.since(t0)
        assert (port, channel) == (COMMANDER_GENERIC, 0) and len(data) == 16
        kind, roll, pitch, yaw, thrust, rate = struct.unpack("<BfffHB", data)
        assert kind == 11 and rate == 1  # TYPE_MANUAL, roll/pitch as rates
        # deg/s; pitch is negated on the wire (cflib), the firmware's rate loop negates it back
        assert (roll, pitch, yaw) == pytest.approx((90.0, 45.0, 30.0), rel=1e-6)
        assert thrust == 40912  # the hover PWM computed by hand in the conversion test
        t1 = time.monotonic()
        assert link.send_ctbr(40.0, [0, 0, 0])  # beyond the model: clipped to the manual maximum
        assert struct.unpack("<BfffHB", radio.since(t1)[0][3])[4] == 60000
        # watchdog: stop sending -> a stop setpoint after setpoint_timeout_s (0.1 s)
        t_last = radio.packets[-1][0]
        end = time.monotonic() + 1.0
        while link.state == FLYING and time.monotonic() < end:
            time.sleep(0.005)
        stops = [p for p in radio.since(t_last) if p[1:] == STOP]
        assert stops and 0.1 - 0.01 <= stops[0][0] - t_last <= 0.1 + 0.05, stops[0][0] - t_last
        assert link.state == STOPPED and link.send_ctbr(9.8, [0, 0, 0]) is False
        # e-stop -> a stop setpoint at once, once
        link.arm()
        link.send_ctbr(9.8, [0, 0, 0])
        t2 = time.monotonic()
        assert link.estop() is True and link.estop() is False
        assert [p[1:] for p in radio.since(t2)] == [STOP]
        # geofence -> stop
        link.arm()
        link.send_ctbr(9.8, [0, 0, 0])
        t3 = time.monotonic()
        assert link.observe_position([0.0, 3.0, 0.5]) is True
        assert [p[1:] for p in radio.since(t3)] == [STOP] and link.status().last_safe_reason == "geofence"
        with pytest.raises(LinkError, match="geofence"):
            link.arm()
    finally:
        link.close()


@pytest.mark.wall_clock
def test_crazyflie_kill_sends_stop_then_emergency_stop():
    link, radio = _crazyflie(estop_action="kill")
    try:
        link.observe_position([0.0, 0.0, 0.5])
        link.arm()
        t0 = time.monotonic()
        assert link.estop()
        packets = [p[1:] for p in radio.since(t0)]
        assert packets[0] == STOP and len(packets) >= 2  # then the supervisor's emergency stop
        assert link.state == KILLED
        with pytest.raises(LinkError):
            link.arm()
    finally:
        link.close()


# ---- the node as a process ------------------------------------------------------------------------


class Harness(RosProbe):
    """Test-side ROS node: fake motion capture (quad/odom at 50 Hz), the actor's command and
    /estop publishers, /diagnostics and service clients."""

    watched = "quadrotor"

    def __init__(self, domain_id: int, odom: bool = True):
        from std_msgs.msg import Bool

        from robot_rl.ros import qos

        super().__init__(domain_id, "quad_test_harness")
        self.publish_odom = odom
        self.position = [0.0, 0.0, 1.0]
        n = self.node
        self.odom_pub = n.create_publisher(Odometry, "quad/odom", qos.SENSOR)
        self.cmd_pub = n.create_publisher(TwistStamped, "quad/cmd_ctbr", qos.COMMAND)
        self.estop_pub = n.create_publisher(Bool, "/estop", qos.LATCHED)
        n.create_timer(0.02, self._odom)

    def _odom(self):
        if not self.publish_odom:
            return
        msg = Odometry()
        msg.header.stamp = self.node.get_clock().now().to_msg()
        msg.header.frame_id = "map"
        msg.child_frame_id = "base_link"
        p = msg.pose.pose.position
        p.x, p.y, p.z = (float(v) for v in self.position)
        msg.pose.pose.orientation.w = 1.0
        self.odom_pub.publish(msg)

    def command(self, thrust, rates) -> float:
        msg = _ctbr(thrust, rates)
        msg.header.stamp = self.node.get_clock().now().to_msg()
        sent = time.monotonic()
        self.cmd_pub.publish(msg)
        return sent

    def estop(self, value: bool) -> float:
        from std_msgs.msg import Bool

        sent = time.monotonic()
        self.estop_pub.publish(Bool(data=value))
        return sent

    def stream_until(self, predicate, timeout: float, what: str, thrust=9.8, rates=(0.0, 0.0, 0.0),
                     period: float = 0.05) -> float:
        """Publishes commands every `period` until `predicate()`; returns the last send time."""
        end = time.monotonic() + timeout
        last = 0.0
        while time.monotonic() < end:
            last = self.command(thrust, rates)
            self.spin(period)
            if predicate():
                return last
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; diagnostics: {self.diag}")


def _start_node(tmp_path: Path, port: int, *params: str):
    return start_node("robot_rl.nodes.quadrotor", tmp_path / "quadrotor.log", "hardware:=px4_quad",
                      f"connection:=udpin:127.0.0.1:{port}", "auto_arm:=true", "arm_retry_s:=0.2",
                      "diagnostics_period_s:=0.2", "activation_retry_s:=0.2", "state_timeout_s:=0.5", *params)


def _stop(proc, tmp_path):
    stop_node(proc, tmp_path / "quadrotor.log")


def _flying(fake: FakeAutopilot, since: float) -> bool:
    """The fake vehicle is armed in OFFBOARD and received a forwarded (non-neutral) setpoint."""
    return fake.armed and fake.custom_mode == PX4_OFFBOARD and any(
        m.thrust > 0.3 for _, m in fake.messages("SET_ATTITUDE_TARGET", since))


@pytest.mark.wall_clock
def test_node_refuses_activation_clamps_and_lands_on_stale_and_geofence(tmp_path):
    port = free_udp_port()
    fake = FakeAutopilot(port, heartbeat=False, disarm_after_land_s=0.1)
    proc, domain_id = _start_node(tmp_path, port, "control_hz:=10.0", "command_timeout_s:=0.15")
    h = Harness(domain_id, odom=False)
    try:
        # 1) refuses to activate while the vehicle is silent and odometry is missing
        h.wait_for(lambda: "link down" in h.diag.get("activation_refusal", ""), 15, "refusal: link down")
        assert "odometry" in h.diag["activation_refusal"] and h.diag["lifecycle"] == "inactive"
        fake.heartbeat = True
        h.wait_for(lambda: "link down" not in h.diag.get("activation_refusal", "link down")
                   and "odometry" in h.diag["activation_refusal"], 5, "refusal: odometry only")
        h.command(12.0, (0.0, 0.0, 0.0))
        h.spin(0.3)
        assert fake.messages("SET_ATTITUDE_TARGET") == [] and fake.messages("COMMAND_LONG") == []
        h.publish_odom = True
        h.wait_for(lambda: h.diag.get("lifecycle") == "active", 5, "activation")
        # 2) commands beyond the limits: auto-arm (offboard sequence), then clamped setpoints
        t0 = time.monotonic()
        h.stream_until(lambda: _flying(fake, t0), 8, "flying", thrust=40.0, rates=(10.0, -10.0, 10.0), period=0.1)
        (t_mode, _), = fake.commands(MAV.MAV_CMD_DO_SET_MODE, t0)
        (t_arm, _), = fake.commands(MAV.MAV_CMD_COMPONENT_ARM_DISARM, t0)
        first = fake.messages("SET_ATTITUDE_TARGET", t0)[0][0]
        assert t_mode - first >= 1.0 - 0.02 and t_arm > t_mode  # setpoints streamed before OFFBOARD, then arm
        forwarded = [m for _, m in fake.messages("SET_ATTITUDE_TARGET", t_arm) if m.thrust > 0]
        for m in forwarded:
            assert m.thrust == pytest.approx(15.0 * 0.42 / 9.80665, rel=1e-6)  # clamped to 15 m/s^2
            # FLU (10, -10, 10) clamped to (pi, -pi, pi) -> FRD (pi, pi, -pi)
            assert (m.body_roll_rate, m.body_pitch_rate, m.body_yaw_rate) == pytest.approx((3.14159, 3.14159,
                                                                                            -3.14159))
        h.wait_for(lambda: h.value("clamped_thrust") >= 3 and h.value("clamped_rates") >= 3, 3, "clamps counted")
        # 3) watchdog: stop commanding -> NAV_LAND within two control periods (0.2 s) of the last command
        last = h.stream_until(lambda: False if time.monotonic() - t_arm < 0.6 else True, 3, "", period=0.1)
        h.wait_for(lambda: fake.commands(MAV.MAV_CMD_NAV_LAND, last), 2, "NAV_LAND")
        t_land = fake.commands(MAV.MAV_CMD_NAV_LAND, last)[0][0]
        assert 0.15 - 0.02 <= t_land - last <= 0.2, t_land - last
        h.spin(0.3)
        assert not [m for t, m in fake.messages("SET_ATTITUDE_TARGET", t_land + 0.02)]  # nothing after the land
        h.wait_for(lambda: h.value("stale") >= 1 and h.diag.get("link_state") == "idle", 3, "stale, then idle")
        # 4) geofence: fly again, leave the box -> land
        t1 = time.monotonic()
        h.stream_until(lambda: _flying(fake, t1), 8, "flying again", period=0.1)
        h.position = [2.5, 0.0, 1.0]
        h.stream_until(lambda: fake.commands(MAV.MAV_CMD_NAV_LAND, t1), 2, "geofence NAV_LAND", period=0.1)
        h.wait_for(lambda: h.value("geofence_actions") >= 1 and h.diag.get("geofence_ok") == "False", 3,
                   "geofence on /diagnostics")
    finally:
        h.close()
        _stop(proc, tmp_path)
        fake.close()


@pytest.mark.wall_clock
def test_node_estop_latency_latch_and_reset(tmp_path):
    from std_srvs.srv import Trigger

    port = free_udp_port()
    fake = FakeAutopilot(port, disarm_after_land_s=0.1)
    proc, domain_id = _start_node(tmp_path, port, "control_hz:=20.0", "command_timeout_s:=0.1")
    h = Harness(domain_id)
    try:
        h.wait_for(lambda: h.diag.get("lifecycle") == "active", 15, "autostart activation")
        latencies = []
        for attempt in range(3):
            t0 = time.monotonic()
            h.stream_until(lambda: _flying(fake, t0) and h.diag.get("link_state") == "flying", 8, "flying")
            sent = h.estop(True)
            h.stream_until(lambda: time.monotonic() - sent > 0.3, 1, "")  # the actor keeps commanding
            lands = fake.commands(MAV.MAV_CMD_NAV_LAND, sent)
            assert lands, "no NAV_LAND after the e-stop"
            latencies.append((lands[0][0] - sent) * 1000)
            assert not [m for _, m in fake.messages("SET_ATTITUDE_TARGET", lands[0][0] + 0.02)]
            response = h.call(Trigger, "/quadrotor/reset_estop", Trigger.Request())
            assert not response.success and "asserted" in response.message  # /estop still True
            h.estop(False)
            h.spin(0.1)
            assert h.call(Trigger, "/quadrotor/reset_estop", Trigger.Request()).success
        assert sorted(latencies)[1] <= 20.0, latencies  # median of three
        h.wait_for(lambda: h.value("estop_trips") == 3 and h.value("estop_resets") == 3, 3, "counters")
    finally:
        h.close()
        _stop(proc, tmp_path)
        fake.close()
