"""`robot-rl report`: curves from a run's episode log or history, and the PNG."""

import json

import numpy as np
import pytest

from robot_rl.cli import main
from robot_rl.training.report import load_run, rates


def test_moving_averages_of_an_episode_log(tmp_path):
    lines = [{"env_steps": 10 * (i + 1), "success": i >= 2, "interventions": int(i < 2), "return": 0.0}
             for i in range(4)]
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    curves = rates(load_run(tmp_path), window=2)
    np.testing.assert_allclose(curves["steps"], [10, 20, 30, 40])
    np.testing.assert_allclose(curves["success rate (training episodes)"], [0, 0, 0.5, 1])  # first: 1 episode
    np.testing.assert_allclose(curves["intervention rate"], [1, 1, 0.5, 0])
    assert main(["report", str(tmp_path)]) == 0
    png = (tmp_path / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_history_and_bad_runs(tmp_path):
    (tmp_path / "history.json").write_text(json.dumps([
        {"steps": 2000, "success_rate": 0.5, "train_success_rate": 0.6, "intervention_rate": 0.4},
        {"steps": 4000, "success_rate": 0.9, "train_success_rate": 0.95, "intervention_rate": 0.1}]))
    curves = rates(load_run(tmp_path), window=20)
    np.testing.assert_allclose(curves["success rate (evaluation)"], [0.5, 0.9])
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "r.png")]) == 0
    assert main(["report", str(tmp_path / "missing")]) == 2
    (tmp_path / "episodes.jsonl").write_text('{"env_steps": 1}\n')
    with pytest.raises(ValueError, match="episodes.jsonl:1"):
        load_run(tmp_path)
