"""Datasets whose row counts do not add up (an array shorter than the manifest's rows, arrays of one kind with
different rows, episode ends that do not rise to the steps, no episodes at all) are refused in one line by
`dataset verify`, by the learner node and by `train --env --demos`, before any training."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zarr

ENV = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_LOCALHOST_ONLY": "1", "ROS_DOMAIN_ID": "91",
       "MUJOCO_GL": "osmesa", "PYTHONWARNINGS": "ignore"}


def robot_rl(args: list[str], cwd: Path, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "robot_rl.cli", *args], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def tree_digest(path: Path) -> dict[str, str]:
    return {str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(path.rglob("*")) if f.is_file()}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> Path:
    """demos.zarr (transitions of arm_lift) and episodes.zarr (robot_rl/ArmPickCube-v0), one episode each."""
    root = tmp_path_factory.mktemp("row_counts")
    for args in (["demos", "--task", "arm_lift", "--episodes", "1", "--out", "demos.zarr"],
                 ["demos", "--env", "robot_rl/ArmPickCube-v0", "--goal", "pick up the cube", "--episodes", "1",
                  "--image-size", "32", "--out", "episodes.zarr"]):
        assert robot_rl(args, root).returncode == 0
    return root


def _copy(datasets: Path, name: str, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(datasets / name, tmp_path / name)
    return tmp_path / name


def _shorten(path: Path, key: str, rows: int) -> None:
    array = zarr.open_group(str(path), mode="r+")[key]
    array.resize((rows, *array.shape[1:]))


def _edit_manifest(path: Path, **changes) -> None:
    group = zarr.open_group(str(path), mode="r+")
    group.attrs["chunk_manifest"] = {**group.attrs["chunk_manifest"], **changes}


def _manifest_rows(path: Path, key: str, rows: int) -> None:
    """The array and its manifest row count both cut: each agrees with itself, not with the other arrays."""
    _shorten(path, key, rows)
    manifest = zarr.open_group(str(path), mode="r").attrs["chunk_manifest"]
    _edit_manifest(path, rows={**manifest["rows"], key: rows})


BROKEN = [
    ("demos.zarr", lambda p: _shorten(p, "reward", 40), "array 'reward' has 40 rows, but 50 steps are committed"),
    ("demos.zarr", lambda p: _manifest_rows(p, "reward", 40),
     "its chunk manifest lists 40 rows of array 'reward' but 50 of the other arrays of steps"),
    ("demos.zarr", lambda p: _edit_manifest(p, episode_ends=[30, 20, 50]),
     "episode_ends must rise by at least 1 per episode up to the 50 steps committed, but episode 1 ends at 20"),
    ("demos.zarr", lambda p: _edit_manifest(p, episode_ends=[-1, 50]), "but episode 0 ends at -1"),
    ("demos.zarr", lambda p: _edit_manifest(p, episode_ends=[40]), "but the last episode ends at 40"),
    ("episodes.zarr", lambda p: _shorten(p, "step/reward", 6), "array 'step/reward' has 6 rows, but 16 steps"),
]


@pytest.mark.parametrize("name, damage, message", BROKEN)
def test_verify_refuses_row_counts_that_do_not_add_up(datasets, tmp_path, name, damage, message):
    path = _copy(datasets, name, tmp_path)
    damage(path)
    before = tree_digest(tmp_path)
    result = robot_rl(["dataset", "verify", name], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"robot-rl dataset verify: dataset {name} is damaged: ") \
        and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr and tree_digest(tmp_path) == before


def test_verify_accepts_an_uncommitted_tail(datasets, tmp_path):
    """Rows beyond the committed ones are what a crash between an append's writes and its commit leaves; readers
    ignore them."""
    path = _copy(datasets, "demos.zarr", tmp_path)
    _shorten(path, "reward", 60)
    result = robot_rl(["dataset", "verify", "demos.zarr"], tmp_path)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr


def test_the_learner_refuses_inconsistent_demos_in_one_line(datasets, tmp_path):
    path = _copy(datasets, "demos.zarr", tmp_path)
    _manifest_rows(path, "reward", 40)
    result = robot_rl(["node", "learner", "--ros-args", "-p", "task:=arm_lift", "-p", f"demos:={path}",
                       "-p", f"run_dir:={tmp_path / 'run'}"], tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout + result.stderr
    assert lines == [f"[robot_rl] dataset {path} is damaged: its chunk manifest lists 40 rows of array 'reward' "
                     "but 50 of the other arrays of steps"], result.stderr


def test_the_learner_refuses_demos_without_transitions(datasets, tmp_path):
    path = _copy(datasets, "demos.zarr", tmp_path)
    group = zarr.open_group(str(path), mode="r+")
    for key in group.array_keys():
        _shorten(path, key, 0)
    _edit_manifest(path, rows=dict.fromkeys(group.array_keys(), 0), episode_ends=[])
    result = robot_rl(["node", "learner", "--ros-args", "-p", "task:=arm_lift", "-p", f"demos:={path}",
                       "-p", f"run_dir:={tmp_path / 'run'}"], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        f"[robot_rl] demos {path} hold no transitions"], result.stderr


def _empty_episodes(datasets: Path, path: Path) -> None:
    from robot_rl.data.episodes import EpisodeDataset, EpisodeWriter

    source = EpisodeDataset(datasets / "episodes.zarr")
    EpisodeWriter(path, source.schema, source.task_config)


@pytest.mark.parametrize("damage, message", [
    (lambda datasets, path: (_copy(datasets, "episodes.zarr", path.parent), _shorten(path, "step/reward", 6)),
     "dataset demos.zarr is damaged: array 'step/reward' has 6 rows, but 16 steps are committed"),
    (lambda datasets, path: _empty_episodes(datasets, path), "demo dataset demos.zarr holds no episodes"),
])
def test_train_env_refuses_such_demos_before_training(datasets, tmp_path, damage, message):
    damage(datasets, tmp_path / "episodes.zarr")
    (tmp_path / "episodes.zarr").rename(tmp_path / "demos.zarr")
    before = tree_digest(tmp_path)
    result = robot_rl(["train", "--env", "robot_rl/ArmPickCube-v0", "--demos", "demos.zarr", "--steps", "10",
                       "--run-dir", "run"], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"robot-rl train: {message}"), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demos.zarr"] and tree_digest(tmp_path) == before
