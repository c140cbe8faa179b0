"""Starts a graph's nodes as separate OS processes and stops them in order (what `ros2 launch`
does on a full ROS install; here it is what `robot-rl` uses where the ROS CLI is missing)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from robot_rl.ros.graph import NodeSpec

# Stop order: the actor first (it stops commanding the robot), the learner next (it writes
# its final checkpoint), the robot side last.
STOP_ORDER = ("actor", "learner")


@dataclass
class NodeProcess:
    spec: NodeSpec
    process: subprocess.Popen
    log_path: Path


def _terminate_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the supervisor dies, even by SIGKILL, so a
    killed `robot-rl train` never leaves nodes running (and a robot moving) behind it."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


PR_SET_PDEATHSIG = 1


def node_command(spec: NodeSpec, params_path: Path) -> list[str]:
    cmd = [sys.executable, "-m", spec.kind.module, "--ros-args", "-r", f"__node:={spec.name}",
           "--params-file", str(params_path)]
    if spec.namespace:
        cmd[4:4] = ["-r", f"__ns:=/{spec.namespace.strip('/')}"]
    return cmd


class Supervisor:
    def __init__(self, specs: list[NodeSpec], params_path: Path, log_dir: Path, env: dict[str, str]):
        self.specs, self.params_path, self.log_dir, self.env = specs, params_path, log_dir, env
        self.nodes: dict[str, NodeProcess] = {}

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for spec in self.specs:
            log_path = self.log_dir / f"{spec.name}.log"
            log = open(log_path, "ab")
            # Own session: a Ctrl-C reaches only the supervisor, which then stops nodes in order.
            process = subprocess.Popen(node_command(spec, self.params_path), env=self.env, stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                       preexec_fn=_terminate_with_parent)
            log.close()
            self.nodes[spec.name] = NodeProcess(spec, process, log_path)

    def exited(self) -> list[tuple[NodeProcess, int]]:
        """Nodes that have exited (each reported once)."""
        out = []
        for name, node in list(self.nodes.items()):
            code = node.process.poll()
            if code is not None:
                out.append((node, code))
                del self.nodes[name]
        return out

    def log_tail(self, node: NodeProcess, lines: int = 15) -> str:
        try:
            return "\n".join(node.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 20.0) -> dict[str, int]:
        """SIGINT in stop order, waiting for each; SIGKILL whatever outlives the timeout."""
        codes = {}
        order = [n for n in STOP_ORDER if n in self.nodes] + [n for n in self.nodes if n not in STOP_ORDER]
        for name in order:
            node = self.nodes[name]
            if node.process.poll() is None:
                node.process.send_signal(signal.SIGINT)
            try:
                codes[name] = node.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(node.process.pid, signal.SIGKILL)
                codes[name] = node.process.wait()
        self.nodes.clear()
        return codes

