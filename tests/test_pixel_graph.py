"""The pixel pick-cube task through the node graph: sim publishing cameras, actor sending frames,
learner encoding them with a frozen encoder, policy with the encoder back to the actor."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("rclpy")

from robot_rl.agents.encoders import EncoderConfig, ImageEncoder, save_pretrained  # noqa: E402


def test_pixel_pick_cube_trains_and_evaluates_through_ros(tmp_path):
    encoder_dir = tmp_path / "encoder"
    save_pretrained(ImageEncoder(EncoderConfig(cameras=("front", "wrist"), image_size=64, latent_dim=16)),
                    encoder_dir, {"name": "random test encoder"})
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "robot_rl.cli", "train", "--task", "arm_pick_cube", "--run-dir", str(run_dir),
         "--steps", "200", "--eval-episodes", "2", "--plain", "--status-period", "5",
         "--set", "robot_rl.demos={episodes: 2, noise: 0.1, seed: 1}", "--set", f"learner.encoder={encoder_dir}",
         "--set", "learner.warmup_transitions=60", "--set", "learner.batch_size=32",
         "--set", "learner.hidden_dims=[64, 64]", "--set", "actor.sync_slack_steps=120"],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((run_dir / "eval.json").read_text())
    assert result["episodes"] == 2 and result["train_steps"] >= 200 and result["transitions_acked_all"]
    summary = json.loads((run_dir / "learner_summary.json").read_text())
    assert summary["updates"] > 50 and summary["demo_size"] > 0 and summary["rejected"] == 0
    assert summary["online_size"] >= 200


def test_a_lockstep_actor_that_would_deadlock_with_the_warm_up_is_refused():
    from robot_rl.ros.graph import build_graph, config_path, load_config

    config = load_config(config_path("arm_pick_cube"))
    config["actor"]["ros__parameters"]["sync_slack_steps"] = 100
    with pytest.raises(ValueError, match="sync_slack_steps"):
        build_graph(config)
