"""Recovery inside a run and run directories, through `robot-rl train` in a subprocess: nodes
killed with SIGKILL respawn and resume (the run finishes by itself, nothing lost or stored twice),
and a run directory is refused, locked, resumed with its counters, or refused for another network
shape. Plus the supervisor's log watching and the graph spec's restart policy, without ROS."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robot_rl.ros.graph import apply_overrides, build_graph, config_path, load_config
from robot_rl.ros.supervisor import LogWatcher

SMALL = ["robot_rl.demos={episodes: 0}", "arm_actor.batch_transitions=25", "arm_actor.resend_after_s=1.0",
         "learner.warmup_transitions=100", "learner.batch_size=32", "learner.hidden_dims=[64, 64]",
         "learner.publish_period_s=0.5", "learner.checkpoint_period_s=1.0"]


def _train(run_dir: Path, *args: str, settings: list[str] = SMALL, steps: int = 300,
           stdout=subprocess.PIPE) -> subprocess.Popen:
    from robot_rl.ros.probe import fresh_domain_id

    command = [sys.executable, "-m", "robot_rl.cli", "train", "--task", "arm_lift", "--run-dir", str(run_dir),
               "--plain", "--status-period", "1", "--steps", str(steps), "--eval-episodes", "2",
               "--domain-id", str(fresh_domain_id()), *args]
    for setting in settings:
        command += ["--set", setting]
    return subprocess.Popen(command, stdout=stdout, stderr=subprocess.STDOUT if stdout is not subprocess.PIPE
                            else subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        raise AssertionError(f"robot-rl train did not finish within {timeout} s:\n{out[-3000:]}\n{err[-2000:]}")
    return process.returncode, out, err


def _node_pid(run_dir: Path, name: str) -> int | None:
    """The live process of node `name` started for `run_dir` (its command names both)."""
    wanted = {f"__node:={name}", str(run_dir / "params.yaml")}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = set((entry / "cmdline").read_bytes().decode(errors="replace").split("\0"))
            except OSError:
                continue
            if wanted <= args:
                return int(entry.name)
    return None


def _wait(predicate, timeout: float, what: str, process: subprocess.Popen, output: Path) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        if process.poll() is not None:
            raise AssertionError(f"the run ended while waiting for {what}:\n{output.read_text()[-4000:]}")
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{output.read_text()[-4000:]}")


def _since_restart(log: Path, restart: int) -> str:
    """What node log `log` holds after its `restart`-th restart marker ('' before it)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    _, marker, after = text.partition(f"--- restart {restart} ")
    return after if marker else ""


def _kill(run_dir: Path, name: str) -> int:
    pid = _node_pid(run_dir, name)
    assert pid is not None, f"no {name} process"
    os.kill(pid, signal.SIGKILL)
    return pid


def _train_steps(run_dir: Path, actor_id: str = "actor0") -> int:
    path = run_dir / f"outbox-{actor_id}" / "progress.json"
    try:
        return json.loads(path.read_text())["train_steps"]
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def _episode_indexes(run_dir: Path) -> list[int]:
    return [json.loads(line)["index"] for line in (run_dir / "episodes.jsonl").read_text().splitlines()]


def test_run_survives_learner_killed_twice_and_actor_once(tmp_path):
    run_dir, output = tmp_path / "run", tmp_path / "train.out"
    # Lockstep with the learner: the actor waits while the learner is down, so the run cannot end
    # before the kills.
    settings = [*SMALL, "arm_actor.sync_updates_per_step=1.0", "arm_actor.sync_slack_steps=200"]
    with open(output, "w") as out:
        process = _train(run_dir, settings=settings, steps=2500, stdout=out)
    logs = run_dir / "logs"
    try:
        _wait(lambda: _train_steps(run_dir) >= 200, 180, "the actor's first 200 steps", process, output)
        _kill(run_dir, "arm_actor")
        _wait(lambda: "continuing from" in _since_restart(logs / "arm_actor.log", 1), 90, "the actor's restart",
              process, output)
        steps_after_actor_restart = _train_steps(run_dir)
        _wait(lambda: _train_steps(run_dir) > steps_after_actor_restart + 100 and (run_dir / "checkpoint.pt").exists(),
              120, "training after the actor's restart", process, output)
        for restart in (1, 2):
            _kill(run_dir, "learner")
            _wait(lambda restart=restart: "resumed from" in _since_restart(logs / "learner.log", restart), 90,
                  f"the learner's restart {restart}", process, output)
            steps = _train_steps(run_dir)
            _wait(lambda steps=steps: _train_steps(run_dir) > steps + 100, 120,
                  f"training after the learner's restart {restart}",
                  process, output)
        code = process.wait(timeout=300)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)
    text = output.read_text()
    assert code == 0, text[-4000:]
    evaluation = json.loads(text.strip().splitlines()[-1])
    learner = json.loads((run_dir / "learner_summary.json").read_text())
    assert evaluation["episodes"] == 2 and evaluation["train_steps"] >= 2500
    assert evaluation["transitions_acked_all"] is True
    assert learner["transitions_received"] == evaluation["transitions_sent"]  # none lost, none stored twice
    indexes = _episode_indexes(run_dir)
    assert len(indexes) == len(set(indexes))
    status_lines = [line for line in text.splitlines() if "restarts " in line]
    assert any("learner 2" in line and "actor 1" in line for line in status_lines), status_lines[-3:]
    assert "[learner] exited with code -9; restarting (2/3)" in text
    # The live line keeps the control callback's latency apart from the time steps waited for the learner.
    columns = [re.search(r"control p99 ([0-9.]+) ms  learner wait p99 ([0-9.]+) ms", line) for line in status_lines]
    columns = [c for c in columns if c]  # (none before a restarted actor's first step)
    assert len(columns) > len(status_lines) / 2, status_lines[-3:]
    assert isinstance(evaluation["control_ms_p99"], float) and isinstance(evaluation["learner_wait_ms_p99"], float)
    # the run's policy evaluates afterwards as any saved policy does (robot-rl eval on a graph run)
    out = subprocess.run([sys.executable, "-m", "robot_rl.cli", "eval", "--policy", str(run_dir), "--episodes", "2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["kind"] == "graph_run" and result["task"] == "arm_lift" and result["episodes"] == 2
    assert result["policy_version"] >= evaluation["policy_version"] and result["transitions"] >= 2500


def test_car_run_survives_its_actor_killed(tmp_path):
    """The car actor resumes like the arm's: its counters, laps and practice events continue."""
    import torch

    from robot_rl.agents.iql import IQL, IQLConfig
    from robot_rl.ros.probe import fresh_domain_id

    policy, run_dir, output = tmp_path / "policy", tmp_path / "run", tmp_path / "train.out"
    torch.manual_seed(0)
    IQL(10, 2, IQLConfig(), "cpu").export(policy, {"note": "untrained, for tests"})
    command = [sys.executable, "-m", "robot_rl.cli", "train", "--task", "car_race", "--run-dir", str(run_dir),
               "--steps", "500", "--eval-episodes", "1", "--plain", "--status-period", "1",
               "--domain-id", str(fresh_domain_id())]
    for setting in (f"car_actor.policy_dir={policy}", f"learner.initial_actor={policy}", "learner.num_critics=2",
                    "learner.batch_size=64", "learner.warmup_transitions=100", "car_actor.sync_slack_steps=150",
                    "learner.publish_period_s=0.5"):
        command += ["--set", setting]
    with open(output, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        _wait(lambda: _train_steps(run_dir, "car_actor0") >= 150, 240, "the car actor's first 150 steps", process,
              output)
        _kill(run_dir, "car_actor")
        _wait(lambda: "continuing from" in _since_restart(run_dir / "logs" / "car_actor.log", 1), 120,
              "the car actor's restart", process, output)
        code = process.wait(timeout=400)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)
    text = output.read_text()
    assert code == 0, text[-4000:]
    result = json.loads((run_dir / "eval.json").read_text())
    learner = json.loads((run_dir / "learner_summary.json").read_text())
    assert result["train_steps"] >= 500 and result["episodes"] == 1 and result["transitions_acked_all"] is True
    assert learner["transitions_received"] == result["transitions_sent"]  # none lost, none stored twice
    practice = json.loads((run_dir / "outbox-car_actor0" / "practice.json").read_text())
    assert result["events"] == practice["events"] and sum(result["events"].values()) >= 1
    assert any("car_actor 1" in line for line in text.splitlines() if "restarts " in line)


def test_existing_run_dir_is_refused_and_left_unchanged(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "params.yaml").write_text("learner: {}\n")
    code, _, err = _finish(_train(run_dir), timeout=120)
    assert code == 2
    assert err.strip().splitlines() == [(f"robot-rl train: run directory {run_dir} already exists; pass --resume or "
                                         "--overwrite (or choose another path)")]
    assert sorted(p.name for p in run_dir.iterdir()) == ["params.yaml"]
    assert (run_dir / "params.yaml").read_text() == "learner: {}\n"


def test_second_writer_is_refused_by_the_lock(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    hold_lock = ("import sys, time; from pathlib import Path; from robot_rl.ros.session import claim_run_dir; "
                 "claim_run_dir(Path(sys.argv[1]), resume=True, overwrite=False); print('locked', flush=True); "
                 "time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", hold_lock, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        code, _, err = _finish(_train(run_dir, "--resume"), timeout=120)
    finally:
        holder.kill()
        holder.wait()
    assert code == 2
    assert f"run directory {run_dir} is in use by another robot-rl train (pid {holder.pid})" in err
    assert len(err.strip().splitlines()) == 1


def test_resume_continues_counters_and_episodes_and_refuses_another_network_shape(tmp_path):
    run_dir = tmp_path / "run"
    code, out, err = _finish(_train(run_dir, steps=300))
    assert code == 0, out[-3000:] + err[-2000:]
    first = json.loads(out.strip().splitlines()[-1])
    first_episodes = (run_dir / "episodes.jsonl").read_text().splitlines()
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt"))
    assert 1 <= len(checkpoints) <= 3 and (run_dir / "checkpoint.pt").exists()

    code, out, err = _finish(_train(run_dir, "--resume", steps=600))
    assert code == 0, out[-3000:] + err[-2000:]
    second = json.loads(out.strip().splitlines()[-1])
    assert first["train_steps"] >= 300 and second["train_steps"] >= 600
    assert second["transitions_sent"] == second["train_steps"]  # counted on from the first run's
    episodes = (run_dir / "episodes.jsonl").read_text().splitlines()
    assert episodes[:len(first_episodes)] == first_episodes  # appended, the first run's lines untouched
    indexes = _episode_indexes(run_dir)
    assert len(indexes) > len(first_episodes) and len(indexes) == len(set(indexes))
    learner = json.loads((run_dir / "learner_summary.json").read_text())
    assert learner["resumed"] is True and learner["transitions_received"] == second["transitions_sent"]

    code, _, err = _finish(_train(run_dir, "--resume", settings=[*SMALL, "learner.hidden_dims=[32, 32]"]))
    assert code == 2
    assert err.strip().splitlines() == [
        (f"robot-rl train: run directory {run_dir} was made with learner.hidden_dims=[64, 64]; this run asks for "
         "[32, 32]: use the same setting, or --overwrite / another --run-dir")]


def test_silent_robot_is_reported_on_the_console(tmp_path):
    """No simulator in the graph: the actor never hears the robot, and the console says so."""
    output = tmp_path / "train.out"
    with open(output, "w") as out:
        process = _train(tmp_path / "run", settings=[*SMALL, "robot_rl.nodes=[arm_actor, learner]"], stdout=out)
    try:
        _wait(lambda: "started arm_actor, learner" in output.read_text(), 60, "the nodes' start", process, output)
        started = time.monotonic()
        _wait(lambda: "[arm_actor] WARN no observation from the robot for" in output.read_text(), 30,
              "the silent robot's notice", process, output)
        assert time.monotonic() - started < 15  # 5 s of silence, after the actor's own start-up
        _wait(lambda: "NO OBSERVATION for" in output.read_text(), 10, "the status line's flag", process, output)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


def test_log_watcher_reports_each_new_warning_and_error_once(tmp_path):
    log = tmp_path / "arm_actor.log"
    log.write_text("[WARN] [1.0] [actor]: from an earlier run\n")
    watcher = LogWatcher(log)
    with open(log, "a") as f:
        f.write("[INFO] [2.0] [actor]: fine\n[WARN] [3.0] [actor]: no observation\n"
                "[WARN] [4.0] [actor]: no observation\nTraceback (most recent call last):\n"
                '  File "x.py", line 1\nRuntimeError: boom\n[ERROR] [5.0] [actor]: half a li')
    assert watcher.new_problems() == ["WARN no observation", "ERROR RuntimeError: boom"]
    with open(log, "a") as f:
        f.write("ne\n[robot_rl] parameter 'x' refused\n")
    assert watcher.new_problems() == ["ERROR half a line", "ERROR parameter 'x' refused"]


def test_restart_policy_defaults_and_overrides():
    config = load_config(config_path("arm_lift"))
    specs = {s.name: s.max_restarts for s in build_graph(config)}
    assert specs == {"arm_sim": 0, "arm_actor": 3, "learner": 3}
    config = apply_overrides(config, {"robot_rl.restarts": {"learner": 5, "arm_sim": 1}})
    assert {s.name: s.max_restarts for s in build_graph(config)} == {"arm_sim": 1, "arm_actor": 3, "learner": 5}
    with pytest.raises(ValueError, match="robot_rl.restarts.learner must be a whole number"):
        build_graph(apply_overrides(config, {"robot_rl.restarts": {"learner": -1}}))
