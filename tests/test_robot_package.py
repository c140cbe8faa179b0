"""A robot added from outside robot_rl: tests/robot_package (a two-link planar arm in MuJoCo) is installed beside
robot_rl as a user installs theirs (here into a folder of the test's own, never into the environment), found
through the entry-point group `robot_rl.robots`, and trained through the node graph as separate processes with
its own simulator and actor nodes, config, demonstrations, evaluation and command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
ROOT = TESTS.parent


@pytest.fixture(scope="module")
def planar_env(tmp_path_factory) -> dict[str, str]:
    """The environment of a process that has the planar robot package installed (pip, from a copy of
    tests/robot_package so its build leaves nothing in the checkout)."""
    scratch = tmp_path_factory.mktemp("planar")
    source, site = scratch / "source", scratch / "site"
    shutil.copytree(TESTS / "robot_package", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(source)], check=True, capture_output=True, timeout=300)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
            "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_LOCALHOST_ONLY": "1"}


def _cli(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "robot_rl.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_robot_rl_knows_nothing_of_the_outside_robot():
    named = [str(p.relative_to(ROOT)) for p in (ROOT / "robot_rl").rglob("*") if p.is_file()
             and p.suffix in (".py", ".yaml", ".md") and "planar" in p.read_text().lower()]
    named += [name for name in ("setup.py", "launch/train.launch.py") if "planar" in (ROOT / name).read_text()]
    assert not named, f"robot_rl names the test robot: {named}"


@pytest.mark.timeout(300)
def test_an_outside_robot_trains_through_the_graph_and_its_policy_replays(planar_env, tmp_path):
    listed = _cli(planar_env, "--help")
    assert listed.returncode == 0 and "planar" in listed.stdout, listed.stdout
    expert = _cli(planar_env, "planar", "expert", "--episodes", "20")
    assert expert.returncode == 0, expert.stderr
    assert json.loads(expert.stdout.strip().splitlines()[-1])["success_rate"] >= 0.9

    run = tmp_path / "run"
    steps = 3000
    result = _cli(planar_env, "train", "--task", "planar_reach", "--steps", str(steps), "--seed", "0", "--plain",
                  "--run-dir", str(run), timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "as separate processes" in result.stdout
    evaluation = json.loads((run / "eval.json").read_text())
    # Random actions reach 2-4 % of the targets in 20 steps.
    assert evaluation["episodes"] == 20 and evaluation["success_rate"] >= 0.8, evaluation
    assert evaluation["transitions_sent"] == steps and evaluation["transitions_acked_all"], evaluation
    learner = json.loads((run / "learner_summary.json").read_text())
    assert learner["transitions_received"] == learner["online_size"] == steps, learner  # each stored once
    assert learner["demo_size"] > 0  # the robot's scripted demonstrations, recorded by its own recorder

    replay = _cli(planar_env, "eval", "--policy", str(run), "--episodes", "20")
    assert replay.returncode == 0, replay.stderr
    replayed = json.loads(replay.stdout.strip().splitlines()[-1])
    assert replayed["kind"] == "graph_run" and replayed["task"] == "planar_reach", replayed
    assert replayed["env_id"] == "planar_robot/PlanarReach-v0" and replayed["success_rate"] >= 0.8, replayed


def test_an_outside_robots_nodes_get_sros2_enclaves_from_their_declared_endpoints(planar_env, tmp_path):
    keystore = tmp_path / "keystore"
    result = _cli(planar_env, "security", "init", "--task", "planar_reach", "--keystore", str(keystore))
    assert result.returncode == 0, result.stderr
    permissions = (keystore / "enclaves" / "planar_actor" / "permissions.xml").read_text()
    assert "rt/planar/cmd" in permissions and "rq/planar_sim/resetRequest" in permissions


def test_a_robot_claiming_a_taken_name_or_task_is_refused(monkeypatch):
    from robot_rl.robots import registry

    arm = registry.robots()["arm"]
    impostors = {"same_name": registry.Robot(name="arm", description="another arm"),
                 "same_task": registry.Robot(name="other", description="x", tasks={"arm_lift": "x:y"})}
    for reference, impostor in impostors.items():
        monkeypatch.setattr(sys.modules[__name__], reference, impostor, raising=False)
        monkeypatch.setattr(registry, "entry_points",
                            lambda group, ref=reference: [type("EP", (), {"value": f"{__name__}:{ref}"})()])
        registry.robots.cache_clear()
        with pytest.raises(ValueError, match=r"claimed by both robot_rl\.robots\.arm and test_robot_package"):
            registry.robots()
    registry.robots.cache_clear()
    monkeypatch.undo()
    assert registry.robots()["arm"] == arm
