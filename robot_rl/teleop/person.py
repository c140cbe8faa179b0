"""A person's teleop device in this process, without ROS: `robot-rl record --env` and `train --env --teleop`.

The same pieces as the teleop node (the device's mapping, `DeviceReader`, `Arbitrator`), polled by
the environment loop once per control period instead of published: who drives, the person's twist
(scaled by `speed`) and held gripper command, and the events (labels, session keys) since the
last poll. A `sensor_msgs/Joy` gamepad needs ROS: without it a gamepad is read through evdev.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from robot_rl.teleop.arbitration import ArbitrationConfig, Arbitrator
from robot_rl.teleop.devices import backend_opener
from robot_rl.teleop.inputs import InputRejections, TeleopInput
from robot_rl.teleop.mapping import DEFAULT_MAPPINGS, load_mapping
from robot_rl.teleop.reader import DeviceReader, Log

LOCAL_DEVICES = ("keyboard", "spacemouse", "evdev")


@dataclass(frozen=True)
class PersonInput:
    """One poll of the person's device."""

    engaged: bool
    """The person drives this step."""
    twist: np.ndarray
    """(6,) in [-1, 1], scaled by `speed`; zeros while not engaged."""
    gripper: float
    """The held gripper command (-1 open, +1 close), kept between presses."""
    events: tuple[str, ...]
    """Labels and session keys since the previous poll (robot_rl.teleop.arbitration.EVENTS)."""


class LocalTeleop:
    def __init__(self, device: str, mapping: str = "", device_path: str = "", speed: float = 1.0,
                 hold_s: float = 0.5, silence_timeout_s: float = 0.5, initial_gripper: float = -1.0,
                 log: Log | None = None, clock: Callable[[], float] = time.monotonic):
        if device not in LOCAL_DEVICES:
            raise ValueError(f"device {device!r} cannot be read without ROS here; choose one of "
                             f"{', '.join(LOCAL_DEVICES)} (a gamepad: evdev)")
        if not 0 < speed <= 1:
            raise ValueError(f"speed must be in (0, 1], got {speed}")
        self.mapping = load_mapping(mapping or DEFAULT_MAPPINGS[device], device)
        self.rejections = InputRejections()
        opener = backend_opener(device, self.mapping, device_path, self.rejections, clock)
        self.arbitrator = Arbitrator(ArbitrationConfig(self.mapping.engage, hold_s, silence_timeout_s,
                                                       initial_gripper))
        self.speed, self.clock = speed, clock
        self._samples: deque[TeleopInput] = deque()
        self._lock = threading.Lock()
        self.reader = DeviceReader(opener, device, min(0.05, silence_timeout_s / 4), 1.0, self._on_samples,
                                   log or (lambda level, message: None)).start()

    def _on_samples(self, samples: list[TeleopInput]) -> None:
        with self._lock:
            self._samples.extend(samples)

    def poll(self) -> PersonInput:
        with self._lock:
            samples, self._samples = list(self._samples), deque()
        for sample in samples:
            self.arbitrator.on_input(sample)
        out = self.arbitrator.step(self.clock())
        twist = np.asarray(out.command, np.float64) * self.speed if out.engaged and out.command is not None \
            else np.zeros(6)
        return PersonInput(out.engaged, twist, float(out.gripper), tuple(out.events))

    def close(self) -> None:
        """Stops reading and gives the terminal back (a keyboard's raw mode is undone)."""
        self.reader.close()
