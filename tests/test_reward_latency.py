"""benchmarks/reward_latency.py's pure parts: the percentile figures, the ratios to the reference, the stream's
figures, the checkpoint cache that never overwrites a directory it did not build, and the results file's rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import reward_latency  # noqa: E402

from robot_rl.rewards.online import RewardResult  # noqa: E402


def test_percentiles_in_ms():
    figures = reward_latency.percentiles([0.001 * k for k in range(1, 101)])  # 1..100 ms
    assert figures == {"calls": 100, "p50_ms": 50.5, "p99_ms": 99.01, "mean_ms": 50.5}
    assert reward_latency.percentiles([]) == {"calls": 0}


def test_ratios_to_the_reference_at_the_same_batch():
    score = {"progress": {"1": {"p50_ms": 2.0}, "4": {"p50_ms": 4.0}},
             "vlac": {"1": {"p50_ms": 300.0}, "4": {"p50_ms": 1000.0}, "16": {"p50_ms": 4000.0}},
             "vlm_critic": {"1": {"calls": 0}}}
    assert reward_latency.ratios_to_reference(score) == {"vlac": {"1": 150.0, "4": 250.0}, "vlm_critic": {}}


def _result(stamp_s: float, latency_s: float, late: bool) -> RewardResult:
    return RewardResult(int(stamp_s * 1e9), 0.1, 0.1, 0.1, 0.2, late, latency_s, 0.05, False, 1)


def test_stream_figures_count_the_steps_after_the_reference_frame():
    results = [_result(k / 10, 0.05 + 0.01 * k, k == 9) for k in range(1, 10, 2)]  # 5 of 9 scorable steps
    stats = {"frames_skipped": 4, "score_errors": 0, "score_batch_mean": 1.0}
    figures = reward_latency.stream_figures(results, steps=10, seconds=1.0, stats=stats)
    assert figures["scored"] == 5 and figures["scored_share"] == round(5 / 9, 3) and figures["scored_hz"] == 5.0
    assert figures["late"] == 1 and figures["skipped"] == 4 and figures["lag_p50_ms"] == 100.0
    assert figures["batch_mean"] == 1.0


def test_checkpoint_cache_reuses_its_own_and_refuses_anything_else(tmp_path):
    spec = reward_latency.checkpoint_spec("vlm_critic", "2b")
    assert spec == reward_latency.checkpoint_spec("vlm_episode_score", "2b")  # one Qwen3-VL checkpoint for both
    own = tmp_path / f"{spec['model']}-{spec['size']}"
    own.mkdir()
    (own / "weights").write_text("a user's file")
    with pytest.raises(SystemExit, match="not built by this script"):
        reward_latency.checkpoint_dir(tmp_path, "vlm_critic", "2b")
    (own / reward_latency.MARKER).write_text(json.dumps({**spec, "size": "tiny"}))
    with pytest.raises(SystemExit, match="delete .* to rebuild"):
        reward_latency.checkpoint_dir(tmp_path, "vlm_critic", "2b")
    (own / reward_latency.MARKER).write_text(json.dumps(spec))
    assert reward_latency.checkpoint_dir(tmp_path, "vlm_critic", "2b") == own  # reused, not rebuilt
    assert (own / "weights").read_text() == "a user's file"


def test_rows_are_appended_under_device_and_size(tmp_path):
    path = tmp_path / "reward_latency.json"
    reward_latency.append_result({"device": "cpu", "size": "2b", "n": 1}, path)
    reward_latency.append_result({"device": "cuda", "size": "2b", "n": 2}, path)
    reward_latency.append_result({"device": "cpu", "size": "2b", "n": 3}, path)
    rows = json.loads(path.read_text())
    assert {k: [r["n"] for r in v] for k, v in rows.items()} == {"cpu+2b": [1, 3], "cuda+2b": [2]}
    path.write_text("{")
    with pytest.raises(SystemExit, match="not valid JSON"):
        reward_latency.append_result({"device": "cpu", "size": "2b"}, path)
    assert path.read_text() == "{"


def test_quick_settings():
    args = reward_latency.parse_args(["--quick", "--backends", "vlac"])
    assert args.size == "tiny" and args.batches == [1, 4] and args.backends == ["progress", "vlac"]
    with pytest.raises(SystemExit):
        reward_latency.parse_args(["--batches", "0"])
