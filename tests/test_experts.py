"""Scripted experts for any Gymnasium environment (robot_rl/training/experts.py): `robot-rl record --env ID
--expert module:callable` and `robot-rl demos --env ID --expert ...` record an expert's episodes as a person's
are recorded (raw state, the environment's action units, seeded episodes), and `train --env --demos` loads them.
The environment is tests/dict_grip_env.py's, under the namespaced id of tests/ns_grip_env.py."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from robot_rl.cli import main
from robot_rl.data.env_recorder import EnvEpisodeRecorder
from robot_rl.data.episodes import EpisodeDataset
from robot_rl.envs.adapter import make_canonical
from robot_rl.training.experts import ATTEMPTS_PER_EPISODE, load_expert, record_expert_episodes
from robot_rl.training.gym_loop import GymTrainConfig, Trainer

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))
import dict_grip_env  # noqa: E402

ENV_ID = "ns_grip_env/DictGrip-v0"
ADAPTER, ADAPTER_FLAGS = dict_grip_env.ADAPTER, dict_grip_env.ADAPTER_FLAGS
EXPERT = "dict_grip_env:GripExpert"


def expert_actions(episode) -> np.ndarray:
    """What GripExpert does on each stored raw state (robot/gripper_m 1, robot/joint_pos_mm 2, target_mm 2)."""
    states = episode["state"][:-1]
    return np.stack([dict_grip_env.expert_action(s[1:3], s[3:5]) for s in states])


def record(*args: str) -> int:
    return main(["record", "--env", ENV_ID, *ADAPTER_FLAGS, *args])


def test_load_expert_instantiates_classes_and_takes_functions():
    expert = load_expert(EXPERT)
    assert isinstance(expert, dict_grip_env.GripExpert) and expert.episodes == 0
    assert load_expert("dict_grip_env:open_hand_expert") is dict_grip_env.open_hand_expert


@pytest.mark.parametrize("spec, message", [
    ("dict_grip_env", "expected module:callable"),
    ("no_such_module_here:Expert", "cannot import 'no_such_module_here'.*PYTHONPATH"),
    ("dict_grip_env:NoSuchExpert", "dict_grip_env has no 'NoSuchExpert'; its callables: .*GripExpert"),
    ("dict_grip_env:WORKSPACE_MM", "WORKSPACE_MM is a float, not callable"),
])
def test_bad_expert_specs_are_refused_saying_why(spec, message, tmp_path, capsys):
    with pytest.raises(ValueError, match=message):
        load_expert(spec)
    assert record("--expert", spec, "--episodes", "1", "--out", str(tmp_path / "demos.zarr")) == 2
    err = capsys.readouterr().err
    assert err.startswith("robot-rl record: --expert: expert") and "Traceback" not in err
    assert not (tmp_path / "demos.zarr").exists()


def test_an_expert_records_seeded_successful_episodes_in_the_environments_units(tmp_path):
    env = make_canonical(ENV_ID, {}, ADAPTER, normalize=False)
    expert = load_expert(EXPERT)
    recorder = EnvEpisodeRecorder(tmp_path / "a.zarr", ENV_ID, {}, env.adapter)
    summary = record_expert_episodes(env, recorder, expert, 3, seed=5)
    assert summary["episodes_recorded"] == 3 and expert.episodes == summary["attempts"]  # reset() per episode
    dataset = EpisodeDataset(tmp_path / "a.zarr")
    assert len(dataset) == 3
    for i in range(3):
        episode = dataset.episode(i)
        np.testing.assert_allclose(episode["action"], expert_actions(episode), atol=1e-5)
        assert episode["intervention"].all() and episode["success_label"][-1] == 1 and episode["terminated"][-1]
    # seeded: recorded again, the same episodes
    again = EnvEpisodeRecorder(tmp_path / "b.zarr", ENV_ID, {}, env.adapter)
    record_expert_episodes(env, again, load_expert(EXPERT), 3, seed=5)
    np.testing.assert_array_equal(EpisodeDataset(tmp_path / "b.zarr").episode(2)["state"], dataset.episode(2)["state"])
    env.close()


def test_noise_perturbs_the_recorded_actions(tmp_path):
    assert record("--expert", EXPERT, "--episodes", "2", "--noise", "0.3", "--out", str(tmp_path / "n.zarr")) == 0
    episode = EpisodeDataset(tmp_path / "n.zarr").episode(0)
    assert not np.allclose(episode["action"][:, :2], expert_actions(episode)[:, :2], atol=1e-3)


def test_the_record_command_writes_a_dataset_that_train_env_loads(tmp_path):
    out = tmp_path / "demos.zarr"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "robot_rl.cli", "record", "--env", ENV_ID, *ADAPTER_FLAGS,
                           "--expert", EXPERT, "--episodes", "4", "--seed", "3", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"episodes_recorded": 4' in done.stdout
    dataset = EpisodeDataset(out)
    assert len(dataset) == 4 and dataset.task_config["env_id"] == ENV_ID
    for i in range(4):
        episode = dataset.episode(i)
        np.testing.assert_allclose(episode["action"], expert_actions(episode), atol=1e-5)
        assert episode["pixels_top"].shape[1:] == (16, 16, 3)
    # what `robot-rl train --env ENV_ID --demos out` does with it
    trainer = Trainer(GymTrainConfig(ENV_ID, adapter=ADAPTER, demo_episodes=0, demo_dataset=str(out)))
    assert trainer.load_dataset(str(out)) == dataset.num_steps


def test_an_existing_dataset_is_kept_unless_overwrite(tmp_path, capsys):
    out = str(tmp_path / "demos.zarr")
    assert record("--expert", EXPERT, "--episodes", "1", "--out", out) == 0
    assert record("--expert", EXPERT, "--episodes", "2", "--out", out) == 2
    assert "exists" in capsys.readouterr().err and len(EpisodeDataset(out)) == 1
    assert record("--expert", EXPERT, "--episodes", "2", "--out", out, "--overwrite") == 0
    assert len(EpisodeDataset(out)) == 2
    assert record("--expert", EXPERT, "--episodes", "1", "--out", out, "--append") == 0
    assert len(EpisodeDataset(out)) == 3
    assert [p.name for p in tmp_path.iterdir()] == ["demos.zarr"]


def test_an_expert_that_keeps_failing_is_refused_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "demos.zarr"
    assert record("--expert", "dict_grip_env:open_hand_expert", "--episodes", "2", "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert f"succeeded in 0 of {2 * ATTEMPTS_PER_EPISODE} attempts" in err and "--keep-failures" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert record("--expert", "dict_grip_env:open_hand_expert", "--episodes", "2", "--keep-failures",
                  "--out", str(out)) == 0
    dataset = EpisodeDataset(out)
    assert len(dataset) == 2 and dataset.episode(0)["success_label"][-1] == 0


def test_demos_env_takes_an_expert_too(tmp_path, capsys):
    out = tmp_path / "demos.zarr"
    assert main(["demos", "--env", ENV_ID, "--expert", EXPERT, *ADAPTER_FLAGS, "--episodes", "2", "--noise", "0",
                 "--out", str(out)]) == 0
    episode = EpisodeDataset(out).episode(1)
    np.testing.assert_allclose(episode["action"], expert_actions(episode), atol=1e-5)
    assert main(["demos", "--env", ENV_ID, "--expert", EXPERT, "--goal", "grip", "--out", str(tmp_path / "g")]) == 2
    assert "--goal: for the built-in experts" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["record"], ["demos"]])
def test_expert_flags_without_env_are_refused(command, tmp_path, capsys):
    assert main([*command, "--expert", EXPERT, "--out", str(tmp_path / "d.zarr")]) == 2
    assert "--env" in capsys.readouterr().err
