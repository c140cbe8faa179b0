"""A teleop device read on a thread of its own, reopened when it goes away; no ROS.

The teleop node and in-process sessions (`robot-rl record --env`, `train --env --teleop`) share it:
samples go to `on_samples` in arrival order; an absent device is retried every `reconnect_s` and
each new reason is logged once; a device that fails while read is closed, counted and reopened.
"""

from __future__ import annotations

import threading
import traceback
from typing import Callable

from robot_rl.teleop.backend import DeviceError, InputBackend
from robot_rl.teleop.inputs import TeleopInput

Log = Callable[[str, str], None]
"""log(level, message), level "info" or "error"."""


class DeviceReader:
    def __init__(self, opener: Callable[[], InputBackend], device: str, poll_s: float, reconnect_s: float,
                 on_samples: Callable[[list[TeleopInput]], None], log: Log):
        self.opener, self.device, self.poll_s, self.reconnect_s = opener, device, poll_s, reconnect_s
        self.on_samples, self.log = on_samples, log
        self.connected = False
        self.description = ""
        self.error = ""
        """The last reason the device could not be opened or read ("" while it works)."""
        self.disconnects = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="teleop-device", daemon=True)

    def start(self) -> "DeviceReader":
        self._thread.start()
        return self

    def close(self, timeout_s: float = 2.0) -> None:
        """Stops reading; the backend is closed (a terminal restored) before the thread ends."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        backend: InputBackend | None = None
        try:
            while not self._stop.is_set():
                if backend is None:
                    backend = self._open()
                    if backend is None:
                        self._stop.wait(self.reconnect_s)
                    continue
                try:
                    samples = backend.read(self.poll_s)
                    if samples:
                        self.on_samples(samples)
                except Exception as exc:  # noqa: BLE001 - a device failure must never end the reader
                    self._lost(backend, exc)
                    backend = None
        finally:
            if backend is not None:
                backend.close()

    def _open(self) -> InputBackend | None:
        try:
            backend = self.opener()
        except Exception as exc:  # noqa: BLE001 - DeviceError, or a library's own error: report, retry
            message = str(exc) if isinstance(exc, DeviceError) else f"{type(exc).__name__}: {exc}"
            if message != self.error:  # log each new reason once, not every retry
                self.log("error", f"cannot open the {self.device}: {message}; retrying every {self.reconnect_s} s")
            self.error = message
            return None
        self.description, self.error, self.connected = backend.description, "", True
        self.log("info", f"reading {backend.description}")
        return backend

    def _lost(self, backend: InputBackend, exc: Exception) -> None:
        self.connected = False
        self.disconnects += 1
        if isinstance(exc, DeviceError):
            self.error = str(exc)
            self.log("error", f"{self.error}; reopening")
        else:
            self.error = f"{type(exc).__name__}: {exc}"
            self.log("error", f"reading {backend.description} failed: {traceback.format_exc()}")
        try:
            backend.close()
        except Exception as close_exc:  # noqa: BLE001 - the device is already gone
            self.log("error", f"closing {backend.description}: {close_exc}")
