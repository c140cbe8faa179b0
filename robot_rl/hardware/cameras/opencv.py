"""OpenCV camera source: webcams, /dev/videoN, video files and stream URLs."""

from __future__ import annotations

import os
import time

import numpy as np

from robot_rl.hardware.cameras.frame_geometry import Geometry, Intrinsics
from robot_rl.hardware.cameras.source import Backoff, CameraError, CameraSource, EndOfStream


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
