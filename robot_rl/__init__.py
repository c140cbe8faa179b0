"""robot_rl: real-world robot reinforcement learning on ROS 2."""

import os as _os

__version__ = "0.1.0"

# Headless rendering where there is no display, chosen before any module of ours (a robot's simulation, an
# environment) imports MuJoCo; set MUJOCO_GL=egl yourself on a GPU machine.
if "MUJOCO_GL" not in _os.environ and not (_os.environ.get("DISPLAY") or _os.environ.get("WAYLAND_DISPLAY")):
    _os.environ["MUJOCO_GL"] = "osmesa"


def _moved(old: str, new: str) -> None:
    """Makes module `old` (a shim left at a path that moved) the module `new`, with a DeprecationWarning: imports
    of the old path keep working for one release (they are removed in 0.2.0)."""
    import importlib
    import sys
    import warnings

    warnings.warn(f"{old} moved to {new}; the old path is removed in 0.2.0", DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
