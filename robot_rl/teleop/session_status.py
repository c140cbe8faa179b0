"""What a person in the loop is shown: the actor's session status, published on `session/status`
(std_msgs/String, JSON) at every control step and at every change of phase, and read by the
person's view (`session_view` node) and the console (`robot-rl record`/`train`), so both show
the same thing.

Phases: "countdown" (the scene is reset: the next episode starts in `countdown_s`, at least), "review" (a
recording's last episode is done: re-record within `countdown_s` records it again, else it is kept and
the session ends), "running", "paused" (a person's pause key: the robot holds, a simulator freezes,
the episode clock stops), "done" (the session ended). Drivers: "person" (the person's commands reach
the robot), "policy", or "holding" (the robot holds still: a recording session with nobody driving, and
in every phase but "running").
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields

PHASES = ("countdown", "review", "running", "paused", "done")
DRIVERS = ("person", "policy", "holding")

KEY_LEGEND = {
    "keyboard": "space take over/hand back  arrows move as the wrist picture shows (up +y, right +x): a tap a "
                "little, held faster  PgUp/PgDn raise/lower  c/o close/open gripper  s success  f failure  "
                "h end (reset)  r re-record  p pause  ? keys",
    "spacemouse": "push the cap to take over  buttons: gripper  keyboard of the console: none",
    "evdev": "sticks take over  buttons: gripper, success, failure, re-record (see the mapping file)",
    "joy": "sticks take over  buttons: gripper, success, failure, re-record (see the mapping file)",
}
"""One line per device kind: what the person's keys do (the view and the console show it)."""


@dataclass
class SessionStatus:
    mode: str = "train"
    """"train" (a policy learns; a person may take over) or "record" (a person's demonstrations)."""
    phase: str = "countdown"
    driver: str = "policy"
    episode: int = 0
    """Index of the current (or next) episode."""
    step: int = 0
    """Control steps taken in this episode."""
    elapsed_s: float = 0.0
    """Episode clock: seconds driven in this episode (pauses excluded)."""
    episode_time_s: float = 0.0
    """The episode ends when the clock reaches this (the task's horizon in seconds when not set)."""
    countdown_s: float = 0.0
    """In "countdown": seconds until the next episode starts."""
    last_reward: float = math.nan
    success: bool = False
    """The task's success estimate at the last step."""
    kept: int = 0
    """Recording: episodes stored so far."""
    discarded: int = 0
    """Recording: episodes thrown away (re-recorded, or nobody drove)."""
    message: str = ""
    """The newest prompt for the person (e.g. why the last episode was discarded)."""

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"session status: unknown phase {self.phase!r}; expected one of {PHASES}")
        if self.driver not in DRIVERS:
            raise ValueError(f"session status: unknown driver {self.driver!r}; expected one of {DRIVERS}")

    def to_json(self) -> str:
        values = asdict(self)
        values["last_reward"] = None if math.isnan(self.last_reward) else round(self.last_reward, 4)
        values["elapsed_s"], values["countdown_s"] = round(self.elapsed_s, 2), round(self.countdown_s, 2)
        return json.dumps(values)

    @classmethod
    def from_json(cls, text: str) -> SessionStatus:
        """Raises ValueError for anything but a status object with known fields of the right kinds."""
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"session status is not JSON: {exc}") from None
        if not isinstance(values, dict):
            raise ValueError("session status is not a JSON object")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"session status has unknown fields {unknown}")
        if values.get("last_reward") is None:
            values["last_reward"] = math.nan
        for name, value in values.items():
            kind = type(getattr(cls(), name))
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                values[name] = float(value)
            elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ValueError(f"session status field {name!r} should be {kind.__name__}, got {value!r}")
        return cls(**values)

    def clock_text(self) -> str:
        """The episode clock as the person reads it, e.g. "00:12 / 00:30"."""
        def mmss(seconds: float) -> str:
            seconds = max(0, int(seconds))
            return f"{seconds // 60:02d}:{seconds % 60:02d}"

        return f"{mmss(self.elapsed_s)} / {mmss(self.episode_time_s)}"

    def headline(self) -> str:
        """One line: phase, who drives, the episode clock and the last reward."""
        if self.phase == "countdown":
            return f"episode {self.episode} starts in {math.ceil(self.countdown_s)} s"
        if self.phase == "review":
            return f"last episode done: re-record within {math.ceil(self.countdown_s)} s, else it is kept"
        if self.phase == "done":
            return "session over"
        driver = {"person": "PERSON DRIVING", "policy": "policy driving", "holding": "robot holding"}[self.driver]
        reward = "-" if math.isnan(self.last_reward) else f"{self.last_reward:.2f}"
        paused = "PAUSED  " if self.phase == "paused" else ""
        return (f"{paused}{driver}  episode {self.episode}  {self.clock_text()}  reward {reward}"
                f"{'  success' if self.success else ''}")


class SessionClock:
    """A person's timing between episodes, on a monotonic clock passed in (testable without time):
    after each reset a countdown of `reset_time_s` before the robot acts again, and a pause the
    person toggles. The episode clock itself is steps / control rate (pauses take no steps)."""

    def __init__(self, reset_time_s: float):
        if not reset_time_s >= 0:
            raise ValueError(f"reset_time_s must be >= 0, got {reset_time_s}")
        self.reset_time_s = reset_time_s
        self.paused = False
        self._starts_at = -math.inf

    def reset_done(self, now: float) -> None:
        """The scene is reset: the next episode starts `reset_time_s` from now."""
        self._starts_at = now + self.reset_time_s

    def toggle_pause(self) -> bool:
        """Pauses or resumes; returns whether paused now."""
        self.paused = not self.paused
        return self.paused

    def countdown_s(self, now: float) -> float:
        return max(0.0, self._starts_at - now)

    def phase(self, now: float) -> str:
        if self.countdown_s(now) > 0:
            return "countdown"
        return "paused" if self.paused else "running"

    def shown(self, now: float, in_episode: bool, last_in_review: bool) -> tuple[str, float]:
        """The phase the person is shown and its countdown's seconds. Between an episode's end and the reset's
        end (`in_episode` false) the countdown is already on, with at least `reset_time_s` to go: this clock
        starts it when the reset is done, and "running" there would say GO before the scene is reset. A
        recording's last episode held for review (`last_in_review`) turns the countdown into "review"."""
        phase, countdown = (self.phase(now), self.countdown_s(now)) if in_episode else ("countdown", self.reset_time_s)
        return ("review" if phase == "countdown" and last_in_review else phase), countdown
