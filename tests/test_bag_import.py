"""Episodes from bags (robot_rl/ros/bag_import.py), on bags written here message by message: the actor's step
log decides which observations were steps (holds, resends and thrown-away episodes are not), each step's action
is the command stamped with its observation (the gripper the one published just before it), and a bag missing a
needed topic, truncated or damaged is refused in one line naming what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("rclpy")
pytest.importorskip("mcap_ros2")

from rclpy.serialization import serialize_message  # noqa: E402
from std_msgs.msg import Header  # noqa: E402

from robot_rl.cli import main  # noqa: E402
from robot_rl.ros.bag_import import BagError, import_bag, plan_from_step_log  # noqa: E402
from robot_rl.data.episodes import EpisodeDataset  # noqa: E402
from robot_rl.robots.arm.sim import ARM_JOINT_NAMES  # noqa: E402
from robot_rl.ros.arm_io import action_to_msgs, state_to_msgs  # noqa: E402
from robot_rl.ros.bag import message_definition  # noqa: E402
from robot_rl.ros.messages import image_to_msg, ns_to_stamp  # noqa: E402
from robot_rl.ros.step_log import StepOutcome, discard_msg, parse_step_msg, step_msg  # noqa: E402
from robot_rl.tasks import LAST_ACTIONS, get_task, task_observation  # noqa: E402

TASK = "arm_pick_cube"
T0 = 5_000_000_000
PERIOD = 100_000_000


def write_bag(path, messages) -> None:
    """An MCAP of (topic, message, publish_ns, log_ns), as `robot-rl record-bag` writes one."""
    from mcap.writer import Writer

    with open(path, "wb") as f:
        writer = Writer(f)
        writer.start(profile="ros2", library="test")
        schemas, channels = {}, {}
        for topic, msg, publish_ns, log_ns in messages:
            type_name = f"{type(msg).__module__.split('.')[0]}/msg/{type(msg).__name__}"
            if type_name not in schemas:
                schemas[type_name] = writer.register_schema(name=type_name, encoding="ros2msg",
                                                            data=message_definition(type_name).encode())
            if topic not in channels:
                channels[topic] = writer.register_channel(topic=topic, message_encoding="cdr",
                                                          schema_id=schemas[type_name])
            writer.add_message(channel_id=channels[topic], log_time=log_ns, publish_time=publish_ns,
                               data=serialize_message(msg), sequence=0)
        writer.finish()


def arm_state(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"joint_pos": rng.uniform(-1, 1, 7), "joint_vel": rng.uniform(-1, 1, 7), "gripper": rng.uniform(0, 0.08, 1),
            "ee_pos": rng.uniform(-0.3, 0.3, 3), "ee_quat": np.array([1.0, 0, 0, 0]),
            "cube_pos": rng.uniform(-0.3, 0.3, 3), "cube_quat": np.array([1.0, 0, 0, 0])}


class Session:
    """What a session of the arm's actor publishes, message by message, with the states and actions it used."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.messages: list = []
        self.states: dict[int, dict] = {}
        self.frames: dict[int, dict] = {}
        self.clock = 0

    def _add(self, topic: str, msg, publish_ns: int | None = None, log_delay: int = 1000) -> None:
        self.clock += 10_000
        publish_ns = self.clock if publish_ns is None else publish_ns
        self.messages.append((topic, msg, publish_ns, publish_ns + log_delay))

    def observe(self, stamp: int) -> None:
        state = arm_state(self.rng)
        self.states[stamp] = state
        for topic, msg in zip(("/joint_states", "/arm/ee_pose", "/cube/pose"),
                              state_to_msgs(state, list(ARM_JOINT_NAMES), stamp)):
            self._add(topic, msg)
        self.frames[stamp] = {}
        for camera in ("front", "wrist"):
            frame = self.rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
            self.frames[stamp][camera] = frame
            self._add(f"/{camera}/color/image_raw", image_to_msg(frame, stamp))

    def command(self, stamp: int, action: np.ndarray, resend: bool = False) -> None:
        twist, gripper = action_to_msgs(action, stamp, 0.03, 10.0)
        for _ in range(2 if resend else 1):
            # The gripper is published first; here it is logged after the twist (topics arrive in any order).
            self._add("/arm/gripper", gripper, log_delay=50_000)
            self._add("/arm/cmd", twist)

    def log(self, msg) -> None:
        self._add("/episode/step", msg)


def _session(tmp_path, *, drop_topic: str = ""):
    """Episode 0 begins before the recording did; episode 1 has a countdown's holds, a resent command and a
    success label; episode 2 is thrown away. Returns the bag and what episode 1 must become."""
    s = Session()
    stamps = [T0 + i * PERIOD for i in range(16)]
    for stamp in stamps[:2]:  # episode 0, seen from its third observation on
        s.observe(stamp)
    s.log(step_msg(TASK, 0, 2, stamps[0], True, StepOutcome(0.0, False, False, None), False))
    s.command(stamps[0], np.array([0.5, 0, 0, 1], np.float32))
    s.log(step_msg(TASK, 0, 3, stamps[1], None, StepOutcome(0.0, False, True, None), True))
    s.messages.append(("/episode/event", Header(stamp=ns_to_stamp(stamps[2]), frame_id="start"), s.clock, s.clock))
    actions = [np.array([0.25, -0.5, 1.0, 1.0], np.float32), np.array([0, 0, 0, 1], np.float32),
               np.array([-1.0, 0.125, 0.5, -1.0], np.float32)]
    interventions = [True, False, True]
    outcomes = [StepOutcome(0.0, False, False, None), StepOutcome(0.0, False, False, None),
                StepOutcome(1.0, True, False, True)]
    for stamp in stamps[2:4]:  # the countdown: the robot holds (commands, no steps)
        s.observe(stamp)
        s.command(stamp, np.array([0, 0, 0, -1], np.float32))
    for k, stamp in enumerate(stamps[4:8]):
        s.observe(stamp)
        outcome = outcomes[k - 1] if k else None
        if k < 3:
            s.log(step_msg(TASK, 1, k, stamp, interventions[k], outcome, False))
            s.command(stamp, actions[k], resend=k == 1)
        else:
            s.log(step_msg(TASK, 1, k, stamp, None, outcome, True))
    s.messages.append(("/episode/event", Header(stamp=ns_to_stamp(stamps[8]), frame_id="start"), s.clock, s.clock))
    for k, stamp in enumerate(stamps[8:11]):  # episode 2, re-recorded
        s.observe(stamp)
        s.log(step_msg(TASK, 2, k, stamp, k < 2 or None, StepOutcome(0.0, False, k == 2, None) if k else None,
                       k == 2))
        if k < 2:
            s.command(stamp, actions[0])
    s.log(discard_msg(TASK, 2, stamps[10]))
    s.messages = [m for m in s.messages if m[0] != drop_topic]
    path = tmp_path / "run.mcap"
    write_bag(path, s.messages)
    episode = stamps[4:8]
    return path, s, episode, actions, interventions, outcomes


def test_a_bag_becomes_the_episodes_its_actor_recorded(tmp_path):
    path, session, stamps, actions, interventions, outcomes = _session(tmp_path)
    warnings = []
    dataset = import_bag(path, tmp_path / "out.zarr", warn=warnings.append)
    assert len(dataset) == 1 and dataset.num_steps == 3
    assert len(warnings) == 1 and "episode 0 is not all in the bag (the recording began after it did)" in warnings[0]
    episode = dataset.episode(0)
    task = get_task(TASK)
    rest = np.array(task.rest_action, np.float32)
    for t, stamp in enumerate(stamps):
        # the commands the actor had sent in this episode, newest first, the arm's rest before its first
        sent = [np.asarray(actions[t - 1 - j], np.float32) if t - 1 - j >= 0 else rest for j in range(2)]
        state = {**session.states[stamp], **session.frames[stamp], LAST_ACTIONS: np.stack(sent)}
        expected = task_observation(task, state)
        for camera in ("front", "wrist"):
            np.testing.assert_array_equal(episode[camera][t], expected[camera])
        np.testing.assert_allclose(episode["state"][t], expected["state"], atol=1e-6)
    np.testing.assert_allclose(episode["action"], np.stack(actions), atol=1e-6)
    assert episode["intervention"].tolist() == interventions
    assert episode["reward"].tolist() == [o.reward for o in outcomes]
    assert episode["terminated"].tolist() == [False, False, True]
    assert episode["truncated"].tolist() == [False, False, False]
    assert episode["success_label"].tolist() == [-1, -1, 1]
    np.testing.assert_allclose(episode["stamp"], np.array(stamps[:3]) * 1e-9)
    assert dataset.task_config["task"] == TASK and dataset.task_config["source"] == "bag"


def test_a_bag_missing_a_needed_topic_is_refused_in_one_line(tmp_path, capsys):
    path, *_ = _session(tmp_path, drop_topic="/arm/cmd")
    out = tmp_path / "out.zarr"
    assert main(["dataset", "import", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "/arm/cmd" in err and "arm_pick_cube" in err, err
    assert not out.exists()
    path, *_ = _session(tmp_path, drop_topic="/wrist/color/image_raw")
    with pytest.raises(BagError, match="has no /wrist/color/image_raw"):
        import_bag(path, out)


def test_an_existing_dataset_is_kept_unless_asked(tmp_path, capsys):
    path, *_ = _session(tmp_path)
    out = tmp_path / "out.zarr"
    assert main(["dataset", "import", str(path), "--out", str(out)]) == 0
    assert main(["dataset", "import", str(path), "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["dataset", "import", str(path), "--out", str(out), "--overwrite"]) == 0
    assert len(EpisodeDataset(out)) == 1
    assert main(["dataset", "import", str(path), "--out", str(tmp_path / "x.zarr"),
                 "--set", "arm_actor.action_scal=0.05"]) == 2
    assert "did you mean 'arm_actor.action_scale'" in capsys.readouterr().err


def test_a_truncated_or_damaged_bag_is_refused_naming_what_is_broken(tmp_path):
    path, *_ = _session(tmp_path)
    data = path.read_bytes()
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(BagError, match="cut.mcap is truncated"):
        import_bag(cut, tmp_path / "a.zarr")
    damaged = tmp_path / "damaged.mcap"
    middle = len(data) // 2
    damaged.write_bytes(data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + 64]) + data[middle + 64:])
    with pytest.raises(BagError, match="damaged.mcap is damaged"):
        import_bag(damaged, tmp_path / "b.zarr")
    assert not (tmp_path / "a.zarr").exists()


def test_without_the_step_log_commands_make_policy_driven_unlabelled_steps(tmp_path):
    path, session, *_ = _session(tmp_path, drop_topic="/episode/step")
    warnings = []
    with pytest.raises(BagError, match="no step log"):
        import_bag(path, tmp_path / "x.zarr", warn=warnings.append)
    dataset = import_bag(path, tmp_path / "out.zarr", task=get_task(TASK), warn=warnings.append)
    assert "no /episode/step" in warnings[-1] and "policy-driven and unlabelled" in warnings[-1]
    # Episode/event starts episodes 1 and 2 (the countdown's holds are steps too, the last command the end);
    # episode 0 has a single commanded observation: no step.
    assert [dataset.episode(i)["action"].shape[0] for i in range(len(dataset))] == [4, 1]
    assert not dataset.episode(0)["intervention"].any() and (dataset.episode(0)["success_label"] == -1).all()


def test_the_step_log_round_trips_and_refuses_what_it_is_not():
    outcome = StepOutcome(0.5, True, False, False)
    entry = parse_step_msg(step_msg(TASK, 3, 7, 12_345, True, outcome, False))
    assert (entry.task, entry.episode, entry.step, entry.stamp_ns, entry.intervention, entry.outcome, entry.end) == \
        (TASK, 3, 7, 12_345, True, outcome, False)
    assert parse_step_msg(discard_msg(TASK, 4, 1)).discarded
    bad = step_msg(TASK, 3, 7, 12_345, None, outcome, False)  # no action, yet not the end
    with pytest.raises(ValueError, match="intervention"):
        parse_step_msg(bad)
    two_ends = [parse_step_msg(step_msg(TASK, 0, i, i, None, outcome if i else None, True)) for i in range(2)]
    warnings = []
    assert plan_from_step_log(two_ends, "run.mcap", warnings.append) == []
    assert "ends it twice" in warnings[0]


def test_graph_runs_and_train_env_take_a_bag_of_their_task_as_demonstrations(tmp_path):
    from robot_rl.nodes.learner import demonstration_arrays
    from robot_rl.ros.graph import apply_overrides, config_path, load_config, simulated_demos

    path, *_ = _session(tmp_path)
    config = apply_overrides(load_config(config_path(TASK)), {"learner.demos": str(path)})
    assert simulated_demos(config, "sim") == 0  # scripted demonstrations would replace the bag
    arrays = demonstration_arrays(str(path), get_task(TASK))
    assert arrays["obs_front"].shape == (3, 64, 64, 3) and arrays["intervention"].tolist() == [True, False, True]
    with pytest.raises(ValueError, match="recorded with task arm_pick_cube, not arm_lift"):
        demonstration_arrays(str(path), get_task("arm_lift"))
    # `train --env ID --demos run.mcap`: a bag of a task of that environment, and only then.
    assert len(import_bag(path, tmp_path / "a.zarr", env_id="robot_rl/ArmPickCube-v0")) == 1
    with pytest.raises(BagError, match="whose environment is robot_rl/ArmPickCube-v0, not robot_rl/ArmLift-v0"):
        import_bag(path, tmp_path / "b.zarr", env_id="robot_rl/ArmLift-v0")
