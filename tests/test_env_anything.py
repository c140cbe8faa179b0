"""Issue 24's acceptance on a third-party-style environment (tests/dict_grip_env.py): nested Dict observations
with two cameras of other sizes and layouts, a [0, 2] gripper, success in info["succeed"], trained through
`robot-rl train --env` from a dataset of demonstrations with no wrapper code; the run looks like a graph run;
`robot-rl eval` restores the policy with its state normalisation; a takeover reported in info is a correction."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.agents.sac import SACConfig
from robot_rl.data.env_recorder import EnvEpisodeRecorder
from robot_rl.envs.adapter import EnvAdapter, make_canonical
from robot_rl.training.gym_loop import GymTrainConfig, Trainer

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))
import dict_grip_env  # noqa: E402

ENV_ID = "dict_grip_env:DictGrip-v0"
ADAPTER, ADAPTER_FLAGS = dict_grip_env.ADAPTER, dict_grip_env.ADAPTER_FLAGS


def record_demos(path: Path, episodes: int = 10) -> None:
    """A person's demonstrations as `robot-rl record --env` stores them (the environment's own action units)."""
    env = make_canonical(ENV_ID, {}, ADAPTER, normalize=False)
    recorder = EnvEpisodeRecorder(path, ENV_ID, {}, env.adapter)
    for episode in range(episodes):
        raw, _ = env.reset(seed=episode)
        done = False
        while not done:
            hand, target = env.unwrapped.hand, env.unwrapped.target
            action = env.adapter.agent_action(dict_grip_env.expert_action(hand, target))
            next_raw, reward, terminated, truncated, info = env.step(action)
            recorder.add_step(raw, action, reward, terminated, truncated, True, info["is_success"])
            raw, done = next_raw, terminated or truncated
        recorder.end_episode(raw)
    env.close()


def robot_rl(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "robot_rl.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("anything")
    record_demos(root / "demos.zarr")
    run = root / "run"
    out = robot_rl("train", "--env", ENV_ID, "--demos", str(root / "demos.zarr"), *ADAPTER_FLAGS, "--steps", "1000",
                   "--seed", "0", "--set", "warmup_steps=100", "--set", "eval_every=0", "--set", "eval_episodes=20",
                   "--run-dir", str(run))
    assert out.returncode == 0, out.stderr[-3000:]
    return run, out


def test_a_dict_env_learns_from_a_dataset_through_the_cli(trained_run):
    run, out = trained_run
    evaluation = json.loads((run / "eval.json").read_text())
    assert evaluation["success_rate"] >= 0.8, evaluation
    assert evaluation["episodes"] == 20 and evaluation["train_steps"] == 1000
    history = json.loads((run / "history.json").read_text())
    assert history[-1]["dataset_transitions"] > 0
    # every run looks the same: TensorBoard, one line per training episode, checkpoint, policy
    episodes = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert episodes and sum(e["env_steps"] > 0 for e in episodes) == len(episodes)
    assert {"return", "success", "intervention_steps"} <= set(episodes[0])
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert (run / "checkpoint.pt").is_file() and (run / "policy.pt").is_file()


def test_eval_restores_the_policy_with_its_normalisation(trained_run, tmp_path):
    run, _ = trained_run
    saved = torch.load(run / "policy.pt", weights_only=True)
    adapter = EnvAdapter.from_json(saved["adapter"])
    assert not adapter.normalizer.needs_statistics
    # joint positions and target in millimetres were measured, not left at unit scale
    assert min(adapter.normalizer.scale[1:]) > 10 and adapter.normalizer.clip[1:] == [10.0] * 4
    out = robot_rl("eval", "--policy", str(run), "--episodes", "20", "--out", str(tmp_path / "eval.json"))
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["kind"] == "env_run" and result["success_rate"] >= 0.8, result
    assert len(json.loads((tmp_path / "eval.json").read_text())["results"]) == 20
    # the same weights without the saved statistics do not do the task: the normalisation is what was restored
    from robot_rl.agents.policy import Policy, PolicySpec
    from robot_rl.training.evaluate import evaluate_policy

    raw_adapter = EnvAdapter.from_json(saved["adapter"])
    raw_adapter.normalizer.offset = [0.0] * 5
    raw_adapter.normalizer.scale = [1.0] * 5
    policy = Policy(PolicySpec.from_json(saved["spec"]), saved["weights"])
    unnormalised = evaluate_policy(lambda obs, info: policy.act(obs, True), make_canonical(ENV_ID, {}, adapter=raw_adapter),
                                   20, seed=10_000)
    assert unnormalised["success_rate"] <= result["success_rate"] - 0.5
    refused = robot_rl("eval", "--policy", str(run), "--out", str(tmp_path / "eval.json"))
    assert refused.returncode == 2 and "exists" in refused.stderr


def test_takeovers_reported_by_the_environment_land_as_corrections():
    config = GymTrainConfig(ENV_ID, env_kwargs={"intervene_every": 3}, total_steps=60, demo_episodes=0,
                            warmup_steps=30, eval_every=0, eval_episodes=1, buffer_capacity=500,
                            sac=SACConfig(batch_size=16, hidden_dims=(32, 32)), adapter=ADAPTER)
    trainer = Trainer(config)
    history = trainer.run()
    demos = trainer.demos
    rows = demos._valid_mask()
    person = trainer.env.unwrapped.person_actions  # every 3rd step of an episode
    assert len(person) >= 10 and len(demos) == len(person) and demos.intervention[rows].all()
    assert history[-1]["expert_transitions"] == len(person)
    # what was stored is the person's action in the agent's [-1, 1] (the gripper's 0/2 as -1/+1), in order
    expected = [trainer.adapter.agent_action(a) for a in person]
    np.testing.assert_allclose(demos.action[rows], expected, atol=1e-6)
    assert len(trainer.online) == 60


def test_mistyped_adapter_settings_and_bad_kwargs_are_refused(tmp_path):
    typo = robot_rl("train", "--env", ENV_ID, "--set", "adapter.gripper_idx=2", "--run-dir", str(tmp_path / "r"))
    assert typo.returncode == 2 and "adapter.gripper_idx" in typo.stderr and "gripper_index" in typo.stderr
    misplaced = robot_rl("train", "--env", ENV_ID, "--set", "image_size=16", "--run-dir", str(tmp_path / "r"))
    assert misplaced.returncode == 2 and "adapter.image_size" in misplaced.stderr
    kwargs = robot_rl("train", "--env", ENV_ID, "--env-kwargs", "[1]", "--run-dir", str(tmp_path / "r"))
    assert kwargs.returncode == 2 and "JSON object" in kwargs.stderr
    sizes = robot_rl("train", "--env", ENV_ID, "--steps", "10", "--run-dir", str(tmp_path / "r"))
    assert sizes.returncode == 2 and "image_size" in sizes.stderr
    assert not (tmp_path / "r").exists()


def test_view_rerun_logs_an_env_run_with_the_critics_value(tmp_path):
    pytest.importorskip("rerun")
    from rrd import read_rrd, values

    rrd = tmp_path / "run.rrd"
    out = robot_rl("train", "--env", ENV_ID, *ADAPTER_FLAGS, "--steps", "40", "--set", "warmup_steps=20",
                   "--set", "eval_every=0", "--set", "eval_episodes=1", "--set", "sac.batch_size=16",
                   "--view", "rerun", "--view-out", str(rrd), "--run-dir", str(tmp_path / "run"))
    assert out.returncode == 0, out.stderr[-3000:]
    recording = read_rrd(rrd)
    assert {"/cameras/pixels_top", "/cameras/pixels_wrist", "/state", "/action/executed", "/action/policy",
            "/value", "/reward", "/driver"} <= set(recording)
    assert len(values(recording, "/value")) == 40 and len(recording["/cameras/pixels_top"]["Image:buffer"]) == 40
    assert all(np.isfinite(v).all() for v in values(recording, "/value"))
    refused = robot_rl("train", "--env", ENV_ID, *ADAPTER_FLAGS, "--view", "rerun", "--view-out", str(rrd),
                       "--run-dir", str(tmp_path / "again"))
    assert refused.returncode == 2 and "already exists" in refused.stderr
    browser = robot_rl("train", "--env", ENV_ID, *ADAPTER_FLAGS, "--view", "browser", "--run-dir", str(tmp_path / "b"))
    assert browser.returncode == 2 and "--view rerun" in browser.stderr


def _interrupted_train(run: Path, *flags: str) -> subprocess.CompletedProcess:
    """`train --env` stopped with Ctrl-C (SIGINT) once it has printed its first evaluation."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", "train", "--env", ENV_ID, *ADAPTER_FLAGS,
                             "--steps", "100000", "--set", "warmup_steps=50", "--set", "eval_every=100",
                             "--set", "eval_episodes=1", "--run-dir", str(run), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            # a shell's background job starts with SIGINT ignored; a user's terminal does not
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stdout:
            if line.startswith("{"):  # the first evaluation row: training is under way
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_an_interrupted_env_run_keeps_its_policy_and_logs_and_never_an_earlier_run(tmp_path):
    run = tmp_path / "run"
    first = _interrupted_train(run)
    assert first.returncode == 130, first.stderr[-2000:]
    assert "interrupted after" in first.stderr and str(run) in first.stderr
    assert (run / "INTERRUPTED").is_file() and (run / "policy.pt").is_file()
    assert list((run / "tensorboard").glob("events.out.tfevents.*")) and (run / "episodes.jsonl").is_file()
    assert not list(tmp_path.glob(".robot_rl-tmp-*"))
    # --overwrite replaces a run only with a finished one: an interrupted second run is kept beside it
    before = (run / "policy.pt").read_bytes()
    second = _interrupted_train(run, "--overwrite")
    assert second.returncode == 130, second.stderr[-2000:]
    assert (run / "policy.pt").read_bytes() == before
    assert [p.name.startswith("run-interrupted-") for p in tmp_path.iterdir() if p != run] == [True]
