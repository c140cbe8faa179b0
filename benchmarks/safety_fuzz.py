"""The safety benchmark's fuzzer: seeded random and malformed messages for each input the benchmark
fuzzes, each labelled with whether the node's documented rules refuse it (this labelling is the
benchmark's own reading of the rules, not a call to the node's validators)."""

from __future__ import annotations

import math

import numpy as np

from robot_rl.ros.messages import ns_to_stamp


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
            return ns_to_stamp(now_ns - int(self.rng.uniform(0, 0.03) * 1e9)), False
        kind = self.rng.integers(6)
        if kind == 0:
            return Time(sec=0, nanosec=0), True
        if kind == 1:
            return Time(sec=int(-self.rng.integers(1, 2**31)), nanosec=0), True
        if kind == 2:
            return Time(sec=now_ns // 1_000_000_000, nanosec=int(self.rng.integers(1_000_000_000, 2**32))), True
        if kind == 3:  # future, well beyond the tolerance
            return ns_to_stamp(now_ns + int(self.rng.uniform(1.0, 1e6) * 1e9)), True
        if kind == 4:
            return Time(sec=2**31 - 1, nanosec=999_999_999), True
        if old_limit_s > 0:  # old, well beyond the age limit
            return ns_to_stamp(now_ns - int(self.rng.uniform(2.0, 1e6) * 1e9)), True
        return ns_to_stamp(now_ns), False

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

    def joint_states(self, now_ns: int, joints: list[str], low: np.ndarray, high: np.ndarray, margin: float,
                     max_age_s: float):
        """joint_states of the arm's `joints` (limits `low`, `high`): refused: stamps, empty, duplicate or
        missing names, mismatched lengths, NaN/Inf, positions beyond the limits by more than `margin`."""
        from sensor_msgs.msg import JointState

        msg = JointState()
        msg.header.stamp, bad = self.stamp(now_ns, max_age_s)
        names = list(joints)
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
            if name in joints:
                j = joints.index(name)
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
                or len(eff) not in (0, n) or any(name not in names for name in joints):
            bad = True
        elif not all(math.isfinite(x) for x in [*pos, *vel, *eff]):
            bad = True
        else:
            q = np.array([pos[names.index(name)] for name in joints])
            if ((q < low - margin) | (q > high + margin)).any():
                bad = True
        return msg, bad

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
