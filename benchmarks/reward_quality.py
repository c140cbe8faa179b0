"""Quality and latency of the local progress reward model on held-out demonstrations of two sim tasks.

Tasks: arm pick-cube ("pick up the cube") and arm push-cube ("push the cube to the left"), same
scene, front + wrist cameras at 128x128. Training data: scripted demonstrations on the train
randomization ranges (5 frames kept past the first success) and random-action episodes (negatives). Held out: new demonstrations on the
*eval* ranges, plus failing trajectories (the expert gives up part-way and retreats, gripper open).
The model (`robot_rl.rewards.progress`, frozen shipped encoder + hashed goal text + small head) is
trained here from scratch on both tasks.

    python benchmarks/reward_quality.py [--quick] [--train-demos 20] [--test-demos 10]

Targets (issue 7): voc_median >= 0.9, negative_share >= 0.7, |wrong_goal_mean| <= 0.05,
done_f1 >= 0.9, latency_ms <= 15 (one `score` call on 128x128 frames, CPU). Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import robot_rl.envs  # noqa: F401 - registers the environments
from robot_rl.data.scripted import random_actions, record_scripted_episodes, rollout
from robot_rl.rewards.progress import ProgressEpisode, ProgressModelConfig, progress_episodes, train_progress_model
from robot_rl.rewards.quality import evaluate_progress
from robot_rl.tasks import expert_for_env

TASKS = {env_id: (goal, expert_for_env(env_id)) for env_id, goal in (
    ("robot_rl/ArmPickCube-v0", "pick up the cube"), ("robot_rl/ArmPushCube-v0", "push the cube to the left"))}
IMAGE_SIZE = 128
ARM_ACTION_DIM = 4  # dx, dy, dz, gripper
TARGETS = {"voc_median": 0.9, "negative_share": 0.7, "wrong_goal_mean": 0.05, "done_f1": 0.9, "latency_ms": 15.0}


class Retreat:
    """The expert until step `onset`, then opening the gripper and returning above the start pose;
    `arrived(state)` tells when it got there (the failing trajectory ends: what follows is standing
    still, which neither gains nor loses progress)."""

    def __init__(self, expert, onset: int, noise: float):
        self.expert, self.onset, self.noise, self.steps, self.goal = expert, onset, noise, 0, None

    def __call__(self, state, rng):
        if self.goal is None:
            self.goal = np.asarray(state["ee_pos"], float) + np.array([0.0, 0.0, 0.05])
        self.steps += 1
        if self.steps <= self.onset:
            return self.expert(state, rng, self.noise)
        motion = np.clip((self.goal - np.asarray(state["ee_pos"])) / 0.03, -1.0, 1.0)
        return np.append(motion + rng.normal(0.0, self.noise, 3), -1.0).clip(-1.0, 1.0).astype(np.float32)

    def arrived(self, state) -> bool:
        return self.steps > self.onset and float(np.linalg.norm(self.goal - np.asarray(state["ee_pos"]))) < 0.01


def failing_trajectories(env_id: str, goal: str, expert, count: int, seed: int) -> list[tuple[ProgressEpisode, int]]:
    env = gym.make(env_id, image_size=IMAGE_SIZE, randomization_split="eval").unwrapped
    rng = np.random.default_rng(seed)
    out = []
    try:
        while len(out) < count:
            episode_seed = int(rng.integers(2**31))
            reference = rollout(env, lambda s, r: expert(s, r, 0.1), np.random.default_rng(episode_seed), episode_seed)
            if not reference.succeeded:
                continue
            onset = int(rng.uniform(0.4, 0.8) * len(reference.actions))
            retreat = Retreat(expert, onset, 0.1)
            episode = rollout(env, retreat, np.random.default_rng(episode_seed), episode_seed, max_steps=onset + 30,
                              stop=retreat.arrived)
            if episode.succeeded:  # it got there before giving up: not a failure
                continue
            frames = {c: np.stack([o[c] for o in episode.observations]) for c in ("front", "wrist")}
            out.append((ProgressEpisode(frames, goal, False, np.zeros(len(episode.observations), np.int8)), onset))
    finally:
        env.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer demonstrations and training steps")
    parser.add_argument("--train-demos", type=int, default=20, help="training demonstrations per task")
    parser.add_argument("--test-demos", type=int, default=10, help="held-out demonstrations per task")
    parser.add_argument("--failures", type=int, default=5, help="held-out failing trajectories per task")
    parser.add_argument("--negatives", type=int, default=10, help="random-action training episodes per task")
    parser.add_argument("--steps", type=int, default=3000, help="gradient steps of the progress model")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.train_demos, args.test_demos, args.failures, args.steps, args.negatives = 6, 3, 2, 600, 3
    start = time.perf_counter()
    train, test, failures = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (env_id, (goal, expert)) in enumerate(TASKS.items()):
            for split, count, store, offset in (("train", args.train_demos, train, 0), ("eval", args.test_demos, test, 1)):
                path = str(Path(tmp) / f"{k}_{split}.zarr")
                record_scripted_episodes(path, env_id, expert, count, goal=goal, seed=args.seed + 100 * k + 10 * offset,
                                         env_kwargs={"image_size": IMAGE_SIZE, "randomization_split": split})
                store += progress_episodes(path)
            path = str(Path(tmp) / f"{k}_random.zarr")
            record_scripted_episodes(path, env_id, random_actions(ARM_ACTION_DIM), args.negatives, goal=goal,
                                     seed=args.seed + 100 * k + 70, successful_only=False,
                                     env_kwargs={"image_size": IMAGE_SIZE, "randomization_split": "train"})
            train += progress_episodes(path)
            failures += failing_trajectories(env_id, goal, expert, args.failures, args.seed + 100 * k + 50)
    data_s = time.perf_counter() - start
    model, train_metrics = train_progress_model(train, ProgressModelConfig(steps=args.steps, seed=args.seed),
                                                "reward_quality benchmark: scripted pick and push demonstrations")
    goals = [goal for goal, _ in TASKS.values()]
    wrong = {goals[0]: goals[1], goals[1]: goals[0]}
    metrics = evaluate_progress(model, test, model.done_threshold, wrong, failures)

    # Latency: one score call (first, previous, current) on 128x128 frames, as the reward node makes it.
    torch.set_num_threads(1)
    frames = {c: test[0].frames[c][:1] for c in model.cameras}
    for _ in range(10):
        model.score(frames, frames, frames, goals[0])
    times = []
    for t in range(1, 101):
        current = {c: test[0].frames[c][t % len(test[0].frames[c])][None] for c in model.cameras}
        begin = time.perf_counter()
        model.score(frames, frames, current, goals[0])
        times.append(1e3 * (time.perf_counter() - begin))
    metrics["latency_ms"] = float(np.percentile(times, 50))
    metrics["latency_p99_ms"] = float(np.percentile(times, 99))
    met = (metrics["voc_median"] >= TARGETS["voc_median"] and metrics["negative_share"] >= TARGETS["negative_share"]
           and abs(metrics["wrong_goal_mean"]) <= TARGETS["wrong_goal_mean"] and metrics["done_f1"] >= TARGETS["done_f1"]
           and metrics["latency_ms"] <= TARGETS["latency_ms"])
    print(json.dumps({**metrics, "train": {k: v for k, v in train_metrics.items() if k != "validation_done"},
                      "validation_done_f1": train_metrics["validation_done"]["f1"], "image_size": IMAGE_SIZE,
                      "train_demos_per_task": args.train_demos, "test_demos_per_task": args.test_demos,
                      "data_s": round(data_s, 1), "wall_s": round(time.perf_counter() - start, 1),
                      "meets_targets": bool(met)}))


if __name__ == "__main__":
    main()
