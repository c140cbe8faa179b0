"""A juggling policy judged through the deployment path: flown through the ROS 2 graph on the wall clock against
the same policy in one process, on the same plants (issue 41).

Through the graph: `robot-rl train --task quad_juggle --nodes quad_sim juggle_actor`, the simulated quadrotor
(`quad_sim`, realtime clock: a 50 Hz wall-clock timer steps the physics with the latest command, a command
older than 0.1 s is replaced by a level hover) and the actor (`juggle_actor`, which differences the ball's
pose into its velocity as it does on motion capture) as separate processes talking over DDS, with their
timing jitter. In one process: `robot_rl.robots.quad.train.evaluate_policy`, the benchmarks' evaluation loop.

The same plants: each trial's plant is one draw of `--split` (default eval) from `--seed`, passed to both
whole (restitution, masses, thrust, motors, start positions) through `quad_sim`'s `plant` parameter and the
evaluation's overrides, with action latency 0 in one process: through the graph the pipeline's own delay
replaces the simulated one (a command computed from the observation of one tick is applied at the next tick,
what latency 0 simulates). The simulated sensor noise is the one-process side's only (`quad_sim` publishes
the true state; the actor's differencing is the graph's own noise).

    python benchmarks/juggle_graph.py [--policy DIR] [--trials 5] [--max-s 120] [--quick]

`graph_hits_ratio`: hits through the graph over hits in one process, summed over the trials (target >= 0.9).
`--quick`: 1 trial of 10 s (a smoke run, not the figure). Last line: JSON; the full run also writes
benchmarks/results/juggle_graph.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from robot_rl.agents.ppo import DeployedPolicy
from robot_rl.envs.randomization import Randomization
from robot_rl.resources import package_path
from robot_rl.robots.quad.train import evaluate_policy, summarize

RESULTS = Path(__file__).resolve().parent / "results"
RANDOMIZATION = package_path("sim/quad/randomization.yaml")


def draw_plants(split: str, trials: int, seed: int) -> list[dict]:
    """`trials` whole plants of `split`, action latency 0 (see the module docstring)."""
    rng = np.random.default_rng(seed)
    randomization = Randomization.load(RANDOMIZATION)
    plants = []
    for _ in range(trials):
        plant = {name: (np.asarray(v).tolist() if np.ndim(v) else float(v))
                 for name, v in randomization.sample(split, rng).items()}
        plants.append({**plant, "action_latency_steps": 0.0})
    return plants


def plant_parameter(plant: dict) -> str:
    """`quad_sim`'s `plant` parameter for `plant`."""
    return " ".join(f"{name}={','.join(map(repr, v)) if isinstance(v, list) else repr(v)}"
                    for name, v in plant.items())


def through_graph(policy_dir: str, plant: dict, max_s: float, run_dir: Path) -> dict:
    """One episode of `max_s` flown through the graph; the actor's summary plus the command's wall time."""
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", "--task", "quad_juggle", "--nodes", "quad_sim",
           "juggle_actor", "--run-dir", str(run_dir), "--plain",
           "--set", "quad_sim.clock_mode=realtime", "--set", f"quad_sim.plant={plant_parameter(plant)}",
           "--set", "juggle_actor.episodes=1", "--set", f"juggle_actor.max_episode_s={max_s}",
           "--set", "juggle_actor.follow_learner=false", "--set", "juggle_actor.use_sim_time=false",
           "--set", f"juggle_actor.policy_dir={policy_dir}"]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=max_s * 3 + 300)
    summary_path = run_dir / "juggle_actor_summary.json"
    if done.returncode != 0 or not summary_path.is_file():
        raise SystemExit(f"juggle_graph: `robot-rl train` ended with exit code {done.returncode} and no actor "
                         f"summary; its output ended with:\n{(done.stdout + done.stderr)[-3000:]}")
    return {**json.loads(summary_path.read_text()), "wall_s": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default=str(package_path("policies/quad_juggle")))
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--max-s", type=float, default=120.0)
    parser.add_argument("--split", default="eval")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--quick", action="store_true", help="1 trial of 10 s (same measurement, shorter)")
    args = parser.parse_args()
    # One thread: a forward pass over a few trials gains nothing from more, and an OpenMP team spinning
    # beside the simulation's threads (or a training run's) slowed a whole evaluation several-fold.
    torch.set_num_threads(1)
    if args.quick:
        args.trials, args.max_s = 1, 10.0
    policy = DeployedPolicy.load(args.policy)
    plants = draw_plants(args.split, args.trials, args.seed)
    trials = []
    with tempfile.TemporaryDirectory(prefix="juggle_graph_") as tmp:
        for i, plant in enumerate(plants):
            in_process = summarize(evaluate_policy(policy, 1, args.max_s, split=args.split, overrides=plant,
                                                   seed=args.seed + i))
            graph = through_graph(args.policy, plant, args.max_s, Path(tmp) / f"trial{i}")
            trials.append({"plant": plant, "in_process_hits": in_process["hits"][0],
                           "in_process_ended_by": in_process["ended_by"][0],
                           "graph_hits": graph["hits"][0], "graph_ended_by": graph["ended_by"][0],
                           "graph_episode_s": graph["episode_s"][0], "graph_wall_s": graph["wall_s"],
                           "graph_invalid_observations": graph["invalid_observations"]})
            print(f"trial {i}: in one process {trials[-1]['in_process_hits']} hits "
                  f"({trials[-1]['in_process_ended_by']}), through the graph {trials[-1]['graph_hits']} hits "
                  f"({trials[-1]['graph_ended_by']}, {trials[-1]['graph_episode_s']:.0f} s)", flush=True)
    in_process_hits = sum(t["in_process_hits"] for t in trials)
    graph_hits = sum(t["graph_hits"] for t in trials)
    result = {"policy": str(args.policy), "split": args.split, "trials": args.trials, "max_s": args.max_s,
              "seed": args.seed, "quick": args.quick, "in_process_hits": in_process_hits, "graph_hits": graph_hits,
              "in_process_hits_per_min": round(60 * in_process_hits / (args.trials * args.max_s), 1),
              "graph_hits_per_min": round(60 * graph_hits / (args.trials * args.max_s), 1),
              "graph_hits_ratio": round(graph_hits / in_process_hits, 3) if in_process_hits else None,
              "per_trial": trials, "date": time.strftime("%Y-%m-%d")}
    result["meets_target"] = bool(result["graph_hits_ratio"] is not None and result["graph_hits_ratio"] >= 0.9)
    if not args.quick:
        (RESULTS / "juggle_graph.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
