#!/usr/bin/env python3
"""Safety benchmark of the real-arm node (and a fuzz of the simulator node).

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
  (`robot_rl.nodes.sim`, lockstep: arm/cmd, arm/gripper, stepped with extreme valid commands
  between the junk). Each message is labelled by this script's own reading of the documented
  rules. ``fuzz_crashes``: node processes that died. ``fuzz_out_of_limit``: output messages
  outside the configured limits (arm: workspace box, per-step limit, frame, unit quaternion,
  gripper range, on every output message; sim: finite observations inside its workspace).
  ``fuzz_rejections_uncounted``: |expected rejections - rejections counted on /diagnostics|,
  per topic, summed; ``fuzz_dropped``: messages that never reached the node's callback (its
  `rx_<input>` count), which would make the former inconclusive.
* Quadrotor fuzz (`robot_rl.nodes.quadrotor`, hardware `px4_quad`, `auto_arm`): the node flies a
  fake PX4 (pymavlink on 127.0.0.1: heartbeats, COMMAND_ACKs, OFFBOARD/arm/land) with fake
  odometry and a 20 Hz actor; N messages into quad/cmd_ctbr, quad/odom and ball/pose (also nonzero
  lateral thrust, implausible positions, zero ball orientations). Every SET_ATTITUDE_TARGET the fake
  receives must be finite, thrust in [0, 1] (<= that of the YAML's max thrust), FRD rates within
  the YAML's max_rate. Folded into ``fuzz_crashes``, ``fuzz_out_of_limit``, ``fuzz_messages`` and
  the (exact, per-input counted) rejection / drop totals; ``quad_*`` keys give its part.

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

TARGETS = {"watchdog_periods": 2.0, "estop_ms": 20.0, "fuzz_crashes": 0, "fuzz_out_of_limit": 0}
HARDWARE = "franka_cartesian"
CONTROL_HZ = 10.0
COMMAND_TIMEOUT_S = 0.15
STATE_TIMEOUT_S = 0.5
FUTURE_TOLERANCE_S = 0.1
MAX_COMMAND_AGE_S = 0.5
# Pacing of fuzz messages: 250 Hz, 25x the actor's command rate, slow enough that a node on a
# shared 2-core machine receives (and so can count) every message.
FUZZ_INTERVAL_S = 0.004


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---- processes -------------------------------------------------------------------------------------


def start_node(module: str, params: dict, domain_id: int, log_path: Path) -> subprocess.Popen:
    from robot_rl.ros.graph import loopback_environment

    args = [sys.executable, "-m", module, "--ros-args"]
    for key, value in params.items():
        args += ["-p", f"{key}:={value}"]
    return subprocess.Popen(args, env=loopback_environment(domain_id), stdout=open(log_path, "wb"),
                            stderr=subprocess.STDOUT, cwd=REPO_ROOT, start_new_session=True)


def stop_node(proc: subprocess.Popen) -> int | None:
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


# ---- the test-side ROS node ------------------------------------------------------------------------


class Bench:
    """One rclpy context on the node's domain: fake driver, actor, operator, observer, fuzzer."""

    def __init__(self, domain_id: int):
        import rclpy

        self.rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node("safety_bench", context=self.context)
        self.executor = rclpy.executors.SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.diag: dict[str, dict[str, str]] = {}
        self.diag_seq = 0
        from diagnostic_msgs.msg import DiagnosticArray

        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 100)

    def _on_diag(self, msg) -> None:
        for status in msg.status:
            self.diag[status.name.rsplit("/", 1)[-1]] = {kv.key: kv.value for kv in status.values}
        self.diag_seq += 1

    def value(self, node: str, key: str, default: float = math.nan) -> float:
        raw = self.diag.get(node, {}).get(key)
        try:
            return float(raw)
        except (TypeError, ValueError):
            return default

    def spin(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=min(0.01, max(0.0, end - time.monotonic())))

    def spin_until(self, deadline: float) -> None:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.executor.spin_once(timeout_sec=left)

    def wait_for(self, predicate, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.01)
            if predicate():
                return
        raise RuntimeError(f"timed out after {timeout}s waiting for {what}")

    def settle(self, node: str, keys: list[str], quiet_s: float = 0.6, timeout: float = 20.0) -> dict[str, float]:
        """Waits until the node's diagnostics `keys` stop changing; returns them."""
        end = time.monotonic() + timeout
        last, since = None, time.monotonic()
        while time.monotonic() < end:
            self.spin(0.05)
            now = tuple(self.value(node, k, 0.0) for k in keys)
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                break
        return dict(zip(keys, last))

    def call(self, srv_type, name: str, request, timeout: float = 5.0):
        client = self.node.create_client(srv_type, name)
        try:
            if not client.wait_for_service(timeout_sec=timeout):
                raise RuntimeError(f"{name} not available")
            future = client.call_async(request)
            self.wait_for(future.done, timeout, f"{name} response")
            return future.result()
        finally:
            self.node.destroy_client(client)

    def close(self) -> None:
        self.node.destroy_node()
        self.rclpy.shutdown(context=self.context)


def stamp(ns: int):
    from builtin_interfaces.msg import Time

    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def deep(qos_profile, depth: int = 200):
    import copy

    q = copy.copy(qos_profile)
    q.depth = depth
    return q


# ---- fuzz generators (each returns (message, expected_rejection)) -----------------------------------


class Fuzz:
    """Seeded generator of random and malformed messages, each labelled by the documented rules
    (not by calling the node's own validators)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def frame(self, frame: str, wrong: list[str]) -> str:
        """The right frame mostly, else one of `wrong`."""
        return frame if self.chance(0.85) else str(self.rng.choice(wrong))

    def number(self, scale: float = 1.0) -> float:
        r = self.rng.random()
        if r < 0.04:
            return math.nan
        if r < 0.07:
            return math.inf * self.rng.choice([-1, 1])
        if r < 0.12:
            return float(self.rng.choice([-1, 1]) * 10.0 ** self.rng.uniform(3, 300))  # huge, finite
        return float(self.rng.normal() * scale)

    def stamp(self, now_ns: int, old_limit_s: float) -> tuple[object, bool]:
        """(stamp, bad). Good stamps are a few ms old; bad ones are clearly bad."""
        from builtin_interfaces.msg import Time

        r = self.rng.random()
        if r < 0.80:
            return stamp(now_ns - int(self.rng.uniform(0, 0.03) * 1e9)), False
        kind = self.rng.integers(6)
        if kind == 0:
            return Time(sec=0, nanosec=0), True
        if kind == 1:
            return Time(sec=int(-self.rng.integers(1, 2**31)), nanosec=0), True
        if kind == 2:
            return Time(sec=now_ns // 1_000_000_000, nanosec=int(self.rng.integers(1_000_000_000, 2**32))), True
        if kind == 3:  # future, well beyond the tolerance
            return stamp(now_ns + int(self.rng.uniform(1.0, 1e6) * 1e9)), True
        if kind == 4:
            return Time(sec=2**31 - 1, nanosec=999_999_999), True
        if old_limit_s > 0:  # old, well beyond the age limit
            return stamp(now_ns - int(self.rng.uniform(2.0, 1e6) * 1e9)), True
        return stamp(now_ns), False

    def twist(self, now_ns: int, frame: str, max_age_s: float, scale: float = 0.2):
        from geometry_msgs.msg import TwistStamped

        msg = TwistStamped()
        msg.header.stamp, bad_stamp = self.stamp(now_ns, max_age_s)
        msg.header.frame_id = self.frame(frame, ["", "base", "World", f"{frame} ", "map", "fr3_link0"])
        values = [self.number(scale) if self.chance(0.5) else float(self.rng.normal() * scale) for _ in range(6)]
        if self.chance(0.3):
            values[3:] = [0.0, 0.0, 0.0]
        lin, ang = msg.twist.linear, msg.twist.angular
        lin.x, lin.y, lin.z, ang.x, ang.y, ang.z = values
        bad = bad_stamp or msg.header.frame_id != frame or not all(math.isfinite(v) for v in values)
        return msg, bad

    def gripper(self):
        from std_msgs.msg import Float32

        r = self.rng.random()
        if r < 0.05:
            v = math.nan
        elif r < 0.08:
            v = math.inf * self.rng.choice([-1, 1])
        elif r < 0.12:
            v = float(self.rng.choice([-1, 1]) * 10.0 ** self.rng.uniform(30, 300))  # float32 overflow -> inf
        elif r < 0.3:
            v = float(self.rng.normal() * 100)
        else:
            v = float(self.rng.uniform(0, 1))
        with np.errstate(over="ignore"):
            bad = not np.isfinite(np.float32(v))  # what arrives after the float32 wire format
        return Float32(data=v), bool(bad)

    def joint_states(self, now_ns: int, names: list[str], low: np.ndarray, high: np.ndarray, margin: float,
                     max_age_s: float):
        from sensor_msgs.msg import JointState

        msg = JointState()
        msg.header.stamp, bad = self.stamp(now_ns, max_age_s)
        names = list(names)
        if self.chance(0.3):
            names.append("gripper")  # extra joints are fine
        r = self.rng.random()
        if r < 0.05:
            names = []
        elif r < 0.08:
            names[1] = names[0]  # duplicate
        elif r < 0.11:
            names = names[:-2]  # missing joints
        elif r < 0.13:
            names[-1] = ""
        self.rng.shuffle(names)
        n = len(names)
        pos = list(self.rng.uniform(-1.0, 1.0, n) * 0.3)
        for i, name in enumerate(names):
            if name in self._names:
                j = self._names.index(name)
                pos[i] = float(self.rng.uniform(low[j], high[j]))
        if n and self.chance(0.15):
            pos[int(self.rng.integers(n))] = self.number(100.0)
        vel = [] if self.chance(0.5) else list(self.rng.normal(size=n))
        eff = [] if self.chance(0.5) else list(self.rng.normal(size=n))
        if self.chance(0.08):
            pos = pos[:-1] if pos else [0.0]
        if self.chance(0.05):
            vel = list(self.rng.normal(size=n + 1))
        if self.chance(0.04) and vel:
            vel[0] = math.nan
        if self.chance(0.03):
            eff = list(self.rng.normal(size=max(n - 1, 1)))
        msg.name, msg.position, msg.velocity, msg.effort = names, [float(x) for x in pos], \
            [float(x) for x in vel], [float(x) for x in eff]
        # the rules
        if not names or len(set(names)) != len(names) or len(pos) != n or len(vel) not in (0, n) \
                or len(eff) not in (0, n) or any(name not in names for name in self._names):
            bad = True
        elif not all(math.isfinite(x) for x in [*pos, *vel, *eff]):
            bad = True
        else:
            q = np.array([pos[names.index(name)] for name in self._names])
            if ((q < low - margin) | (q > high + margin)).any():
                bad = True
        return msg, bad

    _names: list[str] = []  # the arm's configured joints

    def position_quaternion(self, low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A position around the box [low, high] (sometimes outside, sometimes NaN/Inf/huge) and a
        quaternion (w, x, y, z), sometimes scaled off the unit sphere, NaN or all zeros."""
        centre, half = (low + high) / 2, (high - low) / 2
        pos = centre + self.rng.uniform(-1.2, 1.2, 3) * half
        if self.chance(0.1):
            pos[int(self.rng.integers(3))] = self.number(5.0)
        q = self.rng.normal(size=4)
        q /= np.linalg.norm(q)
        r = self.rng.random()
        if r < 0.06:
            q = q * self.rng.uniform(0.0, 3.0)
        elif r < 0.09:
            q[int(self.rng.integers(4))] = math.nan
        elif r < 0.11:
            q = np.zeros(4)
        return pos, q

    def pose(self, now_ns: int, frame: str, low: np.ndarray, high: np.ndarray, margin: float, max_age_s: float):
        from geometry_msgs.msg import PoseStamped

        msg = PoseStamped()
        msg.header.stamp, bad = self.stamp(now_ns, max_age_s)
        msg.header.frame_id = self.frame(frame, ["", "world", "base", "map"])
        pos, q = self.position_quaternion(low, high)
        p, o = msg.pose.position, msg.pose.orientation
        p.x, p.y, p.z = (float(v) for v in pos)
        o.w, o.x, o.y, o.z = (float(v) for v in q)
        values = [p.x, p.y, p.z, o.w, o.x, o.y, o.z]
        if msg.header.frame_id != frame or not all(math.isfinite(v) for v in values):
            bad = True
        elif abs(math.sqrt(sum(v * v for v in values[3:])) - 1.0) > 0.01:
            bad = True
        elif ((pos < low - margin) | (pos > high + margin)).any():
            bad = True
        return msg, bad

    # -- the quadrotor's inputs (robot_rl/nodes/quadrotor.py's documented rules) --

    def ctbr(self, now_ns: int, frame: str, max_age_s: float):
        """quad/cmd_ctbr: thrust (m/s^2) and FLU rates, often beyond the limits (clamped, not refused);
        refused: bad/future/old stamps, wrong frame, NaN/Inf anywhere, nonzero lateral thrust."""
        from geometry_msgs.msg import TwistStamped

        msg = TwistStamped()
        msg.header.stamp, bad = self.stamp(now_ns, max_age_s)
        msg.header.frame_id = self.frame(frame, ["", "map", "base", "Base_link", f"{frame} ", "odom"])
        thrust = self.number(8.0) + 9.8 if self.chance(0.4) else float(self.rng.uniform(-5.0, 25.0))
        rates = [self.number(2.0) if self.chance(0.3) else float(self.rng.normal() * 1.5) for _ in range(3)]
        lateral = [0.0, 0.0]
        r = self.rng.random()
        if r < 0.05:
            lateral = [-0.0, -0.0]  # == 0: accepted
        elif r < 0.15:
            lateral[int(self.rng.integers(2))] = self.number(0.5) if self.chance(0.7) else 1e-12
        elif r < 0.18:
            lateral = [self.number(3.0), self.number(3.0)]
        lin, ang = msg.twist.linear, msg.twist.angular
        lin.x, lin.y, lin.z = lateral[0], lateral[1], thrust
        ang.x, ang.y, ang.z = rates
        values = [*lateral, thrust, *rates]
        if msg.header.frame_id != frame or not all(math.isfinite(v) for v in values) \
                or lateral[0] != 0.0 or lateral[1] != 0.0:
            bad = True
        return msg, bad

    @staticmethod
    def _quat_bad(q: np.ndarray, tolerance: float) -> bool:
        return not np.isfinite(q).all() or abs(float(np.linalg.norm(q)) - 1.0) > tolerance

    def odometry(self, now_ns: int, frame: str, low: np.ndarray, high: np.ndarray, max_age_s: float,
                 quaternion_tolerance: float, max_position_m: float):
        """quad/odom around the geofence (leaving it is valid: the node lands); refused: stamps, frame,
        NaN/Inf anywhere, positions beyond max_position_m, non-unit quaternions."""
        from nav_msgs.msg import Odometry

        msg = Odometry()
        msg.header.stamp, bad = self.stamp(now_ns, max_age_s)
        msg.header.frame_id = self.frame(frame, ["", "odom", "world", "base_link", f"{frame} "])
        msg.child_frame_id = "base_link"
        pos, q = self.position_quaternion(low, high)
        twist = [self.number(2.0) if self.chance(0.05) else float(self.rng.normal()) for _ in range(6)]
        pose, tw = msg.pose.pose, msg.twist.twist
        pose.position.x, pose.position.y, pose.position.z = (float(v) for v in pos)
        pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z = (float(v) for v in q)
        tw.linear.x, tw.linear.y, tw.linear.z, tw.angular.x, tw.angular.y, tw.angular.z = twist
        if msg.header.frame_id != frame or not all(math.isfinite(v) for v in [*pos, *twist]) \
                or float(np.abs(pos).max()) > max_position_m or self._quat_bad(q, quaternion_tolerance):
            bad = True
        return msg, bad

    def ball(self, now_ns: int, frame: str, low: np.ndarray, high: np.ndarray, max_age_s: float,
             quaternion_tolerance: float, max_position_m: float):
        """ball/pose: like odometry, but an all-zero orientation (no orientation) is valid."""
        from geometry_msgs.msg import PoseStamped

        msg = PoseStamped()
        msg.header.stamp, bad = self.stamp(now_ns, max_age_s)
        msg.header.frame_id = self.frame(frame, ["", "odom", "world", "ball", f"{frame} "])
        pos, q = self.position_quaternion(low, high)
        if self.chance(0.3):
            q = np.zeros(4)
        p, o = msg.pose.position, msg.pose.orientation
        p.x, p.y, p.z = (float(v) for v in pos)
        o.w, o.x, o.y, o.z = (float(v) for v in q)
        if msg.header.frame_id != frame or not np.isfinite(pos).all() or float(np.abs(pos).max()) > max_position_m \
                or (any(v != 0.0 for v in q) and self._quat_bad(q, quaternion_tolerance)):
            bad = True
        return msg, bad


# ---- the arm node ----------------------------------------------------------------------------------


class ArmBench(Bench):
    def __init__(self, domain_id: int, hw):
        super().__init__(domain_id)
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Bool, Float32, Float64

        from robot_rl.ros import qos

        self.hw = hw
        self.ee = (hw.workspace_low + hw.workspace_high) / 2
        self.joints = np.clip([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785], hw.joint_low, hw.joint_high)
        self.publish_joints = self.publish_ee = True
        self.outputs: list[tuple[int, object]] = []
        self.keep_outputs = True
        self.out_checked = 0
        self.out_of_limit: list[str] = []
        self.prev_output = None
        self.gripper_outputs = 0
        n = self.node
        n.create_subscription(PoseStamped, hw.output_topic, self._on_output, deep(qos.COMMAND, 50))
        if hw.gripper_topic:
            n.create_subscription(Float64, hw.gripper_topic, self._on_gripper_output, deep(qos.COMMAND, 50))
        self.joint_pub = n.create_publisher(JointState, hw.joint_states_topic, deep(qos.SENSOR))
        self.ee_pub = n.create_publisher(PoseStamped, hw.ee_pose_topic, deep(qos.SENSOR))
        self.cmd_pub = n.create_publisher(TwistStamped, "arm/cmd", deep(qos.COMMAND))
        self.grip_pub = n.create_publisher(Float32, "arm/gripper", deep(qos.COMMAND))
        self.estop_pub = n.create_publisher(Bool, "/estop", deep(qos.LATCHED))
        n.create_timer(0.02, self._publish_state)

    def _publish_state(self) -> None:
        from geometry_msgs.msg import PoseStamped
        from sensor_msgs.msg import JointState

        now = stamp(time.time_ns())
        if self.publish_joints:
            js = JointState()
            js.header.stamp = now
            js.name = list(self.hw.joint_names)
            js.position = [float(x) for x in self.joints]
            self.joint_pub.publish(js)
        if self.publish_ee:
            pose = PoseStamped()
            pose.header.stamp = now
            pose.header.frame_id = self.hw.state_frame
            pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = (float(v) for v in self.ee)
            pose.pose.orientation.x, pose.pose.orientation.w = 1.0, 0.0
            self.ee_pub.publish(pose)

    def _on_output(self, msg) -> None:
        t = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        p = np.array([msg.pose.position.x, msg.pose.position.y, msg.pose.position.z])
        o = msg.pose.orientation
        hw, problems = self.hw, []
        if not (np.isfinite(p).all() and all(math.isfinite(v) for v in (o.w, o.x, o.y, o.z))):
            problems.append("non-finite")
        else:
            if ((p < hw.workspace_low) | (p > hw.workspace_high)).any():
                problems.append(f"outside the workspace: {p.tolist()}")
            if abs(math.sqrt(o.w ** 2 + o.x ** 2 + o.y ** 2 + o.z ** 2) - 1.0) > 1e-6:
                problems.append("non-unit quaternion")
            if self.prev_output is not None:
                step = np.abs(p - self.prev_output)
                if (step > hw.max_speed / CONTROL_HZ + 1e-12).any():
                    problems.append(f"step {step.tolist()} above the limit")
        if msg.header.frame_id != hw.output_frame:
            problems.append(f"frame {msg.header.frame_id!r}")
        self.out_checked += 1
        self.out_of_limit += problems
        if np.isfinite(p).all():
            self.prev_output = p
            self.ee = p  # the arm follows its impedance target
        if self.keep_outputs:
            self.outputs.append((t, p))

    def _on_gripper_output(self, msg) -> None:
        lo, hi = sorted((self.hw.gripper_open, self.hw.gripper_closed))
        self.out_checked += 1
        self.gripper_outputs += 1
        if not (math.isfinite(msg.data) and lo <= msg.data <= hi):
            self.out_of_limit.append(f"gripper {msg.data}")

    def command(self, v) -> int:
        from geometry_msgs.msg import TwistStamped

        msg = TwistStamped()
        msg.header.frame_id = self.hw.command_frame
        msg.header.stamp = stamp(time.time_ns())
        msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = (float(x) for x in v)
        sent = time.time_ns()
        self.cmd_pub.publish(msg)
        return sent

    def estop(self, value: bool) -> int:
        from std_msgs.msg import Bool

        sent = time.time_ns()
        self.estop_pub.publish(Bool(data=value))
        return sent

    def reset_estop(self) -> bool:
        from std_srvs.srv import Trigger

        return self.call(Trigger, "/arm/reset_estop", Trigger.Request()).success

    def stream(self, seconds: float, v) -> int:
        end, sent = time.monotonic() + seconds, 0
        nxt = time.monotonic()
        while time.monotonic() < end:
            sent = self.command(v)
            nxt += 1.0 / CONTROL_HZ
            self.spin_until(nxt)
        return sent


def _direction(rng, ee, hw) -> np.ndarray:
    """A 0.1 m/s velocity pointing into the box from the current pose (so the target really moves)."""
    centre = (hw.workspace_low + hw.workspace_high) / 2
    d = centre - ee + rng.normal(size=3) * 0.02
    return 0.1 * d / max(np.linalg.norm(d), 1e-6)


def measure_watchdog(b: ArmBench, repeats: int, rng) -> list[float]:
    periods = []
    for _ in range(repeats):
        b.outputs.clear()
        last = b.stream(0.5, _direction(rng, b.ee, b.hw))
        b.spin(0.5)
        outs = [(t, p) for t, p in b.outputs]
        hold = next((t for (t0, p0), (t, p) in zip(outs, outs[1:]) if t > last and np.array_equal(p, p0)), None)
        if hold is None:
            raise RuntimeError("no hold output after the last command")
        periods.append((hold - last) * 1e-9 * CONTROL_HZ)
    return periods


def measure_estop(b: ArmBench, repeats: int, rng) -> list[float]:
    latencies = []
    for _ in range(repeats):
        v = _direction(rng, b.ee, b.hw)
        b.stream(0.3 + rng.uniform(0, 0.1), v)
        prev = b.outputs[-1][1]  # the last output before the e-stop (moving)
        b.outputs.clear()
        sent = b.estop(True)
        b.stream(0.2, v)  # the actor keeps commanding: must not matter
        outs = b.outputs
        hold = None
        for t, p in outs:
            if t > sent and np.array_equal(p, prev):
                hold = t
                break
            prev = p
        if hold is None:
            raise RuntimeError("no hold output after /estop")
        if any(not np.array_equal(p, outs[-1][1]) for t, p in outs if t >= hold):
            raise RuntimeError("the arm moved during the e-stop")
        latencies.append((hold - sent) / 1e6)
        b.estop(False)
        b.spin(0.05)
        if not b.reset_estop():
            raise RuntimeError("reset_estop refused")
    return latencies


def fuzz_inputs(b: Bench, proc: subprocess.Popen, node: str, topics: list[str], send, n: int,
                keep_commanded=None, prepare=None, finish=None) -> dict:
    """Fuzzes each input `topic` of `node` (diagnostics name) in turn: `send(topic, now_ns)` publishes
    one message and returns whether the documented rules refuse it; `keep_commanded(topic)` (if given)
    keeps the node commanded at CONTROL_HZ meanwhile; `prepare(topic)` / `finish(topic)` run before the
    first and after the last snapshot of the node's `rx_<topic>` / `rejected_<topic>` counters (the
    fuzzer must be the only publisher of the topic under test between the two)."""
    results = {}
    for topic in topics:
        keys = [f"rx_{topic}", f"rejected_{topic}"]
        if prepare is not None:
            prepare(topic)
        before = b.settle(node, keys)
        expected, sent, start = 0, 0, time.monotonic()
        next_cmd = start
        for i in range(n):
            expected += int(send(topic, time.time_ns()))
            sent += 1
            if keep_commanded is not None and time.monotonic() >= next_cmd:
                keep_commanded(topic)
                next_cmd += 1.0 / CONTROL_HZ
            b.spin_until(start + (i + 1) * FUZZ_INTERVAL_S)
            if proc.poll() is not None:
                break
        after = b.settle(node, keys)
        if finish is not None:
            finish(topic)
        rx = after[f"rx_{topic}"] - before[f"rx_{topic}"]
        counted = after[f"rejected_{topic}"] - before[f"rejected_{topic}"]
        results[topic] = {"sent": sent, "received": int(rx), "expected_rejections": expected,
                          "counted_rejections": int(counted), "alive": proc.poll() is None}
        log(f"{node} fuzz {topic}: {results[topic]}")
        if proc.poll() is not None:
            break
    return results


def fuzz_arm(b: ArmBench, proc: subprocess.Popen, n: int, seed: int) -> dict:
    from std_msgs.msg import Bool

    hw = b.hw
    fz = Fuzz(seed)
    fz._names = list(hw.joint_names)
    rng = np.random.default_rng(seed + 1)

    def send(topic: str, now_ns: int) -> bool:
        if topic == "arm_cmd":
            msg, bad = fz.twist(now_ns, hw.command_frame, MAX_COMMAND_AGE_S)
            b.cmd_pub.publish(msg)
        elif topic == "arm_gripper":
            msg, bad = fz.gripper()
            b.grip_pub.publish(msg)
        elif topic == "joint_states":
            msg, bad = fz.joint_states(now_ns, hw.joint_names, hw.joint_low, hw.joint_high,
                                       hw.joint_state_margin, STATE_TIMEOUT_S)
            b.joint_pub.publish(msg)
        elif topic == "ee_pose":
            msg, bad = fz.pose(now_ns, hw.state_frame, hw.workspace_low, hw.workspace_high, hw.state_margin,
                               STATE_TIMEOUT_S)
            b.ee_pub.publish(msg)
        else:
            msg, bad = Bool(data=bool(fz.chance(0.1))), False
            b.estop_pub.publish(msg)
        return bad

    def keep_commanded(topic: str) -> None:
        if topic != "arm_cmd":
            b.command(rng.normal(size=3) * rng.choice([0.05, 5.0]))

    def prepare(topic: str) -> None:
        b.publish_joints = topic != "joint_states"
        b.publish_ee = topic != "ee_pose"

    def finish(topic: str) -> None:
        b.publish_joints = b.publish_ee = True
        if topic == "estop":
            b.estop_pub.publish(Bool(data=False))
            b.spin(0.1)
            b.reset_estop()

    b.keep_outputs = False
    try:
        return fuzz_inputs(b, proc, "arm", ["arm_cmd", "arm_gripper", "joint_states", "ee_pose", "estop"], send, n,
                           keep_commanded, prepare, finish)
    finally:
        b.keep_outputs = True


def run_arm(quick: bool, n_fuzz: int, tmp: Path) -> dict:
    from robot_rl.hardware.arm_adapters import load_hardware

    hw = load_hardware(HARDWARE)
    domain_id = random.randint(120, 230)
    params = {"hardware": HARDWARE, "control_hz": CONTROL_HZ, "command_timeout_s": COMMAND_TIMEOUT_S,
              "state_timeout_s": STATE_TIMEOUT_S, "max_command_age_s": MAX_COMMAND_AGE_S,
              "stamp_future_tolerance_s": FUTURE_TOLERANCE_S, "diagnostics_period_s": 0.2,
              "activation_retry_s": 0.2}
    proc = start_node("robot_rl.nodes.arm", params, domain_id, tmp / "arm.log")
    b = ArmBench(domain_id, hw)
    rng = np.random.default_rng(7)
    try:
        b.wait_for(lambda: b.diag.get("arm", {}).get("lifecycle") == "active", 60, "arm node activation")
        b.spin(0.3)
        watchdog = measure_watchdog(b, 5 if quick else 20, rng)
        log(f"watchdog periods: {[round(p, 3) for p in watchdog]}")
        estop = measure_estop(b, 10 if quick else 30, rng)
        log(f"e-stop ms: {[round(x, 2) for x in estop]}")
        fuzz = fuzz_arm(b, proc, n_fuzz, seed=11)
        crashed = proc.poll() is not None
        return {"watchdog": watchdog, "estop": estop, "fuzz": fuzz, "crashed": crashed,
                "out_of_limit": list(b.out_of_limit), "outputs_checked": b.out_checked,
                "gripper_outputs": b.gripper_outputs, "log": tmp / "arm.log"}
    finally:
        b.close()
        code = stop_node(proc)
        if code not in (0, None):
            log(f"arm node exit code {code}; log tail:\n" + (tmp / "arm.log").read_text()[-3000:])


# ---- the simulator node ----------------------------------------------------------------------------


class SimBench(Bench):
    def __init__(self, domain_id: int):
        super().__init__(domain_id)
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float32

        from robot_rl.envs.arm import ArmSimConfig
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
        self.latest_stamp = max(self.latest_stamp, msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec)
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
        msg.header.stamp = stamp(before)
        msg.header.frame_id = "world"
        v = rng.normal(size=3) * rng.choice([0.1, 1e6])
        msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = (float(x) for x in v)
        self.cmd_pub.publish(msg)
        self.grip_pub.publish(Float32(data=float(rng.uniform(-5, 5))))
        end = time.monotonic() + 2.0
        while self.latest_stamp == before and time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.01)


def run_sim(n_fuzz: int, tmp: Path) -> dict:
    domain_id = random.randint(120, 230)
    proc = start_node("robot_rl.nodes.sim", {}, domain_id, tmp / "sim.log")
    b = SimBench(domain_id)
    fz = Fuzz(23)
    rng = np.random.default_rng(5)
    results = {}
    try:
        b.wait_for(lambda: b.latest_stamp > 0 and "sim" in b.diag, 90, "sim node observations and diagnostics")
        for topic in ("arm_cmd", "arm_gripper"):
            before = b.settle("sim", ["rejected_commands"], quiet_s=1.3)["rejected_commands"]
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
            after = b.settle("sim", ["rejected_commands"], quiet_s=1.3)["rejected_commands"]
            results[topic] = {"sent": sent, "sim_steps": steps, "expected_rejections": expected,
                              "counted_rejections": int(after - before), "alive": proc.poll() is None}
            log(f"sim fuzz {topic}: {results[topic]}")
            if proc.poll() is not None:
                break
        return {"fuzz": results, "crashed": proc.poll() is not None, "out_of_limit": list(b.out_of_limit),
                "observations": b.observations}
    finally:
        b.close()
        code = stop_node(proc)
        if code not in (0, None):
            log(f"sim node exit code {code}; log tail:\n" + (tmp / "sim.log").read_text()[-3000:])


# ---- the quadrotor node ----------------------------------------------------------------------------

QUAD_HARDWARE = "px4_quad"
QUAD_QUATERNION_TOLERANCE = 0.05  # the node's defaults (quaternion_tolerance, max_position_m)
QUAD_MAX_POSITION_M = 1000.0
# Long enough that the quiet snapshots around each fuzzed topic (its publisher paused) do not land it;
# the fuzz's bad stamps are >= 2 s old, so the labels do not change.
QUAD_COMMAND_TIMEOUT_S = 1.0
QUAD_STATE_TIMEOUT_S = 1.5
PX4_OFFBOARD, PX4_AUTO_LAND, PX4_POSCTL = 6 << 16, (4 << 16) | (6 << 24), 3 << 16


def free_udp_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeAutopilot:
    """A PX4 on 127.0.0.1 (pymavlink): HEARTBEATs at 10 Hz to the node's `udpin` port; answers every
    COMMAND_LONG with an accepted COMMAND_ACK and follows it (OFFBOARD, arm/disarm, land, then
    auto-disarm 0.1 s later). Checks every SET_ATTITUDE_TARGET against the YAML's limits: finite,
    thrust in [0, 1] and at most the thrust of `command.thrust`'s maximum, FRD body rates (converted
    back to FLU) within +-`command.max_rate`."""

    def __init__(self, port: int, hw):
        import threading

        from pymavlink import mavutil

        from robot_rl.hardware.quad_links.mavlink import flu_to_frd, px4_thrust

        self.mav = mavutil.mavlink
        self.conn = mavutil.mavlink_connection(f"udpout:127.0.0.1:{port}", source_system=1, source_component=1)
        cfg = hw.mavlink
        self.max_thrust01 = px4_thrust(hw.thrust_limits[1], cfg.hover_thrust, cfg.gravity)
        self.max_rates = np.asarray(hw.max_rates, dtype=np.float64)
        self.flu_to_frd = flu_to_frd
        self.lock = threading.Lock()
        self.armed, self.custom_mode, self.land_time = False, PX4_POSCTL, None
        self.setpoints = 0
        self.commands: dict[int, int] = {}
        self.out_of_limit: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._heartbeats, daemon=True),
                         threading.Thread(target=self._receive, daemon=True)]
        for t in self._threads:
            t.start()

    def _heartbeats(self) -> None:
        mav = self.mav
        while not self._stop.is_set():
            with self.lock:
                if self.land_time is not None and time.monotonic() - self.land_time > 0.1:
                    self.armed, self.land_time = False, None
                base = mav.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED | (mav.MAV_MODE_FLAG_SAFETY_ARMED if self.armed else 0)
                self.conn.mav.heartbeat_send(mav.MAV_TYPE_QUADROTOR, mav.MAV_AUTOPILOT_PX4, base, self.custom_mode,
                                             mav.MAV_STATE_ACTIVE)
            self._stop.wait(0.1)

    def _receive(self) -> None:
        import select

        while not self._stop.is_set():
            if not select.select([self.conn.fd], [], [], 0.05)[0]:
                continue
            while (msg := self.conn.recv_msg()) is not None:
                kind = msg.get_type()
                with self.lock:
                    if kind == "SET_ATTITUDE_TARGET":
                        self._check(msg)
                    elif kind == "COMMAND_LONG":
                        self._command(msg)

    def _check(self, msg) -> None:
        self.setpoints += 1
        frd = [msg.body_roll_rate, msg.body_pitch_rate, msg.body_yaw_rate]
        if not all(math.isfinite(v) for v in [*frd, msg.thrust]):
            self.out_of_limit.append(f"non-finite setpoint {frd + [msg.thrust]}")
            return
        tol = 1e-6  # the float32 wire format
        if not (0.0 <= msg.thrust <= 1.0 and msg.thrust <= self.max_thrust01 + tol):
            self.out_of_limit.append(f"thrust {msg.thrust} outside [0, {self.max_thrust01:.4f}]")
        flu = self.flu_to_frd(frd)
        if (np.abs(flu) > self.max_rates * (1 + tol)).any():
            self.out_of_limit.append(f"rates (FLU) {flu.tolist()} beyond {self.max_rates.tolist()}")

    def _command(self, msg) -> None:
        mav, cmd = self.mav, msg.command
        self.commands[cmd] = self.commands.get(cmd, 0) + 1
        if cmd == mav.MAV_CMD_DO_SET_MODE:
            self.custom_mode = (int(msg.param2) << 16) | (int(msg.param3) << 24)
        elif cmd == mav.MAV_CMD_COMPONENT_ARM_DISARM:
            self.armed = msg.param1 == 1.0
            self.land_time = None
        elif cmd == mav.MAV_CMD_NAV_LAND and self.armed:
            self.custom_mode, self.land_time = PX4_AUTO_LAND, time.monotonic()
        self.conn.mav.command_ack_send(cmd, mav.MAV_RESULT_ACCEPTED)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=1.0)
        self.conn.close()


class QuadBench(Bench):
    """Fake motion capture (quad/odom at 50 Hz, hovering at (0, 0, 1)), the actor (valid quad/cmd_ctbr
    at 20 Hz, often beyond the limits: clamped) and the ball tracker's publisher (ball/pose)."""

    def __init__(self, domain_id: int, hw):
        super().__init__(domain_id)
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from nav_msgs.msg import Odometry

        from robot_rl.ros import qos

        self.hw = hw
        self.publish_odom = self.actor = True
        self.rng = np.random.default_rng(13)
        n = self.node
        self.cmd_pub = n.create_publisher(TwistStamped, "quad/cmd_ctbr", deep(qos.COMMAND))
        self.odom_pub = n.create_publisher(Odometry, hw.odom_topic, deep(qos.SENSOR))
        self.ball_pub = n.create_publisher(PoseStamped, hw.ball_topic, deep(qos.SENSOR))
        n.create_timer(0.02, self._publish_odom)
        n.create_timer(0.05, self._act)

    def _act(self) -> None:
        if self.actor:
            rng = self.rng
            self.command(9.8 + rng.normal() * rng.choice([1.0, 20.0]), rng.normal(size=3) * rng.choice([0.3, 10.0]))

    def _publish_odom(self) -> None:
        from nav_msgs.msg import Odometry

        if not self.publish_odom:
            return
        msg = Odometry()
        msg.header.stamp = stamp(time.time_ns())
        msg.header.frame_id = self.hw.state_frame
        msg.child_frame_id = self.hw.command_frame
        msg.pose.pose.position.z = 1.0
        msg.pose.pose.orientation.w = 1.0
        self.odom_pub.publish(msg)

    def command(self, thrust: float, rates) -> None:
        """A valid command (thrust and rates may be beyond the limits: clamped)."""
        from geometry_msgs.msg import TwistStamped

        msg = TwistStamped()
        msg.header.frame_id = self.hw.command_frame
        msg.header.stamp = stamp(time.time_ns())
        msg.twist.linear.z = float(thrust)
        msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = (float(r) for r in rates)
        self.cmd_pub.publish(msg)



def run_quad(n_fuzz: int, tmp: Path) -> dict:
    from robot_rl.hardware.quad_links.config import load_quad_hardware

    hw = load_quad_hardware(QUAD_HARDWARE)
    domain_id = random.randint(120, 230)
    port = free_udp_port()
    fake = FakeAutopilot(port, hw)
    params = {"hardware": QUAD_HARDWARE, "connection": f"udpin:127.0.0.1:{port}", "auto_arm": "true",
              "arm_retry_s": 0.2, "control_hz": 50.0, "command_timeout_s": QUAD_COMMAND_TIMEOUT_S,
              "state_timeout_s": QUAD_STATE_TIMEOUT_S, "max_command_age_s": MAX_COMMAND_AGE_S,
              "stamp_future_tolerance_s": FUTURE_TOLERANCE_S, "diagnostics_period_s": 0.2,
              "activation_retry_s": 0.2, "quaternion_tolerance": QUAD_QUATERNION_TOLERANCE,
              "max_position_m": QUAD_MAX_POSITION_M}
    proc = start_node("robot_rl.nodes.quadrotor", params, domain_id, tmp / "quadrotor.log")
    b = QuadBench(domain_id, hw)
    fz = Fuzz(31)
    low, high = (np.asarray(hw.geofence.low), np.asarray(hw.geofence.high)) if hw.geofence is not None \
        else (np.array([-2.0, -2.0, 0.0]), np.array([2.0, 2.0, 2.5]))

    def send(topic: str, now_ns: int) -> bool:
        if topic == "cmd_ctbr":
            msg, bad = fz.ctbr(now_ns, hw.command_frame, MAX_COMMAND_AGE_S)
            b.cmd_pub.publish(msg)
        elif topic == "odom":
            msg, bad = fz.odometry(now_ns, hw.state_frame, low, high, QUAD_STATE_TIMEOUT_S,
                                   QUAD_QUATERNION_TOLERANCE, QUAD_MAX_POSITION_M)
            b.odom_pub.publish(msg)
        else:
            msg, bad = fz.ball(now_ns, hw.state_frame, low, high, QUAD_STATE_TIMEOUT_S, QUAD_QUATERNION_TOLERANCE,
                               QUAD_MAX_POSITION_M)
            b.ball_pub.publish(msg)
        return bad

    def prepare(topic: str) -> None:  # the actor's own timer keeps it commanded (and flying)
        b.actor = topic != "cmd_ctbr"  # meanwhile the fuzz's valid commands fly it (auto_arm)
        b.publish_odom = topic != "odom"  # the fuzz's poses outside the geofence land it

    def flying() -> bool:
        return b.diag.get("quadrotor", {}).get("link_state") == "flying"

    def finish(topic: str) -> None:  # fly again (e.g. after a geofence landing) before the next topic
        b.actor = b.publish_odom = True
        if topic == "ball":  # the last one
            return
        try:
            b.wait_for(flying, 10, "auto_arm: flying again")
        except RuntimeError as exc:
            log(f"quadrotor: {exc}")

    try:
        b.wait_for(lambda: b.diag.get("quadrotor", {}).get("lifecycle") == "active", 60, "quadrotor activation")
        b.wait_for(flying, 20, "auto_arm: flying")
        fuzz = fuzz_inputs(b, proc, "quadrotor", ["cmd_ctbr", "odom", "ball"], send, n_fuzz, None, prepare, finish)
        final = b.settle("quadrotor", ["arm_successes", "geofence_actions", "safe_actions", "clamped_thrust",
                                       "clamped_rates"])
        crashed = proc.poll() is not None
        with fake.lock:
            out_of_limit, setpoints = list(fake.out_of_limit), fake.setpoints
        return {"fuzz": fuzz, "crashed": crashed, "out_of_limit": out_of_limit, "setpoints": setpoints,
                "counters": {k: int(v) for k, v in final.items()}}
    finally:
        b.close()
        code = stop_node(proc)
        fake.close()
        if code not in (0, None):
            log(f"quadrotor node exit code {code}; log tail:\n" + (tmp / "quadrotor.log").read_text()[-3000:])


# ---- main ------------------------------------------------------------------------------------------


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
