"""A scripted person with a gamepad: HIL-SERL's human, for tests and benchmarks in simulation.

It watches the robot state and each executed action, decides like
`robot_rl.teleop.scripted_human.ScriptedIntervener` (take over when the policy goes off track,
with a probability that decays as training goes on) and expresses the decision as a gamepad's
raw state: takeover button held, sticks deflected toward the expert's motion, gripper buttons
pressed. The scripted human node publishes that state as a Joy message, so the teleop node,
its arbitration and the actor treat it exactly as a person at a real gamepad.

Like a person, it notices when the robot stops following its hands (the teleop handed control back:
its input went silent for a moment, or an e-stop) and lets go of the gamepad before taking over
again, which is what the teleop node asks of a person before it re-engages. It lets go when the robot resets
too: a correction answers the scene it was given in, not the next episode's.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from robot_rl.teleop.mapping import DeviceMapping, InputMapper
from robot_rl.teleop.scripted_human import ScriptedIntervener

__all__ = ["ScriptedGamepad"]


class ScriptedGamepad:
    """Per control step: (state, executed action) -> the gamepad's raw `Joy` axes and buttons."""

    NOTICE_S = 0.3
    """How long the robot may ignore a person's held takeover before they notice and let go (a reaction time)."""

    def __init__(self, intervener: ScriptedIntervener, mapping: DeviceMapping, rng: np.random.Generator,
                 success: Callable[[Mapping[str, np.ndarray]], bool] | None = None):
        """`success`: when given, the person presses the success button on a state that shows
        success (for tasks whose episodes a person ends, as on a real robot)."""
        if mapping.device != "joy":
            raise ValueError(f"the scripted human drives a joy mapping, got a {mapping.device!r} one")
        self.intervener, self.rng, self.success = intervener, rng, success
        self.mapper = InputMapper(mapping)
        self.num_axes = max((src.source for src in mapping.axes.values()), default=-1) + 1
        self.num_buttons = max(mapping.buttons, default=-1) + 1
        self.takeovers = self.labels = self.regrips = 0
        """regrips: the times the person let go because the robot had stopped following them."""
        self.intervening = False
        self._ignored_since: float | None = None
        self.axes, self.buttons = self._joy(np.zeros(6), ())

    def _joy(self, twist: np.ndarray, actions) -> tuple[list[float], list[int]]:
        raw_axes, raw_buttons = self.mapper.raw_for(twist, actions)
        axes = [0.0] * self.num_axes
        for index, value in raw_axes.items():
            axes[index] = float(value)
        buttons = [0] * self.num_buttons
        for index in raw_buttons:
            buttons[index] = 1
        return axes, buttons

    def release(self) -> None:
        """Hands off the gamepad: nothing held, sticks centred."""
        self.intervening = False
        self._ignored_since = None
        self.axes, self.buttons = self._joy(np.zeros(6), ())

    def new_episode(self) -> None:
        """The robot resets: the person lets go and judges the next episode afresh (no streak or hold carried
        over; the graph's state has no episode clock from which the intervener could tell by itself)."""
        self.intervener.start_episode()
        self.release()

    def teleop_engaged(self, engaged: bool, now: float) -> bool:
        """What the teleop node says of its control (`teleop/engaged`) at monotonic time `now`. A takeover held
        for `NOTICE_S` while the teleop is not engaged is let go (True: the gamepad changed); the next step
        takes over again."""
        if engaged or not self.intervening:
            self._ignored_since = None
            return False
        if self._ignored_since is None:
            self._ignored_since = now
        if now - self._ignored_since < self.NOTICE_S:
            return False
        self.release()
        self.regrips += 1
        return True

    def step(self, state: Mapping[str, np.ndarray], executed_action: np.ndarray) -> tuple[list[float], list[int]]:
        """Judges the action just executed in `state` and sets the gamepad for the next step."""
        if self.success is not None and self.success(state):
            self.labels += 1
            self.intervening = False
            self.axes, self.buttons = self._joy(np.zeros(6), ("success",))
            return self.axes, self.buttons
        action, intervening = self.intervener(state, np.asarray(executed_action, np.float32), self.rng)
        if not intervening:
            self.release()
            return self.axes, self.buttons
        self.takeovers += int(not self.intervening)
        self.intervening = True
        twist = np.zeros(6)
        twist[:3] = action[:3]
        gripper = "gripper_close" if action[3] > 0 else "gripper_open"
        self.axes, self.buttons = self._joy(twist, ("takeover", gripper))
        return self.axes, self.buttons
