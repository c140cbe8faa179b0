"""The transition layout: the fields of a transition batch, their shapes and dtypes (the same on
the wire and in the replay buffer), and the checks a received batch must pass before it is stored.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

# The fields of one transition, in storage order.
TRANSITION_FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "intervention")


def transition_layout(obs_dim: int, action_dim: int, frame_shapes: Mapping[str, tuple[int, ...]] | None = None
                      ) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Storage (and wire) layout of transitions: flat vectors, plus `obs_<camera>` and
    `next_obs_<camera>` uint8 frames for pixel tasks."""
    layout = {
        "obs": ((obs_dim,), np.dtype(np.float32)),
        "action": ((action_dim,), np.dtype(np.float32)),
        "reward": ((), np.dtype(np.float32)),
        "next_obs": ((obs_dim,), np.dtype(np.float32)),
        "terminated": ((), np.dtype(np.bool_)),
        "truncated": ((), np.dtype(np.bool_)),
        "intervention": ((), np.dtype(np.bool_)),
    }
    for camera, shape in (frame_shapes or {}).items():
        layout[f"obs_{camera}"] = layout[f"next_obs_{camera}"] = (tuple(shape), np.dtype(np.uint8))
    return layout


def stack_transitions(fields: Mapping[str, list], obs_dim: int, action_dim: int,
                      frame_shapes: Mapping[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    """Per-step lists of transition fields -> arrays in the storage layout (empty lists allowed)."""
    layout = transition_layout(obs_dim, action_dim, frame_shapes)
    rows = {name: fields.get(name, []) for name in layout}
    return {name: np.asarray(rows[name], dtype=dtype).reshape(len(rows[name]), *shape)
            for name, (shape, dtype) in layout.items()}


def validate_transitions(layout: Mapping[str, tuple[tuple[int, ...], np.dtype]], batch: Mapping[str, np.ndarray]) -> int:
    """Checks field names, shapes, dtypes of frames and finiteness; returns the batch length. Raises ValueError."""
    missing = set(layout) - set(batch)
    if missing:
        raise ValueError(f"transition batch lacks fields {sorted(missing)}")
    n = None
    for name, (shape, dtype) in layout.items():
        arr = np.asarray(batch[name])
        if arr.ndim == 0 or arr.shape[1:] != shape:
            raise ValueError(f"field {name!r} has shape {arr.shape}, expected (N, {', '.join(map(str, shape))})")
        if n is None:
            n = arr.shape[0]
        elif arr.shape[0] != n:
            raise ValueError(f"field {name!r} has {arr.shape[0]} rows, others have {n}")
        if dtype == np.uint8 and arr.dtype != np.uint8:
            raise ValueError(f"field {name!r} must be uint8 frames, got {arr.dtype}")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise ValueError(f"field {name!r} contains NaN or Inf")
    return int(n or 0)
