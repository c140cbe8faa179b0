"""How good a progress reward is, measured the way VLAC, GVL and ReWiND report it.

* value-order correlation (VOC): Spearman correlation between the accumulated value and time
  along a successful demonstration up to its first success (1: value rises monotonically);
* negative share: share of steps scored negative where progress is really lost (a successful
  demonstration played backwards, or the part of a failing trajectory after it starts to fail);
* wrong-goal mean: mean delta per step when a demonstration is scored against another task's goal
  (should be about 0: no progress toward a goal nobody pursues);
* done precision / recall / F1 against the frames that show success.
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

import numpy as np
from scipy.stats import spearmanr

from robot_rl.rewards.progress import ProgressEpisode, ProgressScorer, accumulate_value
from robot_rl.rewards.success import classification_metrics

__all__ = ["trajectory_scores", "value_order_correlation", "evaluate_progress"]


def trajectory_scores(scorer: ProgressScorer, first: dict[str, np.ndarray], frames: dict[str, np.ndarray],
                      goal: str, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """(deltas (T,), done probabilities (T,)) of consecutive frame pairs of one trajectory
    (camera -> (T + 1, H, W, 3)), scored against the trajectory's `first` frame (camera -> (H, W, 3))."""
    n = len(next(iter(frames.values())))
    deltas, done = [], []
    for start in range(0, n - 1, chunk):
        stop = min(start + chunk, n - 1)
        d, p = scorer.score({c: f[None] for c, f in first.items()}, {c: f[start:stop] for c, f in frames.items()},
                            {c: f[start + 1:stop + 1] for c, f in frames.items()}, goal)
        deltas.append(d)
        done.append(p)
    return np.concatenate(deltas), np.concatenate(done)


def value_order_correlation(values: np.ndarray) -> float:
    """Spearman correlation of `values` with their index (time); 0 for a constant sequence."""
    values = np.asarray(values, np.float64)
    if values.size < 2 or np.ptp(values) == 0:
        return 0.0
    return float(spearmanr(values, np.arange(values.size)).statistic)


def evaluate_progress(scorer: ProgressScorer, demos: Sequence[ProgressEpisode], done_threshold: float,
                      wrong_goals: dict[str, str] | None = None,
                      failures: Sequence[tuple[ProgressEpisode, int]] = ()) -> dict[str, Any]:
    """Metrics of a scorer on held-out episodes.

    demos: successful demonstrations (VOC, rewound negatives, done labels, wrong goals).
    wrong_goals: goal -> another goal to score each demonstration against (None: skip).
    failures: (failing episode, step index at which it starts to lose progress).
    """
    demos = [e for e in demos if e.success]
    if not demos:
        raise ValueError("evaluate_progress needs at least one successful demonstration")
    vocs, rewound, failing, wrong, probabilities, labels = [], [], [], [], [], []
    for episode in demos:
        first = {c: f[0] for c, f in episode.frames.items()}
        deltas, done = trajectory_scores(scorer, first, episode.frames, episode.goal)
        # Up to the first success: frames held past it (for done labels) are not the demonstration.
        end = int(np.argmax(episode.done_frames)) + 1 if episode.done_frames.any() else len(episode.done_frames)
        vocs.append(value_order_correlation(accumulate_value(deltas)[:end]))
        probabilities.append(done)
        labels.append(episode.done_frames[1:])
        backwards = {c: f[::-1] for c, f in episode.frames.items()}
        rewound.append(trajectory_scores(scorer, first, backwards, episode.goal)[0] < 0)
        if wrong_goals and episode.goal in wrong_goals:
            wrong.append(trajectory_scores(scorer, first, episode.frames, wrong_goals[episode.goal])[0])
    for episode, onset in failures:
        first = {c: f[0] for c, f in episode.frames.items()}
        deltas, done = trajectory_scores(scorer, first, episode.frames, episode.goal)
        failing.append(deltas[onset:] < 0)
        probabilities.append(done)
        labels.append(episode.done_frames[1:])
    done_metrics = classification_metrics(np.concatenate(probabilities) >= done_threshold, np.concatenate(labels))
    rewound_steps, failing_steps = np.concatenate(rewound), np.concatenate(failing) if failing else np.zeros(0, bool)
    negatives = np.concatenate([rewound_steps, failing_steps])
    return {
        "voc_median": float(statistics.median(vocs)), "voc_mean": float(np.mean(vocs)), "voc_min": float(min(vocs)),
        "negative_share": float(negatives.mean()), "negative_share_rewound": float(rewound_steps.mean()),
        "negative_share_failing": float(failing_steps.mean()) if failing_steps.size else None,
        "wrong_goal_mean": float(np.concatenate(wrong).mean()) if wrong else None,
        "wrong_goal_abs_episode_max": float(max(abs(w.mean()) for w in wrong)) if wrong else None,
        "done_f1": done_metrics["f1"], "done_precision": done_metrics["precision"],
        "done_recall": done_metrics["recall"], "done_threshold": done_threshold,
        "episodes": len(demos), "failing_episodes": len(failures),
    }
