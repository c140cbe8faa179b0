"""Arm push-cube: push the cube to the left along the table (`robot_rl/ArmPushCube-v0`).

Same scene, randomization, cameras, observation modes and action space as pick-cube
(:class:`robot_rl.robots.arm.pick_cube.ArmPickCubeEnv`); only the goal differs: push the cube along
:data:`PUSH_DIRECTION` (world +y, the robot's left) by at least :data:`PUSH_DISTANCE` while it
stays on the table. The reward is 1 on success, which ends the episode, and 0 otherwise.

The cube's position after reset is part of the task: ``info["state"]["cube_start"]`` carries it
(and :meth:`ArmPushCubeEnv.snapshot` keeps it), so :func:`push_success`, :func:`push_progress`
and the stateless expert :func:`scripted_push_action` work from the state dict alone. The cube
starts within 5 cm of (0.5, 0) on a table reaching y = +-0.6 and an EE workspace reaching
y = +-0.22, so a push of 6 cm to the left always has room (the cube ends at y <= ~0.12).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_rl.control.rotations import quat_to_mat
from robot_rl.robots.arm.sim import cube_rest_z, cube_size
from robot_rl.robots.arm.pick_cube import ArmPickCubeEnv

__all__ = ["MAX_PUSH_HEIGHT", "PUSH_DIRECTION", "PUSH_DISTANCE", "ArmPushCubeEnv", "cube_displacement",
           "push_progress", "push_success", "scripted_push_action"]

PUSH_DIRECTION = np.array([0.0, 1.0, 0.0])
"""Direction to push the cube in (unit vector in the table plane, world frame): +y, to the left."""
PUSH_DISTANCE = 0.06
"""Displacement along PUSH_DIRECTION that counts as success [m]."""
MAX_PUSH_HEIGHT = 0.02
"""The cube counts as pushed only while its centre is less than this above its resting height [m]."""

_LATERAL = np.array([-PUSH_DIRECTION[1], PUSH_DIRECTION[0], 0.0])
_UP = np.array([0.0, 0.0, 1.0])
_PADDLE = 0.012
"""Half thickness of the closed fingers along the hand's closing axis (world y at the top-down
orientation), i.e. from the EE site to the face that pushes [m]."""
_FINGERTIP = 0.01
"""How far the fingertips reach below the EE site [m]."""
_STANDOFF = 0.03
"""Gap between the paddle and the cube's back face where the paddle comes down [m]."""
_CLEARANCE = 0.065
"""Height above the cube's centre at which the EE travels over the scene [m]."""


def cube_displacement(state: dict[str, np.ndarray]) -> float:
    """How far the cube has moved along PUSH_DIRECTION since the episode started [m]."""
    return float((np.asarray(state["cube_pos"]) - np.asarray(state["cube_start"])) @ PUSH_DIRECTION)


def push_success(state: dict[str, np.ndarray]) -> bool:
    """Cube pushed >= PUSH_DISTANCE along PUSH_DIRECTION from `cube_start` and still on the table."""
    lifted = float(np.asarray(state["cube_pos"])[2]) - cube_rest_z(state) >= MAX_PUSH_HEIGHT
    return bool(cube_displacement(state) >= PUSH_DISTANCE and not lifted)


def push_progress(state: dict[str, np.ndarray]) -> float:
    """Displacement along PUSH_DIRECTION / PUSH_DISTANCE, clipped to [0, 1]."""
    return float(np.clip(cube_displacement(state) / PUSH_DISTANCE, 0.0, 1.0))


def _cube_extent(state: dict[str, np.ndarray], axis: np.ndarray) -> float:
    """Half extent of the (possibly yawed or tilted) cube along a world axis."""
    return cube_size(state) / 2 * float(np.abs(quat_to_mat(state["cube_quat"]).T @ axis).sum())


def scripted_push_action(
    state: dict[str, np.ndarray],
    rng: np.random.Generator | None = None,
    noise: float = 0.0,
    action_scale: float = 0.03,
    gain: float = 1.0,
) -> np.ndarray:
    """Stateless scripted expert: closed fingers as a paddle, come down behind the cube, push.

    From the ``state`` dict alone: with the gripper closed, travel above the scene to a point
    ``_STANDOFF`` behind the cube's back face (as seen along PUSH_DIRECTION), come down to the
    cube's centre height, then move along PUSH_DIRECTION while steering the paddle back onto the
    line through the cube's centre. Low and neither behind the cube nor lined up with it, it
    rises first, so it never knocks the cube the wrong way. Arguments as in
    :func:`robot_rl.robots.arm.sim.scripted_lift_action`; returns float32 (4,) in [-1, 1].
    """
    ee = np.asarray(state["ee_pos"], dtype=np.float64)
    cube = np.asarray(state["cube_pos"], dtype=np.float64)
    rel = ee - cube
    along, side = float(rel @ PUSH_DIRECTION), float(rel @ _LATERAL)
    extent = _cube_extent(state, PUSH_DIRECTION)
    behind_along = -(extent + _PADDLE + _STANDOFF)
    behind = cube + behind_along * PUSH_DIRECTION
    behind[2] = cube[2]
    clear_of_back = along < -(extent + _PADDLE + 0.005)  # paddle face clear of the back face
    above = ee[2] - _FINGERTIP > cube[2] + _cube_extent(state, _UP) + 0.015  # fingertips over the top
    if ee[2] < cube[2] + 0.012 and along < 0.0 and abs(side) < 0.6 * extent:
        # Paddle low behind the cube and on it: push, steering back onto the centre line.
        goal = cube + (along + action_scale) * PUSH_DIRECTION
    elif clear_of_back:
        goal = behind  # come down (or slide across) behind the cube
    elif above:
        xy_err = float(np.linalg.norm((behind - ee)[:2]))
        goal = behind + min(max(6.0 * (xy_err - 0.005), 0.0), _CLEARANCE) * _UP
    else:
        goal = np.array([ee[0], ee[1], cube[2] + _CLEARANCE])  # low beside or before the cube: rise
    a = np.empty(4)
    a[:3] = np.clip(gain * (goal - ee) / action_scale, -1.0, 1.0)
    a[3] = 1.0
    if noise > 0.0:
        if rng is None:
            rng = np.random.default_rng()
        a[:3] += rng.normal(0.0, noise, size=3)
    return np.clip(a, -1.0, 1.0).astype(np.float32)


class ArmPushCubeEnv(ArmPickCubeEnv):
    """Push the cube seen through the cameras PUSH_DISTANCE along PUSH_DIRECTION; sparse reward.

    Everything but the goal is pick-cube's (constructor arguments included). ``info["state"]``
    adds ``cube_start`` (float (3,), the cube's position at reset), which snapshots keep.
    """

    _cube_start: np.ndarray | None = None

    def _read_state(self) -> dict[str, np.ndarray]:
        state = super()._read_state()
        if self._cube_start is None:  # first read after a fresh reset
            self._cube_start = state["cube_pos"].copy()
        state["cube_start"] = self._cube_start.copy()
        return state

    def _success(self, state: dict[str, np.ndarray]) -> bool:
        return push_success(state)

    def snapshot(self) -> dict[str, Any]:
        return {**super().snapshot(), "cube_start": self._cube_start.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """As pick-cube's; a snapshot's ``cube_start`` stays the episode's start (a snapshot
        without one, e.g. from pick-cube, starts counting from the cube's position in it)."""
        snapshot = (options or {}).get("snapshot")
        start = None if snapshot is None else snapshot.get("cube_start")
        self._cube_start = None if start is None else np.array(start, dtype=np.float64).reshape(3)
        return super().reset(seed=seed, options=options)
