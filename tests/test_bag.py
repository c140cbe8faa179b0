"""`robot-rl record-bag`: known messages published by another process are recorded to MCAP and decode
back, field by field, with mcap_ros2 (the reader Foxglove's Python tooling uses)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

pytest.importorskip("rclpy")
pytest.importorskip("mcap_ros2")

from mcap_ros2._dynamic import generate_dynamic  # noqa: E402
from mcap_ros2.reader import read_ros2_messages  # noqa: E402
from rclpy.serialization import serialize_message  # noqa: E402

from robot_rl.ros.bag import message_definition, normalize_type  # noqa: E402
from robot_rl.ros.graph import loopback_environment  # noqa: E402
from robot_rl.ros.probe import fresh_domain_id  # noqa: E402

N = 5

# The publisher process: one latched String published before anyone listens, then N messages on each
# of three reliable topics once the recorder has subscribed to all of them.
PUBLISHER = textwrap.dedent(f"""
    import sys, time
    import numpy as np
    import rclpy
    from rclpy.qos import QoSProfile, DurabilityPolicy, ReliabilityPolicy
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import String
    from robot_rl.ros.messages import image_to_msg, ns_to_stamp

    rclpy.init()
    node = rclpy.create_node("bag_test_publisher")
    latched = node.create_publisher(String, "/test/latched", QoSProfile(
        depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE))
    latched.publish(String(data="latched before the recorder started"))
    pubs = {{"image": node.create_publisher(Image, "/test/image", 10),
             "joints": node.create_publisher(JointState, "/test/joints", 10),
             "text": node.create_publisher(String, "/test/text", 10)}}
    end = time.monotonic() + 60
    while any(p.get_subscription_count() == 0 for p in pubs.values()):
        rclpy.spin_once(node, timeout_sec=0.05)
        if time.monotonic() > end:
            sys.exit("the recorder never subscribed")
    time.sleep(0.3)
    for i in range({N}):
        stamp = ns_to_stamp(1_700_000_000_000_000_000 + i * 1_000_000)
        img = (np.arange(6 * 8 * 3, dtype=np.uint16).reshape(6, 8, 3) * (i + 1) % 256).astype(np.uint8)
        pubs["image"].publish(image_to_msg(img, stamp, f"cam_{{i}}"))
        js = JointState(name=["shoulder", "elbow"], position=[i * 0.5, -i * 0.25], velocity=[0.0, float(i)],
                        effort=[])
        js.header.stamp = stamp
        js.header.frame_id = "base"
        pubs["joints"].publish(js)
        pubs["text"].publish(String(data=f"message {{i}} \\u00e9"))
        time.sleep(0.05)
    time.sleep(1.0)
    node.destroy_node()
    rclpy.shutdown()
""")


def _record(tmp_path, domain_id, *extra):
    env = loopback_environment(domain_id)
    log = tmp_path / "record.log"
    cmd = [sys.executable, "-m", "robot_rl.cli", "record-bag", *extra]
    return subprocess.Popen(cmd, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT), log


def test_record_bag_round_trips_known_messages(tmp_path):
    domain_id = fresh_domain_id()
    out = tmp_path / "run.mcap"
    recorder, log = _record(tmp_path, domain_id, "--topics", "/test/image", "test/joints", "/test/text",
                            "/test/latched", "--out", str(out))
    publisher = subprocess.Popen([sys.executable, "-c", PUBLISHER], env=loopback_environment(domain_id),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pub_out, _ = publisher.communicate(timeout=90)
        assert publisher.returncode == 0, pub_out
    finally:
        recorder.send_signal(signal.SIGINT)  # Ctrl-C
        code = recorder.wait(timeout=30)
        publisher.kill()
    assert code == 0, log.read_text()
    assert "wrote" in log.read_text()

    by_topic: dict[str, list] = {}
    for m in read_ros2_messages(str(out)):
        by_topic.setdefault(m.channel.topic, []).append(m)
    assert sorted(by_topic) == ["/test/image", "/test/joints", "/test/latched", "/test/text"]
    assert {t: ms[0].schema.name for t, ms in by_topic.items()} == {
        "/test/image": "sensor_msgs/msg/Image", "/test/joints": "sensor_msgs/msg/JointState",
        "/test/text": "std_msgs/msg/String", "/test/latched": "std_msgs/msg/String"}
    assert all(m.channel.message_encoding == "cdr" and m.schema.encoding == "ros2msg"
               for ms in by_topic.values() for m in ms)
    assert [m.ros_msg.data for m in by_topic["/test/latched"]] == ["latched before the recorder started"]

    images, joints, texts = by_topic["/test/image"], by_topic["/test/joints"], by_topic["/test/text"]
    assert len(images) == len(joints) == len(texts) == N
    for i, (im, js, tx) in enumerate(zip(images, joints, texts)):
        stamp_ns = 1_700_000_000_000_000_000 + i * 1_000_000
        img = im.ros_msg
        assert (img.header.stamp.sec, img.header.stamp.nanosec) == divmod(stamp_ns, 1_000_000_000)
        assert img.header.frame_id == f"cam_{i}"
        assert (img.height, img.width, img.encoding, img.is_bigendian, img.step) == (6, 8, "rgb8", 0, 24)
        expected = (np.arange(6 * 8 * 3, dtype=np.uint16).reshape(6, 8, 3) * (i + 1) % 256).astype(np.uint8)
        np.testing.assert_array_equal(np.frombuffer(bytes(img.data), np.uint8).reshape(6, 8, 3), expected)
        j = js.ros_msg
        assert (j.header.stamp.sec, j.header.stamp.nanosec, j.header.frame_id) == \
            (*divmod(stamp_ns, 1_000_000_000), "base")
        assert list(j.name) == ["shoulder", "elbow"]
        assert list(j.position) == [i * 0.5, -i * 0.25] and list(j.velocity) == [0.0, float(i)]
        assert list(j.effort) == []
        assert tx.ros_msg.data == f"message {i} \u00e9"
        for m in (im, js, tx):
            assert m.publish_time_ns > 0 and m.log_time_ns >= m.publish_time_ns - 1_000_000_000
    assert all(a.log_time_ns <= b.log_time_ns for a, b in zip(texts, texts[1:]))


# A topic that has a subscriber for a while before its best-effort publisher appears (a loaded machine's
# discovery: the session's actor was seen on /joint_states before the simulator's sensor-QoS publisher).
LATE_BEST_EFFORT_PUBLISHER = textwrap.dedent(f"""
    import sys, time
    import rclpy
    from rclpy.qos import qos_profile_sensor_data
    from std_msgs.msg import String

    rclpy.init()
    node = rclpy.create_node("bag_test_late_publisher")
    node.create_subscription(String, "/test/sensor", lambda msg: None, qos_profile_sensor_data)
    end = time.monotonic() + 3.0  # the recorder polls the graph every 0.5 s meanwhile
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    pub = node.create_publisher(String, "/test/sensor", qos_profile_sensor_data)
    end = time.monotonic() + 60
    while pub.get_subscription_count() < 2:  # ours and the recorder's
        rclpy.spin_once(node, timeout_sec=0.05)
        if time.monotonic() > end:
            sys.exit("the recorder never subscribed with a QoS this publisher can deliver to")
    time.sleep(0.3)
    for i in range({N}):
        pub.publish(String(data=f"sample {{i}}"))
        time.sleep(0.05)
    time.sleep(1.0)
    node.destroy_node()
    rclpy.shutdown()
""")


def test_record_bag_waits_for_a_publisher_to_match_its_qos(tmp_path):
    domain_id = fresh_domain_id()
    out = tmp_path / "late.mcap"
    recorder, log = _record(tmp_path, domain_id, "--topics", "/test/sensor", "--out", str(out))
    publisher = subprocess.Popen([sys.executable, "-c", LATE_BEST_EFFORT_PUBLISHER],
                                 env=loopback_environment(domain_id), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
    try:
        pub_out, _ = publisher.communicate(timeout=90)
        assert publisher.returncode == 0, pub_out + log.read_text()
    finally:
        recorder.send_signal(signal.SIGINT)
        code = recorder.wait(timeout=30)
        publisher.kill()
    assert code == 0, log.read_text()
    assert [m.ros_msg.data for m in read_ros2_messages(str(out))] == [f"sample {i}" for i in range(N)]


def test_record_bag_stops_after_duration_and_refuses_to_overwrite(tmp_path):
    domain_id = fresh_domain_id()
    out = tmp_path / "empty.mcap"
    start = time.monotonic()
    recorder, log = _record(tmp_path, domain_id, "--topics", "/nobody/publishes", "--out", str(out),
                            "--duration", "1.0")
    assert recorder.wait(timeout=30) == 0, log.read_text()
    assert time.monotonic() - start < 20
    assert "never saw /nobody/publishes" in log.read_text()
    assert list(read_ros2_messages(str(out))) == []  # a complete, readable (empty) file
    again, log = _record(tmp_path, domain_id, "--topics", "/x", "--out", str(out), "--duration", "1")
    assert again.wait(timeout=30) == 2 and "exists" in log.read_text()


@pytest.mark.parametrize("prefer_files", [True, False])
@pytest.mark.parametrize("type_name", ["sensor_msgs/msg/CameraInfo", "sensor_msgs/JointState",
                                       "diagnostic_msgs/msg/DiagnosticArray", "geometry_msgs/msg/PoseStamped"])
def test_message_definitions_decode_what_rclpy_serialises(type_name, prefer_files):
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
    from geometry_msgs.msg import PoseStamped
    from sensor_msgs.msg import CameraInfo, JointState

    samples = {
        "CameraInfo": CameraInfo(width=64, height=48, distortion_model="plumb_bob", d=[0.1, -0.2, 0.0, 0.0, 0.01],
                                 k=[float(v) for v in range(9)], p=[float(v) for v in range(12)]),
        "JointState": JointState(name=["a", "b"], position=[1.0, 2.0], velocity=[], effort=[3.5]),
        "DiagnosticArray": DiagnosticArray(status=[DiagnosticStatus(level=DiagnosticStatus.WARN, name="cam",
                                                                    values=[KeyValue(key="fps", value="29.9")])]),
        "PoseStamped": PoseStamped(),
    }
    full = normalize_type(type_name)
    msg = samples[full.rsplit("/", 1)[-1]]
    if hasattr(msg, "header"):
        msg.header.frame_id = "frame"
        msg.header.stamp.sec, msg.header.stamp.nanosec = 12, 345
    if full.endswith("PoseStamped"):
        msg.pose.position.x, msg.pose.orientation.w = 1.5, 1.0
    text = message_definition(type_name, prefer_files=prefer_files)
    assert text.count("MSG: std_msgs/Header") == 1 and text.count("MSG: builtin_interfaces/Time") == 1
    decoded = generate_dynamic(full, text)[full](serialize_message(msg))

    def compare(ours, theirs):
        for name in ours.get_fields_and_field_types():
            a, b = getattr(ours, name), getattr(theirs, name)
            if hasattr(a, "get_fields_and_field_types"):
                compare(a, b)
            elif isinstance(a, list) and a and hasattr(a[0], "get_fields_and_field_types"):
                assert len(a) == len(b)
                for x, y in zip(a, b):
                    compare(x, y)
            elif isinstance(a, (bytes, str, int, float, bool)):
                assert a == b or (isinstance(a, bytes) and a == bytes([b])), (name, a, b)
            else:
                assert list(a) == list(b), (name, a, b)

    compare(msg, decoded)
