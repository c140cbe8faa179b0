"""A shipped juggling policy (`card.json` task quad_juggle) judged by JuggleRL's rule: hits per trial."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def juggling_trials(directory: Path, trials: int, seed: int, split: str | None, max_s: float | None) -> dict[str, Any]:
    """`trials` simulated trials of split `split` (default eval), each until the ball drops or `max_s` (default
    600) simulated seconds."""
    from robot_rl.agents.ppo import DeployedPolicy
    from robot_rl.robots.quad.train import check_split, evaluate_policy, summarize

    split, max_s = split or "eval", max_s or 600.0
    check_split(split)
    policy = DeployedPolicy.load(directory)
    summary = summarize(evaluate_policy(policy, trials, max_s, split=split, seed=seed))
    return {"policy": str(directory), "kind": "juggle", "split": split, **summary,
            "rule": f"JuggleRL's true hits per trial (simulated), each trial until the ball drops or {max_s:g} s"}
