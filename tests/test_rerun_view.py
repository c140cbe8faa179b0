"""The session in Rerun: RerunSession's entity paths and values read back from the .rrd it writes,
the live mapping of a graph session's topics (LiveRerun), `robot-rl view` replaying a dataset and a
run, the session_view node logging what it hears, and `robot-rl record --view rerun`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rerun")

from rerun.chunk import RrdReader  # noqa: E402

from robot_rl.cli import main  # noqa: E402
from robot_rl.data.episodes import EpisodeSchema, EpisodeWriter  # noqa: E402
from robot_rl.outputs import TEMP_PREFIX, UserError  # noqa: E402
from robot_rl.teleop.session_status import SessionStatus  # noqa: E402
from robot_rl.view.rerun_log import LiveRerun, RerunConfig, RerunSession  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from rrd import read_rrd, texts, values  # noqa: E402

STEP_ENTITIES = {"/cameras/front", "/cameras/wrist", "/state", "/action/executed", "/action/policy",
                 "/action/human", "/driver", "/driver/person", "/reward", "/value", "/done_probability", "/episode",
                 "/episode/end", "/episode/success"}


def _frame(seed: int, size: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


# ---- RerunSession --------------------------------------------------------------------------------


def test_a_session_reads_back_with_its_entity_paths_frames_actions_and_drivers(tmp_path):
    out = tmp_path / "session.rrd"
    drivers = ["policy", "policy", "person", "person", "policy", "holding"]
    config = RerunConfig(str(out), cameras=("front", "wrist"), state_names=("x", "y", "z"),
                         action_names=("dx", "grip"))
    with RerunSession(config) as session:
        for step, driver in enumerate(drivers):
            action = np.array([0.1 * step, -1.0], np.float32)
            policy = np.array([0.5, 1.0]) if driver != "person" else np.array([-0.5, 1.0])  # known even then
            session.step(step, {"front": _frame(step), "wrist": _frame(100 + step)}, np.arange(3.0) + step,
                         action, policy, driver, reward=0.25 * step, value=1.0 - 0.1 * step,
                         done_probability=0.05 * step, episode=step // 3, wall_time=1.7e9 + step)
            if step == 2:
                session.episode_end(0, True, "lifted")
        session.step(len(drivers), {"front": _frame(99), "wrist": _frame(199)}, None, None, None, "holding",
                     episode=1)  # the final observation: nothing done from it
        session.episode_end(1, None, "time limit")
    assert out.is_file() and not list(tmp_path.glob(f"{TEMP_PREFIX}*"))

    rec = read_rrd(out)
    assert STEP_ENTITIES <= set(rec)
    assert len(rec["/cameras/front"]["Image:buffer"]) == len(drivers) + 1
    assert bytes(rec["/cameras/wrist"]["Image:buffer"][3][1][0]) == _frame(103).tobytes()  # the very pixels
    assert rec["/state"]["SeriesLines:names"] == [(None, ["x", "y", "z"])]
    assert values(rec, "/state")[1] == [1.0, 2.0, 3.0]
    executed = rec["/action/executed"]["Scalars:scalars"]
    assert [step for step, _ in executed] == list(range(len(drivers)))
    assert executed[4][1] == pytest.approx([0.4, -1.0])
    human = rec["/action/human"]["Scalars:scalars"]
    assert [step for step, _ in human] == [2, 3] and human[1][1] == pytest.approx([0.3, -1.0])
    assert values(rec, "/action/policy")[2] == [-0.5, 1.0]
    assert texts(rec, "/driver") == ["policy", "person", "policy", "holding"]  # changes only
    assert [v[0] for v in values(rec, "/driver/person")] == [0, 0, 1, 1, 0, 0, 0]
    assert [v[0] for v in values(rec, "/reward")] == pytest.approx([0.25 * s for s in range(len(drivers))])
    assert values(rec, "/value")[3] == pytest.approx([0.7])
    assert values(rec, "/done_probability")[5] == pytest.approx([0.25])
    assert [v[0] for v in values(rec, "/episode")] == [0, 0, 0, 1, 1, 1, 1]
    assert texts(rec, "/episode/end") == ["episode 0 ended: success (lifted)",
                                          "episode 1 ended: not labelled (time limit)"]
    assert values(rec, "/episode/success") == [[1.0]]


def test_jpeg_frames_are_encoded_images_and_outputs_are_not_replaced_unasked(tmp_path):
    out = tmp_path / "view.rrd"
    with RerunSession(RerunConfig(str(out), cameras=("front",), jpeg_quality=80)) as session:
        session.step(0, {"front": _frame(0, 32)}, None, np.zeros(2), None, "policy")
    assert len(read_rrd(out)["/cameras/front"]["EncodedImage:blob"]) == 1
    before = out.read_bytes()
    with pytest.raises(UserError, match="already exists; pass --overwrite"):
        RerunSession(RerunConfig(str(out)))
    assert out.read_bytes() == before and not list(tmp_path.glob(f"{TEMP_PREFIX}*"))
    with RerunSession(RerunConfig(str(out), overwrite=True)) as session:
        session.step(0, {}, None, np.zeros(2), None, "person")
    assert "/cameras/front" not in read_rrd(out)  # replaced


def test_bad_targets_drivers_images_and_names_are_refused():
    for target in ("view.txt", "view", "http://host:9876"):
        with pytest.raises(ValueError, match="expected a file ending in .rrd"):
            RerunConfig(target)
    with pytest.raises(ValueError, match="jpeg_quality"):
        RerunConfig("x.rrd", jpeg_quality=101)
    with pytest.raises(ValueError, match="distinct"):
        RerunConfig("x.rrd", cameras=("front", "front"))


def test_bad_step_inputs_are_refused_naming_them(tmp_path):
    with RerunSession(RerunConfig(str(tmp_path / "x.rrd"), state_names=("a", "b"))) as session:
        with pytest.raises(ValueError, match="driver 'nobody'"):
            session.driver("nobody")
        with pytest.raises(ValueError, match="camera 'front': expected an RGB uint8"):
            session.cameras({"front": np.zeros((4, 4, 3), np.float32)})
        with pytest.raises(ValueError, match="3 values but 2 names"):
            session.state(np.zeros(3))
        with pytest.raises(ValueError, match="action kind 'teacher'"):
            session.action("teacher", np.zeros(2))


def test_spawning_a_viewer_without_a_display_says_to_save_a_file(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(UserError, match="needs a display.*rerun FILE.rrd"):
        RerunSession(RerunConfig("spawn"))


# ---- the live mapping of a graph session ---------------------------------------------------------


def test_live_session_counts_steps_across_episodes_and_ends_each_episode(tmp_path):
    out = tmp_path / "live.rrd"
    live = LiveRerun(RerunSession(RerunConfig(str(out), cameras=("front",))))
    wall = 1.7e9
    for episode, steps, driver in ((0, 3, "policy"), (1, 2, "person")):
        for step in range(1, steps + 1):
            live.on_status(SessionStatus(phase="running", driver=driver, episode=episode, step=step,
                                         last_reward=0.5 * episode, success=episode == 1), wall)
            live.on_camera("front", _frame(step), wall)
            live.on_gripper("executed", 1.0)
            live.on_twist("executed", (0.1, 0, 0, 0, 0, 0), wall)
            live.on_twist("human", (0, 0.2, 0, 0, 0, 0), wall)
            live.on_joints(["j1", "j2"], np.array([0.1, 0.2]), wall)
            live.on_reward(0.3, 0.9, wall)
    live.on_status(SessionStatus(phase="countdown", driver="person", episode=2, step=0), wall)
    live.session.close()

    rec = read_rrd(out)
    assert [step for step, _ in rec["/cameras/front"]["Image:buffer"]] == [1, 2, 3, 4, 5]  # 3 + 2 steps
    assert texts(rec, "/episode/end") == ["episode 0 ended: failure (the next episode began)",
                                          "episode 1 ended: success (the next episode began)"]
    assert values(rec, "/action/executed")[0] == pytest.approx([0.1, 0, 0, 0, 0, 0, 1.0])
    assert rec["/action/executed"]["SeriesLines:names"][0][1][-1] == "gripper"
    assert len(values(rec, "/action/policy")) == 3  # while the policy drove
    assert values(rec, "/action/human")[0] == pytest.approx([0, 0.2, 0, 0, 0, 0, 0.0])
    assert rec["/state"]["SeriesLines:names"] == [(None, ["j1", "j2"])]
    assert values(rec, "/done_probability")[0] == pytest.approx([0.9])
    assert texts(rec, "/driver") == ["policy", "person"]


# ---- robot-rl view -------------------------------------------------------------------------------


def _dataset(path: Path, lengths=(3, 2)) -> list[np.ndarray]:
    """An episode dataset whose episodes have `lengths` steps; the second one's step 1 is a person's."""
    writer = EpisodeWriter(path, EpisodeSchema({"front": (8, 8, 3)}, 2, 2), {"task": "test"})
    interventions = []
    seed = 0
    for episode, length in enumerate(lengths):
        flags = np.array([episode == 1 and k == 1 for k in range(length)])
        for k in range(length):
            writer.add_step({"front": _frame(seed), "state": np.array([episode, k], np.float32)},
                            np.array([k, -k], np.float32), reward=float(k), terminated=k == length - 1,
                            truncated=False, intervention=bool(flags[k]),
                            success_label=bool(episode == 0) if k == length - 1 else None, stamp=1.7e9 + seed)
            seed += 1
        writer.end_episode({"front": _frame(seed), "state": np.array([episode, length], np.float32)})
        seed += 1
        interventions.append(flags)
    return interventions


def test_view_replays_a_dataset_one_frame_per_observation(tmp_path, capsys):
    data, out = tmp_path / "demos.zarr", tmp_path / "demos.rrd"
    flags = _dataset(data)
    assert main(["view", str(data), "--out", str(out)]) == 0
    assert "7 observations of 1 dataset(s)" in capsys.readouterr().out
    rec = read_rrd(out)
    frames = rec["/cameras/front"]["Image:buffer"]
    assert len(frames) == 3 + 1 + 2 + 1  # T + 1 per episode
    assert bytes(frames[4][1][0]) == _frame(4).tobytes()  # episode 1's first observation
    assert len(rec["/action/executed"]["Scalars:scalars"]) == 5
    human = rec["/action/human"]["Scalars:scalars"]
    assert len(human) == int(sum(f.sum() for f in flags)) == 1 and human[0][1] == pytest.approx([1.0, -1.0])
    assert texts(rec, "/driver") == ["policy", "person"]
    assert texts(rec, "/episode/end")[0] == "episode 0 ended: success (terminated, demos.zarr)"
    assert values(rec, "/state")[6] == [1.0, 2.0]  # episode 1's final observation

    only = tmp_path / "last.rrd"
    assert main(["view", str(data), "--out", str(only), "--episodes", "-1"]) == 0
    assert len(read_rrd(only)["/cameras/front"]["Image:buffer"]) == 3


def test_view_refuses_without_out_or_display_bad_episodes_and_existing_files(tmp_path, capsys, monkeypatch):
    data, out = tmp_path / "demos.zarr", tmp_path / "demos.rrd"
    _dataset(data)
    out.write_bytes(b"mine")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    for argv, message in (([], "pass --out FILE.rrd"),
                          (["--out", str(out)], "already exists; pass --overwrite"),
                          (["--out", str(tmp_path / "x.rrd"), "--episodes", "0,5"], "--episodes 5: "),
                          (["--out", str(tmp_path / "x.rrd"), "--episodes", "a"], "comma-separated"),
                          (["--out", str(tmp_path / "x.mp4")], "expected a file ending in .rrd")):
        assert main(["view", str(data), *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert main(["view", str(tmp_path), "--out", str(tmp_path / "x.rrd")]) == 2
    assert "neither an episode dataset" in capsys.readouterr().err
    assert out.read_bytes() == b"mine" and sorted(p.name for p in tmp_path.iterdir()) == ["demos.rrd", "demos.zarr"]


def test_view_of_a_run_shows_its_learning_curve_and_its_datasets(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    # What the learner node (and train --env) append per training episode, and train --env's history.
    rows = [{"index": i, "steps": 50, "return": 0.1 * i, "success": i == 2, "interventions": 0,
             "intervention_steps": 5 * i, "evaluation": False, "policy_version": i, "env_steps": 50 * (i + 1),
             "time": 1.7e9 + i, "learner_updates": 10 * i} for i in range(3)]
    (run / "episodes.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (run / "history.json").write_text(json.dumps([{"steps": 150, "success_rate": 0.5, "mean_return": 1.5,
                                                   "train_success_rate": 0.3}]))
    _dataset(run / "recorded.zarr")
    out = tmp_path / "run.rrd"
    assert main(["view", str(run), "--out", str(out)]) == 0
    assert "4 learning-curve rows, 7 observations of 1 dataset(s)" in capsys.readouterr().out
    rec = read_rrd(out)
    assert [v[0] for v in values(rec, "/curve/return")] == pytest.approx([0.0, 0.1, 0.2])
    assert [v[0] for v in values(rec, "/curve/success")] == [0, 0, 1]
    assert [v[0] for v in values(rec, "/curve/interventions")] == [0, 5, 10]
    assert values(rec, "/curve/eval_success_rate") == [[0.5]]
    assert len(rec["/cameras/front"]["Image:buffer"]) == 7
    assert len(RrdReader(out).blueprints()) == 2  # the default layout, then the one with the curve


# ---- the session_view node and a recording session ---------------------------------------------


def test_node_logs_cameras_status_commands_state_and_reward_to_rerun(tmp_path):
    pytest.importorskip("rclpy")
    from geometry_msgs.msg import TwistStamped, Vector3Stamped
    from sensor_msgs.msg import Image as ImageMsg
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float32, String

    from robot_rl.ros import qos
    from robot_rl.ros.messages import image_to_msg
    from robot_rl.ros.probe import RosProbe, start_node

    out = tmp_path / "live.rrd"
    log = tmp_path / "session_view.log"
    proc, domain_id = start_node("robot_rl.nodes.session_view", log, "port:=0", "cameras:=[front]",
                                 "diagnostics_period_s:=0.2", f"rerun:={out}")
    probe = RosProbe(domain_id, "rerun_view_test")
    probe.watched = "session_view"
    pubs = {name: probe.node.create_publisher(kind, name, profile) for name, kind, profile in (
        ("front/color/image_raw", ImageMsg, qos.SENSOR), ("session/status", String, qos.EVENTS),
        ("arm/cmd", TwistStamped, qos.COMMAND), ("arm/gripper", Float32, qos.COMMAND),
        ("teleop/cmd", TwistStamped, qos.COMMAND), ("joint_states", JointState, qos.SENSOR),
        ("reward", Vector3Stamped, qos.EVENTS))}
    try:
        probe.wait_for(lambda: probe.diag.get("rerun") == str(out) if probe.diag else False, 30,
                       "the view's diagnostics naming the .rrd")
        assert proc.poll() is None, log.read_text()[-3000:]

        def publish(step: int, driver: str) -> None:
            status = SessionStatus(phase="running", driver=driver, episode=0, step=step, last_reward=0.5)
            pubs["session/status"].publish(String(data=status.to_json()))
            pubs["front/color/image_raw"].publish(image_to_msg(_frame(step, 16)))
            pubs["arm/gripper"].publish(Float32(data=1.0))
            cmd = TwistStamped()
            cmd.twist.linear.x = 0.25
            pubs["arm/cmd"].publish(cmd)
            human = TwistStamped()
            human.twist.linear.y = -0.5
            pubs["teleop/cmd"].publish(human)
            pubs["joint_states"].publish(JointState(name=["j1", "j2"], position=[0.1, 0.2]))
            reward = Vector3Stamped()
            reward.vector.x, reward.vector.y, reward.vector.z = 0.1, 0.6, 0.8
            pubs["reward"].publish(reward)
            probe.spin(0.05)

        for step in range(1, 21):  # the view's subscriptions match during the first ones
            publish(step, "policy" if step < 15 else "person")
        probe.spin(0.5)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0, log.read_text()[-3000:]
    finally:
        probe.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rec = read_rrd(out)
    assert len(rec["/cameras/front"]["EncodedImage:blob"]) >= 5  # the stream's JPEG quality
    assert texts(rec, "/driver")[-1] == "person"
    assert values(rec, "/reward")[-1] == pytest.approx([0.5])
    assert values(rec, "/action/executed")[-1] == pytest.approx([0.25, 0, 0, 0, 0, 0, 1.0])
    assert values(rec, "/action/human")[-1] == pytest.approx([0, -0.5, 0, 0, 0, 0, 0])
    assert values(rec, "/state")[-1] == pytest.approx([0.1, 0.2])
    assert values(rec, "/value")[-1] == pytest.approx([0.6]) and values(rec, "/done_probability")[-1] == [0.8]
    # every status arrives (reliable); each message is logged at the step of the newest status
    assert [step for step, _ in rec["/driver/person"]["Scalars:scalars"]][-1] == 20
    assert {step for step, _ in rec["/cameras/front"]["EncodedImage:blob"]} <= set(range(21))


def test_record_with_view_rerun_writes_the_sessions_cameras_and_drivers(tmp_path):
    pytest.importorskip("rclpy")
    from robot_rl.ros.probe import free_port, fresh_domain_id

    out, view = tmp_path / "rec.zarr", tmp_path / "session.rrd"
    cmd = [sys.executable, "-m", "robot_rl.cli", "record", "--task", "arm_lift", "--device", "scripted",
           "--episodes", "1", "--out", str(out), "--run-dir", str(tmp_path / "run"), "--plain",
           "--reset-time-s", "0", "--domain-id", str(fresh_domain_id()), "--view-port", str(free_port()),
           "--view", "rerun", "--view-out", str(view)]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"the session is logged to Rerun: {view}" in done.stdout
    rec = read_rrd(view)
    # arm_lift has no cameras of its own: the simulator renders the view's two.
    assert len(rec["/cameras/front"]["EncodedImage:blob"]) >= 10, time.monotonic() - started
    assert len(rec["/cameras/wrist"]["EncodedImage:blob"]) >= 10
    assert "person" in texts(rec, "/driver")  # the scripted human took over
    # the policy's commands until the scripted human takes over (how soon varies from run to run), the person's after
    executed, human = len(values(rec, "/action/executed")), len(values(rec, "/action/human"))
    assert executed >= 1 and human >= 5 and executed + human >= 10, (executed, human)
    assert len(values(rec, "/state")) >= 10
    # a second session refuses to replace the file, before anything starts
    again = subprocess.run(cmd[:cmd.index("--out") + 1] + [str(tmp_path / "other.zarr")] +
                           cmd[cmd.index("--out") + 2:], capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "already exists; choose another file" in again.stderr, again.stderr
