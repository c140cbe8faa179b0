"""Checks a task config's settings against what its nodes declare, before anything starts: a
mistyped node or parameter name fails with the closest known name instead of being ignored, and a
value takes the declared type (an integer where a float is declared becomes a float).

A node's declared parameters are its module's `PARAMS` (plus the safety parameters of hardware
nodes and rclpy's own `use_sim_time`); reading them imports the node's module, about a second for
the torch-based nodes, which `robot-rl train` pays once for the graph's few nodes.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Mapping

from robot_rl.outputs import UserError
from robot_rl.ros.hardware_node import SAFETY_PARAMS, HardwareNode
from robot_rl.ros.node_kinds import DEPRECATED_NODE_NAMES, NODE_KINDS, current_name
from robot_rl.ros.node_utils import Param, ParameterError, check_bounds, closest_name, coerce_value

GRAPH_KEYS = ("task", "nodes", "demos", "restarts", "actors", "env")
"""Keys of the `robot_rl` graph section (`restarts`: per-node restart policy; `env`: the Gymnasium environment of
task `env`, `training/env_graph.py: EnvSection`)."""
DEMOS_KEYS = ("episodes", "noise", "seed")


class SettingsError(UserError, ValueError):
    """A setting no node declares, or a value it refuses (a ValueError too, for callers of the graph
    spec that catch those, such as the launch file's users)."""


@functools.cache
def declared_params(node: str) -> dict[str, Any]:
    """Parameter name -> `Param` of what node kind `node` declares."""
    module = importlib.import_module(NODE_KINDS[node].module)
    params = [Param("use_sim_time", False, "Follow /clock (declared by rclpy itself).")]
    if any(isinstance(obj, type) and issubclass(obj, HardwareNode) and obj.__module__ == module.__name__
           for obj in vars(module).values()):
        params += SAFETY_PARAMS
    return {p.name: p for p in [*params, *module.PARAMS]}


def check_node_name(node: str, where: str) -> None:
    if node not in NODE_KINDS:
        raise SettingsError(f"{where}: unknown node {node!r}{closest_name(node, NODE_KINDS)}; known: {sorted(NODE_KINDS)}")


def check_node_setting(node: str, name: str, value: Any, where: str, current: Any = None) -> Any:
    """`value` converted to the type `node` declares for parameter `name`; SettingsError naming
    `where` (a file or a --set) when the node has no such parameter or the value cannot be one
    (wrong type, out of range, not one of the choices). `current`: the value the run has for it so far
    (its task file's or a flag's), which the error names where it differs from the declared default."""
    check_node_name(node, where)
    declared = declared_params(node)
    if name not in declared:
        raise SettingsError(f"{where}: {node} has no parameter {name!r}{closest_name(name, declared)}")
    try:
        value = coerce_value(declared[name], value)
        check_bounds(declared[name], value)
        return value
    except ParameterError as exc:
        param = declared[name]
        here = f"; this run's value is {current!r}" if current is not None and current != param.default else ""
        raise SettingsError(f"{where}: {node}: {exc} ({param.description.rstrip('.')}){here}") from None


def check_graph_setting(name: str, value: Any, where: str) -> None:
    """A key of the `robot_rl` graph section and its value's shape."""
    if name not in GRAPH_KEYS:
        raise SettingsError(f"{where}: the robot_rl graph section has no key {name!r}{closest_name(name, GRAPH_KEYS)}; "
                            f"known: {list(GRAPH_KEYS)}")
    if name == "nodes":
        if not isinstance(value, list):
            raise SettingsError(f"{where}: robot_rl.nodes must be a list of node names, not {value!r}")
        for node in value:
            check_node_name(node, where)
    elif name == "demos":
        if not isinstance(value, dict):
            raise SettingsError(f"{where}: robot_rl.demos must be a mapping like {{episodes: 20}}, not {value!r}")
        for key in value:
            if key not in DEMOS_KEYS:
                raise SettingsError(f"{where}: robot_rl.demos has no key {key!r}{closest_name(key, DEMOS_KEYS)}; "
                                    f"known: {list(DEMOS_KEYS)}")
    elif name == "env":
        from robot_rl.training.env_graph import EnvSection

        try:
            EnvSection.from_mapping(value).adapter_config()
        except (TypeError, ValueError) as exc:
            raise SettingsError(f"{where}: {exc}") from None
    elif name == "restarts" and not isinstance(value, dict):
        raise SettingsError(f"{where}: robot_rl.restarts must be a mapping of node names, not {value!r}")
    elif name == "actors" and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64):
        raise SettingsError(f"{where}: robot_rl.actors is the number of robot+actor pairs, 1 to 64, not {value!r}")


def _renamed(names: list, what: str, where: str) -> list:
    """`names` with deprecated node names replaced by the new ones (each said once on stderr); a
    name given both ways is refused."""
    for old, new in DEPRECATED_NODE_NAMES.items():
        if old in names and new in names:
            raise SettingsError(f"{where}: {what} {old!r} and {new!r} are the same node ({old!r} is its deprecated "
                                f"name): keep only {new!r}")
    return [current_name(n, what) if isinstance(n, str) else n for n in names]


def renamed_graph_setting(name: str, value: Any, where: str) -> Any:
    """A graph setting (`robot_rl.nodes`, `robot_rl.restarts`) with deprecated node names in it replaced
    by the new ones (see `robot_rl.ros.node_kinds.DEPRECATED_NODE_NAMES`)."""
    if name == "nodes" and isinstance(value, list):
        return _renamed(value, "robot_rl.nodes entry", where)
    if name == "restarts" and isinstance(value, dict):
        return dict(zip(_renamed(list(value), "robot_rl.restarts key", where), value.values()))
    return value


def renamed_sections(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`config` with its sections named after deprecated nodes (`sim:`, `actor:`) under the new names,
    and the same for the graph section's node lists; a node given a section under both names is refused."""
    names = _renamed([k for k in config if k != "robot_rl"], "config section", where)
    out = dict(zip(names, (v for k, v in config.items() if k != "robot_rl")))
    if "robot_rl" in config:
        graph = config["robot_rl"]
        out["robot_rl"] = ({k: renamed_graph_setting(k, v, where) for k, v in graph.items()}
                           if isinstance(graph, Mapping) else graph)
    return out


def check_config(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The config with every node section's values in their declared types; SettingsError for an
    unknown section, graph key or parameter. Sections and node lists that use a deprecated node name
    are taken under the new name (`renamed_sections`)."""
    config = renamed_sections(config, where)
    out = {"robot_rl": dict(config["robot_rl"])}
    for name, value in config["robot_rl"].items():
        check_graph_setting(name, value, where)
    for node, section in config.items():
        if node == "robot_rl":
            continue
        check_node_name(node, where)
        params = (section or {}).get("ros__parameters") if isinstance(section, dict) else None
        if not isinstance(params, dict) or set(section) != {"ros__parameters"}:
            raise SettingsError(f"{where}: section {node!r} must hold only a 'ros__parameters' mapping")
        out[node] = {"ros__parameters": {k: check_node_setting(node, k, v, where) for k, v in params.items()}}
    return out


def node_using(param: str, nodes: list[str]) -> str | None:
    """The first of `nodes` that declares `param` (which node a command-line flag sets)."""
    return next((n for n in nodes if param in declared_params(n)), None)


def run_length_settings(nodes: list[str], steps: int | None = None, eval_episodes: int | None = None,
                        seed: int | None = None, flags: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The run's length and seed as settings of the graph's nodes that declare them (`robot-rl train
    --steps/--eval-episodes/--seed`, `ros2 launch ... steps:=N`): {"arm_actor.total_steps": N, ...}. A value
    no node of the graph uses is refused rather than dropped; `flags` names each value as its user wrote it."""
    flags = {"steps": "steps", "eval_episodes": "eval_episodes", "seed": "seed", **(flags or {})}
    out = {}
    for name, param, value in (("steps", "total_steps", steps), ("eval_episodes", "eval_episodes", eval_episodes)):
        if value is not None:
            node = node_using(param, nodes)
            if node is None:
                raise SettingsError(f"{flags[name]}: no node of this graph ({', '.join(nodes)}) declares {param}")
            out[f"{node}.{param}"] = value
    if seed is not None:
        seeded = [n for n in nodes if "seed" in declared_params(n)]
        if not seeded:
            raise SettingsError(f"{flags['seed']}: no node of this graph ({', '.join(nodes)}) declares seed")
        out.update({f"{n}.seed": seed for n in seeded})
    return out


def warmup_warning(config: Mapping[str, Any], nodes: list[str]) -> str | None:
    """A run whose actor stops before the learner's warm-up is over trains nothing."""
    actor = node_using("total_steps", nodes)
    if actor is None or "learner" not in nodes:
        return None
    total = config.get(actor, {}).get("ros__parameters", {}).get("total_steps",
                                                                  declared_params(actor)["total_steps"].default)
    warmup = config.get("learner", {}).get("ros__parameters", {}).get(
        "warmup_transitions", declared_params("learner")["warmup_transitions"].default)
    if total > warmup:
        return None
    return (f"{actor}.total_steps={total} is not more than learner.warmup_transitions={warmup}: the learner "
            "never updates the policy, this run trains nothing")
