"""A pixel environment in the node graph: `robot-rl pretrain-encoder --env` (frames under random actions, body
positions as targets) makes the frozen encoder the graph's learner reads; and snapshots judged against a threshold
stop at the failure that decides it (`evaluate_policy(max_failures=)`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.envs  # noqa: F401 - registers our environments
from robot_rl.envs.adapter import AdapterConfig
from robot_rl.training.evaluate import evaluate_policy
from robot_rl.training.pretrain_encoder import PretrainConfig, generate, tracked_bodies

TESTS = Path(__file__).parent
PIXEL_ENV = "robot_rl/ArmPickCube-v0"


def robot_rl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_LOCALHOST_ONLY": "1"}
    return subprocess.run([sys.executable, "-m", "robot_rl.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_random_action_frames_come_with_the_bodies_positions_behind_them():
    config = PretrainConfig(env_id=PIXEL_ENV, env_kwargs={}, adapter=AdapterConfig(), episode_steps=4,
                            action_hold_steps=2)
    frames, targets, names = generate(config, 10, seed=3)
    assert set(frames) == {"front", "wrist"} and frames["front"].shape == (10, 64, 64, 3)
    # The object, and the ends of the arm's chains (its fingers), not every link between
    assert names == [f"{body}_{axis}" for body in ("table", "finger_left", "finger_right", "cube") for axis in "xyz"]
    assert targets.shape == (10, len(names)) and np.isfinite(targets).all()
    finger = targets[:, names.index("finger_left_z")]
    assert len(np.unique(finger)) > 1  # random actions move the hand
    cube = targets[:, names.index("cube_x")]
    assert cube[0] != cube[4]  # each short episode draws a new scene: the cube moves between them
    again, again_targets, _ = generate(config, 10, seed=3)
    np.testing.assert_array_equal(again_targets, targets)  # seeded: the same frames again
    np.testing.assert_array_equal(again["wrist"], frames["wrist"])


def test_without_an_adapter_the_robot_that_owns_the_scene_renders_it_with_its_privileged_state():
    frames, targets, names = generate(PretrainConfig(), 6, seed=1)  # the default: the arm's pick-cube scenes
    assert set(frames) == {"front", "wrist"} and frames["front"].shape == (6, 64, 64, 3)
    assert names[:3] == ["cube_x", "cube_y", "cube_z"] and names[-1] == "cube_grasped"
    assert targets.shape == (6, 11) and np.isfinite(targets).all()
    np.testing.assert_allclose(targets[:, 6:9], targets[:, 0:3] - targets[:, 3:6], atol=1e-6)  # the offset
    with pytest.raises(ValueError, match="no robot records scripted frames of 'robot_rl/CarRace-v0'.*--env"):
        generate(PretrainConfig(env_id="robot_rl/CarRace-v0"), 2, seed=0)


def test_an_environment_without_mujoco_state_or_cameras_is_refused_before_rendering(tmp_path):
    sys.path.insert(0, str(TESTS))
    import dict_grip_env  # noqa: F401 - registers dict_grip_env:DictGrip-v0

    env = gym.make("dict_grip_env:DictGrip-v0")
    with pytest.raises(ValueError, match="MuJoCo"):
        tracked_bodies(env)
    env.close()
    state_only = robot_rl("pretrain-encoder", "--env", PIXEL_ENV, "--env-kwargs", '{"observation": "state"}',
                          "--out", str(tmp_path / "enc"))
    assert state_only.returncode == 2 and "no camera frames" in state_only.stderr, state_only.stderr
    arm_with_env_flags = robot_rl("pretrain-encoder", "--set", "adapter.image_size=32", "--out", str(tmp_path / "e"))
    assert arm_with_env_flags.returncode == 2 and "--env" in arm_with_env_flags.stderr
    assert not (tmp_path / "enc").exists() and not (tmp_path / "e").exists()


@pytest.mark.timeout(300)
def test_a_pixel_environment_trains_through_the_graph_on_an_encoder_pretrained_on_it(tmp_path):
    encoder = tmp_path / "encoder"
    made = robot_rl("pretrain-encoder", "--env", PIXEL_ENV, "--frames", "300", "--epochs", "1", "--out", str(encoder))
    assert made.returncode == 0, made.stderr[-3000:]
    card = json.loads((encoder / "card.json").read_text())
    assert card["architecture"]["cameras"] == ["front", "wrist"] and "random actions" in card["trained_on"]
    assert "cube_x" in card["held_out_metrics"]["rmse"]
    again = robot_rl("pretrain-encoder", "--env", PIXEL_ENV, "--frames", "300", "--out", str(encoder))
    assert again.returncode == 2 and "exists" in again.stderr  # an encoder is never overwritten unasked

    run = tmp_path / "run"
    # The actor runs at most 50 steps ahead of the learner's updates (lockstep's slack, 500 by default, would
    # let all 150 go before a learner slowed by a loaded machine had made its first update: CI saw 0 updates).
    trained = robot_rl("train", "--env", PIXEL_ENV, "--graph", "--max-episode-steps", "30", "--set",
                       f"learner.encoder={encoder}", "--set", "learner.warmup_transitions=50", "--set",
                       "env_actor.sync_slack_steps=50", "--steps", "150",
                       "--eval-episodes", "2", "--run-dir", str(run), "--plain")
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    summary = json.loads(trained.stdout.strip().splitlines()[-1])
    assert summary["transitions_sent"] == 150 and summary["transitions_acked_all"], summary
    learner = json.loads((run / "learner_summary.json").read_text())
    assert learner["transitions_received"] == 150 and learner["updates"] > 0 and learner["rejected"] == 0
    replay = robot_rl("eval", "--policy", str(run), "--episodes", "2")
    assert replay.returncode == 0, replay.stderr[-3000:]
    assert json.loads(replay.stdout.strip().splitlines()[-1])["episodes"] == 2


class _Coin(gym.Env):
    """Succeeds in the episodes whose reset seed is even: a policy's results fixed by the episodes' seeds."""

    observation_space = gym.spaces.Box(-1, 1, (1,))
    action_space = gym.spaces.Box(-1, 1, (1,))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.lucky = seed % 2 == 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, True, False, {"is_success": self.lucky}


def test_an_evaluation_against_a_threshold_stops_at_the_failure_that_decides_it():
    act = lambda obs, info: np.zeros(1, np.float32)  # noqa: E731
    full = evaluate_policy(act, _Coin(), 40, seed=5)
    failures = [not r["success"] for r in full["results"]]
    assert 0 < sum(failures) < 40
    cut = evaluate_policy(act, _Coin(), 40, seed=5, max_failures=2)
    decisive = int(np.flatnonzero(np.cumsum(failures) == 3)[0]) + 1  # the episode of the third failure
    assert cut["success_rate"] is None and cut["stopped_after"] == decisive
    assert [r["success"] for r in cut["results"]] == [not f for f in failures[:decisive]]  # the same episodes
    assert cut["success_at_most"] == (40 - 3) / 40
    lenient = evaluate_policy(act, _Coin(), 40, seed=5, max_failures=40)
    assert lenient["success_rate"] == full["success_rate"] and "stopped_after" not in lenient
