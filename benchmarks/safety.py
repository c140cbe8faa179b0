#!/usr/bin/env python3
"""Safety benchmark of the hardware nodes (real arm, quadrotor) and a fuzz of the simulator node.

Run from the repo root::

    python benchmarks/safety.py [--quick]

The arm node (`robot_rl.nodes.arm`, hardware `franka_cartesian`: Cartesian impedance target
poses, 10 Hz control, `command_timeout_s` 0.15) runs as a SEPARATE PROCESS over loopback DDS
(`ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`, `ROS_LOCALHOST_ONLY=1`, a random `ROS_DOMAIN_ID` in
120..230). This process plays the robot driver (publishes joint_states and the end-effector
pose, and follows the node's target like an impedance controller would), the actor and the
operator. Timestamps: the node stamps every output with its clock (system time); this process
takes `time.time_ns()` just before publishing; same machine, same clock.

Metrics:

* ``watchdog_periods``: stream commands at 10 Hz, stop; (header stamp of the first hold output
  - time the last command was published) x control_hz. Worst case over the repeats (median
  also reported). Target <= 2.
* ``estop_ms``: stream commands, publish /estop=True; header stamp of the first hold output
  after it - publish time. Median over the repeats (max also reported). Target <= 20 ms.
* Fuzz: N random and malformed messages (10,000 per topic, 1,000 with --quick; seeded numpy
  generator: NaN/Inf/huge values, float32 overflow, wrong frames, zero/negative/non-normalised/
  future/old stamps, empty/duplicate/missing joint names, mismatched lengths, non-unit
  quaternions) into EACH input topic of the arm node (arm/cmd, arm/gripper, joint_states, the
  ee pose, /estop) while it is commanded, then into each input of the simulator node
  (`robot_rl.nodes.arm_sim`, lockstep: arm/cmd, arm/gripper, stepped with extreme valid commands
  between the junk). Each message is labelled by this script's own reading of the documented
  rules. ``fuzz_crashes``: node processes that died. ``fuzz_out_of_limit``: output messages
  outside the configured limits (arm: workspace box, per-step limit, frame, unit quaternion,
  gripper range, on every output message; sim: finite observations inside its workspace).
  ``fuzz_rejections_uncounted``: |expected rejections - rejections counted on /diagnostics|,
  per topic, summed; ``fuzz_dropped``: messages that never reached the node's callback (its
  `rx_<input>` count), which would make the former inconclusive.
* Quadrotor fuzz (`robot_rl.nodes.quadrotor`, hardware `px4_quad`, `auto_arm`): the node flies a
  fake PX4 (`robot_rl.robots.quad.fake_autopilot`, pymavlink on 127.0.0.1: heartbeats, COMMAND_ACKs,
  OFFBOARD/arm/land, as in the quadrotor tests) with fake odometry and a 20 Hz actor; N messages
  into quad/cmd_ctbr, quad/odom and ball/pose (also nonzero lateral thrust, implausible positions,
  zero ball orientations). Every SET_ATTITUDE_TARGET the fake
  receives must be finite, thrust in [0, 1] (<= that of the YAML's max thrust), FRD rates within
  the YAML's max_rate. Folded into ``fuzz_crashes``, ``fuzz_out_of_limit``, ``fuzz_messages`` and
  the (exact, per-input counted) rejection / drop totals; ``quad_*`` keys give its part.

The last line printed is one JSON object.

This file is the entry point; beside it, `safety_harness.py` (the node processes, the probe and
the per-topic fuzz loop), `safety_fuzz.py` (the labelled message generators) and one module per
robot: `safety_arm.py`, `safety_sim.py`, `safety_quad.py`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from safety_arm import COMMAND_TIMEOUT_S, CONTROL_HZ, HARDWARE, run_arm
from safety_harness import log
from safety_quad import QUAD_HARDWARE, run_quad
from safety_sim import run_sim

TARGETS = {"watchdog_periods": 2.0, "estop_ms": 20.0, "fuzz_crashes": 0, "fuzz_out_of_limit": 0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 fuzz messages per topic instead of 10,000")
    parser.add_argument("--fuzz-messages", type=int, default=None)
    args = parser.parse_args()
    n_fuzz = args.fuzz_messages or (1000 if args.quick else 10_000)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="safety_bench_") as tmp_dir:
        tmp = Path(tmp_dir)
        arm = run_arm(args.quick, n_fuzz, tmp)
        sim = run_sim(n_fuzz, tmp)
        quad = run_quad(n_fuzz, tmp)
    fuzz_all = [*arm["fuzz"].values(), *sim["fuzz"].values(), *quad["fuzz"].values()]
    counting = [*arm["fuzz"].values(), *quad["fuzz"].values()]  # nodes that count rx per input

    def dropped_of(rs) -> int:
        return sum(max(0, r["sent"] - r["received"]) for r in rs)

    def uncounted_of(rs) -> int:
        return sum(abs(r["expected_rejections"] - r["counted_rejections"]) for r in rs)

    dropped, uncounted = dropped_of(counting), uncounted_of(counting)
    quad_fuzz = list(quad["fuzz"].values())
    nodes = (("arm", arm), ("sim", sim), ("quad", quad))
    sim_expected = sum(r["expected_rejections"] for r in sim["fuzz"].values())
    sim_counted = sum(r["counted_rejections"] for r in sim["fuzz"].values())
    for what, r in nodes:
        if r["out_of_limit"]:
            log(f"{what} out-of-limit outputs (first 5): {r['out_of_limit'][:5]}")
    result = {
        "watchdog_periods": round(max(arm["watchdog"]), 3),
        "watchdog_periods_median": round(statistics.median(arm["watchdog"]), 3),
        "estop_ms": round(statistics.median(arm["estop"]), 2),
        "estop_ms_max": round(max(arm["estop"]), 2),
        "fuzz_crashes": sum(int(r["crashed"]) for _, r in nodes),
        "fuzz_out_of_limit": sum(len(r["out_of_limit"]) for _, r in nodes),
        "fuzz_messages": sum(r["sent"] for r in fuzz_all),
        "fuzz_messages_per_topic": n_fuzz,
        # arm + quadrotor nodes: exact (they count what they received per input, so drops are visible)
        "fuzz_rejections_expected": sum(r["expected_rejections"] for r in counting),
        "fuzz_rejections_counted": sum(r["counted_rejections"] for r in counting),
        "fuzz_rejections_uncounted": uncounted,
        "fuzz_dropped": dropped,
        # sim node: it counts rejections but not receptions; a shortfall may be its depth-1 readers dropping
        "sim_rejections_expected": sim_expected,
        "sim_rejections_counted": sim_counted,
        "arm_outputs_checked": arm["outputs_checked"],
        "sim_observations_checked": sim["observations"],
        # quadrotor node (fake PX4 over MAVLink): its part of the totals above, and what it flew
        "quad_fuzz_crashes": int(quad["crashed"]),
        "quad_fuzz_out_of_limit": len(quad["out_of_limit"]),
        "quad_fuzz_messages": sum(r["sent"] for r in quad_fuzz),
        "quad_rejections_expected": sum(r["expected_rejections"] for r in quad_fuzz),
        "quad_rejections_counted": sum(r["counted_rejections"] for r in quad_fuzz),
        "quad_rejections_uncounted": uncounted_of(quad_fuzz),
        "quad_dropped": dropped_of(quad_fuzz),
        "quad_setpoints_checked": quad["setpoints"],
        **{f"quad_{k}": v for k, v in quad["counters"].items()},
        "quad_hardware": QUAD_HARDWARE,
        "control_hz": CONTROL_HZ,
        "command_timeout_s": COMMAND_TIMEOUT_S,
        "hardware": HARDWARE,
        "targets": TARGETS,
        "meets_targets": bool(max(arm["watchdog"]) <= TARGETS["watchdog_periods"]
                              and statistics.median(arm["estop"]) <= TARGETS["estop_ms"]
                              and not any(r["crashed"] or r["out_of_limit"] for _, r in nodes) and uncounted == 0),
        # A message lost before a node read it (fuzz_dropped) is reported but is no safety failure:
        # e.g. a burst of /estop values on a latched keep-last topic, where the newest one wins.
        "quick": args.quick,
        "wall_s": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
