"""Unit tests for robot_rl.transport.codec (pure Python/numpy; torch only for the
state_dict helpers). No DDS, no rclpy."""

from __future__ import annotations

import array
import dataclasses
import json
import struct
import sys
import zlib

import numpy as np
import pytest

from robot_rl.transport import codec
from robot_rl.transport.codec import (
    CODEC_VERSION,
    MAGIC,
    PREFIX_SIZE,
    Payload,
    PayloadError,
    arrays_to_state_dict,
    decode,
    encode,
    frame_body,
    state_dict_to_arrays,
)

DTYPES = [
    np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32,
    np.uint64, np.int64, np.float16, np.float32, np.float64, np.complex64,
]
SHAPES = [(), (0,), (1,), (7,), (2, 3), (0, 5), (2, 0, 3), (3, 4, 5)]


def _sample(dtype, shape, rng):
    n = int(np.prod(shape, dtype=np.int64))
    dt = np.dtype(dtype)
    if dt == np.bool_:
        a = rng.random(n) < 0.5
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    elif dt.kind == "c":
        a = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
    else:
        a = rng.standard_normal(n).astype(dt)
    return a.reshape(shape)


def _body_of(data: bytes) -> bytes:
    return data[PREFIX_SIZE:]


def _st_body(header: dict, data: bytes = b"", *, pad: bool = True) -> bytes:
    """Hand-build a safetensors body (header JSON + data)."""
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def _meta(kind="k", meta=None):
    return {"rrl": json.dumps({"kind": kind, "meta": meta or {}})}


def _reason(data, **kw) -> str:
    with pytest.raises(PayloadError) as ei:
        decode(data, **kw)
    return ei.value.reason


# --------------------------------------------------------------------------
# round trips
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_round_trip_all_dtypes_and_shapes(dtype):
    rng = np.random.default_rng(0)
    arrays = {f"a{i}": _sample(dtype, shape, rng) for i, shape in enumerate(SHAPES)}
    p = decode(encode("test", arrays))
    assert p.kind == "test"
    assert p.meta == {}
    assert set(p.arrays) == set(arrays)
    for name, a in arrays.items():
        out = p.arrays[name]
        assert out.dtype == a.dtype, name
        assert out.shape == a.shape, name
        np.testing.assert_array_equal(out, a)


def test_round_trip_mixed_payload_and_no_arrays():
    arrays = {
        "img": np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3),
        "done": np.array([True, False]),
        "seq": np.array([1, 2], dtype=np.int64),
        "x": np.float32(1.5),  # numpy scalar -> 0-d array
        "lst": [1.0, 2.0],  # anything np.asarray accepts
    }
    p = decode(encode("batch", arrays, {"n": 2}))
    assert p.arrays["x"].shape == () and p.arrays["x"].dtype == np.float32
    assert p.arrays["lst"].dtype == np.float64
    np.testing.assert_array_equal(p.arrays["img"], arrays["img"])
    empty = decode(encode("ping", {}))
    assert empty.kind == "ping" and empty.arrays == {} and empty.meta == {}


def test_non_contiguous_fortran_and_big_endian_inputs():
    base = np.arange(60, dtype=np.float64).reshape(6, 10)
    arrays = {
        "strided": base[::2, ::3],
        "transposed": base.T,
        "fortran": np.asfortranarray(base),
        "reversed": base[:, ::-1],
        "be": np.arange(5, dtype=">i4"),
        "be_f": np.linspace(0, 1, 4).astype(">f8"),
    }
    p = decode(encode("t", arrays))
    for name, a in arrays.items():
        np.testing.assert_array_equal(p.arrays[name], a)
        assert p.arrays[name].flags.c_contiguous
        assert p.arrays[name].dtype.isnative


def test_decoded_arrays_are_owned_and_writeable():
    src = np.arange(10, dtype=np.float32)
    orig = encode("t", {"a": src})
    src[1] = -1  # encode copied the input
    assert decode(orig).arrays["a"][1] == 1.0
    data = bytearray(orig)
    p = decode(data)
    assert p.arrays["a"].flags.writeable
    p.arrays["a"][0] = 42.0  # does not touch the wire buffer ...
    assert decode(bytes(data)).arrays["a"][0] == 0.0
    data[:] = b"\x00" * len(data)  # ... and the wire buffer does not alias the arrays
    assert p.arrays["a"][-1] == 9.0


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview,
                                  lambda b: array.array("B", b),
                                  lambda b: np.frombuffer(b, dtype=np.uint8)])
def test_decode_accepts_bytes_like(wrap):
    data = encode("t", {"a": np.arange(3)}, {"x": 1})
    p = decode(wrap(data))
    assert p.meta == {"x": 1}
    np.testing.assert_array_equal(p.arrays["a"], np.arange(3))


def test_meta_round_trip():
    meta = {
        "actor_id": "arm-0",
        "seq": 12345678901234,
        "ratio": 0.25,
        "neg": -3,
        "flag": True,
        "none": None,
        "unicode": "grüße ✓",
        "nested": {"a": [1, 2, {"b": "c"}], "empty": {}},
        "list": [1.5, "x", False],
    }
    p = decode(encode("k", {}, meta))
    assert p.meta == meta


def test_meta_numpy_values_are_converted():
    p = decode(encode("k", {}, {"i": np.int64(3), "f": np.float32(0.5), "a": np.arange(3)}))
    assert p.meta == {"i": 3, "f": 0.5, "a": [0, 1, 2]}
    assert type(p.meta["i"]) is int


@pytest.mark.parametrize("meta", [
    {"nan": float("nan")},
    {"inf": float("inf")},
    {1: "int key"},
    {"obj": object()},
    {"set": {1, 2}},
    {"bytes": b"raw"},
])
def test_bad_meta_rejected_on_encode(meta):
    with pytest.raises(PayloadError) as ei:
        encode("k", {}, meta)
    assert ei.value.reason == "bad_meta"


@pytest.mark.parametrize("kind", ["", None, 3, b"k"])
def test_bad_kind_rejected_on_encode(kind):
    with pytest.raises(PayloadError) as ei:
        encode(kind, {})
    assert ei.value.reason == "bad_meta"


@pytest.mark.parametrize("value", [
    np.array(["a", "b"]),
    np.array([object()], dtype=object),
    np.array([1 + 2j], dtype=np.complex128),
    np.array(["2020-01-01"], dtype="datetime64[D]"),
    np.zeros(2, dtype=[("a", "i4")]),
])
def test_unsupported_dtypes_rejected_on_encode(value):
    with pytest.raises(PayloadError) as ei:
        encode("k", {"a": value})
    assert ei.value.reason == "bad_array"


@pytest.mark.parametrize("name", ["", "__metadata__", 5, None])
def test_bad_array_names_rejected_on_encode(name):
    with pytest.raises(PayloadError) as ei:
        encode("k", {name: np.zeros(1)})
    assert ei.value.reason == "bad_array"


def test_expect_kind_and_require():
    data = encode("transitions", {"obs": np.zeros(2), "act": np.zeros(1)})
    assert decode(data, expect_kind="transitions", require=("obs", "act")).kind == "transitions"
    assert decode(data, require="obs").kind == "transitions"  # single name as str
    assert _reason(data, expect_kind="policy") == "wrong_kind"
    assert _reason(data, require=("obs", "reward")) == "missing_field"
    with pytest.raises(PayloadError, match="reward"):
        decode(data, require=["reward"])


def test_payload_is_frozen_with_compact_repr():
    p = decode(encode("k", {"big": np.zeros((1000, 1000), np.float32)}, {"a": 1}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.kind = "other"  # type: ignore[misc]
    r = repr(p)
    assert "big:float32[1000, 1000]" in r and len(r) < 200
    assert isinstance(p, Payload)


def test_payload_error_is_value_error_with_reason():
    with pytest.raises(ValueError) as ei:
        decode(b"")
    assert isinstance(ei.value, PayloadError)
    assert ei.value.reason == "too_short"
    assert "too_short" in str(ei.value)


def test_wire_prefix_layout():
    data = encode("k", {"a": np.arange(4, dtype=np.int32)})
    magic, version, crc = struct.unpack_from("<4sHI", data, 0)
    assert magic == MAGIC == b"RRLP"
    assert version == CODEC_VERSION == 1
    assert crc == zlib.crc32(data[PREFIX_SIZE:])
    assert PREFIX_SIZE == 10
    # the body is a plain safetensors blob
    import safetensors.numpy as stnp

    np.testing.assert_array_equal(stnp.load(data[PREFIX_SIZE:])["a"], np.arange(4))


# --------------------------------------------------------------------------
# corruption
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good() -> bytes:
    rng = np.random.default_rng(1)
    return encode(
        "transitions",
        {"obs": rng.standard_normal((4, 5)).astype(np.float32),
         "done": np.array([True, False, False, True]),
         "img": rng.integers(0, 256, (2, 8, 8, 3), dtype=np.uint8)},
        {"actor_id": "a", "seq": 7},
    )


@pytest.mark.parametrize("bad", ["not bytes", 12, None, 3.5, ["R", "R"]])
def test_non_buffer_input(bad):
    assert _reason(bad) == "bad_input"


def test_non_contiguous_buffer_input():
    assert _reason(np.zeros((4, 4), np.uint8)[:, ::2]) == "bad_input"


def test_too_short(good):
    for n in range(PREFIX_SIZE):
        assert _reason(good[:n]) == "too_short", n


def test_truncation_everywhere(good):
    # every truncation point: short prefix -> too_short, otherwise the body
    # CRC no longer matches
    for n in range(len(good)):
        expected = "too_short" if n < PREFIX_SIZE else "bad_crc"
        assert _reason(good[:n]) == expected, n


def test_trailing_garbage(good):
    assert _reason(good + b"\x00") == "bad_crc"


def test_bad_magic(good):
    for magic in (b"RRLQ", b"\x00\x00\x00\x00", b"rrlp", b"PLRR"):
        assert _reason(magic + good[4:]) == "bad_magic"


@pytest.mark.parametrize("version", [0, 3, 255, 65535])
def test_bad_version(good, version):
    data = good[:4] + struct.pack("<H", version) + good[6:]
    assert _reason(data) == "bad_version"


def test_flipped_bits_in_body_are_bad_crc(good):
    rng = np.random.default_rng(2)
    positions = list(range(PREFIX_SIZE, PREFIX_SIZE + 64)) + list(
        rng.integers(PREFIX_SIZE, len(good), 200))
    for pos in positions:
        for bit in (0, 3, 7):
            data = bytearray(good)
            data[pos] ^= 1 << bit
            assert _reason(data) == "bad_crc", (pos, bit)


def test_flipped_bits_in_crc_field(good):
    for pos in range(6, 10):
        data = bytearray(good)
        data[pos] ^= 0x10
        assert _reason(data) == "bad_crc"


# ---- bodies with a valid CRC but invalid content (exercise the parser)


def test_body_too_short_or_bad_header_len():
    assert _reason(frame_body(b"")) == "bad_body"
    assert _reason(frame_body(b"\x01\x02\x03")) == "bad_body"
    assert _reason(frame_body(struct.pack("<Q", 0))) == "bad_body"
    assert _reason(frame_body(struct.pack("<Q", 1000) + b"{}")) == "bad_body"
    assert _reason(frame_body(struct.pack("<Q", 2**63) + b"{}")) == "bad_body"


@pytest.mark.parametrize("header", [b"not json", b"\xff\xfe{}", b"[1, 2]", b'"str"', b"[" * 5000])
def test_body_header_not_a_json_object(header):
    assert _reason(frame_body(struct.pack("<Q", len(header)) + header)) == "bad_body"


@pytest.mark.parametrize("st_meta", [
    None,  # no __metadata__ at all
    {"other": "x"},
    {"rrl": "not json"},
    {"rrl": json.dumps([1, 2])},
    {"rrl": json.dumps({"meta": {}})},  # no kind
    {"rrl": json.dumps({"kind": "", "meta": {}})},
    {"rrl": json.dumps({"kind": 5, "meta": {}})},
    {"rrl": json.dumps({"kind": "k", "meta": [1]})},
    {"rrl": json.dumps({"kind": "k"})},  # no meta
])
def test_body_bad_metadata(st_meta):
    header = {} if st_meta is None else {"__metadata__": st_meta}
    assert _reason(frame_body(_st_body(header))) == "bad_meta"


def test_body_metadata_value_not_str():
    header = {"__metadata__": {"rrl": {"kind": "k", "meta": {}}}}
    assert _reason(frame_body(_st_body(header))) == "bad_meta"


def _one(entry: dict, data: bytes) -> bytes:
    return frame_body(_st_body({"__metadata__": _meta(), "a": entry}, data))


def test_hand_built_valid_body_decodes():
    p = decode(_one({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    np.array([1, 2], np.float32).tobytes()))
    np.testing.assert_array_equal(p.arrays["a"], [1, 2])


@pytest.mark.parametrize("entry,data", [
    # declared size does not match the shape x dtype
    ({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}, b"\x00" * 8),
    ({"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}, b"\x00" * 12),
    ({"dtype": "I64", "shape": [2, 2], "data_offsets": [0, 16]}, b"\x00" * 16),
    # offsets outside the data section / reversed / malformed
    ({"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, b"\x00" * 2),
    ({"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}, b"\x00" * 4),
    ({"dtype": "U8", "shape": [4], "data_offsets": [-1, 3]}, b"\x00" * 4),
    ({"dtype": "U8", "shape": [4], "data_offsets": [0]}, b"\x00" * 4),
    ({"dtype": "U8", "shape": [4], "data_offsets": [0.0, 4.0]}, b"\x00" * 4),
    ({"dtype": "U8", "shape": [4], "data_offsets": "0-4"}, b"\x00" * 4),
    # data section longer than the arrays (hole / trailing bytes)
    ({"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, b"\x00" * 6),
    ({"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}, b"\x00" * 6),
    # bad dtype / shape
    ({"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}, b"\x00" * 4),
    ({"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}, b"\x00" * 4),
    ({"dtype": "f32", "shape": [1], "data_offsets": [0, 4]}, b"\x00" * 4),
    ({"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}, b"\x00" * 4),
    ({"dtype": "U8", "shape": [-4], "data_offsets": [0, 4]}, b"\x00" * 4),
    ({"dtype": "U8", "shape": [True, 4], "data_offsets": [0, 4]}, b"\x00" * 4),
    ({"dtype": "U8", "shape": 4, "data_offsets": [0, 4]}, b"\x00" * 4),
    ({"dtype": "U8", "shape": [2.0, 2], "data_offsets": [0, 4]}, b"\x00" * 4),
    # malformed entries
    ({"dtype": "U8", "shape": [4]}, b"\x00" * 4),
    ({"dtype": "U8", "shape": [4], "data_offsets": [0, 4], "extra": 1}, b"\x00" * 4),
])
def test_body_bad_array_entries(entry, data):
    assert _reason(_one(entry, data)) == "bad_array"


def test_body_entry_not_an_object():
    body = _st_body({"__metadata__": _meta(), "a": [1, 2, 3]})
    assert _reason(frame_body(body)) == "bad_array"


def test_body_overlapping_arrays():
    body = _st_body({
        "__metadata__": _meta(),
        "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
        "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]},
    }, b"\x00" * 6)
    assert _reason(frame_body(body)) == "bad_array"


def test_body_huge_declared_shape():
    body = _st_body({
        "__metadata__": _meta(),
        "a": {"dtype": "F64", "shape": [2**40, 2**40], "data_offsets": [0, 8]},
    }, b"\x00" * 8)
    assert _reason(frame_body(body)) == "bad_array"


# ---- fuzz


def test_random_bytes_fuzz_only_payload_error(good):
    """~2000 malformed inputs (fixed seed): random bytes, random bodies behind a
    valid prefix + CRC, and mutated valid bodies re-framed with a correct CRC.
    decode() must raise PayloadError and nothing else."""
    rng = np.random.default_rng(12345)
    body = _body_of(good)
    prefix_ok = good[:6]
    inputs: list[bytes] = []
    for _ in range(500):  # pure noise, sometimes with the right magic/version
        n = int(rng.integers(0, 300))
        noise = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        inputs.append(noise)
        inputs.append(prefix_ok + noise)
    for _ in range(300):  # random bodies with a *valid* CRC -> body parser
        n = int(rng.integers(0, 300))
        inputs.append(frame_body(rng.integers(0, 256, n, dtype=np.uint8).tobytes()))
    header_end = 8 + struct.unpack_from("<Q", body)[0]
    for i in range(700):  # mutated valid bodies, CRC recomputed
        b = bytearray(body)
        for _ in range(int(rng.integers(1, 6))):
            op = rng.integers(0, 3)
            # half of the mutations target the JSON header (printable bytes)
            limit = min(header_end, len(b)) if i % 2 else len(b)
            pos = int(rng.integers(0, max(limit, 1)))
            if op == 0:
                b[pos] = int(rng.integers(32, 127) if i % 2 else rng.integers(0, 256))
            elif op == 1:
                del b[pos:pos + int(rng.integers(1, 16))]
            else:
                b[pos:pos] = rng.integers(0, 256, int(rng.integers(1, 8)), dtype=np.uint8).tobytes()
        inputs.append(frame_body(bytes(b)))
    assert len(inputs) >= 2000
    reasons: dict[str, int] = {}
    for data in inputs:
        try:
            decode(data)
        except PayloadError as exc:
            reasons[exc.reason] = reasons.get(exc.reason, 0) + 1
        # anything else propagates and fails the test; a successful decode of a
        # mutated body is acceptable (e.g. a flipped byte inside array data)
    assert {"too_short", "bad_magic", "bad_crc", "bad_body", "bad_array", "bad_meta"} <= set(reasons)


# --------------------------------------------------------------------------
# torch state_dict helpers
# --------------------------------------------------------------------------


torch = pytest.importorskip("torch")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 3)
    )


def test_state_dict_round_trip():
    src = _model()
    src.train()
    src(torch.randn(4, 8))  # update BN running stats / num_batches_tracked (int64)
    data = encode("policy", state_dict_to_arrays(src.state_dict()), {"version": 3})
    p = decode(data, expect_kind="policy")
    sd = arrays_to_state_dict(p.arrays)
    dst = _model()
    for m in dst.modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.zeros_(m.weight)
    dst.load_state_dict(sd)
    for (k, a), (k2, b) in zip(src.state_dict().items(), dst.state_dict().items()):
        assert k == k2
        assert a.dtype == b.dtype
        assert torch.equal(a, b), k
    assert sd["1.num_batches_tracked"].dtype == torch.int64
    x = torch.randn(5, 8)
    src.eval()
    dst.eval()
    assert torch.equal(src(x), dst(x))


def test_state_dict_special_tensors():
    sd = {
        "requires_grad": torch.nn.Parameter(torch.randn(3, 4)),
        "transposed": torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),
        "bf16": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
        "bool": torch.tensor([True, False]),
        "scalar": torch.tensor(3.0),
        "empty": torch.zeros(0, 4),
        "half": torch.tensor([0.5], dtype=torch.float16),
        "i8": torch.tensor([-3, 4], dtype=torch.int8),
    }
    out = arrays_to_state_dict(decode(encode("p", state_dict_to_arrays(sd))).arrays)
    for k, v in sd.items():
        expect = v.detach().float() if v.dtype == torch.bfloat16 else v.detach()
        assert out[k].dtype == expect.dtype, k
        assert out[k].shape == expect.shape, k
        assert torch.equal(out[k], expect), k
    # bf16 widened losslessly; load_state_dict casts back
    lin = torch.nn.Linear(2, 1).to(torch.bfloat16)
    arrays = state_dict_to_arrays(lin.state_dict())
    assert arrays["weight"].dtype == np.float32
    lin2 = torch.nn.Linear(2, 1).to(torch.bfloat16)
    lin2.load_state_dict(arrays_to_state_dict(decode(encode("p", arrays)).arrays))
    assert torch.equal(lin.weight, lin2.weight) and lin2.weight.dtype == torch.bfloat16


def test_state_dict_rejects_non_tensors():
    with pytest.raises(PayloadError) as ei:
        state_dict_to_arrays({"w": torch.zeros(2), "_extra_state": {"a": 1}})
    assert ei.value.reason == "bad_array"
    with pytest.raises(PayloadError):
        state_dict_to_arrays({3: torch.zeros(2)})


def test_arrays_to_state_dict_read_only_input():
    a = np.arange(4, dtype=np.float32)
    a.setflags(write=False)
    t = arrays_to_state_dict({"a": a})["a"]
    assert torch.equal(t, torch.arange(4, dtype=torch.float32))


def test_codec_module_does_not_import_rclpy_or_torch_at_import_time():
    import subprocess

    code = (
        "import sys, robot_rl.transport.codec as c; "
        "print('rclpy' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_module_all_exports():
    for name in ("encode", "decode", "Payload", "PayloadError",
                 "state_dict_to_arrays", "arrays_to_state_dict"):
        assert name in codec.__all__
