"""What every teleop input backend is: a connected device that `read`s `TeleopInput` snapshots
through its `DeviceMapping`, and the error it raises when the device is gone."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Callable, Hashable

from robot_rl.hardware.safety import Rejected
from robot_rl.teleop.inputs import InputRejections, TeleopInput
from robot_rl.teleop.mapping import DeviceMapping, InputMapper

__all__ = ["Clock", "DeviceError", "InputBackend"]

Clock = Callable[[], float]


class DeviceError(RuntimeError):
    """The device cannot be opened or stopped working (absent, unplugged, no permission, terminal
    closed); the node reports it on /diagnostics and tries again."""


class InputBackend(ABC):
    """A connected device. Subclasses fill `_raw_axes` (raw axis -> value in [-1, 1]) and
    `_raw_buttons` (held raw buttons) and implement `read`."""

    def __init__(self, mapping: DeviceMapping, rejections: InputRejections, description: str,
                 clock: Clock = time.monotonic):
        self.mapping = mapping
        self.rejections = rejections
        self.description = description
        """What was opened, for logs and /diagnostics (e.g. "SpaceMouse Wireless at /dev/hidraw3")."""
        self._clock = clock
        self._mapper = InputMapper(mapping)
        self._raw_axes: dict[Hashable, float] = {}
        self._raw_buttons: set[Hashable] = set()

    @abstractmethod
    def read(self, timeout_s: float) -> list[TeleopInput]:
        """Waits at most `timeout_s` for input; returns a snapshot per state change, or the current
        state re-stamped when nothing changed. Raises DeviceError when the device stopped working."""

    def close(self) -> None:
        """Releases the device (restores the terminal for the keyboard)."""

    def _snapshot(self) -> TeleopInput:
        return self._mapper(self._raw_axes, self._raw_buttons, self._clock())

    def _reject(self, exc: Rejected) -> None:
        self.rejections.record(exc.reason, exc.detail)
