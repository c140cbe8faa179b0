"""Intel RealSense camera source (pyrealsense2): colour and aligned depth, hardware timestamps,
hot-plug aware reopening."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import numpy as np

from robot_rl.hardware.cameras.frame_geometry import Geometry, Intrinsics
from robot_rl.hardware.cameras.source import Backoff, CameraError, CameraSource, HardwareClock, SourceClosed


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
