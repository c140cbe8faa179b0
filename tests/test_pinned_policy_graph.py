"""A saved policy flown through the node graph with no learner (`arm_actor.policy_file`): the actor evaluates that
policy alone, takes no training step, sends nothing, and refuses a policy its key did not sign."""

from __future__ import annotations

import json
import subprocess
import sys

from robot_rl.ros.probe import fresh_domain_id
from robot_rl.tasks import get_task
from robot_rl.training.learner import LearnerConfig, LearnerCore
from robot_rl.transport.secret import ensure_run_secret


def fly(policy, key_file, run_dir):
    return subprocess.run(
        [sys.executable, "-m", "robot_rl.cli", "train", "--task", "arm_lift", "--nodes", "arm_sim", "arm_actor",
         "--eval-episodes", "2", "--run-dir", str(run_dir), "--plain", "--domain-id", str(fresh_domain_id()),
         "--set", f"arm_actor.policy_file={policy}", "--set", f"arm_actor.key_file={key_file}"],
        capture_output=True, text=True, timeout=300)


def test_a_saved_policy_is_evaluated_through_the_graph_and_a_forged_one_refused(tmp_path):
    task = get_task("arm_lift")
    trained = tmp_path / "trained"
    learner = LearnerCore(LearnerConfig(obs_dim=task.obs_dim, action_dim=task.action_dim), trained / "learner",
                          key=ensure_run_secret(trained))
    learner.policy_payload()
    (trained / "policy.policy").write_bytes(learner.policy_payload())  # version 2
    done = fly(trained / "policy.policy", trained / "secret.key", tmp_path / "flown")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    summary = json.loads((tmp_path / "flown" / "eval.json").read_text())
    assert summary["policy_version"] == 2 and summary["train_steps"] == 0 and summary["transitions_sent"] == 0
    assert summary["episodes"] == 2 and [r["steps"] for r in summary["results"]] == [task.max_episode_steps] * 2

    ensure_run_secret(tmp_path / "other")  # another run's secret did not sign it
    forged = fly(trained / "policy.policy", tmp_path / "other" / "secret.key", tmp_path / "forged")
    assert forged.returncode != 0 and "policy_file" in forged.stdout + forged.stderr, forged.stdout[-3000:]
    assert not (tmp_path / "forged" / "eval.json").exists()
