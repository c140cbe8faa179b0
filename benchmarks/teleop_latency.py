"""Teleop latency: from an input event to the command on `teleop/cmd`, and the hand-back behaviour.

The teleop node runs as its own process over loopback DDS, as in a session. Two input paths:

- keyboard: key presses written into a pseudo-terminal the node reads in raw mode (the same code
  path as a SpaceMouse or gamepad read on the node's device thread);
- joy: `sensor_msgs/Joy` messages published by this process (the `joy` node's path, one extra
  DDS hop included in the figure).

Each input flips the commanded direction (up/down arrow; stick forward/back), so the first
`teleop/cmd` carrying the new sign is the one that answers it; latency = its arrival time here
minus the time the input was written or published (CLOCK_MONOTONIC is shared by the processes).
Inputs are spaced 20-60 ms apart at random so they do not phase-lock with the node's 50 Hz timer.

After the inputs stop, the benchmark also checks the release: control is handed back after the
configured time (keyboard: the key's motion `key_hold_s` plus `hold_s`; joy with the stream
stopped mid-deflection: `silence_timeout_s`), the last command is a zero and nothing follows it.

    python benchmarks/teleop_latency.py [--events 400] [--quick]

Last line: JSON with `p99_ms` (the worse of the two paths), per-path percentiles, the measured
hand-back times and `meets_targets` (p99 <= 10 ms, releases correct).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pty
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from robot_rl.teleop.mapping import load_mapping

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_LOCALHOST_ONLY", "1")

TARGET_P99_MS = 10.0
UP, DOWN = b"\x1b[A", b"\x1b[B"


class Listener:
    """Receives teleop/cmd, teleop/event and /diagnostics; publishes joy."""

    def __init__(self, domain_id: int):
        from geometry_msgs.msg import TwistStamped
        from sensor_msgs.msg import Joy
        from std_msgs.msg import String

        from robot_rl.ros import qos
        from robot_rl.ros.probe import RosProbe

        self.probe = RosProbe(domain_id, "teleop_latency_probe")
        self.probe.watched = "teleop"
        node = self.probe.node
        deep = copy.copy(qos.COMMAND)
        deep.depth = 200
        self.commands: list[tuple[float, float]] = []  # (arrival monotonic, linear.x)
        self.events: list[tuple[float, str]] = []
        node.create_subscription(TwistStamped, "teleop/cmd", self._on_cmd, deep)
        node.create_subscription(String, "teleop/event", lambda m: self.events.append((time.monotonic(), m.data)),
                                 qos.EVENTS)
        self.joy_pub = node.create_publisher(Joy, "joy", 10)
        self._joy_type = Joy

    def _on_cmd(self, msg) -> None:
        self.commands.append((time.monotonic(), msg.twist.linear.x))

    def publish_joy(self, forward: float, takeover: bool) -> float:
        msg = self._joy_type()
        msg.axes = [0.0, float(forward), 0.0, 0.0, 0.0, 0.0]
        msg.buttons = [0] * 10 + [int(takeover)]
        sent = time.monotonic()
        self.joy_pub.publish(msg)
        return sent


def _answer(commands: list[tuple[float, float]], since: float, sign: float) -> float | None:
    """Arrival time of the first command after `since` pointing the new way."""
    for arrived, x in commands:
        if arrived >= since and x * sign > 0:
            return arrived
    return None


def measure(listener: Listener, send, events: int, rng: random.Random) -> tuple[list[float], float]:
    """send(sign) writes one input and returns its monotonic time; returns the latencies in ms and
    the time of the last input."""
    latencies, sent = [], 0.0
    sign = 1.0
    for _ in range(events):
        sign = -sign
        sent = send(sign)
        deadline = sent + 0.5
        while time.monotonic() < deadline:
            listener.probe.spin_until(time.monotonic() + 0.002)
            arrived = _answer(listener.commands[-50:], sent, sign)
            if arrived is not None:
                latencies.append((arrived - sent) * 1e3)
                break
        else:
            latencies.append(float("inf"))  # lost: counts against p99
        listener.probe.spin_until(time.monotonic() + rng.uniform(0.02, 0.06))
    return latencies, sent


def release(listener: Listener, last_input: float, expected_s: float, early_s: float = 0.0) -> dict:
    """After the last input: when control went back (expected after `expected_s`, up to `early_s`
    sooner), whether the last command was a zero, and that nothing followed the release."""
    listener.probe.spin_until(last_input + expected_s + 1.0)
    handbacks = [t for t, e in listener.events if e == "handback" and t >= last_input]
    handback_s = (handbacks[0] - last_input) if handbacks else None
    after_release = [x for t, x in listener.commands if handbacks and t > handbacks[0] + 0.02]
    ok = (handback_s is not None and expected_s - early_s - 0.02 <= handback_s <= expected_s + 0.05
          and listener.commands[-1][1] == 0.0 and not after_release)
    return {"handback_s": None if handback_s is None else round(handback_s, 3), "expected_handback_s": expected_s,
            "commands_after_release": len(after_release), "release_ok": ok}


def summary(latencies: list[float]) -> dict:
    values = np.asarray(latencies)
    finite = values[np.isfinite(values)]
    return {"events": len(values), "lost": int((~np.isfinite(values)).sum()),
            "p50_ms": round(float(np.percentile(values, 50)), 3), "p99_ms": round(float(np.percentile(values, 99)), 3),
            "max_ms": round(float(finite.max()), 3) if finite.size else None}


def run_keyboard(events: int, workdir: Path, hold_s: float) -> dict:
    from robot_rl.ros.probe import start_node, stop_node

    master, slave = pty.openpty()
    log = workdir / "teleop_keyboard.log"
    proc, domain_id = start_node("robot_rl.nodes.teleop", log, "device:=keyboard",
                                 f"device_path:={os.ttyname(slave)}", f"hold_s:={hold_s}", "silence_timeout_s:=2.0",
                                 "diagnostics_period_s:=0.2")
    listener = Listener(domain_id)
    try:
        listener.probe.wait_for(lambda: listener.probe.diag.get("device_status") == "connected", 30,
                                "the keyboard node connected")

        def send(sign: float) -> float:
            sent = time.monotonic()
            os.write(master, UP if sign > 0 else DOWN)
            return sent

        latencies, last_input = measure(listener, send, events, random.Random(0))
        key_hold_s = load_mapping("teleop_keyboard", "keyboard").keyboard.key_hold_s
        # The hold starts at the last snapshot that still showed the key's motion: the reader takes
        # one per poll (50 ms here), so up to one poll before the motion ends.
        result = {**summary(latencies), **release(listener, last_input, key_hold_s + hold_s, early_s=0.05)}
    finally:
        listener.probe.close()
        stop_node(proc, log)
        os.close(master)
        os.close(slave)
    return result


def run_joy(events: int, workdir: Path, silence_s: float) -> dict:
    from robot_rl.ros.probe import start_node, stop_node

    log = workdir / "teleop_joy.log"
    proc, domain_id = start_node("robot_rl.nodes.teleop", log, "device:=joy", "hold_s:=0.1",
                                 f"silence_timeout_s:={silence_s}", "diagnostics_period_s:=0.2")
    listener = Listener(domain_id)
    try:
        def connected() -> bool:
            listener.publish_joy(0.0, False)
            listener.probe.spin_until(time.monotonic() + 0.05)
            return listener.probe.diag.get("device_status") == "connected"

        listener.probe.wait_for(connected, 30, "the joy node connected")
        # joy_node streams at its autorepeat rate; the stick flips are additional messages in between.
        latencies, last_input = measure(listener, lambda sign: listener.publish_joy(0.6 * sign, True), events,
                                        random.Random(1))
        # The stream stops with the button held and the stick deflected: only the silence timeout
        # can hand control back.
        result = {**summary(latencies), **release(listener, last_input, silence_s)}
    finally:
        listener.probe.close()
        stop_node(proc, log)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=400, help="inputs per device path")
    parser.add_argument("--quick", action="store_true", help="50 inputs per path (a smoke run)")
    args = parser.parse_args()
    events = 50 if args.quick else args.events
    with tempfile.TemporaryDirectory(prefix="teleop_latency_") as tmp:
        workdir = Path(tmp)
        keyboard = run_keyboard(events, workdir, hold_s=0.3)
        print(json.dumps({"path": "keyboard", **keyboard}), flush=True)
        joy = run_joy(events, workdir, silence_s=0.3)
        print(json.dumps({"path": "joy", **joy}), flush=True)
    p99 = max(keyboard["p99_ms"], joy["p99_ms"])
    releases_ok = keyboard["release_ok"] and joy["release_ok"]
    print(json.dumps({"p99_ms": p99, "p50_ms": max(keyboard["p50_ms"], joy["p50_ms"]),
                      "keyboard_p99_ms": keyboard["p99_ms"], "joy_p99_ms": joy["p99_ms"],
                      "keyboard_handback_s": keyboard["handback_s"], "joy_handback_s": joy["handback_s"],
                      "releases_ok": releases_ok, "events": 2 * events,
                      "meets_targets": p99 <= TARGET_P99_MS and releases_ok}))


if __name__ == "__main__":
    main()
