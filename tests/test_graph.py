"""Integration: sim, actor and learner as separate processes talking over DDS (loopback only,
a domain id of their own), including malformed payloads and a learner killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from std_msgs.msg import UInt8MultiArray  # noqa: E402

from robot_rl.ros import qos  # noqa: E402
from robot_rl.ros.graph import fastdds_leftovers, loopback_environment  # noqa: E402
from robot_rl.ros.messages import bytes_to_uint8_multiarray  # noqa: E402
from robot_rl.ros.probe import RosProbe, fresh_domain_id, start_graph  # noqa: E402
from robot_rl.ros.supervisor import Supervisor  # noqa: E402
from robot_rl.transport import codec  # noqa: E402

SMALL = {
    "robot_rl.demos": {"episodes": 0},
    "arm_actor.eval_episodes": 2,
    "arm_actor.batch_transitions": 25,
    "arm_actor.resend_after_s": 1.0,
    "learner.warmup_transitions": 100,
    "learner.batch_size": 32,
    "learner.hidden_dims": [64, 64],
    "learner.publish_period_s": 0.5,
    "learner.checkpoint_period_s": 1.0,
    "learner.max_update_ratio": 0.0,
    "arm_actor.sync_updates_per_step": 0.0,  # run free: the actor must keep acting while the learner is down
}


class Observer(RosProbe):
    """The graph seen from the test: diagnostics of every node, and a way to inject payloads."""

    def __init__(self, domain_id: int):
        super().__init__(domain_id, "test_observer")
        self.transitions_pub = self.node.create_publisher(UInt8MultiArray, "rl/transitions", qos.TRANSITIONS)


def _start_graph(tmp_path: Path, overrides: dict):
    domain_id = fresh_domain_id()
    supervisor = start_graph("arm_lift", {**SMALL, **overrides}, tmp_path, domain_id)
    return supervisor, Observer(domain_id), domain_id


def _wait_exit(supervisor: Supervisor, name: str, timeout: float, observer: Observer) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        observer.spin(0.2)
        for node, code in supervisor.exited():
            if node.spec.name == name:
                return code
            raise AssertionError(f"{node.spec.name} exited with {code}:\n{supervisor.log_tail(node, 40)}")
    raise AssertionError(f"{name} did not finish within {timeout}s")


def _malformed_payloads() -> list[bytes]:
    good = codec.encode("transitions", {"obs": np.zeros((2, 33), np.float32)}, {"actor_id": "x", "seq": 0})
    nan_batch = codec.encode("transitions", {
        "obs": np.full((1, 33), np.nan, np.float32), "action": np.zeros((1, 4), np.float32),
        "reward": np.zeros(1, np.float32), "next_obs": np.zeros((1, 33), np.float32),
        "terminated": np.zeros(1, bool), "truncated": np.zeros(1, bool), "intervention": np.zeros(1, bool),
    }, {"actor_id": "intruder", "seq": 0})
    rng = np.random.default_rng(0)
    return [
        b"", b"RRLP", rng.bytes(1000), good[:-7], b"XXXX" + good[4:],
        good[:4] + b"\x63\x00" + good[6:],  # unknown codec version
        codec.encode("policy", {"w": np.zeros(3, np.float32)}, {"version": 1}),  # wrong kind
        good,  # missing fields
        nan_batch,  # NaN observations
    ] * 3


def test_fresh_domains_skip_fastdds_leftovers(tmp_path):
    """Domain 5's RTPS ports are 8650-8899: its shared-memory port files count, others do not."""
    for name in ("fastdds_port8661", "fastdds_port8661_el", "sem.fastdds_port8661_mutex", "fastdds_port8899",
                 "fastdds_port8900", "fastdds_port8649", "fastdds_0aebb41166210bdc"):
        (tmp_path / name).touch()
    leftovers = fastdds_leftovers(tmp_path)
    assert leftovers[5] == 4
    assert leftovers[4] == 1 and leftovers[6] == 1
    assert leftovers[7] == 0


def test_three_process_graph_delivers_everything_and_survives_garbage(tmp_path):
    # The actor waits for learner updates past its first 200 steps, so it cannot finish its 600 training steps
    # on the first policy (running free, it did in 3 s when the learner's first updates came late).
    supervisor, observer, _ = _start_graph(tmp_path, {"arm_actor.total_steps": 600,
                                                      "arm_actor.sync_updates_per_step": 1.0,
                                                      "arm_actor.sync_slack_steps": 200,
                                                      "learner.snapshot_every_transitions": 200})
    try:
        observer.wait_for(lambda: observer.value("transitions_received", "learner") > 0, 90, "first transitions")
        garbage = _malformed_payloads()
        for data in garbage:
            observer.transitions_pub.publish(bytes_to_uint8_multiarray(data))
        observer.wait_for(lambda: observer.value("rejected", "learner") >= len(garbage), 30, "rejections counted")
        observer.wait_for(lambda: observer.value("policy_version", "arm_actor") >= 2, 120, "policy updates reach actor")
        assert _wait_exit(supervisor, "arm_actor", 300, observer) == 0
    finally:
        codes = supervisor.stop()
        observer.close()
    assert codes.get("learner") == 0, codes
    evaluation = json.loads((tmp_path / "eval.json").read_text())
    learner = json.loads((tmp_path / "learner_summary.json").read_text())
    assert evaluation["episodes"] == 2
    assert evaluation["transitions_acked_all"] is True
    assert evaluation["transitions_sent"] == evaluation["train_steps"] == 600
    assert learner["transitions_received"] == evaluation["transitions_sent"]  # none lost, none twice
    assert learner["rejected"] == len(_malformed_payloads())
    assert learner["policy_version"] >= 2 and evaluation["policy_version"] >= 2
    # a pinned snapshot each time another 200 transitions were stored (success against steps, lockstep)
    key = (tmp_path / "secret.key").read_bytes()
    stored = [codec.decode(p.read_bytes(), expect_kind="policy", key=key).meta["transitions"]
              for p in sorted((tmp_path / "snapshots").glob("*.policy"))]
    assert len(stored) >= 2 and stored[0] >= 200, stored
    assert [n // 200 for n in stored] == sorted(set(n // 200 for n in stored)), stored  # one per 200, in order


def test_learner_killed_with_sigkill_resumes_and_loses_nothing(tmp_path):
    supervisor, observer, _ = _start_graph(tmp_path, {"arm_actor.total_steps": 1500})
    try:
        observer.wait_for(lambda: observer.value("updates", "learner") >= 50
                          and (tmp_path / "checkpoint.pt").exists(), 120, "learner training and checkpointed")
        observer.spin(1.5)  # at least one checkpoint after 50 updates
        before_updates = observer.value("updates", "learner")
        before_received = observer.value("transitions_received", "learner")
        learner = supervisor.nodes["learner"]
        os.killpg(learner.process.pid, signal.SIGKILL)
        learner.process.wait()
        del supervisor.nodes["learner"]
        observer.diagnostics.pop("learner", None)
        observer.spin(3.0)  # the actor keeps acting meanwhile, holding what it cannot deliver
        assert observer.value("outbox_pending", "arm_actor") > 0
        restarted = subprocess.Popen(learner.process.args, env=supervisor.env, start_new_session=True,
                                     stdout=open(tmp_path / "logs" / "learner-restart.log", "wb"),
                                     stderr=subprocess.STDOUT)
        learner.process = restarted
        supervisor.nodes["learner"] = learner
        observer.wait_for(lambda: observer.value("resumed", "learner") == 1.0, 90, "restarted learner reports resume")
        # step counter continues from the checkpoint, buffer restored from the journal
        assert observer.value("updates", "learner") >= 50
        assert observer.value("online_size", "learner") >= before_received
        assert _wait_exit(supervisor, "arm_actor", 400, observer) == 0
    finally:
        codes = supervisor.stop()
        observer.close()
    assert codes.get("learner") == 0, codes
    evaluation = json.loads((tmp_path / "eval.json").read_text())
    summary = json.loads((tmp_path / "learner_summary.json").read_text())
    assert evaluation["transitions_acked_all"] is True
    assert summary["transitions_received"] == evaluation["transitions_sent"] == 1500
    assert summary["updates"] > before_updates * 0.5
    assert summary["resumed"] is True


def test_realtime_sim_publishes_images_on_wall_clock_and_holds_on_stale_commands(tmp_path):
    from geometry_msgs.msg import TwistStamped
    from sensor_msgs.msg import CameraInfo, Image, JointState

    from robot_rl.ros.messages import msg_to_image

    domain_id = fresh_domain_id()
    env = loopback_environment(domain_id)
    sim = subprocess.Popen([sys.executable, "-m", "robot_rl.nodes.arm_sim", "--ros-args", "-p", "clock_mode:=realtime",
                            "-p", "publish_images:=true", "-p", "image_size:=64", "-p", "command_timeout_s:=0.3"],
                           env=env, stdout=open(tmp_path / "arm_sim.log", "wb"), stderr=subprocess.STDOUT)
    observer = Observer(domain_id)
    got = {"joints": [], "images": [], "info": []}
    observer.node.create_subscription(JointState, "joint_states", lambda m: got["joints"].append(time.monotonic()),
                                      qos.SENSOR)
    observer.node.create_subscription(Image, "front/color/image_raw", lambda m: got["images"].append(m), qos.SENSOR)
    observer.node.create_subscription(CameraInfo, "wrist/color/camera_info", lambda m: got["info"].append(m),
                                      qos.SENSOR)
    cmd = observer.node.create_publisher(TwistStamped, "arm/cmd", qos.COMMAND)
    try:
        observer.wait_for(lambda: len(got["joints"]) >= 5, 60, "realtime observations")
        # 10 Hz on the wall clock, without any command, in one of up to four 2 s windows: one window can fall in
        # the CPU starvation of CI's busiest minute (2.5 Hz seen once, two test workers on two cores).
        rates = []
        while len(rates) < 4 and not any(7.0 <= r <= 12.0 for r in rates):
            start = len(got["joints"])
            observer.spin(2.0)
            rates.append((len(got["joints"]) - start) / 2.0)
        assert any(7.0 <= r <= 12.0 for r in rates), rates
        image = msg_to_image(got["images"][-1])
        assert image.shape == (64, 64, 3) and image.std() > 5
        assert got["info"][-1].width == 64 and got["info"][-1].k[0] > 0
        twist = TwistStamped()
        twist.twist.linear.x = 0.1
        cmd.publish(twist)
        observer.wait_for(lambda: observer.value("stale_commands", "arm_sim") >= 1, 10, "stale command detected")
    finally:
        observer.close()
        sim.send_signal(signal.SIGINT)
        assert sim.wait(timeout=30) == 0
