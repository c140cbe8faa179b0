"""The one registry of robots: what generic code (tasks, node kinds, evaluation, the command line) asks about the
robots it can run, filled by the robot packages themselves.

A robot is a package that exposes a `Robot` named `ROBOT`: the ones inside `robot_rl/robots/` are found by
looking in that folder, and a package installed beside robot_rl adds its own through the entry-point group
`robot_rl.robots` (`[project.entry-points."robot_rl.robots"] my_arm = "my_arm:ROBOT"`), without any edit
here. A robot's parts are named by "module:attribute" strings and imported only when used, so asking which
robots exist loads no simulator, torch or ROS.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Mapping

ENTRY_POINT_GROUP = "robot_rl.robots"
BUILT_IN = "robot_rl.robots"
"""The package whose subpackages are the robots that ship with robot_rl."""

ROLES = ("simulator", "hardware", "actor", "learner", "person", "sensor", "reward")


@dataclass(frozen=True)
class Endpoints:
    """A node's topics and services as it names them (relative names resolve in its namespace, `~/x` under its
    own name), for its SROS2 permissions. `{camera}` in a name stands for each of the task's cameras, RESET for
    the service its `reset_service` parameter names."""

    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    serves: tuple[str, ...] = ()
    calls: tuple[str, ...] = ()


RESET = "{reset_service}"
CAMERA_TOPICS = ("{camera}/color/image_raw", "{camera}/color/camera_info")
"""A camera's image and calibration, as a camera node, a simulator or a robot's driver publishes them."""
TELEOP_TOPICS = ("teleop/cmd", "teleop/gripper", "teleop/engaged", "teleop/event")
"""What the teleop node publishes: an actor that lets a person take over subscribes to all of it."""


@dataclass(frozen=True)
class NodeKind:
    executable: str
    """Console script (`ros2 run robot_rl <executable>`)."""
    module: str
    """Python module with main(), for starting the node without the ROS CLI."""
    critical: bool
    """The graph shuts down when this node dies unexpectedly."""
    finishes_run: bool = False
    """A clean exit of this node means the run is complete (the actor after evaluation)."""
    max_restarts: int = 0
    """Times the node is respawned after a crash before its death ends the run; a config's
    `robot_rl: {restarts: {learner: 5}}` overrides it per node. Only nodes that resume where they stopped
    (the learner from checkpoint + journal, actors from their outbox and counters, the stateless reward node)
    restart by default."""
    role: str = "sensor"
    """What the node is to a graph (one of ROLES): a `simulator` or `hardware` node is the robot, an `actor`
    acts on it (gets the run directory and the robot's reset service), a `learner` is shared by a fleet."""
    serves_reset: bool = False
    """The node serves `~/reset` (a simulator, a real arm that can move home); an actor's episodes reset
    through it."""
    endpoints: Endpoints | None = None
    """What the node publishes, subscribes, serves and calls (`robot-rl security init` writes its permissions
    from it); robot_rl's own nodes list theirs in `ros/security.py`."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"node kind {self.executable!r}: role must be one of {ROLES}, not {self.role!r}")


DEFAULT_RESTARTS = 3


@dataclass(frozen=True)
class Robot:
    """Everything generic code needs to know about one robot; parts are "module:attribute" references."""

    name: str
    description: str
    tasks: Mapping[str, str] = field(default_factory=dict)
    """Task name -> a function of no arguments returning its `robot_rl.tasks.TaskSpec`."""
    nodes: Mapping[str, NodeKind] = field(default_factory=dict)
    """Node name -> how it starts; the node's module lives in an installed package (robot_rl's under `nodes/`)."""
    hardware_nodes: Mapping[str, str] = field(default_factory=dict)
    """Simulator node -> the node that takes its place, behind the same topics, with `backend: real`."""
    experts: Mapping[str, str] = field(default_factory=dict)
    """Gymnasium id of a simulation that is not a task's -> a function of no arguments returning its scripted
    expert (state, rng, noise) -> action."""
    shipped_policies: Mapping[str, str] = field(default_factory=dict)
    """`card.json` task of a policy directory -> evaluate(directory, episodes, seed, split, max_s) -> result dict
    (`robot-rl eval --policy DIR`)."""
    graph_evaluators: Mapping[str, str] = field(default_factory=dict)
    """Actor node -> evaluate(run, policy, task, episodes, seed, split, max_s) -> result dict: how a graph run's
    policy driven by that actor is judged in simulation (`robot-rl eval --policy RUN_DIR`)."""
    topic_decoders: Mapping[str, str] = field(default_factory=dict)
    """Actor node -> a class built as `(params, task)`, without a node, that reads what the actor reads and sends
    (`state_topics`, `state(msgs)`; `command_topics`, `action(msgs)`; `params`, the actor's parameters it uses):
    how a bag of the robot's topics becomes episodes (`robot-rl dataset import run.mcap`)."""
    encoder_scenes: Mapping[str, str] = field(default_factory=dict)
    """Gymnasium id of one of the robot's simulations -> frames(config, count, seed, progress) -> (frames, targets,
    target names): scripted episodes whose privileged state is the target, for `robot-rl pretrain-encoder`
    (`training/pretrain_encoder.py`) without an adapter."""
    demonstrations: str = ""
    """record(config, task, episodes, seed, noise) -> (arrays, info): scripted demonstrations of one of the
    robot's tasks, recorded in process in its simulator configured as the graph `config` configures it."""
    recipes: str = ""
    """add_parsers(subparsers): the robot's own `robot-rl` commands (training recipes without ROS)."""
    configs: str = ""
    """"package:folder" holding the robot's task configs (`<task>.yaml`, as robot_rl's `config/`); robot_rl's own
    robots keep theirs in robot_rl's config/."""
    view_simulator: str = ""
    """The simulator node that can render cameras for the person's view when the task has none of its own."""
    renamed_nodes: Mapping[str, str] = field(default_factory=dict)
    """Old node name -> its current name, accepted with a deprecation line (`ros/node_kinds.py`)."""
    default_for: Mapping[str, str] = field(default_factory=dict)
    """`robot-rl` command (train, record, demos, init) -> the task it runs when none is named; one robot
    (robot_rl's arm) gives the defaults."""


def resolve(reference: str) -> Any:
    """The object a "module:attribute" reference names."""
    module, _, attribute = reference.partition(":")
    if not module or not attribute:
        raise ValueError(f"{reference!r} is not a 'module:attribute' reference")
    target: Any = importlib.import_module(module)
    for name in attribute.split("."):
        target = getattr(target, name)
    return target


def _built_in() -> list[tuple[str, str]]:
    package = importlib.import_module(BUILT_IN)
    return [(f"{BUILT_IN}.{info.name}", f"{BUILT_IN}.{info.name}:ROBOT")
            for info in pkgutil.iter_modules(package.__path__) if info.ispkg]


@cache
def robots() -> dict[str, Robot]:
    """Every robot: robot_rl's own, then those of installed packages (entry points of group `robot_rl.robots`).
    Two robots claiming one name, task or node is refused, naming both."""
    found: dict[str, Robot] = {}
    owners: dict[tuple[str, str], str] = {}
    sources = _built_in() + [(ep.value, ep.value) for ep in entry_points(group=ENTRY_POINT_GROUP)]
    for source, reference in sources:
        try:
            robot = resolve(reference)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ImportError(f"robot package {source}: cannot load {reference}: {exc}") from exc
        if not isinstance(robot, Robot):
            raise TypeError(f"robot package {source}: {reference} is a {type(robot).__name__}, not a Robot")
        for what, names in (("robot", [robot.name]), ("task", robot.tasks), ("node", [*robot.nodes,
                                                                                      *robot.renamed_nodes])):
            for name in names:
                if (what, name) in owners and owners[what, name] != source:
                    raise ValueError(f"{what} {name!r} is claimed by both {owners[what, name]} and {source}")
                owners[what, name] = source
        found.setdefault(robot.name, robot)
    return found


def _merged(attribute: str) -> dict[str, Any]:
    return {key: value for robot in robots().values() for key, value in getattr(robot, attribute).items()}


def task_factories() -> dict[str, Callable[[], Any]]:
    """Task name -> factory of its TaskSpec, over every robot."""
    return {name: _lazy(reference) for name, reference in _merged("tasks").items()}


def node_kinds() -> dict[str, NodeKind]:
    return _merged("nodes")


def hardware_nodes() -> dict[str, str]:
    return _merged("hardware_nodes")


def expert_factories() -> dict[str, Callable[[], Any]]:
    return {env_id: _lazy(reference) for env_id, reference in _merged("experts").items()}


def _resolved(attribute: str, key: str) -> Any:
    """The object a robot's `attribute` names for `key` (its references merged over every robot); None if none."""
    reference = _merged(attribute).get(key)
    return resolve(reference) if reference else None


def shipped_policy_evaluator(card_task: str) -> Callable[..., dict] | None:
    return _resolved("shipped_policies", card_task)


def shipped_policy_tasks() -> list[str]:
    return sorted(_merged("shipped_policies"))


def encoder_scene(env_id: str) -> Callable[..., Any] | None:
    """The function that renders scripted pretraining frames of simulation `env_id`; None if no robot has one."""
    return _resolved("encoder_scenes", env_id)


def encoder_scene_ids() -> list[str]:
    return sorted(_merged("encoder_scenes"))


def graph_evaluator(actor_node: str) -> Callable[..., dict] | None:
    return _resolved("graph_evaluators", actor_node)


def topic_decoder(actor_node: str) -> type | None:
    return _resolved("topic_decoders", actor_node)


def robot_of_task(task: str) -> Robot:
    for robot in robots().values():
        if task in robot.tasks:
            return robot
    raise ValueError(f"no robot has task {task!r}; known tasks: {', '.join(sorted(_merged('tasks')))}")


def scripted_demos(task: str) -> Callable[..., Any]:
    """The recorder of scripted demonstrations of `task` (its robot's `demonstrations`)."""
    robot = robot_of_task(task)
    if not robot.demonstrations:
        raise ValueError(f"robot {robot.name} records no scripted demonstrations of {task}")
    return _lazy(robot.demonstrations)


def recipe_parsers() -> list[Callable[[Any], None]]:
    """Each robot's add_parsers(subparsers) for its own `robot-rl` commands."""
    return [_lazy(robot.recipes) for robot in robots().values() if robot.recipes]


def default_task(command: str) -> str:
    """The task `robot-rl <command>` runs when none is named."""
    defaults = [robot.default_for[command] for robot in robots().values() if command in robot.default_for]
    if len(defaults) != 1:
        raise ValueError(f"robot-rl {command}: {len(defaults)} robots give a default task; name one with --task")
    return defaults[0]


def renamed_nodes() -> dict[str, str]:
    return _merged("renamed_nodes")


def config_dirs() -> list[Path]:
    """The folders of task configs robots bring (`Robot.configs`)."""
    from importlib.resources import files

    folders = []
    for robot in robots().values():
        if robot.configs:
            package, _, folder = robot.configs.partition(":")
            folders.append(Path(str(files(package).joinpath(folder))))
    return folders


def view_simulators() -> set[str]:
    return {robot.view_simulator for robot in robots().values() if robot.view_simulator}


def _lazy(reference: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return resolve(reference)(*args, **kwargs)

    call.__qualname__ = call.__name__ = reference
    return call
