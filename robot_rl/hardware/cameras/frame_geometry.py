"""Frames and their geometry: what a camera source delivers, its pinhole intrinsics, and the crop +
resize to the policy's size that keeps the intrinsics in step."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


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
    native: np.ndarray | None = None
    """The colour image as the device gave it, before crop and resize (uint8 RGB at the native size)."""


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
