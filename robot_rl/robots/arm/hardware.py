"""Real-arm command shaping without ROS: the Cartesian target shaper and one output adapter per
controller interface of the arm's driver (`interface:` in hardware/<arm>.yaml). An adapter's output
is plain numbers; `robot_rl.ros.arm_driver_io` turns it into the interface's message and
`robot_rl.nodes.arm` publishes it.

Interfaces and their outputs:

- `cartesian_pose`: a Cartesian impedance controller following a target pose, e.g. CRISP on a
  Franka: (x, y, z, qw, qx, qy, qz). Hold = the same target again.
- `servo_twist`: MoveIt Servo `delta_twist_cmds` (Servo configured with
  `command_in_type: speed_units`): (vx, vy, vz, wx, wy, wz), angular always 0. Hold = zero twist.
- `joint_trajectory`: ros2_control JointTrajectoryController (one point), and
- `forward_position`: ros2_control forward_command_controller: joint targets from a
  damped-least-squares IK step on the DH model. Hold = the same joint targets again.

Every adapter output is bounded by construction: the Cartesian target moves at most
`max_speed / control_hz` per axis per control period and stays in the workspace box; joint
targets move at most `joints.max_speed / control_hz` per period and stay in the joint limits.
`Adapter.violations` checks an output against those limits (for tests and audits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robot_rl.robots.arm.kinematics import DHChain, dls_step
from robot_rl.control.rotations import rotation_error
from robot_rl.robots.arm.hardware_config import ArmHardware
from robot_rl.hardware.safety import clamp_box, limit_step


class CartesianTargetShaper:
    """Keeps the end-effector target: starts at the measured pose, moves by the commanded velocity
    each control period, never more than `max_step` per axis, never further than `max_lead` per
    axis from the measured pose, always inside the workspace box."""

    def __init__(self, hw: ArmHardware, control_hz: float):
        self.low, self.high = hw.workspace_low, hw.workspace_high
        self.max_step = hw.max_step(control_hz)
        self.max_lead = hw.max_lead
        self.activation_margin = hw.activation_margin
        self.dt = 1.0 / control_hz
        self.target: np.ndarray | None = None

    def start(self, measured: np.ndarray) -> np.ndarray:
        outside = np.maximum(self.low - measured, 0.0) + np.maximum(measured - self.high, 0.0)
        if (outside > self.activation_margin).any():
            raise ValueError(f"the end effector at {np.round(measured, 3).tolist()} is outside the workspace box "
                             f"{self.low.tolist()}..{self.high.tolist()} by more than {self.activation_margin} m; "
                             "move it inside first")
        self.target, _ = clamp_box(measured, self.low, self.high)
        return self.target.copy()

    def advance(self, velocity: np.ndarray, measured: np.ndarray) -> tuple[np.ndarray, bool]:
        """One control period at `velocity` (m/s). Returns (new target, whether a limit acted)."""
        return self._move(self.target + np.asarray(velocity, float) * self.dt, measured, self.max_step)

    def toward(self, goal: np.ndarray, speed: float, measured: np.ndarray) -> tuple[np.ndarray, bool]:
        """One control period toward `goal` at most at `speed` (m/s per axis)."""
        return self._move(np.asarray(goal, float), measured, np.minimum(self.max_step, speed * self.dt))

    def _move(self, desired: np.ndarray, measured: np.ndarray, max_step: np.ndarray) -> tuple[np.ndarray, bool]:
        if self.target is None:
            raise RuntimeError("CartesianTargetShaper.start was not called")
        desired, lead = clamp_box(desired, measured - self.max_lead, measured + self.max_lead)
        desired, stepped = limit_step(desired, self.target, max_step)
        desired, boxed = clamp_box(desired, self.low, self.high)
        self.target = desired
        return desired.copy(), bool(stepped or boxed)


# ---- output adapters ------------------------------------------------------------------------------


@dataclass
class Measured:
    """What the node knows about the arm when it calls an adapter."""

    ee_pos: np.ndarray
    ee_quat: np.ndarray
    joints: np.ndarray | None



class Adapter:
    """Turns Cartesian targets into one controller interface's output."""

    kind = ""

    def __init__(self, hw: ArmHardware, control_hz: float):
        self.hw = hw
        self.control_hz = control_hz
        self.joint_clamps = 0

    def start(self, measured: Measured, target_pos: np.ndarray) -> None:
        """Called on activation with the measured state and the initial (clamped) target."""
        self.quat = np.asarray(measured.ee_quat, float)

    def command(self, prev_target: np.ndarray, target: np.ndarray) -> np.ndarray:
        """The output moving the arm from `prev_target` to `target` within one control period."""
        raise NotImplementedError

    def hold(self, target: np.ndarray) -> np.ndarray:
        """The output keeping the arm where it is commanded now (zero / same target)."""
        raise NotImplementedError

    def violations(self, output: np.ndarray, previous: np.ndarray | None = None) -> list[str]:
        """Which configured limits `output` breaks (vs the previous output, for step limits)."""
        raise NotImplementedError


class CartesianPoseAdapter(Adapter):
    kind = "cartesian_pose"

    def command(self, prev_target, target):
        return np.concatenate([np.asarray(target, float), self.quat])

    def hold(self, target):
        return np.concatenate([np.asarray(target, float), self.quat])

    def violations(self, output, previous=None):
        hw, out = self.hw, []
        p, o = output[:3], output[3:]
        if not np.isfinite(output).all():
            return ["non-finite pose"]
        if ((p < hw.workspace_low - 1e-9) | (p > hw.workspace_high + 1e-9)).any():
            out.append(f"position {p.tolist()} outside the workspace")
        if abs(math.sqrt(float(o @ o)) - 1.0) > 1e-6:
            out.append("orientation is not a unit quaternion")
        if previous is not None:
            q = previous[:3]
            if (np.abs(p - q) > hw.max_step(self.control_hz) + 1e-9).any():
                out.append(f"step {np.abs(p - q).tolist()} exceeds the per-step limit")
        return out


class ServoTwistAdapter(Adapter):
    kind = "servo_twist"

    def command(self, prev_target, target):
        # the velocity that covers this period's (limited, boxed) target step
        return np.concatenate([(np.asarray(target) - np.asarray(prev_target)) * self.control_hz, np.zeros(3)])

    def hold(self, target):
        return np.zeros(6)

    def violations(self, output, previous=None):
        v, w = output[:3], output[3:]
        if not np.isfinite(output).all():
            return ["non-finite twist"]
        out = []
        if (np.abs(v) > self.hw.max_speed * (1 + 1e-9) + 1e-12).any():
            out.append(f"linear velocity {v.tolist()} exceeds max_speed")
        if (w != 0).any():
            out.append("non-zero angular velocity")
        return out


class JointAdapter(Adapter):
    """Differential IK on the DH model: the Cartesian target's motion is applied to the model's
    tool point (so a constant offset between the model and the measured pose does not matter),
    the orientation is held at its value on activation. The same joint targets serve
    `joint_trajectory` and `forward_position`: only their messages differ."""

    def __init__(self, hw: ArmHardware, control_hz: float):
        super().__init__(hw, control_hz)
        self.kind = hw.interface
        if hw.kinematics is None or hw.joint_low is None:
            raise ValueError(f"{self.kind} needs kinematics and joint limits")
        self.chain = DHChain(hw.kinematics)
        self.max_joint_step = hw.max_joint_step(control_hz)
        w = hw.kinematics.orientation_weight
        self.weights = np.array([1.0, 1.0, 1.0, w, w, w])
        self.q: np.ndarray | None = None

    def start(self, measured: Measured, target_pos: np.ndarray) -> None:
        super().start(measured, target_pos)
        if measured.joints is None:
            raise ValueError("joint interfaces need joint_states")
        q, _ = clamp_box(measured.joints, self.hw.joint_low, self.hw.joint_high)
        self.q = q
        self.model_target, self.model_rot = self.chain.fk(q)
        self.last_target = np.asarray(target_pos, float).copy()

    def _ik(self, target: np.ndarray) -> np.ndarray:
        self.model_target = self.model_target + (np.asarray(target, float) - self.last_target)
        self.last_target = np.asarray(target, float).copy()
        pos, rot = self.chain.fk(self.q)
        error = np.concatenate([self.model_target - pos, rotation_error(self.model_rot, rot)])
        dq = dls_step(self.chain.jacobian(self.q), error, self.hw.kinematics.damping, self.weights)
        q, stepped = limit_step(self.q + dq, self.q, self.max_joint_step)
        q, boxed = clamp_box(q, self.hw.joint_low, self.hw.joint_high)
        self.joint_clamps += int(stepped or boxed)
        self.q = q
        return q

    def command(self, prev_target, target):
        return self._ik(target).copy()

    def hold(self, target):
        self.last_target = np.asarray(target, float).copy()  # a held target is not motion to replay
        return self.q.copy()

    def violations(self, q, previous_q=None):
        hw, out = self.hw, []
        if q.shape != (len(hw.joint_names),):
            return [f"{q.shape[0]} joint values for {len(hw.joint_names)} joints"]
        if not np.isfinite(q).all():
            return ["non-finite joint targets"]
        if ((q < hw.joint_low - 1e-9) | (q > hw.joint_high + 1e-9)).any():
            out.append(f"joint targets {q.tolist()} outside the joint limits")
        if previous_q is not None and previous_q.shape == q.shape \
                and (np.abs(q - previous_q) > self.max_joint_step + 1e-9).any():
            out.append(f"joint step {np.abs(q - previous_q).max():.4f} rad exceeds {self.max_joint_step:.4f}")
        return out


def make_adapter(hw: ArmHardware, control_hz: float) -> Adapter:
    if hw.interface == "cartesian_pose":
        return CartesianPoseAdapter(hw, control_hz)
    if hw.interface == "servo_twist":
        return ServoTwistAdapter(hw, control_hz)
    return JointAdapter(hw, control_hz)
