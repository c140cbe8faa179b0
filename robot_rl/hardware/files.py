"""Hardware description files (hardware/<name>.yaml): one lookup and loader for every robot kind."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml

from robot_rl.resources import share_dir as package_share_dir

T = TypeVar("T")


def hardware_path(name_or_path: str, share_dir: Path | None = None) -> Path:
    """`franka_cartesian` -> <share>/hardware/franka_cartesian.yaml; a path is used as is."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        return Path(name_or_path)
    return (share_dir or package_share_dir()) / "hardware" / f"{name_or_path}.yaml"


def load_hardware_file(name_or_path: str, parse: Callable[[Any, str, str], T], share_dir: Path | None = None) -> T:
    """Reads a hardware YAML and checks it with `parse(data, name, source)`; raises ValueError
    naming the file and the bad field."""
    path = hardware_path(name_or_path, share_dir)
    if not path.exists():
        known = sorted(p.stem for p in path.parent.glob("*.yaml")) if path.parent.is_dir() else []
        raise ValueError(f"hardware file {path} does not exist; available: {known}")
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
        return parse(data, path.stem, str(path))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None


def section_field(data: dict, key: str) -> dict:
    """A mapping-valued field (missing: empty); ValueError otherwise."""
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a mapping")
    return value


def number_field(section: dict, key: str, default: Any, where: str, low: float | None = None,
                 high: float | None = None) -> float:
    """A finite number field, optionally within [low, high]; ValueError naming `where.key` otherwise."""
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}.{key} must be a finite number, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{where}.{key} must be in [{low}, {high}], got {value!r}")
    return float(value)


def string_field(section: dict, key: str, default: str, where: str, allow_empty: bool = False) -> str:
    """A string field (non-empty unless allow_empty); ValueError naming `where.key` otherwise."""
    value = section.get(key, default)
    if not isinstance(value, str) or (not value and not allow_empty):
        raise ValueError(f"{where}.{key} must be a {'' if allow_empty else 'non-empty '}string, got {value!r}")
    return value
