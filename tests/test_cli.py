"""`robot-rl train` as a user runs it: process graph, Ctrl-C, and a critical node dying."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

from robot_rl.ros.probe import fresh_domain_id  # noqa: E402

FAST = ["--steps", "100000", "--set", "robot_rl.demos={episodes: 0}", "--set", "learner.hidden_dims=[32]",
        "--set", "learner.batch_size=16", "--set", "arm_actor.sync_updates_per_step=0.0", "--plain",
        "--status-period", "1"]


def _start(run_dir: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "robot_rl.cli", "train", "--run-dir", str(run_dir), *FAST,
                             "--domain-id", str(fresh_domain_id())],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _node_pids(run_dir: Path, node: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"robot_rl.nodes.{node} .*{run_dir}/params.yaml"], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


def _wait_for_steps(proc: subprocess.Popen, lines: list[str], timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    for line in proc.stdout:
        lines.append(line)
        if "step " in line and not line.split("step ")[1].startswith("0/"):
            return
        if time.monotonic() > end:
            break
    raise AssertionError("training never started:\n" + "".join(lines))


def _wait_for_the_learner(run_dir: Path, timeout: float = 60) -> None:
    """Until the learner holds transitions (the actor steps without it: `sync_updates_per_step` 0, so under load
    the learner may still be starting when the actor's first steps are printed)."""
    log, end = run_dir / "logs" / "learner.log", time.monotonic() + timeout
    while time.monotonic() < end:
        if log.is_file() and "transitions arriving" in log.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"the learner never heard the actor: {log.read_text() if log.is_file() else 'no log'}")


def test_ctrl_c_stops_every_node_in_order(tmp_path):
    run_dir = tmp_path / "run"  # a new run directory: an existing one is refused
    proc = _start(run_dir)
    lines: list[str] = []
    try:
        _wait_for_steps(proc, lines)
        _wait_for_the_learner(run_dir)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends on Ctrl-C
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = "".join(lines) + out
    assert proc.returncode == 130, text
    assert "interrupted by the user" in text
    resume = text.split("carry the run on with: ")[1].splitlines()[0]  # the same command, resuming its run
    assert resume.startswith("robot-rl train --steps 100000") and resume.endswith(f"--run-dir {run_dir} --resume")
    for node in ("arm_sim", "arm_actor", "learner"):
        assert _node_pids(run_dir, node) == []
    assert (run_dir / "checkpoint.pt").exists()  # the learner saved on its way out


def test_a_dying_critical_node_shuts_the_graph_down_and_says_why(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start(run_dir)
    lines: list[str] = []
    try:
        _wait_for_steps(proc, lines)
        for pid in _node_pids(run_dir, "arm_sim"):
            os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = "".join(lines) + out
    assert proc.returncode == 1, text
    assert "critical node 'arm_sim' exited with code -9" in text
    for node in ("arm_actor", "learner"):
        assert _node_pids(run_dir, node) == []


def test_killing_robot_rl_with_sigkill_takes_its_nodes_down(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start(run_dir)
    lines: list[str] = []
    try:
        _wait_for_steps(proc, lines)
        os.kill(proc.pid, signal.SIGKILL)  # no chance to stop anything in order
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_node_pids(run_dir, n) for n in ("arm_sim", "arm_actor", "learner")):
            time.sleep(0.5)
    finally:
        for node in ("arm_sim", "arm_actor", "learner"):
            for pid in _node_pids(run_dir, node):
                os.kill(pid, signal.SIGKILL)
    for node in ("arm_sim", "arm_actor", "learner"):
        assert _node_pids(run_dir, node) == [], f"{node} outlived its supervisor"
