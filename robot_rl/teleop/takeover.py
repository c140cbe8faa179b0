"""The actor's side of teleoperation: what the person currently commands, if anything.

The teleop node publishes `teleop/engaged`, `teleop/cmd` (the twist in the task's action scale)
and `teleop/gripper`; the actor executes the person's action instead of the policy's while they
are engaged. Messages can stop (a crashed teleop node, a lost link): a command older than
`timeout_s` is stale, and the policy drives again rather than repeating an old command.
No ROS here: the node feeds the values in, tests drive it directly.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

__all__ = ["HumanCommand", "human_action"]


def human_action(twist: np.ndarray, gripper: float, action_dim: int) -> np.ndarray:
    """The task action a teleop twist means: arm tasks take (x, y, z, gripper) when the action has
    4 entries, (x, y, z, roll, pitch, yaw, gripper) with 7; each entry in [-1, 1]."""
    twist = np.asarray(twist, dtype=np.float32)
    if action_dim == 4:
        action = np.array([*twist[:3], gripper], np.float32)
    elif action_dim == 7:
        action = np.array([*twist[:6], gripper], np.float32)
    else:
        raise ValueError(f"teleop drives arm actions of 4 (xyz + gripper) or 7 (twist + gripper) entries, "
                         f"not {action_dim}")
    return np.clip(action, -1.0, 1.0)


class HumanCommand:
    """Latest engaged flag, twist and gripper from the teleop topics, with their arrival times."""

    def __init__(self, action_dim: int, timeout_s: float = 0.3, initial_gripper: float = -1.0,
                 to_action: Callable[[np.ndarray, float], np.ndarray | None] | None = None):
        """`to_action(twist, gripper)`: the task action they mean, None if their device cannot drive it
        (default: the arm's `human_action`, which refuses here an action layout it cannot drive)."""
        if to_action is None:
            human_action(np.zeros(6), 0.0, action_dim)
            to_action = lambda twist, gripper: human_action(twist, gripper, action_dim)  # noqa: E731
        self.to_action = to_action
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.action_dim, self.timeout_s = action_dim, timeout_s
        self.engaged = False
        self.gripper = float(initial_gripper)
        self._twist: np.ndarray | None = None
        self._twist_at = -math.inf
        self.rejected = 0
        """Malformed teleop messages (non-finite or out of [-1, 1]) ignored so far."""
        self.stale = 0
        """Steps on which the person was engaged but their command had gone stale."""

    def on_engaged(self, engaged: bool) -> None:
        self.engaged = bool(engaged)
        if not self.engaged:
            self._twist = None

    def on_twist(self, twist, now: float) -> None:
        twist = np.asarray(twist, dtype=np.float64)
        if twist.shape != (6,) or not np.isfinite(twist).all() or np.abs(twist).max() > 1.0 + 1e-6:
            self.rejected += 1
            return
        self._twist, self._twist_at = twist, now

    def new_episode(self) -> None:
        """Forgets the person's twist: a command given before the episode began answered the scene before the
        reset, and is neither executed in it nor stored as its correction; their next command drives again."""
        self._twist = None

    def on_gripper(self, value: float) -> None:
        if not math.isfinite(value) or abs(value) > 1.0 + 1e-6:
            self.rejected += 1
            return
        self.gripper = float(value)

    def action(self, now: float) -> np.ndarray | None:
        """The person's action to execute now, or None when the policy drives."""
        if not self.engaged or self._twist is None:
            return None
        if now - self._twist_at > self.timeout_s:
            self.stale += 1
            return None
        return self.to_action(self._twist, self.gripper)
