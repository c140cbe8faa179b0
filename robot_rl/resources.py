"""Files the package ships (sim scenes, configs, pretrained encoders and policies), found in
the source tree, a pip install (share/robot_rl under sys.prefix) or a colcon install."""

from __future__ import annotations

import sys
from pathlib import Path


def package_path(relative: str | Path) -> Path:
    """An existing path as given (absolute or relative to the working directory), else the
    shipped file or directory `relative` of the package; FileNotFoundError naming where it looked."""
    relative = Path(relative)
    if relative.exists():
        return relative
    candidates = [Path(__file__).resolve().parents[1] / relative, Path(sys.prefix) / "share" / "robot_rl" / relative]
    try:  # installed ROS 2 package (colcon)
        from ament_index_python.packages import get_package_share_directory

        candidates.append(Path(get_package_share_directory("robot_rl")) / relative)
    except Exception:  # noqa: BLE001 - ament not available or package not installed
        pass
    for candidate in candidates:
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{relative} not found (looked in {', '.join(str(c) for c in [relative, *candidates])})")
