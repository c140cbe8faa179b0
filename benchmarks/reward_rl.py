"""RL on arm pick-cube with only the learned progress reward, against the true sparse reward.

1. Scripted demonstrations of two tasks (pick-cube and push-cube, 20 each, 64x64 front + wrist
   cameras, train ranges) and 20 random-action episodes per task (the negatives SERL also records
   for its classifiers) train the local progress model (`robot_rl.rewards.progress`).
2. For each seed, two runs of the state-based pick-cube setup of `benchmarks/pick_cube.py --state`
   (SAC + RLPD, 20 scripted demonstrations, same step budget):
   * true: the env's sparse reward (1 on lifting the cube, which ends the episode);
   * learned: no environment reward and no environment termination; the reward and the episode end
     come from the progress model watching the cameras (`robot_rl.rewards.env_reward`: value change
     + a done reward when the model says done). The demonstrations are relabelled the same way.
   Both are evaluated on the env's true success over 50 episodes on the eval ranges.

    python benchmarks/reward_rl.py [--quick] [--seeds 0 1 2] [--steps 10000]

Target (issue 7): `success_ratio` = mean final success (learned) / mean final success (true) >= 0.8,
whole benchmark within 1 hour on the 2-core CPU machine. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pick_cube import ENV_ID, config_for  # noqa: E402

from robot_rl.data.scripted import random_actions, record_scripted_episodes  # noqa: E402
from robot_rl.rewards.env_reward import LearnedRewardConfig  # noqa: E402
from robot_rl.rewards.progress import ProgressModelConfig, progress_episodes, train_progress_model  # noqa: E402
from robot_rl.tasks import expert_for_env  # noqa: E402
from robot_rl.training.gym_loop import Trainer  # noqa: E402

GOAL = "pick up the cube"
REWARD_TASKS = ((ENV_ID, GOAL), ("robot_rl/ArmPushCube-v0", "push the cube to the left"))
TARGET = 0.8
ARM_ACTION_DIM = 4  # dx, dy, dz, gripper


def train_reward_model(directory: Path, demos: int, negatives: int, steps: int, seed: int) -> dict:
    episodes = []
    for k, (env_id, goal) in enumerate(REWARD_TASKS):
        env_kwargs = {"image_size": 64, "randomization_split": "train"}
        path = str(directory / f"demos_{k}.zarr")
        record_scripted_episodes(path, env_id, expert_for_env(env_id), demos, goal=goal, seed=seed + 1000 + k,
                                 env_kwargs=env_kwargs)
        episodes += progress_episodes(path)
        path = str(directory / f"random_{k}.zarr")
        record_scripted_episodes(path, env_id, random_actions(ARM_ACTION_DIM), negatives, goal=goal, seed=seed + 2000 + k,
                                 env_kwargs=env_kwargs, successful_only=False)
        episodes += progress_episodes(path)
    model, metrics = train_progress_model(episodes, ProgressModelConfig(steps=steps, seed=seed),
                                          "reward_rl benchmark: scripted pick and push demonstrations")
    model.save(directory / "progress_model")
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, 2k steps, 10 evaluation episodes")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=10_000, help="environment steps of each run")
    parser.add_argument("--reward-demos", type=int, default=20, help="demonstrations per task for the reward model")
    parser.add_argument("--reward-negatives", type=int, default=20,
                        help="random-action episodes per task for the reward model (its negatives)")
    args = parser.parse_args()
    seeds = args.seeds[:1] if args.quick else args.seeds
    steps, eval_episodes = (2_000, 10) if args.quick else (args.steps, 50)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    expert = expert_for_env(ENV_ID)
    start = time.perf_counter()
    finals: dict[str, list[float]] = {"true": [], "learned": []}
    with tempfile.TemporaryDirectory() as tmp:
        reward_metrics = train_reward_model(Path(tmp), 6 if args.quick else args.reward_demos,
                                            6 if args.quick else args.reward_negatives, 600 if args.quick else 3000, 0)
        reward_s = time.perf_counter() - start
        # Two done frames in a row: one lenient-threshold false positive must not end an episode.
        learned = LearnedRewardConfig(str(Path(tmp) / "progress_model"), GOAL, done_consecutive=2)
        for seed in seeds:
            for arm in ("true", "learned"):
                config = config_for(seed, steps, True, max(steps // 5, 500), eval_episodes)
                if arm == "learned":
                    config = replace(config, learned_reward=learned)
                rows = Trainer(config, expert=expert, log=lambda row, s=seed, a=arm: print(
                    json.dumps({"arm": a, "seed": s, **row}), flush=True)).run()
                finals[arm].append(rows[-1]["success_rate"])
    means = {arm: statistics.mean(values) for arm, values in finals.items()}
    ratio = means["learned"] / means["true"] if means["true"] > 0 else None
    print(json.dumps({"success_ratio": None if ratio is None else round(ratio, 3),
                      "success_true": finals["true"], "success_learned": finals["learned"],
                      "mean_true": means["true"], "mean_learned": means["learned"], "steps": steps, "seeds": seeds,
                      "reward_model_validation_done_f1": reward_metrics["validation_done"]["f1"],
                      "reward_model_s": round(reward_s, 1), "wall_s": round(time.perf_counter() - start, 1),
                      "meets_target": ratio is not None and ratio >= TARGET}))


if __name__ == "__main__":
    main()
