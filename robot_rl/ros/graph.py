"""The node graph of a task, defined once: `launch/train.launch.py` and `robot-rl train` both
build their processes from `build_graph`, so the two can never start different graphs.

A task config (config/<task>.yaml) has one `ros__parameters` section per node plus the graph
section (the task, the nodes to start, how demonstrations are made), kept under
`robot_rl: {ros__parameters: ...}` so the whole file is valid rcl parameter YAML (`ros2 run
robot_rl arm_sim --ros-args --params-file config/arm_lift.yaml`). In memory, `config["robot_rl"]`
is the graph section itself.

A fleet (`robot_rl.actors: N`, N > 1) starts the robot side N times, namespaced robot0..robotN-1
(its simulator or robot nodes, the actor and any person's nodes), every one feeding the one learner:
each actor gets its own actor_id, seed and run subdirectory, and its learner topics (rl/*) are
remapped to the learner's.
"""

from __future__ import annotations

import copy
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from robot_rl.resources import share_dir
from robot_rl.ros.node_kinds import (
    BACKEND_REPLACEMENTS,
    DEPRECATED_NODE_NAMES,
    NODE_KINDS,
    NodeKind,
    current_name,
    nodes_with_role,
)
from robot_rl.tasks import ENV_TASK

PACKAGE = "robot_rl"


@dataclass
class NodeSpec:
    name: str
    kind: NodeKind
    parameters: dict[str, Any] = field(default_factory=dict)
    namespace: str = ""
    max_restarts: int = 0
    remaps: dict[str, str] = field(default_factory=dict)
    """Topic remappings (`-r from:=to`): a fleet's actors reach the shared learner's rl/* topics."""

    @property
    def key(self) -> str:
        """Unique within a graph: the node's name, behind its namespace when it has one (robot0/arm_actor)."""
        return f"{self.namespace.strip('/')}/{self.name}" if self.namespace else self.name

    @property
    def qualified_name(self) -> str:
        """The node's fully qualified ROS name (/robot0/arm_actor), what a params file keys it by."""
        return f"/{self.key}"


LEARNERS = nodes_with_role("learner")
"""Nodes a fleet shares; every other node of the graph runs once per robot."""
ACTORS = nodes_with_role("actor")
"""Nodes that act on a robot: each gets the run directory and its robot's reset service."""
LEARNER_TOPICS = ("rl/transitions", "rl/policy", "rl/acks")


def robot_namespace(index: int | str) -> str:
    """Robot `index` of a fleet: its namespace, actor id and run subdirectory (a str: a placeholder)."""
    return f"robot{index}"


def robot_file(path: str, robot: str) -> str:
    """A fleet robot's own file beside the one asked for: view.rrd -> view-<robot>.rrd."""
    return str(Path(path).with_name(f"{Path(path).stem}-{robot}{Path(path).suffix}"))


def config_path(task: str) -> Path:
    """config/<task>.yaml: robot_rl's own, or one a robot package brings (`Robot.configs`)."""
    from robot_rl.robots.registry import config_dirs

    folders = [share_dir() / "config", *config_dirs()]
    for folder in folders:
        if (folder / f"{task}.yaml").exists():
            return folder / f"{task}.yaml"
    known = sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})
    raise FileNotFoundError(f"no config for task {task!r} in {', '.join(map(str, folders))}; available: {known}")


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """The task config at `path` with the graph section as `config["robot_rl"]`; every key is
    checked against what the nodes declare (robot_rl/ros/settings.py)."""
    from robot_rl.ros.settings import SettingsError, check_config  # settings imports this module

    with open(path) as f:
        config = yaml.safe_load(f)
    graph = config.get("robot_rl") if isinstance(config, dict) else None
    if not isinstance(graph, dict) or not isinstance(graph.get("ros__parameters"), dict):
        raise SettingsError(f"{path}: a task config needs the graph section as 'robot_rl: {{ros__parameters: "
                            "{task: ..., nodes: [...]}}' (under ros__parameters since the file is rcl parameter YAML)")
    return check_config({**config, "robot_rl": graph["ros__parameters"]}, str(path))


def apply_overrides(config: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`{"arm_actor.total_steps": 500}` sets arm_actor's ros__parameters.total_steps; `robot_rl.x` the
    graph section. A name no node declares, or a value of the wrong type, raises SettingsError; a
    deprecated node name (`actor.total_steps`) is taken for its new one with a warning."""
    from robot_rl.ros.settings import SettingsError, check_graph_setting, check_node_setting, renamed_graph_setting

    config = copy.deepcopy(config)
    for key, value in overrides.items():
        node, _, param = key.partition(".")
        where = f"--set {key}={value}"
        if not param:
            raise SettingsError(f"{where}: a setting looks like node.parameter=value")
        if node == "robot_rl":
            value = renamed_graph_setting(param, value, "--set robot_rl")
            check_graph_setting(param, value, where)
            config["robot_rl"][param] = value
        else:
            node = current_name(node, "--set node")
            section = config.setdefault(node, {}).setdefault("ros__parameters", {})
            section[param] = check_node_setting(node, param, value, where, current=section.get(param))
    return config


def _with_current_names(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """`config` with deprecated node names (sections, `nodes`, `restarts`) replaced by the new ones, for
    configs built in code (`load_config` and `apply_overrides` have done it for the others)."""
    graph, old = config["robot_rl"], set(DEPRECATED_NODE_NAMES)
    if not (old & set(config) or old & set(graph.get("nodes") or []) or old & set(graph.get("restarts") or {})):
        return config
    from robot_rl.ros.settings import renamed_sections

    return renamed_sections(config, "graph config")


def node_names(config: Mapping[str, Any], backend: str) -> list[str]:
    """The nodes the graph starts with `backend` (real-robot nodes in the simulators' places)."""
    if backend not in ("sim", "real"):
        raise ValueError(f"backend must be 'sim' or 'real', not {backend!r}")
    config = _with_current_names(config)
    names = [BACKEND_REPLACEMENTS.get(backend, {}).get(n, n) for n in config["robot_rl"].get("nodes", [])]
    return [n for n in names if n is not None]  # None: the real robot's own drivers publish these topics


def build_graph(config: Mapping[str, Any], backend: str = "sim", run_dir: str | None = None,
                namespace: str = "") -> list[NodeSpec]:
    config = _with_current_names(config)
    names = node_names(config, backend)
    # The node that owns ~/reset: the simulator, or the robot node that replaces it.
    robot = next((n for n in names if NODE_KINDS[n].serves_reset), None)
    prefix = f"/{namespace.strip('/')}" if namespace else ""
    restarts = _restart_budgets(config["robot_rl"].get("restarts") or {})
    actors = config["robot_rl"].get("actors", 1)
    specs = []
    for name in names:
        fleet = range(actors) if actors > 1 and name not in LEARNERS else [None]
        for index in fleet:
            params = dict(config.get(name, {}).get("ros__parameters", {}))
            ns = namespace.strip("/") if index is None else "/".join(filter(None, [namespace.strip("/"),
                                                                                   robot_namespace(index)]))
            if run_dir is not None and name in (*ACTORS, *LEARNERS, "session_view"):
                params["run_dir"] = str(run_dir)
            if name in ACTORS:  # a real robot without ~/reset starts each episode where it is
                params["reset_service"] = f"{'/' + ns if ns else ''}/{robot}/reset" if robot is not None else ""
            spec = NodeSpec(name, NODE_KINDS[name], params, ns, restarts.get(name, NODE_KINDS[name].max_restarts))
            if index is not None:
                _as_fleet_member(spec, index, actors, prefix, run_dir)
            if spec.namespace:  # a lockstep simulator's clock is its graph's (or its robot's), never global
                spec.remaps["/clock"] = f"/{spec.namespace}/clock"
            specs.append(spec)
    _check_lockstep_sync(config)
    _hold_learner_to_lockstep(specs)
    return specs


def _as_fleet_member(spec: NodeSpec, index: int, size: int, prefix: str, run_dir: str | None) -> None:
    """Robot `index` of a fleet of `size`: its own seed, actor id and run subdirectory (outbox, eval.json), the
    run's secret and the learner's topics shared; a realtime simulator ticks index/size of a period after robot 0's."""
    from robot_rl.ros.settings import declared_params

    declared = declared_params(spec.name)
    if "seed" in declared:
        spec.parameters["seed"] = int(spec.parameters.get("seed", declared["seed"].default)) + index
    if "actor_id" in declared:
        spec.parameters["actor_id"] = robot_namespace(index)
        if run_dir is not None:
            spec.parameters["run_dir"] = str(Path(run_dir) / robot_namespace(index))
            spec.parameters.setdefault("key_file", str(Path(run_dir) / "secret.key"))
        spec.remaps.update({topic: f"{prefix}/{topic}" for topic in LEARNER_TOPICS})
    if "tick_phase" in declared:
        spec.parameters["tick_phase"] = (float(spec.parameters.get("tick_phase", 0.0)) + index / size) % 1.0
    if "port" in declared:  # the person's view of each robot on a port of its own
        spec.parameters["port"] = int(spec.parameters.get("port", declared["port"].default)) + index
    rerun = str(spec.parameters.get("rerun", ""))
    if "rerun" in declared and rerun.endswith(".rrd"):  # each robot's view in a file of its own
        spec.parameters["rerun"] = robot_file(rerun, robot_namespace(index))
    if spec.parameters.get("timing_log") and "timing_log" in declared:  # each robot's steps in a file of its own
        spec.parameters["timing_log"] = robot_file(str(spec.parameters["timing_log"]), robot_namespace(index))


def _restart_budgets(restarts: Mapping[str, Any]) -> dict[str, int]:
    """The `robot_rl.restarts` section: node name -> restarts allowed (an int >= 0)."""
    if not isinstance(restarts, Mapping):
        raise ValueError(f"robot_rl.restarts must map node names to counts, e.g. {{learner: 5}}, not {restarts!r}")
    for name, count in restarts.items():
        if name not in NODE_KINDS:
            raise ValueError(f"robot_rl.restarts: unknown node {name!r}; known: {sorted(NODE_KINDS)}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"robot_rl.restarts.{name} must be a whole number >= 0, not {count!r}")
    return dict(restarts)


def _check_lockstep_sync(config: Mapping[str, Any]) -> None:
    """A lockstep actor waiting for learner updates must be allowed to run ahead far enough to
    fill the learner's warm-up, or the two wait for each other forever."""
    name = next((n for n in ACTORS if n in config), None)
    actor = config.get(name, {}).get("ros__parameters", {}) if name else {}
    learner = config.get("learner", {}).get("ros__parameters", {})
    if float(actor.get("sync_updates_per_step", 0.0)) <= 0 or not learner:
        return
    slack = int(actor.get("sync_slack_steps", 500))
    warmup = int(learner.get("warmup_transitions", 256))
    if slack < warmup:  # a waiting actor has sent all its slack steps' transitions, and no more
        raise ValueError(f"{name}.sync_slack_steps={slack} is fewer than learner.warmup_transitions={warmup}: the "
                         "actor would wait for updates the learner never starts; raise the slack or lower the warm-up")


def _hold_learner_to_lockstep(specs: list[NodeSpec]) -> None:
    """A lockstep actor waits for `sync_updates_per_step` learner updates per step; the learner makes exactly
    that many (its `max_update_ratio` becomes the actor's ratio), so a lockstep run's updates do not depend on
    how fast the machine is. On the wall clock the learner keeps its own cap: it trains on every spare cycle."""
    from robot_rl.ros.settings import declared_params

    ratio = max((float(s.parameters.get("sync_updates_per_step", 0.0)) for s in specs if s.name in ACTORS),
                default=0.0)
    for spec in specs:
        if ratio > 0 and spec.name in LEARNERS and "max_update_ratio" in declared_params(spec.name):
            spec.parameters["max_update_ratio"] = ratio


def params_file(specs: list[NodeSpec], path: str | os.PathLike) -> Path:
    """Writes the graph's parameters in ros__parameters YAML (what --params-file reads), each node
    under its fully qualified name."""
    data = {spec.qualified_name: {"ros__parameters": spec.parameters} for spec in specs}
    path = Path(path)
    path.write_text(yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False))
    return path


class _NoAliasDumper(yaml.SafeDumper):
    """Writes a value shared by several nodes (a fleet's robots get the same camera list) in full each time:
    rcl's parameter parser refuses YAML anchors and aliases."""

    def ignore_aliases(self, data) -> bool:
        return True


def fastdds_profile_path() -> Path:
    """Fast DDS profile with a 64 MiB shared-memory segment (config/fastdds_large_payloads.xml).

    FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA is ignored when discovery is limited to localhost
    (rmw_fastrtps then installs its own 512 KiB shared-memory transport), and a 5 MB weights
    message took ~67 ms instead of ~20 ms; see benchmarks/transport.py.
    """
    return share_dir() / "config" / "fastdds_large_payloads.xml"


def loopback_environment(domain_id: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment that keeps DDS discovery and traffic on this machine, with the large-payload
    transport settings (a user's own FASTDDS_DEFAULT_PROFILES_FILE is kept)."""
    env = _node_environment(domain_id, base)
    env.update({"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_LOCALHOST_ONLY": "1"})  # the latter: pre-Jazzy
    return env


_SHM_DIR = Path("/dev/shm")


def fastdds_leftovers(shm_dir: Path = _SHM_DIR) -> Counter[int]:
    """Fast DDS shared-memory port files in ``shm_dir`` per ROS domain (segments and their named
    mutexes, named by RTPS port: 7400 + 250 * domain + offset, offset < 250). For a domain where no
    process runs, they are what killed nodes of earlier runs left behind (a mutex a killed process
    held stays locked)."""
    counts: Counter[int] = Counter()
    for path in shm_dir.iterdir() if shm_dir.is_dir() else ():
        name = path.name.removeprefix("sem.")
        digits = name.removeprefix("fastdds_port").split("_")[0]
        if name.startswith("fastdds_port") and digits.isdigit() and int(digits) >= 7400:
            counts[(int(digits) - 7400) // 250] += 1
    return counts


def unused_domain_id() -> int:
    """A random domain id of 1-101 that no Fast DDS participant on this machine uses (none has port files in
    /dev/shm for it), so graphs started side by side do not meet; any of them if all are taken."""
    in_use = fastdds_leftovers()
    return random.SystemRandom().choice([d for d in range(1, 102) if not in_use[d]] or range(1, 102))


def discovery_environment(backend: str, domain_id: int, base: Mapping[str, str] | None = None,
                          network: bool = False) -> dict[str, str]:
    """Environment of a graph's nodes: a simulation stays on this machine unless `network` is asked
    for (a graph split across machines); with the real robot, whose driver may run on another
    computer, discovery is whatever the user configured (ROS_AUTOMATIC_DISCOVERY_RANGE,
    ROS_STATIC_PEERS, ...; ROS 2's default is the subnet)."""
    if network:
        return network_environment(domain_id, base)
    return loopback_environment(domain_id, base) if backend == "sim" else _node_environment(domain_id, base)


def network_environment(domain_id: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Discovery and traffic beyond this machine, for a graph whose nodes run on several: the
    user's discovery range (the subnet unless they chose another or ROS_STATIC_PEERS), none of the
    localhost-only settings, and Fast DDS's own transports with LARGE_DATA for multi-MB weights
    (this package's shared-memory profile would keep traffic on this machine)."""
    env = dict(os.environ if base is None else base)
    env.pop("ROS_LOCALHOST_ONLY", None)
    if env.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST") in ("LOCALHOST", "OFF"):
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "SUBNET"
    if env.get("FASTDDS_DEFAULT_PROFILES_FILE") == str(fastdds_profile_path()):
        del env["FASTDDS_DEFAULT_PROFILES_FILE"]
    return _node_environment(domain_id, env, large_payload_profile=False)


def _node_environment(domain_id: int, base: Mapping[str, str] | None,
                      large_payload_profile: bool = True) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    if large_payload_profile:
        env.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(fastdds_profile_path()))
    env.setdefault("FASTDDS_BUILTIN_TRANSPORTS", "LARGE_DATA")
    env.update({
        "ROS_DOMAIN_ID": str(domain_id),
        "MUJOCO_GL": env.get("MUJOCO_GL", "osmesa"),
        "PYOPENGL_PLATFORM": env.get("PYOPENGL_PLATFORM", env.get("MUJOCO_GL", "osmesa")),
        "PYTHONUNBUFFERED": "1",
    })
    return env


def simulated_demos(config: Mapping[str, Any], backend: str, asked: bool = False) -> int:
    """Scripted demonstrations (episodes) `prepare_run` records in the simulator: those of the
    `robot_rl.demos` section, for a real robot only when the user `asked` for them explicitly, and none
    when the learner is given demonstrations of the user's (`learner.demos`: they would replace them)."""
    if backend == "real" and not asked:
        return 0
    if ((config.get("learner") or {}).get("ros__parameters") or {}).get("demos"):
        return 0  # the user's own demonstrations (`--set learner.demos=DATASET_OR_BAG`) are the ones loaded
    if config["robot_rl"].get("task") == ENV_TASK and not (config["robot_rl"].get("env") or {}).get("expert"):
        return 0  # an environment's demonstrations come from its expert (or a dataset, loaded as it is)
    return int((config["robot_rl"].get("demos") or {}).get("episodes", 0))


def prepare_run(config: Mapping[str, Any], run_dir: str | os.PathLike, episodes: int) -> dict[str, Any]:
    """Creates what the nodes need before they start: a dataset of `episodes` scripted
    demonstrations (see `simulated_demos`; made once per run directory). Returns the config to launch."""
    config = copy.deepcopy(dict(config))
    demos = config["robot_rl"].get("demos") or {}
    if config["robot_rl"].get("task") == ENV_TASK:
        return _prepare_env_run(config, run_dir, episodes)
    if episodes <= 0:
        return config
    path = Path(run_dir) / "demos.zarr"
    if not path.exists():
        from robot_rl.data.dataset import save_transitions
        from robot_rl.robots import registry
        from robot_rl.tasks import get_task

        task = get_task(config["robot_rl"]["task"])
        arrays, info = registry.scripted_demos(task.name)(config, task, episodes, int(demos.get("seed", 0)),
                                                          float(demos.get("noise", 0.0)))
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        save_transitions(path, arrays, {"task": task.name, "source": "scripted_expert", **info})
    config.setdefault("learner", {}).setdefault("ros__parameters", {})["demos"] = str(path)
    return config


ENV_TASK_NODES = ("env_sim", "env_actor", "learner", "session_view")
"""The nodes of an `env` graph that read its env task file."""


def _prepare_env_run(config: dict[str, Any], run_dir: str | os.PathLike, episodes: int) -> dict[str, Any]:
    """An `env` graph's run: its env task file and demonstrations (`training/env_graph.py`), handed to the nodes."""
    from robot_rl.training.env_graph import prepare_env_task

    demos = config["robot_rl"].get("demos") or {}
    task_path, demos_path = prepare_env_task(config["robot_rl"].get("env"), run_dir, episodes,
                                             int(demos.get("seed", 0)), float(demos.get("noise", 0.0)))
    for name in set(ENV_TASK_NODES) & set(config["robot_rl"]["nodes"]):
        config.setdefault(name, {}).setdefault("ros__parameters", {})["env_task"] = str(task_path)
    if demos_path is not None:
        config["learner"]["ros__parameters"]["demos"] = str(demos_path)
    return config
