"""The arm's nodes were renamed `sim` -> `arm_sim` and `actor` -> `arm_actor`; until 0.2.0 every place a
user writes a node name takes the old one, with one deprecation line on stderr: the executables, config
sections and the graph's node lists, `--set`, `robot-rl node`, and run directories made before the
rename. SROS2 keystores with the old enclave names are refused with what to do. The alias table is
`robot_rl.ros.node_kinds.DEPRECATED_NODE_NAMES`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from robot_rl.ros import node_kinds
from robot_rl.ros.graph import NodeSpec, apply_overrides, build_graph, config_path, load_config
from robot_rl.ros.node_kinds import DEPRECATED_NODE_NAMES, NODE_KINDS, deprecation_line
from robot_rl.ros.settings import SettingsError

FIXTURES = Path(__file__).parent / "fixtures" / "formats"
BIN = Path(sys.executable).parent


def _line(what: str, old: str) -> str:
    new = DEPRECATED_NODE_NAMES[old]
    return f"robot_rl: {what} '{old}' is deprecated, use '{new}' (the old name is removed in 0.2.0)"


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    """Each test sees the warnings its own calls give (they are said once per process)."""
    monkeypatch.setattr(node_kinds, "_warned", set())


def test_the_alias_table_names_current_nodes_only():
    assert DEPRECATED_NODE_NAMES == {"sim": "arm_sim", "actor": "arm_actor"}
    assert set(DEPRECATED_NODE_NAMES.values()) <= set(NODE_KINDS)
    assert not set(DEPRECATED_NODE_NAMES) & set(NODE_KINDS)
    assert deprecation_line("config section", "sim") == _line("config section", "sim")


def _old_config(tmp_path: Path, task: str = "arm_lift", both: bool = False) -> Path:
    """`task`'s packaged config as it was written before the rename."""
    config = yaml.safe_load(config_path(task).read_text())
    for old, new in DEPRECATED_NODE_NAMES.items():
        config[old] = config[new] if both else config.pop(new)
    graph = config["robot_rl"]["ros__parameters"]
    graph["nodes"] = ["sim", "actor", "learner"]
    graph["restarts"] = {"actor": 2}
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_a_config_with_the_old_sections_loads_under_the_new_names(tmp_path, capsys):
    config = load_config(_old_config(tmp_path))
    new = load_config(config_path("arm_lift"))
    assert {k: v for k, v in config.items() if k != "robot_rl"} == {k: v for k, v in new.items() if k != "robot_rl"}
    assert config["robot_rl"]["nodes"] == ["arm_sim", "arm_actor", "learner"]
    assert {s.name: s.max_restarts for s in build_graph(config)} == {"arm_sim": 0, "arm_actor": 2, "learner": 3}
    err = capsys.readouterr().err.splitlines()
    for old in DEPRECATED_NODE_NAMES:
        assert err.count(_line("config section", old)) == 1
        assert err.count(_line("robot_rl.nodes entry", old)) == 1
    assert _line("robot_rl.restarts key", "actor") in err


def test_a_config_naming_a_node_both_ways_is_refused_naming_both(tmp_path):
    with pytest.raises(SettingsError, match="section 'sim' and 'arm_sim' are the same node.*keep only 'arm_sim'"):
        load_config(_old_config(tmp_path, both=True))


def test_set_with_an_old_node_name_sets_the_new_node(capsys):
    config = load_config(config_path("arm_lift"))
    config = apply_overrides(config, {"actor.total_steps": 7, "sim.control_hz": 5,
                                      "robot_rl.nodes": ["sim", "actor", "learner"],
                                      "robot_rl.restarts": {"sim": 1}})
    assert config["arm_actor"]["ros__parameters"]["total_steps"] == 7
    assert config["arm_sim"]["ros__parameters"]["control_hz"] == 5.0
    assert "actor" not in config and "sim" not in config
    assert config["robot_rl"]["nodes"] == ["arm_sim", "arm_actor", "learner"]
    assert config["robot_rl"]["restarts"] == {"arm_sim": 1}
    err = capsys.readouterr().err.splitlines()
    assert _line("--set node", "actor") in err and _line("--set node", "sim") in err


def test_robot_rl_train_takes_old_names_in_set_and_config(tmp_path):
    """The command line: `--set actor.x=...` reaches the new node (the run gets past the settings to its
    first line) with one deprecation line per old name."""
    proc = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", "train", "--config", str(_old_config(tmp_path)),
                             "--run-dir", str(tmp_path / "run"), "--set", "robot_rl.demos={episodes: 0}",
                             "--set", "actor.total_steps=1000", "--set", "actor.eval_episodes=1", "--plain"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
    finally:
        proc.kill()
        stderr = proc.communicate()[1]
    assert first.startswith("robot_rl: task arm_lift"), first + stderr
    lines = stderr.splitlines()
    assert lines.count(_line("--set node", "actor")) == 1, stderr
    assert lines.count(_line("config section", "sim")) == 1, stderr


@pytest.mark.parametrize("old", sorted(DEPRECATED_NODE_NAMES))
def test_robot_rl_node_takes_the_old_name(old):
    pytest.importorskip("rclpy")
    result = subprocess.run([sys.executable, "-m", "robot_rl.cli", "node", old, "--ros-args", "-p", "seed:=-1"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr  # the new node refused the bad seed
    assert _line("node name", old) in result.stderr.splitlines()
    assert "'seed'" in result.stderr, result.stderr


def test_the_old_executables_are_installed():
    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts") if e.dist.name == "robot_rl"}
    for old, new in DEPRECATED_NODE_NAMES.items():
        assert scripts[new] == f"robot_rl.nodes.{new}:main"
        assert scripts[old] == f"robot_rl.ros.node_kinds:{old}_main"


@pytest.mark.parametrize("old", sorted(DEPRECATED_NODE_NAMES))
def test_an_old_executable_warns_and_runs_the_new_node(old, tmp_path):
    """`ros2 run robot_rl sim` with a params file written before the rename: the new node starts and
    takes the file's old section (its out-of-range control_hz is refused, so it was read)."""
    pytest.importorskip("rclpy")
    script = BIN / old
    if not script.exists():
        pytest.skip(f"{script} is not installed (pip install -e .)")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({old: {"ros__parameters": {"control_hz": 0.01}}}))
    result = subprocess.run([str(script), "--ros-args", "--params-file", str(params)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert lines.count(_line("executable", old)) == 1, result.stderr
    assert lines.count(_line("params file section", old)) == 1, result.stderr
    assert "control_hz" in result.stderr


def test_a_params_file_with_the_new_section_is_passed_on_as_it_is(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"arm_sim": {"ros__parameters": {}}, "/actor": {"ros__parameters": {"seed": 3}}}))
    renamed = node_kinds.renamed_params_file(str(path))
    assert yaml.safe_load(Path(renamed).read_text()) == {"arm_sim": {"ros__parameters": {}},
                                                         "/arm_actor": {"ros__parameters": {"seed": 3}}}
    path.write_text(yaml.safe_dump({"arm_sim": {"ros__parameters": {}}}))
    assert node_kinds.renamed_params_file(str(path)) == str(path)


@pytest.mark.parametrize("commit", sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()))
def test_a_run_directory_made_before_the_rename_resumes(commit, tmp_path, capsys):
    """What `robot-rl train` wrote before the rename: the learner's checkpoint and journal (the committed
    fixture), params.yaml with the old sections, logs named after the old nodes, and the actor's outbox
    and progress (named after its actor_id, not the node). `--resume` takes it: the learner restores,
    the actor's counters continue and the logs go on under the new names."""
    from robot_rl.agents.sac import SACConfig
    from robot_rl.ros.session import check_resumable, claim_run_dir
    from robot_rl.tasks import get_task
    from robot_rl.training.actor import ActorConfig, ActorCore
    from robot_rl.training.learner import LearnerConfig, LearnerCore
    from robot_rl.transport.outbox import Outbox

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / commit / "run", run)
    learner_params = {"task": "arm_lift", "hidden_dims": [16, 16], "num_critics": 2, "run_dir": str(run)}
    (run / "params.yaml").write_text(yaml.safe_dump({
        "sim": {"ros__parameters": {"clock_mode": "lockstep"}},
        "actor": {"ros__parameters": {"task": "arm_lift", "run_dir": str(run), "reset_service": "/sim/reset"}},
        "learner": {"ros__parameters": learner_params}}, sort_keys=False))
    (run / "logs").mkdir()
    for node in ("sim", "actor", "learner"):
        (run / "logs" / f"{node}.log").write_text(f"[INFO] [{node}]: before the rename\n")
    outbox = run / "outbox-actor0"
    outbox.mkdir()
    (outbox / "progress.json").write_text(json.dumps({"train_steps": 120, "episode_index": 3, "transitions_sent": 120,
                                                      "payloads_sent": 3}))

    claim_run_dir(run, resume=True, overwrite=False)
    config = apply_overrides(load_config(config_path("arm_lift")),
                             {"learner.hidden_dims": [16, 16], "robot_rl.demos": {"episodes": 0}})
    specs = build_graph(config, "sim", str(run))
    check_resumable(run, specs)
    assert sorted(p.name for p in (run / "logs").iterdir()) == ["arm_actor.log", "arm_sim.log", "learner.log"]
    assert "before the rename" in (run / "logs" / "arm_actor.log").read_text()
    err = capsys.readouterr().err
    assert "logs/actor.log (made before the node 'actor' became 'arm_actor') continues as" in err

    actor_spec = next(s for s in specs if s.name == "arm_actor")
    assert actor_spec.parameters["run_dir"] == str(run) and actor_spec.parameters["reset_service"] == "/arm_sim/reset"
    actor_id = ActorConfig().actor_id  # the node's outbox: <run_dir>/outbox-<actor_id>, as before
    actor = ActorCore(get_task("arm_lift"), ActorConfig(total_steps=200), Outbox(run / f"outbox-{actor_id}"),
                      progress_path=run / f"outbox-{actor_id}" / "progress.json")
    assert (actor.train_steps, actor.episode_index) == (120, 3)
    task = get_task("arm_lift")
    learner = LearnerCore(LearnerConfig(task.obs_dim, task.action_dim, SACConfig(hidden_dims=(16, 16), batch_size=16),
                                        warmup_transitions=50, seed=0), run)
    try:
        assert learner.restore() and learner.transitions_received == 150
    finally:
        learner.close()


def _keystore(tmp_path: Path, old_names: bool) -> Path:
    """A keystore as `robot-rl security init` writes it, with the enclaves of the renamed nodes under
    their old names when `old_names` (what an earlier version wrote)."""
    from robot_rl.ros.security import write_keystore

    keystore = tmp_path / "keystore"
    config = load_config(config_path("arm_lift"))
    write_keystore(keystore, build_graph(config, "sim"), ())
    if old_names:
        for old, new in DEPRECATED_NODE_NAMES.items():
            (keystore / "enclaves" / new).rename(keystore / "enclaves" / old)
    return keystore


def test_a_keystore_with_the_old_enclave_names_is_refused_with_what_to_do(tmp_path, monkeypatch):
    pytest.importorskip("cryptography")
    from robot_rl.outputs import UserError
    from robot_rl.ros.security import check_keystore

    check_keystore(_keystore(tmp_path / "new", old_names=False))  # the current names pass
    old = _keystore(tmp_path / "old", old_names=True)
    with pytest.raises(UserError, match=r"made for the node '(sim|actor)'.*re-run `robot-rl security init"):
        check_keystore(old)
    monkeypatch.setenv("ROS_SECURITY_KEYSTORE", str(old))
    result = subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", "--run-dir", str(tmp_path / "run"),
                             "--set", "robot_rl.demos={episodes: 0}", "--plain"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = [x for x in result.stderr.splitlines() if "keystore" in x]
    assert "re-run `robot-rl security init --overwrite`" in line


def test_the_enclave_of_a_renamed_node_is_its_new_name():
    from robot_rl.ros.security import NODE_ENDPOINTS, enclave_name

    assert not set(DEPRECATED_NODE_NAMES) & set(NODE_ENDPOINTS)
    spec = NodeSpec("arm_sim", NODE_KINDS["arm_sim"])
    assert enclave_name(spec) == "/arm_sim"


def test_a_graph_config_built_in_code_with_old_names_builds_the_new_nodes(capsys):
    config = {"robot_rl": {"nodes": ["sim", "actor"], "restarts": {"actor": 1}},
              "sim": {"ros__parameters": {"control_hz": 5.0}}}
    specs = {spec.name: spec for spec in build_graph(config, "sim", "/tmp/run")}
    assert list(specs) == ["arm_sim", "arm_actor"]
    assert specs["arm_sim"].parameters == {"control_hz": 5.0} and specs["arm_actor"].max_restarts == 1
    assert specs["arm_actor"].parameters["reset_service"] == "/arm_sim/reset"
    assert _line("config section", "sim") in capsys.readouterr().err.splitlines()
