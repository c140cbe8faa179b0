"""Teleop input backends: SpaceMouse (HID), gamepad (Linux evdev, or `sensor_msgs/Joy`), keyboard
(a terminal in raw mode, so it works over SSH and without a display). Each turns raw input into
`TeleopInput` snapshots through the device's `DeviceMapping`; nothing here imports rclpy.

- A backend's `read(timeout_s)` blocks at most `timeout_s` (the node calls it on a thread of its
  own) and returns a snapshot per change of the device's state; when nothing changed it returns
  the current state re-stamped, because the device is evidently connected: a held button stays
  fresh and only a lost device goes silent (which hands control back). A device that stopped
  working (unplugged, closed terminal) raises `DeviceError`; the node reports it and reopens.
- Malformed input (a HID report of the wrong length, an unknown key, an evdev value outside the
  axis's range, a Joy message with NaN) is never applied: it is counted in `InputRejections`
  and the last good state is kept.
- `backend_opener` checks at start-up what can be checked without the device (its Python
  library is installed, the mapping's evdev codes exist, stdin is a terminal) and raises
  ValueError; the function it returns opens the device, raising `DeviceError` while it is absent.
- The Joy backend is `JoyDecoder`: the node's subscription feeds it `Joy.axes` and `Joy.buttons`.
"""

from __future__ import annotations

import importlib
import os
import select
import struct
import sys
import termios
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np

from robot_rl.hardware.safety import Rejected
from robot_rl.teleop.inputs import InputRejections, TeleopInput
from robot_rl.teleop.mapping import DeviceMapping, InputMapper

__all__ = ["DeviceError", "EvdevBackend", "EvdevState", "InputBackend", "JoyDecoder", "KeyDecoder",
           "KeyboardBackend", "SpaceMouseBackend", "SpaceMouseReport", "backend_opener", "parse_spacemouse_report"]

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


# ---- SpaceMouse (HID) -------------------------------------------------------------------------------

REPORT_TRANSLATION, REPORT_ROTATION, REPORT_BUTTONS = 1, 2, 3
REPORT_BATTERY = 0x17
"""Battery level of the wireless models: carries no input, ignored."""


@dataclass(frozen=True)
class SpaceMouseReport:
    """The content of one SpaceMouse HID input report (None: not in this report)."""

    translation: tuple[int, int, int] | None = None
    """Raw counts tx, ty, tz (int16)."""
    rotation: tuple[int, int, int] | None = None
    """Raw counts rx, ry, rz (int16)."""
    buttons: int | None = None
    """Bit mask of the held buttons: bit i = button i (0 = left, 1 = right)."""


def parse_spacemouse_report(report: bytes | Sequence[int]) -> SpaceMouseReport | None:
    """Parses a SpaceMouse input report as read from HID (report id first):

    - id 1, 7 bytes: translation, 3 x int16 little-endian (SpaceNavigator, SpaceMouse Pro...);
    - id 1, 13 bytes: translation then rotation, 6 x int16 (SpaceMouse Wireless, Compact and newer);
    - id 2, 7 bytes: rotation, 3 x int16;
    - id 3, 2 bytes or more: button bit mask, little-endian.

    Returns None for the battery report (id 0x17); raises Rejected ("malformed" for a bad length,
    "unknown_report" for other ids)."""
    try:
        data = bytes(report)
    except (TypeError, ValueError):
        raise Rejected("malformed", f"not a byte string: {report!r:.80}") from None
    if not data:
        raise Rejected("malformed", "empty report")
    report_id, body = data[0], data[1:]
    if report_id == REPORT_TRANSLATION:
        if len(body) == 12:
            values = struct.unpack("<6h", body)
            return SpaceMouseReport(translation=values[:3], rotation=values[3:])
        if len(body) == 6:
            return SpaceMouseReport(translation=struct.unpack("<3h", body))
        raise Rejected("malformed", f"translation report (id 1) of {len(data)} bytes; expected 7 or 13")
    if report_id == REPORT_ROTATION:
        if len(body) != 6:
            raise Rejected("malformed", f"rotation report (id 2) of {len(data)} bytes; expected 7")
        return SpaceMouseReport(rotation=struct.unpack("<3h", body))
    if report_id == REPORT_BUTTONS:
        if not body:
            raise Rejected("malformed", "button report (id 3) without a bit mask")
        return SpaceMouseReport(buttons=int.from_bytes(body, "little"))
    if report_id == REPORT_BATTERY:
        return None
    raise Rejected("unknown_report", f"report id {report_id} ({len(data)} bytes)")


class SpaceMouseBackend(InputBackend):
    """Reads an opened HID device (cython-hidapi's `device`: `read(max_length, timeout_ms)` -> list
    of ints, [] on timeout). Raw axes 0-5 = tx ty tz rx ry rz / `full_scale`; raw buttons = bit
    indices."""

    def __init__(self, device: Any, mapping: DeviceMapping, rejections: InputRejections, description: str,
                 clock: Clock = time.monotonic):
        super().__init__(mapping, rejections, description, clock)
        self._device = device
        self._full_scale = mapping.spacemouse.full_scale

    def read(self, timeout_s: float) -> list[TeleopInput]:
        try:
            data = self._device.read(64, max(1, round(timeout_s * 1000)))
        except (OSError, ValueError) as exc:
            raise DeviceError(f"{self.description}: read failed: {exc}") from None
        if data:
            try:
                self._apply(parse_spacemouse_report(data))
            except Rejected as exc:
                self._reject(exc)
        return [self._snapshot()]

    def _apply(self, report: SpaceMouseReport | None) -> None:
        if report is None:
            return
        for offset, values in ((0, report.translation), (3, report.rotation)):
            if values is not None:
                for i, v in enumerate(values):
                    self._raw_axes[offset + i] = v / self._full_scale
        if report.buttons is not None:
            self._raw_buttons = {bit for bit in range(report.buttons.bit_length()) if report.buttons >> bit & 1}

    def close(self) -> None:
        self._device.close()


def _hid_module() -> Any:
    # cython-hidapi ships two builds: `hidraw` (Linux kernel hidraw: the kernel driver stays
    # attached, read access to /dev/hidraw* is enough) and `hid` (libusb: detaches the kernel
    # driver, needs USB device access). Prefer hidraw where it exists.
    for name in ("hidraw", "hid"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "device") and hasattr(module, "enumerate"):
            return module
    raise ValueError("device 'spacemouse' needs cython-hidapi: pip install hidapi (the 'teleop' extra)")


def _open_spacemouse(hid: Any, mapping: DeviceMapping, path: str, rejections: InputRejections,
                     clock: Clock) -> SpaceMouseBackend:
    ids = list(mapping.spacemouse.usb_ids)
    wanted = ", ".join(f"{v:04x}:{p:04x}" for v, p in ids)
    if path:
        target, description = path.encode(), path
    else:
        found = [d for d in hid.enumerate() if (d.get("vendor_id"), d.get("product_id")) in ids]
        if not found:
            raise DeviceError(f"no SpaceMouse found (USB ids {wanted}): is it plugged in (and its receiver paired)?")
        # Devices with several HID collections: the multi-axis controller is usage page 1, usage 8.
        found.sort(key=lambda d: (ids.index((d["vendor_id"], d["product_id"])),
                                  (d.get("usage_page"), d.get("usage")) != (1, 8)))
        info = found[0]
        target = info["path"]
        description = f"{info.get('product_string') or 'SpaceMouse'} at {info['path'].decode(errors='replace')}"
    device = hid.device()
    try:
        device.open_path(target)
    except (OSError, ValueError) as exc:
        raise DeviceError(f"cannot open {description}: {exc} (no permission? a udev rule must give your user "
                          "read access to the SpaceMouse's /dev/hidraw*)") from None
    return SpaceMouseBackend(device, mapping, rejections, description, clock)


# ---- gamepad (Linux evdev) --------------------------------------------------------------------------

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


def _evdev_codes(evdev: Any, mapping: DeviceMapping) -> dict[str, int]:
    names = {src.source for src in mapping.axes.values()} | set(mapping.buttons)
    unknown = sorted(n for n in names if n not in evdev.ecodes.ecodes)
    if unknown:
        raise ValueError(f"{mapping.source}: evdev has no codes {unknown} (see `python -m evdev.evtest`)")
    return {n: evdev.ecodes.ecodes[n] for n in names}


def _open_evdev(evdev: Any, codes: Mapping[str, int], mapping: DeviceMapping, path: str,
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


# ---- keyboard (terminal) ------------------------------------------------------------------------------

_ESCAPE_SEQUENCES = {
    "[A": "up", "[B": "down", "[C": "right", "[D": "left", "[H": "home", "[F": "end",
    "OA": "up", "OB": "down", "OC": "right", "OD": "left", "OH": "home", "OF": "end",  # application mode
    "[1~": "home", "[2~": "insert", "[3~": "delete", "[4~": "end", "[5~": "page_up", "[6~": "page_down",
    "[7~": "home", "[8~": "end",
}
_SINGLE_BYTES = {0x20: "space", 0x0D: "enter", 0x0A: "enter", 0x09: "tab", 0x7F: "backspace", 0x08: "backspace"}
_MAX_SEQUENCE = 16


class KeyDecoder:
    """Bytes from a terminal -> key names (printable ASCII characters as themselves, else names
    of `mapping.KEY_NAMES`) or `Rejected` for anything else (control characters, Alt combinations,
    non-ASCII, unknown escape sequences). An escape sequence split across reads is kept for the
    next `feed`; `flush` (when input paused) turns a lone ESC into the Esc key."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[str | Rejected]:
        buf, self._pending = self._pending + data, b""
        out: list[str | Rejected] = []
        i = 0
        while i < len(buf):
            b = buf[i]
            if b == 0x1B:
                end = _escape_end(buf, i)
                if end is None:  # incomplete: wait for the rest
                    self._pending = buf[i:]
                    break
                out.append(_escape_key(buf[i:end]))
                i = end
            elif b >= 0x80:
                end = i
                while end < len(buf) and buf[end] >= 0x80:
                    end += 1
                out.append(Rejected("unknown_key", f"non-ASCII input {buf[i:end]!r}"))
                i = end
            else:
                if b in _SINGLE_BYTES:
                    out.append(_SINGLE_BYTES[b])
                elif b < 0x20:
                    out.append(Rejected("unknown_key", f"ctrl+{chr(b + 0x60)}"))
                else:
                    out.append(chr(b))
                i += 1
        return out

    def flush(self) -> list[str | Rejected]:
        pending, self._pending = self._pending, b""
        if not pending:
            return []
        return ["esc"] if pending == b"\x1b" else [Rejected("unknown_key", f"incomplete escape sequence {pending!r}")]


def _escape_end(buf: bytes, i: int) -> int | None:
    """Index just past the escape sequence starting at buf[i] (ESC), None if it is incomplete."""
    if i + 1 >= len(buf):
        return None
    lead = buf[i + 1]
    if lead == 0x1B:
        return i + 1  # ESC ESC: the first one was the Esc key
    if lead == ord("O"):
        return i + 3 if i + 2 < len(buf) else None
    if lead != ord("["):
        return i + 2  # Alt+key
    j = i + 2
    while j < len(buf) and j - i < _MAX_SEQUENCE:
        if 0x40 <= buf[j] <= 0x7E:  # CSI final byte
            return j + 1
        j += 1
    return j if j - i >= _MAX_SEQUENCE else None


def _escape_key(sequence: bytes) -> str | Rejected:
    if sequence == b"\x1b":
        return "esc"
    body = sequence[1:].decode("ascii", errors="replace")
    if body in _ESCAPE_SEQUENCES:
        return _ESCAPE_SEQUENCES[body]
    if len(sequence) == 2:
        return Rejected("unknown_key", f"alt+{body!r}")
    return Rejected("unknown_key", f"escape sequence {sequence!r}")


class KeyboardBackend(InputBackend):
    """Reads key presses from a terminal in raw mode (key by key, no echo). Motion keys drive
    their axis for `key_hold_s` after each press or auto-repeat; button keys are taps (a snapshot
    with the key held, then one without). Keys that are not mapped are rejected ("unknown_key").
    `close` restores the terminal."""

    def __init__(self, fd: int, mapping: DeviceMapping, rejections: InputRejections, description: str,
                 clock: Clock = time.monotonic, close_fd: bool = False):
        super().__init__(mapping, rejections, description, clock)
        self._fd = fd
        self._close_fd = close_fd
        self._decoder = KeyDecoder()
        self._settings = mapping.keyboard
        self._motion: dict[str, tuple[float, float]] = {}  # axis -> (direction, driven until)
        try:
            self._saved = termios.tcgetattr(fd)
        except termios.error as exc:
            raise DeviceError(f"{description} is not a terminal: {exc}") from None
        raw = termios.tcgetattr(fd)
        # ICANON/ECHO off: every key at once, not echoed. ISIG stays on: Ctrl-C still stops the
        # node in its own terminal. IXON/ICRNL off: Ctrl-S/Ctrl-Q and Enter arrive as typed.
        raw[0] &= ~(termios.IXON | termios.ICRNL)
        raw[3] &= ~(termios.ICANON | termios.ECHO)
        raw[6][termios.VMIN], raw[6][termios.VTIME] = 1, 0
        termios.tcsetattr(fd, termios.TCSANOW, raw)

    def read(self, timeout_s: float) -> list[TeleopInput]:
        now = self._clock()
        expiries = [until - now for _, until in self._motion.values() if until > now]
        ready, _, _ = select.select([self._fd], [], [], max(0.0, min([timeout_s, *expiries])))
        if ready:
            try:
                data = os.read(self._fd, 1024)
            except OSError as exc:
                raise DeviceError(f"{self.description}: read failed: {exc}") from None
            if not data:
                raise DeviceError(f"{self.description}: the terminal was closed")
            keys = self._decoder.feed(data)
        else:
            keys = self._decoder.flush()
        samples = []
        for key in keys:
            samples += self._press(key)
        return samples or [self._snapshot()]

    def _press(self, key: str | Rejected) -> list[TeleopInput]:
        if isinstance(key, Rejected):
            self._reject(key)
            return []
        if key in self._settings.motion_keys:
            axis, direction = self._settings.motion_keys[key]
            # The latest key wins on its axis: a terminal auto-repeats only the last key pressed.
            self._motion[axis] = (direction, self._clock() + self._settings.key_hold_s)
            return [self._snapshot()]
        if key in self.mapping.buttons:
            self._raw_buttons = {key}
            pressed = self._snapshot()
            self._raw_buttons = set()
            return [pressed, self._snapshot()]
        self.rejections.record("unknown_key", f"{key!r} is not mapped")
        return []

    def _snapshot(self) -> TeleopInput:
        now = self._clock()
        self._motion = {axis: m for axis, m in self._motion.items() if m[1] > now}
        self._raw_axes = {axis: direction for axis, (direction, _) in self._motion.items()}
        return super()._snapshot()

    def close(self) -> None:
        try:
            termios.tcsetattr(self._fd, termios.TCSANOW, self._saved)
        except termios.error:
            pass  # the terminal is already gone
        if self._close_fd:
            os.close(self._fd)


def _open_keyboard(mapping: DeviceMapping, path: str, rejections: InputRejections, clock: Clock) -> KeyboardBackend:
    if not path:
        return KeyboardBackend(sys.stdin.fileno(), mapping, rejections, "stdin", clock)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY)  # never become this terminal's controlling process
    except OSError as exc:
        raise DeviceError(f"cannot open terminal {path}: {exc}") from None
    try:
        return KeyboardBackend(fd, mapping, rejections, path, clock, close_fd=True)
    except DeviceError:
        os.close(fd)
        raise


# ---- joy (sensor_msgs/Joy) -----------------------------------------------------------------------------


class JoyDecoder:
    """`sensor_msgs/Joy` content (axes, buttons) -> `TeleopInput`. Raises Rejected for a message
    that does not fit the mapping ("joy_layout": too few axes or buttons), NaN/Inf ("nan"), axes
    outside [-1, 1] ("axis_out_of_range") or buttons other than 0/1 ("bad_button")."""

    def __init__(self, mapping: DeviceMapping):
        self._mapper = InputMapper(mapping)
        self._axis_indices = sorted({src.source for src in mapping.axes.values()})
        self._axes_needed = max(self._axis_indices, default=-1) + 1
        self._buttons_needed = max(mapping.buttons, default=-1) + 1

    def __call__(self, axes: Sequence[float], buttons: Sequence[int], stamp: float) -> TeleopInput:
        if len(axes) < self._axes_needed or len(buttons) < self._buttons_needed:
            raise Rejected("joy_layout", f"{len(axes)} axes and {len(buttons)} buttons; the mapping reads "
                                         f"{self._axes_needed} axes and {self._buttons_needed} buttons")
        values = np.asarray(axes, dtype=np.float64)
        if not np.isfinite(values).all():
            raise Rejected("nan", f"axes {list(axes)}")
        if values.size and np.abs(values).max() > 1.0 + 1e-6:
            raise Rejected("axis_out_of_range", f"axes {list(axes)} outside [-1, 1]")
        if any(b not in (0, 1) for b in buttons):
            raise Rejected("bad_button", f"buttons {list(buttons)} are not all 0 or 1")
        raw_axes = {i: float(values[i]) for i in self._axis_indices}
        return self._mapper(raw_axes, [i for i, b in enumerate(buttons) if b], stamp)


# ---- opening -------------------------------------------------------------------------------------------


def backend_opener(device: str, mapping: DeviceMapping, path: str, rejections: InputRejections,
                   clock: Clock = time.monotonic) -> Callable[[], InputBackend]:
    """Checks what can be checked before the device is there (raises ValueError: the library is
    missing, the mapping's evdev codes do not exist, stdin is not a terminal) and returns a
    function that opens the device (raises DeviceError while it is absent or unreadable).

    `path`: spacemouse a hidraw path (""; the first device with one of `usb_ids`); evdev
    /dev/input/eventN or a device name substring ("": `evdev.name`); keyboard a terminal such as
    /dev/pts/3 ("": stdin). Not for "joy" (fed by the node's subscription through `JoyDecoder`)."""
    if mapping.device != device:
        raise ValueError(f"the mapping is for {mapping.device!r}, not {device!r}")
    if device == "spacemouse":
        hid = _hid_module()
        return lambda: _open_spacemouse(hid, mapping, path, rejections, clock)
    if device == "evdev":
        try:
            evdev = importlib.import_module("evdev")
        except ImportError:
            raise ValueError("device 'evdev' needs python-evdev: pip install evdev (the 'teleop' extra)") from None
        codes = _evdev_codes(evdev, mapping)
        return lambda: _open_evdev(evdev, codes, mapping, path, rejections, clock)
    if device == "keyboard":
        if not path and not os.isatty(sys.stdin.fileno()):
            raise ValueError("device 'keyboard' reads the terminal, but stdin is not one: run the node in a "
                             "terminal (over SSH too) or set device_path to a terminal such as /dev/pts/3")
        return lambda: _open_keyboard(mapping, path, rejections, clock)
    raise ValueError(f"device {device!r} has no reader of its own (joy is fed by the node's subscription)")
