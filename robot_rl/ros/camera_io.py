"""Camera frames' side messages: depth images and CameraInfo, for the real camera node and the
simulators (colour images go through `robot_rl.ros.messages.image_to_msg`)."""

from __future__ import annotations

import array
import sys

from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import Header

from robot_rl.hardware.cameras.frame_geometry import Intrinsics


def depth_to_msg(depth, stamp, frame_id: str) -> Image:
    """uint16 (H, W) -> sensor_msgs/Image 16UC1 with one memcpy (see robot_rl.ros.messages)."""
    if depth.dtype.kind != "u" or depth.itemsize != 2 or depth.ndim != 2:
        raise ValueError(f"depth must be uint16 (H, W), got {depth.dtype} {depth.shape}")
    if not depth.flags.c_contiguous:
        depth = depth.copy()
    msg = Image()
    msg.header = Header(stamp=stamp, frame_id=frame_id)
    msg.height, msg.width = int(depth.shape[0]), int(depth.shape[1])
    msg.encoding = "16UC1"
    msg.is_bigendian = int(depth.dtype.byteorder == ">" or (depth.dtype.byteorder == "=" and sys.byteorder == "big"))
    msg.step = msg.width * 2
    data = array.array("B")
    data.frombytes(memoryview(depth).cast("B"))
    msg.data = data
    return msg


def camera_info_msg(intrinsics: Intrinsics, frame_id: str) -> CameraInfo:
    """CameraInfo of a (rectification-free) pinhole camera; K/P stay zero when uncalibrated."""
    info = CameraInfo(width=intrinsics.width, height=intrinsics.height,
                      distortion_model=intrinsics.distortion_model)
    info.header.frame_id = frame_id
    info.d = [float(c) for c in intrinsics.coeffs]
    i = intrinsics
    info.k = [i.fx, 0.0, i.cx, 0.0, i.fy, i.cy, 0.0, 0.0, 1.0 if i.calibrated else 0.0]
    info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    info.p = [i.fx, 0.0, i.cx, 0.0, 0.0, i.fy, i.cy, 0.0, 0.0, 0.0, 1.0 if i.calibrated else 0.0, 0.0]
    return info
