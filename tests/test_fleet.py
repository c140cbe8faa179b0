"""A fleet: two simulated robots, each with its own actor, feeding one learner, all separate
processes over loopback DDS. Every transition of both actors reaches the learner exactly once, an
actor SIGKILLed mid-run is restarted by the supervisor and rejoins without losing or duplicating
one, and both actors fly the learner's new policy versions."""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest
import yaml

pytest.importorskip("rclpy")

from robot_rl.ros.graph import apply_overrides, build_graph, config_path, load_config, params_file  # noqa: E402
from robot_rl.ros.probe import RosProbe, fresh_domain_id, start_graph  # noqa: E402
from robot_rl.tasks import get_task  # noqa: E402
from robot_rl.training.actor import policy_from_payload  # noqa: E402
from robot_rl.transport import codec  # noqa: E402

STEPS = 300

FLEET = {
    "robot_rl.actors": 2,
    "arm_sim.clock_mode": "realtime",  # a fleet of robots runs on the wall clock (10 Hz)
    "robot_rl.demos": {"episodes": 0},
    "arm_actor.total_steps": STEPS,
    "arm_actor.eval_episodes": 1,
    "arm_actor.batch_transitions": 25,
    "arm_actor.resend_after_s": 1.0,
    "arm_actor.sync_updates_per_step": 0.0,
    "learner.warmup_transitions": 100,
    "learner.batch_size": 32,
    "learner.hidden_dims": [64, 64],
    "learner.publish_period_s": 0.5,
    "learner.checkpoint_period_s": 2.0,
    "learner.snapshot_period_s": 5.0,
    "learner.max_update_ratio": 0.0,
}


def test_the_fleet_graph_namespaces_each_robot_and_shares_the_learner(tmp_path):
    config = apply_overrides(load_config(config_path("arm_lift")), {"robot_rl.actors": 3, "arm_sim.seed": 7})
    specs = {spec.key: spec for spec in build_graph(config, "sim", str(tmp_path))}
    assert sorted(specs) == ["learner", *(f"robot{i}/{n}" for i in range(3) for n in ("arm_actor", "arm_sim"))]
    actor = specs["robot2/arm_actor"]
    assert actor.parameters["actor_id"] == "robot2" and actor.parameters["run_dir"] == str(tmp_path / "robot2")
    assert actor.parameters["key_file"] == str(tmp_path / "secret.key")  # the run's one secret
    assert actor.parameters["reset_service"] == "/robot2/arm_sim/reset"
    assert actor.remaps["rl/transitions"] == "/rl/transitions" and actor.remaps["/clock"] == "/robot2/clock"
    assert [specs[f"robot{i}/arm_sim"].parameters["seed"] for i in range(3)] == [7, 8, 9]  # distinct draws
    # on the wall clock, the robots tick a third of a period apart: their steps do not collide on a shared CPU
    assert [specs[f"robot{i}/arm_sim"].parameters["tick_phase"] for i in range(3)] == [0.0, 1 / 3, 2 / 3]
    assert specs["learner"].namespace == "" and not specs["learner"].remaps


def test_each_robot_of_a_fleet_logs_its_view_and_its_steps_timing_to_files_of_its_own(tmp_path):
    config = apply_overrides(load_config(config_path("arm_lift")), {
        "robot_rl.actors": 2, "robot_rl.nodes": ["arm_sim", "arm_actor", "learner", "session_view"],
        "session_view.rerun": str(tmp_path / "view.rrd"), "arm_actor.timing_log": str(tmp_path / "timing.csv")})
    specs = {spec.key: spec for spec in build_graph(config, "sim", str(tmp_path))}
    assert [specs[f"robot{i}/session_view"].parameters["rerun"] for i in range(2)] == [
        str(tmp_path / "view-robot0.rrd"), str(tmp_path / "view-robot1.rrd")]
    assert [specs[f"robot{i}/arm_actor"].parameters["timing_log"] for i in range(2)] == [
        str(tmp_path / "timing-robot0.csv"), str(tmp_path / "timing-robot1.csv")]  # not both appending to one
    assert [specs[f"robot{i}/session_view"].parameters["port"] for i in range(2)] == [8765, 8766]


def test_two_actors_feed_one_learner_exactly_once_through_a_killed_actor(tmp_path):
    domain_id = fresh_domain_id()
    supervisor = start_graph("arm_lift", FLEET, tmp_path, domain_id)
    probe = RosProbe(domain_id, "fleet_probe")
    try:
        actors = ("robot0/arm_actor", "robot1/arm_actor")
        probe.wait_for(lambda: all(probe.value("policy_version", a) >= 2 for a in actors), 120,
                       "both actors flying a learner's policy")
        probe.wait_for(lambda: probe.value("train_steps", "robot1/arm_actor") >= 100, 120, "robot1 mid-run")
        victim = supervisor.nodes["robot1/arm_actor"]
        os.killpg(victim.process.pid, signal.SIGKILL)
        end = time.monotonic() + 240
        finished = set()
        while len(finished) < 2:
            assert time.monotonic() < end, f"the fleet did not finish: {probe.diagnostics}"
            probe.spin(0.2)
            for node, code in supervisor.exited():
                assert node.spec.name == "arm_actor" and code == 0, supervisor.log_tail(node, 40)
                finished.add(node.spec.key)
        assert supervisor.restarts == {"robot1/arm_actor": 1}  # respawned by the supervisor
        versions = {a: probe.value("policy_version", a) for a in actors}
    finally:
        codes = supervisor.stop()
        probe.close()
    assert codes.get("learner") == 0, codes
    learner = json.loads((tmp_path / "learner_summary.json").read_text())
    robots = [json.loads((tmp_path / f"robot{i}" / "eval.json").read_text()) for i in range(2)]
    assert [r["transitions_sent"] for r in robots] == [STEPS, STEPS]  # each actor's own ledger
    assert all(r["transitions_acked_all"] for r in robots)
    # every transition of both actors stored once: none lost, a resent batch is recognised
    assert learner["transitions_received"] == learner["online_size"] == 2 * STEPS
    episodes = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert {episode["robot"] for episode in episodes} == {"robot0", "robot1"}  # a fleet's episodes told apart
    log = (tmp_path / "logs" / "learner.log").read_text()
    assert log.count("waiting for the first transitions on /rl/transitions") == 1
    assert "transitions arriving from robot0" in log and "transitions arriving from robot1" in log
    assert all(v >= 2 for v in versions.values()), versions
    # the learner's pinned snapshots (success against time is evaluated from them after a run)
    snapshots = sorted((tmp_path / "snapshots").glob("*.policy"))
    assert len(snapshots) >= 4
    key = (tmp_path / "secret.key").read_bytes()
    versions = [codec.decode(p.read_bytes(), expect_kind="policy", key=key).meta["version"] for p in snapshots]
    assert versions == sorted(set(versions))
    policy = policy_from_payload(codec.decode(snapshots[-1].read_bytes(), key=key), get_task("arm_lift"))
    assert policy.act(np.zeros(get_task("arm_lift").obs_dim, np.float32), True).shape == (4,)


def test_a_pixel_fleet_params_file_has_no_yaml_aliases_rcl_would_refuse(tmp_path):
    config = apply_overrides(load_config(config_path("arm_pick_cube")), {"robot_rl.actors": 2})
    text = params_file(build_graph(config, "sim", str(tmp_path)), tmp_path / "params.yaml").read_text()
    assert "&id" not in text and "*id" not in text  # robot0 and robot1 share lists such as the cameras
    loaded = yaml.safe_load(text)
    assert loaded["/robot0/arm_sim"]["ros__parameters"]["cameras"] == \
        loaded["/robot1/arm_sim"]["ros__parameters"]["cameras"]
