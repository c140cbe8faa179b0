"""Camera sources for real robots, behind one small interface (no ROS in here).

    source = OpenCVSource("/dev/video0", geometry=Geometry(output_size=(128, 128)))
    source.open()                     # optional: read() opens (and reopens) by itself
    frame = source.read()             # Frame(color HxWx3 uint8 RGB, depth HxW uint16 | None, stamp_ns, seq)
    source.intrinsics                 # pinhole intrinsics of the *output* image (after crop + resize)
    source.close()

Every source crops and resizes to the policy's size itself (colour with ``cv2.INTER_AREA``, depth with
nearest neighbour so no depth values are invented at object edges) and keeps its intrinsics in step.

Self-healing: a source whose device fails (unplugged, USB reset, a `wait_for_frames` that times out)
closes it, raises `CameraError`, and the next `read()` reopens it after an exponential backoff
(`Backoff`); `reconnects` counts the successful reopenings. A device that is missing at start behaves
the same way, so a grab loop is simply::

    while running:
        try:
            frame = source.read()
        except CameraError as exc:   # reported, retried by the next read()
            ...
        except EndOfStream:          # a video file without loop
            break

`close()` may be called from another thread: waits (backoff, file pacing, RealSense polling) end
within ~0.1 s and `read()` then raises `SourceClosed`.
"""

from __future__ import annotations

import math
import os
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

__all__ = [
    "Backoff",
    "CameraError",
    "CameraSource",
    "EndOfStream",
    "Frame",
    "Geometry",
    "HardwareClock",
    "Intrinsics",
    "OpenCVSource",
    "RealSenseSource",
    "SourceClosed",
    "list_realsense_devices",
]


class CameraError(RuntimeError):
    """The camera cannot deliver a frame now (missing, unplugged, timed out); the next read() retries."""


class EndOfStream(CameraError):
    """A video file ended and looping is off: no more frames will come."""


class SourceClosed(CameraError):
    """close() was called (possibly from another thread) while read() waited."""


# ------------------------------------------------------------------------------------------------
# frames and geometry
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    color: np.ndarray
    """uint8 (H, W, 3), RGB order, C-contiguous."""
    depth: np.ndarray | None
    """uint16 (H, W) aligned to `color` (device units, see the source's `depth_scale`), or None."""
    stamp_ns: int
    """Capture time in ns since the epoch: the device's stamp when it gives one, else the receive time."""
    seq: int
    """Frames delivered by this source so far, minus one (keeps counting across reconnects)."""
    hardware_stamp: bool = False
    """True when `stamp_ns` comes from the device rather than from the receive time."""


@dataclass(frozen=True)
class Intrinsics:
    """Pinhole intrinsics (pixel-centre convention: pixel (0, 0) spans [-0.5, 0.5])."""

    width: int
    height: int
    fx: float = 0.0
    fy: float = 0.0
    cx: float = 0.0
    cy: float = 0.0
    distortion_model: str = "plumb_bob"
    coeffs: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0)

    @property
    def calibrated(self) -> bool:
        """False for a camera of unknown calibration (ROS convention: K all zeros)."""
        return self.fx > 0 and self.fy > 0

    @property
    def K(self) -> np.ndarray:  # noqa: N802 - the usual name
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    def cropped(self, x: int, y: int, width: int, height: int) -> Intrinsics:
        if not self.calibrated:
            return replace(self, width=width, height=height)
        return replace(self, width=width, height=height, cx=self.cx - x, cy=self.cy - y)

    def resized(self, width: int, height: int) -> Intrinsics:
        """Scales to a new image size. Distortion coefficients act on normalised coordinates and stay."""
        sx, sy = width / self.width, height / self.height
        if not self.calibrated:
            return replace(self, width=width, height=height)
        return replace(self, width=width, height=height, fx=self.fx * sx, fy=self.fy * sy,
                       cx=(self.cx + 0.5) * sx - 0.5, cy=(self.cy + 0.5) * sy - 0.5)


@dataclass(frozen=True)
class Geometry:
    """Crop box in native pixels, then resize to the policy's size.

    `crop` is (x, y, width, height); a width/height of 0 extends to the image edge, None keeps the whole
    image. `output_size` is (width, height); None (or zeros) keeps the cropped size.
    """

    crop: tuple[int, int, int, int] | None = None
    output_size: tuple[int, int] | None = None

    def __post_init__(self):
        if self.crop is not None:
            if len(self.crop) != 4 or any(int(v) < 0 for v in self.crop):
                raise ValueError(f"crop must be (x, y, width, height) with values >= 0, got {self.crop}")
            object.__setattr__(self, "crop", tuple(int(v) for v in self.crop))
        if self.output_size is not None:
            if len(self.output_size) != 2 or any(int(v) < 0 for v in self.output_size):
                raise ValueError(f"output_size must be (width, height) >= 0, got {self.output_size}")
            size = tuple(int(v) for v in self.output_size)
            object.__setattr__(self, "output_size", None if size == (0, 0) else size)
            if self.output_size is not None and 0 in self.output_size:
                raise ValueError(f"output_size needs both width and height, got {self.output_size}")

    def crop_box(self, width: int, height: int) -> tuple[int, int, int, int]:
        """The crop box for a native image of this size; raises ValueError when it does not fit."""
        if self.crop is None:
            return 0, 0, width, height
        x, y, w, h = self.crop
        w = w or width - x
        h = h or height - y
        if w <= 0 or h <= 0 or x + w > width or y + h > height:
            raise ValueError(f"crop box {self.crop} does not fit a {width}x{height} image")
        return x, y, w, h

    def out_size(self, width: int, height: int) -> tuple[int, int]:
        _, _, w, h = self.crop_box(width, height)
        return self.output_size or (w, h)

    def apply(self, color: np.ndarray, depth: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        import cv2

        height, width = color.shape[:2]
        x, y, w, h = self.crop_box(width, height)
        out_w, out_h = self.output_size or (w, h)
        color = color[y:y + h, x:x + w]
        if (out_w, out_h) != (w, h):
            color = cv2.resize(color, (out_w, out_h), interpolation=cv2.INTER_AREA)
        color = np.ascontiguousarray(color)
        if depth is not None:
            if depth.shape[:2] != (height, width):
                raise ValueError(f"depth {depth.shape[:2]} is not aligned to colour {(height, width)}")
            depth = depth[y:y + h, x:x + w]
            if (out_w, out_h) != (w, h):
                depth = cv2.resize(depth, (out_w, out_h), interpolation=cv2.INTER_NEAREST)
            depth = np.ascontiguousarray(depth)
        return color, depth

    def apply_intrinsics(self, intrinsics: Intrinsics) -> Intrinsics:
        x, y, w, h = self.crop_box(intrinsics.width, intrinsics.height)
        out = intrinsics.cropped(x, y, w, h) if (x, y, w, h) != (0, 0, intrinsics.width, intrinsics.height) \
            else intrinsics
        out_w, out_h = self.output_size or (w, h)
        return out.resized(out_w, out_h) if (out_w, out_h) != (w, h) else out


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
            color, depth = self.geometry.apply(color, depth)
            frame = Frame(color=color, depth=depth, stamp_ns=int(stamp_ns), seq=self.frames, hardware_stamp=hardware)
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


# ------------------------------------------------------------------------------------------------
# OpenCV (webcams, /dev/videoN, video files)
# ------------------------------------------------------------------------------------------------


class OpenCVSource(CameraSource):
    """`cv2.VideoCapture` source: a device index, a /dev/videoN path, a video file or a stream URL.

    Frames are converted BGR -> RGB. Video files are paced at their frame rate (or `fps` when given;
    `pace=False` reads as fast as decoding goes) and start over at the end when `loop` is set;
    otherwise read() raises EndOfStream. `intrinsics` (at the native resolution) is optional: without it
    the source reports an uncalibrated camera (zeros). Stamps are receive times.
    """

    def __init__(self, device: int | str = 0, width: int = 0, height: int = 0, fps: float = 0.0, *,
                 loop: bool = True, pace: bool = True, intrinsics: Intrinsics | None = None,
                 geometry: Geometry | None = None, backoff: Backoff | None = None):
        super().__init__(geometry, backoff)
        if isinstance(device, str) and device.strip().isdigit():
            device = int(device)
        self.device = device
        self.width, self.height, self.fps = int(width), int(height), float(fps)
        self.loop, self.pace = loop, pace
        self.calibration = intrinsics
        self.is_file = isinstance(device, str) and os.path.isfile(device)
        self.name = f"camera {device!r}"
        self._cap = None
        self._period_s = 0.0
        self._next_due = 0.0

    def _open(self) -> None:
        import cv2

        device = self.device
        if isinstance(device, str) and device.startswith("/dev/") and not os.path.exists(device):
            raise CameraError(f"no camera at {device} (the device node does not exist: unplugged?)")
        if isinstance(device, str) and "://" not in device and not device.startswith("/dev/") \
                and not os.path.exists(device):
            raise CameraError(f"no such video file {device!r}")
        cap = cv2.VideoCapture(device)
        if not cap.isOpened():
            cap.release()
            raise CameraError(f"OpenCV cannot open {device!r} (busy, no permission, or not a camera/video)")
        if not self.is_file:
            if self.width > 0 and self.height > 0:
                cap.set(cv2.CAP_PROP_FRAME_WIDTH, self.width)
                cap.set(cv2.CAP_PROP_FRAME_HEIGHT, self.height)
            if self.fps > 0:
                cap.set(cv2.CAP_PROP_FPS, self.fps)
        self._cap = cap
        native_w = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH))
        native_h = int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        if native_w <= 0 or native_h <= 0:  # some backends only know after the first frame
            ok, probe = cap.read()
            if not ok:
                raise CameraError(f"{device!r} opened but delivers no frames")
            native_h, native_w = probe.shape[:2]
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
        self.geometry.crop_box(native_w, native_h)  # refuse a crop that does not fit, with a clear message
        calib = self.calibration
        if calib is not None and (calib.width, calib.height) != (native_w, native_h):
            calib = calib.resized(native_w, native_h)
        self._native_intrinsics = calib or Intrinsics(native_w, native_h)
        file_fps = cap.get(cv2.CAP_PROP_FPS) if self.is_file else 0.0
        rate = self.fps if self.fps > 0 else file_fps
        self._period_s = 1.0 / rate if (self.is_file and self.pace and rate > 0) else 0.0
        self._next_due = time.monotonic()

    def _close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None

    def _grab(self):
        import cv2

        if self._period_s > 0:
            self._wait(self._next_due - time.monotonic())
            now = time.monotonic()
            # keep the cadence, but do not burst to catch up after a stall
            self._next_due = max(self._next_due + self._period_s, now - self._period_s)
        ok, bgr = self._cap.read()
        if not ok and self.is_file:
            if not self.loop:
                raise EndOfStream(f"end of video file {self.device!r}")
            self._cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            ok, bgr = self._cap.read()
        if not ok or bgr is None:
            raise CameraError(f"{self.device!r} stopped delivering frames (unplugged?)")
        stamp = time.time_ns()
        if bgr.dtype != np.uint8:
            raise CameraError(f"{self.device!r} delivers {bgr.dtype} images; only 8-bit colour is supported")
        if bgr.ndim == 2:
            rgb = cv2.cvtColor(bgr, cv2.COLOR_GRAY2RGB)
        elif bgr.shape[2] == 4:
            rgb = cv2.cvtColor(bgr, cv2.COLOR_BGRA2RGB)
        else:
            rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        return rgb, None, stamp, False


# ------------------------------------------------------------------------------------------------
# Intel RealSense (pyrealsense2)
# ------------------------------------------------------------------------------------------------


def _rs():
    try:
        import pyrealsense2 as rs
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise CameraError("the RealSense backend needs pyrealsense2 (pip install pyrealsense2)") from exc
    return rs


def list_realsense_devices(context: Any = None) -> list[dict[str, str]]:
    """Connected RealSense devices: [{"serial", "name", "usb"}]."""
    rs = _rs()
    ctx = context or rs.context()
    out = []
    for dev in ctx.query_devices():
        info = {}
        for key, field in (("serial", rs.camera_info.serial_number), ("name", rs.camera_info.name),
                           ("usb", rs.camera_info.usb_type_descriptor)):
            info[key] = dev.get_info(field) if dev.supports(field) else ""
        out.append(info)
    return out


_DISTORTION_MODELS = {  # librealsense model -> ROS CameraInfo distortion_model (as realsense-ros does)
    "brown_conrady": "plumb_bob",
    "inverse_brown_conrady": "plumb_bob",
    "modified_brown_conrady": "plumb_bob",
    "none": "plumb_bob",
    "kannala_brandt4": "equidistant",
    "ftheta": "equidistant",
}


def _intrinsics_from_rs(intr: Any) -> Intrinsics:
    model = str(intr.model).rsplit(".", 1)[-1]
    coeffs = tuple(float(c) for c in intr.coeffs)
    if _DISTORTION_MODELS.get(model) == "equidistant":
        coeffs = coeffs[:4]
    return Intrinsics(width=int(intr.width), height=int(intr.height), fx=float(intr.fx), fy=float(intr.fy),
                      cx=float(intr.ppx), cy=float(intr.ppy),
                      distortion_model=_DISTORTION_MODELS.get(model, "plumb_bob"), coeffs=coeffs)


class RealSenseSource(CameraSource):
    """An Intel RealSense camera through pyrealsense2: colour (RGB8) and depth (Z16) aligned to colour
    with `rs.align`, selected by serial number (empty: the first one found).

    Stamps: frames in the global-time or system-time domain carry host epoch milliseconds and are used
    as they are; hardware-clock stamps are mapped onto the host clock (`HardwareClock`); otherwise the
    receive time. A `wait_for_frames` that gets nothing within `frame_timeout_s`, or a device-removed
    event for this camera, closes the pipeline; the next read() reopens it with backoff (`reconnects`).

    `device` (an `rs.device`, e.g. a software device or a playback device) bypasses enumeration;
    `context` lets a caller share an `rs.context`.
    """

    def __init__(self, serial: str = "", width: int = 640, height: int = 480, fps: int = 30, *,
                 enable_depth: bool = True, frame_timeout_s: float = 1.0, geometry: Geometry | None = None,
                 backoff: Backoff | None = None, context: Any = None, device: Any = None):
        super().__init__(geometry, backoff)
        self.serial = str(serial or "")
        self.width, self.height, self.fps = int(width), int(height), int(fps)
        self.enable_depth = bool(enable_depth)
        self.frame_timeout_s = float(frame_timeout_s)
        self.name = f"RealSense {self.serial or '(first found)'}"
        self._context = context
        self._device_override = device
        self._pipeline = None
        self._align = None
        self._device = None
        self._removed = threading.Event()
        self._depth_scale = 0.0
        self._clock = HardwareClock()
        self._last_number: int | None = None
        self._callback_installed = False

    @property
    def depth_scale(self) -> float:
        return self._depth_scale if self.enable_depth else 0.0

    @property
    def has_depth(self) -> bool:
        return self.enable_depth

    def _ctx(self):
        rs = _rs()
        if self._context is None:
            self._context = rs.context()
        if not self._callback_installed:
            try:
                self._context.set_devices_changed_callback(self._on_devices_changed)
            except Exception:  # pragma: no cover - some contexts (playback) do not report changes
                pass
            self._callback_installed = True
        return self._context

    def _on_devices_changed(self, event: Any) -> None:
        """librealsense's devices-changed callback (its own thread): flags the removal of our camera."""
        device = self._device
        try:
            if device is not None and event.was_removed(device):
                self._removed.set()
        except Exception:  # the device handle may already be gone
            self._removed.set()

    def _open(self) -> None:
        rs = _rs()
        ctx = self._ctx()
        pipeline = rs.pipeline(ctx)
        config = rs.config()
        if self._device_override is not None:
            pipeline.set_device(self._device_override)
        else:
            # Ask first: pipeline.start() on a missing camera blocks ~15 s waiting for one to appear.
            connected = list_realsense_devices(ctx)
            if not any(d["serial"] == self.serial or not self.serial for d in connected):
                found = ", ".join(f"{d['name']} (serial {d['serial']})" for d in connected) or "none"
                raise CameraError(f"{self.name} is not connected (connected RealSense cameras: {found}); "
                                  "check the USB cable and the serial parameter")
            if self.serial:
                config.enable_device(self.serial)
        config.enable_stream(rs.stream.color, self.width, self.height, rs.format.rgb8, self.fps)
        if self.enable_depth:
            config.enable_stream(rs.stream.depth, self.width, self.height, rs.format.z16, self.fps)
        self._removed.clear()
        try:
            profile = pipeline.start(config)
        except RuntimeError as exc:
            if self._device_override is None:
                found = ", ".join(f"{d['name']} {d['serial']}" for d in list_realsense_devices(ctx)) or "none"
            else:
                found = "a given device"
            raise CameraError(f"cannot start {self.name} at {self.width}x{self.height}@{self.fps} "
                              f"(colour{' + depth' if self.enable_depth else ''}): {exc}; connected: {found}") \
                from exc
        self._pipeline = pipeline
        self._device = profile.get_device()
        color = profile.get_stream(rs.stream.color).as_video_stream_profile()
        self._native_intrinsics = _intrinsics_from_rs(color.get_intrinsics())
        self.geometry.crop_box(self._native_intrinsics.width, self._native_intrinsics.height)
        self._align = rs.align(rs.stream.color) if self.enable_depth else None
        if self.enable_depth:
            try:
                self._depth_scale = float(self._device.first_depth_sensor().get_depth_scale())
            except Exception:  # no depth-units option: the D400 default
                self._depth_scale = 0.001
        self._clock.reset()
        self._last_number = None

    def _close(self) -> None:
        pipeline, self._pipeline = self._pipeline, None
        self._align = None
        self._device = None
        if pipeline is not None:
            try:
                pipeline.stop()
            except RuntimeError:  # already stopped, or the device vanished
                pass

    def _grab(self):
        rs = _rs()
        deadline = time.monotonic() + self.frame_timeout_s
        frames = None
        while frames is None:
            if self._closing.is_set():
                raise SourceClosed(f"{self.name} is closed")
            if self._removed.is_set():
                raise CameraError(f"{self.name} was disconnected")
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise CameraError(f"{self.name}: no frames for {self.frame_timeout_s:.1f} s (unplugged?)")
            ok, got = self._pipeline.try_wait_for_frames(min(left_ms, 100))
            if ok:
                frames = got
        receive_ns = time.time_ns()
        if self._align is not None:
            frames = self._align.process(frames)
        color_frame = frames.get_color_frame()
        if not color_frame:
            raise CameraError(f"{self.name} delivered a frame set without colour")
        color = np.asanyarray(color_frame.get_data()).copy()
        depth = None
        if self.enable_depth:
            depth_frame = frames.get_depth_frame()
            if not depth_frame:
                raise CameraError(f"{self.name} delivered a frame set without depth")
            depth = np.asanyarray(depth_frame.get_data()).copy()
        number = int(color_frame.get_frame_number())
        if self._last_number is not None and number > self._last_number + 1:
            self.dropped += number - self._last_number - 1
        self._last_number = number
        stamp_ms = float(color_frame.get_timestamp())
        domain = color_frame.get_frame_timestamp_domain()
        if domain in (rs.timestamp_domain.global_time, rs.timestamp_domain.system_time) and stamp_ms > 0:
            return color, depth, int(round(stamp_ms * 1e6)), domain == rs.timestamp_domain.global_time
        if domain == rs.timestamp_domain.hardware_clock and math.isfinite(stamp_ms) and stamp_ms > 0:
            return color, depth, self._clock.to_host(int(round(stamp_ms * 1e6)), receive_ns), True
        return color, depth, receive_ns, False

