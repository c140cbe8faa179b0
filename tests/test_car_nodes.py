"""The race car through ROS 2: message conventions and the practice state machine (car_io), the VESC
codec, the simulated car node (lockstep and realtime) and the real car node against a fake VESC on
a pseudo-terminal, each node a separate process talking over loopback DDS."""

from __future__ import annotations

import json
import math
import os
import select
import struct
import threading
import time
import tty

import numpy as np
import pytest
import yaml
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from sensor_msgs.msg import CameraInfo, Image, Imu
from std_msgs.msg import Bool, String
from std_srvs.srv import Trigger

from robot_rl.robots.car.control import PracticeConfig
from robot_rl.robots.car.sim import car_state_observation
from robot_rl.hardware.files import hardware_path
from robot_rl.hardware.safety import Rejected
from robot_rl.robots.car.hardware import (COMM_GET_VALUES, COMM_SET_RPM, COMM_SET_SERVO_POS, GET_VALUES_REQUEST, CarLimits,
                                    PacketDecoder, VescConfig, VescError, VescLink, WheelOdometry, crc16, drive_packets,
                                    erpm_to_speed, frame, load_car_hardware, parse_car_hardware, parse_values, set_rpm,
                                    set_servo_pos, speed_to_erpm, steer_to_servo)
from robot_rl.ros import qos
from robot_rl.ros.car_io import (CarPractice, PracticeEvent, cmd_vel_msg, imu_msg, msgs_to_sensors, odometry_msg,
                                 parse_cmd_vel, parse_imu, parse_practice, practice_msg, quat_yaw)
from robot_rl.ros.hardware_node import ESTOP_QOS
from robot_rl.ros.messages import msg_to_image, stamp_to_ns
from robot_rl.ros.probe import RosProbe, start_node, stop_node

LIMITS = CarLimits(max_speed=4.5, max_reverse_speed=1.0, max_steer=0.5)
VESC = VescConfig(erpm_per_mps=4614.0, servo_center=0.5, servo_per_rad=-0.85, servo_min=0.05, servo_max=0.95)
PERIOD_NS = 50_000_000  # car_sim's default 20 Hz


# ---- car_io: commands, state messages, practice ----------------------------------------------------


def test_cmd_vel_is_clamped_to_the_limits_and_bad_values_are_refused_with_the_field_named():
    cmd = parse_cmd_vel(cmd_vel_msg(2.0, -0.3), LIMITS)
    assert (cmd.speed, cmd.steer, cmd.clamped, cmd.ignored) == (2.0, -0.3, (), ())
    cmd = parse_cmd_vel(cmd_vel_msg(10.0, 1.0), LIMITS)
    assert (cmd.speed, cmd.steer, cmd.clamped) == (4.5, 0.5, ("linear.x", "angular.z"))
    cmd = parse_cmd_vel(cmd_vel_msg(-3.0, -0.2), LIMITS)
    assert (cmd.speed, cmd.clamped) == (-1.0, ("linear.x",))  # reverse has its own limit
    msg = cmd_vel_msg(1.0, 0.1)
    msg.linear.y, msg.angular.x = 0.5, -0.1
    assert parse_cmd_vel(msg, LIMITS).ignored == ("linear.y", "angular.x")
    for field in ("linear.x", "angular.z", "linear.z"):
        msg = cmd_vel_msg(1.0, 0.1)
        setattr(getattr(msg, field.split(".")[0]), field.split(".")[1], math.nan)
        with pytest.raises(Rejected, match=field.replace(".", r"\.")) as err:
            parse_cmd_vel(msg, LIMITS)
        assert err.value.reason == "nan"
    with pytest.raises(Rejected, match="inf"):
        parse_cmd_vel(cmd_vel_msg(math.inf, 0.0), LIMITS)


def test_odometry_and_imu_round_trip_to_the_observation_the_env_builds():
    yaw = 0.8
    sensors = {"accel": np.array([0.5, -0.2, 9.9]), "gyro": np.array([0.01, -0.02, 0.6]),
               "velocity": np.array([2.1, 0.1, 0.0]), "position": np.array([3.0, -1.5, 0.06]), "yaw": np.array(yaw),
               "quat": np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])}
    odom, imu = odometry_msg(sensors, 123_000_000), imu_msg(sensors, 123_000_000)
    assert (odom.header.frame_id, odom.child_frame_id, imu.header.frame_id) == ("odom", "base_link", "base_link")
    assert stamp_to_ns(odom.header.stamp) == stamp_to_ns(imu.header.stamp) == 123_000_000
    assert odom.twist.twist.linear.x == 2.1 and odom.twist.twist.angular.z == 0.6  # body frame (REP-105)
    assert (odom.pose.pose.orientation.w, odom.pose.pose.orientation.z) == pytest.approx(tuple(sensors["quat"][[0, 3]]))
    assert imu.linear_acceleration.z == 9.9  # gravity included (REP-145)
    rebuilt = msgs_to_sensors(odom, imu)
    for key, value in sensors.items():
        np.testing.assert_allclose(rebuilt[key], value, atol=1e-12, err_msg=key)
    checkpoint, previous = np.array([5.0, 2.0]), np.array([0.3, -0.1])
    np.testing.assert_array_equal(car_state_observation(rebuilt, checkpoint, previous),
                                  car_state_observation(sensors, checkpoint, previous))
    assert quat_yaw(sensors["quat"]) == pytest.approx(yaw)

    no_orientation = imu_msg(sensors, 1)
    no_orientation.orientation_covariance[0] = -1.0  # an IMU without orientation (sensor_msgs convention)
    no_orientation.orientation.w = 0.0
    assert parse_imu(no_orientation)["quat"] is None
    bad = imu_msg(sensors, 1)
    bad.linear_acceleration.x = math.nan
    with pytest.raises(Rejected, match="linear_acceleration"):
        msgs_to_sensors(odom, bad)
    odom.header.frame_id = "map"
    with pytest.raises(Rejected, match="frames") as err:
        msgs_to_sensors(odom, imu)
    assert err.value.reason == "frame"


def test_practice_detects_stuck_and_crash_recovers_for_one_second_then_drives_again():
    config = PracticeConfig(stuck_window=5)
    practice = CarPractice(config, 20.0, 0.5, np.random.default_rng(0))
    resting = np.array([0.0, 0.0, 9.81])
    events = [practice.after_step(np.array([1.0, 2.0, 0.0]), resting, stamp) for stamp in range(5)]
    assert events[:4] == [None] * 4 and events[4] == PracticeEvent("recovering", "stuck", 4)
    commands = []
    for stamp in range(5, 25):
        commands.append(practice.recovery_command())
        event = practice.after_step(np.array([1.0, 2.0, 0.0]), resting, stamp)
        assert (event is None) == (stamp < 24)
    assert event == PracticeEvent("driving", None, 24)  # 20 steps = recovery_s at 20 Hz
    speeds, steers = zip(*commands)
    assert set(speeds) == {-1.0} and len(set(steers)) == 1 and abs(steers[0]) <= 0.5
    with pytest.raises(RuntimeError):
        practice.recovery_command()  # over: the actor drives again
    assert practice.after_step(np.zeros(3), np.array([25.0, 0.0, 9.81]), 30) == PracticeEvent("recovering", "crash", 30)
    assert practice.counts == {"crash": 1, "stuck": 1, "recoveries_done": 1}
    assert practice.reset(31) == PracticeEvent("driving", None, 31) and practice.state == "driving"
    assert practice.reset(32) is None
    # without an IMU only the stuck detector runs
    blind = CarPractice(config, 20.0, 0.5, np.random.default_rng(0))
    assert [blind.after_step(np.zeros(3), None, s) for s in range(5)][-1].event == "stuck"

    event = parse_practice(practice_msg(PracticeEvent("recovering", "crash", 7)))
    assert event == PracticeEvent("recovering", "crash", 7)
    assert json.loads(practice_msg(PracticeEvent("driving", None, 8)).data) == {"state": "driving", "event": None,
                                                                               "stamp_ns": 8}
    for bad in ("not json", '{"state": "flying", "event": null, "stamp_ns": 1}', '{"state": "driving"}',
                '{"state": "driving", "event": "bored", "stamp_ns": 1}'):
        with pytest.raises(Rejected, match="car/practice"):
            parse_practice(String(data=bad))


# ---- the VESC codec ------------------------------------------------------------------------------------


def test_vesc_crc_and_packets_match_hand_computed_bytes():
    assert crc16(b"123456789") == 0x31C3  # the CRC-16/XMODEM check value
    assert GET_VALUES_REQUEST == bytes([0x02, 0x01, 0x04, 0x40, 0x84, 0x03])  # the well-known request
    # COMM_SET_RPM 1000: 08 | 00 00 03 e8, CRC 0x2b58
    assert set_rpm(1000) == bytes.fromhex("02 05 08 000003e8 2b58 03")
    assert set_rpm(-4614) == bytes.fromhex("02 05 08 ffffedfa ae56 03")  # two's complement
    # COMM_SET_SERVO_POS 0.5: 0c | 01 f4 (500 thousandths), CRC 0xe9cb
    assert set_servo_pos(0.5) == bytes.fromhex("02 03 0c 01f4 e9cb 03")
    with pytest.raises(ValueError, match="servo position"):
        set_servo_pos(1.2)
    long = frame(bytes(300))
    assert long[:3] == bytes([0x03, 0x01, 0x2C]) and long[-1] == 0x03 and len(long) == 3 + 300 + 3
    # conversions, clamped to the servo's range
    assert speed_to_erpm(4.5, VESC) == 20763 and erpm_to_speed(20763, VESC) == pytest.approx(4.5, abs=1e-4)
    assert steer_to_servo(0.0, VESC) == 0.5 and steer_to_servo(0.5, VESC) == pytest.approx(0.075)
    assert steer_to_servo(-1.0, VESC) == 0.95
    assert drive_packets(1.0, 0.0, VESC) == set_rpm(4614) + set_servo_pos(0.5)


def _values_payload(erpm: int, fault: int = 0, extra: bytes = b"") -> bytes:
    """A COMM_GET_VALUES reply: 25.0 C FET, 30.0 C motor, 1.5 A motor, 1.2 A in, duty 0.1, 12.4 V."""
    return struct.pack(">BhhiiiihihiiiiiiB", COMM_GET_VALUES, 250, 300, 150, 120, 0, 0, 100, erpm, 124,
                       0, 0, 0, 0, 77, 77, fault) + extra


def test_vesc_decoder_resynchronises_over_noise_and_values_are_parsed():
    decoder = PacketDecoder()
    good = frame(_values_payload(-2000, fault=2, extra=bytes(20)))  # newer firmware appends fields
    corrupt = bytearray(frame(_values_payload(1)))
    corrupt[10] ^= 0xFF
    stream = b"\x00\xff" + bytes(corrupt) + good + set_rpm(5)
    payloads = []
    for i in range(0, len(stream), 7):  # split anywhere
        payloads += decoder.feed(stream[i:i + 7])
    assert [p[0] for p in payloads] == [COMM_GET_VALUES, COMM_SET_RPM]
    assert decoder.counters["bad_crc"] == 1 and decoder.counters["skipped_bytes"] >= 2
    values = parse_values(payloads[0])
    assert (values.erpm, values.input_voltage_v, values.temp_fet_c, values.motor_current_a) == (-2000, 12.4, 25.0, 1.5)
    assert (values.duty, values.tachometer, values.fault) == (0.1, 77, "under_voltage")
    with pytest.raises(VescError, match="at least"):
        parse_values(_values_payload(0)[:20])
    with pytest.raises(VescError, match="not a COMM_GET_VALUES"):
        parse_values(payloads[1])


def test_vesc_link_over_a_loopback_port_and_a_clear_error_for_a_missing_one():
    link = VescLink("loop://")
    link.write(set_rpm(100) + frame(_values_payload(4614)))  # loop:// echoes: our command, then a "reply"
    values = link.read_values()
    assert values is not None and values.erpm == 4614
    assert link.counters["other_packets"] == 1 and link.read_values() is None
    link.close()
    with pytest.raises(VescError, match=r"cannot open the VESC at '/dev/ttyNOPE'.*plugged in"):
        VescLink("/dev/ttyNOPE")
    with pytest.raises(VescError, match="no VESC port"):
        VescLink("")


def test_car_hardware_yaml_is_checked_field_by_field():
    hw = load_car_hardware("car_vesc")
    assert hw.limits == LIMITS and hw.vesc == VESC and hw.imu_topic == "imu/data"
    data = yaml.safe_load(hardware_path("car_vesc").read_text())
    assert parse_car_hardware(data).practice == PracticeConfig()  # the YAML states FastRLAP's defaults
    for change, message in ((("command", "max_steer", 3.0), "command.max_steer"),
                            (("vesc", "erpm_per_mps", "fast"), "vesc.erpm_per_mps"),
                            (("vesc", "servo_center", 0.99), "servo_center"),
                            (("practice", "recovery_speed", -2.0), "recovery_speed"),
                            (("practice", "stuck_secs", 2.0), "practice: .*stuck_secs")):
        section, key, value = change
        broken = yaml.safe_load(hardware_path("car_vesc").read_text())
        broken[section][key] = value
        with pytest.raises(ValueError, match=message):
            parse_car_hardware(broken)


def test_wheel_odometry_integrates_speed_along_the_heading():
    odometry = WheelOdometry()
    for t in np.arange(0.0, 1.0001, 0.05):
        odometry.update(float(t), 2.0, math.pi / 2)  # a quarter turn in 1 s at 2 m/s
    assert odometry.yaw == pytest.approx(math.pi / 2)
    assert np.linalg.norm(odometry.position[:2]) == pytest.approx(2 * math.sqrt(2) * 2 / math.pi, rel=0.05)
    assert quat_yaw(odometry.quat) == pytest.approx(math.pi / 2)


# ---- the simulated car -----------------------------------------------------------------------------------


class CarTopics:
    """What a car node publishes, as the test sees it."""

    def __init__(self, probe: RosProbe):
        self.probe = probe
        self.odom: list[Odometry] = []
        self.imu: list[Imu] = []
        self.images: list[Image] = []
        self.info: list[CameraInfo] = []
        self.practice: list[String] = []
        node = probe.node
        node.create_subscription(Odometry, "car/odom", self.odom.append, qos.SENSOR)
        node.create_subscription(Imu, "car/imu", self.imu.append, qos.SENSOR)
        node.create_subscription(Image, "front/color/image_raw", self.images.append, qos.SENSOR)
        node.create_subscription(CameraInfo, "front/color/camera_info", self.info.append, qos.SENSOR)
        node.create_subscription(String, "car/practice", self.practice.append, qos.EVENTS)
        self.cmd = node.create_publisher(Twist, "car/cmd_vel", qos.COMMAND)
        self.estop = node.create_publisher(Bool, "/estop", ESTOP_QOS)

    @property
    def stamp(self) -> int:
        return stamp_to_ns(self.odom[-1].header.stamp)

    def step(self, msg: Twist) -> Odometry:
        """Lockstep: one command, the next observation."""
        before = self.stamp
        self.cmd.publish(msg)
        self.probe.wait_for(lambda: self.stamp > before, 5, "the next observation")
        return self.odom[-1]

    def stamped(self, topic: list, stamp: int):
        return next((m for m in reversed(topic) if stamp_to_ns(m.header.stamp) == stamp), None)


@pytest.fixture(scope="module")
def lockstep_car(tmp_path_factory):
    log = tmp_path_factory.mktemp("car_sim") / "car_sim.log"
    proc, domain_id = start_node("robot_rl.nodes.car_sim", log, "image_size:=32", "randomization:=''", "seed:=1")
    probe = RosProbe(domain_id, "car_sim_probe")
    probe.watched = "car_sim"
    topics = CarTopics(probe)
    try:
        probe.wait_for(lambda: topics.odom and topics.images and topics.imu and topics.info, 30,
                       "the first observation")
        yield topics
    finally:
        probe.close()
        stop_node(proc, log)


def _heading(odom: Odometry) -> np.ndarray:
    o = odom.pose.pose.orientation
    yaw = quat_yaw([o.w, o.x, o.y, o.z])
    return np.array([math.cos(yaw), math.sin(yaw)])


def _xy(odom: Odometry) -> np.ndarray:
    return np.array([odom.pose.pose.position.x, odom.pose.pose.position.y])


def test_car_sim_steps_in_lockstep_refuses_nan_and_obeys_the_estop(lockstep_car):
    car, probe = lockstep_car, lockstep_car.probe
    stamp = car.stamp
    image = car.stamped(car.images, stamp)
    assert image is not None and car.stamped(car.imu, stamp) is not None  # one stamp per observation
    assert msg_to_image(image).shape == (32, 32, 3) and image.encoding == "rgb8"
    info = car.info[-1]
    assert (info.width, info.height, info.header.frame_id) == (32, 32, image.header.frame_id) and info.k[0] > 0

    nan = cmd_vel_msg(math.nan, 0.0)
    car.cmd.publish(nan)
    probe.wait_for(lambda: probe.value("rejected_commands") >= 1, 10, "the NaN command refused")
    assert json.loads(probe.diag["rejected_by_reason"]) == {"nan": 1} and car.stamp == stamp  # nothing simulated

    start, heading = _xy(car.odom[-1]), _heading(car.odom[-1])
    sideways = cmd_vel_msg(2.0, 0.0)
    sideways.linear.y = 1.0
    car.step(sideways)
    car.step(cmd_vel_msg(10.0, 0.0))  # clamped to 4.5 m/s
    for _ in range(13):
        odom = car.step(cmd_vel_msg(2.0, 0.0))
    assert car.stamp == stamp + 15 * PERIOD_NS  # one 50 ms period per command
    probe.wait_for(lambda: car.stamped(car.images, car.stamp) and car.stamped(car.imu, car.stamp), 5,
                   "the image and IMU sample of the last observation")
    assert odom.twist.twist.linear.x > 1.0 and (_xy(odom) - start) @ heading > 0.5  # forward
    probe.wait_for(lambda: probe.value("steps") >= 15, 10, "diagnostics")
    assert probe.value("clamped_commands") == 1 and json.loads(probe.diag["ignored_fields"]) == {"linear.y": 1}

    car.estop.publish(Bool(data=True))
    probe.wait_for(lambda: probe.value("estopped") == 1, 10, "the e-stop")
    for _ in range(20):  # full speed asked, speed 0 given: it stops
        odom = car.step(cmd_vel_msg(4.0, 0.0))
    stopped_at = _xy(odom)
    for _ in range(5):
        odom = car.step(cmd_vel_msg(4.0, 0.0))
    assert abs(odom.twist.twist.linear.x) < 0.05 and np.linalg.norm(_xy(odom) - stopped_at) < 0.02
    car.estop.publish(Bool(data=False))
    assert probe.call(Trigger, "/car_sim/reset_estop", Trigger.Request()).success
    assert car.step(cmd_vel_msg(2.0, 0.0)).twist.twist.linear.x > 0.0  # driving again

    reply = probe.call(Trigger, "/car_sim/reset", Trigger.Request())
    first = json.loads(reply.message)["stamp_ns"]
    assert reply.success and first > stamp
    probe.wait_for(lambda: car.stamp == first, 5, "the first observation after the reset")
    np.testing.assert_allclose(_xy(car.odom[-1]), start, atol=0.05)  # back on the start line


def test_car_sim_crash_or_stuck_at_the_wall_starts_a_recovery_then_driving(lockstep_car):
    car, probe = lockstep_car, lockstep_car.probe
    assert probe.call(Trigger, "/car_sim/reset", Trigger.Request()).success
    car.practice.clear()
    for _ in range(200):  # straight on into the outside wall of the first bend
        car.step(cmd_vel_msg(3.0, 0.0))
        if car.practice:
            break
    probe.spin(0.2)
    started = parse_practice(car.practice[0])
    assert started.state == "recovering" and started.event in ("crash", "stuck"), car.practice
    assert car.stamped(car.odom, started.stamp_ns) is not None  # stamped with the observation that shows it
    speeds = []
    for _ in range(30):  # the actor keeps asking for full speed ahead; the car backs out
        speeds.append(car.step(cmd_vel_msg(3.0, 0.0)).twist.twist.linear.x)
        if len(car.practice) > 1:
            break
    probe.spin(0.2)
    ended = parse_practice(car.practice[1])
    assert ended.state == "driving" and ended.event is None
    assert ended.stamp_ns - started.stamp_ns == 20 * PERIOD_NS  # 1 s of reversing
    assert min(speeds) < -0.3
    probe.wait_for(lambda: probe.value("recoveries_done") >= 1, 10, "diagnostics")
    assert probe.value(started.event) >= 1 and probe.value("recovery_steps") >= 20


def test_car_sim_realtime_watchdog_stops_a_car_without_commands(tmp_path):
    log = tmp_path / "car_sim.log"
    proc, domain_id = start_node("robot_rl.nodes.car_sim", log, "clock_mode:=realtime", "image_size:=16",
                                 "randomization:=''", "command_timeout_s:=0.1")
    probe = RosProbe(domain_id, "car_sim_rt_probe")
    probe.watched = "car_sim"
    car = CarTopics(probe)
    try:
        probe.wait_for(lambda: car.odom, 30, "the first observation")
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            car.cmd.publish(cmd_vel_msg(1.5, 0.0))
            probe.spin(0.04)
        assert max(m.twist.twist.linear.x for m in car.odom[-20:]) > 0.7
        probe.spin(1.5)  # no commands: speed 0 after command_timeout_s
        probe.wait_for(lambda: probe.value("stale_commands") >= 1, 5, "the watchdog")
        assert abs(car.odom[-1].twist.twist.linear.x) < 0.1
        assert probe.value("stale_commands") >= 1 and probe.value("steps") > 40  # it kept stepping, at speed 0
    finally:
        probe.close()
        stop_node(proc, log)


# ---- the real car against a fake VESC --------------------------------------------------------------------


class FakeVesc:
    """A VESC on the far side of a pseudo-terminal: records the SET_RPM / SET_SERVO_POS it receives
    (with their arrival time) and answers COMM_GET_VALUES with the last commanded RPM."""

    def __init__(self):
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        self.port = os.ttyname(self.slave)
        self.rpm: list[tuple[float, int]] = []
        self.servo: list[tuple[float, float]] = []
        self.decoder = PacketDecoder()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not select.select([self.master], [], [], 0.05)[0]:
                continue
            try:
                data = os.read(self.master, 4096)
            except OSError:
                return  # the node closed the port
            for payload in self.decoder.feed(data):
                now = time.monotonic()
                if payload[0] == COMM_SET_RPM:
                    self.rpm.append((now, struct.unpack(">i", payload[1:5])[0]))
                elif payload[0] == COMM_SET_SERVO_POS:
                    self.servo.append((now, struct.unpack(">h", payload[1:3])[0] / 1000))
                elif payload[0] == COMM_GET_VALUES:
                    os.write(self.master, frame(_values_payload(self.rpm[-1][1] if self.rpm else 0)))

    def rpm_since(self, t: float) -> list[int]:
        return [rpm for when, rpm in list(self.rpm) if when >= t]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        os.close(self.master)
        os.close(self.slave)


def _drive(probe: RosProbe, car: CarTopics, seconds: float, speed: float, steer: float = 0.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        car.cmd.publish(cmd_vel_msg(speed, steer))
        probe.spin(0.04)


def test_car_node_drives_the_vesc_clamped_stops_on_stale_commands_recovers_and_obeys_the_estop(tmp_path):
    vesc = FakeVesc()
    log = tmp_path / "car.log"
    proc, domain_id = start_node("robot_rl.nodes.car", log, f"port:={vesc.port}", "diagnostics_period_s:=0.2")
    probe = RosProbe(domain_id, "car_probe")
    probe.watched = "car"
    car = CarTopics(probe)
    imu_pub = probe.node.create_publisher(Imu, "imu/data", qos.SENSOR)
    try:
        probe.wait_for(lambda: probe.diag.get("lifecycle") == "active", 30, "activation (the VESC answering)")
        # the node's first control tick after activation may come a moment after the status says active
        probe.wait_for(lambda: vesc.rpm_since(0), 2, "the first command to the VESC")
        assert set(vesc.rpm_since(0)) == {0}  # no command yet: speed 0

        t = time.monotonic()
        _drive(probe, car, 0.5, 10.0, 1.0)  # both clamped: 4.5 m/s, 0.5 rad
        assert vesc.rpm_since(t)[-1] == 20763 and vesc.servo[-1][1] == pytest.approx(0.075)
        probe.wait_for(lambda: car.odom and car.odom[-1].twist.twist.linear.x == pytest.approx(4.5, abs=1e-3), 5,
                       "odometry from the VESC's RPM")
        assert car.odom[-1].header.frame_id == "odom"

        t = time.monotonic()  # the actor goes silent: speed 0 within command_timeout_s, steering held
        probe.spin(0.4)
        t_zero = next(when for when, rpm in vesc.rpm if when >= t and rpm == 0)
        assert t_zero - t < 0.25 and set(vesc.rpm_since(t_zero)) == {0}
        assert vesc.servo[-1][1] == pytest.approx(0.075)

        # a crash seen by the IMU: the car backs out for 1 s while the actor asks for 2 m/s ahead
        car.practice.clear()
        t = time.monotonic()
        _drive(probe, car, 0.3, 2.0)
        spike = imu_msg({"accel": [30.0, 0.0, 9.8], "gyro": [0.0, 0.0, 0.0], "quat": [1.0, 0.0, 0.0, 0.0]}, 0,
                        "imu_link")
        spike.header.stamp = probe.node.get_clock().now().to_msg()
        imu_pub.publish(spike)
        _drive(probe, car, 1.6, 2.0)
        states = [parse_practice(m) for m in car.practice]
        assert [(s.state, s.event) for s in states] == [("recovering", "crash"), ("driving", None)]
        assert (states[1].stamp_ns - states[0].stamp_ns) * 1e-9 == pytest.approx(1.0, abs=0.25)
        rpm = vesc.rpm_since(t)
        assert 9228 in rpm and -4614 in rpm[rpm.index(9228):] and rpm[-1] == 9228  # ahead, reverse, ahead
        assert car.imu and car.imu[-1].header.frame_id == "imu_link"  # republished, checked

        car.estop.publish(Bool(data=True))
        t = time.monotonic()
        probe.wait_for(lambda: 0 in vesc.rpm_since(t), 2, "speed 0 on the e-stop")
        t_zero = next(when for when, rpm in vesc.rpm if when >= t and rpm == 0)
        _drive(probe, car, 0.5, 2.0)
        assert set(vesc.rpm_since(t_zero)) == {0}  # latched: commands do not move it
        probe.wait_for(lambda: probe.diag.get("estop_latched") == "True", 5, "the latched e-stop in diagnostics")
        car.estop.publish(Bool(data=False))
        probe.spin(0.2)
        assert probe.call(Trigger, "/car/reset_estop", Trigger.Request()).success
        t = time.monotonic()
        _drive(probe, car, 0.3, 2.0)
        assert vesc.rpm_since(t)[-1] == 9228
        probe.wait_for(lambda: probe.value("clamped") >= 1 and probe.value("clamped_linear_x") >= 1, 5,
                       "clamps counted")
        car.cmd.publish(cmd_vel_msg(math.nan, 0.0))
        probe.wait_for(lambda: probe.value("reject_reason_nan") == 1 and probe.value("rejected_cmd_vel") == 1, 5,
                       "the NaN command refused")
        assert probe.value("control_errors") == 0
    finally:
        probe.close()
        stop_node(proc, log)
        vesc.close()


def test_car_node_exits_with_the_reason_when_the_vesc_is_missing(tmp_path):
    log = tmp_path / "car.log"
    proc, _ = start_node("robot_rl.nodes.car", log, "port:=/dev/ttyNOPE")
    assert proc.wait(timeout=30) == 2
    assert "cannot open the VESC at '/dev/ttyNOPE'" in log.read_text()


def test_car_nodes_replace_each_other_in_the_graph():
    from robot_rl.ros.graph import BACKEND_REPLACEMENTS, NODE_KINDS, build_graph

    assert NODE_KINDS["car_sim"].critical and NODE_KINDS["car"].critical
    assert BACKEND_REPLACEMENTS["real"]["car_sim"] == "car"
    config = {"robot_rl": {"nodes": ["car_sim", "arm_actor"]}, "car_sim": {"ros__parameters": {"track_seed": 3}}}
    sim = {spec.name: spec for spec in build_graph(config, "sim")}
    assert sim["car_sim"].parameters == {"track_seed": 3}
    assert sim["arm_actor"].parameters["reset_service"] == "/car_sim/reset"
    assert [spec.name for spec in build_graph(config, "real")] == ["car", "arm_actor"]
