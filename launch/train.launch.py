"""Train a robot_rl task: `ros2 launch robot_rl train.launch.py task:=arm_lift backend:=sim`.

The nodes and their parameters come from the package's graph spec (robot_rl/ros/graph.py),
the same one `robot-rl train` uses, built from config/<task>.yaml or `config:=<file>`, with the
same restart policy: a node with restarts (learner, arm_actor, reward by default; `robot_rl.restarts`)
is respawned after a crash (`respawn_max_retries` needs ROS 2 Iron or newer) and resumes where it
stopped. The launch ends when the actor finishes (every robot's actor, with `actors:=N`), or when
a critical node exits for good: on its own, or crashed past its restarts.
"""

import time
from pathlib import Path

from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    OpaqueFunction,
    RegisterEventHandler,
    SetEnvironmentVariable,
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
    prepare_run,
    simulated_demos,
)
from robot_rl.ros.node_kinds import crashed
from robot_rl.ros.supervisor import RESTART_DELAY_S
from robot_rl.transport.secret import ensure_run_secret


def _end_of_run(spec, finishers: set):
    """OnProcessExit callback of a critical or run-finishing node: shuts the launch down unless
    launch respawns the node (a crash within its restarts), or other actors of the fleet still run
    (`finishers`: the keys of the actors not yet finished, shared by their callbacks)."""
    crashes = 0

    def on_exit(event, context):
        nonlocal crashes
        code = event.returncode
        if spec.kind.finishes_run and code == 0:
            finishers.discard(spec.key)
            return None if finishers else [EmitEvent(event=Shutdown(reason=f"{spec.key} finished"))]
        if crashed(code) and crashes < spec.max_restarts:
            crashes += 1
            return None  # launch respawns it after respawn_delay
        if not spec.kind.critical:
            return None
        # The shutdown comes within respawn_delay, so a node that exited on purpose is not respawned.
        after = f" after {crashes} restart(s)" if crashes else ""
        return [EmitEvent(event=Shutdown(reason=f"critical node {spec.key} exited with code {code}{after}"))]

    return on_exit


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
    config = prepare_run(config, run_dir, simulated_demos(config, backend))
    specs = build_graph(config, backend, run_dir, namespace)
    ensure_run_secret(run_dir)  # before any node starts: a fleet's actors read it, none makes it
    finishers = {spec.key for spec in specs if spec.kind.finishes_run}
    actions = []
    for spec in specs:
        node = Node(package="robot_rl", executable=spec.kind.executable, name=spec.name,
                    namespace=spec.namespace or None, parameters=[spec.parameters], remappings=list(spec.remaps.items()),
                    output="screen", emulate_tty=True, respawn=spec.max_restarts > 0, respawn_delay=RESTART_DELAY_S,
                    respawn_max_retries=spec.max_restarts)
        actions.append(node)
        if spec.kind.critical or spec.kind.finishes_run:
            actions.append(RegisterEventHandler(OnProcessExit(target_action=node,
                                                              on_exit=_end_of_run(spec, finishers))))
    return actions


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
        SetEnvironmentVariable("FASTDDS_BUILTIN_TRANSPORTS",
                               EnvironmentVariable("FASTDDS_BUILTIN_TRANSPORTS", default_value="LARGE_DATA")),
        OpaqueFunction(function=_nodes),
    ])
