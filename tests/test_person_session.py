"""A person at the keyboard: the README's `robot-rl record` and `robot-rl train --teleop keyboard`
in a pseudo-terminal, typed into with human gaps. The typing person steers by what the session
shows them (the scene, as the view shows it: gripper and cube positions; the console's prompts; the
success estimate), never by a schedule, so a slow machine only makes them slower. What the person's
view showed is read back from it (frames and the status each was drawn with)."""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from geometry_msgs.msg import PoseStamped  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from robot_rl.data.episodes import EpisodeDataset  # noqa: E402
from robot_rl.ros import qos  # noqa: E402
from robot_rl.ros.graph import loopback_environment  # noqa: E402
from robot_rl.ros.probe import RosProbe, free_port, fresh_domain_id  # noqa: E402
from robot_rl.teleop.session_status import SessionStatus  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from terminal import Terminal  # noqa: E402

README = Path(__file__).resolve().parents[1] / "README.md"

class Eyes(RosProbe):
    """What the person sees of the scene (gripper and cube, as in the view) and of the session."""

    def __init__(self, domain_id: int):
        super().__init__(domain_id, "person_eyes")
        self.ee = self.cube = None
        self.status: SessionStatus | None = None
        self.node.create_subscription(PoseStamped, "arm/ee_pose", lambda m: setattr(self, "ee", _xyz(m)), qos.SENSOR)
        self.node.create_subscription(PoseStamped, "cube/pose", lambda m: setattr(self, "cube", _xyz(m)), qos.SENSOR)
        self.node.create_subscription(String, "session/status", self._on_status, qos.EVENTS)

    def _on_status(self, msg: String) -> None:
        self.status = SessionStatus.from_json(msg.data)


def _xyz(msg: PoseStamped) -> np.ndarray:
    p = msg.pose.position
    return np.array([p.x, p.y, p.z])


def readme_command(prefix: str) -> list[str]:
    """The README's command line that starts with `prefix` (its comment dropped), run with this Python."""
    for line in README.read_text().splitlines():
        if line.startswith(prefix):
            words = shlex.split(line.split("#")[0])
            return [sys.executable, "-m", "robot_rl.cli", *words[1:]]
    raise AssertionError(f"README.md has no command line starting {prefix!r}")


def _session(command: str, tmp_path: Path, domain_id: int, *extra: str) -> Terminal:
    """The README's command in a terminal; `extra` (later flags win) keeps its outputs in tmp_path."""
    env = {**os.environ, **loopback_environment(domain_id), "TERM": "xterm"}
    argv = [*readme_command(f".venv/bin/robot-rl {command}"), "--run-dir", str(tmp_path / "run"),
            "--domain-id", str(domain_id), *extra]
    return Terminal(argv, env)


def _record(tmp_path: Path, domain_id: int, *extra: str) -> Terminal:
    return _session("record --task arm_lift --teleop keyboard", tmp_path, domain_id,
                    "--out", str(tmp_path / "demos.zarr"), "--status-period", "2", *extra)


def _view_frame(port: int) -> tuple[np.ndarray, dict]:
    """The newest frame of the person's view and the headers saying what it showed."""
    from PIL import Image

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/frame.jpg", timeout=5) as response:
        headers = dict(response.headers)
        return np.asarray(Image.open(response).convert("RGB")), headers


def _next_key(ee: np.ndarray, cube: np.ndarray, grasped: bool, tolerance: float = 0.007) -> str:
    """One key toward the goal a person has in mind: over the cube, down to it, close, lift."""
    if grasped:
        return "page_up"
    dx, dy = cube[:2] - ee[:2]
    if abs(dx) > tolerance:
        return "up" if dx > 0 else "down"
    if abs(dy) > tolerance:
        return "left" if dy > 0 else "right"
    if ee[2] - cube[2] > tolerance:
        return "page_down"
    return "close"


def test_a_person_at_the_keyboard_grasps_lifts_and_labels_a_demonstration(tmp_path):
    domain_id = fresh_domain_id()
    eyes = Eyes(domain_id)
    port = free_port()
    term = _record(tmp_path, domain_id, "--episode-time-s", "90", "--reset-time-s", "1", "--teleop-speed", "0.25",
                   "--view-port", str(port))
    rng = random.Random(0)
    seen = []
    try:
        eyes.wait_for(lambda: ">>> episode 0: GO" in term.text and eyes.ee is not None and eyes.cube is not None,
                      120, f"the GO prompt and the scene; terminal so far:\n{term.text[-2000:]}")
        start_cube = eyes.cube.copy()
        grasped, labelled = False, False
        end = time.monotonic() + 150
        while time.monotonic() < end and not labelled:
            eyes.spin(rng.uniform(0.18, 0.35))  # a person's gap between key presses
            if eyes.status is not None and eyes.status.success:
                term.type("success")  # the view shows the cube lifted: label it
                labelled = True
                break
            if len(seen) < 3 and eyes.status is not None and eyes.status.driver == "person":
                seen.append(_view_frame(port))
            key = _next_key(eyes.ee, eyes.cube, grasped)
            if key == "close":
                term.type("close")
                eyes.spin(1.0)  # watch the fingers close
                grasped = True
                continue
            term.type(key)
        assert labelled, f"the person never saw the cube lifted; terminal:\n{term.text[-3000:]}"
        lifted = eyes.cube[2] - start_cube[2]
        code = term.wait_exit(60)
    finally:
        eyes.close()
    assert code == 0, term.text[-3000:]
    assert lifted > 0.03  # the simulator confirms the lift
    summary = json.loads((tmp_path / "run" / "record.json").read_text())
    assert summary["episodes_recorded"] == 1 and summary["episodes_discarded"] == 0
    episode = EpisodeDataset(tmp_path / "demos.zarr").episode(0)
    flags = episode["intervention"].astype(bool)
    assert flags.sum() >= 10 and flags[-1]  # the person's actions, flagged as theirs
    actions = episode["action"][flags]
    assert (actions[:, 3] > 0.5).any() and (actions[:, 2] > 0.1).any()  # they closed the gripper and lifted
    assert episode["success_label"][-1] == 1
    # What the view showed while the person drove: the scene, who drives and the episode clock.
    assert len(seen) == 3
    for frame, headers in seen:
        assert frame.shape[0] >= 300 and frame[60:-60].std() > 20  # camera images, not a placeholder
        assert headers["X-Session-Driver"] == "person" and headers["X-Session-Phase"] == "running"
        assert re.fullmatch(r"\d\d:\d\d / 01:30", headers["X-Session-Clock"])


def test_nobody_at_the_keyboard_stores_no_episode_and_says_why(tmp_path):
    domain_id = fresh_domain_id()
    term = _record(tmp_path, domain_id, "--episode-time-s", "2", "--reset-time-s", "0", "--view", "off")
    end = time.monotonic() + 120
    while time.monotonic() < end and "nobody drove it" not in term.text:
        time.sleep(0.2)
    assert "discarded: nobody drove it" in term.text, term.text[-3000:]
    os.write(term.fd, b"\x03")  # Ctrl-C in the terminal ends the session
    code = term.wait_exit(60)
    assert code == 130, term.text[-3000:]
    assert not (tmp_path / "demos.zarr").exists() or len(EpisodeDataset(tmp_path / "demos.zarr")) == 0


def test_a_person_takes_over_during_training_from_the_keyboard(tmp_path):
    """`train --teleop keyboard` as the README writes it: the person's takeovers reach the learner
    as demonstrations, and the training run ends with its evaluation."""
    domain_id = fresh_domain_id()
    eyes = Eyes(domain_id)
    port = free_port()
    term = _session("train --task arm_lift --teleop keyboard", tmp_path, domain_id, "--steps", "150",
                    "--eval-episodes", "1", "--set", "learner.warmup_transitions=50",
                    "--set", "robot_rl.demos={episodes: 0}", "--view-port", str(port))  # only the person's demos
    rng = random.Random(1)
    try:
        eyes.wait_for(lambda: ">>> episode 1: GO" in term.text and eyes.ee is not None,
                      120, f"the second episode; terminal so far:\n{term.text[-2000:]}")
        driven = None
        for _ in range(12):  # the person steers toward the cube for a few seconds
            term.type(_next_key(eyes.ee, eyes.cube, grasped=False))
            eyes.spin(rng.uniform(0.15, 0.3))
            if driven is None and eyes.status is not None and eyes.status.driver == "person":
                driven = _view_frame(port)
        code = term.wait_exit(180)
    finally:
        eyes.close()
    assert code == 0, term.text[-3000:]
    assert driven is not None and driven[1]["X-Session-Driver"] == "person"
    episodes = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    person_steps = sum(e["intervention_steps"] for e in episodes)
    learner = json.loads((tmp_path / "run" / "learner_summary.json").read_text())
    assert person_steps >= 5 and learner["demo_size"] == person_steps  # stored as demonstrations, all of them
    assert json.loads((tmp_path / "run" / "eval.json").read_text())["episodes"] == 1
