"""Unit tests for robot_rl.ros.messages (message construction/conversion only:
no rclpy.init, no DDS)."""

from __future__ import annotations

import array

import numpy as np
import pytest

pytest.importorskip("rclpy")

from builtin_interfaces.msg import Time  # noqa: E402
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from std_msgs.msg import UInt8MultiArray  # noqa: E402

from robot_rl.ros.messages import (  # noqa: E402
    bytes_to_uint8_multiarray,
    image_to_msg,
    msg_to_image,
    ns_to_stamp,
    stamp_to_ns,
    uint8_multiarray_view,
)
from robot_rl.transport import codec  # noqa: E402


def _img(h=6, w=5, c=3, seed=0):
    rng = np.random.default_rng(seed)
    shape = (h, w, c) if c else (h, w)
    return rng.integers(0, 256, shape, dtype=np.uint8)


# --------------------------------------------------------------------------
# UInt8MultiArray
# --------------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [
    bytes, bytearray, memoryview,
    lambda b: np.frombuffer(b, dtype=np.uint8).copy(),
    lambda b: array.array("B", b),
])
def test_uint8_multiarray_round_trip(wrap):
    raw = bytes(range(256)) * 3
    msg = bytes_to_uint8_multiarray(wrap(raw))
    assert isinstance(msg, UInt8MultiArray)
    assert isinstance(msg.data, array.array) and msg.data.typecode == "B"
    view = uint8_multiarray_view(msg)
    assert isinstance(view, memoryview)
    assert view.nbytes == len(raw) and bytes(view) == raw


def test_uint8_multiarray_from_multidim_and_wide_arrays():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    msg = bytes_to_uint8_multiarray(a)
    assert bytes(uint8_multiarray_view(msg)) == a.tobytes()
    b = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    assert bytes(uint8_multiarray_view(bytes_to_uint8_multiarray(b))) == b.tobytes()


def test_uint8_multiarray_non_contiguous_rejected():
    with pytest.raises(ValueError):
        bytes_to_uint8_multiarray(np.zeros((4, 4), np.uint16)[:, ::2])


def test_uint8_multiarray_empty():
    msg = bytes_to_uint8_multiarray(b"")
    assert len(msg.data) == 0 and bytes(uint8_multiarray_view(msg)) == b""


def test_uint8_multiarray_copies_input_and_view_is_zero_copy():
    src = bytearray(b"abcdef")
    msg = bytes_to_uint8_multiarray(src)
    src[0] = ord("z")
    assert bytes(uint8_multiarray_view(msg)) == b"abcdef"
    view = uint8_multiarray_view(msg)
    msg.data[1] = ord("Q")  # the view aliases msg.data
    assert bytes(view) == b"aQcdef"


def test_codec_payload_through_uint8_multiarray_and_cdr():
    arrays = {"obs": np.random.default_rng(0).standard_normal((4, 7)).astype(np.float32),
              "done": np.array([False, True, False, False])}
    msg = bytes_to_uint8_multiarray(codec.encode("transitions", arrays, {"seq": 3}))
    # through the real rclpy C conversion + CDR (what a publish/take does)
    back = deserialize_message(serialize_message(msg), UInt8MultiArray)
    p = codec.decode(uint8_multiarray_view(back), expect_kind="transitions")
    assert p.meta == {"seq": 3}
    for k, v in arrays.items():
        np.testing.assert_array_equal(p.arrays[k], v)


# --------------------------------------------------------------------------
# images
# --------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8"])
def test_image_round_trip_color(encoding):
    img = _img(7, 9)
    msg = image_to_msg(img, 1_234_567_890_123, "cam0_optical", encoding=encoding)
    assert isinstance(msg, Image)
    assert (msg.height, msg.width, msg.step) == (7, 9, 27)
    assert msg.encoding == encoding and msg.is_bigendian == 0
    assert msg.header.frame_id == "cam0_optical"
    assert stamp_to_ns(msg.header.stamp) == 1_234_567_890_123
    assert isinstance(msg.data, array.array) and len(msg.data) == 7 * 27
    out = msg_to_image(msg)
    assert out.shape == (7, 9, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out, img)


def test_image_round_trip_128_through_cdr():
    img = _img(128, 128)
    msg = image_to_msg(img, ns_to_stamp(5), "cam")
    back = deserialize_message(serialize_message(msg), Image)
    np.testing.assert_array_equal(msg_to_image(back), img)
    assert stamp_to_ns(back.header.stamp) == 5


@pytest.mark.parametrize("shape", [(4, 6), (4, 6, 1)])
def test_image_round_trip_mono8(shape):
    img = _img(4, 6, 0).reshape(shape)
    msg = image_to_msg(img, encoding="mono8")
    assert (msg.height, msg.width, msg.step, msg.encoding) == (4, 6, 6, "mono8")
    out = msg_to_image(msg)
    assert out.shape == (4, 6)
    np.testing.assert_array_equal(out, img.reshape(4, 6))


def test_image_non_contiguous_input_is_made_contiguous():
    big = _img(10, 12)
    for view in (big[::2, ::3], big[:, ::-1], big[2:8, 1:5], np.asfortranarray(big)):
        np.testing.assert_array_equal(msg_to_image(image_to_msg(view)), view)


def test_image_stamp_variants():
    img = _img(2, 2)
    assert stamp_to_ns(image_to_msg(img).header.stamp) == 0
    assert stamp_to_ns(image_to_msg(img, Time(sec=3, nanosec=4)).header.stamp) == 3_000_000_004
    assert stamp_to_ns(image_to_msg(img, np.int64(7)).header.stamp) == 7
    from rclpy.time import Time as RclTime

    assert stamp_to_ns(image_to_msg(img, RclTime(nanoseconds=11)).header.stamp) == 11
    with pytest.raises(TypeError):
        image_to_msg(img, "yesterday")
    with pytest.raises(TypeError):
        image_to_msg(img, 0, frame_id=None)


@pytest.mark.parametrize("pad", [1, 3, 13])
@pytest.mark.parametrize("encoding,c", [("rgb8", 3), ("bgr8", 3), ("mono8", 1)])
def test_msg_to_image_honours_step_padding(pad, encoding, c):
    h, w = 5, 7
    img = _img(h, w, c if c > 1 else 0, seed=pad)
    step = w * c + pad
    padded = np.full((h, step), 0xEE, dtype=np.uint8)
    padded[:, : w * c] = img.reshape(h, w * c)
    msg = Image(height=h, width=w, encoding=encoding, step=step)
    msg.data = array.array("B", padded.tobytes())
    out = msg_to_image(msg)
    np.testing.assert_array_equal(out, img)
    copied = msg_to_image(msg, copy=True)
    assert copied.flags.c_contiguous and copied.flags.owndata
    np.testing.assert_array_equal(copied, img)


def test_msg_to_image_default_is_a_view():
    msg = image_to_msg(_img(3, 3))
    out = msg_to_image(msg)
    msg.data[0] = 255 - msg.data[0]
    assert out[0, 0, 0] == msg.data[0]


@pytest.mark.parametrize("encoding", ["rgba8", "bgra8", "mono16", "16UC1", "32FC1", "", "RGB8"])
def test_msg_to_image_rejects_unsupported_encodings(encoding):
    msg = image_to_msg(_img(2, 2))
    msg.encoding = encoding
    with pytest.raises(ValueError, match="encoding"):
        msg_to_image(msg)


def _raw_msg(h, w, step, n, encoding="rgb8"):
    msg = Image(height=h, width=w, encoding=encoding, step=step)
    msg.data = array.array("B", bytes(n))
    return msg


@pytest.mark.parametrize("h,w,step,n", [
    (4, 4, 12, 47),  # data one byte short
    (4, 4, 12, 49),  # one byte long
    (4, 4, 12, 0),  # empty data
    (4, 4, 11, 44),  # step smaller than a row
    (4, 4, 0, 0),  # zero step
    (4, 5, 12, 48),  # width inconsistent with step
    (5, 4, 12, 48),  # height inconsistent with data
])
def test_msg_to_image_rejects_inconsistent_sizes(h, w, step, n):
    with pytest.raises(ValueError, match="step|bytes"):
        msg_to_image(_raw_msg(h, w, step, n))


def test_msg_to_image_zero_sized_image():
    out = msg_to_image(_raw_msg(0, 4, 12, 0))
    assert out.shape == (0, 4, 3)


@pytest.mark.parametrize("img,encoding", [
    (np.zeros((4, 4, 3), np.float32), "rgb8"),
    (np.zeros((4, 4, 3), np.uint16), "rgb8"),
    (np.zeros((4, 4), np.uint8), "rgb8"),
    (np.zeros((4, 4, 4), np.uint8), "rgb8"),
    (np.zeros((4, 4, 1), np.uint8), "bgr8"),
    (np.zeros((4, 4, 3), np.uint8), "mono8"),
    (np.zeros((4,), np.uint8), "mono8"),
    (np.zeros((4, 4, 3), np.uint8), "rgba8"),
    (np.zeros((4, 4, 3), np.uint8), "16UC1"),
])
def test_image_to_msg_rejects_bad_input(img, encoding):
    with pytest.raises(ValueError):
        image_to_msg(img, encoding=encoding)


# --------------------------------------------------------------------------
# stamps
# --------------------------------------------------------------------------


@pytest.mark.parametrize("ns", [0, 1, 999_999_999, 1_000_000_000, 1_700_000_000_123_456_789,
                                -1, -1_500_000_000, (2**31 - 1) * 10**9 + 999_999_999,
                                -(2**31) * 10**9])
def test_stamp_round_trip(ns):
    t = ns_to_stamp(ns)
    assert isinstance(t, Time)
    assert 0 <= t.nanosec < 1_000_000_000
    assert stamp_to_ns(t) == ns


def test_ns_to_stamp_components_and_overflow():
    t = ns_to_stamp(3_000_000_004)
    assert (t.sec, t.nanosec) == (3, 4)
    with pytest.raises(ValueError):
        ns_to_stamp(2**31 * 10**9)
    with pytest.raises(ValueError):
        ns_to_stamp(-(2**31) * 10**9 - 1)


def test_stamp_to_ns_accepts_duck_typed_stamps():
    class S:
        sec = 2
        nanosec = 5

    assert stamp_to_ns(S()) == 2_000_000_005
