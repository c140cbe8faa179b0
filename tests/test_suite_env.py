"""An established third-party suite through `robot-rl train --env` with no glue code (issue 24): Gymnasium-Robotics'
PointMaze (its nested goal Dict, unbounded state, success in info["success"]), the env's own option through
--env-kwargs; the run directory is a whole run, evaluation reads the suite's success, and `robot-rl eval` replays
the saved policy on the same episodes."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("gymnasium_robotics", reason="Gymnasium-Robotics is not installed (pip install -e '.[suites]')")

ENV_ID = "gymnasium_robotics:PointMaze_UMaze-v3"
# Sparse, and reaching the goal ends the episode: an episode's return is 1 exactly when the suite said success.
ENV_KWARGS = {"continuing_task": False}
MAX_STEPS = 300
EPISODES = 20


def robot_rl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "robot_rl.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("suite") / "run"
    out = robot_rl("train", "--env", ENV_ID, "--env-kwargs", json.dumps(ENV_KWARGS), "--steps", "600", "--seed", "0",
                   "--eval-episodes", str(EPISODES), "--set", "eval_every=0", "--run-dir", str(run))
    assert out.returncode == 0, out.stderr[-3000:]
    return run


def test_the_suite_trains_through_the_cli_into_a_whole_run_dir(suite_run):
    evaluation = json.loads((suite_run / "eval.json").read_text())
    assert evaluation["env_id"] == ENV_ID and evaluation["train_steps"] == 600 and evaluation["episodes"] == EPISODES
    assert (suite_run / "policy.pt").is_file() and (suite_run / "checkpoint.pt").is_file()
    assert list((suite_run / "tensorboard").glob("events.out.tfevents.*"))
    episodes = [json.loads(line) for line in (suite_run / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) >= 2  # 600 steps of at most 300-step episodes
    assert json.loads((suite_run / "history.json").read_text())[-1]["steps"] == 600


def test_evaluation_reads_the_suites_success(suite_run):
    evaluation = json.loads((suite_run / "eval.json").read_text())
    results = evaluation["results"]
    # The suite's reward is 1 on the step it reports success, which ends the episode (continuing_task=False: the
    # --env-kwargs reached it), and 0 otherwise: the success we read must agree with every episode's return and
    # length, both ways.
    for result in results:
        assert result["success"] == (result["return"] == 1.0) == (result["steps"] < MAX_STEPS), result
    assert evaluation["success_rate"] == pytest.approx(sum(r["success"] for r in results) / EPISODES)
    episodes = [json.loads(line) for line in (suite_run / "episodes.jsonl").read_text().splitlines()]
    for episode in episodes:
        assert episode["success"] == (episode["return"] == 1.0), episode
    # a quarter of a near-random policy's episodes reach the goal: the reading is seen true, not only false
    assert any(r["success"] for r in results) or any(e["success"] for e in episodes)


def test_eval_replays_the_saved_policy_on_the_same_episodes(suite_run, tmp_path):
    out = robot_rl("eval", "--policy", str(suite_run), "--episodes", str(EPISODES), "--out", str(tmp_path / "e.json"))
    assert out.returncode == 0, out.stderr[-2000:]
    replay = json.loads((tmp_path / "e.json").read_text())
    # eval's default draws are training's (10_000 + seed 0), the env's kwargs and state statistics come with the policy
    assert replay["results"] == json.loads((suite_run / "eval.json").read_text())["results"]
