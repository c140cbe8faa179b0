"""Zarr datasets on disk: the flat transitions format and what every robot_rl zarr format shares.

Every format is a zarr group whose root attributes name it (`format`) and its `schema_version`, so a
reader can tell at once whether it holds the data it expects. `read_header` checks both;
`checked_real`, `checked_frames` and `checked_flags` validate arrays before anything is written.

The transitions format (this module's `save_transitions` / `load_transitions`) has one array per
transition field and attributes the writer adds (task name, episode statistics, provenance).
Episodes with camera frames live in `robot_rl.data.episodes`. Both checksum their chunks and keep a
manifest of them (`robot_rl.data.integrity`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Collection, Iterable, Mapping

import numpy as np
import zarr
from zarr.errors import GroupNotFoundError

from robot_rl.data.integrity import MANIFEST_ATTR, ChunkGuard, DatasetCorruptError, array_options, manifest, writable
from robot_rl.outputs import UserError, atomic_path, check_output

TRANSITIONS_FORMAT = "robot_rl.transitions"
SCHEMA_VERSION = 1
# About a megabyte per chunk: a few camera frames per file, many thousand rows of scalars.
CHUNK_BYTES = 1 << 20
NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def is_count(value: Any) -> bool:
    """An integer (Python or NumPy), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def chunk_rows(row_shape: tuple[int, ...], dtype: np.dtype | str) -> int:
    """Rows per chunk for an array whose rows have `row_shape` and `dtype`."""
    row_bytes = int(np.prod(row_shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return max(1, CHUNK_BYTES // max(1, row_bytes))


def read_header(path: str | os.PathLike, format_name: str, reader_version: int, mode: str = "r",
                default_format: str | None = None) -> tuple[zarr.Group, dict[str, Any]]:
    """Opens the zarr group at `path` and checks it holds `format_name` at `reader_version`.
    `default_format` is assumed where the `format` attribute is absent. Raises FileNotFoundError or ValueError."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no dataset at {path}")
    try:
        group = zarr.open_group(str(path), mode=mode)
    except GroupNotFoundError:
        raise ValueError(f"{path} is not a zarr group (expected {format_name!r} data)") from None
    attrs = dict(group.attrs)
    found = attrs.get("format", default_format)
    if found != format_name:
        raise ValueError(f"{path} holds {found!r} data, not {format_name!r}")
    version = attrs.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(f"{path} has no valid schema_version attribute (found {version!r})")
    if version > reader_version:
        raise ValueError(f"{path} has {format_name} schema version {version}, newer than the version "
                         f"{reader_version} this robot_rl reads: upgrade robot_rl to read it")
    if version != reader_version:
        raise ValueError(f"{path} has {format_name} schema version {version}; this robot_rl reads only "
                         f"version {reader_version}")
    return group, attrs


def check_names(names: Iterable[str], reserved: Collection[str], what: str) -> None:
    """Names that become zarr paths and batch keys: identifiers, unique, not reserved, no `next_` prefix
    (batches name next observations `next_<name>`)."""
    seen: set[str] = set()
    for name in names:
        if (not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or name in reserved
                or name.startswith("next_")):
            raise ValueError(f"{what} name {name!r} must be letters, digits and underscores starting with a "
                             f"letter, must not start with 'next_' and must not be one of {sorted(reserved)}")
        if name in seen:
            raise ValueError(f"{what} name {name!r} is used twice")
        seen.add(name)


def _describe(value: Any) -> str:
    arr = np.asarray(value)
    return f"{arr.dtype} array of shape {arr.shape}"


def checked_real(value: Any, shape: tuple[int, ...], dtype: np.dtype | str, what: str) -> np.ndarray:
    """`value` as a `dtype` array of exactly `shape` with finite entries (bools and non-numbers refused)."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiu" or arr.shape != shape:
        raise ValueError(f"{what} must be real numbers of shape {shape}, got {_describe(value)}")
    with np.errstate(over="ignore"):
        converted = arr.astype(dtype)
    if not np.isfinite(converted).all():
        raise ValueError(f"{what} contains NaN or Inf or values beyond {np.dtype(dtype)} (must be finite)")
    return converted


def checked_frames(value: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    """`value` as uint8 frames of exactly `shape` (no conversion: another dtype means another encoding)."""
    if not isinstance(value, np.ndarray) or value.dtype != np.uint8 or value.shape != shape:
        got = _describe(value) if value is not None else "nothing"
        raise ValueError(f"{what} must be a uint8 array of shape {shape}, got {got}")
    return value


def checked_flags(value: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    """`value` as a bool array of exactly `shape` (integers refused: 2 or -1 is no flag)."""
    arr = np.asarray(value)
    if arr.dtype != np.bool_ or arr.shape != shape:
        raise ValueError(f"{what} must be bool of shape {shape}, got {_describe(value)}")
    return arr


# Counts of the writer's statistics that add up when a dataset is appended to; other attributes
# describe the latest write.
SUMMED_ATTRS = ("episodes", "attempted")


def _transition_episode_ends(arrays: Mapping[str, np.ndarray]) -> list[int] | None:
    """Cumulative row count at the end of each episode, from the terminated/truncated flags (None
    without them): how integrity errors name the episodes of a damaged chunk."""
    if "terminated" not in arrays or "truncated" not in arrays:
        return None
    done = np.asarray(arrays["terminated"], bool).reshape(-1) | np.asarray(arrays["truncated"], bool).reshape(-1)
    ends = (np.flatnonzero(done) + 1).tolist()
    if len(done) and (not ends or ends[-1] != len(done)):
        ends.append(len(done))  # an unfinished last episode
    return ends


def _write_transitions(path: Path, arrays: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> None:
    group = zarr.open_group(str(path), mode="w")
    for name, arr in arrays.items():
        group.create_array(name, data=arr, chunks=(chunk_rows(arr.shape[1:], arr.dtype), *arr.shape[1:]),
                           **array_options())
    rows = {name: len(arr) for name, arr in arrays.items()}
    group.attrs.update({**attrs, "format": TRANSITIONS_FORMAT, "schema_version": SCHEMA_VERSION,
                        MANIFEST_ATTR: manifest(rows, _transition_episode_ends(arrays))})


def _append_transitions(path: Path, arrays: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> None:
    """Appends rows in place; like an episode commit, the manifest update that follows the writes makes
    them part of the dataset (a crash before it leaves rows the readers ignore)."""
    group, stored, guard = open_transitions(path, mode="r+")
    guard.require_appendable()
    if not guard.checksummed:
        raise UserError(f"{path} was written before chunk checksums and cannot be appended to; "
                        "use --overwrite or another path")
    if stored.get("task") != attrs.get("task"):
        raise UserError(f"{path} holds transitions of task {stored.get('task')!r}, not {attrs.get('task')!r}")
    layout = {name: (group[name].shape[1:], group[name].dtype) for name in guard.rows}
    new_layout = {name: (arr.shape[1:], arr.dtype) for name, arr in arrays.items()}
    if layout != new_layout:
        raise UserError(f"{path} holds fields {layout}, not {new_layout}: appending needs the same fields")
    old_rows = next(iter(guard.rows.values()), 0)
    for name, arr in arrays.items():
        array = writable(group[name])
        array.resize((old_rows + len(arr), *arr.shape[1:]))
        array[old_rows:] = arr
    ends = stored[MANIFEST_ATTR].get("episode_ends")
    new_ends = _transition_episode_ends(arrays)
    if ends is not None and new_ends is not None:
        ends = ends + [old_rows + end for end in new_ends]
    summed = {key: stored[key] + attrs[key] for key in SUMMED_ATTRS
              if is_count(stored.get(key)) and is_count(attrs.get(key))}
    group.attrs.update({**attrs, **summed, MANIFEST_ATTR: manifest(
        {name: old_rows + len(arr) for name, arr in arrays.items()}, ends)})


def save_transitions(path: str | os.PathLike, arrays: Mapping[str, np.ndarray], attrs: Mapping[str, Any], *,
                     overwrite: bool = False, append: bool = False) -> None:
    """Writes a transitions dataset at `path`; an existing one is refused (OutputExistsError) unless
    `overwrite` (replaced in one directory swap: a failure leaves it as it was) or `append` (same
    task and fields)."""
    path = check_output(path, "dataset", overwrite=overwrite, append=append, appendable=True)
    lengths = {name: len(arr) for name, arr in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"fields have different lengths: {lengths}")
    arrays = {name: np.ascontiguousarray(arr) for name, arr in arrays.items()}
    if append and path.exists():
        _append_transitions(path, arrays, attrs)
        return
    with atomic_path(path, directory=True) as tmp:
        _write_transitions(tmp, arrays, attrs)


def open_transitions(path: str | os.PathLike, mode: str = "r") -> tuple[zarr.Group, dict[str, Any], ChunkGuard]:
    """The dataset's group, attributes and integrity guard, its chunks checked to be on disk."""
    # Transition datasets written before the `format` attribute existed carry only schema_version 1.
    group, attrs = read_header(path, TRANSITIONS_FORMAT, SCHEMA_VERSION, mode=mode, default_format=TRANSITIONS_FORMAT)
    names = sorted(group.array_keys())
    listed = attrs.get(MANIFEST_ATTR)
    rows = listed["rows"] if listed else {name: group[name].shape[0] for name in names}
    if sorted(rows) != names:
        raise DatasetCorruptError(f"dataset {path} is damaged: it has arrays {names}, its manifest lists {sorted(rows)}")
    guard = ChunkGuard(path, group, rows, dict.fromkeys(rows, "steps"), listed,
                       listed.get("episode_ends") if listed else None)
    guard.require_present()
    return group, attrs, guard


def load_transitions(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    _, attrs, guard = open_transitions(path)
    return {name: guard.read(name, slice(0, rows)) for name, rows in guard.rows.items()}, attrs
