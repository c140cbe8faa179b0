"""Transition datasets on disk (zarr): demonstrations, teleop recordings, exported buffers.

A dataset is a zarr group with one array per transition field and self-describing
attributes: schema version, task name and anything the writer adds (task config,
episode boundaries, provenance).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np
import zarr

SCHEMA_VERSION = 1


def save_transitions(path: str | os.PathLike, arrays: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> None:
    lengths = {name: len(arr) for name, arr in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"fields have different lengths: {lengths}")
    group = zarr.open_group(str(path), mode="w")
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        group.create_array(name, data=arr, chunks=(min(max(len(arr), 1), 4096), *arr.shape[1:]))
    group.attrs.update({"schema_version": SCHEMA_VERSION, **attrs})


def load_transitions(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    if not os.path.exists(path):
        raise FileNotFoundError(f"no dataset at {path}")
    group = zarr.open_group(str(path), mode="r")
    attrs = dict(group.attrs)
    version = attrs.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(f"dataset {path} has schema version {version!r}, this robot_rl reads {SCHEMA_VERSION}")
    return {name: group[name][...] for name in group.array_keys()}, attrs
