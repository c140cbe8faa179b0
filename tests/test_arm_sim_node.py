"""The simulated arm node as the actor meets it (a separate process, loopback DDS, lockstep): it moves with the
commands that answer its observations, holds still under a latched `/estop` whatever it is told, and starts a
new episode on `~/reset`; on the wall clock, a person's pause freezes it, and it may stamp as a robot does."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped, TwistStamped
from std_msgs.msg import Bool, Float32, String
from std_srvs.srv import Trigger

from robot_rl.ros import qos
from robot_rl.ros.arm_io import action_to_msgs
from robot_rl.ros.hardware_node import ESTOP_QOS
from robot_rl.ros.messages import stamp_to_ns
from robot_rl.ros.probe import RosProbe, start_node, stop_node
from robot_rl.ros.sim_time import SimulatedTime, delay_to_phase
from robot_rl.teleop.session_status import SessionStatus


class ArmSimProbe:
    """arm_sim started as a separate process with `params`, and a probe that hears its end-effector poses and
    sends its commands."""

    def __init__(self, tmp_path, *params: str):
        self.log = tmp_path / "arm_sim.log"
        self.proc, domain_id = start_node("robot_rl.nodes.arm_sim", self.log, "publish_images:=false",
                                          "randomization:=''", *params)
        self.probe = RosProbe(domain_id, "arm_sim_probe")
        self.probe.watched = "arm_sim"
        self.poses: list[PoseStamped] = []
        self.probe.node.create_subscription(PoseStamped, "arm/ee_pose", self.poses.append, qos.SENSOR)
        self.cmd = self.probe.node.create_publisher(TwistStamped, "arm/cmd", qos.COMMAND)
        self.gripper = self.probe.node.create_publisher(Float32, "arm/gripper", qos.COMMAND)

    def position(self) -> np.ndarray:
        p = self.poses[-1].pose.position
        return np.array([p.x, p.y, p.z])

    def steps(self, action, n: int) -> None:
        """`n` lockstep steps of `action`, each answering the newest observation."""
        for _ in range(n):
            answered = stamp_to_ns(self.poses[-1].header.stamp)
            twist, grip = action_to_msgs(np.asarray(action, np.float32), answered, 0.03, 10.0)
            self.gripper.publish(grip)  # the actor's order: the gripper, then the command that completes the step
            self.cmd.publish(twist)
            # The next observation, not a repeat of this one (lockstep republishes an unanswered one).
            self.probe.wait_for(lambda: stamp_to_ns(self.poses[-1].header.stamp) > answered, 10, "the next observation")

    def reset(self) -> None:
        """A new episode (drawn from the randomization), once its first observation is heard."""
        stamp = json.loads(self.probe.call(Trigger, "/arm_sim/reset", Trigger.Request()).message)["stamp_ns"]
        self.probe.wait_for(lambda: stamp_to_ns(self.poses[-1].header.stamp) == stamp, 10, "the new episode")

    def close(self) -> None:
        self.probe.close()
        stop_node(self.proc, self.log)


def test_arm_sim_moves_with_its_commands_holds_under_the_estop_and_resets(tmp_path):
    sim = ArmSimProbe(tmp_path)
    probe, poses, position, steps = sim.probe, sim.poses, sim.position, sim.steps
    estop = probe.node.create_publisher(Bool, "/estop", ESTOP_QOS)

    try:
        probe.wait_for(lambda: poses, 30, "the first observation")
        start = position()
        steps([1.0, 0.0, 0.0, -1.0], 5)
        moved = position()
        assert moved[0] - start[0] > 0.05  # 5 steps of up to 3 cm
        estop.publish(Bool(data=True))
        probe.wait_for(lambda: probe.value("estops") == 1, 10, "the e-stop")
        steps([-1.0, 1.0, 1.0, 1.0], 5)
        assert np.abs(position() - moved).max() < 0.005, "the arm moved under the e-stop"
        probe.wait_for(lambda: probe.value("estopped_steps") >= 5, 10, "the held steps counted")
        estop.publish(Bool(data=False))
        assert probe.call(Trigger, "/arm_sim/reset_estop", Trigger.Request()).success
        steps([0.0, 1.0, 0.0, -1.0], 3)
        assert position()[1] - moved[1] > 0.03
        probe.wait_for(lambda: probe.value("steps") == 13, 10, "every command answered by one step")
        last_stamp = stamp_to_ns(poses[-1].header.stamp)
        reply = probe.call(Trigger, "/arm_sim/reset", Trigger.Request())
        first = json.loads(reply.message)["stamp_ns"]
        assert reply.success and first > last_stamp  # simulated time never goes back, across resets too
        probe.wait_for(lambda: stamp_to_ns(poses[-1].header.stamp) == first, 10, "the new episode's observation")
        probe.wait_for(lambda: probe.value("resets") == 1, 10, "the reset counted")
        assert probe.value("steps") == 13  # a reset is no step
    finally:
        sim.close()


def test_a_drawn_action_latency_delays_commands_and_the_estop_cancels_those_in_flight(tmp_path):
    """The randomization's action latency runs through the graph as in ArmPickCube: each command two ticks after it
    arrived, holds until then; an e-stop drops what is in flight, so nothing sent before it runs after it."""
    randomization = tmp_path / "latency.yaml"
    randomization.write_text('train: {action_latency_steps: {constant: 2}}\neval: {}\n')
    sim = ArmSimProbe(tmp_path, f"randomization:={randomization}")
    estop = sim.probe.node.create_publisher(Bool, "/estop", ESTOP_QOS)
    right, still = [1.0, 0.0, 0.0, -1.0], [0.0, 0.0, 0.0, -1.0]
    try:
        sim.probe.wait_for(lambda: sim.poses, 30, "the first observation")
        sim.reset()
        start = sim.position()
        sim.steps(right, 2)
        assert np.abs(sim.position() - start).max() < 0.002, "a command ran before its latency"
        sim.steps(still, 2)
        moved = sim.position()
        assert moved[0] - start[0] > 0.015  # the two commands, two ticks late
        sim.steps(right, 2)  # in flight when the stop comes
        estop.publish(Bool(data=True))
        sim.probe.wait_for(lambda: sim.probe.value("estops") == 1, 10, "the e-stop")
        stopped = sim.position()
        sim.steps(right, 1)
        estop.publish(Bool(data=False))
        assert sim.probe.call(Trigger, "/arm_sim/reset_estop", Trigger.Request()).success
        sim.steps(still, 3)
        assert np.abs(sim.position() - stopped).max() < 0.005, "a command sent before the e-stop ran after it"
    finally:
        sim.close()


def test_a_drawn_proprioception_noise_reaches_the_published_pose_and_not_the_cube(tmp_path):
    randomization = tmp_path / "noise.yaml"
    randomization.write_text('train: {observation_noise: {constant: 0.01}}\neval: {}\n')
    sim = ArmSimProbe(tmp_path, f"randomization:={randomization}")
    cubes: list[PoseStamped] = []
    sim.probe.node.create_subscription(PoseStamped, "cube/pose", cubes.append, qos.SENSOR)
    try:
        sim.probe.wait_for(lambda: sim.poses and cubes, 30, "the first observation")
        sim.reset()
        first = len(sim.poses)
        sim.steps([0.0, 0.0, 0.0, -1.0], 8)  # held still: what moves is the sensors' noise
        held = np.array([[p.pose.position.x, p.pose.position.y, p.pose.position.z] for p in sim.poses[first:]])
        assert 0.004 < held.std(axis=0).mean() < 0.02, held
        cube = np.array([[c.pose.position.x, c.pose.position.y, c.pose.position.z] for c in cubes[-5:]])
        assert cube.std(axis=0).max() < 1e-4  # the cube's pose is the scene's, not a sensor of the arm's
    finally:
        sim.close()


def test_a_persons_pause_freezes_the_realtime_simulation(tmp_path):
    """While the actor's session/status says a person paused, arm_sim on the wall clock takes no physics step:
    it publishes the same state each period with a new stamp, so nothing moves whatever it is told; running
    again, it moves with its commands."""
    sim = ArmSimProbe(tmp_path, "clock_mode:=realtime")
    probe, poses, cmd, gripper, position = sim.probe, sim.poses, sim.cmd, sim.gripper, sim.position
    status = probe.node.create_publisher(String, "session/status", qos.EVENTS)

    def drive(seconds: float, phase: str) -> None:
        """A person pushing +x at full speed for `seconds`, the session in `phase`."""
        status.publish(String(data=SessionStatus(phase=phase, driver="person").to_json()))
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            twist, grip = action_to_msgs(np.array([1.0, 0.0, 0.0, -1.0], np.float32),
                                         stamp_to_ns(poses[-1].header.stamp), 0.03, 10.0)
            gripper.publish(grip)
            cmd.publish(twist)
            probe.spin(0.05)

    try:
        probe.wait_for(lambda: poses, 30, "the first observation")
        drive(0.5, "running")
        drive(0.3, "paused")  # the simulator hears of the pause
        frozen, stamp = position(), stamp_to_ns(poses[-1].header.stamp)
        drive(1.0, "paused")
        assert np.array_equal(position(), frozen), "the arm moved while paused"
        assert stamp_to_ns(poses[-1].header.stamp) >= stamp + 5 * 100_000_000  # time went on, a state per period
        probe.wait_for(lambda: probe.value("paused_steps") >= 10, 10, "the frozen periods counted")
        drive(0.5, "running")
        assert position()[0] - frozen[0] > 0.02
    finally:
        sim.close()


def test_on_the_wall_clock_the_realtime_simulation_stamps_as_a_robot_does(tmp_path):
    """`stamp_clock:=wall`: each observation is stamped with the wall clock when it is taken (so the actor pairs it
    with real cameras' frames), once a period, a reset's too; lockstep, whose time is its /clock, refuses it."""
    sim = ArmSimProbe(tmp_path, "clock_mode:=realtime", "stamp_clock:=wall", "control_hz:=30.0")
    probe = sim.probe
    received: list[tuple[int, int]] = []  # (stamp, when it arrived), both from one callback: they pair up
    probe.node.create_subscription(PoseStamped, "arm/ee_pose", lambda msg: received.append(
        (stamp_to_ns(msg.header.stamp), time.time_ns())), qos.SENSOR)
    try:
        probe.wait_for(lambda: len(received) >= 30, 30, "a second of observations")
        stamps, arrivals = np.array(received[-30:]).T
        ages = arrivals - stamps
        assert (ages >= 0).all() and np.median(ages) < 20e6, ages  # taken just before it was sent
        assert abs(np.median(np.diff(stamps)) - 1e9 / 30) < 5e6  # one a period
        reply = probe.call(Trigger, "/arm_sim/reset", Trigger.Request())
        assert abs(json.loads(reply.message)["stamp_ns"] - time.time_ns()) < 1e9
    finally:
        sim.close()
    with pytest.raises(ValueError, match="realtime"):
        SimulatedTime(None, 0.1, True, 0.2, {}, print, print, print, wall_stamps=True)


def test_a_realtime_simulation_ticks_at_its_phase_of_the_period(tmp_path):
    """`tick_phase:=0.5` at 10 Hz: observations are taken 50 ms into each 100 ms of the wall clock (a fleet's
    second robot ticks half a period after the first)."""
    assert delay_to_phase(10.02, 0.1, 0.5) == pytest.approx(0.03)
    assert delay_to_phase(10.07, 0.1, 0.5) == pytest.approx(0.08)
    assert delay_to_phase(10.05, 0.1, 0.0) == pytest.approx(0.05)
    sim = ArmSimProbe(tmp_path, "clock_mode:=realtime", "stamp_clock:=wall", "tick_phase:=0.5")
    probe = sim.probe
    stamps: list[int] = []
    probe.node.create_subscription(PoseStamped, "arm/ee_pose", lambda msg: stamps.append(
        stamp_to_ns(msg.header.stamp)), qos.SENSOR)
    try:
        probe.wait_for(lambda: len(stamps) >= 20, 30, "two seconds of observations")
    finally:
        sim.close()
    into_period_ms = (np.array(stamps[-20:]) % 100_000_000) / 1e6
    assert 50 <= np.median(into_period_ms) < 65, into_period_ms  # taken just after its tick


def test_seeded_resets_draw_the_scenes_robot_rl_eval_draws(tmp_path):
    """With `reset_seeds_from`, the k-th reset's scene is the one `robot-rl eval --seed` gives its k-th episode
    (ArmPickCube on the same split), so a policy meets the same 50 scenes through the graph as in one process."""
    import gymnasium as gym

    import robot_rl.envs  # noqa: F401 - registers the environments
    from robot_rl.envs.adapter import seeded_reset

    env = gym.make("robot_rl/ArmPickCube-v0", observation="state", randomization_split="eval")
    draws = np.random.default_rng(10_000)  # training/evaluate.py's episode seeds
    expected = []
    for _ in range(3):
        seeded_reset(env, int(draws.integers(2**31)))
        expected.append(env.unwrapped.sim.state()["cube_pos"])
    env.close()
    sim = ArmSimProbe(tmp_path, "randomization:=sim/arm/randomization.yaml", "randomization_split:=eval",
                      "reset_seeds_from:=10000")
    cubes: list[PoseStamped] = []
    sim.probe.node.create_subscription(PoseStamped, "cube/pose", cubes.append, qos.SENSOR)
    try:
        sim.probe.wait_for(lambda: cubes, 30, "the first observation")
        for k, cube in enumerate(expected):
            reply = sim.probe.call(Trigger, "/arm_sim/reset", Trigger.Request())
            stamp = json.loads(reply.message)["stamp_ns"]
            sim.probe.wait_for(lambda: stamp_to_ns(cubes[-1].header.stamp) == stamp, 10, f"reset {k}'s scene")
            p = cubes[-1].pose.position
            np.testing.assert_allclose([p.x, p.y, p.z], cube, atol=1e-6, err_msg=f"reset {k}")
        assert len({round(float(c[0]), 6) for c in expected}) == 3  # three different scenes, not one
    finally:
        sim.close()
