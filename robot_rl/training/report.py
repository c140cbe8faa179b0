"""`robot-rl report <run>`: success rate and intervention rate over a run, as one PNG.

Reads what runs leave behind: `episodes.jsonl` (one line per training episode, written by the
learner node of `robot-rl train` and HIL sessions) or `history.json` (`robot-rl train --env`,
evaluation rows). Episode logs are smoothed with a moving average over `window` episodes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from robot_rl.outputs import atomic_path

__all__ = ["load_run", "rates", "write_report"]


def load_run(run: str | Path) -> list[dict]:
    """Rows of a run directory: {"steps", "success", "intervened"} per episode (episodes.jsonl) or
    {"steps", "success_rate", "train_success_rate", "intervention_rate"} per evaluation (history.json)."""
    run = Path(run)
    episodes, history = run / "episodes.jsonl", run / "history.json"
    if episodes.exists():
        rows = []
        for number, line in enumerate(episodes.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                rows.append({"steps": int(entry["env_steps"]), "success": bool(entry["success"]),
                             "intervened": int(entry.get("interventions", 0)) > 0})
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{episodes}:{number}: not an episode record ({exc})") from None
        if not rows:
            raise ValueError(f"{episodes} has no episodes yet")
        return rows
    if history.exists():
        rows = json.loads(history.read_text())
        if not isinstance(rows, list) or not rows or "steps" not in rows[0]:
            raise ValueError(f"{history} is not a training history")
        return rows
    raise FileNotFoundError(f"{run} has neither episodes.jsonl nor history.json")


def rates(rows: list[dict], window: int) -> dict[str, np.ndarray]:
    """Steps and the curves to plot: per-episode logs as moving averages over `window` episodes
    (shorter at the start), evaluation histories as they are."""
    steps = np.array([r["steps"] for r in rows], dtype=np.float64)
    if "success" in rows[0]:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        kernel = np.ones(window)

        def smooth(values):
            values = np.asarray(values, dtype=np.float64)
            counts = np.convolve(np.ones_like(values), kernel)[:len(values)]
            return np.convolve(values, kernel)[:len(values)] / counts

        return {"steps": steps, "success rate (training episodes)": smooth([r["success"] for r in rows]),
                "intervention rate": smooth([r["intervened"] for r in rows])}
    curves = {"steps": steps, "success rate (evaluation)": np.array([r["success_rate"] for r in rows])}
    if "train_success_rate" in rows[0]:
        curves["success rate (training episodes)"] = np.array([r["train_success_rate"] for r in rows])
    curves["intervention rate"] = np.array([r.get("intervention_rate", 0.0) for r in rows])
    return curves


def write_report(rows: list[dict], out: str | Path, window: int = 20, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = rates(rows, window)
    steps = curves.pop("steps")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name, values in curves.items():
        (bottom if name == "intervention rate" else top).plot(steps, values, label=name)
    top.set_ylabel("success rate")
    bottom.set_ylabel("episodes with interventions")
    bottom.set_xlabel("environment steps")
    for axis in (top, bottom):
        axis.set_ylim(-0.02, 1.02)
        axis.grid(alpha=0.3)
        axis.legend(loc="best")
    top.set_title(title)
    fig.tight_layout()
    out = Path(out)
    try:
        with atomic_path(out) as tmp:  # a failed write leaves an earlier report whole
            fig.savefig(tmp, dpi=100, format="png")
    finally:
        plt.close(fig)
    return out
