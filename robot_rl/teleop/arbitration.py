"""Who drives the robot: the person at the teleop device or the policy. Pure logic, no ROS.

Rules (SERL's SpaceMouse intervention, LeRobot's hold/toggle takeover, teleop_twist_joy's
single zero on release, twist_mux's input timeout):

- The person *wants control* while the twist's norm exceeds `EngageRule.deflection_threshold`,
  or a button of `EngageRule.buttons` is held (or, with `toggle`, has been toggled on).
- Wanting control engages at once (event "takeover"). Control wanted by deflection, by a
  gripper button that takes over (SERL's SpaceMouse taps) or toggled off is kept for `hold_s`
  after the last moment it was wanted (SERL: 0.5 s, as a hand passes through rest), then goes
  back to the policy (event "handback"). A held takeover button hands back the moment it is let
  go (HIL-SERL, LeRobot's gamepad): letting go is the person's decision, and a hold after it
  would store the robot standing still as their correction.
- While engaged every `step` returns the person's twist as the command; the step after a release
  returns exactly one zero command; otherwise no command (the policy's actions are executed).
- The device going silent for `silence_timeout_s` while engaged hands back at once (counted);
  so does an e-stop. After either, the person must let go (a neutral input: no deflection, no
  takeover button) before they can take over again, so a stuck value cannot re-engage.
- Episode labels (success, failure, rerecord, reset) are events on each button press; each one
  ends the episode, after which the robot is reset with its gripper open, so the held gripper
  command returns to `initial_gripper`.
- Session keys (pause, help) are events on each press too; they end nothing and leave the gripper.
- The gripper command (-1 open, +1 close: the task's action scale) follows the gripper buttons'
  presses while engaged and is held between presses.

Times are monotonic seconds passed in by the caller (`TeleopInput.stamp`, `step(now)`), so the
logic is deterministic and tested without clocks or threads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from robot_rl.config_fields import setting
from robot_rl.teleop.inputs import ACTIONS, EPISODE_LABELS, SESSION_KEYS, TeleopInput
from robot_rl.teleop.takeover import human_action

__all__ = ["EVENTS", "ArbitrationConfig", "ArbitrationOutput", "Arbitrator", "EngageRule"]

EVENTS = (*EPISODE_LABELS, *SESSION_KEYS, "takeover", "handback")
"""Everything published on teleop/event."""

_ZERO_TWIST = np.zeros(6)


@dataclass(frozen=True)
class EngageRule:
    """When a person takes over (per device: the mapping file's `engage` section)."""

    deflection_threshold: float | None = 0.001
    """Takes over while the twist's norm exceeds this (SERL: 0.001). None: deflection alone never
    takes over (a gamepad whose sticks drift must hold a button instead)."""
    buttons: frozenset[str] = frozenset({"takeover"})
    """Actions whose buttons take over (SERL: the gripper buttons too)."""
    toggle: bool = False
    """False: the buttons take over while held. True: each press toggles control on or off (a
    terminal sees key presses, never releases)."""

    def __post_init__(self) -> None:
        t = self.deflection_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)
                              or not 0.0 <= t < 1.0):
            raise ValueError(f"deflection_threshold must be null or a number in [0, 1), got {t!r}")
        unknown = set(self.buttons) - set(ACTIONS)
        if unknown:
            raise ValueError(f"buttons: unknown actions {sorted(unknown)}; known: {list(ACTIONS)}")
        if t is None and not self.buttons:
            raise ValueError("nothing takes over: deflection_threshold is null and buttons is empty")
        object.__setattr__(self, "buttons", frozenset(self.buttons))


@dataclass(frozen=True)
class ArbitrationConfig:
    """Arbitration settings: the device's engage rule plus the node's timing parameters."""

    engage: EngageRule = field(default_factory=EngageRule)
    """When the person takes over."""
    hold_s: float = setting(0.5, "The person keeps control this long after their last deflection or gripper tap "
                            "(SERL: 0.5 s); a held takeover button hands back when let go.", low=0.0, high=10.0)
    """The person keeps control this long after they last wanted it by deflection, a gripper
    button or a toggle (SERL: 0.5 s; 0: release as soon as they let go); a held takeover button
    hands back at once."""
    silence_timeout_s: float = setting(0.5, "No input from the device for this long while engaged hands control "
                                       "back (reported). For joy, joy_node's autorepeat_rate must be faster than "
                                       "this.", low=0.02, high=10.0)
    """No input from the device for this long while engaged hands control back. Backends repeat
    the device's state while it is connected and quiet, so only a lost device goes silent."""
    initial_gripper: float = setting(-1.0, "Gripper command before the first gripper press and after each episode "
                                     "label (-1 open, +1 close).", low=-1.0, high=1.0)
    """Gripper command held before the first gripper press and after each episode label (the
    robot resets with its gripper open: -1)."""

    def __post_init__(self) -> None:
        for name in ("hold_s", "silence_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.silence_timeout_s <= 0:
            raise ValueError("silence_timeout_s must be > 0")
        if not -1.0 <= self.initial_gripper <= 1.0:
            raise ValueError(f"initial_gripper must be in [-1, 1], got {self.initial_gripper!r}")


@dataclass(frozen=True)
class ArbitrationOutput:
    """What one `Arbitrator.step` decided."""

    engaged: bool
    """A person is in control: `action` is executed instead of the policy's and stored as an
    intervention."""
    command: np.ndarray | None
    """(6,) twist to publish on teleop/cmd now: the person's while engaged, zeros exactly once
    after a release, None otherwise."""
    gripper: float
    """The held gripper command in the action scale (-1 open, +1 close)."""
    events: tuple[str, ...]
    """Events (`EVENTS`) since the previous step, in the order they happened."""

    @property
    def intervention(self) -> bool:
        """The executed action is the person's (stored as an intervention / demonstration)."""
        return self.engaged

    @property
    def action(self) -> np.ndarray | None:
        """The executed 4-D arm action (dx, dy, dz, gripper), each in [-1, 1], while engaged;
        None while the policy drives."""
        if not self.engaged:
            return None
        return human_action(self.command, self.gripper, 4)


class Arbitrator:
    """Decides between the person and the policy. Feed it every input with `on_input` (in
    order) and call `step(now)` at the publishing rate; `set_estop` on every /estop value.
    Not thread-safe: call it from one thread."""

    def __init__(self, config: ArbitrationConfig | None = None):
        self.config = config if config is not None else ArbitrationConfig()
        self.gripper = self.config.initial_gripper
        """The held gripper command."""
        self.counters = dict.fromkeys(("inputs", "takeovers", "handbacks", "silence_handbacks", "estop_handbacks",
                                       "commands", "zero_commands", *EPISODE_LABELS, *SESSION_KEYS), 0)
        """Counts for /diagnostics: inputs, takeovers, handbacks (silence_ and estop_handbacks of
        them), commands published, zero commands on release, episode labels, session keys."""
        self.last_handback_reason = ""
        """Why control went back last: "released", "silence" or "estop"."""
        self._engaged = False
        self._estop = False
        self._needs_neutral = False  # after silence / e-stop: the person must let go first
        self._toggled = False
        self._zero_pending = False
        self._pressed: frozenset[str] = frozenset()
        self._latest: TeleopInput | None = None
        self._last_wanted = -math.inf
        self._events: list[str] = []

    # ---- inputs ---------------------------------------------------------------------------------

    def on_input(self, sample: TeleopInput) -> None:
        """One device snapshot (in arrival order)."""
        rule = self.config.engage
        self.counters["inputs"] += 1
        self._expire_hold(sample.stamp)
        presses = sample.buttons - self._pressed
        self._pressed = sample.buttons
        self._latest = sample
        for label in EPISODE_LABELS:
            if label in presses:
                self._events.append(label)
                self.counters[label] += 1
                self.gripper = self.config.initial_gripper
        for key in SESSION_KEYS:
            if key in presses:
                self._events.append(key)
                self.counters[key] += 1
        if self._estop:
            return
        if self._needs_neutral:
            self._needs_neutral = self._deflected_or_held(sample)
            return
        if rule.toggle and presses & rule.buttons:
            self._toggled = not self._toggled
            if not self._toggled:
                self._last_wanted = sample.stamp  # toggling off starts the hold, as letting go does
        wants = self._wants_control(sample)
        if wants:
            self._last_wanted = sample.stamp if self._holds(sample) else -math.inf
            if not self._engaged:
                self._engaged = True
                self._zero_pending = False  # released and retaken within one step: no zero needed
                self.counters["takeovers"] += 1
                self._events.append("takeover")
        if self._engaged:
            close, open_ = "gripper_close" in presses, "gripper_open" in presses
            if close != open_:  # both at once: ambiguous, keep the held command
                self.gripper = 1.0 if close else -1.0

    def set_estop(self, value: bool) -> None:
        """The latest /estop value: while True nobody has control and no command is published
        but the one zero of the release."""
        value = bool(value)
        if value and not self._estop:
            if self._engaged:
                self._release("estop")
            self._rearm()
        self._estop = value

    # ---- decision ---------------------------------------------------------------------------------

    def step(self, now: float) -> ArbitrationOutput:
        """What to publish at `now`; call it at the publishing rate."""
        if self._engaged and self.silent(now):
            self._release("silence")
            self._rearm()
        self._expire_hold(now)
        command = None
        if self._engaged:
            command = self._latest.twist
            self.counters["commands"] += 1
        elif self._zero_pending:
            command = _ZERO_TWIST
            self._zero_pending = False
            self.counters["zero_commands"] += 1
        events, self._events = tuple(self._events), []
        return ArbitrationOutput(self._engaged, None if command is None else command.copy(), self.gripper, events)

    # ---- introspection ------------------------------------------------------------------------------

    @property
    def engaged(self) -> bool:
        return self._engaged

    @property
    def estop(self) -> bool:
        """The latest /estop value."""
        return self._estop

    def silent(self, now: float) -> bool:
        """No input for longer than `silence_timeout_s` (or none yet)."""
        return self._latest is None or now - self._latest.stamp > self.config.silence_timeout_s

    def status(self, now: float) -> dict[str, object]:
        """Flat key -> value summary for /diagnostics."""
        age = "never" if self._latest is None else f"{now - self._latest.stamp:.3f}"
        return {"engaged": self._engaged, "estop": self._estop, "waiting_for_neutral": self._needs_neutral,
                "gripper": self.gripper, "input_age_s": age, "last_handback_reason": self.last_handback_reason,
                **self.counters}

    # ---- internals --------------------------------------------------------------------------------

    def _deflected(self, sample: TeleopInput) -> bool:
        threshold = self.config.engage.deflection_threshold
        return threshold is not None and sample.deflection > threshold

    def _deflected_or_held(self, sample: TeleopInput) -> bool:
        """The device is not at rest (what must end before taking over after silence / e-stop)."""
        return self._deflected(sample) or bool(sample.buttons & self.config.engage.buttons)

    def _wants_control(self, sample: TeleopInput) -> bool:
        if self._deflected(sample):
            return True
        return self._toggled if self.config.engage.toggle else bool(sample.buttons & self.config.engage.buttons)

    def _holds(self, sample: TeleopInput) -> bool:
        """Control wanted in a way that lingers for hold_s: anything but the takeover button alone."""
        return self._deflected(sample) or self._toggled or bool(sample.buttons & self.config.engage.buttons
                                                                - {"takeover"})

    def _expire_hold(self, now: float) -> None:
        # The latest input still wanting control keeps it even past hold_s (a device reporting
        # slower than hold_s, or hold_s = 0): a stale input is the silence timeout's business.
        if self._engaged and not self._toggled and now - self._last_wanted > self.config.hold_s \
                and not (self._latest is not None and self._wants_control(self._latest)):
            self._release("released")

    def _rearm(self) -> None:
        """After silence or an e-stop: a toggle is cleared and the person must let go first."""
        self._toggled = False
        self._needs_neutral = True

    def _release(self, reason: str) -> None:
        self._engaged = False
        self._zero_pending = True
        self._last_wanted = -math.inf
        self.last_handback_reason = reason
        self.counters["handbacks"] += 1
        if reason != "released":
            self.counters[f"{reason}_handbacks"] += 1
        self._events.append("handback")
