"""The race car on the ROS graph: the car actor's task states equal the env's, and car_sim +
car_actor + learner train through DDS with autonomous practice (crashes, recoveries)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("rclpy")

from robot_rl.agents.frame_stack_policy import load_frame_stack_policy  # noqa: E402
from robot_rl.agents.iql import IQL, IQLConfig, encode_stack  # noqa: E402
from robot_rl.robots.car.sim import CarRaceEnv  # noqa: E402
from robot_rl.ros.probe import fresh_domain_id  # noqa: E402
from robot_rl.tasks import get_task  # noqa: E402
from robot_rl.robots.car.observer import CarObserver, load_checkpoints  # noqa: E402
from robot_rl.training.evaluate import evaluate_saved  # noqa: E402


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    """An untrained frame-stack policy of the shipped architecture (what IQL exports)."""
    path = tmp_path_factory.mktemp("car") / "policy"
    torch.manual_seed(0)
    IQL(10, 2, IQLConfig(), "cpu").export(path, {"note": "untrained, for tests"})
    return path


def test_observer_rebuilds_the_env_observation_reward_and_laps(policy_dir):
    env = CarRaceEnv(track_seed=7, randomization=None, action_rate_limit=None)
    policy = load_frame_stack_policy(policy_dir)
    observer = CarObserver(policy, load_checkpoints("track:7", env.config.checkpoint_spacing), env.config)
    np.testing.assert_allclose(observer.timer.checkpoints, env.checkpoints)
    task = get_task("car_race")
    noise_free = np.random.default_rng(0)  # nominal parameters: the sensors have no noise
    try:
        obs, _ = env.reset(seed=0)
        observer.reset(after_recovery=False)
        observer.state(obs["frames"][-1], env.sim.sensors(noise_free), env.sim.time, np.zeros(2), None)
        env_laps, observer_laps = [], []
        for t in range(320):
            action = env.expert_action()
            obs, reward, terminated, truncated, info = env.step(action)
            state = observer.state(obs["frames"][-1], env.sim.sensors(noise_free), env.sim.time,
                                   info["executed_action"], None)
            np.testing.assert_allclose(state["state"], obs["state"], atol=1e-5)
            # The env reads the free joint's velocity, the car its velocimeter: the same up to a lever arm.
            assert abs(state["reward"] - reward) < 0.1
            env_laps += [info["lap_time"]] if info["lap_time"] else []
            observer_laps += [state["lap_time"]] if state["lap_time"] else []
            assert not (terminated or truncated)
        assert len(env_laps) == 1 and observer_laps == pytest.approx(env_laps)
        with torch.no_grad():
            expected = encode_stack(policy.encoder, torch.from_numpy(obs["frames"])[None])[0].numpy()
        np.testing.assert_allclose(task.observation(state), np.concatenate([expected, obs["state"]]), atol=1e-5)
        assert state["laps"] == 1 and task.success(state) and not task.failure(state)
        crash = observer.state(obs["frames"][-1], env.sim.sensors(noise_free), env.sim.time, np.zeros(2), "crash")
        assert task.failure(crash) and crash["reward"] < state["reward"] - 9.0
    finally:
        env.close()


def test_car_trains_through_ros_with_autonomous_practice(tmp_path, policy_dir):
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "robot_rl.cli", "train", "--task", "car_race", "--run-dir", str(run_dir),
         "--steps", "300", "--eval-episodes", "1", "--plain", "--status-period", "10",
         "--domain-id", str(fresh_domain_id()),
         "--set", f"car_actor.policy_dir={policy_dir}", "--set", f"learner.initial_actor={policy_dir}",
         "--set", "learner.num_critics=2", "--set", "learner.utd_ratio=1", "--set", "learner.batch_size=64",
         "--set", "learner.hidden_dims=[256, 256]", "--set", "learner.warmup_transitions=100",
         "--set", "car_actor.sync_slack_steps=150"],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((run_dir / "eval.json").read_text())
    assert result["train_steps"] == 300 and result["episodes"] == 1 and result["transitions_acked_all"]
    assert result["policy_version"] >= 1  # the learner's policies reached the car actor
    # An untrained actor crashes or gets stuck: the car backed out on its own and practice went on.
    assert result["events"]["crash"] + result["events"]["stuck"] >= 1
    summary = json.loads((run_dir / "learner_summary.json").read_text())
    assert summary["transitions_received"] == result["transitions_sent"] and summary["rejected"] == 0
    assert summary["updates"] > 50 and summary["online_size"] >= 300
    # `robot-rl eval` times the run's last policy on the track and encoder the run's nodes used.
    timed = evaluate_saved(run_dir, episodes=2, seed=5000, max_s=5.0)
    assert timed["kind"] == "graph_run" and timed["task"] == "car_race" and timed["track_seed"] == 7
    assert timed["policy_version"] >= 1 and timed["laps"] == 2 and len(timed["lap_times_s"]) == 2
    assert timed["clean_laps"] == sum(t is not None for t in timed["lap_times_s"])  # 5 s: no lap of ~10 s fits
    assert timed["clean_laps"] == 0 and timed["median_lap_s"] is None
