"""What every teleop device backend produces, and the count of what they refuse.

A backend turns raw device input (HID reports, evdev events, a Joy message's content, terminal bytes)
into `TeleopInput` snapshots: the device's whole state after the per-device mapping, so the
arbitration never sees device details.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

__all__ = ["ACTIONS", "AXES", "EPISODE_LABELS", "SESSION_KEYS", "InputRejections", "TeleopInput"]

AXES = ("x", "y", "z", "roll", "pitch", "yaw")
"""The twist's axes, in `TeleopInput.twist` order (the task's action frame)."""

EPISODE_LABELS = ("success", "failure", "rerecord", "reset")
"""Actions that label or end the episode: each press is published once on teleop/event."""

SESSION_KEYS = ("pause", "help")
"""Actions for the session rather than the episode (pause toggles: the robot holds and the episode
clock stops; help: the console lists the keys): each press is published once on teleop/event."""

ACTIONS = ("gripper_open", "gripper_close", "takeover", *EPISODE_LABELS, *SESSION_KEYS)
"""What a button can mean (the names in the mapping files and in `TeleopInput.buttons`)."""


@dataclass(frozen=True)
class TeleopInput:
    """One snapshot of a teleop device's state, after the device's mapping."""

    twist: np.ndarray
    """(6,) float64 in [-1, 1]: x, y, z, roll, pitch, yaw (`AXES`) in the task's action frame, after
    the per-axis source, deadzone and scale of the mapping."""
    buttons: frozenset[str]
    """The actions (`ACTIONS`) whose buttons are held in this snapshot."""
    stamp: float
    """Monotonic time [s] at which the device was read."""

    def __post_init__(self) -> None:
        twist = np.asarray(self.twist, dtype=np.float64)
        if twist.shape != (6,) or not np.isfinite(twist).all() or np.abs(twist).max() > 1.0:
            raise ValueError(f"TeleopInput.twist must be 6 finite values in [-1, 1], got {twist!r}")
        unknown = set(self.buttons) - set(ACTIONS)
        if unknown:
            raise ValueError(f"TeleopInput.buttons has unknown actions {sorted(unknown)}; known: {list(ACTIONS)}")
        object.__setattr__(self, "twist", twist)
        object.__setattr__(self, "buttons", frozenset(self.buttons))

    @property
    def deflection(self) -> float:
        """Euclidean norm of the twist (what deflection-based takeover compares to its threshold)."""
        return float(np.linalg.norm(self.twist))


class InputRejections:
    """Counts refused inputs by reason. Thread-safe: a backend's reader thread records, the node's
    executor reads the counts for /diagnostics and logs what is new."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._last = ""

    def record(self, reason: str, detail: str = "") -> None:
        """One refused input: `reason` is the short key it is counted under ("malformed",
        "unknown_key", ...), `detail` what was wrong, for the log and /diagnostics."""
        with self._lock:
            self._counts[reason] += 1
            self._last = f"{reason}: {detail}" if detail else reason

    def snapshot(self) -> tuple[dict[str, int], str]:
        """(count per reason, the latest rejection's description)."""
        with self._lock:
            return dict(self._counts), self._last

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())
