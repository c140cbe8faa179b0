"""The layering written in ARCHITECTURE.md, enforced on the package's imports (top-level and the
ones inside functions alike: both are dependencies)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "robot_rl"


def documented_layers() -> list[list[str]]:
    """The layer table of ARCHITECTURE.md, top first: rows like `| 2 | `ros` | ... |`."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    layers = []
    for line in text.splitlines():
        match = re.match(r"^\|\s*(\d+)\s*\|([^|]*)\|", line)
        if match:
            layers.append(re.findall(r"`([\w.]+)`", match.group(2)))
    assert layers, "ARCHITECTURE.md has no layer table"
    return layers


LAYERS = documented_layers()
LAYER_OF = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}
ROS_ONLY = re.compile(r"^(rclpy|rcl_interfaces|launch|launch_ros|\w+_msgs|std_srvs)(\.|$)")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str:
    """The layer unit a module belongs to: `robot_rl.ros.qos` -> `ros`, `robot_rl.tasks` -> `tasks`."""
    return module.split(".")[1] if module.count(".") >= 1 else module


def imports(path: Path) -> set[str]:
    """Absolute names of everything `path` imports (relative imports resolved)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def internal_imports(module: str) -> set[str]:
    """The package's own modules that `module` imports (a name imported from a module counts as that module)."""
    out = set()
    for name in imports(MODULES[module]):
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module and name.startswith("robot_rl."):
            out.add(name)
    return out


def test_every_part_of_the_package_has_a_layer():
    parts = {part_of(m) for m in MODULES if m != "robot_rl"}
    assert not parts - set(LAYER_OF), f"add these to ARCHITECTURE.md's layer table: {sorted(parts - set(LAYER_OF))}"


def test_no_import_reaches_up_a_layer():
    upward = []
    for module in MODULES:
        if module == "robot_rl":
            continue
        for target in internal_imports(module):
            if target != "robot_rl" and LAYER_OF[part_of(target)] < LAYER_OF[part_of(module)]:
                upward.append(f"{module} -> {target}")
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(sorted(upward))


def test_message_code_only_under_ros_and_nodes():
    outside = []
    for module, path in MODULES.items():
        if part_of(module) in ("ros", "nodes"):
            continue
        outside += {f"{module} imports {name.split('.')[0]}" for name in imports(path) if ROS_ONLY.match(name)}
    assert not outside, "\n".join(sorted(outside))


def test_no_node_imports_another_node():
    crossing = [f"{m} -> {t}" for m in MODULES if m.startswith("robot_rl.nodes.")
                for t in internal_imports(m) if t.startswith("robot_rl.nodes.")]
    assert not crossing, "\n".join(crossing)


def test_no_import_cycles():
    graph = {m: internal_imports(m) - {"robot_rl"} for m in MODULES}
    state: dict[str, int] = defaultdict(int)  # 0 new, 1 on the current path, 2 done
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state[target] == 1:
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif state[target] == 0:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if state[module] == 0:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("folder", ["robot_rl", "benchmarks"])
def test_no_file_over_600_lines(folder):
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


SAME_CONCEPT = {
    "learner.py": "the learner: its core (training/) and its node (nodes/)",
    "arm_sim.py": "the simulated arm: its node (nodes/) and the old path of its simulation (envs/), a deprecation "
                  "shim until 0.2.0",
    "graph.py": "the node graph: its spec (ros/) and the commands that start it (cli/)",
    "car_race.py": "the car race task: its benchmark, and the old paths of its environment (envs/) and training loop "
                   "(training/), kept as deprecation shims until 0.2.0",
    "pick_cube.py": "the pick-cube task: its benchmark and the old path of its environment (envs/), a deprecation "
                    "shim until 0.2.0",
    "safety.py": "hardware safety: the safety gate (hardware/) and its benchmark",
    "env_graph.py": "any environment as a robot in the graph: its run's preparation (training/) and its benchmark",
    "scripted_human.py": "HIL-SERL's scripted human: when it takes over (teleop/) and its node (nodes/)",
}
"""Module basenames in more than one folder, each with the reason: the same concept in its layers."""


def test_no_basename_in_two_folders_unless_the_same_concept():
    """A basename names one concept: two modules of that name in different folders are the same
    thing in different layers (listed in SAME_CONCEPT with why), or one of them needs a clearer name. Inside
    robot packages the same role has the same name in every robot (robots/arm/tasks.py, robots/car/tasks.py)."""
    folders: dict[str, set[str]] = defaultdict(set)
    for top in ("robot_rl", "benchmarks"):
        for path in (ROOT / top).rglob("*.py"):
            if path.name not in ("__init__.py", "__main__.py") and not in_robot_package(path):
                folders[path.name].add(str(path.parent.relative_to(ROOT)))
    repeated = {name: sorted(where) for name, where in folders.items() if len(where) > 1}
    unexplained = {name: where for name, where in repeated.items() if name not in SAME_CONCEPT}
    assert not unexplained, f"rename one, or list it in SAME_CONCEPT with why it is the same concept: {unexplained}"
    assert not set(SAME_CONCEPT) - set(repeated), f"no longer repeated: {sorted(set(SAME_CONCEPT) - set(repeated))}"


ROBOTS = PACKAGE / "robots"


def in_robot_package(path: Path) -> bool:
    """`path` lies in one robot's package (robot_rl/robots/<robot>/...), not the registry beside them."""
    return ROBOTS in path.parents and path.parent != ROBOTS


def robot_of(module: str) -> str | None:
    """`robot_rl.robots.car.evaluate` -> "car"; None outside robot packages (the registry included)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "robots" and parts[2] != "registry" else None


def test_no_generic_module_imports_a_robot_package():
    """Generic code finds robots through robot_rl.robots.registry; only a robot's own package and its ROS side
    (nodes/, ros/) import it, and no robot imports another."""
    crossing = []
    for module in MODULES:
        own = robot_of(module)
        for target in internal_imports(module):
            robot = robot_of(target)
            if robot is None or robot == own or (own is None and part_of(module) in ("nodes", "ros")):
                continue
            crossing.append(f"{module} -> {target}")
    assert not crossing, "imports of a robot package from outside it:\n" + "\n".join(sorted(crossing))


ROBOT_WORDS = re.compile(r"(?<![a-z])(arm|car|quad|quadrotor|juggle|juggling)(?![a-z])", re.IGNORECASE)
GENERIC_MODULES = ["robot_rl/tasks.py", "robot_rl/training/evaluate.py", "robot_rl/ros/node_kinds.py",
                   *sorted(str(p.relative_to(ROOT)) for p in (PACKAGE / "cli").glob("*.py"))]


@pytest.mark.parametrize("relative", GENERIC_MODULES)
def test_generic_modules_name_no_robot(relative):
    """A robot's name in a generic module (in an identifier or a string, docstrings too; comments aside) means
    a new robot would need an edit there: it belongs in the robot's package, reached through the registry."""
    import io
    import tokenize

    path = ROOT / relative
    named = [f"{relative}:{tok.start[0]}: {tok.string.splitlines()[0][:80]}"
             for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
             if tok.type in (tokenize.NAME, tokenize.STRING) and ROBOT_WORDS.search(tok.string)]
    assert not named, "robot names in a generic module:\n" + "\n".join(named)


def test_robot_words_rule_matches_whole_words_only():
    assert ROBOT_WORDS.search("arm_sim") and ROBOT_WORDS.search("the Car") and ROBOT_WORDS.search("quad-juggle")
    assert not any(ROBOT_WORDS.search(word) for word in ("argparse", "cartesian", "quadratic", "alarm", "warm"))
