"""MuJoCo's own viewer window on the simulated scene, where a display exists (a virtual X display
here): the window shows the arm, table and cube while the simulator keeps its control rate; without
a display `viewer:=always` is refused with the reason and `auto` goes on without the window."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import numpy as np
import pytest

pytest.importorskip("rclpy")

from robot_rl.ros.graph import loopback_environment  # noqa: E402
from robot_rl.ros.probe import RosProbe, fresh_domain_id  # noqa: E402


def _free_display() -> int:
    for number in range(90, 200):
        if not os.path.exists(f"/tmp/.X11-unix/X{number}") and not os.path.exists(f"/tmp/.X{number}-lock"):
            return number
    raise RuntimeError("no free X display number")


@pytest.fixture
def display():
    if shutil.which("Xvfb") is None:
        pytest.fail("Xvfb is missing: `make setup` installs it (Debian package xvfb)")
    number = _free_display()
    server = subprocess.Popen(["Xvfb", f":{number}", "-screen", "0", "1024x768x24"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    end = time.monotonic() + 10
    while not os.path.exists(f"/tmp/.X11-unix/X{number}"):
        assert time.monotonic() < end and server.poll() is None, "Xvfb did not start"
        time.sleep(0.05)
    yield f":{number}"
    server.terminate()
    server.wait(timeout=10)


def _sim(tmp_path, domain_id: int, viewer: str, display: str | None) -> subprocess.Popen:
    env = {**os.environ, **loopback_environment(domain_id)}
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    if display:
        env["DISPLAY"] = display
    return subprocess.Popen([sys.executable, "-m", "robot_rl.nodes.arm_sim", "--ros-args", "-p",
                             "clock_mode:=realtime", "-p", f"viewer:={viewer}"], env=env,
                            stdout=open(tmp_path / "arm_sim.log", "wb"), stderr=subprocess.STDOUT)


@contextmanager
def _stepping_sim(tmp_path, viewer: str, display: str | None, min_steps: int):
    """The simulator node with `viewer`, stepping (a probe on its domain watches it); stopped with
    Ctrl-C on the way out, which it must survive with exit 0."""
    domain_id = fresh_domain_id()
    sim = _sim(tmp_path, domain_id, viewer, display)
    probe = RosProbe(domain_id, "viewer_probe")
    probe.watched = "arm_sim"
    try:
        probe.wait_for(lambda: probe.value("steps") >= min_steps, 60, f"the simulator stepping (viewer {viewer})")
        yield probe
    finally:
        probe.close()
        sim.send_signal(signal.SIGINT)
        assert sim.wait(timeout=30) == 0, (tmp_path / "arm_sim.log").read_text()[-2000:]


def _steps_at_next_diagnostics(probe) -> tuple[float, float]:
    """The simulator's step count as its next diagnostics message (once a second) brings it, and when it came: a
    rate between two such arrivals has no second's rounding in it."""
    last = probe.value("steps")
    probe.wait_for(lambda: probe.value("steps") != last, 5, "the simulator's next diagnostics")
    return probe.value("steps"), time.monotonic()


def test_the_viewer_window_shows_the_scene_at_the_control_rate(tmp_path, display):
    from PIL import ImageGrab

    with _stepping_sim(tmp_path, "always", display, min_steps=5) as probe:
        start, t0 = _steps_at_next_diagnostics(probe)
        probe.spin(4.0)
        end, t1 = _steps_at_next_diagnostics(probe)
        rate = (end - start) / (t1 - t0)
        screen = np.asarray(ImageGrab.grab(xdisplay=display).convert("RGB")).astype(int)
    assert 6.0 <= rate <= 13.0  # the window does not hold the 10 Hz loop
    red = (screen[..., 0] > 150) & (screen[..., 1] < 60) & (screen[..., 2] < 60)
    assert screen.std() > 20 and red.sum() > 30  # a rendered scene with the red cube in it


def test_without_a_display_always_is_refused_and_auto_goes_on(tmp_path):
    sim = _sim(tmp_path, fresh_domain_id(), "always", None)
    assert sim.wait(timeout=60) == 2
    assert "viewer:=always needs a display (DISPLAY is not set)" in (tmp_path / "arm_sim.log").read_text()
    with _stepping_sim(tmp_path, "auto", None, min_steps=3):
        pass
    assert "no MuJoCo viewer window (DISPLAY is not set)" in (tmp_path / "arm_sim.log").read_text()
