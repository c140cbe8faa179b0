"""Versioned, validated binary payload codec for everything that crosses a
process boundary in robot_rl (transition batches, policy weights, acks; the
kinds are listed in kinds.py).

Pure Python + numpy (+ safetensors). This module must never import rclpy so
it can be used by offline tools, tests and non-ROS processes alike. Nothing is
ever pickled: a payload can only ever decode into a kind string, a JSON meta
dict and a dict of plain numeric numpy arrays.

Wire format (all integers little-endian)::

    offset  size  field
    0       4     magic  b"RRLP"
    4       2     u16 codec version: 1 unsigned, 2 signed
    6       4     u32 CRC-32 (zlib polynomial) of the body
    10      ...   body: a safetensors blob
    end-32  32    version 2 only: HMAC-SHA256 of everything before it, keyed
                  with the run's secret (secret.py)

``encode(..., key=k)`` writes version 2; without a key, version 1.
``decode(..., key=k)`` accepts only a version 2 payload whose tag verifies
under ``k``; without a key both versions decode and no tag is checked
(offline tools, and the learner's journal, whose payloads were verified
before they were written).

The safetensors ``__metadata__`` table carries exactly one entry,
``"rrl"``, whose value is a JSON string ``{"kind": <str>, "meta": <dict>}``.

``decode`` validates *everything* (prefix, checksum, safetensors header,
per-array dtype/shape/offset consistency, metadata) and raises only
:class:`PayloadError` on malformed input, with a short machine readable
``reason``:

=================  ==========================================================
reason             meaning
=================  ==========================================================
``bad_input``      argument is not a bytes-like object
``too_short``      fewer bytes than the fixed prefix
``bad_magic``      prefix magic is not ``b"RRLP"``
``bad_version``    codec version is not supported by this reader
``unsigned``       a key was given but the payload carries no tag (version 1)
``bad_mac``        the tag does not verify: forged, altered, or signed with
                   another run's key
``bad_crc``        body checksum mismatch (also what truncation looks like)
``bad_body``       safetensors container is malformed
``bad_array``      an array entry is inconsistent (dtype / shape / size /
                   offsets) or, on encode, cannot be represented
``bad_meta``       kind / meta missing or not valid JSON of the right shape
``wrong_kind``     ``expect_kind`` given and the payload kind differs
``missing_field``  an array named in ``require`` is absent
=================  ==========================================================
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import safetensors.numpy as _stnp

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

__all__ = [
    "CODEC_VERSION",
    "FORGED_REASONS",
    "MAGIC",
    "SIGNED_VERSION",
    "PREFIX",
    "PREFIX_SIZE",
    "Payload",
    "PayloadError",
    "arrays_to_state_dict",
    "decode",
    "encode",
    "frame_body",
    "state_dict_to_arrays",
]

MAGIC = b"RRLP"
CODEC_VERSION = 1
SIGNED_VERSION = 2
PREFIX = struct.Struct("<4sHI")  # magic, version, crc32(body)
PREFIX_SIZE = PREFIX.size  # 10
TAG_SIZE = hashlib.sha256().digest_size  # 32
FORGED_REASONS = frozenset({"unsigned", "bad_mac"})
"""Reasons that mean a payload is not from a holder of the key (as opposed to merely malformed)."""
_META_KEY = "rrl"
_SAFETENSORS_HEADER_LEN = struct.Struct("<Q")
# Sanity bound on the safetensors JSON header (safetensors itself caps at
# 100 MB; ours only ever holds a few hundred entries).
_MAX_HEADER_BYTES = 16 * 1024 * 1024

# safetensors dtype tag <-> numpy dtype. Only dtypes numpy can represent
# natively; anything else (bf16, fp8, ...) is rejected on both sides.
_TAG_TO_DTYPE: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "U16": np.dtype(np.uint16),
    "I16": np.dtype(np.int16),
    "U32": np.dtype(np.uint32),
    "I32": np.dtype(np.int32),
    "U64": np.dtype(np.uint64),
    "I64": np.dtype(np.int64),
    "F16": np.dtype(np.float16),
    "F32": np.dtype(np.float32),
    "F64": np.dtype(np.float64),
    "C64": np.dtype(np.complex64),
}
_SUPPORTED_DTYPES = frozenset(_TAG_TO_DTYPE.values())
# Never swallowed when wrapping third-party errors.
_PASSTHROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError)


class PayloadError(ValueError):
    """Raised for any malformed payload (or unencodable input).

    ``reason`` is a short machine-readable token (see module docstring).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.detail = message


@dataclass(frozen=True)
class Payload:
    """A decoded payload. ``arrays`` are fresh, writeable, C-contiguous,
    native-byte-order numpy arrays owned by this object."""

    kind: str
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(repr=False)

    def __repr__(self) -> str:  # keep logs readable for multi-MB payloads
        summary = ", ".join(
            f"{k}:{v.dtype}{list(v.shape)}" for k, v in self.arrays.items()
        )
        return f"Payload(kind={self.kind!r}, meta={self.meta!r}, arrays={{{summary}}})"


# --------------------------------------------------------------------------
# encode
# --------------------------------------------------------------------------


def _json_default(obj: Any) -> Any:
    # numpy scalars / small arrays are common in meta (e.g. episode stats).
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")


def _meta_json(kind: str, meta: Mapping[str, Any] | None) -> str:
    if not isinstance(kind, str) or not kind:
        raise PayloadError("bad_meta", f"kind must be a non-empty str, got {kind!r}")
    if meta is None:
        meta = {}
    if not isinstance(meta, Mapping):
        raise PayloadError("bad_meta", f"meta must be a mapping, got {type(meta).__name__}")
    for k in meta:
        if not isinstance(k, str):
            raise PayloadError("bad_meta", f"meta keys must be str, got {k!r}")
    try:
        return json.dumps(
            {"kind": kind, "meta": dict(meta)},
            allow_nan=False,
            separators=(",", ":"),
            default=_json_default,
        )
    except (TypeError, ValueError, RecursionError) as exc:
        raise PayloadError("bad_meta", f"meta is not JSON-serialisable: {exc}") from None


def _prepare_array(name: Any, value: Any) -> np.ndarray:
    if not isinstance(name, str) or not name or name == "__metadata__":
        raise PayloadError("bad_array", f"array names must be non-empty str, got {name!r}")
    arr = np.asarray(value)
    dt = arr.dtype
    if dt.byteorder not in ("=", "|"):
        dt = dt.newbyteorder("=")
    if dt not in _SUPPORTED_DTYPES:
        raise PayloadError(
            "bad_array", f"array {name!r}: unsupported dtype {arr.dtype}"
        )
    # safetensors reads nbytes from data_ptr verbatim: a strided view would be
    # serialised as garbage, so contiguity is mandatory, not an optimisation.
    # (np.ascontiguousarray would promote 0-d arrays to 1-d.)
    return np.asarray(arr, dtype=dt, order="C")


def _tag(key: bytes, signed: bytes | memoryview) -> bytes:
    return hmac.new(key, signed, hashlib.sha256).digest()


def frame_body(body: bytes | bytearray | memoryview, key: bytes | None = None) -> bytes:
    """Prefix an already-built safetensors ``body`` with magic/version/CRC and,
    with a ``key``, append its HMAC tag.

    Exposed for tooling and tests; normal code should call :func:`encode`.
    """
    version = CODEC_VERSION if key is None else SIGNED_VERSION
    framed = b"".join((PREFIX.pack(MAGIC, version, zlib.crc32(body) & 0xFFFFFFFF), body))
    return framed if key is None else framed + _tag(key, framed)


def encode(
    kind: str,
    arrays: Mapping[str, np.ndarray],
    meta: Mapping[str, Any] | None = None,
    *,
    key: bytes | None = None,
) -> bytes:
    """Encode ``arrays`` + ``meta`` as a framed payload of ``kind``.

    ``arrays`` values may be anything ``np.asarray`` accepts with a numeric or
    bool dtype (bool, u/int8..64, float16/32/64, complex64); they are copied,
    never aliased. ``meta`` must be a str-keyed JSON-able mapping (numpy
    scalars are converted; NaN/inf are rejected because they are not JSON).
    Raises :class:`PayloadError` (``bad_meta`` / ``bad_array``) on bad input.
    With ``key`` the payload is signed (version 2).
    """
    meta_json = _meta_json(kind, meta)
    if not isinstance(arrays, Mapping):
        raise PayloadError("bad_array", f"arrays must be a mapping, got {type(arrays).__name__}")
    prepared = {name: _prepare_array(name, value) for name, value in arrays.items()}
    try:
        body = _stnp.save(prepared, metadata={_META_KEY: meta_json})
    except _PASSTHROUGH:
        raise
    except BaseException as exc:  # SafetensorError, or a pyo3 PanicException (BaseException)
        raise PayloadError("bad_array", f"safetensors refused the arrays: {exc}") from None
    return frame_body(body, key)


# --------------------------------------------------------------------------
# decode
# --------------------------------------------------------------------------


def _as_byte_view(data: Any) -> memoryview:
    try:
        mv = memoryview(data)
    except TypeError:
        raise PayloadError(
            "bad_input", f"expected a bytes-like object, got {type(data).__name__}"
        ) from None
    if not mv.c_contiguous:
        raise PayloadError("bad_input", "buffer is not contiguous")
    if mv.format != "B" or mv.ndim != 1:
        try:
            mv = mv.cast("B")
        except (TypeError, ValueError) as exc:
            raise PayloadError("bad_input", f"cannot view buffer as bytes: {exc}") from None
    return mv


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _parse_header(body: memoryview) -> tuple[dict[str, Any], list[tuple[str, np.dtype, tuple[int, ...]]]]:
    """Validate the safetensors header ourselves (strictly) and return
    (kind/meta dict, [(name, dtype, shape)])."""
    if len(body) < _SAFETENSORS_HEADER_LEN.size:
        raise PayloadError("bad_body", "body shorter than safetensors header length")
    (hlen,) = _SAFETENSORS_HEADER_LEN.unpack_from(body, 0)
    data_start = _SAFETENSORS_HEADER_LEN.size + hlen
    if hlen == 0 or hlen > _MAX_HEADER_BYTES or data_start > len(body):
        raise PayloadError("bad_body", f"invalid safetensors header length {hlen}")
    try:
        header = json.loads(bytes(body[_SAFETENSORS_HEADER_LEN.size:data_start]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise PayloadError("bad_body", f"safetensors header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise PayloadError("bad_body", "safetensors header is not a JSON object")

    # ---- metadata -> kind/meta
    st_meta = header.pop("__metadata__", None)
    if not isinstance(st_meta, dict) or not isinstance(st_meta.get(_META_KEY), str):
        raise PayloadError("bad_meta", f"missing {_META_KEY!r} metadata entry")
    try:
        km = json.loads(st_meta[_META_KEY])
    except (ValueError, RecursionError) as exc:
        raise PayloadError("bad_meta", f"metadata is not valid JSON: {exc}") from None
    if (
        not isinstance(km, dict)
        or not isinstance(km.get("kind"), str)
        or not km["kind"]
        or not isinstance(km.get("meta"), dict)
    ):
        raise PayloadError("bad_meta", "metadata must be {'kind': non-empty str, 'meta': object}")

    # ---- tensor entries
    data_len = len(body) - data_start
    entries = []
    spans = []
    for name, info in header.items():
        if not name:
            raise PayloadError("bad_array", "empty array name")
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise PayloadError("bad_array", f"array {name!r}: malformed entry")
        dtype = _TAG_TO_DTYPE.get(info["dtype"]) if isinstance(info["dtype"], str) else None
        if dtype is None:
            raise PayloadError("bad_array", f"array {name!r}: unsupported dtype {info['dtype']!r}")
        shape = info["shape"]
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise PayloadError("bad_array", f"array {name!r}: invalid shape {shape!r}")
        offs = info["data_offsets"]
        if (
            not isinstance(offs, list)
            or len(offs) != 2
            or not all(_is_int(o) for o in offs)
            or not 0 <= offs[0] <= offs[1] <= data_len
        ):
            raise PayloadError("bad_array", f"array {name!r}: invalid data_offsets {offs!r}")
        nbytes = math.prod(shape) * dtype.itemsize
        if offs[1] - offs[0] != nbytes:
            raise PayloadError(
                "bad_array",
                f"array {name!r}: shape {shape} x {dtype} needs {nbytes} bytes "
                f"but offsets declare {offs[1] - offs[0]}",
            )
        entries.append((name, dtype, tuple(shape)))
        spans.append((offs[0], offs[1]))
    # Buffers must tile the data section exactly: no overlap, no holes.
    pos = 0
    for begin, end in sorted(spans):
        if begin != pos:
            raise PayloadError("bad_array", "array buffers overlap or leave holes")
        pos = end
    if pos != data_len:
        raise PayloadError(
            "bad_array", f"data section is {data_len} bytes but arrays cover {pos}"
        )
    return km, entries


def decode(
    data: bytes | bytearray | memoryview | Any,
    *,
    expect_kind: str | None = None,
    require: Iterable[str] = (),
    key: bytes | None = None,
) -> Payload:
    """Decode and fully validate a payload produced by :func:`encode`.

    ``data`` may be any contiguous bytes-like object (bytes, bytearray,
    memoryview, ``array.array`` such as ``UInt8MultiArray.data``). With
    ``key``, the payload must be signed with it (checked before anything
    else is parsed). Raises :class:`PayloadError` and nothing else on
    malformed input.
    """
    mv = _as_byte_view(data)
    if len(mv) < PREFIX_SIZE:
        raise PayloadError("too_short", f"{len(mv)} bytes < {PREFIX_SIZE}-byte prefix")
    magic, version, crc = PREFIX.unpack_from(mv, 0)
    if magic != MAGIC:
        raise PayloadError("bad_magic", f"magic {bytes(magic)!r} != {MAGIC!r}")
    if version not in (CODEC_VERSION, SIGNED_VERSION):
        raise PayloadError(
            "bad_version",
            f"codec version {version} unsupported (expected {CODEC_VERSION} or {SIGNED_VERSION})",
        )
    if version == SIGNED_VERSION:
        if len(mv) < PREFIX_SIZE + TAG_SIZE:
            raise PayloadError("too_short", f"{len(mv)} bytes cannot hold a {TAG_SIZE}-byte tag")
        signed, tag = mv[:-TAG_SIZE], mv[-TAG_SIZE:]
        if key is not None and not hmac.compare_digest(_tag(key, signed), tag):
            raise PayloadError("bad_mac", "HMAC tag does not verify (forged, altered, or another run's key)")
        mv = signed
    elif key is not None:
        raise PayloadError("unsigned", f"payload is unsigned (codec version {version}) but a key is required")
    body = mv[PREFIX_SIZE:]
    actual = zlib.crc32(body) & 0xFFFFFFFF
    if actual != crc:
        raise PayloadError(
            "bad_crc", f"body CRC32 {actual:#010x} != {crc:#010x} (corrupt or truncated)"
        )

    km, entries = _parse_header(body)
    try:
        loaded = _stnp.load(bytes(body))
    except _PASSTHROUGH:
        raise
    except BaseException as exc:  # SafetensorError, KeyError, pyo3 PanicException: never leak them
        raise PayloadError("bad_body", f"safetensors rejected the body: {exc}") from None

    if len(loaded) != len(entries):
        raise PayloadError("bad_array", "array count disagrees with header")
    arrays: dict[str, np.ndarray] = {}
    for name, dtype, shape in entries:
        arr = loaded.get(name)
        if arr is None or arr.dtype != dtype or arr.shape != shape:
            raise PayloadError("bad_array", f"array {name!r} disagrees with header")
        if not arr.flags.writeable:  # pragma: no cover - safetensors gives owned copies
            arr = arr.copy()
        arrays[name] = arr

    kind = km["kind"]
    if expect_kind is not None and kind != expect_kind:
        raise PayloadError("wrong_kind", f"expected kind {expect_kind!r}, got {kind!r}")
    if isinstance(require, str):
        require = (require,)
    missing = [r for r in require if r not in arrays]
    if missing:
        raise PayloadError("missing_field", f"{kind!r} payload lacks arrays {missing}")
    return Payload(kind=kind, meta=km["meta"], arrays=arrays)


# --------------------------------------------------------------------------
# torch helpers (torch imported lazily: the codec must stay torch-free)
# --------------------------------------------------------------------------


def state_dict_to_arrays(sd: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Convert a torch ``state_dict`` to numpy arrays for :func:`encode`.

    Tensors are detached and moved to CPU. ``bfloat16`` (which numpy cannot
    represent) is widened losslessly to ``float32``; ``load_state_dict``
    casts back to the parameter dtype on load. The returned arrays may share
    memory with CPU tensors (``encode`` copies them). Non-tensor entries
    (e.g. ``_extra_state`` objects) are rejected with ``PayloadError``.
    """
    import torch

    out: dict[str, np.ndarray] = {}
    for name, value in sd.items():
        if not isinstance(name, str):
            raise PayloadError("bad_array", f"state_dict keys must be str, got {name!r}")
        if not isinstance(value, torch.Tensor):
            raise PayloadError(
                "bad_array", f"state_dict entry {name!r} is {type(value).__name__}, not a Tensor"
            )
        t = value.detach()
        if t.layout != torch.strided:
            raise PayloadError("bad_array", f"state_dict entry {name!r}: sparse tensors unsupported")
        if t.dtype == torch.bfloat16:
            t = t.float()
        t = t.cpu().resolve_conj().resolve_neg().contiguous()
        try:
            out[name] = t.numpy()
        except (TypeError, RuntimeError) as exc:
            raise PayloadError("bad_array", f"state_dict entry {name!r}: {exc}") from None
    return out


def arrays_to_state_dict(arrays: Mapping[str, np.ndarray]) -> dict[str, "torch.Tensor"]:
    """Inverse of :func:`state_dict_to_arrays` (CPU tensors).

    Shares memory with writeable arrays (as returned by :func:`decode`);
    read-only arrays are copied first.
    """
    import torch

    out: dict[str, torch.Tensor] = {}
    for name, arr in arrays.items():
        a = np.asarray(arr)
        if not a.flags.writeable or not a.flags.c_contiguous or a.dtype.byteorder not in ("=", "|"):
            a = np.array(a, dtype=a.dtype.newbyteorder("="), order="C", copy=True)
        out[name] = torch.from_numpy(a)
    return out
