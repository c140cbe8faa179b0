"""The kinds of node a graph can hold: how each is started, whether the run depends on it, and
how often it is respawned after a crash (the restart policy); and the one table of node names
renamed since (`DEPRECATED_NODE_NAMES`), with the old executables that warn and run the new node."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass


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
    """Times the node is respawned after a crash before its death ends the run (see `crashed`);
    a config's `robot_rl: {restarts: {learner: 5}}` overrides it per node. Only nodes that resume
    where they stopped (the learner from checkpoint + journal, actors from their outbox and
    counters, the stateless reward node) restart by default."""


DEFAULT_RESTARTS = 3


def crashed(returncode: int) -> bool:
    """A crash worth a restart: killed by a signal (negative code) or an uncaught exception (1).
    Other codes are the node's own decision (0 done, 2 refused parameters, 3 data not delivered)
    and would only repeat."""
    return returncode < 0 or returncode == 1


NODE_KINDS: dict[str, NodeKind] = {
    "arm_sim": NodeKind("arm_sim", "robot_rl.nodes.arm_sim", critical=True),
    "arm_actor": NodeKind("arm_actor", "robot_rl.nodes.arm_actor", critical=True, finishes_run=True,
                          max_restarts=DEFAULT_RESTARTS),
    "learner": NodeKind("learner", "robot_rl.nodes.learner", critical=True, max_restarts=DEFAULT_RESTARTS),
    "env_sim": NodeKind("env_sim", "robot_rl.nodes.env_sim", critical=True),
    "env_actor": NodeKind("env_actor", "robot_rl.nodes.env_actor", critical=True, finishes_run=True,
                          max_restarts=DEFAULT_RESTARTS),
    "camera": NodeKind("camera", "robot_rl.nodes.camera", critical=False),
    "arm": NodeKind("arm", "robot_rl.nodes.arm", critical=True),
    "quadrotor": NodeKind("quadrotor", "robot_rl.nodes.quadrotor", critical=True),
    "teleop": NodeKind("teleop", "robot_rl.nodes.teleop", critical=False),
    "scripted_human": NodeKind("scripted_human", "robot_rl.nodes.scripted_human", critical=False),
    # What the person sees: the session goes on without it (they may watch the console instead).
    "session_view": NodeKind("session_view", "robot_rl.nodes.session_view", critical=False),
    # Critical: a graph that learns from its rewards must not go on without them (a model that
    # fails to load ends the node, and so the run, with the reason).
    "reward": NodeKind("reward", "robot_rl.nodes.reward", critical=True, max_restarts=DEFAULT_RESTARTS),
    "quad_sim": NodeKind("quad_sim", "robot_rl.nodes.quad_sim", critical=True),
    "juggle_actor": NodeKind("juggle_actor", "robot_rl.nodes.juggle_actor", critical=True, finishes_run=True),
    "ppo_learner": NodeKind("ppo_learner", "robot_rl.nodes.ppo_learner", critical=True),
    "car_sim": NodeKind("car_sim", "robot_rl.nodes.car_sim", critical=True),
    "car": NodeKind("car", "robot_rl.nodes.car", critical=True),
    "car_actor": NodeKind("car_actor", "robot_rl.nodes.car_actor", critical=True, finishes_run=True,
                          max_restarts=DEFAULT_RESTARTS),
}

# Real-robot nodes take the simulator's place with `backend: real` (see hardware/).
BACKEND_REPLACEMENTS = {"real": {"arm_sim": "arm", "quad_sim": "quadrotor", "car_sim": "car"}}

# ---- names before the robot-explicit ones, accepted until 0.2.0 --------------------------------------

DEPRECATED_NODE_NAMES = {"sim": "arm_sim", "actor": "arm_actor"}
"""Old node name -> its new name. Every place a user names a node (executables, config sections and
`robot_rl.nodes` / `robot_rl.restarts` entries, `--set node.x=...`, `robot-rl node`, a run directory's
logs) takes the old name with one deprecation line on stderr; keystores with old enclave names are refused
(`robot_rl.ros.security.check_keystore`)."""
REMOVED_IN = "0.2.0"

_warned: set[tuple[str, str]] = set()


def deprecation_line(what: str, old: str) -> str:
    """The one line that says `old` (a node name used as `what`: "config section", "--set key", ...) is
    deprecated."""
    new = DEPRECATED_NODE_NAMES[old]
    return f"robot_rl: {what} '{old}' is deprecated, use '{new}' (the old name is removed in {REMOVED_IN})"


def warn_deprecated(what: str, old: str) -> None:
    """Prints `deprecation_line` on stderr, once per process for each (what, old)."""
    if (what, old) not in _warned:
        _warned.add((what, old))
        print(deprecation_line(what, old), file=sys.stderr, flush=True)


def current_name(name: str, what: str) -> str:
    """`name`, or the new name of a deprecated node name (saying so on stderr, see `warn_deprecated`);
    `what` says where the name was written: "config section", "--set node", ..."""
    if name in DEPRECATED_NODE_NAMES:
        warn_deprecated(what, name)
        return DEPRECATED_NODE_NAMES[name]
    return name


def _run_deprecated(old: str) -> int:
    """The old executable `old`: says it is deprecated, then runs the new node (under the new node name,
    so it serves and calls what the new graph names); a `--params-file` whose section is still named
    `old` is passed on with that section renamed (see `renamed_params_file`)."""
    warn_deprecated("executable", old)
    args = list(sys.argv)
    for i, arg in enumerate(args[:-1]):
        if arg == "--params-file":
            args[i + 1] = renamed_params_file(args[i + 1])
    module = importlib.import_module(NODE_KINDS[DEPRECATED_NODE_NAMES[old]].module)
    return module.main(args)


def renamed_params_file(path: str) -> str:
    """`path`, or a temporary copy of it whose sections named after deprecated nodes (`sim:`, `/actor:`)
    carry the new names, when it has such sections and not their new ones too."""
    import tempfile

    import yaml

    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return path  # rcl reports it
    if not isinstance(data, dict):
        return path
    renamed = {}
    for key, value in data.items():
        name = str(key).lstrip("/")
        new = DEPRECATED_NODE_NAMES.get(name)
        if new is not None and not {new, f"/{new}"} & set(data):
            warn_deprecated("params file section", name)
            key = f"/{new}" if str(key).startswith("/") else new
        renamed[key] = value
    if list(renamed) == list(data):
        return path
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="robot_rl-params-", delete=False) as f:
        yaml.safe_dump(renamed, f, sort_keys=False)
    return f.name


def sim_main() -> int:
    """The deprecated `sim` executable (`arm_sim` now)."""
    return _run_deprecated("sim")


def actor_main() -> int:
    """The deprecated `actor` executable (`arm_actor` now)."""
    return _run_deprecated("actor")
