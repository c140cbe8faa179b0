"""A probe into a running node graph for integration tests and benchmarks: start a node as its own
process on a fresh loopback domain, join that domain, keep the latest /diagnostics of every node,
spin, wait for conditions and call services."""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


class RosProbe:
    watched: str | None = None
    """The node whose diagnostics `diag` and `value(key)` refer to by default."""

    def __init__(self, domain_id: int, name: str):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray

        self.rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = rclpy.executors.SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.diagnostics: dict[str, dict[str, str]] = {}
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)

    def _on_diag(self, msg) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            values["_message"] = status.message
            # By node name (the newest of a fleet's same-named nodes) and by namespaced name (robot0/arm_actor).
            self.diagnostics[status.name.rsplit("/", 1)[-1]] = values
            self.diagnostics[status.name.strip("/")] = values

    @property
    def diag(self) -> dict[str, str]:
        return self.diagnostics.get(self.watched, {})

    def value(self, key: str, node: str | None = None) -> float:
        """A diagnostic value as a number (booleans as 1/0); NaN when absent."""
        raw = self.diagnostics.get(node or self.watched, {}).get(key)
        try:
            return float(raw)
        except (TypeError, ValueError):
            return {"True": 1.0, "False": 0.0}.get(raw, math.nan)

    def spin(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.005)

    def spin_until(self, deadline: float) -> None:
        """Runs callbacks until `time.monotonic()` reaches `deadline`, waiting in the executor (no
        polling), so that a paced publisher wakes on time and misses no callback meanwhile."""
        while (left := deadline - time.monotonic()) > 0:
            self.executor.spin_once(timeout_sec=left)

    def wait_for(self, predicate, timeout: float, what: str | Callable[[], str]) -> None:
        """Spins until `predicate()`; on timeout, the error says `what` (a callable: read then, e.g. the
        terminal's text at the timeout rather than at the call)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.005)
            if predicate():
                return
        what = what() if callable(what) else what
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}; diagnostics: {self.diagnostics}")

    def call(self, srv_type, name: str, request, timeout: float = 5.0):
        client = self.node.create_client(srv_type, name)
        if not client.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"{name} not available after {timeout} s")
        future = client.call_async(request)
        self.wait_for(future.done, timeout, f"{name} response")
        self.node.destroy_client(client)
        return future.result()

    def close(self) -> None:
        self.node.destroy_node()
        self.rclpy.shutdown(context=self.context)


_UNUSED_DOMAINS: list[int] = []
def fresh_domain_id() -> int:
    """A loopback ROS domain id no earlier call in this process returned (120-230, shuffled; a
    pytest-xdist worker's own share of them), so a test's nodes never meet an earlier or a concurrent
    test's; domains holding Fast DDS shared-memory
    port files (earlier runs' killed nodes) come last, as insurance against Fast DDS ports a
    crashed process left inoperative (not shown to have caused a failure here)."""
    if not _UNUSED_DOMAINS:
        from robot_rl.ros.graph import fastdds_leftovers

        leftovers = fastdds_leftovers()
        # pytest-xdist's workers run at once: each draws from its own share of the range.
        worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 1))
        own = [d for d in range(120, 231) if d % workers == worker]
        shuffled = random.sample(own, len(own))
        # popped from the end: clean domains last in the list
        _UNUSED_DOMAINS.extend(sorted(shuffled, key=lambda d: leftovers[d] == 0))
    return _UNUSED_DOMAINS.pop()


def free_port() -> int:
    """A TCP port on the loopback nobody listens on now (for a test's session view)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_node(module: str, log_path: Path, *params: str, domain_id: int | None = None
               ) -> tuple[subprocess.Popen, int]:
    """Starts `python -P -m module` with `-p` parameters on a loopback domain (a random fresh one
    unless given); returns (process, domain id)."""
    from robot_rl.ros.graph import loopback_environment

    domain_id = fresh_domain_id() if domain_id is None else domain_id
    args = [sys.executable, "-P", "-m", module, "--ros-args"]  # -P: the installed package, not the cwd
    for p in params:
        args += ["-p", p]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, env=loopback_environment(domain_id), stdout=log, stderr=subprocess.STDOUT)
    return proc, domain_id


def stop_node(proc: subprocess.Popen, log_path: Path) -> None:
    """SIGTERM; raises (with the end of the node's log) unless the node exits cleanly."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    if code != 0:
        raise RuntimeError(f"node exited with {code}:\n{Path(log_path).read_text()[-3000:]}")


def start_graph(task: str, overrides: dict, run_dir: Path, domain_id: int):
    """Starts the task's node graph (config/<task>.yaml with `overrides`, simulated backend) as
    separate processes on loopback domain `domain_id`; returns the running `Supervisor` (stop it)."""
    from robot_rl.ros.graph import (
        apply_overrides,
        build_graph,
        config_path,
        load_config,
        loopback_environment,
        params_file,
    )
    from robot_rl.ros.supervisor import Supervisor
    from robot_rl.transport.secret import ensure_run_secret

    config = apply_overrides(load_config(config_path(task)), overrides)
    specs = build_graph(config, "sim", str(run_dir))
    ensure_run_secret(run_dir)  # before any node starts, as `robot-rl train` does: a fleet's actors read it
    supervisor = Supervisor(specs, params_file(specs, Path(run_dir) / "params.yaml"), Path(run_dir) / "logs",
                            loopback_environment(domain_id))
    supervisor.start()
    return supervisor
