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
from robot_rl.robots.arm.sim import LIFT_OBS_LAYOUT  # noqa: E402
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
        self.observations = 0
        self.status: SessionStatus | None = None
        self.person_driven_steps = 0
        """Steps the person drove, as the session statuses show them (the actor publishes one a step, and more)."""
        self.node.create_subscription(PoseStamped, "arm/ee_pose", lambda m: setattr(self, "ee", _xyz(m)), qos.SENSOR)
        self.node.create_subscription(PoseStamped, "cube/pose", self._on_cube, qos.SENSOR)
        self.node.create_subscription(String, "session/status", self._on_status, qos.EVENTS)

    def _on_status(self, msg: String) -> None:
        before, self.status = self.status, SessionStatus.from_json(msg.data)
        stepped = before is None or (self.status.episode, self.status.step) != (before.episode, before.step)
        self.person_driven_steps += self.status.driver == "person" and stepped

    def _on_cube(self, msg: PoseStamped) -> None:
        self.cube = _xyz(msg)
        self.observations += 1


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


def _next_key(ee: np.ndarray, cube: np.ndarray, grasped: bool, tolerance: float = 0.007) -> tuple[str, float]:
    """One key toward the goal a person has in mind (over the cube, down to it, close, lift), and how long
    they hold it: far away a while (it moves faster and faster), close by a tap."""
    if grasped:
        return "page_up", 0.3
    dx, dy = cube[:2] - ee[:2]
    # the arrows as the wrist picture shows them: right +x, up +y
    for distance, keys in ((dx, ("right", "left")), (dy, ("up", "down")), (cube[2] - ee[2], ("page_up", "page_down"))):
        if abs(distance) > tolerance:
            return keys[0] if distance > 0 else keys[1], 0.25 if abs(distance) > 0.04 else 0.0
    return "close", 0.0


def _clock_readings(text: str) -> list[tuple[int, int]]:
    """(episode, seconds on its clock) of each status line the console printed."""
    readings = []
    for line in re.split(r"[\r\n]+|\x1b\[K", text):  # plain lines, or one line redrawn in place
        if re.match(r"\[\s*\d+s\] ", line):
            assert line.count("episode ") <= 1, f"one episode number per status line: {line!r}"
            match = re.search(r"episode (\d+)  (\d\d):(\d\d) / ", line)
            if match:
                readings.append((int(match[1]), 60 * int(match[2]) + int(match[3])))
    return readings


def _advancing(readings: list[tuple[int, int]], episodes: int) -> bool:
    """The status line's episode number went through `episodes` episodes and its clock ran within one."""
    numbers = [episode for episode, _ in readings]
    clocks = {episode: [t for e, t in readings if e == episode] for episode in numbers}
    return (numbers == sorted(numbers) and len(set(numbers)) >= episodes
            and any(len(set(ticks)) >= 3 and ticks == sorted(ticks) for ticks in clocks.values()))


def _drive_a_little(term: Terminal, eyes: Eyes, key: str) -> None:
    """The person taps `key` until the session shows them driving (a loaded machine may step only after the
    tap's hold has run out), then watches it drive a moment."""
    driven = eyes.person_driven_steps
    end = time.monotonic() + 30
    while time.monotonic() < end:
        term.type(key)
        tapped = time.monotonic()
        while time.monotonic() - tapped < 1.0 and eyes.person_driven_steps == driven:
            eyes.spin(0.05)
        if eyes.person_driven_steps > driven:
            eyes.spin(0.3)
            return
    raise AssertionError(f"the session never showed the person driving; terminal:\n{term.text[-2000:]}")


def _drive_to_the_cube_and_lift(term: Terminal, eyes: Eyes, rng: random.Random, lift: float, seen: list,
                                port: int) -> None:
    """The person grasps the cube and lifts it `lift` (steering by the scene as the view shows it)."""
    start_z = eyes.cube[2]
    grasped = False
    end = time.monotonic() + 150
    while time.monotonic() < end and eyes.cube[2] - start_z < lift:
        eyes.spin(rng.uniform(0.18, 0.35))  # a person's gap between key presses
        if len(seen) < 3 and eyes.status is not None and eyes.status.driver == "person":
            seen.append(_view_frame(port))
        key, held_s = _next_key(eyes.ee, eyes.cube, grasped)
        term.type(key, held_s)
        if key == "close":
            eyes.spin(1.0)  # watch the fingers close
            grasped = True
    assert eyes.cube[2] - start_z >= lift, f"the person never lifted the cube; terminal:\n{term.text[-3000:]}"


def test_a_person_records_at_the_keyboard_and_the_session_keeps_its_word(tmp_path):
    """The README's `record` at the keyboard, two episodes: the keys are listed at the start and on `?`; a
    wrong `s` (the cube on the table) is warned about and stored with the task's check beside it; a pause
    while the person lifts the cube as fast as the key goes freezes the scene (physics would carry the hand,
    which trails its target by 15 mm at full speed, and the cube on: a grasp in this scene does not slip, even
    tilted or off centre); `r` after the last episode records it again (the dataset holds the new one); the
    status line's episode number and clock advance; what the view showed while the person drove."""
    domain_id = fresh_domain_id()
    eyes = Eyes(domain_id)
    port = free_port()
    term = _record(tmp_path, domain_id, "--episodes", "2", "--episode-time-s", "90", "--reset-time-s", "2",
                   "--view-port", str(port), "--status-period", "1")
    rng = random.Random(0)
    seen: list = []
    try:
        eyes.wait_for(lambda: ">>> episode 0: GO" in term.text and eyes.ee is not None and eyes.cube is not None,
                      120, lambda: f"the GO prompt and the scene; terminal so far:\n{term.text[-2000:]}")
        assert term.text.count("keys: space take over") == 1
        term.type("help")
        eyes.wait_for(lambda: term.text.count("keys: space take over") == 2, 10, "the keys listed again on ?")

        _drive_a_little(term, eyes, "right")  # then says success with the cube on the table
        term.type("success")
        eyes.wait_for(lambda: "WARNING: episode 0 labelled success, but the task's own success check says failure"
                      in term.text, 20, lambda: f"the wrong label warned about; terminal:\n{term.text[-2000:]}")

        eyes.wait_for(lambda: ">>> episode 1: GO" in term.text, 30,
                      lambda: f"episode 1; terminal:\n{term.text[-2000:]}")
        _drive_to_the_cube_and_lift(term, eyes, rng, 0.02, seen, port)
        term.type("page_up", held_s=0.9)  # up, faster and faster
        term.type("pause")
        eyes.wait_for(lambda: eyes.status.phase == "paused", 5, "the pause")
        seen_then = eyes.observations  # the simulator may take one more step before it hears of the pause
        eyes.wait_for(lambda: eyes.observations >= seen_then + 2, 5, "the scene after the pause")
        held = eyes.cube.copy()
        eyes.spin(3.0)
        paused_drift = np.linalg.norm(eyes.cube - held)
        term.type("pause")
        eyes.wait_for(lambda: eyes.status.phase == "running", 5, "going on")
        term.type("failure")
        eyes.wait_for(lambda: "that was the last episode" in term.text, 30,
                      lambda: f"the review of the last episode; terminal:\n{term.text[-2000:]}")
        term.type("rerecord")  # record it again
        eyes.wait_for(lambda: ">>> episode 2: GO" in term.text, 30,
                      lambda: f"episode 1 again; terminal:\n{term.text[-2000:]}")
        _drive_a_little(term, eyes, "left")
        term.type("failure")
        code = term.wait_exit(60)
    finally:
        eyes.close()
    assert code == 0, term.text[-3000:]
    # Frozen, it stays exactly where it was: a running simulation moved it 0.4 mm in those 3 s (the grasp creeps).
    assert paused_drift < 0.0001, f"the cube moved {paused_drift * 1000:.2f} mm while paused"
    assert "episode 1 dropped: recording it again" in term.text
    assert _advancing(_clock_readings(term.text), 2), _clock_readings(term.text)
    data = EpisodeDataset(tmp_path / "demos.zarr")
    assert len(data) == 2
    wrong, again = data.episode(0), data.episode(1)
    assert wrong["success_label"][-1] == 1 and data.success_checks.tolist() == [0, 0]  # the label as given, the check
    assert again["success_label"][-1] == 0 and again["intervention"].any()
    assert again["state"][:, LIFT_OBS_LAYOUT["cube_lift"]].max() < 0.01  # the new episode 1, not the lifted one
    summary = json.loads((tmp_path / "run" / "record.json").read_text())
    assert summary["episodes_recorded"] == 2 and summary["episodes_discarded"] == 1
    assert summary["person_steps"] == sum(int(data.episode(i)["intervention"].sum()) for i in range(2))
    assert summary["takeovers"] >= 2
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
    assert re.search(r"record more into it with: robot-rl record .*--out \S*demos.zarr .*--append", term.text)
    assert not (tmp_path / "demos.zarr").exists() or len(EpisodeDataset(tmp_path / "demos.zarr")) == 0


def test_a_person_takes_over_during_training_from_the_keyboard(tmp_path):
    """`train --teleop keyboard` as the README writes it: the person's takeovers reach the learner
    as demonstrations, and the training run ends with its evaluation."""
    domain_id = fresh_domain_id()
    eyes = Eyes(domain_id)
    port = free_port()
    term = _session("train --task arm_lift --teleop keyboard", tmp_path, domain_id, "--steps", "150",
                    "--eval-episodes", "1", "--episode-time-s", "5", "--set", "learner.warmup_transitions=50",
                    "--set", "robot_rl.demos={episodes: 0}", "--view-port", str(port))  # only the person's demos
    rng = random.Random(1)
    try:
        eyes.wait_for(lambda: ">>> episode 1: GO" in term.text and eyes.ee is not None,
                      120, lambda: f"the second episode; terminal so far:\n{term.text[-2000:]}")
        driven = None
        for _ in range(12):  # the person steers toward the cube for a few seconds
            term.type(*_next_key(eyes.ee, eyes.cube, grasped=False))
            eyes.spin(rng.uniform(0.15, 0.3))
            # the view hears the status on its own subscription: it may show the change a moment later
            shown = driven is not None and driven[1]["X-Session-Driver"] == "person"
            if not shown and eyes.status is not None and eyes.status.driver == "person":
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


# wall_clock: in lockstep the first 30 s episode takes a few wall-clock seconds, and under a second test process's load
# the console's status subscription matched after it had ended (CI: no ">>> episode 0: GO" in the terminal).
@pytest.mark.wall_clock
def test_train_at_the_keyboard_takes_a_persons_episode_length(tmp_path):
    """`train --teleop --episode-time-s 30`: 30 s episodes (300 steps at 10 Hz; the simulator runs in lockstep
    here, so 30 s of the robot's time pass in a few of the wall clock's); the status line shows one episode
    number and a running clock; Ctrl-C prints the command that carries the run on."""
    domain_id = fresh_domain_id()
    term = _session("train --task arm_lift --teleop keyboard", tmp_path, domain_id, "--steps", "100000",
                    "--episode-time-s", "30", "--set", "arm_sim.clock_mode=lockstep",
                    "--set", "robot_rl.demos={episodes: 0}", "--view", "off", "--status-period", "0.2")
    episodes = tmp_path / "run" / "episodes.jsonl"
    end = time.monotonic() + 180
    while time.monotonic() < end and not (episodes.exists() and len(episodes.read_text().splitlines()) >= 2
                                          and _advancing(_clock_readings(term.text), 2)):
        time.sleep(0.2)
    os.write(term.fd, b"\x03")  # Ctrl-C
    code = term.wait_exit(60)
    assert code == 130, term.text[-3000:]
    assert ">>> episode 0: GO (30 s)" in term.text and "keys: space take over" in term.text
    lengths = [json.loads(line)["steps"] for line in episodes.read_text().splitlines()]
    assert lengths[:2] == [300, 300], lengths  # nothing ends an untrained policy's episode before its 30 s
    assert _advancing(_clock_readings(term.text), 2), term.text[-3000:]
    resume = re.search(r"carry the run on with: (robot-rl train .*?)\r?\n", term.text)
    assert resume and f"--run-dir {tmp_path / 'run'} --resume" in resume[1] and "--episode-time-s 30" in resume[1]
