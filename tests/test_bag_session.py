"""A ROS user's bag of a person's session becomes the same training data as the session's own recording:
`robot-rl record --teleop keyboard` in a pseudo-terminal, typed into, while `robot-rl record-bag` records the
task's topics; `robot-rl dataset import run.mcap` then equals the session's zarr dataset step for step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rclpy")
pytest.importorskip("mcap_ros2")

from std_msgs.msg import String  # noqa: E402

from robot_rl.cli import main  # noqa: E402
from robot_rl.ros.bag_import import EPISODE_EVENTS, actor_topics  # noqa: E402
from robot_rl.ros.step_log import STEP_TOPIC  # noqa: E402
from robot_rl.data.episodes import STEP_DTYPES, EpisodeDataset  # noqa: E402
from robot_rl.ros import qos  # noqa: E402
from robot_rl.ros.graph import loopback_environment  # noqa: E402
from robot_rl.ros.probe import RosProbe, fresh_domain_id  # noqa: E402
from robot_rl.tasks import get_task  # noqa: E402
from robot_rl.teleop.session_status import SessionStatus  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from terminal import Terminal  # noqa: E402

TASK = "arm_pick_cube"  # the cameras' frames are compared too


def _bag_topics() -> list[str]:
    """What a ROS user records of the task: its cameras, the actor's state and commands, the step log."""
    return [*actor_topics(get_task(TASK)).types, f"/{STEP_TOPIC}", f"/{EPISODE_EVENTS}"]


class Status(RosProbe):
    def __init__(self, domain_id: int):
        super().__init__(domain_id, "bag_session_status")
        self.status: SessionStatus | None = None
        self.node.create_subscription(String, "session/status", self._on_status, qos.EVENTS)

    def _on_status(self, msg: String) -> None:
        self.status = SessionStatus.from_json(msg.data)


def test_a_bag_of_a_keyboard_session_imports_to_the_sessions_own_recording(tmp_path):
    domain_id = fresh_domain_id()
    topics = _bag_topics()
    bag, log = tmp_path / "run.mcap", tmp_path / "record-bag.log"
    recorder = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", "record-bag", "--topics", *topics, "--out",
                                 str(bag)], env={**loopback_environment(domain_id), "PYTHONUNBUFFERED": "1"},
                                stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    status = Status(domain_id)
    term = Terminal([sys.executable, "-m", "robot_rl.cli", "record", "--task", TASK, "--teleop", "keyboard",
                     "--out", str(tmp_path / "session.zarr"), "--episodes", "2", "--episode-time-s", "1.2",
                     "--reset-time-s", "1", "--view", "off", "--run-dir", str(tmp_path / "run"),
                     "--domain-id", str(domain_id)],
                    {**os.environ, **loopback_environment(domain_id), "TERM": "xterm"})
    try:
        status.wait_for(lambda: log.read_text().count("subscribed to") == len(topics), 120,
                        lambda: f"the recorder on every topic; its log:\n{log.read_text()}\n"
                                f"terminal:\n{term.text[-2000:]}")
        # Episodes nobody drives are discarded by the session (and by the import): the person drives only
        # those that began after the recorder listened (a countdown still running counts as begun after).
        status.spin(0.5)
        status.wait_for(lambda: status.status is not None, 60, "the session's status")
        first = status.status.episode + (status.status.phase != "countdown")
        labelled = False
        end = time.monotonic() + 120
        while time.monotonic() < end and status.status.phase != "done" and status.status.kept < 2:
            s = status.status
            if s.phase == "running" and s.episode >= first:
                if s.episode > first and s.step >= 4 and not labelled:
                    term.type("success")  # the second driven episode ends labelled a success
                    labelled = True
                else:
                    term.type(("up", "right", "page_down")[s.step % 3])
            status.spin(0.15)
        code = term.wait_exit(60)
    finally:
        status.close()
        recorder.send_signal(signal.SIGINT)
        recorder_code = recorder.wait(timeout=30)
    assert code == 0, term.text[-3000:]
    assert recorder_code == 0, log.read_text()
    session = EpisodeDataset(tmp_path / "session.zarr")
    assert len(session) == 2 and labelled

    assert main(["dataset", "import", str(bag), "--out", str(tmp_path / "imported.zarr")]) == 0
    imported = EpisodeDataset(tmp_path / "imported.zarr")
    assert len(imported) == len(session)
    for index in range(len(session)):
        ours, theirs = imported.episode(index), session.episode(index)
        assert len(ours["action"]) == len(theirs["action"]) >= 5
        for camera in ("front", "wrist"):
            np.testing.assert_array_equal(ours[camera], theirs[camera])
        np.testing.assert_allclose(ours["state"], theirs["state"], atol=1e-6)
        np.testing.assert_allclose(ours["action"], theirs["action"], atol=1e-6)
        for name in set(STEP_DTYPES) - {"action", "stamp"}:  # stamp: the session's is its wall clock
            np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    assert imported.success_checks.tolist() == session.success_checks.tolist()
    flags = np.concatenate([session.episode(i)["intervention"] for i in range(len(session))])
    assert flags.any()  # the person's steps, flagged as theirs
    assert session.episode(1)["success_label"][-1] == 1
    assert {k: v for k, v in imported.task_config.items() if k != "source"} == \
        {k: v for k, v in session.task_config.items() if k != "source"}
