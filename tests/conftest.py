"""When a test that ran nodes as processes fails, its report carries the end of each node's log
(written under the test's tmp_path): in CI that is the only place a node's own words survive."""

from __future__ import annotations

from pathlib import Path

import pytest

LOG_TAIL_LINES = 60


@pytest.fixture
def forget_env_namespace(monkeypatch):
    """forget(namespace): the namespace's Gymnasium ids unregistered and its module unimported, as in a fresh
    `robot-rl` process, whatever ran before in this one (restored afterwards)."""
    import sys

    import gymnasium as gym

    def forget(namespace: str) -> None:
        for env_id in [i for i in gym.registry if i.startswith(f"{namespace}/")]:
            monkeypatch.delitem(gym.registry, env_id)
        monkeypatch.delitem(sys.modules, namespace, raising=False)

    return forget


def _node_logs(tmp_path: Path) -> list[Path]:
    return sorted(p for p in tmp_path.rglob("*.log") if p.is_file() and "journal" not in p.parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    tmp_path = item.funcargs.get("tmp_path") if hasattr(item, "funcargs") else None
    if report.when != "call" or not report.failed or tmp_path is None:
        return
    for log in _node_logs(tmp_path):
        lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        report.sections.append((f"node log {log.relative_to(tmp_path)} (last {len(lines)} lines)", "\n".join(lines)))


SLOWEST_MODULES = ("test_recovery", "test_env_anything", "test_learning", "test_encoders",
                   "test_learner_throughput_cuda_paths", "test_robot_package", "test_person_session",
                   "test_ros_conventions", "test_fleet", "test_bad_inputs", "test_compile_cache", "test_env_graph",
                   "test_settings", "test_graph", "test_quad_nodes", "test_hil_graph", "test_cli",
                   "test_quad_juggle_mjx", "test_pretrain_env", "test_pixel_graph", "test_car_graph",
                   "test_rerun_view")
"""The modules that took longest, slowest first (`--durations=0` of `make test`'s first pass, 2026-11-30: 160 s
down to 27 s each; the 48 others took 25 s or less). `make test` hands whole modules to its two workers in this
order (`--no-loadscope-reorder`: xdist would otherwise order them by their number of tests), so the last to start
are short and neither worker runs dry minutes before the other. Only the order changes; a module missing here runs
after them."""


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_MODULES)}
    items.sort(key=lambda item: rank.get(Path(item.nodeid.split("::")[0]).stem, len(rank)))


def pytest_sessionstart(session):
    """Refuses to test the nodes on other code than the tests'. Nodes start as `python -P -m robot_rl.nodes.X` (and
    the `robot-rl` command from the venv's script), so they import the environment's install of robot_rl, while
    `python -m pytest` puts the working directory first: an editable install made from another clone would run that
    clone's nodes beside this checkout's tests."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller has checked the same venv
        return
    import subprocess
    import sys
    import tempfile

    import robot_rl

    ours = Path(robot_rl.__file__).resolve()
    found = subprocess.run([sys.executable, "-P", "-c", "import robot_rl; print(robot_rl.__file__)"],
                           capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout.strip()
    if not found or Path(found).resolve() != ours:
        pytest.exit(f"the tests import robot_rl from {ours.parent}, but its nodes ({sys.executable} -P) would import "
                    f"it from {Path(found).parent if found else 'nowhere'}: they would run other code. Install the "
                    f"tests' copy: {sys.executable} -m pip install --no-deps -e {ours.parents[1]}", returncode=4)
