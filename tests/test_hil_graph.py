"""Human in the loop end to end: the scripted human drives a gamepad (`joy`), the teleop node
arbitrates, the actor executes the person's commands and flags them, the learner stores them as
demonstrations too. Five processes over loopback DDS, arm lift simulated in real time (as a
person's session runs it: in lockstep an idle machine got through the 400 training steps in under
two seconds, before the scripted human's gamepad could take over)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("rclpy")

from sensor_msgs.msg import JointState  # noqa: E402

from robot_rl.ros.probe import RosProbe, free_port, fresh_domain_id, start_graph  # noqa: E402

HIL = {
    "robot_rl.nodes": ["arm_sim", "arm_actor", "learner", "teleop", "scripted_human"],
    "robot_rl.demos": {"episodes": 0},
    "arm_sim.clock_mode": "realtime",  # at the task's 10 Hz, as robot-rl record runs it
    "arm_actor.total_steps": 400,
    "arm_actor.eval_episodes": 1,
    "arm_actor.batch_transitions": 25,
    "arm_actor.sync_updates_per_step": 0.0,
    "learner.warmup_transitions": 100,
    "learner.batch_size": 32,
    "learner.hidden_dims": [64, 64],
    "learner.publish_period_s": 0.5,
    "teleop.device": "joy",
    "teleop.hold_s": 0.05,
    "teleop.silence_timeout_s": 0.3,
    "teleop.diagnostics_period_s": 0.5,
    "scripted_human.task": "arm_lift",
    "scripted_human.takeover_prob_start": 1.0,
    "scripted_human.takeover_prob_end": 1.0,  # an untrained policy is corrected whenever it strays
    "scripted_human.off_track_steps": 2,
    "scripted_human.hold_steps": 5,
}


def test_scripted_human_interventions_reach_the_learner_as_demonstrations(tmp_path):
    """...and a correction stays in its episode: an episode the person was driving at its end does not begin
    with their command (the scripted person once carried its last rescue's lift-and-close into the next
    episode's first step, stored as a correction there)."""
    from robot_rl.ros import qos
    from robot_rl.ros.step_log import STEP_TOPIC, parse_step_msg

    domain_id = fresh_domain_id()
    supervisor = start_graph("arm_lift", HIL, tmp_path, domain_id)
    probe = RosProbe(domain_id, "hil_probe")
    driver: dict[tuple[int, int], bool] = {}  # (episode, step) -> the person acted
    probe.node.create_subscription(JointState, STEP_TOPIC, lambda m: _record_driver(parse_step_msg(m), driver),
                                   qos.EVENTS)

    def person_ended(episode: int) -> bool:
        steps = [step for e, step in driver if e == episode]
        return bool(steps) and driver[episode, max(steps)]

    def handed_over() -> list[int]:
        """Episodes the person was driving at their end whose next episode has begun."""
        return [e for e in {e for e, _ in driver} if person_ended(e) and (e + 1, 0) in driver]
    try:
        probe.wait_for(lambda: probe.value("takeovers", "scripted_human") >= 3
                       and probe.value("takeovers", "teleop") >= 3
                       and probe.value("intervention_rate_last20", "arm_actor") > 0
                       and probe.value("demo_size", "learner") >= 10 and len(handed_over()) >= 2, 180,
                       "interventions through joy, teleop and actor into the learner's demonstrations, and two "
                       "episodes ended by the person")
        assert not [e + 1 for e in handed_over() if driver[e + 1, 0]], driver
        for name in ("arm_sim", "arm_actor", "learner", "teleop", "scripted_human"):
            assert name not in {n.spec.name for n, _ in supervisor.exited()}
        assert probe.value("rejected", "teleop") == 0  # the scripted gamepad's messages fit the mapping
        assert probe.value("teleop_rejected", "arm_actor") == 0
    finally:
        codes = supervisor.stop()
        probe.close()
    assert all(code == 0 for code in codes.values()), codes
    summary = json.loads((tmp_path / "learner_summary.json").read_text())
    assert summary["demo_size"] >= 10


def _record_driver(entry, driver: dict) -> None:
    if entry.intervention is not None:
        driver[entry.episode, entry.step] = entry.intervention


@pytest.mark.wall_clock
def test_record_session_with_the_scripted_human_writes_a_labelled_dataset(tmp_path):
    import subprocess
    import sys

    from robot_rl.data.episodes import EpisodeDataset

    out = tmp_path / "rec.zarr"
    cmd = [sys.executable, "-m", "robot_rl.cli", "record", "--task", "arm_lift", "--device", "scripted",
           "--episodes", "2", "--out", str(out), "--run-dir", str(tmp_path / "run"), "--plain",
           "--status-period", "1", "--domain-id", str(fresh_domain_id()), "--view-port", str(free_port())]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "recording" in done.stdout and "kept" in done.stdout  # the live status lines
    summary = json.loads((tmp_path / "run" / "record.json").read_text())
    assert summary["episodes_recorded"] == 2
    data = EpisodeDataset(out)
    assert len(data) == 2 and data.task_config["task"] == "arm_lift" and data.task_config["source"] == "teleop"
    drops = 0
    for index in range(2):
        episode = data.episode(index)
        # The robot held still until the person (starting up, then reacting) took over; then they
        # drove to the end, except on steps where their command arrived too late (the actor counts those).
        flags = episode["intervention"].astype(int)
        assert flags[-1] and flags.sum() >= 5, flags
        drops += int((np.diff(flags) < 0).sum())
        assert episode["success_label"][-1] == 1  # and said success when the cube was up
        assert episode["truncated"][-1]
    assert drops <= summary["teleop_stale_steps"], (drops, summary)
    # appending to the dataset (--append: refused otherwise) checks it is the same task and layout
    again = subprocess.run([*cmd[:cmd.index("--task") + 1], "arm_pick_cube", *cmd[cmd.index("--task") + 2:],
                            "--append"], capture_output=True, text=True, timeout=120)
    assert again.returncode != 0 and "schema" in (again.stdout + again.stderr)
