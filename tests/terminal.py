"""A command in a pseudo-terminal, typed into like a person at the keyboard (the teleop keyboard reads it)."""

from __future__ import annotations

import os
import pty
import select
import signal
import threading
import time

KEYS = {"up": b"\x1b[A", "down": b"\x1b[B", "left": b"\x1b[D", "right": b"\x1b[C",
        "page_up": b"\x1b[5~", "page_down": b"\x1b[6~", "close": b"c", "open": b"o", "success": b"s",
        "failure": b"f", "rerecord": b"r", "pause": b"p", "help": b"?"}
"""What the person types (hardware/teleop_keyboard.yaml: up/down +y/-y, right/left +x/-x, page keys z)."""


class Terminal:
    """`robot-rl record` in a pseudo-terminal: the keyboard the teleop node reads is this terminal."""

    def __init__(self, argv: list[str], env: dict):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the command, with the terminal as stdin/stdout
            # Ctrl-C as a terminal delivers it: a shell's background job (CI started with `&`) ignores SIGINT,
            # which the command would inherit.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execvpe(argv[0], argv, env)
        self.output = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:
                    return
                if not data:
                    return
                self.output += data

    @property
    def text(self) -> str:
        return self.output.decode(errors="replace")

    def type(self, key: str, held_s: float = 0.0) -> None:
        """Presses `key`; holding it `held_s` seconds, the terminal repeats it (every 30 ms, as a terminal's
        auto-repeat does once it starts)."""
        os.write(self.fd, KEYS[key])
        for _ in range(int(held_s / 0.03)):
            time.sleep(0.03)
            os.write(self.fd, KEYS[key])

    def wait_exit(self, timeout: float) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.1)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"robot-rl record did not exit within {timeout} s:\n{self.text[-3000:]}")
