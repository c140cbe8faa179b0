"""The first Ctrl-C stops `robot-rl juggle train` (exit 130, the command's one line, no partial output) and the
`ppo_learner` node (within seconds, even while torch.compile compiles its first update)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ENV = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_LOCALHOST_ONLY": "1", "ROS_DOMAIN_ID": "92",
       "PYTHONWARNINGS": "ignore"}
JUGGLE_TRAIN = ["juggle", "train", "--out", "policy", "--num-envs", "8", "--iterations", "1000", "--eval-every", "1"]


def tree_digest(path: Path) -> dict[str, str]:
    return {str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(path.rglob("*")) if f.is_file()}


def interrupted(args: list[str], cwd: Path, after_s: float, env: dict | None = None) -> tuple[int, str, float]:
    """(exit code, stderr, seconds from SIGINT to exit) of the command interrupted once, `after_s` after its start."""
    process = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", *args], cwd=cwd, env={**ENV, **(env or {})},
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               # a shell's background job starts with SIGINT ignored; a user's terminal does not
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(after_s)
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail("did not stop within 60 s of SIGINT")
    return process.returncode, stderr, time.monotonic() - sent


@pytest.mark.parametrize("after_s", [5.0, 14.0])  # building the env; training (compiling, evaluating)
def test_ctrl_c_stops_juggle_training_keeping_no_partial_output(tmp_path, after_s):
    code, stderr, _ = interrupted(JUGGLE_TRAIN, tmp_path, after_s)
    assert code == 130, stderr
    assert stderr.splitlines() == ["robot-rl juggle train: interrupted; outputs being written were not kept"]
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_leaves_an_overwritten_policy_as_it_was(tmp_path):
    for name, marker in (("policy", "card.json"), ("policy-run", "history.json")):  # what a finished run leaves
        (tmp_path / name).mkdir()
        (tmp_path / name / marker).write_text("{}")
    before = tree_digest(tmp_path)
    code, stderr, _ = interrupted([*JUGGLE_TRAIN, "--overwrite"], tmp_path, 14.0)
    assert code == 130 and len(stderr.splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert tree_digest(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["policy", "policy-run"]


def ppo_learner(run_dir: Path, compile_losses: bool) -> list[str]:
    return ["node", "ppo_learner", "--ros-args", "-p", "num_envs:=8", "-p", "device:=cpu",
            "-p", f"compile:={str(compile_losses).lower()}", "-p", f"run_dir:={run_dir}"]


def test_ppo_learner_stops_while_compiling_its_first_update(tmp_path):
    # A cache of its own: the first update compiles from scratch (15 s or more on a CPU), when SIGINT arrives.
    code, stderr, took = interrupted(ppo_learner(tmp_path / "run", True), tmp_path, 12.0,
                                     env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert code == 0 and took < 10.0, (took, stderr)
    assert "Traceback" not in stderr, stderr


def test_ppo_learner_saves_on_ctrl_c(tmp_path):
    code, stderr, took = interrupted(ppo_learner(tmp_path / "run", False), tmp_path, 14.0)
    assert code == 0 and took < 5.0, (took, stderr)
    assert (tmp_path / "run" / "ppo_checkpoint.pt").is_file() and (tmp_path / "run" / "policy").is_dir(), stderr
