"""Files the package ships (sim scenes, configs, pretrained encoders and policies), found in
the ament share directory of a colcon install, the venv's share/ of a pip install, or the
source tree."""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE = "robot_rl"


def share_dir() -> Path:
    """Where config/, sim/, hardware/ and policies/ are."""
    candidates = []
    try:
        from ament_index_python.packages import get_package_share_directory

        candidates.append(Path(get_package_share_directory(PACKAGE)))
    except Exception:  # noqa: BLE001 - not a colcon install (ament index absent or package not registered)
        pass
    candidates += [Path(__file__).resolve().parents[1], Path(sys.prefix) / "share" / PACKAGE]
    for candidate in candidates:
        if (candidate / "config").is_dir():
            return candidate
    raise FileNotFoundError(f"cannot find the robot_rl config directory in {[str(c) for c in candidates]}")


def package_path(relative: str | Path) -> Path:
    """An existing path as given (absolute, or relative to the working directory), else the
    package's shipped file or directory `relative`; FileNotFoundError saying where it looked."""
    relative = Path(relative)
    if relative.exists():
        return relative
    shipped = share_dir() / relative
    if shipped.exists():
        return shipped
    raise FileNotFoundError(f"{relative} not found (looked in {Path.cwd()} and {share_dir()})")
