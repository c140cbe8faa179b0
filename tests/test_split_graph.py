"""One graph, two `robot-rl train` commands (as on two machines, here on loopback): the learner in
one (`--nodes learner`), the simulated robot and its actor in the other (`--nodes arm_sim arm_actor`,
with a copy of the learner's secret). Every transition the actor sent is stored by the learner."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("rclpy")

from robot_rl.ros.probe import fresh_domain_id  # noqa: E402


def _train(tmp_path, name: str, domain_id: int, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", "--task", "arm_lift", "--run-dir", str(tmp_path / name),
           "--domain-id", str(domain_id), "--plain", "--status-period", "5", "--steps", "300", "--eval-episodes", "1",
           "--set", "learner.warmup_transitions=100", "--set", "learner.hidden_dims=[64, 64]",
           "--set", "arm_actor.sync_updates_per_step=0", "--set", "robot_rl.demos={episodes: 0}", *extra]
    return subprocess.Popen(cmd, stdout=open(tmp_path / f"{name}.out", "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def test_learner_and_robot_started_apart_form_one_graph(tmp_path):
    domain_id = fresh_domain_id()
    learner_side = _train(tmp_path, "learner_host", domain_id, "--nodes", "learner")
    try:
        secret = tmp_path / "learner_host" / "secret.key"
        end = time.monotonic() + 60
        while not secret.exists():
            assert time.monotonic() < end and learner_side.poll() is None, (tmp_path / "learner_host.out").read_text()
            time.sleep(0.1)
        copied = tmp_path / "copied.key"  # what the user copies to the robot's computer
        shutil.copy(secret, copied)
        robot_side = _train(tmp_path, "robot_host", domain_id, "--nodes", "arm_sim", "arm_actor",
                            "--set", f"arm_actor.key_file={copied}")
        assert robot_side.wait(timeout=240) == 0, (tmp_path / "robot_host.out").read_text()[-3000:]
    finally:
        os.killpg(learner_side.pid, signal.SIGINT)  # the learner's machine runs until its user stops it
        learner_code = learner_side.wait(timeout=60)
    learner_out = (tmp_path / "learner_host.out").read_text()
    assert learner_code == 130, learner_out[-3000:]
    assert "started learner as separate processes" in learner_out
    assert "started arm_sim, arm_actor as separate processes" in (tmp_path / "robot_host.out").read_text()
    evaluation = json.loads((tmp_path / "robot_host" / "eval.json").read_text())
    learner = json.loads((tmp_path / "learner_host" / "learner_summary.json").read_text())
    assert evaluation["transitions_acked_all"] and evaluation["transitions_sent"] == 300
    assert learner["transitions_received"] == 300 and evaluation["policy_version"] >= 1
    assert not (tmp_path / "robot_host" / "demos.zarr").exists()  # demonstrations are made where the learner runs


def test_nodes_not_in_the_graph_are_refused(tmp_path):
    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", "--task", "arm_lift", "--nodes", "lerner",
                           "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--nodes: lerner not in this graph (arm_sim, arm_actor, learner)" in done.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was made


def test_network_discovery_drops_the_localhost_only_settings():
    from robot_rl.ros.graph import fastdds_profile_path, loopback_environment, network_environment

    local = loopback_environment(7, {"PATH": "/usr/bin", "ROS_STATIC_PEERS": "10.0.0.5"})
    env = network_environment(8, local)
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET" and "ROS_LOCALHOST_ONLY" not in env
    assert env.get("FASTDDS_DEFAULT_PROFILES_FILE") != str(fastdds_profile_path())  # Fast DDS's own transports
    assert env["ROS_DOMAIN_ID"] == "8" and env["ROS_STATIC_PEERS"] == "10.0.0.5"
    assert network_environment(8, {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT"})[
        "ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SYSTEM_DEFAULT"  # a range the user chose stays
