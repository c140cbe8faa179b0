"""Operational-space control (OSC) for a torque-driven MuJoCo arm.

The controller drives a site (the end effector) toward a target pose with a task-space
spring-damper shaped by the operational-space inertia, adds a dynamically consistent
nullspace posture term toward a home configuration and compensates gravity/Coriolis with
``qfrc_bias``::

    A      = J M^-1 J^T                                  (6x6, full-model inverse inertia)
    F      = A^-1 (Kp e - Kd v)                          (= Lambda (Kp e - Kd v))
    tau_0  = M (kp_null (q_home - q) - kd_null qdot)     (posture, acceleration gains)
    tau    = J^T F + (tau_0 - J^T Lambda J M^-1 tau_0) + qfrc_bias

``e`` stacks the position error (metres, world frame) and the orientation error (axis-angle,
world frame) and ``v = J qdot``.  Torques are clamped to the actuators' ranges.

The data passed to :meth:`OperationalSpaceController.compute` must have current
position-dependent quantities (``site_xpos``, ``qM``/``qLD``, ``qfrc_bias``), i.e. be called
after ``mj_step1`` or ``mj_forward``.  Pure numpy + MuJoCo C calls; no Python loops over
elements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import mujoco
import numpy as np

#: Top-down gripper orientation (wxyz): site x = world x, site z = world -z.
TOP_DOWN_QUAT = np.array([0.0, 1.0, 0.0, 0.0])


@dataclass
class OSCGains:
    """Gains of the operational-space controller (acceleration units, shaped by Lambda)."""

    kp_pos: float = 400.0
    """Translational stiffness [1/s^2]; the closed-loop natural frequency is sqrt(kp_pos)."""
    kp_rot: float = 300.0
    """Rotational stiffness [1/s^2]."""
    damping_ratio: float = 1.0
    """Task-space damping ratio; Kd = 2 * damping_ratio * sqrt(Kp)."""
    kp_null: float = 20.0
    """Nullspace posture stiffness toward the home joint configuration [1/s^2]."""
    kd_null: float = 9.0
    """Nullspace joint-velocity damping [1/s]."""
    max_pos_error: float = 0.08
    """Position error is clipped to this norm [m] so far-away targets cannot command huge forces."""
    max_rot_error: float = 0.5
    """Orientation error is clipped to this angle [rad]."""
    regularization: float = 1e-6
    """Added to the diagonal of J M^-1 J^T before solving, for robustness near singularities."""


def quat_error(target_quat: np.ndarray, current_quat: np.ndarray) -> np.ndarray:
    """World-frame axis-angle rotation (3,) taking ``current_quat`` to ``target_quat`` (wxyz)."""
    inv = np.empty(4)
    err_q = np.empty(4)
    out = np.empty(3)
    mujoco.mju_negQuat(inv, np.asarray(current_quat, dtype=np.float64))
    mujoco.mju_mulQuat(err_q, np.asarray(target_quat, dtype=np.float64), inv)
    mujoco.mju_quat2Vel(out, err_q, 1.0)
    return out


class OperationalSpaceController:
    """Operational-space controller for one site of a torque-controlled arm.

    Args:
        model: the MuJoCo model.
        site: name or id of the controlled site (the end effector).
        joint_ids: ids of the arm's 1-dof joints (hinge/slide), in actuator order.
        actuator_ids: ids of the torque actuators driving those joints (same order); their
            ``ctrlrange * gear`` defines the torque limits.  If omitted, no clamping.
        home_qpos: posture target for the nullspace term (len(joint_ids),).
        gains: controller gains.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        site: str | int,
        joint_ids: Sequence[int],
        actuator_ids: Sequence[int] | None = None,
        home_qpos: np.ndarray | None = None,
        gains: OSCGains | None = None,
    ) -> None:
        self.model = model
        self.site_id = model.site(site).id if isinstance(site, str) else int(site)
        joint_ids = np.asarray(joint_ids, dtype=np.int64)
        types = model.jnt_type[joint_ids]
        if not np.all((types == mujoco.mjtJoint.mjJNT_HINGE) | (types == mujoco.mjtJoint.mjJNT_SLIDE)):
            raise ValueError("OSC joints must be 1-dof hinge or slide joints")
        self.n = len(joint_ids)
        dof = model.jnt_dofadr[joint_ids]
        qadr = model.jnt_qposadr[joint_ids]
        # Use cheap slices when the joints are contiguous (the usual case), else index arrays.
        self._dof = self._as_index(dof)
        self._qadr = self._as_index(qadr)
        self.gains = gains if gains is not None else OSCGains()
        self.home_qpos = (
            np.zeros(self.n) if home_qpos is None else np.asarray(home_qpos, np.float64).copy()
        )
        if self.home_qpos.shape != (self.n,):
            raise ValueError(f"home_qpos must have shape ({self.n},), got {self.home_qpos.shape}")
        if actuator_ids is not None:
            act = np.asarray(actuator_ids, dtype=np.int64)
            gear = model.actuator_gear[act, 0]
            rng = model.actuator_ctrlrange[act] * gear[:, None]
            self.torque_low = np.minimum(rng[:, 0], rng[:, 1])
            self.torque_high = np.maximum(rng[:, 0], rng[:, 1])
            self._act = self._as_index(act)
            self._gear = gear.copy()
        else:
            self.torque_low = np.full(self.n, -np.inf)
            self.torque_high = np.full(self.n, np.inf)
            self._act = None
            self._gear = np.ones(self.n)
        nv = model.nv
        self._jac = np.zeros((6, nv))
        self._minv_jt = np.zeros((6, nv))
        self._full = np.zeros(nv)
        self._mfull = np.zeros(nv)
        self._quat = np.empty(4)
        self._quat_inv = np.empty(4)
        self._quat_err = np.empty(4)
        self._rot_err = np.empty(3)
        self._err = np.empty(6)
        self._rhs = np.empty((6, 2))
        self._update_gain_vectors()

    @staticmethod
    def _as_index(idx: np.ndarray) -> slice | np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        if len(idx) > 0 and np.all(np.diff(idx) == 1):
            return slice(int(idx[0]), int(idx[-1]) + 1)
        return idx

    def _update_gain_vectors(self) -> None:
        g = self.gains
        self._kp = np.array([g.kp_pos] * 3 + [g.kp_rot] * 3)
        self._kd = 2.0 * g.damping_ratio * np.sqrt(self._kp)
        self._reg = g.regularization * np.eye(6)

    def set_gains(self, gains: OSCGains) -> None:
        """Replace the gains."""
        self.gains = gains
        self._update_gain_vectors()

    def compute(
        self,
        data: mujoco.MjData,
        target_pos: np.ndarray,
        target_quat: np.ndarray | None = None,
    ) -> np.ndarray:
        """Joint torques (n,) driving the site toward ``target_pos`` / ``target_quat`` (wxyz).

        ``target_quat`` defaults to :data:`TOP_DOWN_QUAT`.  ``data`` must hold current
        position-dependent quantities (call after ``mj_step1`` or ``mj_forward``).
        """
        m = self.model
        g = self.gains
        jac = self._jac
        dof = self._dof
        mujoco.mj_jacSite(m, data, jac[:3], jac[3:], self.site_id)
        mujoco.mj_solveM(m, data, self._minv_jt, jac)  # rows: M^-1 J^T (full model)
        J = jac[:, dof]
        X = self._minv_jt[:, dof]  # J M^-1 restricted to the arm columns

        # Task-space error: position (clipped) and orientation (axis-angle, clipped).
        err = self._err
        np.subtract(target_pos, data.site_xpos[self.site_id], out=err[:3])
        pn = np.sqrt(err[0] * err[0] + err[1] * err[1] + err[2] * err[2])
        if pn > g.max_pos_error:
            err[:3] *= g.max_pos_error / pn
        mujoco.mju_mat2Quat(self._quat, data.site_xmat[self.site_id])
        mujoco.mju_negQuat(self._quat_inv, self._quat)
        tq = TOP_DOWN_QUAT if target_quat is None else np.asarray(target_quat, dtype=np.float64)
        mujoco.mju_mulQuat(self._quat_err, tq, self._quat_inv)
        mujoco.mju_quat2Vel(self._rot_err, self._quat_err, 1.0)
        rn = np.sqrt(self._rot_err @ self._rot_err)
        if rn > g.max_rot_error:
            self._rot_err *= g.max_rot_error / rn
        err[3:] = self._rot_err

        qvel = data.qvel[dof]
        qpos = data.qpos[self._qadr]
        vel = J @ qvel

        # Nullspace posture torque, tau_0 = M (kp (q_home - q) - kd qdot).
        full = self._full
        full[dof] = g.kp_null * (self.home_qpos - qpos) - g.kd_null * qvel
        mujoco.mj_mulM(m, data, self._mfull, full)
        tau0 = self._mfull[dof]

        # One 6x6 solve for both the task force and the nullspace projection.
        A = J @ X.T + self._reg
        rhs = self._rhs
        rhs[:, 0] = self._kp * err - self._kd * vel
        rhs[:, 1] = X @ tau0
        sol = np.linalg.solve(A, rhs)
        tau = J.T @ (sol[:, 0] - sol[:, 1]) + tau0 + data.qfrc_bias[dof]
        np.clip(tau, self.torque_low, self.torque_high, out=tau)
        return tau

    def apply(
        self,
        data: mujoco.MjData,
        target_pos: np.ndarray,
        target_quat: np.ndarray | None = None,
    ) -> np.ndarray:
        """Compute torques and write them to ``data.ctrl`` (requires ``actuator_ids``)."""
        if self._act is None:
            raise RuntimeError("apply() needs actuator_ids; use compute() instead")
        tau = self.compute(data, target_pos, target_quat)
        data.ctrl[self._act] = tau / self._gear
        return tau
