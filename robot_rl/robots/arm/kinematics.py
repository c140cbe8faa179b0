"""Serial-arm kinematics from DH parameters (no URDF needed): forward kinematics, the geometric
Jacobian and a damped-least-squares IK step."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Kinematics:
    """A chain's DH rows and the IK step's settings (the `kinematics:` section of an arm's hardware YAML)."""

    convention: str
    dh: np.ndarray  # (n, 4): a, d, alpha, theta_offset per joint
    tool_dh: np.ndarray  # (m, 4): fixed rows after the last joint (flange, tool centre point)
    damping: float
    orientation_weight: float


def _dh_transform(a: float, d: float, alpha: float, theta: float, modified: bool) -> np.ndarray:
    ca, sa, ct, st = math.cos(alpha), math.sin(alpha), math.cos(theta), math.sin(theta)
    if modified:  # Craig: RotX(alpha_{i-1}) TransX(a_{i-1}) RotZ(theta_i) TransZ(d_i)
        return np.array([[ct, -st, 0.0, a],
                         [st * ca, ct * ca, -sa, -d * sa],
                         [st * sa, ct * sa, ca, d * ca],
                         [0.0, 0.0, 0.0, 1.0]])
    # standard: RotZ(theta_i) TransZ(d_i) TransX(a_i) RotX(alpha_i)
    return np.array([[ct, -st * ca, st * sa, a * ct],
                     [st, ct * ca, -ct * sa, a * st],
                     [0.0, sa, ca, d],
                     [0.0, 0.0, 0.0, 1.0]])


class DHChain:
    """Serial chain of revolute joints from DH parameters (no URDF needed)."""

    def __init__(self, kinematics: Kinematics):
        self.k = kinematics
        self.modified = kinematics.convention == "modified"
        self.n = len(kinematics.dh)

    def _frames(self, q: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
        """Joint axes and origins (world) and the tool transform."""
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (self.n,) or not np.isfinite(q).all():
            raise ValueError(f"joint vector must be {self.n} finite numbers")
        t = np.eye(4)
        axes, origins = [], []
        for (a, d, alpha, offset), qi in zip(self.k.dh, q):
            if self.modified:
                t = t @ _dh_transform(a, d, alpha, qi + offset, True)
                axes.append(t[:3, 2].copy())  # joint i turns about z_i of its own frame
                origins.append(t[:3, 3].copy())
            else:
                axes.append(t[:3, 2].copy())  # joint i turns about z_{i-1}
                origins.append(t[:3, 3].copy())
                t = t @ _dh_transform(a, d, alpha, qi + offset, False)
        for a, d, alpha, theta in self.k.tool_dh:
            t = t @ _dh_transform(a, d, alpha, theta, self.modified)
        return axes, origins, t

    def fk(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tool position (3,) and rotation matrix (3, 3) in the base frame."""
        _, _, t = self._frames(q)
        return t[:3, 3].copy(), t[:3, :3].copy()

    def jacobian(self, q: np.ndarray) -> np.ndarray:
        """Geometric Jacobian (6, n): rows 0-2 linear, 3-5 angular velocity of the tool."""
        axes, origins, t = self._frames(q)
        p = t[:3, 3]
        j = np.zeros((6, self.n))
        for i, (z, o) in enumerate(zip(axes, origins)):
            j[:3, i] = np.cross(z, p - o)
            j[3:, i] = z
        return j


def dls_step(jacobian: np.ndarray, error: np.ndarray, damping: float,
             weights: np.ndarray | None = None) -> np.ndarray:
    """Damped least squares: dq = J^T (J J^T + damping^2 I)^-1 e, rows weighted by `weights`.
    Well defined at singularities (the damping bounds |dq| by |e| / (2 damping))."""
    j = np.asarray(jacobian, float)
    e = np.asarray(error, float)
    if weights is not None:
        w = np.asarray(weights, float)
        j, e = j * w[:, None], e * w
    if not (np.isfinite(j).all() and np.isfinite(e).all()) or damping <= 0:
        raise ValueError("dls_step needs a finite Jacobian and error and a positive damping")
    jjt = j @ j.T + (damping ** 2) * np.eye(j.shape[0])
    return j.T @ np.linalg.solve(jjt, e)
