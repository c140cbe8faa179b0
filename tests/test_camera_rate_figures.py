"""benchmarks/camera_rate.py's figures, from an actor timing log written by the actor's own ActTiming: the control
rate counts only periods inside episodes (a reset is none), missed periods and the frame age as the actor measures
them; results are appended per configuration and a broken results file is refused, not replaced."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("rclpy")  # the actor's timing log is robot_rl/ros/act_timing.py's

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import camera_rate  # noqa: E402

from robot_rl.ros import act_timing  # noqa: E402
from robot_rl.ros.act_timing import ActTiming  # noqa: E402

PERIOD_NS = 33_333_333


def _timing_log(path: Path, monkeypatch) -> None:
    """Two episodes of 30 steps at 30 Hz with a 200 ms reset between them and one period skipped in the second;
    every step 5 ms from its observation to its command (its frames 20 ms older), but two steps of 40 ms."""
    clock = iter(range(10**18, 10**18 + 10**12, PERIOD_NS))
    command_ns = []
    for episode in range(2):
        for step in range(30):
            command_ns.append(next(clock))
            if episode == 1 and step == 10:
                next(clock)  # a period without a command
        for _ in range(6):
            next(clock)  # the reset
    times = iter(command_ns)
    monkeypatch.setattr(act_timing, "time", SimpleNamespace(time_ns=lambda: next(times)))  # the commands' wall clock
    timing = ActTiming(1 / 30, frames=True, log_path=str(path))
    for i, t in enumerate(command_ns):
        latency = 0.040 if i in (3, 40) else 0.005
        stamp = t - int(latency * 1e9)
        timing.acted(stamp, 0.0, 0.001, latency, frames_stamp=stamp - 20_000_000, episode=i // 30)
    timing.close()


def test_the_figures_of_a_window(tmp_path, monkeypatch):
    log = tmp_path / "timing.csv"
    _timing_log(log, monkeypatch)
    timing = camera_rate.read_timing(log)
    assert len(timing["act_ms"]) == 60
    every = np.ones(60, bool)
    figures = camera_rate.window_figures(timing, every, 1 / 30)
    # 58 intervals inside episodes, one of them two periods long: 58 / (59 periods)
    assert figures["control_hz_achieved"] == pytest.approx(58 / (59 * PERIOD_NS * 1e-9), abs=1e-3)
    assert figures["skipped_periods"] == 1 and figures["episodes"] == 2 and figures["steps"] == 60
    assert figures["missed_periods_fraction"] == pytest.approx(2 / 60, abs=1e-5)
    assert figures["act_latency_p50_ms"] == pytest.approx(5.0) and figures["frame_age_p50_ms"] == pytest.approx(25.0)
    assert figures["frame_age_p99_ms"] == pytest.approx(60.0, abs=0.5)
    assert not any(camera_rate.targets_met(figures).values())  # 29.5 Hz: one period in 59 skipped is too many
    first_episode = camera_rate.window_figures(timing, timing["episode"] == 0, 1 / 30)
    assert first_episode["control_hz_achieved"] == pytest.approx(1e9 / PERIOD_NS, abs=1e-3)
    assert camera_rate.targets_met(first_episode)["control_hz_achieved"]
    with pytest.raises(SystemExit, match="not the actor's timing log"):
        (tmp_path / "other.csv").write_text("a,b\n1,2\n")
        camera_rate.read_timing(tmp_path / "other.csv")


def test_results_are_appended_per_configuration_and_a_broken_file_is_kept(tmp_path):
    path = tmp_path / "camera_rate.json"
    row = {"transport": "shm", "mcap": None, "steps": 9000}
    camera_rate.append_result(row, path)
    camera_rate.append_result({**row, "mcap": "zstd"}, path)
    camera_rate.append_result({**row, "steps": 9001}, path)
    rows = json.loads(path.read_text())
    assert [r["steps"] for r in rows["shm"]] == [9000, 9001] and len(rows["shm+mcap_zstd"]) == 1
    path.write_text("{not json")
    with pytest.raises(SystemExit, match="not valid JSON"):
        camera_rate.append_result(row, path)
    assert path.read_text() == "{not json"


def test_a_run_goes_in_its_workdir_kept_or_in_a_temporary_folder_removed_after(tmp_path):
    seen = []

    def run(args, folder):
        (folder / "timing.csv").write_text("x")
        seen.append(folder)
        return {"folder": str(folder)}

    camera_rate.run_in_workdir("camera_rate", run, SimpleNamespace(workdir=None))
    assert not seen[-1].exists()  # temporary: gone
    kept = tmp_path / "kept"
    camera_rate.run_in_workdir("camera_rate", run, SimpleNamespace(workdir=kept))
    assert seen[-1] == kept.resolve() and (kept / "timing.csv").exists()
    with pytest.raises(SystemExit, match="--workdir .*kept is not empty"):
        camera_rate.run_in_workdir("camera_rate", run, SimpleNamespace(workdir=kept))
    assert len(seen) == 2 and (kept / "timing.csv").read_text() == "x"
