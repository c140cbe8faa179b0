"""The keyboard: key presses read from a terminal in raw mode (so it works over SSH and without a
display), decoded from the terminal's bytes and escape sequences."""

from __future__ import annotations

import os
import select
import sys
import termios
import time

from robot_rl.hardware.safety import Rejected
from robot_rl.teleop.backend import Clock, DeviceError, InputBackend
from robot_rl.teleop.inputs import InputRejections, TeleopInput
from robot_rl.teleop.mapping import DeviceMapping

__all__ = ["KeyDecoder", "KeyboardBackend", "open_keyboard"]

_ESCAPE_SEQUENCES = {
    "[A": "up", "[B": "down", "[C": "right", "[D": "left", "[H": "home", "[F": "end",
    "OA": "up", "OB": "down", "OC": "right", "OD": "left", "OH": "home", "OF": "end",  # application mode
    "[1~": "home", "[2~": "insert", "[3~": "delete", "[4~": "end", "[5~": "page_up", "[6~": "page_down",
    "[7~": "home", "[8~": "end",
}
_SINGLE_BYTES = {0x20: "space", 0x0D: "enter", 0x0A: "enter", 0x09: "tab", 0x7F: "backspace", 0x08: "backspace"}
_MAX_SEQUENCE = 16
AUTO_REPEAT_DELAY_S = 0.6
"""A motion key pressed again this soon continues holding it: terminals begin auto-repeating a held key
0.25-0.6 s after its press (and tapping it again at once means the same: further, faster)."""


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
    their axis for `key_hold_s` after each press or auto-repeat, a first press gently (`tap_speed`:
    a fine step) and a held one faster the longer it is held (`full_speed_after_s`); button keys are
    taps (a snapshot with the key held, then one without). Keys that are not mapped are rejected
    ("unknown_key"). `close` restores the terminal."""

    def __init__(self, fd: int, mapping: DeviceMapping, rejections: InputRejections, description: str,
                 clock: Clock = time.monotonic, close_fd: bool = False):
        super().__init__(mapping, rejections, description, clock)
        self._fd = fd
        self._close_fd = close_fd
        self._decoder = KeyDecoder()
        self._settings = mapping.keyboard
        self._motion: dict[str, tuple[float, float]] = {}  # axis -> (deflection, driven until)
        self._held: dict[str, tuple[float, float, float]] = {}  # axis -> (direction, held since, last press)
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
            now = self._clock()
            held = self._held.get(axis)
            since = held[1] if held and held[0] == direction and now - held[2] <= AUTO_REPEAT_DELAY_S else now
            self._held[axis] = (direction, since, now)
            # The latest key wins on its axis: a terminal auto-repeats only the last key pressed.
            self._motion[axis] = (direction * self._settings.deflection(now - since), now + self._settings.key_hold_s)
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
        self._raw_axes = {axis: deflection for axis, (deflection, _) in self._motion.items()}
        return super()._snapshot()

    def close(self) -> None:
        try:
            termios.tcsetattr(self._fd, termios.TCSANOW, self._saved)
        except termios.error:
            pass  # the terminal is already gone
        if self._close_fd:
            os.close(self._fd)


def open_keyboard(mapping: DeviceMapping, path: str, rejections: InputRejections, clock: Clock) -> KeyboardBackend:
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
