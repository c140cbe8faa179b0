"""Any Gymnasium environment as a robot in the node graph (`robot-rl train --env ID --graph`): the third-party-style
Dict environment of tests/dict_grip_env.py stepped by env_sim, acted on by env_actor, trained by the learner, as
separate processes talking over DDS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dict_grip_env import ADAPTER_FLAGS
from terminal import Terminal

TESTS = Path(__file__).parent
ENV = "dict_grip_env:DictGrip-v0"
STATE_KEYS = "robot/joint_pos_mm,robot/gripper_m,target_mm"
FLAGS = ["--env", ENV, "--graph", "--expert", "dict_grip_env:GripExpert", "--obs-keys", STATE_KEYS, *ADAPTER_FLAGS,
         "--max-episode-steps", "12", "--set", "learner.warmup_transitions=100", "--plain"]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_LOCALHOST_ONLY": "1"}


def _eval(run: Path, episodes: int) -> dict:
    result = subprocess.run([sys.executable, "-m", "robot_rl.cli", "eval", "--policy", str(run), "--episodes",
                             str(episodes)], capture_output=True, text=True, timeout=120, env=_env())
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.wall_clock
@pytest.mark.timeout(240)
def test_a_dict_env_trains_on_the_wall_clock_with_two_robots_and_a_person_at_the_keyboard(tmp_path):
    run = tmp_path / "run"
    steps = 250
    terminal = Terminal([sys.executable, "-m", "robot_rl.cli", "train", *FLAGS, "--actors", "2", "--teleop",
                         "keyboard", "--view", "off", "--set", "adapter.teleop_axes=[x,y,gripper]",
                         "--steps", str(steps), "--eval-episodes", "10", "--control-hz", "20", "--reset-time-s", "0",
                         "--run-dir", str(run)], _env())
    end = time.monotonic() + 90
    while "as separate processes" not in terminal.text:
        assert time.monotonic() < end, terminal.text[-3000:]
        time.sleep(0.5)
    time.sleep(8.0)  # the teleop nodes are reading the terminal and the robots are running
    for key in ["up", "left", "down", "right"] * 5:  # a motion key takes over; the policy drives again after
        terminal.type(key)
        time.sleep(0.15)
    assert terminal.wait_exit(180) == 0, terminal.text[-3000:]

    # On the wall clock: the environment's simulator stepped in real time, nobody waited for the learner.
    params = (run / "params.yaml").read_text()
    assert "clock_mode: realtime" in params and "sync_updates_per_step: 0.0" in params
    robots = [json.loads((run / f"robot{i}" / "eval.json").read_text()) for i in range(2)]
    assert [r["transitions_sent"] for r in robots] == [steps, steps]
    assert all(r["transitions_acked_all"] for r in robots)
    learner = json.loads((run / "learner_summary.json").read_text())
    # Both robots' transitions stored exactly once; the person's steps are corrections (the demonstration memory
    # holds the expert's episodes plus every corrected step).
    assert learner["transitions_received"] == learner["online_size"] == 2 * steps
    episodes = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]  # the learner's
    corrected = sum(e["intervention_steps"] for e in episodes if not e["evaluation"])
    assert corrected >= 5, episodes
    demos = json.loads((run / "env_task.json").read_text())
    assert demos["env_id"] == ENV
    from robot_rl.data.dataset import load_transitions

    arrays, _ = load_transitions(run / "demos.zarr")
    assert learner["demo_size"] == len(arrays["reward"]) + corrected

    result = _eval(run, 10)
    assert result["kind"] == "graph_run" and result["episodes"] == 10 and result["env_id"] == ENV


def test_an_env_graph_learns_in_lockstep_and_resumes_with_its_own_normalisation(tmp_path):
    run = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", *FLAGS, "--steps", "1500",
                             "--eval-episodes", "20", "--seed", "1", "--run-dir", str(run)],
                            capture_output=True, text=True, timeout=240, env=_env())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["success_rate"] >= 0.8, summary  # the untrained policy: 0 of 20 (tests/dict_grip_env.py)
    described = json.loads((run / "env_task.json").read_text())
    scale = described["adapter"]["normalizer"]["scale"]
    assert not any(described["adapter"]["normalizer"]["pending"]) and scale[0] != 1.0  # fitted on the demonstrations
    replay = _eval(run, 20)
    assert replay["success_rate"] >= 0.7, replay

    # The env task file is the run's: a resumed run reads it as it was (a refit would change every input).
    before = (run / "env_task.json").read_bytes()
    from robot_rl.training.env_graph import prepare_env_task

    prepare_env_task({"id": ENV, "max_episode_steps": 12}, run)
    assert (run / "env_task.json").read_bytes() == before


def test_a_malformed_or_unknown_env_section_is_refused_in_one_line(tmp_path):
    from robot_rl.ros.graph import apply_overrides, config_path, load_config
    from robot_rl.ros.settings import SettingsError

    config = load_config(config_path("env"))
    with pytest.raises(SettingsError, match="robot_rl.env has no key 'kwarg'"):
        apply_overrides(config, {"robot_rl.env": {"id": ENV, "kwarg": {}}})
    with pytest.raises(SettingsError, match="robot_rl.env.adapter has no field 'gripper'"):
        apply_overrides(config, {"robot_rl.env": {"id": ENV, "adapter": {"gripper": 2}}})
    # A bad expert, or one that never succeeds, leaves nothing a retry would take for the run's demonstrations.
    from robot_rl.training.env_graph import prepare_env_task

    for expert, error, match in (("dict_grip_env:NoSuch", ValueError, "has no 'NoSuch'"),
                                 ("dict_grip_env:open_hand_expert", RuntimeError, "succeeded in 0 of")):
        run = tmp_path / expert.rpartition(":")[2]
        with pytest.raises(error, match=match):
            prepare_env_task({"id": ENV, "expert": expert, "max_episode_steps": 12,
                              "adapter": {"obs_keys": STATE_KEYS.split(",")}}, run, demo_episodes=2)
        assert list(run.iterdir()) == [] if run.exists() else True
    result = subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", "--graph", "--run-dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=60, env=_env())
    assert result.returncode == 2 and "give --env" in result.stderr


def test_env_messages_round_trip_and_refuse_what_a_node_must_not_act_on():
    from robot_rl.envs.adapter import AdapterConfig, make_canonical
    from robot_rl.ros.env_io import TRUNCATED, action_names, msgs_to_state, outcome_msg, state_names, vector_msg

    import dict_grip_env  # noqa: F401 - registers DictGrip-v0

    config = AdapterConfig(obs_keys=tuple(STATE_KEYS.split(",")), gripper_index=2, gripper_open=0.0, gripper_close=2.0)
    env = make_canonical("DictGrip-v0", config=config, normalize=False)
    names = state_names(env.adapter)
    assert names == ["robot/joint_pos_mm[0]", "robot/joint_pos_mm[1]", "robot/gripper_m", "target_mm[0]",
                     "target_mm[1]"]
    assert action_names(env.adapter) == ["action[0]", "action[1]", "action[2]"]
    state = np.arange(5, dtype=np.float32)
    out = msgs_to_state(vector_msg(state, names, 7), outcome_msg(-0.5, True, TRUNCATED, 7), names)
    assert np.array_equal(out["state"], state) and out["reward"] == -0.5 and out["success"]
    assert out["truncated"] and not out["terminated"]
    with pytest.raises(ValueError, match="NaN"):
        msgs_to_state(vector_msg(np.full(5, np.nan), names, 7), outcome_msg(0, False, 0, 7), names)
    with pytest.raises(ValueError, match="do not match"):
        msgs_to_state(vector_msg(state, names[::-1], 7), outcome_msg(0, False, 0, 7), names)
    with pytest.raises(ValueError, match="must be 0 or 1"):
        msgs_to_state(vector_msg(state, names, 7), outcome_msg(0, False, 5, 7), names)
    # Holding still (a stale command in real time, a countdown, a pause): no motion, the gripper as it was.
    assert env.adapter.hold_action(None).tolist() == [0.0, 0.0, -1.0]
    assert env.adapter.hold_action(np.array([0.7, -0.2, 0.9], np.float32)).tolist() == [0.0, 0.0, np.float32(0.9)]
    env.close()
