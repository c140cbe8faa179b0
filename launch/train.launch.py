"""Train a robot_rl task: `ros2 launch robot_rl train.launch.py task:=arm_lift backend:=sim`.

The nodes and their parameters come from the package's graph spec (robot_rl/ros/graph.py),
the same one `robot-rl train` uses, built from config/<task>.yaml or `config:=<file>`, and every
node's exit is decided as `robot-rl train` decides it (robot_rl/ros/exits.py): a node with restarts
(learner, the actors, reward by default; `robot_rl.restarts`) is started again after a crash and
resumes where it stopped; an actor that finished is left finished, also while the rest of its fleet
runs on. The launch ends when every robot's actor has finished, or when a node the run needs is gone
for good (exited on its own, or crashed past its restarts).
"""

import sys
import time
from pathlib import Path

from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    OpaqueFunction,
    RegisterEventHandler,
    SetEnvironmentVariable,
    TimerAction,
)
from launch.conditions import IfCondition
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import EnvironmentVariable, EqualsSubstitution, LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription
from robot_rl.robots.registry import default_task
from robot_rl.ros.graph import (
    apply_overrides,
    build_graph,
    config_path,
    fastdds_profile_path,
    load_config,
    node_names,
    prepare_run,
    simulated_demos,
)
from robot_rl.ros.exits import AfterExit, RunExits
from robot_rl.ros.settings import run_length_settings
from robot_rl.ros.supervisor import RESTART_DELAY_S
from robot_rl.transport.secret import ensure_run_secret


def _started(spec, exits: RunExits) -> list:
    """`spec`'s node and the handler of its exit, which asks `exits` what the exit means: a crash within
    its restarts starts the node again (a new process, after RESTART_DELAY_S), the end of the run shuts
    the launch down, anything else leaves the node stopped. (launch_ros's own `respawn` would restart a
    node on any exit, an actor that finished too.)"""
    node = Node(package="robot_rl", executable=spec.kind.executable, name=spec.name,
                namespace=spec.namespace or None, parameters=[spec.parameters], remappings=list(spec.remaps.items()),
                output="screen", emulate_tty=sys.stdout.isatty())

    def on_exit(event, context):
        decision = exits.on_exit(spec, event.returncode, stopping=context.is_shutdown)
        if decision.after is AfterExit.RESTART:
            return [TimerAction(period=RESTART_DELAY_S, actions=_started(spec, exits))]
        if decision.after is AfterExit.END_RUN:
            return [EmitEvent(event=Shutdown(reason=decision.reason))]
        return None

    return [node, RegisterEventHandler(OnProcessExit(target_action=node, on_exit=on_exit))]


def _nodes(context, *args, **kwargs):
    task = LaunchConfiguration("task").perform(context)
    backend = LaunchConfiguration("backend").perform(context)
    config_file = LaunchConfiguration("config").perform(context) or str(config_path(task))
    namespace = LaunchConfiguration("namespace").perform(context)
    run_dir = LaunchConfiguration("run_dir").perform(context) or f"runs/{task}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = str(Path(run_dir).resolve())
    config = load_config(config_file)
    actors = int(LaunchConfiguration("actors").perform(context))
    if actors != 1:
        config = apply_overrides(config, {"robot_rl.actors": actors})
    steps = LaunchConfiguration("steps").perform(context)
    if steps:
        if not steps.isdigit():
            raise ValueError(f"steps:={steps!r} must be a whole number of environment steps")
        config = apply_overrides(config, run_length_settings(node_names(config, backend), steps=int(steps),
                                                             flags={"steps": "steps:="}))
    config = prepare_run(config, run_dir, simulated_demos(config, backend))
    specs = build_graph(config, backend, run_dir, namespace)
    ensure_run_secret(run_dir)  # before any node starts: a fleet's actors read it, none makes it
    exits = RunExits(specs)
    return [action for spec in specs for action in _started(spec, exits)]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("task", default_value=default_task("train"),
                              description="Task name (config/<task>.yaml, or a robot package's)."),
        DeclareLaunchArgument("backend", default_value="sim", choices=["sim", "real"],
                              description="sim: MuJoCo simulator node; real: hardware drivers publish the topics."),
        DeclareLaunchArgument("config", default_value="", description="Task config YAML overriding the packaged one."),
        DeclareLaunchArgument("namespace", default_value="", description="Namespace for every node."),
        DeclareLaunchArgument("run_dir", default_value="", description="Checkpoints, logs and results."),
        DeclareLaunchArgument("actors", default_value="1",
                              description="Robot+actor pairs feeding the one learner (namespaced robot0..N-1)."),
        DeclareLaunchArgument("steps", default_value="",
                              description="Training environment steps (the actor's total_steps); empty: the config's."),
        # Simulation stays on this machine unless the user exports another range; a real robot's
        # driver may run on another computer, so backend:=real keeps the user's discovery (ROS 2's
        # default is the subnet), as `robot-rl train --backend real` does.
        SetEnvironmentVariable("ROS_AUTOMATIC_DISCOVERY_RANGE",
                               EnvironmentVariable("ROS_AUTOMATIC_DISCOVERY_RANGE", default_value="LOCALHOST"),
                               condition=IfCondition(EqualsSubstitution(LaunchConfiguration("backend"), "sim"))),
        # Large weight and image payloads: a big shared-memory segment (see robot_rl/ros/graph.py).
        SetEnvironmentVariable("FASTDDS_DEFAULT_PROFILES_FILE",
                               EnvironmentVariable("FASTDDS_DEFAULT_PROFILES_FILE",
                                                   default_value=str(fastdds_profile_path()))),
        # Colour codes only on a terminal: `ros2 launch ... > run.log` gives a plain log.
        SetEnvironmentVariable("RCUTILS_COLORIZED_OUTPUT",
                               EnvironmentVariable("RCUTILS_COLORIZED_OUTPUT",
                                                   default_value="1" if sys.stdout.isatty() else "0")),
        SetEnvironmentVariable("FASTDDS_BUILTIN_TRANSPORTS",
                               EnvironmentVariable("FASTDDS_BUILTIN_TRANSPORTS", default_value="LARGE_DATA")),
        OpaqueFunction(function=_nodes),
    ])
