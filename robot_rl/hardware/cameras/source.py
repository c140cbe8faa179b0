"""The camera source interface: open() / read() -> Frame / close(), self-healing reopen with an
exponential backoff, and the device clock model that turns hardware stamps into host time."""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from robot_rl.hardware.cameras.frame_geometry import Frame, Geometry, Intrinsics


class CameraError(RuntimeError):
    """The camera cannot deliver a frame now (missing, unplugged, timed out); the next read() retries."""


class EndOfStream(CameraError):
    """A video file ended and looping is off: no more frames will come."""


class SourceClosed(CameraError):
    """close() was called (possibly from another thread) while read() waited."""


# ------------------------------------------------------------------------------------------------
# reconnect backoff and device clocks
# ------------------------------------------------------------------------------------------------


class Backoff:
    """Exponential backoff: `initial_s`, doubling up to `max_s`; `reset()` after a success."""

    def __init__(self, initial_s: float = 0.5, max_s: float = 5.0):
        if not 0 < initial_s <= max_s:
            raise ValueError(f"backoff needs 0 < initial_s <= max_s, got {initial_s}, {max_s}")
        self.initial_s, self.max_s = float(initial_s), float(max_s)
        self.delay_s = 0.0
        self.next_try = 0.0  # time.monotonic() of the next allowed attempt

    def failed(self) -> float:
        self.delay_s = self.initial_s if self.delay_s == 0 else min(self.delay_s * 2, self.max_s)
        self.next_try = time.monotonic() + self.delay_s
        return self.delay_s

    def reset(self) -> None:
        self.delay_s, self.next_try = 0.0, 0.0

    def remaining(self) -> float:
        return max(0.0, self.next_try - time.monotonic())


class HardwareClock:
    """Maps a free-running device clock (ns) onto the host's epoch clock.

    The offset host - device is the smallest one seen (the frame with the least transport latency),
    allowed to rise by at most `max_drift` (s/s) so that the two clocks' skew is followed."""

    def __init__(self, max_drift: float = 1e-4):
        self.max_drift = max_drift
        self.offset_ns: int | None = None
        self._last_host_ns = 0

    def reset(self) -> None:
        self.offset_ns = None

    def to_host(self, device_ns: int, receive_ns: int) -> int:
        observed = receive_ns - device_ns
        if self.offset_ns is None or observed < self.offset_ns:
            self.offset_ns = observed
        else:
            allowed = int(self.max_drift * max(0, receive_ns - self._last_host_ns))
            self.offset_ns += min(observed - self.offset_ns, allowed)
        self._last_host_ns = receive_ns
        return device_ns + self.offset_ns


# ------------------------------------------------------------------------------------------------
# the interface
# ------------------------------------------------------------------------------------------------


class CameraSource(ABC):
    """open() / read() -> Frame / close() / intrinsics, with crop + resize and self-healing reopen."""

    name = "camera"

    def __init__(self, geometry: Geometry | None = None, backoff: Backoff | None = None):
        self.geometry = geometry or Geometry()
        self.backoff = backoff or Backoff()
        self.frames = 0
        self.dropped = 0
        """Frames the device produced that never reached read() (frame-number gaps), where known."""
        self.disconnects = 0
        """Times an open device failed (timeout, removal, read error) and was closed."""
        self.reconnects = 0
        """Successful reopenings after a failure."""
        self.open_failures = 0
        self.last_error = ""
        self._lock = threading.RLock()
        self._closing = threading.Event()
        self._is_open = False
        self._lost = False  # the device was open once and failed since
        self._native_intrinsics: Intrinsics | None = None

    # ---- subclass hooks ------------------------------------------------------------------------

    @abstractmethod
    def _open(self) -> None:
        """Opens the device; raises CameraError (with a message a person can act on)."""

    @abstractmethod
    def _close(self) -> None:
        """Releases the device; must not raise."""

    @abstractmethod
    def _grab(self) -> tuple[np.ndarray, np.ndarray | None, int, bool]:
        """Native (rgb, depth or None, stamp_ns, hardware_stamp); raises CameraError on failure."""

    # ---- public --------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._is_open

    @property
    def depth_scale(self) -> float:
        """Metres per depth unit (0 without depth)."""
        return 0.0

    @property
    def has_depth(self) -> bool:
        return False

    @property
    def intrinsics(self) -> Intrinsics | None:
        """Intrinsics of the output image (after crop and resize); None until the device was opened."""
        if self._native_intrinsics is None:
            return None
        return self.geometry.apply_intrinsics(self._native_intrinsics)

    @property
    def native_intrinsics(self) -> Intrinsics | None:
        """Intrinsics of the image as the device gives it (`Frame.native`); None until the device was opened."""
        return self._native_intrinsics

    def open(self) -> None:
        with self._lock:
            self._closing.clear()
            if self._is_open:
                return
            try:
                self._open()
            except CameraError as exc:
                self.open_failures += 1
                self.last_error = str(exc)
                self._close()
                raise
            except Exception as exc:  # a driver error we did not foresee: still a camera error
                self.open_failures += 1
                self.last_error = f"cannot open {self.name}: {exc}"
                self._close()
                raise CameraError(self.last_error) from exc
            self._is_open = True
            if self._lost:
                self.reconnects += 1
                self._lost = False
            self.backoff.reset()
            self.last_error = ""

    def read(self) -> Frame:
        """The next frame. Reopens a closed or failed device first (after the backoff delay)."""
        with self._lock:
            if self._closing.is_set():
                raise SourceClosed(f"{self.name} is closed")
            if not self._is_open:
                self._wait(self.backoff.remaining())
                try:
                    self.open()
                except CameraError:
                    self.backoff.failed()
                    raise
            try:
                color, depth, stamp_ns, hardware = self._grab()
            except (EndOfStream, SourceClosed):
                raise
            except Exception as exc:
                self.last_error = str(exc) if isinstance(exc, CameraError) else f"{self.name} failed: {exc}"
                self.disconnects += 1
                self._lost = True
                self._is_open = False
                self._close()
                self.backoff.failed()
                raise CameraError(self.last_error) from exc
            native = color
            color, depth = self.geometry.apply(color, depth)
            frame = Frame(color=color, depth=depth, stamp_ns=int(stamp_ns), seq=self.frames, hardware_stamp=hardware,
                          native=native)
            self.frames += 1
            return frame

    def close(self) -> None:
        """Releases the device; safe from another thread (interrupts waits inside read())."""
        self._closing.set()
        with self._lock:
            if self._is_open:
                self._is_open = False
                self._close()

    def __enter__(self):
        self.open()
        return self

    def __exit__(self, *exc):
        self.close()

    def stats(self) -> dict[str, Any]:
        return {"frames": self.frames, "dropped_frames": self.dropped, "disconnects": self.disconnects,
                "reconnects": self.reconnects, "open_failures": self.open_failures, "connected": self._is_open}

    # ---- helpers -------------------------------------------------------------------------------

    def _wait(self, seconds: float) -> None:
        if seconds > 0 and self._closing.wait(seconds):
            raise SourceClosed(f"{self.name} is closed")
