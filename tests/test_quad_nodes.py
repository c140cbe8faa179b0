"""Quadrotor juggling through ROS 2: message conventions, the simulated quadrotor node, and the
shipped policy flown by the actor node against the sim node (separate processes, loopback DDS)."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped, TwistStamped
from nav_msgs.msg import Odometry
from std_msgs.msg import Bool
from std_srvs.srv import Trigger

from robot_rl.robots.quad.juggling import JuggleState
from robot_rl.resources import package_path
from robot_rl.ros import qos
from robot_rl.ros.hardware_node import ESTOP_QOS
from robot_rl.ros.probe import RosProbe, fresh_domain_id, start_graph, start_node, stop_node
from robot_rl.ros.quad_io import JuggleObserver, ctbr_to_msg, state_to_msgs

SHIPPED = package_path("policies/quad_juggle")


def test_odometry_round_trip_and_ball_velocity_by_differencing():
    yaw = 0.7
    state = JuggleState(np.array([[0.1, -0.2, 1.05]]), np.array([[math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]]),
                        np.array([[0.3, 0.4, -0.1]]), np.array([[0.2, -0.1, 0.05]]), np.array([[0.0, 0.1, 1.6]]),
                        np.zeros((1, 3)))
    odom, ball = state_to_msgs(state, 0, 10_000_000, "map", "base_link")
    assert odom.header.frame_id == "map" and odom.child_frame_id == "base_link"
    # REP-105: the twist is in the body frame: rotating (0.3, 0.4) by -yaw
    c, s = math.cos(yaw), math.sin(yaw)
    assert odom.twist.twist.linear.x == pytest.approx(c * 0.3 + s * 0.4)
    assert odom.twist.twist.linear.y == pytest.approx(-s * 0.3 + c * 0.4)
    o, t = odom.pose.pose.orientation, odom.twist.twist
    observer = JuggleObserver()
    rebuilt = observer.state(10_000_000, [0.1, -0.2, 1.05], [o.x, o.y, o.z, o.w], [t.linear.x, t.linear.y, t.linear.z],
                             [0.2, -0.1, 0.05], [0.0, 0.1, 1.6])
    np.testing.assert_allclose(rebuilt.quad_vel, state.quad_vel, atol=1e-12)
    np.testing.assert_allclose(rebuilt.ball_vel, 0.0)  # the first observation of an episode
    later = observer.state(30_000_000, [0.1, -0.2, 1.05], [o.x, o.y, o.z, o.w], [0, 0, 0], [0, 0, 0], [0.0, 0.1, 1.64])
    np.testing.assert_allclose(later.ball_vel, [[0.0, 0.0, 2.0]])  # 4 cm in 20 ms
    with pytest.raises(ValueError, match="advance"):
        observer.state(30_000_000, [0, 0, 1], [0, 0, 0, 1], [0, 0, 0], [0, 0, 0], [0, 0, 1.7])
    msg = ctbr_to_msg(np.array([9.81, 0.1, -0.2, 0.3]), 5, "base_link")
    assert (msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z) == (0.0, 0.0, 9.81)


def test_quad_sim_node_validates_commands_obeys_the_estop_and_resets(tmp_path):
    log = tmp_path / "quad_sim.log"
    proc, domain_id = start_node("robot_rl.nodes.quad_sim", log, "randomization:=''")
    probe = RosProbe(domain_id, "quad_sim_probe")
    probe.watched = "quad_sim"
    odom: list[Odometry] = []
    probe.node.create_subscription(Odometry, "quad/odom", odom.append, qos.SENSOR)
    probe.node.create_subscription(PoseStamped, "ball/pose", lambda m: None, qos.SENSOR)
    cmd = probe.node.create_publisher(TwistStamped, "quad/cmd_ctbr", qos.COMMAND)
    estop = probe.node.create_publisher(Bool, "/estop", ESTOP_QOS)
    try:
        probe.wait_for(lambda: odom, 20, "the first observation")

        def command(thrust=9.81, rates=(0.0, 0.0, 0.0), frame="base_link", lateral=0.0):
            stamp = odom[-1].header.stamp
            msg = ctbr_to_msg(np.array([thrust, *rates]), 0, frame)
            msg.header.stamp = stamp
            msg.twist.linear.x = lateral
            cmd.publish(msg)

        for bad in (dict(thrust=float("nan")), dict(frame="map"), dict(lateral=1.0)):
            command(**bad)
        probe.wait_for(lambda: probe.value("rejected_commands") >= 3, 10, "three refusals")
        reasons = json.loads(probe.diag["rejected_by_reason"])
        assert reasons == {"nan": 1, "frame": 1, "lateral": 1}
        assert probe.value("steps") == 0  # nothing bad was simulated
        # hover for 10 steps (lockstep: one step per command answering the latest observation)
        for _ in range(10):
            n = len(odom)
            command()
            probe.wait_for(lambda: len(odom) > n, 5, "the next observation")
        z_hover = odom[-1].pose.pose.position.z
        assert abs(z_hover - 1.0) < 0.05
        estop.publish(Bool(data=True))
        probe.wait_for(lambda: probe.value("estopped") == 1, 10, "the e-stop")
        for _ in range(15):  # full thrust asked, motors off given: it falls
            n = len(odom)
            command(thrust=15.0)
            probe.wait_for(lambda: len(odom) > n, 5, "the next observation")
        assert odom[-1].pose.pose.position.z < z_hover - 0.2
        assert probe.call(Trigger, "/quad_sim/reset_estop", Trigger.Request()).success
        reply = probe.call(Trigger, "/quad_sim/reset", Trigger.Request())
        assert reply.success and json.loads(reply.message)["stamp_ns"] > 0
        probe.wait_for(lambda: abs(odom[-1].pose.pose.position.z - 1.0) < 0.01, 5, "the reset state")
    finally:
        probe.close()
        stop_node(proc, log)


@pytest.mark.skipif(not (SHIPPED / "policy.safetensors").exists(), reason="no shipped policies/quad_juggle")
def test_shipped_policy_juggles_through_ros(tmp_path):
    """Actor and simulated quadrotor as separate processes in lockstep: the shipped policy keeps
    the ball going for at least 20 hits in a 30 s episode (randomized eval plant)."""
    overrides = {"robot_rl.nodes": ["quad_sim", "juggle_actor"], "juggle_actor.follow_learner": False,
                 "juggle_actor.episodes": 1, "juggle_actor.max_episode_s": 30.0, "quad_sim.seed": 3}
    summary = _run_until_actor_exits(overrides, tmp_path)
    assert summary["episodes"] == 1 and summary["invalid_observations"] == {}
    assert summary["hits"][0] >= 20, summary


def test_actor_flies_the_policies_the_ppo_learner_publishes(tmp_path):
    """The three-node graph: the learner trains in its own vector sim and publishes; the actor
    switches to each newest policy at the next episode."""
    overrides = {"juggle_actor.episodes": 30, "juggle_actor.max_episode_s": 1.0, "ppo_learner.num_envs": 16,
                 "ppo_learner.publish_every": 1, "ppo_learner.device": "cpu",
                 # Eager: a cold compile of the PPO losses outlasted the actor's 30 short episodes on a slow CI machine.
                 "ppo_learner.compile": False}
    summary = _run_until_actor_exits(overrides, tmp_path)
    assert summary["episodes"] == 30 and summary["invalid_policies"] == 0
    assert summary["policy_version"] >= 1, summary
    assert (tmp_path / "policy" / "policy.safetensors").exists()  # the learner exported on shutdown


def _run_until_actor_exits(overrides: dict, tmp_path) -> dict:
    domain_id = fresh_domain_id()
    supervisor = start_graph("quad_juggle", overrides, tmp_path, domain_id)
    try:
        deadline = time.monotonic() + 240
        exited: dict[str, int] = {}
        while time.monotonic() < deadline and "juggle_actor" not in exited:
            exited.update({n.spec.name: code for n, code in supervisor.exited()})  # each reported once
            time.sleep(0.5)
        logs = {p.name: p.read_text()[-1500:] for p in (tmp_path / "logs").glob("*")}
        assert exited.get("juggle_actor") == 0, (exited, logs)
    finally:
        codes = supervisor.stop()
    assert all(code == 0 for code in codes.values()), codes
    return json.loads((tmp_path / "juggle_actor_summary.json").read_text())



def test_the_sim_nodes_plant_parameter_fixes_whole_plants_and_refuses_a_bad_one():
    import sys

    from robot_rl.nodes.quad_sim import parse_plant

    sys.path.insert(0, str(package_path("benchmarks")))
    from juggle_graph import draw_plants, plant_parameter  # the benchmark's plants reach the node whole

    plant = draw_plants("restitution_low", 1, seed=4)[0]
    assert parse_plant(plant_parameter(plant)) == plant  # repr round-trips a float exactly
    assert 0.6 <= plant["restitution"] <= 0.7 and plant["action_latency_steps"] == 0.0
    assert parse_plant("") == {}
    assert parse_plant("restitution=0.65 ball_start_offset=0,0,0.8") == {"restitution": 0.65,
                                                                        "ball_start_offset": [0.0, 0.0, 0.8]}
    for text, message in (("restitution", "plant: expected NAME=NUMBER"), ("restitutoin=0.7", "restitutoin"),
                          ("ball_start_offset=0,0", "ball_start_offset takes 3")):
        with pytest.raises(ValueError, match=message):
            parse_plant(text)
