"""The safety benchmark's simulator part: `robot_rl.nodes.arm_sim` (lockstep arm simulation) as its own
process, fuzzed on its command inputs (arm/cmd, arm/gripper) and stepped with extreme valid commands
between the junk; every observation it publishes must stay finite and inside its workspace."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
from safety_fuzz import Fuzz
from safety_harness import FUZZ_INTERVAL_S, Bench, deep, log, start_node_under_test, stop_node_under_test

from robot_rl.ros.messages import ns_to_stamp, stamp_to_ns


class SimBench(Bench):
    """The actor of the simulated arm (commands answering its latest observation) and the observer of
    its observations (joint_states, the end-effector pose)."""

    watched = "arm_sim"

    def __init__(self, domain_id: int):
        super().__init__(domain_id)
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float32

        from robot_rl.robots.arm.sim import ArmSimConfig
        from robot_rl.ros import qos

        cfg = ArmSimConfig()
        self.low = np.asarray(cfg.workspace_low) - 0.03
        self.high = np.asarray(cfg.workspace_high) + 0.03
        self.latest_stamp = -1
        self.observations = 0
        self.out_of_limit: list[str] = []
        n = self.node
        n.create_subscription(JointState, "joint_states", self._on_joints, qos.SENSOR)
        n.create_subscription(PoseStamped, "arm/ee_pose", self._on_ee, qos.SENSOR)
        self.cmd_pub = n.create_publisher(TwistStamped, "arm/cmd", deep(qos.COMMAND))
        self.grip_pub = n.create_publisher(Float32, "arm/gripper", deep(qos.COMMAND))

    def _on_joints(self, msg) -> None:
        self.observations += 1
        self.latest_stamp = max(self.latest_stamp, stamp_to_ns(msg.header.stamp))
        if not all(math.isfinite(x) for x in [*msg.position, *msg.velocity]):
            self.out_of_limit.append("non-finite joint_states")

    def _on_ee(self, msg) -> None:
        p = np.array([msg.pose.position.x, msg.pose.position.y, msg.pose.position.z])
        if not np.isfinite(p).all() or ((p < self.low) | (p > self.high)).any():
            self.out_of_limit.append(f"ee at {p.tolist()}")

    def step(self, rng) -> None:
        """A valid command answering the current observation (often extreme): the sim steps."""
        from geometry_msgs.msg import TwistStamped
        from std_msgs.msg import Float32

        if self.latest_stamp <= 0:
            return
        before = self.latest_stamp
        msg = TwistStamped()
        msg.header.stamp = ns_to_stamp(before)
        msg.header.frame_id = "world"
        v = rng.normal(size=3) * rng.choice([0.1, 1e6])
        msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = (float(x) for x in v)
        self.cmd_pub.publish(msg)
        self.grip_pub.publish(Float32(data=float(rng.uniform(-5, 5))))
        end = time.monotonic() + 2.0
        while self.latest_stamp == before and time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.01)


def run_sim(n_fuzz: int, tmp: Path) -> dict:
    proc, domain_id = start_node_under_test("robot_rl.nodes.arm_sim", {}, tmp / "arm_sim.log")
    b = SimBench(domain_id)
    fz = Fuzz(23)
    rng = np.random.default_rng(5)
    results = {}
    try:
        b.wait_for(lambda: b.latest_stamp > 0 and b.diag, 90, "sim node observations and diagnostics")
        for topic in ("arm_cmd", "arm_gripper"):
            before = b.settle(["rejected_commands"], quiet_s=1.3)["rejected_commands"]
            expected, sent, steps, start = 0, 0, 0, time.monotonic()
            for i in range(n_fuzz):
                if topic == "arm_cmd":
                    msg, _ = fz.twist(time.time_ns(), "world", 0.0, scale=1.0)
                    lin = msg.twist.linear
                    bad = not all(math.isfinite(x) for x in (lin.x, lin.y, lin.z))  # what the sim checks
                    b.cmd_pub.publish(msg)
                else:
                    msg, bad = fz.gripper()
                    b.grip_pub.publish(msg)
                expected += int(bad)
                sent += 1
                if i % 25 == 24:
                    b.step(rng)
                    steps += 1
                    start = time.monotonic() - (i + 1) * FUZZ_INTERVAL_S
                b.spin_until(start + (i + 1) * FUZZ_INTERVAL_S)
                if proc.poll() is not None:
                    break
            after = b.settle(["rejected_commands"], quiet_s=1.3)["rejected_commands"]
            results[topic] = {"sent": sent, "sim_steps": steps, "expected_rejections": expected,
                              "counted_rejections": int(after - before), "alive": proc.poll() is None}
            log(f"sim fuzz {topic}: {results[topic]}")
            if proc.poll() is not None:
                break
        return {"fuzz": results, "crashed": proc.poll() is not None, "out_of_limit": list(b.out_of_limit),
                "observations": b.observations}
    finally:
        b.close()
        stop_node_under_test(proc, tmp / "arm_sim.log")
