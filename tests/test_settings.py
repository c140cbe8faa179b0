"""Settings are checked against what the nodes declare: a typo in `--set`, `-p` or a config file
fails before anything starts, naming the closest known name; numbers take the declared type; a
flag no node of the graph uses is refused; a run that cannot train says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("rclpy")

from robot_rl.ros.graph import apply_overrides, config_path, load_config  # noqa: E402
from robot_rl.ros.node_utils import Param, ParameterError, coerce_value  # noqa: E402
from robot_rl.ros.settings import SettingsError  # noqa: E402


def _train(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`robot-rl train` with a run directory in tmp_path; only for settings it refuses (it would train)."""
    return subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", "--run-dir", str(tmp_path / "run"), *args],
                          capture_output=True, text=True, timeout=120)


def _refused(tmp_path: Path, *args: str) -> str:
    result = _train(tmp_path, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert not (tmp_path / "run").exists(), "a refused run must not create its run directory"
    assert "started" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_mistyped_parameter_is_refused_with_the_closest_name(tmp_path):
    line = _refused(tmp_path, "--set", "learner.num_critic=4")
    assert "'num_critic'" in line and "did you mean 'num_critics'?" in line


def test_a_mistyped_node_is_refused_with_the_closest_name(tmp_path):
    line = _refused(tmp_path, "--set", "lerner.num_critics=4")
    assert "unknown node 'lerner'" in line and "did you mean 'learner'?" in line


def test_a_mistyped_graph_key_is_refused(tmp_path):
    line = _refused(tmp_path, "--set", "robot_rl.demo={episodes: 0}")
    assert "'demo'" in line and "did you mean 'demos'?" in line


def test_a_value_of_the_wrong_type_names_key_value_and_type(tmp_path):
    line = _refused(tmp_path, "--set", "learner.num_critics=many")
    assert "num_critics" in line and "'many'" in line and "expected int" in line


def test_a_value_outside_the_declared_range_is_refused_before_start(tmp_path):
    line = _refused(tmp_path, "--set", "learner.num_critics=99")
    assert "'num_critics'=99 is outside its range [1, 32]" in line


def test_a_setting_for_a_node_outside_the_graph_is_refused(tmp_path):
    line = _refused(tmp_path, "--set", "teleop.device=keyboard")
    assert "'teleop' is not in this graph" in line


@pytest.mark.parametrize("flag", [["--steps", "100"], ["--eval-episodes", "3"]])
def test_a_flag_no_node_of_the_graph_uses_is_refused(tmp_path, flag):
    line = _refused(tmp_path, "--task", "quad_juggle", *flag)
    assert line.startswith(f"robot-rl train: {flag[0]}: no node of this graph") and "juggle_actor" in line


def test_an_integer_becomes_a_float_where_a_float_is_declared():
    config = apply_overrides(load_config(config_path("arm_pick_cube")), {"arm_actor.sync_updates_per_step": 0})
    value = config["arm_actor"]["ros__parameters"]["sync_updates_per_step"]
    assert value == 0.0 and isinstance(value, float)


@pytest.mark.parametrize("param, value, expected", [
    (Param("x", 1.0, ""), 3, 3.0),
    (Param("x", 1, ""), 3, 3),
    (Param("x", [64, 64], ""), [32], [32]),
    (Param("x", "a", ""), "b", "b"),
    (Param("x", False, ""), True, True),
])
def test_values_take_the_declared_type(param, value, expected):
    coerced = coerce_value(param, value)
    assert coerced == expected and type(coerced) is type(expected)


@pytest.mark.parametrize("param, value", [
    (Param("x", 1.0, ""), "fast"),
    (Param("x", 1, ""), 2.5),
    (Param("x", 1, ""), True),
    (Param("x", False, ""), 1),
    (Param("x", "a", ""), 3),
    (Param("x", [64], ""), 64),
])
def test_values_of_another_type_are_refused(param, value):
    with pytest.raises(ParameterError, match="parameter 'x'"):
        coerce_value(param, value)


def test_the_readme_hil_command_settings_are_accepted(tmp_path):
    """`--set arm_actor.sync_updates_per_step=0` (an integer for a float) with teleop added to the
    graph: the run gets past the settings (stopped at the first line it prints)."""
    proc = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", "train", "--task", "arm_pick_cube",
                             "--run-dir", str(tmp_path / "run"),
                             "--set", "robot_rl.nodes=[arm_sim, arm_actor, learner, teleop]",
                             "--set", "robot_rl.demos={episodes: 0}", "--set", "teleop.device=keyboard",
                             "--set", "arm_sim.clock_mode=realtime", "--set", "arm_actor.sync_updates_per_step=0",
                             "--plain"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
    finally:
        proc.kill()
        stderr = proc.communicate()[1]
    assert first.startswith("robot_rl: task arm_pick_cube"), first + stderr


@pytest.mark.parametrize("section, key, expected", [
    ("learner", "num_critic", "did you mean 'num_critics'?"),
    ("lerner", "num_critics", "did you mean 'learner'?"),
])
def test_unknown_keys_in_a_config_file_are_refused(tmp_path, section, key, expected):
    config = yaml.safe_load(config_path("arm_lift").read_text())
    config.setdefault(section, {"ros__parameters": {}})["ros__parameters"][key] = 4
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(SettingsError, match=f"{path}.*{expected}"):
        load_config(path)
    result = _train(tmp_path, "--config", str(path))
    assert result.returncode == 2 and expected in result.stderr


def test_an_unknown_graph_key_in_a_config_file_is_refused(tmp_path):
    config = yaml.safe_load(config_path("arm_lift").read_text())
    config["robot_rl"]["ros__parameters"]["node"] = ["arm_sim"]
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(SettingsError, match="no key 'node' \\(did you mean 'nodes'\\?\\)"):
        load_config(path)


def test_the_old_graph_section_layout_is_refused_with_the_new_one_named(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("robot_rl:\n  task: arm_lift\n  nodes: [sim]\n")
    with pytest.raises(SettingsError, match="robot_rl: {ros__parameters:"):
        load_config(path)


def test_a_node_refuses_an_undeclared_parameter_naming_the_closest():
    result = subprocess.run([sys.executable, "-m", "robot_rl.cli", "node", "learner", "--ros-args",
                             "-p", "utd_rato:=2"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "'utd_rato' (did you mean 'utd_ratio'?)" in result.stderr


def test_a_node_takes_an_integer_for_a_float_parameter(tmp_path):
    """`-p sync_updates_per_step:=0` (rclpy would refuse an INTEGER for a DOUBLE) gets past the
    parameters; the deliberately bad `eval_episodes` after it then stops the node with exit 2."""
    result = subprocess.run([sys.executable, "-m", "robot_rl.cli", "node", "arm_actor", "--ros-args",
                             "-p", "sync_updates_per_step:=0", "-p", "eval_episodes:=many",
                             "-p", f"run_dir:={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "sync_updates_per_step" not in result.stderr
    assert "parameter 'eval_episodes'='many' (str): expected int" in result.stderr


def test_a_run_that_ends_before_the_warm_up_warns(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", "train", "--run-dir", str(tmp_path / "run"),
                             "--steps", "100", "--set", "robot_rl.demos={episodes: 0}", "--plain"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        warning = proc.stderr.readline()
    finally:
        proc.kill()
        proc.communicate()
    assert "warning: arm_actor.total_steps=100 is not more than learner.warmup_transitions=500" in warning
    assert "trains nothing" in warning


def test_a_refused_value_names_this_runs_value_and_what_the_default_means():
    """`record` sets arm_actor.episode_time_s to 30 s: a mistyped --set names that, not only the declared 0."""
    config = apply_overrides(load_config(config_path("arm_lift")), {"arm_actor.episode_time_s": 30.0})
    with pytest.raises(SettingsError) as refused:
        apply_overrides(config, {"arm_actor.episode_time_s": "abc"})
    message = str(refused.value)
    assert "'abc'" in message and "0: the task's horizon" in message and "this run's value is 30.0" in message
