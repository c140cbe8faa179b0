"""The gamepad as a Joy message's content: the node's subscription feeds `JoyDecoder` the axes and
buttons it received."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from robot_rl.hardware.safety import Rejected
from robot_rl.teleop.inputs import TeleopInput
from robot_rl.teleop.mapping import DeviceMapping, InputMapper

__all__ = ["JoyDecoder"]


class JoyDecoder:
    """A Joy message's content (axes, buttons) -> `TeleopInput`. Raises Rejected for a message
    that does not fit the mapping ("joy_layout": too few axes or buttons), NaN/Inf ("nan"), axes
    outside [-1, 1] ("axis_out_of_range") or buttons other than 0/1 ("bad_button")."""

    def __init__(self, mapping: DeviceMapping):
        self._mapper = InputMapper(mapping)
        self._axis_indices = sorted({src.source for src in mapping.axes.values()})
        self._axes_needed = max(self._axis_indices, default=-1) + 1
        self._buttons_needed = max(mapping.buttons, default=-1) + 1

    def __call__(self, axes: Sequence[float], buttons: Sequence[int], stamp: float) -> TeleopInput:
        if len(axes) < self._axes_needed or len(buttons) < self._buttons_needed:
            raise Rejected("joy_layout", f"{len(axes)} axes and {len(buttons)} buttons; the mapping reads "
                                         f"{self._axes_needed} axes and {self._buttons_needed} buttons")
        values = np.asarray(axes, dtype=np.float64)
        if not np.isfinite(values).all():
            raise Rejected("nan", f"axes {list(axes)}")
        if values.size and np.abs(values).max() > 1.0 + 1e-6:
            raise Rejected("axis_out_of_range", f"axes {list(axes)} outside [-1, 1]")
        if any(b not in (0, 1) for b in buttons):
            raise Rejected("bad_button", f"buttons {list(buttons)} are not all 0 or 1")
        raw_axes = {i: float(values[i]) for i in self._axis_indices}
        return self._mapper(raw_axes, [i for i, b in enumerate(buttons) if b], stamp)
