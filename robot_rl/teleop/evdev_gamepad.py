"""A gamepad over Linux evdev: its events applied to the device's state (the event logic needs no
evdev import), and the device found and opened with python-evdev."""

from __future__ import annotations

import select
import time
from typing import Any, Iterable, Mapping

from robot_rl.teleop.backend import Clock, DeviceError, InputBackend
from robot_rl.teleop.inputs import InputRejections, TeleopInput
from robot_rl.teleop.mapping import DeviceMapping

__all__ = ["EvdevBackend", "EvdevState", "evdev_codes", "open_evdev"]

# Linux input event ABI (linux/input-event-codes.h), so the event logic needs no evdev import.
EV_SYN, EV_KEY, EV_ABS = 0, 1, 3
SYN_REPORT, SYN_DROPPED = 0, 3


class EvdevState:
    """Applies evdev events to a gamepad's state: mapped axes normalised from their [min, max] to
    [-1, 1], mapped keys held or not. A report is complete at each SYN_REPORT. Values outside an
    axis's range and unknown key values are rejected (the axis keeps its last value)."""

    def __init__(self, axes: Mapping[int, tuple[str, int, int]], buttons: Mapping[int, str],
                 rejections: InputRejections):
        """`axes`: event code -> (name, min, max); `buttons`: event code -> name (unmapped codes are ignored)."""
        for code, (name, low, high) in axes.items():
            if high <= low:
                raise ValueError(f"{name}: empty range [{low}, {high}]")
        self._axes = dict(axes)
        self._buttons = dict(buttons)
        self._rejections = rejections
        self.raw_axes: dict[str, float] = {}
        """Axis name -> value in [-1, 1]."""
        self.raw_buttons: set[str] = set()
        """Names of the held buttons."""
        self._dropping = False
        self.needs_resync = False
        """Events were dropped by the kernel (SYN_DROPPED): the state must be read back from the
        device (`resync`) before it is trusted."""

    def apply(self, ev_type: int, code: int, value: int) -> bool:
        """One event; True when it completes a report (SYN_REPORT)."""
        if ev_type == EV_SYN:
            if code == SYN_DROPPED:
                self._dropping = True
                self._rejections.record("dropped_events", "the kernel's event buffer overflowed")
                return False
            if code == SYN_REPORT:
                if self._dropping:  # events up to this report are incomplete: read the state back
                    self._dropping = False
                    self.needs_resync = True
                return True
            return False
        if self._dropping:
            return False
        if ev_type == EV_ABS and code in self._axes:
            name, low, high = self._axes[code]
            if not low <= value <= high:
                self._rejections.record("axis_out_of_range", f"{name}={value} outside [{low}, {high}]")
            else:
                self.raw_axes[name] = 2.0 * (value - low) / (high - low) - 1.0
        elif ev_type == EV_KEY and code in self._buttons:
            if value in (1, 2):  # 2: auto-repeat of a held key
                self.raw_buttons.add(self._buttons[code])
            elif value == 0:
                self.raw_buttons.discard(self._buttons[code])
            else:
                self._rejections.record("bad_event", f"{self._buttons[code]} value {value}")
        return False

    def resync(self, axis_values: Mapping[int, int], held_keys: Iterable[int]) -> None:
        """The state read back from the device after dropped events."""
        self.needs_resync = False
        self.raw_axes.clear()
        for code, value in axis_values.items():
            self.apply(EV_ABS, code, value)
        self.raw_buttons.clear()
        self.raw_buttons.update(self._buttons[c] for c in held_keys if c in self._buttons)

    @property
    def axis_codes(self) -> list[int]:
        """The event codes of the mapped axes."""
        return list(self._axes)


class EvdevBackend(InputBackend):
    """Reads an opened `evdev.InputDevice` (non-blocking; waits with select)."""

    def __init__(self, device: Any, codes: Mapping[str, int], mapping: DeviceMapping, rejections: InputRejections,
                 clock: Clock = time.monotonic):
        """`codes`: the mapping's axis and button code names -> event codes."""
        super().__init__(mapping, rejections, f"{device.name} at {device.path}", clock)
        self._device = device
        info = dict(device.capabilities(absinfo=True).get(EV_ABS, []))
        axis_names = {src.source for src in mapping.axes.values()}
        self._state = EvdevState({codes[n]: (n, info[codes[n]].min, info[codes[n]].max) for n in axis_names},
                                 {codes[b]: b for b in mapping.buttons}, rejections)
        self._raw_axes, self._raw_buttons = self._state.raw_axes, self._state.raw_buttons  # shared, updated in place
        self._resync()  # start from the device's current state, not from zero

    def read(self, timeout_s: float) -> list[TeleopInput]:
        ready, _, _ = select.select([self._device.fd], [], [], timeout_s)
        samples = []
        if ready:
            try:
                for event in self._device.read():
                    if self._state.apply(event.type, event.code, event.value):
                        if self._state.needs_resync:
                            self._resync()
                        samples.append(self._snapshot())
            except BlockingIOError:
                pass
            except OSError as exc:
                raise DeviceError(f"{self.description}: read failed: {exc}") from None
        return samples or [self._snapshot()]

    def _resync(self) -> None:
        try:
            self._state.resync({code: self._device.absinfo(code).value for code in self._state.axis_codes},
                               self._device.active_keys())
        except OSError as exc:
            raise DeviceError(f"{self.description}: cannot read its state: {exc}") from None

    def close(self) -> None:
        self._device.close()


def evdev_codes(evdev: Any, mapping: DeviceMapping) -> dict[str, int]:
    names = {src.source for src in mapping.axes.values()} | set(mapping.buttons)
    unknown = sorted(n for n in names if n not in evdev.ecodes.ecodes)
    if unknown:
        raise ValueError(f"{mapping.source}: evdev has no codes {unknown} (see `python -m evdev.evtest`)")
    return {n: evdev.ecodes.ecodes[n] for n in names}


def open_evdev(evdev: Any, codes: Mapping[str, int], mapping: DeviceMapping, path: str,
               rejections: InputRejections, clock: Clock) -> EvdevBackend:
    explicit = path.startswith("/")
    name_part = "" if explicit else (path or mapping.evdev.name)
    axis_codes = {codes[src.source] for src in mapping.axes.values()}
    button_codes = {codes[b] for b in mapping.buttons}
    refused = []
    for candidate in [path] if explicit else evdev.list_devices():
        try:
            device = evdev.InputDevice(candidate)
        except OSError as exc:
            refused.append(f"{candidate}: {exc}")
            continue
        caps = device.capabilities(absinfo=False)
        missing = sorted(n for n, c in codes.items()
                         if (c in axis_codes and c not in caps.get(EV_ABS, []))
                         or (c in button_codes and c not in caps.get(EV_KEY, [])))
        if name_part in device.name and not missing:
            try:
                return EvdevBackend(device, codes, mapping, rejections, clock)
            except (DeviceError, ValueError):
                device.close()
                raise
        refused.append(f"{candidate} ({device.name})" + (f" lacks {missing}" if missing else ""))
        device.close()
    what = path if explicit else f"input device named like {name_part!r}" if name_part else "gamepad"
    raise DeviceError(f"no {what} with the mapped axes and buttons; looked at: {refused or 'no input devices'} "
                      "(is it plugged in, and is /dev/input/event* readable: the 'input' group?)")
