"""Modules that moved keep their old import path for one release: importing it gives the new module, with a
DeprecationWarning that names where it went (`robot_rl._moved`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIM = re.compile(r'^_moved\(__name__, "([\w.]+)"\)$', re.M)


def shims() -> dict[str, str]:
    """Old module -> new module, for every shim in the package."""
    found = {}
    for path in sorted((ROOT / "robot_rl").rglob("*.py")):
        match = SHIM.search(path.read_text())
        if match:
            found[".".join(path.relative_to(ROOT).with_suffix("").parts)] = match.group(1)
    return found


def test_every_old_path_imports_its_new_module_with_a_deprecation_warning():
    moved = shims()
    assert {"robot_rl.envs.arm_sim", "robot_rl.hardware.arm_adapters", "robot_rl.envs.car_race",
            "robot_rl.envs.canonical"} <= set(moved)
    # A fresh interpreter: each old path is imported for the first time there, so each one warns.
    script = """
import importlib, json, sys, warnings
report = {}
for old, new in json.loads(sys.argv[1]).items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    report[old] = [module is importlib.import_module(new),
                   [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]]
print(json.dumps(report))
"""
    result = subprocess.run([sys.executable, "-c", script, json.dumps(moved)], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    for old, new in moved.items():
        same, warnings = report[old]
        assert same, f"{old} is not {new}"
        assert f"{old} moved to {new}; the old path is removed in 0.2.0" in warnings, (old, warnings)
