"""What a node's exit means for the run (robot_rl/ros/exits.py), and that `ros2 launch` and `robot-rl train` use
the same decision: only a crash restarts a node, and a fleet's actor that finished is left finished."""

import importlib.util
import io
import signal
import sys
import types
from pathlib import Path

import pytest
import yaml

from robot_rl.ros.exits import AfterExit, RunExits, crashed
from robot_rl.ros.graph import build_graph, config_path, load_config

ROOT = Path(__file__).resolve().parents[1]
SIGKILLED = -signal.SIGKILL


def _fleet_specs(actors: int = 2):
    config = load_config(config_path("arm_lift"))
    config["robot_rl"]["actors"] = actors
    return {spec.key: spec for spec in build_graph(config, "sim", "/tmp/run")}


def test_crashes_are_signals_and_uncaught_exceptions_only():
    assert [crashed(code) for code in (SIGKILLED, -2, 1, 0, 2, 3)] == [True, True, True, False, False, False]


def test_a_fleets_finished_actor_stays_finished_until_the_last_one_ends_the_run():
    specs = _fleet_specs(2)
    exits = RunExits(specs.values())
    assert exits.on_exit(specs["robot0/arm_actor"], 0).after is AfterExit.GO_ON
    last = exits.on_exit(specs["robot1/arm_actor"], 0)
    assert (last.after, last.reason, last.failed) == (AfterExit.END_RUN, "all 2 actors finished", False)


def test_a_crash_restarts_within_the_budget_then_ends_the_run_saying_how_often():
    specs = _fleet_specs(2)
    learner = specs["learner"]
    exits = RunExits(specs.values())
    assert learner.max_restarts == 3
    assert [exits.on_exit(learner, code).after for code in (SIGKILLED, 1, SIGKILLED)] == [AfterExit.RESTART] * 3
    gone = exits.on_exit(learner, SIGKILLED)
    assert gone.after is AfterExit.END_RUN and gone.failed
    assert gone.reason == "critical node 'learner' exited with code -9 after 3 restart(s)"
    assert exits.restarts["learner"] == 3 and exits.restarts["robot0/arm_actor"] == 0  # counted per node


def test_what_a_node_decided_itself_is_never_restarted():
    specs = _fleet_specs(1)
    exits = RunExits(specs.values())
    refused = exits.on_exit(specs["learner"], 2)  # refused parameters would only be refused again
    assert (refused.after, refused.reason) == (AfterExit.END_RUN, "critical node 'learner' exited with code 2")
    assert exits.on_exit(specs["arm_sim"], 0).after is AfterExit.END_RUN  # the run needs its robot


def test_nothing_is_restarted_or_ends_the_run_while_it_is_stopping():
    specs = _fleet_specs(1)
    exits = RunExits(specs.values())
    assert exits.on_exit(specs["learner"], SIGKILLED, stopping=True).after is AfterExit.GO_ON
    assert exits.restarts["learner"] == 0


# ---- the launch file's use of the decision ------------------------------------------------------------------
# `launch` and `launch_ros` are not on PyPI, so these tests load launch/train.launch.py against small
# stand-ins that record what the file builds; on a real ROS 2 install `ros2 launch` runs the same functions.


class _Recorded:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class _LaunchConfiguration(_Recorded):
    def perform(self, context):
        return context.configurations[self.args[0]]


class _Context:
    def __init__(self, **configurations):
        self.configurations = configurations
        self.is_shutdown = False


def _launch_file(monkeypatch):
    names = {"launch": ["LaunchDescription"],
             "launch.actions": ["DeclareLaunchArgument", "EmitEvent", "OpaqueFunction", "RegisterEventHandler",
                                "SetEnvironmentVariable", "TimerAction"],
             "launch.conditions": ["IfCondition"], "launch.event_handlers": ["OnProcessExit"],
             "launch.events": ["Shutdown"],
             "launch.substitutions": ["EnvironmentVariable", "EqualsSubstitution", "LaunchConfiguration"],
             "launch_ros": [], "launch_ros.actions": ["Node"]}
    for module_name, classes in names.items():
        module = types.ModuleType(module_name)
        for name in classes:
            base = _LaunchConfiguration if name == "LaunchConfiguration" else _Recorded
            setattr(module, name, type(name, (base,), {}))
        monkeypatch.setitem(sys.modules, module_name, module)
    spec = importlib.util.spec_from_file_location("train_launch", ROOT / "launch" / "train.launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _started_nodes(module, tmp_path, **arguments):
    config = yaml.safe_load(config_path("arm_lift").read_text())
    config["robot_rl"]["ros__parameters"]["demos"] = {"episodes": 0}  # nothing to record before the nodes start
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(config))
    context = _Context(**{"task": "arm_lift", "backend": "sim", "config": str(tmp_path / "task.yaml"), "namespace": "",
                          "run_dir": str(tmp_path / "run"), "actors": "1", "steps": "", **arguments})
    actions = module._nodes(context)
    nodes = [a for a in actions if type(a).__name__ == "Node"]
    handlers = {_key(a.args[0].kwargs["target_action"]): a.args[0].kwargs["on_exit"]
                for a in actions if type(a).__name__ == "RegisterEventHandler"}
    return context, nodes, handlers


def _key(node) -> str:
    namespace = node.kwargs["namespace"]
    return f"{namespace}/{node.kwargs['name']}" if namespace else node.kwargs["name"]


def _exit(code: int):
    return types.SimpleNamespace(returncode=code)


def test_the_launch_file_leaves_a_finished_actor_of_a_fleet_and_restarts_a_sigkilled_learner(monkeypatch, tmp_path):
    module = _launch_file(monkeypatch)
    context, nodes, on_exit = _started_nodes(module, tmp_path, actors="2")
    assert sorted(on_exit) == ["learner", "robot0/arm_actor", "robot0/arm_sim", "robot1/arm_actor", "robot1/arm_sim"]
    assert all("respawn" not in node.kwargs for node in nodes)  # launch_ros would respawn on any exit
    assert on_exit["robot0/arm_actor"](_exit(0), context) is None  # finished: not started again
    restart = on_exit["learner"](_exit(SIGKILLED), context)
    assert [type(a).__name__ for a in restart] == ["TimerAction"]
    again = restart[0].kwargs["actions"]
    assert [type(a).__name__ for a in again] == ["Node", "RegisterEventHandler"]
    assert again[0].kwargs["name"] == "learner" and again[0].kwargs["parameters"] == nodes[-1].kwargs["parameters"]
    # The restarted learner's exit goes through the same decision: three crashes in all are allowed.
    handler = again[1].args[0].kwargs["on_exit"]
    for _ in range(2):
        handler = handler(_exit(SIGKILLED), context)[0].kwargs["actions"][1].args[0].kwargs["on_exit"]
    shutdown = handler(_exit(SIGKILLED), context)
    assert [type(a).__name__ for a in shutdown] == ["EmitEvent"]
    assert "exited with code -9 after 3 restart(s)" in shutdown[0].kwargs["event"].kwargs["reason"]
    ended = on_exit["robot1/arm_actor"](_exit(0), context)
    assert ended[0].kwargs["event"].kwargs["reason"] == "all 2 actors finished"


def test_the_launch_file_takes_steps_and_keeps_a_namespaced_graphs_clock_to_itself(monkeypatch, tmp_path):
    module = _launch_file(monkeypatch)
    _, nodes, _ = _started_nodes(module, tmp_path, steps="1234")
    actor = next(node for node in nodes if node.kwargs["name"] == "arm_actor")
    assert actor.kwargs["parameters"][0]["total_steps"] == 1234
    _, nodes, _ = _started_nodes(module, tmp_path, namespace="lab")
    assert all(("/clock", "/lab/clock") in node.kwargs["remappings"] for node in nodes)
    with pytest.raises(ValueError, match="steps:='ten' must be a whole number"):
        _started_nodes(module, tmp_path, steps="ten")


def test_the_launch_file_writes_plain_logs_off_a_terminal(monkeypatch, tmp_path):
    module = _launch_file(monkeypatch)
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # `ros2 launch ... > run.log`
    description = module.generate_launch_description()
    colour = next(a for a in description.args[0] if type(a).__name__ == "SetEnvironmentVariable"
                  and a.args[0] == "RCUTILS_COLORIZED_OUTPUT")
    assert colour.args[1].kwargs["default_value"] == "0"  # the user's own setting still wins
    _, nodes, _ = _started_nodes(module, tmp_path)
    assert not any(node.kwargs["emulate_tty"] for node in nodes)
