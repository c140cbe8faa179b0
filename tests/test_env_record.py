"""A person at the keyboard recording demonstrations straight from a Gymnasium environment (no ROS):
`robot-rl record --env ... --teleop keyboard` in a pseudo-terminal, then the dataset read back."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from robot_rl.data.episodes import EpisodeDataset

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))
from rrd import read_rrd, texts, values  # noqa: E402
from terminal import Terminal  # noqa: E402

ENV_FLAGS = ["--env", "dict_grip_env:DictGrip-v0", "--env-kwargs", '{"max_steps": 400}', "--teleop", "keyboard", "--set", "adapter.image_size=16",
             "--set", "adapter.gripper_index=2", "--set", "adapter.gripper_open=0", "--set", "adapter.gripper_close=2",
             "--set", "adapter.teleop_axes=[x,y,gripper]"]


def _record(tmp_path: Path, *extra: str) -> Terminal:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return Terminal([sys.executable, "-m", "robot_rl.cli", "record", *ENV_FLAGS, "--out", str(tmp_path / "demos.zarr"),
                     *extra], env)


def _wait_for(terminal: Terminal, text: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while text not in terminal.text:
        assert time.monotonic() < end, f"never saw {text!r}:\n{terminal.text[-3000:]}"
        time.sleep(0.05)


def test_a_person_drives_closes_and_labels_an_episode_from_the_keyboard(tmp_path):
    rrd = tmp_path / "session.rrd"
    terminal = _record(tmp_path, "--episodes", "1", "--reset-time-s", "0.5", "--episode-time-s", "20",
                       "--view", "rerun", "--view-out", str(rrd))
    _wait_for(terminal, ">>> episode 1: GO")
    for key in ["up"] * 4 + ["left"] * 3:
        terminal.type(key)
        time.sleep(0.25)
    terminal.type("close")
    time.sleep(0.6)
    terminal.type("success")
    assert terminal.wait_exit(60) == 0, terminal.text[-3000:]
    assert "episode 1 kept" in terminal.text
    dataset = EpisodeDataset(tmp_path / "demos.zarr")
    assert len(dataset) == 1 and dataset.task_config["env_id"] == "dict_grip_env:DictGrip-v0"
    episode = dataset.episode(0)
    actions, driven = episode["action"], episode["intervention"]
    assert driven.sum() >= 5 and actions.shape[1] == 3
    # stored in the environment's own units: up = +y, left = -x (taps in quick succession grow to a held
    # key's speed), the gripper closed at 2 (open 0)
    assert actions[driven, 1].max() > 0.5 and actions[driven, 0].min() < -0.5
    assert actions[-1, 2] == 2.0 and actions[0, 2] == 0.0
    assert episode["success_label"][-1] == 1 and episode["truncated"][-1]
    # the environment's own success check, stored beside the label (and said where they disagree)
    assert dataset.success_checks[0] in (0, 1) and ("WARNING" in terminal.text) == (dataset.success_checks[0] == 0)
    assert episode["pixels_top"].shape[1:] == (16, 16, 3) and episode["state"].shape[1] == 5
    # what the person saw, logged to Rerun: the cameras, who drove, the person's actions, the episode's end
    recording = read_rrd(rrd)
    assert len(recording["/cameras/pixels_top"]["Image:buffer"]) == len(actions)
    assert "person" in texts(recording, "/driver") and len(values(recording, "/action/human")) == driven.sum()
    assert any("success" in text for text in texts(recording, "/episode/end"))


def test_nobody_at_the_keyboard_keeps_no_episode_and_says_why(tmp_path):
    terminal = _record(tmp_path, "--episodes", "1", "--reset-time-s", "0", "--episode-time-s", "0.5")
    _wait_for(terminal, "discarded: nobody drove it")
    os.kill(terminal.pid, signal.SIGINT)
    assert terminal.wait_exit(30) == 130, terminal.text[-3000:]
    path = tmp_path / "demos.zarr"
    assert not path.exists() or len(EpisodeDataset(path)) == 0


def test_a_device_without_a_reader_or_an_undrivable_action_is_refused(tmp_path):
    wrong = _record(tmp_path, "--teleop", "joy")
    assert wrong.wait_exit(60) == 2 and "evdev" in wrong.text


def test_a_person_takes_over_during_env_training_from_the_keyboard(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    flags = [f for f in ENV_FLAGS if f not in ("--env-kwargs", '{"max_steps": 400}')]
    terminal = Terminal([sys.executable, "-m", "robot_rl.cli", "train", *flags, "--steps", "150", "--control-hz", "30",
                         "--set", "warmup_steps=50", "--set", "eval_every=0", "--set", "eval_episodes=2",
                         "--run-dir", str(tmp_path / "run")], env)
    _wait_for(terminal, "for 150 steps")
    for key in ["up", "left"] * 6:
        terminal.type(key)
        time.sleep(0.2)
    assert terminal.wait_exit(120) == 0, terminal.text[-3000:]
    episodes = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    corrected = sum(e["intervention_steps"] for e in episodes)
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert corrected >= 5 and history[-1]["expert_transitions"] >= corrected


def test_overwrite_keeps_the_old_dataset_until_a_new_episode_is_kept(tmp_path):
    first = _record(tmp_path, "--episodes", "1", "--reset-time-s", "0", "--episode-time-s", "0.3", "--keep-idle")
    assert first.wait_exit(60) == 0, first.text[-2000:]
    assert len(EpisodeDataset(tmp_path / "demos.zarr")) == 1
    again = _record(tmp_path, "--episodes", "1", "--reset-time-s", "0", "--episode-time-s", "0.3", "--overwrite")
    _wait_for(again, "discarded: nobody drove it")
    os.kill(again.pid, signal.SIGINT)
    assert again.wait_exit(30) == 130, again.text[-2000:]
    assert "unchanged" in again.text and len(EpisodeDataset(tmp_path / "demos.zarr")) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["demos.zarr"]  # no half-made dataset left beside it
