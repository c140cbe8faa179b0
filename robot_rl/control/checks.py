"""The one check every numeric input goes through before it reaches a controller, a driver or a
command: numbers in, a float64 array out, or an error naming the value."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def finite(what: str, values: Any, size: int | None = None,
           error: Callable[[str], Exception] = ValueError) -> np.ndarray:
    """`values` as a float64 array (flattened, and exactly `size` elements, when `size` is given).
    Raises `error(message)` naming `what` when they are not numbers, not `size` of them, or hold
    NaN or Inf; message parsers pass their own rejection type (e.g. `Rejected.nan`)."""
    try:
        a = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise error(f"{what} is not numeric: {exc}") from None
    if size is not None:
        a = a.reshape(-1)
        if a.shape != (size,):
            raise error(f"{what} must have {size} elements, got {a.shape}")
    if not np.isfinite(a).all():
        raise error(f"{what} contains NaN or Inf")
    return a
