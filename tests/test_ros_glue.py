"""Message mapping, graph spec and parameter refusal."""

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rclpy")

from robot_rl.ros.arm_io import action_to_msgs, msgs_to_action, msgs_to_state, state_to_msgs  # noqa: E402
from robot_rl.ros.graph import apply_overrides, build_graph, config_path, load_config, loopback_environment  # noqa: E402
from robot_rl.ros.probe import fresh_domain_id  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _state():
    rng = np.random.default_rng(0)
    q = rng.normal(size=4)
    return {"joint_pos": rng.normal(size=7), "joint_vel": rng.normal(size=7), "gripper": np.array([0.03]),
            "ee_pos": rng.normal(size=3), "ee_quat": q / np.linalg.norm(q), "cube_pos": rng.normal(size=3),
            "cube_quat": np.array([1.0, 0, 0, 0])}


def test_state_round_trips_through_messages():
    state = _state()
    back = msgs_to_state(*state_to_msgs(state, [f"joint{i}" for i in range(1, 8)], 123))
    for key, value in state.items():
        np.testing.assert_allclose(back[key], value)


def test_malformed_state_messages_are_refused():
    joints, ee, cube = state_to_msgs(_state(), [f"joint{i}" for i in range(1, 8)], 1)
    ee.pose.position.x = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        msgs_to_state(joints, ee, cube)
    joints, ee, cube = state_to_msgs(_state(), [f"joint{i}" for i in range(1, 8)], 1)
    joints.position = joints.position[:3]
    with pytest.raises(ValueError, match="lengths"):
        msgs_to_state(joints, ee, cube)


def test_action_round_trip_and_clamping():
    action = np.array([0.5, -1.0, 0.25, 0.6], np.float32)
    twist, gripper = action_to_msgs(action, 5, action_scale=0.03, control_hz=10.0)
    assert twist.twist.linear.x == pytest.approx(0.15)  # 0.5 * 3 cm per step * 10 Hz
    np.testing.assert_allclose(msgs_to_action(twist, gripper.data, 0.03, 10.0), action, atol=1e-6)
    twist.twist.linear.z = 50.0  # far beyond the limit: clamped to one full step
    assert msgs_to_action(twist, 7.0, 0.03, 10.0)[2:].tolist() == [1.0, 1.0]
    twist.twist.linear.y = float("inf")
    with pytest.raises(ValueError):
        msgs_to_action(twist, 0.0, 0.03, 10.0)


def test_graph_spec_and_overrides():
    config = apply_overrides(load_config(config_path("arm_lift")), {"arm_actor.total_steps": 7, "robot_rl.demos": {}})
    specs = build_graph(config, "sim", "/tmp/run", namespace="r1")
    assert [s.name for s in specs] == ["arm_sim", "arm_actor", "learner"]
    actor = specs[1]
    assert actor.parameters["total_steps"] == 7 and actor.parameters["run_dir"] == "/tmp/run"
    assert actor.parameters["reset_service"] == "/r1/arm_sim/reset"
    real = build_graph(config, "real")
    assert [s.name for s in real] == ["arm", "arm_actor", "learner"]  # the real arm takes the simulator's place
    assert real[1].parameters["reset_service"] == "/arm/reset"
    with pytest.raises(ValueError, match="unknown node"):
        apply_overrides(config, {"nosuchnode.x": 1})
    env = loopback_environment(42, base={})
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST" and env["ROS_DOMAIN_ID"] == "42"


def test_launch_file_uses_the_graph_spec_and_launch_ros_api():
    tree = ast.parse((ROOT / "launch" / "train.launch.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert {"build_graph", "Node", "DeclareLaunchArgument", "OnProcessExit"} <= imported
    functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert "generate_launch_description" in functions


@pytest.mark.parametrize("override, fragment", [("num_critics:=100", "num_critics"),
                                                ("device:=tpu", "device"),
                                                ("discount:=1.5", "discount")])
def test_out_of_range_parameter_is_refused_with_a_clear_message(tmp_path, override, fragment):
    env = loopback_environment(fresh_domain_id())
    result = subprocess.run([sys.executable, "-m", "robot_rl.nodes.learner", "--ros-args", "-p", override,
                             "-p", f"run_dir:={tmp_path}"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert fragment in result.stderr and ("refused" in result.stderr or "not one of" in result.stderr)
