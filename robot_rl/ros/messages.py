"""Fast, validated conversion between numpy/bytes and rclpy messages.

Performance note: generated rclpy message classes store ``uint8[]`` fields
as ``array.array('B')``. Assigning anything else goes through the generated
setter, which rebuilds the array element by element from lists/ndarrays
(~100x slower for a 128x128 RGB frame) and, with ``ROS_PYTHON_CHECK_FIELDS=1``,
also validates every element of bytes/lists (~300x slower). Everything here
therefore builds an ``array.array('B')`` with one ``frombytes`` memcpy and
assigns that, which the setter accepts as-is in every mode.
On the receiving side ``msg.data`` is an ``array.array`` exposing the buffer
protocol, so views are zero-copy.
"""

from __future__ import annotations

import array
from typing import Any

import numpy as np
from builtin_interfaces.msg import Time
from sensor_msgs.msg import Image
from std_msgs.msg import Header, UInt8MultiArray

__all__ = [
    "IMAGE_ENCODINGS",
    "bytes_to_uint8_multiarray",
    "image_to_msg",
    "msg_to_image",
    "ns_to_stamp",
    "stamp_to_ns",
    "uint8_multiarray_view",
]

# encoding -> channels (all 8-bit unsigned)
IMAGE_ENCODINGS: dict[str, int] = {"rgb8": 3, "bgr8": 3, "mono8": 1}

_NS_PER_S = 1_000_000_000
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


# --------------------------------------------------------------------------
# time
# --------------------------------------------------------------------------


def stamp_to_ns(stamp: Any) -> int:
    """builtin_interfaces/Time (or anything with sec/nanosec) -> int ns."""
    return int(stamp.sec) * _NS_PER_S + int(stamp.nanosec)


def ns_to_stamp(ns: int) -> Time:
    """int ns -> builtin_interfaces/Time (nanosec always in [0, 1e9))."""
    sec, nanosec = divmod(int(ns), _NS_PER_S)
    if not _INT32_MIN <= sec <= _INT32_MAX:
        raise ValueError(f"timestamp {ns} ns does not fit builtin_interfaces/Time (int32 sec)")
    return Time(sec=sec, nanosec=nanosec)


def _to_stamp(stamp: Any) -> Time:
    if stamp is None:
        return Time()
    if isinstance(stamp, Time):
        return stamp
    if isinstance(stamp, (int, np.integer)) and not isinstance(stamp, bool):
        return ns_to_stamp(int(stamp))
    if hasattr(stamp, "sec") and hasattr(stamp, "nanosec"):
        return Time(sec=int(stamp.sec), nanosec=int(stamp.nanosec))
    if hasattr(stamp, "to_msg"):  # rclpy.time.Time
        return stamp.to_msg()
    raise TypeError(f"cannot interpret {type(stamp).__name__} as a timestamp")


# --------------------------------------------------------------------------
# raw bytes <-> UInt8MultiArray
# --------------------------------------------------------------------------


def _byte_view(data: Any) -> memoryview:
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        if not mv.c_contiguous:
            raise ValueError("buffer must be C-contiguous")
        mv = mv.cast("B")
    return mv


def _byte_array(data: Any) -> array.array:
    buf = array.array("B")
    buf.frombytes(_byte_view(data))
    return buf


def bytes_to_uint8_multiarray(data: Any) -> UInt8MultiArray:
    """Wrap any contiguous bytes-like (bytes, bytearray, memoryview, ndarray)
    in a ``std_msgs/UInt8MultiArray`` with a single memcpy. ``layout`` is left
    empty (the payload is self-describing)."""
    msg = UInt8MultiArray()
    msg.data = _byte_array(data)
    return msg


def uint8_multiarray_view(msg: UInt8MultiArray) -> memoryview:
    """Zero-copy byte view of ``msg.data`` (suitable for ``codec.decode``).

    While the view is alive the underlying array cannot be resized."""
    data = msg.data
    if isinstance(data, array.array) and data.typecode == "B":
        return memoryview(data)
    return memoryview(bytes(data))  # pragma: no cover - rclpy always gives array('B')


# --------------------------------------------------------------------------
# images
# --------------------------------------------------------------------------


def image_to_msg(
    img: np.ndarray,
    stamp: Any = None,
    frame_id: str = "",
    encoding: str = "rgb8",
) -> Image:
    """numpy image -> ``sensor_msgs/Image`` (unpadded rows, one memcpy).

    ``img`` must be uint8 with shape (H, W, 3) for rgb8/bgr8 or (H, W) /
    (H, W, 1) for mono8. Channel order is *not* converted: pass the encoding
    that describes ``img``. ``stamp`` may be a builtin_interfaces Time, an
    rclpy Time, int nanoseconds or None (zero).
    """
    channels = IMAGE_ENCODINGS.get(encoding)
    if channels is None:
        raise ValueError(
            f"unsupported encoding {encoding!r}; expected one of {sorted(IMAGE_ENCODINGS)}"
        )
    arr = np.asarray(img)
    if arr.dtype != np.uint8:
        raise ValueError(f"image dtype must be uint8, got {arr.dtype}")
    if channels == 1 and arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    expected_ndim = 2 if channels == 1 else 3
    if arr.ndim != expected_ndim or (channels != 1 and arr.shape[2] != channels):
        want = "(H, W)" if channels == 1 else f"(H, W, {channels})"
        raise ValueError(f"{encoding} image must have shape {want}, got {arr.shape}")
    if not isinstance(frame_id, str):
        raise TypeError(f"frame_id must be str, got {type(frame_id).__name__}")
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    height, width = int(arr.shape[0]), int(arr.shape[1])

    msg = Image()
    msg.header = Header(stamp=_to_stamp(stamp), frame_id=frame_id)
    msg.height = height
    msg.width = width
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = width * channels
    msg.data = _byte_array(arr)
    return msg


def msg_to_image(msg: Image, *, copy: bool = False) -> np.ndarray:
    """``sensor_msgs/Image`` -> numpy array (H, W, 3) or (H, W) for mono8.

    Honours ``step`` (row padding). By default returns a zero-copy view onto
    ``msg.data`` (non-contiguous if rows are padded); ``copy=True`` returns
    a fresh C-contiguous array. Raises ``ValueError`` for unsupported
    encodings or inconsistent height/width/step/data length.
    """
    encoding = msg.encoding
    channels = IMAGE_ENCODINGS.get(encoding)
    if channels is None:
        raise ValueError(
            f"unsupported image encoding {encoding!r}; expected one of {sorted(IMAGE_ENCODINGS)}"
        )
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    row_bytes = width * channels
    if step < row_bytes:
        raise ValueError(
            f"image step {step} < width {width} x {channels} channel(s) = {row_bytes} bytes"
        )
    buf = np.frombuffer(msg.data, dtype=np.uint8)
    if buf.size != height * step:
        raise ValueError(
            f"image data has {buf.size} bytes, expected height {height} x step {step} "
            f"= {height * step}"
        )
    rows = buf.reshape(height, step)
    if step != row_bytes:
        rows = rows[:, :row_bytes]
    out = rows.reshape(height, width, channels) if channels != 1 else rows
    return np.array(out, order="C") if copy else out
