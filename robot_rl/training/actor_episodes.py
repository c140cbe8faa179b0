"""What the actor reports of its episodes and steps (robot_rl/training/actor.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class EpisodeStats:
    index: int
    steps: int = 0
    ret: float = 0.0
    success: bool = False
    success_check: bool = False
    """The task's own success check where the episode ended (`success` follows a person's label)."""
    interventions: int = 0
    """Times a person took over (HIL-SERL's intervention_count)."""
    intervention_steps: int = 0
    """Steps executed by a person (HIL-SERL's intervention_steps)."""
    evaluation: bool = False
    policy_version: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "steps": self.steps, "return": round(self.ret, 4), "success": self.success,
                "success_check": self.success_check, "interventions": self.interventions,
                "intervention_steps": self.intervention_steps, "evaluation": self.evaluation,
                "policy_version": self.policy_version}


@dataclass
class StepResult:
    action: np.ndarray | None
    """Action to execute now; None when the episode just ended (reset the robot)."""
    episode: EpisodeStats | None = None
    """The finished episode when action is None."""
