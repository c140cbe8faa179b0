"""Augmented feature views against clean features: pixel pick-cube, in-process, eval-split success.

The learner keeps a frozen encoder's features instead of frames, so DrQ's augmentation of the
frames at every update is out of reach; `feature_views` V stores the features of V views of each
observation (the clean one, then V - 1 randomly shifted and photometrically jittered ones) and
every sampled row draws one (`robot_rl/training/off_policy.py`). This runs `benchmarks/pick_cube.py`'s
recipe (SAC + RLPD, grasp critic, 20 scripted demonstrations, the shipped frozen encoder, training
on the `train` ranges) with V = 1 (the reference, run here beside it) and V = `--views`, evaluating
50 deterministic episodes on the `eval` ranges every 2k steps.

    python benchmarks/feature_views.py [--seeds 0 1 2] [--steps 10000] [--views 4] [--jitter 0.2] [--quick]

Prints one JSON line per evaluation, then the summary as the last line: per arm the median over
seeds of the final success, of the mean success over the evaluations from 4k steps on, and the
seeds' first evaluation at >= 90 % (a target counts at the first of two consecutive evaluations
at or above it, as in graph_realtime.py; null for a seed that never got there).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import torch
from graph_realtime import first_reached
from pick_cube import ENV_ID, config_for

from robot_rl.tasks import expert_for_env
from robot_rl.training.gym_loop import Trainer


def run(views: int, jitter: float, seed: int, steps: int, eval_every: int, eval_episodes: int) -> list[dict]:
    config = dataclasses.replace(config_for(seed, steps, False, eval_every, eval_episodes), feature_views=views,
                                 feature_jitter=jitter)
    start = time.perf_counter()
    rows = []

    def log(row: dict) -> None:
        rows.append({"views": views, "seed": seed, "steps": row["steps"], "success": row["success_rate"],
                     "wall_s": round(time.perf_counter() - start, 1)})
        print(json.dumps(rows[-1]), flush=True)

    Trainer(config, expert=expert_for_env(ENV_ID), log=log).run()
    return rows


def summarize(curves: dict[int, list[list[dict]]], late_from: int) -> dict:
    out = {}
    for views, runs in curves.items():
        late = [statistics.mean(r["success"] for r in rows if r["steps"] >= late_from) for rows in runs]
        out[f"views_{views}"] = {"final_success_median": statistics.median(rows[-1]["success"] for rows in runs),
                                 "late_mean_success_median": round(statistics.median(late), 3),
                                 "per_seed_final": [rows[-1]["success"] for rows in runs],
                                 "per_seed_steps_to_90": [first_reached(rows, 0.9, "steps") for rows in runs]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--views", type=int, default=4)
    parser.add_argument("--jitter", type=float, default=0.2)
    parser.add_argument("--quick", action="store_true", help="one seed, 2k steps, 10 evaluation episodes every 1k")
    args = parser.parse_args()
    seeds = args.seeds[:1] if args.quick else args.seeds
    steps, eval_every, episodes = (2_000, 1_000, 10) if args.quick else (args.steps, 2_000, 50)
    start = time.perf_counter()
    curves = {views: [run(views, jitter, seed, steps, eval_every, episodes) for seed in seeds]
              for views, jitter in ((1, 0.0), (args.views, args.jitter))}
    summary = summarize(curves, late_from=min(4_000, steps))
    reference, ours = summary["views_1"], summary[f"views_{args.views}"]
    summary["late_success_ratio"] = round(ours["late_mean_success_median"] /
                                          max(reference["late_mean_success_median"], 1e-9), 3)
    summary.update({"steps": steps, "seeds": seeds, "jitter": args.jitter, "torch_threads": torch.get_num_threads(),
                    "wall_s": round(time.perf_counter() - start, 1)})
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
