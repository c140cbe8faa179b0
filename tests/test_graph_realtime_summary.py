"""benchmarks/graph_realtime.py's summary: the acceptance rules on hand-made rows, and earlier recipes kept apart."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import graph_realtime  # noqa: E402


def _row(arm, seed, successes, recipe=None, wall_s=960.0, lost=0):
    snapshots = [{"minutes": 2.0 * (i + 1), "transitions": 1200 * (i + 1), "success": s}
                 for i, s in enumerate(successes)]
    row = {"arm": arm, "seed": seed, "wall_s": wall_s, "snapshots": snapshots,
           "minutes_to_90": graph_realtime.first_reached(snapshots, 0.9, "minutes"),
           "lost_transitions": lost, "duplicate_transitions": 0, "act_latency_ms_p99": 5.0,
           "learner_updates_per_s": 9.9, "intervention_steps": 0}
    if recipe:
        row["recipe"] = recipe
    return row


def test_a_target_counts_at_the_first_of_two_consecutive_snapshots():
    snaps = [{"minutes": m, "success": s} for m, s in ((2, 0.92), (4, 0.88), (6, 0.9), (8, 0.95))]
    assert graph_realtime.first_reached(snaps, 0.9, "minutes") == 6
    assert graph_realtime.first_reached(snaps[:3], 0.9, "minutes") is None


def test_summary_reports_the_current_recipe_and_keeps_earlier_ones_beside_it():
    new = "learner.feature_views=4"
    rows = [_row("realtime", 0, [0.5, 0.9, 0.92], recipe=new),  # 4 min
            _row("realtime", 1, [0.5, 0.8, 0.85], recipe=new),  # never: counts as its 16 min
            _row("realtime", 2, [0.9, 0.95, 0.9], recipe=new),  # 2 min
            _row("two_actors", 0, [0.91, 0.93], recipe=new),
            _row("realtime", 0, [0.7, 0.8, 0.86], wall_s=1200.0, lost=1)]  # no recipe: it ran feature_views=1
    summary = graph_realtime.summarize(rows, new)
    assert summary["recipe"] == new and summary["rows"] == 4
    assert summary["wall_min_to_90"] == 4.0 and summary["realtime_seeds_reaching_90"] == "2/3"
    assert summary["two_actor_time_ratio"] == 0.5 and summary["lost_transitions"] == 0
    earlier = summary["earlier_recipes"]["learner.feature_views=1"]
    assert earlier["wall_min_to_90"] == 20.0 and earlier["realtime_seeds_reaching_90"] == "0/1"
    assert earlier["lost_transitions"] == 1
