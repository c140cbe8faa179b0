"""The safety benchmark's harness, shared by its robot modules: the node under test as its own process
(`robot_rl.ros.probe`), the benchmark's side of the graph as a probe that also waits for a node's
counters to settle, and the loop that fuzzes a node's inputs one topic at a time."""

from __future__ import annotations

import copy
import math
import subprocess
import sys
import time
from pathlib import Path

from robot_rl.ros.probe import RosProbe, start_node, stop_node

FUTURE_TOLERANCE_S = 0.1
MAX_COMMAND_AGE_S = 0.5
# Pacing of fuzz messages: 250 Hz, 25x the actor's command rate, slow enough that a node on a
# shared 2-core machine receives (and so can count) every message.
FUZZ_INTERVAL_S = 0.004


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def start_node_under_test(module: str, params: dict, log_path: Path) -> tuple[subprocess.Popen, int]:
    """The node `module` with `params` on a fresh loopback domain: (process, domain id)."""
    return start_node(module, log_path, *(f"{key}:={value}" for key, value in params.items()))


def stop_node_under_test(proc: subprocess.Popen, log_path: Path) -> None:
    """Stops the node; an unclean exit is logged, not raised: a crash is one of the results."""
    try:
        stop_node(proc, log_path)
    except RuntimeError as exc:
        log(f"{log_path.stem}: {exc}")


def deep(qos_profile, depth: int = 200):
    """`qos_profile` with a queue deep enough that no fuzz message is dropped on this side."""
    q = copy.copy(qos_profile)
    q.depth = depth
    return q


class Bench(RosProbe):
    """The benchmark's side of the graph on the node's domain (per robot: fake driver, actor,
    operator, observer, fuzzer); `watched` names the node under test."""

    def __init__(self, domain_id: int):
        super().__init__(domain_id, "safety_bench")

    def counter(self, key: str) -> float:
        """A counter on the node's /diagnostics; 0 until it is published."""
        value = self.value(key)
        return 0.0 if math.isnan(value) else value

    def settle(self, keys: list[str], quiet_s: float = 0.6, timeout: float = 20.0) -> dict[str, float]:
        """Waits until the node's counters `keys` stop changing; returns them."""
        end = time.monotonic() + timeout
        last, since = None, time.monotonic()
        while time.monotonic() < end:
            self.spin(0.05)
            now = tuple(self.counter(k) for k in keys)
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                break
        return dict(zip(keys, last))


def fuzz_inputs(b: Bench, proc: subprocess.Popen, topics: list[str], send, n: int, keep_commanded=None,
                command_hz: float = 0.0, prepare=None, finish=None) -> dict:
    """Fuzzes each input `topic` of the watched node in turn: `send(topic, now_ns)` publishes one
    message and returns whether the documented rules refuse it; `keep_commanded(topic)` (if given)
    keeps the node commanded at `command_hz` meanwhile; `prepare(topic)` / `finish(topic)` run before
    the first and after the last snapshot of the node's `rx_<topic>` / `rejected_<topic>` counters (the
    fuzzer must be the only publisher of the topic under test between the two)."""
    results = {}
    for topic in topics:
        keys = [f"rx_{topic}", f"rejected_{topic}"]
        if prepare is not None:
            prepare(topic)
        before = b.settle(keys)
        expected, sent, start_time = 0, 0, time.monotonic()
        next_cmd = start_time
        for i in range(n):
            expected += int(send(topic, time.time_ns()))
            sent += 1
            if keep_commanded is not None and time.monotonic() >= next_cmd:
                keep_commanded(topic)
                next_cmd += 1.0 / command_hz
            b.spin_until(start_time + (i + 1) * FUZZ_INTERVAL_S)
            if proc.poll() is not None:
                break
        after = b.settle(keys)
        if finish is not None:
            finish(topic)
        rx = after[f"rx_{topic}"] - before[f"rx_{topic}"]
        counted = after[f"rejected_{topic}"] - before[f"rejected_{topic}"]
        results[topic] = {"sent": sent, "received": int(rx), "expected_rejections": expected,
                          "counted_rejections": int(counted), "alive": proc.poll() is None}
        log(f"{b.watched} fuzz {topic}: {results[topic]}")
        if proc.poll() is not None:
            break
    return results
