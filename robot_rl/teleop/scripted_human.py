"""A scripted human for HIL-SERL: watches the policy and takes over when it goes off track.

The intervener compares each policy action with what the task's scripted expert would do in
the same (privileged) state.  When they disagree for ``off_track_steps`` consecutive steps,
it takes over with a probability that decays as training goes on (people correct a new
policy often and a good one rarely) and then drives with the expert for ``hold_steps``
steps.  Executed expert actions are reported as interventions, so the training loop stores
them as demonstrations too.

Pure numpy, deterministic given the ``rng`` passed to each call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from robot_rl.config_fields import setting

__all__ = ["InterventionConfig", "ScriptedIntervener"]

Expert = Callable[..., np.ndarray]
"""(state, rng, noise) -> action, e.g. ``TaskSpec.expert``."""


@dataclass(frozen=True)
class InterventionConfig:
    """When and how the scripted human takes over."""

    takeover_prob_start: float = setting(1.0, "Probability of taking over an off-track policy at first.",
                                         low=0.0, high=1.0)
    """Probability of taking over once the policy is off track, at the first step."""
    takeover_prob_end: float = setting(0.0, "That probability after decay_steps.", low=0.0, high=1.0)
    """That probability after ``decay_steps`` steps (and from then on)."""
    decay_steps: int = setting(8_000, "Control steps over which the takeover probability decays.", low=0,
                               high=100_000_000)
    """Steps (calls) over which the probability falls linearly from start to end; 0: always end."""
    off_track_steps: int = setting(5, "Consecutive disagreeing steps before the policy counts as off track.",
                                   low=1, high=1000)
    """Consecutive disagreeing steps after which the policy counts as off track (a person lets a
    stochastic policy wander a little: taking over at 3 left it almost no steps of its own early on,
    which slowed learning in benchmarks/hil_pick_cube.py)."""
    hold_steps: int = setting(10, "Steps an intervention lasts.", low=1, high=10_000)
    """Steps an intervention lasts once it starts (the expert drives throughout): one correction
    long enough to bring the arm back on track, rather than many short ones."""
    min_cosine: float = setting(0.5, "Policy motion disagrees below this cosine with the expert's.", low=-1.0,
                                 high=1.0)
    """Policy motion disagrees when the cosine between it and the expert's motion is below this
    (a policy that does not move while the expert would disagrees too)."""
    min_expert_motion: float = setting(0.2, "Expert motions shorter than this mean hold still.", low=0.0,
                                        high=2.0)
    """Expert motions shorter than this (action units) mean "hold still": the policy then
    disagrees when its motion differs from the expert's by more than this."""
    motion_dims: tuple[int, ...] = (0, 1, 2)
    """Action entries that are a motion direction (the arm's dx, dy, dz)."""
    gripper_index: int | None = 3
    """Action entry of a binary gripper command compared by sign (> 0 closed); None: no gripper."""
    expert_noise: float = 0.0
    """Noise passed to the expert for the actions it executes (judging always uses 0)."""

    def __post_init__(self) -> None:
        for name in ("takeover_prob_start", "takeover_prob_end"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {p}")
        if self.decay_steps < 0:
            raise ValueError(f"decay_steps must be >= 0, got {self.decay_steps}")
        if self.off_track_steps < 1 or self.hold_steps < 1:
            raise ValueError(f"off_track_steps and hold_steps must be >= 1, got {self.off_track_steps}, "
                             f"{self.hold_steps}")
        if not -1.0 <= self.min_cosine <= 1.0:
            raise ValueError(f"min_cosine must be in [-1, 1], got {self.min_cosine}")
        if self.min_expert_motion < 0.0 or self.expert_noise < 0.0:
            raise ValueError("min_expert_motion and expert_noise must be >= 0")
        if not self.motion_dims and self.gripper_index is None:
            raise ValueError("nothing to compare: motion_dims is empty and gripper_index is None")


class ScriptedIntervener:
    """Takes over from the policy with the scripted expert when the policy goes off track.

    Call it once per control step, before executing: ``action, intervened = intervener(state,
    policy_action, rng)``.  Call :meth:`start_episode` at every reset; a state whose ``time``
    is earlier than the previous one's also starts a new episode (simulators reset the clock).

    Args:
        expert: the task's scripted expert, ``(state, rng, noise) -> action``.
        config: when to take over (defaults: :class:`InterventionConfig`).
    """

    def __init__(self, expert: Expert, config: InterventionConfig | None = None) -> None:
        self.expert = expert
        self.config = config if config is not None else InterventionConfig()
        self.steps = 0
        """Calls so far (drives the takeover schedule)."""
        self.intervention_steps = 0
        """Steps in which the expert's action was executed."""
        self._streak = 0
        self._hold = 0
        self._last_time: float | None = None

    @property
    def takeover_probability(self) -> float:
        """Probability of taking over an off-track policy at the current step."""
        c = self.config
        progress = 1.0 if c.decay_steps == 0 else min(self.steps / c.decay_steps, 1.0)
        return c.takeover_prob_start + (c.takeover_prob_end - c.takeover_prob_start) * progress

    def start_episode(self) -> None:
        """Forget the disagreement streak and end any intervention in progress."""
        self._streak = 0
        self._hold = 0
        self._last_time = None

    def disagrees(self, policy_action: np.ndarray, expert_action: np.ndarray) -> bool:
        """True if the policy's motion direction or gripper command differs from the expert's."""
        c = self.config
        if c.gripper_index is not None and (policy_action[c.gripper_index] > 0) != (expert_action[c.gripper_index] > 0):
            return True
        if not c.motion_dims:
            return False
        dims = list(c.motion_dims)
        p, e = policy_action[dims], expert_action[dims]
        e_norm, p_norm = float(np.linalg.norm(e)), float(np.linalg.norm(p))
        if e_norm < c.min_expert_motion:
            return float(np.linalg.norm(p - e)) > c.min_expert_motion
        cosine = float(p @ e) / (p_norm * e_norm) if p_norm > 0.0 else 0.0
        return cosine < c.min_cosine

    def __call__(self, state: Mapping[str, np.ndarray], policy_action: np.ndarray,
                 rng: np.random.Generator) -> tuple[np.ndarray, bool]:
        """(action to execute, whether it is the expert's) for this step.

        Raises:
            ValueError: ``policy_action`` has another shape than the expert's actions or is not finite.
        """
        c = self.config
        if "time" in state:
            t = float(np.asarray(state["time"]))
            if self._last_time is not None and t < self._last_time:
                self.start_episode()
            self._last_time = t
        expert_action = np.asarray(self.expert(state, rng, 0.0), dtype=np.float32)
        action = np.asarray(policy_action, dtype=np.float32)
        if action.shape != expert_action.shape or not np.all(np.isfinite(action)):
            raise ValueError(f"policy action must be finite with shape {expert_action.shape}, got {policy_action!r}")
        probability = self.takeover_probability
        self.steps += 1
        if self._hold == 0:
            self._streak = self._streak + 1 if self.disagrees(action, expert_action) else 0
            if self._streak >= c.off_track_steps:
                self._streak = 0
                if rng.random() < probability:
                    self._hold = c.hold_steps
        if self._hold == 0:
            return action, False
        self._hold -= 1
        self.intervention_steps += 1
        if c.expert_noise > 0.0:
            expert_action = np.asarray(self.expert(state, rng, c.expert_noise), dtype=np.float32)
        return expert_action, True
