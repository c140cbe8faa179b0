"""The reward node's messages: camera images into the reward stream's frames, and the topics whose
events start a new episode. The stream itself (`robot_rl.rewards.online.RewardStream`) sees no messages."""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_rl.rewards.online import RewardStream
from robot_rl.rewards.scorer_input import FrameRejected
from robot_rl.ros.messages import stamp_to_ns

__all__ = ["EPISODE_EVENTS", "decode_image", "feed_image"]

EPISODE_EVENTS = {"teleop/event": ("reset", "rerecord"), "episode/event": ("start",)}
"""Events (topic -> values) that start a new episode. teleop/event is a String (from a person, now);
episode/event a std_msgs/Header: frame_id the event, stamp the first observation of the new episode."""


def decode_image(msg: Any) -> tuple[int, np.ndarray]:
    """(stamp ns, uint8 (H, W, 3) copy) of an rgb8 image message (anything with ``header.stamp``,
    ``encoding``, ``height``, ``width``, ``step`` and ``data``, as sensor_msgs/Image has).

    Raises:
        FrameRejected: reason ``stamp`` (zero or negative stamp), ``encoding`` (not rgb8) or
            ``layout`` (height, width, step and data disagree).
    """
    try:
        stamp = stamp_to_ns(msg.header.stamp)
    except (AttributeError, TypeError, ValueError) as exc:
        raise FrameRejected("stamp", f"no usable header stamp: {exc}") from None
    if stamp <= 0:
        raise FrameRejected("stamp", "unstamped image (header.stamp is zero): rewards are matched by stamp")
    encoding = getattr(msg, "encoding", None)
    if encoding != "rgb8":
        raise FrameRejected("encoding", f"encoding {encoding!r}, expected 'rgb8'")
    try:
        height, width, step = int(msg.height), int(msg.width), int(msg.step)
        buf = np.frombuffer(msg.data, np.uint8)
    except (AttributeError, TypeError, ValueError) as exc:
        raise FrameRejected("layout", f"unreadable image fields: {exc}") from None
    if height <= 0 or width <= 0:
        raise FrameRejected("layout", f"empty image {width}x{height}")
    if step < 3 * width:
        raise FrameRejected("layout", f"step {step} < 3 x width {width}")
    if buf.size != height * step:
        raise FrameRejected("layout", f"{buf.size} data bytes, expected height {height} x step {step} = "
                                      f"{height * step}")
    rows = buf.reshape(height, step)[:, :3 * width]
    return stamp, np.ascontiguousarray(rows).reshape(height, width, 3)


def feed_image(stream: RewardStream, camera: str, msg: Any) -> str:
    """An image message of `camera` into the stream: decoded, then checked, paired and (when a set
    completes) handed on. Returns what became of it (`RewardStream.on_frame`'s status)."""
    try:
        stamp, frame = decode_image(msg)
    except FrameRejected as exc:
        return stream.on_rejected(camera, exc)
    return stream.on_frame(camera, stamp, frame)
