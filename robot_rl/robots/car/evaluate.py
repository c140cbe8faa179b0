"""The car judged as FastRLAP judges it: one timed lap per randomization draw, for a shipped frame-stack policy
(`card.json` task car_race) and for a graph run's policy over the encoder features car_actor streams."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from robot_rl.training.evaluate import node_params

DEFAULT_MAX_S = 90.0
"""Simulated seconds a lap may take before it counts as failed."""


def shipped_laps(directory: Path, laps: int, seed: int, split: str | None, max_s: float | None) -> dict[str, Any]:
    from robot_rl.agents.frame_stack_policy import load_frame_stack_policy
    from robot_rl.robots.car.train import CarTrainConfig

    policy = load_frame_stack_policy(directory)
    config = CarTrainConfig()
    return {"policy": str(directory), "kind": "car",
            **car_laps(policy, lambda observation: policy.act(observation, deterministic=True), laps, seed,
                       split or "eval", max_s or DEFAULT_MAX_S, track_seed=config.track_seed,
                       boundary=config.boundary, action_rate_limit=config.sac.action_rate_limit)}


def graph_laps(run: Path, policy, task, laps: int, seed: int, split: str, max_s: float | None,
               max_failures: int | None) -> dict[str, Any]:
    """A graph run's car policy timed on the track and with the encoder its car_sim and car_actor ran
    (params.yaml); every lap is timed (`max_failures` does not stop a median of lap times)."""
    from robot_rl.agents.frame_stack_policy import load_frame_stack_policy

    sim, actor = node_params(run, "car_sim"), node_params(run, "car_actor")
    if "policy_dir" not in actor or "track_seed" not in sim:
        raise ValueError(f"{run / 'params.yaml'} names no car_actor.policy_dir or car_sim.track_seed")
    frames = load_frame_stack_policy(actor["policy_dir"])
    return car_laps(frames, lambda observation: policy.act(observation, True), laps, seed, split,
                    max_s or DEFAULT_MAX_S, track_seed=int(sim["track_seed"]), boundary=sim.get("boundary", "walls"),
                    action_rate_limit=task.action_rate_limit)


def car_laps(frames, act: Callable[[np.ndarray], np.ndarray], laps: int, seed: int, split: str, max_s: float, *,
             track_seed: int, boundary: str, action_rate_limit: float) -> dict[str, Any]:
    """One timed lap per randomization draw (reset seeds `seed`, `seed + 1`, ...) of `act` on the car_race
    task's observation: the newest camera frame through the frozen encoder of frame-stack policy `frames`,
    stacked, with the proprioception, as car_actor builds it."""
    from robot_rl.agents.frame_stack_policy import FeatureStack
    from robot_rl.robots.car.sim import CarRaceEnv
    from robot_rl.robots.car.train import lap_time_median, timed_laps

    env = CarRaceEnv(track_seed=track_seed, boundary=boundary, image_size=frames.image_size,
                     frame_stack=frames.frame_stack, randomization_split=split, action_rate_limit=action_rate_limit)
    stack = FeatureStack(frames.frame_stack)

    def drive(obs: dict, first: bool) -> np.ndarray:
        if first:
            stack.reset()
        stack.push(frames.encode(obs["frames"][-1]))
        return act(frames.observation(stack.flat(), obs["state"]))

    try:
        times = timed_laps(env, drive, [seed + i for i in range(laps)], max_s)
    finally:
        env.close()
    median = lap_time_median(times)
    return {"split": split, "track_seed": track_seed, "laps": laps, "clean_laps": sum(t is not None for t in times),
            "lap_times_s": [None if t is None else round(t, 3) for t in times],
            "median_lap_s": round(median, 3) if np.isfinite(median) else None,
            "rule": "one timed lap per randomization draw from the start line; a crash, a stuck car or "
            f"{max_s:g} s without a lap is a failed lap (infinitely slow in the median)"}
