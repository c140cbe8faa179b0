"""Race tracks for the car: procedural closed tracks, checkpoints from a recorded lap, lap timing.

Pure numpy, no MuJoCo: the simulator (`robot_rl.robots.car.sim`) builds walls or cones from a
`Track`; the checkpoint extraction and the lap timer serve the sim and the real car alike (on a
real track the checkpoints come from one recorded slow lap, as in FastRLAP's goal graph).

A track is a smooth closed centreline r(theta) = R * (1 + sum_k a_k cos(k theta + phi_k)) with a
width that varies along it, so prior-data tracks and the held-out target track differ in length,
curvature and width.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["LapTimer", "Track", "TrackConfig", "extract_checkpoints", "generate_track"]


@dataclass(frozen=True)
class TrackConfig:
    """Distribution of procedural tracks (lengths in metres, for a 1/10-scale car)."""

    radius: tuple[float, float] = (5.0, 7.0)
    """Mean radius of the loop, drawn uniformly."""
    harmonics: int = 4
    """Highest harmonic k of the radius perturbation (2..harmonics: corners and chicanes)."""
    harmonic_amplitude: float = 0.3
    """Largest amplitude a_k (relative to the radius), drawn per harmonic, divided by sqrt(k)."""
    width: tuple[float, float] = (1.6, 2.4)
    """Track width range; the width varies smoothly along the track within it."""
    min_inner_radius: float = 1.0
    """Tracks whose inner edge turns tighter than this anywhere are redrawn (the car must fit the
    corner, and the walls must not cross themselves)."""
    points: int = 240
    """Centreline samples (the walls are built from segments between them)."""

    def __post_init__(self) -> None:
        if not 0 < self.radius[0] <= self.radius[1] or not 0 < self.width[0] <= self.width[1]:
            raise ValueError(f"radius and width ranges must be positive and ordered: {self.radius}, {self.width}")
        if self.harmonics < 2 or self.points < 32 or not 0 <= self.harmonic_amplitude < 0.5:
            raise ValueError("harmonics >= 2, points >= 32 and harmonic_amplitude in [0, 0.5) required")


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False  # cached and shared: a caller must not change the track
    return array


@dataclass(frozen=True)
class Track:
    """A closed track: centreline samples in order (counter-clockwise) and the width at each.

    The derived geometry is computed once per track (drivers query it every control step)."""

    centre: np.ndarray
    """(N, 2) centreline points; the segment from the last back to the first closes the loop."""
    width: np.ndarray
    """(N,) track width at each point."""

    def __post_init__(self) -> None:
        c, w = np.asarray(self.centre, float), np.asarray(self.width, float)
        if c.ndim != 2 or c.shape[1] != 2 or c.shape[0] < 8 or w.shape != (c.shape[0],):
            raise ValueError(f"a track needs (N, 2) centre points and (N,) widths, got {c.shape}, {w.shape}")
        if not (np.isfinite(c).all() and np.isfinite(w).all() and (w > 0).all()):
            raise ValueError("track points and widths must be finite, widths positive")

    @cached_property
    def tangent(self) -> np.ndarray:
        """(N, 2) unit direction of travel at each point (central differences)."""
        d = np.roll(self.centre, -1, axis=0) - np.roll(self.centre, 1, axis=0)
        return _read_only(d / np.linalg.norm(d, axis=1, keepdims=True))

    @cached_property
    def normal(self) -> np.ndarray:
        """(N, 2) unit normal pointing left of the direction of travel."""
        t = self.tangent
        return _read_only(np.stack([-t[:, 1], t[:, 0]], axis=1))

    @cached_property
    def left(self) -> np.ndarray:
        return _read_only(self.centre + self.normal * (self.width / 2)[:, None])

    @cached_property
    def right(self) -> np.ndarray:
        return _read_only(self.centre - self.normal * (self.width / 2)[:, None])

    @cached_property
    def arc_length(self) -> np.ndarray:
        """(N,) distance along the centreline from point 0."""
        seg = np.linalg.norm(np.diff(self.centre, axis=0), axis=1)
        return _read_only(np.concatenate([[0.0], np.cumsum(seg)]))

    @cached_property
    def length(self) -> float:
        return float(self.arc_length[-1] + np.linalg.norm(self.centre[0] - self.centre[-1]))

    @cached_property
    def curvature(self) -> np.ndarray:
        """(N,) signed curvature of the centreline (1/m; positive turning left)."""
        prev, nxt = np.roll(self.centre, 1, axis=0), np.roll(self.centre, -1, axis=0)
        a, b = self.centre - prev, nxt - self.centre
        cross = a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]
        denom = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) * np.linalg.norm(nxt - prev, axis=1)
        return _read_only(2.0 * cross / denom)

    def start_pose(self, offset: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """Position and heading of the start line (point 0, facing along the track), moved by an
        `offset` (lateral m, along m, yaw rad) if given (the randomized start)."""
        t = self.tangent[0]
        position, yaw = self.centre[0].copy(), float(np.arctan2(t[1], t[0]))
        if offset is None:
            return position, yaw
        lateral, along, turn = np.asarray(offset, float)
        return position + self.normal[0] * lateral + t * along, yaw + turn

    def nearest(self, position: np.ndarray) -> int:
        """Index of the centreline point closest to `position` (x, y)."""
        return int(np.argmin(np.sum((self.centre - np.asarray(position, float)[:2]) ** 2, axis=1)))


def generate_track(rng: np.random.Generator, config: TrackConfig = TrackConfig(), max_tries: int = 200) -> Track:
    """A random closed track from `config`'s distribution (redrawn until corners are drivable)."""
    theta = np.linspace(0.0, 2 * np.pi, config.points, endpoint=False)
    for _ in range(max_tries):
        radius = rng.uniform(*config.radius)
        r = np.ones_like(theta)
        for k in range(2, config.harmonics + 1):
            r += rng.uniform(0, config.harmonic_amplitude) / np.sqrt(k) * np.cos(k * theta + rng.uniform(0, 2 * np.pi))
        centre = radius * np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1)
        # Resample to equal spacing, so a wall segment is as long on a straight as in a corner.
        seg = np.linalg.norm(np.diff(np.vstack([centre, centre[:1]]), axis=0), axis=1)
        s = np.concatenate([[0.0], np.cumsum(seg)])
        even = np.linspace(0.0, s[-1], config.points, endpoint=False)
        closed = np.vstack([centre, centre[:1]])
        centre = np.stack([np.interp(even, s, closed[:, 0]), np.interp(even, s, closed[:, 1])], axis=1)
        phase = rng.uniform(0, 2 * np.pi)
        lo, hi = config.width
        width = lo + (hi - lo) * 0.5 * (1 + np.sin(2 * theta + phase) * rng.uniform(0.3, 1.0))
        track = Track(centre, width)
        inner_radius = 1.0 / np.maximum(np.abs(track.curvature), 1e-9) - width / 2
        if inner_radius.min() >= config.min_inner_radius:
            return track
    raise RuntimeError(f"no drivable track in {max_tries} draws of {config}")


def extract_checkpoints(positions: np.ndarray, spacing: float, min_points: int = 4) -> np.ndarray:
    """Checkpoints every `spacing` metres along a recorded lap (FastRLAP's goal graph).

    `positions` (T, 2 or 3) are the car's positions over one lap, in order, starting on the
    start line; the path is resampled by arc length, so a car that stopped or crept along a
    stretch gives the same checkpoints as one that drove it evenly. A final checkpoint closer
    than half a spacing to the first is dropped (the lap closes on checkpoint 0).
    """
    p = np.asarray(positions, float)
    if p.ndim != 2 or p.shape[1] < 2 or not np.isfinite(p).all():
        raise ValueError(f"positions must be a finite (T, 2) or (T, 3) array, got shape {p.shape}")
    if not spacing > 0:
        raise ValueError(f"spacing must be > 0, got {spacing}")
    p = p[:, :2]
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(p, axis=0), axis=1))])
    count = int(s[-1] // spacing) + 1
    if count < min_points:
        raise ValueError(f"the recorded path is {s[-1]:.1f} m long: fewer than {min_points} checkpoints "
                         f"{spacing} m apart (record a whole lap, or lower the spacing)")
    marks = np.arange(count) * spacing
    points = np.stack([np.interp(marks, s, p[:, 0]), np.interp(marks, s, p[:, 1])], axis=1)
    if np.linalg.norm(points[-1] - points[0]) < spacing / 2:
        points = points[:-1]
    return points


class LapTimer:
    """Follows the car through the checkpoints in order; times clean laps.

    A lap is complete when the car, having reached every checkpoint in order, reaches checkpoint
    0 again; its time is measured from the previous time checkpoint 0 was reached. `interrupt()`
    (a crash, or a recovery manoeuvre) invalidates the lap in progress, so only clean laps are
    timed; the car keeps going for the next checkpoint.
    """

    def __init__(self, checkpoints: np.ndarray, reach_radius: float):
        self.checkpoints = np.asarray(checkpoints, float)
        if self.checkpoints.ndim != 2 or self.checkpoints.shape[0] < 2 or self.checkpoints.shape[1] != 2:
            raise ValueError(f"checkpoints must be (K >= 2, 2), got {self.checkpoints.shape}")
        if not reach_radius > 0:
            raise ValueError(f"reach_radius must be > 0, got {reach_radius}")
        self.reach_radius = reach_radius
        self.next_index = 0
        self.lap_start: float | None = None
        self.clean = False
        self.laps: list[float] = []
        """Times of the clean laps so far."""
        self.reached = 0
        """Checkpoints reached so far (all laps)."""

    @property
    def next_checkpoint(self) -> np.ndarray:
        return self.checkpoints[self.next_index]

    def update(self, position: np.ndarray, time: float) -> float | None:
        """Advances on reaching the next checkpoint; returns a lap time when a clean lap ends."""
        if np.linalg.norm(np.asarray(position, float)[:2] - self.next_checkpoint) > self.reach_radius:
            return None
        self.reached += 1
        lap_time = None
        if self.next_index == 0:
            if self.clean and self.lap_start is not None:
                lap_time = time - self.lap_start
                self.laps.append(lap_time)
            self.lap_start, self.clean = time, True
        self.next_index = (self.next_index + 1) % len(self.checkpoints)
        return lap_time

    def interrupt(self) -> None:
        self.clean = False
