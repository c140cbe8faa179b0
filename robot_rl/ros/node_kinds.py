"""The kinds of node a graph can hold: the generic ones and every robot's (`robot_rl/robots/registry.py`: how
each is started, whether the run depends on it, how often it is respawned after a crash); and the one table
of node names renamed since (`DEPRECATED_NODE_NAMES`), with the old executables that warn and run the new
node."""

from __future__ import annotations

import importlib
import sys

from robot_rl.robots import registry
from robot_rl.robots.registry import DEFAULT_RESTARTS, NodeKind

GENERIC_NODE_KINDS: dict[str, NodeKind] = {
    "learner": NodeKind("learner", "robot_rl.nodes.learner", critical=True, max_restarts=DEFAULT_RESTARTS,
                        role="learner"),
    # Any Gymnasium environment as a robot (`robot-rl train --env ID --graph`).
    "env_sim": NodeKind("env_sim", "robot_rl.nodes.env_sim", critical=True, role="simulator", serves_reset=True),
    "env_actor": NodeKind("env_actor", "robot_rl.nodes.env_actor", critical=True, finishes_run=True,
                          max_restarts=DEFAULT_RESTARTS, role="actor"),
    "camera": NodeKind("camera", "robot_rl.nodes.camera", critical=False),
    "teleop": NodeKind("teleop", "robot_rl.nodes.teleop", critical=False, role="person"),
    "scripted_human": NodeKind("scripted_human", "robot_rl.nodes.scripted_human", critical=False, role="person"),
    # What the person sees: the session goes on without it (they may watch the console instead).
    "session_view": NodeKind("session_view", "robot_rl.nodes.session_view", critical=False, role="person"),
    # Critical: a graph that learns from its rewards must not go on without them (a model that
    # fails to load ends the node, and so the run, with the reason).
    "reward": NodeKind("reward", "robot_rl.nodes.reward", critical=True, max_restarts=DEFAULT_RESTARTS,
                       role="reward"),
}
"""The nodes every robot shares; each robot adds its own (`robot_rl/robots/registry.py`)."""

NODE_KINDS: dict[str, NodeKind] = {**GENERIC_NODE_KINDS, **registry.node_kinds()}

# Real-robot nodes take the simulator's place with `backend: real` (see each robot's `hardware_nodes`).
BACKEND_REPLACEMENTS = {"real": registry.hardware_nodes()}


def nodes_with_role(role: str) -> tuple[str, ...]:
    """The node kinds that are `role` to a graph (see NodeKind.role)."""
    return tuple(name for name, kind in NODE_KINDS.items() if kind.role == role)


# ---- names before the robot-explicit ones, accepted until 0.2.0 --------------------------------------

DEPRECATED_NODE_NAMES = registry.renamed_nodes()
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
    """The deprecated `sim` executable (see DEPRECATED_NODE_NAMES)."""
    return _run_deprecated("sim")


def actor_main() -> int:
    """The deprecated `actor` executable (see DEPRECATED_NODE_NAMES)."""
    return _run_deprecated("actor")
