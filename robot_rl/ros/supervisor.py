"""Starts a graph's nodes as separate OS processes, respawns the ones that crash (within their
restart budget, see `NodeSpec.max_restarts`) and stops them in order (what `ros2 launch` does on a
full ROS install; here it is what `robot-rl` uses where the ROS CLI is missing).

It also reads each node's log as it grows and reports every distinct warning and error line
once (`notices`), so a node's trouble shows on the console and not only in `logs/<node>.log`.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from robot_rl.ros.graph import NodeSpec
from robot_rl.ros.exits import AfterExit, ExitDecision, RunExits

STOP_ORDER = ("actor", "learner")
"""Stop order by role: every robot's actor first (it stops commanding the robot), the learners next (they write
their final checkpoints), the robot side and the rest last."""


def stop_rank(kind) -> int:
    return STOP_ORDER.index(kind.role) if kind.role in STOP_ORDER else len(STOP_ORDER)

STACK_DUMP_WAIT_S = 1.0
"""Time a hung node gets to write its stacks before SIGKILL."""

RESTART_DELAY_S = 1.0
"""Pause before respawning a crashed node (a node that crashes at once does not spin)."""

# rclpy's default console format: "[WARN] [1732530000.123456789] [actor]: message".
_ROS_PROBLEM = re.compile(r"^\[(WARN|ERROR|FATAL)\] \[[0-9.]+\] \[([^\]]*)\]: (.*)$")
_NODE_ERROR_PREFIX = "[robot_rl] "  # what run_node prints for refused parameters


class LogWatcher:
    """New warning and error lines of one node's log, each distinct one reported once: rclpy
    WARN/ERROR/FATAL lines (without their time stamp), refused parameters, and the exception line
    that ends a Python traceback."""

    def __init__(self, path: Path):
        self.path = path
        # Only what this run writes: a resumed run appends to the log of the earlier one.
        self.offset = path.stat().st_size if path.exists() else 0
        self.partial = b""
        self.in_traceback = False
        self.seen: set[str] = set()

    def new_problems(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        problems = []
        for raw in lines:
            problem = self._problem(raw.decode(errors="replace").rstrip())
            if problem is not None and problem not in self.seen:
                self.seen.add(problem)
                problems.append(problem)
        return problems

    def _problem(self, line: str) -> str | None:
        if line.startswith("Traceback (most recent call last)"):
            self.in_traceback = True
            return None
        if self.in_traceback:
            if not line or line[0].isspace():
                return None
            self.in_traceback = False
            return f"ERROR {line}"
        match = _ROS_PROBLEM.match(line)
        if match:
            return f"{match[1]} {match[3]}"
        if line.startswith(_NODE_ERROR_PREFIX):
            return f"ERROR {line.removeprefix(_NODE_ERROR_PREFIX)}"
        return None


@dataclass
class NodeProcess:
    spec: NodeSpec
    process: subprocess.Popen
    log_path: Path
    log: LogWatcher
    restarts: int = 0
    restart_at: float | None = None
    """Monotonic time of a pending respawn (the process has crashed)."""
    decision: ExitDecision | None = None
    """What its exit means for the run (set when `Supervisor.exited` reports it)."""


def _terminate_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the supervisor dies, even by SIGKILL, so a
    killed `robot-rl train` never leaves nodes running (and a robot moving) behind it."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


PR_SET_PDEATHSIG = 1


def node_command(spec: NodeSpec, params_path: Path) -> list[str]:
    # -P: the current directory is not on sys.path, so a checkout there cannot shadow the installed package.
    cmd = [sys.executable, "-P", "-m", spec.kind.module, "--ros-args", "-r", f"__node:={spec.name}",
           "--params-file", str(params_path)]
    if spec.namespace:
        cmd[5:5] = ["-r", f"__ns:=/{spec.namespace.strip('/')}"]
    for source, target in spec.remaps.items():
        cmd += ["-r", f"{source}:={target}"]
    return cmd


class Supervisor:
    def __init__(self, specs: list[NodeSpec], params_path: Path, log_dir: Path, env: dict[str, str],
                 restart_delay_s: float = RESTART_DELAY_S):
        self.specs, self.params_path, self.log_dir, self.env = specs, params_path, log_dir, env
        self.restart_delay_s = restart_delay_s
        self.nodes: dict[str, NodeProcess] = {}
        self.exits = RunExits(specs)
        """Decides what each exit means: the same decision `ros2 launch` makes (robot_rl/ros/exits.py)."""
        self.stopping = False
        self._notices: list[str] = []

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for spec in self.specs:
            log_path = self.log_dir / f"{spec.key}.log"  # a fleet's robots: logs/robot0/arm_actor.log
            log_path.parent.mkdir(parents=True, exist_ok=True)
            watcher = LogWatcher(log_path)
            self.nodes[spec.key] = NodeProcess(spec, self._spawn(spec, log_path), log_path, watcher)

    def _spawn(self, spec: NodeSpec, log_path: Path, marker: str = "") -> subprocess.Popen:
        with open(log_path, "ab") as log:
            log.write(marker.encode())
            log.flush()
            # Own session: a Ctrl-C reaches only the supervisor, which then stops nodes in order.
            return subprocess.Popen(node_command(spec, self.params_path), env=self.env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=_terminate_with_parent)

    def exited(self) -> list[tuple[NodeProcess, int]]:
        """Nodes that have exited for good (each reported once, with `decision` set). A node that crashed
        with restarts left is respawned instead, `restart_delay_s` later, with the same command and log."""
        out = []
        now = time.monotonic()
        for name, node in list(self.nodes.items()):
            if node.restart_at is not None:
                if now >= node.restart_at and not self.stopping:
                    self._respawn(node)
                continue
            code = node.process.poll()
            if code is None:
                continue
            node.decision = self.exits.on_exit(node.spec, code, self.stopping)
            if node.decision.after is AfterExit.RESTART:
                node.restart_at = now + self.restart_delay_s
                self._notices.append(f"[{name}] exited with code {code}; restarting "
                                     f"({node.restarts + 1}/{node.spec.max_restarts})")
            else:
                out.append((node, code))
                del self.nodes[name]
        return out

    @property
    def restarts(self) -> dict[str, int]:
        """Respawns so far, by node (also of nodes that have since exited for good)."""
        return {key: count for key, count in self.exits.restarts.items() if count}

    def _respawn(self, node: NodeProcess) -> None:
        node.restarts += 1
        node.restart_at = None
        marker = f"\n--- restart {node.restarts} (previous exit code {node.process.returncode}) ---\n"
        node.process = self._spawn(node.spec, node.log_path, marker)

    def notices(self) -> list[str]:
        """What happened since the last call: respawns, and new warning and error lines of every
        node's log ("[node] WARN ...")."""
        out, self._notices = self._notices, []
        for node in self.nodes.values():
            out += [f"[{node.spec.key}] {problem}" for problem in node.log.new_problems()]
        return out

    def log_tail(self, node: NodeProcess, lines: int = 15) -> str:
        try:
            return "\n".join(node.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 20.0) -> dict[str, int]:
        """SIGINT in stop order, waiting for each; whatever outlives the timeout gets SIGUSR1 (its
        stacks to its log, see `run_node`) and then SIGKILL."""
        self.stopping = True
        codes = {}
        order = sorted(self.nodes, key=lambda key: stop_rank(self.nodes[key].spec.kind))
        for name in order:
            node = self.nodes[name]
            if node.process.poll() is None:
                node.process.send_signal(signal.SIGINT)
            try:
                codes[name] = node.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                # A node that ignores SIGINT is hung: its threads' stacks go to its log first.
                node.process.send_signal(signal.SIGUSR1)
                time.sleep(STACK_DUMP_WAIT_S)
                os.killpg(node.process.pid, signal.SIGKILL)
                codes[name] = node.process.wait()
        self.nodes.clear()
        return codes
