"""FastRLAP's prior data: slow, imperfect driving on many other tracks, for offline pretraining.

FastRLAP pretrains its encoder with IQL on data from other robots driving slowly elsewhere. Ours
comes from the simulated car on procedural tracks whose seeds never include the target track's,
with walls and cones, the `pretrain` randomization ranges (more visual variety than online RL
sees) and a driver that is slow, wanders across the track and sometimes crashes: the autonomous
recovery is in the data too, as it would be on a real robot.

Stored as an episode dataset (`robot_rl.data.episodes`, the teleop recording format) with one
camera, "front": each observation keeps its newest frame only, and `frame_stack_indices` rebuilds
the stacks (a frame is stored once, and a frozen encoder's features are computed once per frame).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_rl.data.episodes import EpisodeSchema, EpisodeWriter
from robot_rl.robots.car.sim import STATE_DIM, CarRaceEnv, DriverConfig

__all__ = ["frame_stack_indices", "record_prior_driving"]


def frame_stack_indices(episode_ends: np.ndarray, frame_stack: int) -> np.ndarray:
    """(N + E, frame_stack) indices into a dataset's observations: each row the observation's own
    frame last and the frames before it in its episode, the episode's first frame repeated at the
    start (as the env fills its stack at a reset). `episode_ends` are cumulative step counts."""
    ends = np.asarray(episode_ends, np.int64)
    if frame_stack < 1 or ends.ndim != 1 or (np.diff(ends) <= 0).any() or (ends.size and ends[0] <= 0):
        raise ValueError(f"need frame_stack >= 1 and increasing positive episode_ends, got {frame_stack}, {ends}")
    obs_counts = np.diff(np.concatenate([[0], ends])) + 1  # T + 1 observations per episode
    starts = np.concatenate([[0], np.cumsum(obs_counts)[:-1]])
    first = np.repeat(starts, obs_counts)
    own = np.arange(int(obs_counts.sum()))
    offsets = np.arange(frame_stack - 1, -1, -1)
    return np.maximum(own[:, None] - offsets[None, :], first[:, None])


def record_prior_driving(path: str, tracks: int, steps_per_track: int, *, seed: int = 0, first_track_seed: int = 1000,
                         image_size: int = 64, episode_steps: int = 400) -> dict[str, Any]:
    """Drives `steps_per_track` control steps on each of `tracks` procedural tracks (seeds from
    `first_track_seed`; keep the target track's seed out of that range) and writes the episodes.

    Returns counts: episodes, steps, crashes, stuck, laps.
    """
    if tracks < 1 or steps_per_track < 1:
        raise ValueError(f"tracks and steps_per_track must be >= 1, got {tracks}, {steps_per_track}")
    rng = np.random.default_rng(seed)
    writer = EpisodeWriter(path, EpisodeSchema({"front": (image_size, image_size, 3)}, STATE_DIM, 2), {
        "task": "car_race", "source": "prior_driving", "tracks": list(range(first_track_seed, first_track_seed + tracks)),
        "randomization_split": "pretrain", "image_size": image_size})
    counts = {"episodes": 0, "steps": 0, "crash": 0, "stuck": 0, "laps": 0}
    for k in range(tracks):
        env = CarRaceEnv(track_seed=first_track_seed + k, boundary=("walls", "cones")[k % 2], image_size=image_size,
                         randomization_split="pretrain", max_episode_steps=episode_steps)
        try:
            obs, _ = env.reset(seed=int(rng.integers(2**31)))
            driver = DriverConfig(max_speed=float(rng.uniform(1.0, 2.2)), lateral_accel=3.0)
            disturbance, lateral, taken = 0.0, 0.0, 0
            while taken < steps_per_track:
                # A wandering line and an unsteady hand: Ornstein-Uhlenbeck steering disturbance.
                disturbance += -0.15 * disturbance + rng.normal(0.0, 0.12)
                lateral = float(np.clip(lateral + rng.normal(0.0, 0.05), -0.6, 0.6))
                action = env.expert_action(driver, lateral=lateral, steer_disturbance=disturbance)
                next_obs, reward, terminated, truncated, info = env.step(action)
                truncated = truncated or (taken + 1 == steps_per_track and not terminated)  # this track's data ends
                writer.add_step({"front": obs["frames"][-1], "state": obs["state"]}, info["executed_action"], reward,
                                terminated=terminated, truncated=truncated, intervention=False,
                                success_label=None, stamp=env.sim.time)
                taken += 1
                counts["laps"] += int(info["lap_time"] is not None)
                obs = next_obs
                if terminated or truncated:
                    writer.end_episode({"front": obs["frames"][-1], "state": obs["state"]})
                    counts["episodes"] += 1
                    if info["event"] in ("crash", "stuck"):
                        counts[info["event"]] += 1
                    obs, _ = env.reset()
        finally:
            env.close()
        counts["steps"] += taken
    return counts
