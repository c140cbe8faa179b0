"""The arm's pick-cube policy judged through the deployment path and on dynamics outside its training ranges
(issue 41, items 4 and 5).

Per seed, the recipe as shipped: `robot-rl train --task arm_pick_cube` (the lockstep graph: arm_sim, arm_actor and
the learner as separate processes over DDS, 10,000 steps; the actor's own final evaluation off), then its final
policy (the learner's last published, `policy.policy`) judged on 50 eval-split episodes whose reset seeds come from
10,000 (`robot-rl eval`'s draws):

- through the graph on the wall clock: `robot-rl train --task arm_pick_cube --nodes arm_sim arm_actor`, arm_sim
  stepping at 10 Hz on a wall-clock timer (`clock_mode: realtime`; a command older than 0.3 s is replaced by "hold
  still"), each reset drawing the scene the in-process episode of the same index meets (`reset_seeds_from`), the
  actor flying the pinned policy (`policy_file`) with the cameras' frames, DDS and timing jitter between them;
- in one process on the same plants, as `robot-rl eval` judges it: the same scenes, action latencies and
  proprioception noise levels (arm_sim draws and simulates both since session 49, as ArmPickCube does; before,
  it simulated neither, and this row fixed them at 0, the pipeline's own delay standing in for latency 0: a
  command computed from one tick's observation is applied at the next tick);
- in one process on each `dynamics_*` split of sim/arm/randomization.yaml (one dynamics shift alone, outside the
  training ranges, the rest from eval): cube mass 0.25 kg, cube friction 0.5, action latency 2 steps, controller
  gain 0.65x, joint damping 1.6x, proprioception noise 0.004.

    python benchmarks/arm_transfer.py [--seeds 0 1 2] [--steps 10000] [--episodes 50] [--runs DIR] [--quick]

`graph_success_ratio`: the graph's successes over the in-process ones on the same plants, summed over the seeds
(target >= 0.95). `min_dynamics_success`: the lowest dynamics row, each row the median over seeds (target >= 0.8).
A seed's training run is kept in `--runs` (default runs/arm_transfer) and reused by a later call once finished.
`--quick`: 1 seed of 600 steps, 5 episodes a row (a smoke run, not the figures). Last line: JSON; a full run
appends each seed's row to benchmarks/results/arm_transfer.jsonl and writes the summary to arm_transfer.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from env_graph import robot_rl
from graph_realtime import _commit

from robot_rl.envs.randomization import Randomization
from robot_rl.resources import package_path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TASK = "arm_pick_cube"
EVAL_SEED = 10_000
"""`robot-rl eval`'s first seed: the episodes' reset seeds are drawn from it."""
DYNAMICS = tuple(split for split in Randomization.load(package_path("sim/arm/randomization.yaml")).splits
                 if split.startswith("dynamics_"))


def train(seed: int, steps: int, run_dir: Path) -> float | None:
    """The recipe's lockstep training run in `run_dir` (reused when one finished there); its wall time, None if
    reused."""
    if (run_dir / "policy.policy").is_file() and (run_dir / "learner_summary.json").is_file():
        return None
    if run_dir.exists():
        raise SystemExit(f"arm_transfer: {run_dir} holds an unfinished run; remove it or pass another --runs")
    started = time.monotonic()
    robot_rl("train", "--task", TASK, "--seed", str(seed), "--steps", str(steps), "--eval-episodes", "0",
             "--run-dir", str(run_dir), "--plain", log=run_dir.with_suffix(".log"), timeout_s=steps * 0.5 + 1800)
    return round(time.monotonic() - started, 1)


def final_policy(run_dir: Path):
    """The run's final policy (`policy.policy`, checked against the run's secret) and its version."""
    from robot_rl.tasks import get_task
    from robot_rl.training.evaluate import graph_policy

    policy, payload = graph_policy(run_dir, run_dir / "policy.policy", get_task(TASK))
    return policy, payload.meta["version"]


def in_process(run_dir: Path, policy, episodes: int, split: str) -> dict:
    """`policy` on `episodes` episodes of `split` in one process, as `robot-rl eval` judges a graph run's policy
    (robot_rl/robots/arm/evaluate.py: the run's scenes, each observation built as the graph's actor builds it)."""
    from robot_rl.robots.arm.evaluate import graph_episodes
    from robot_rl.tasks import get_task

    result = graph_episodes(run_dir, policy, get_task(TASK), episodes, EVAL_SEED, split, None, None)
    return {"split": split, "success_rate": result["success_rate"],
            "successes": [r["success"] for r in result["results"]], "steps": [r["steps"] for r in result["results"]]}


def through_graph(run_dir: Path, episodes: int, eval_dir: Path) -> dict:
    """The run's final policy flown through the graph on the wall clock (see the module docstring)."""
    if eval_dir.exists():
        raise SystemExit(f"arm_transfer: {eval_dir} exists; remove it or pass another --runs")
    started = time.monotonic()
    robot_rl("train", "--task", TASK, "--nodes", "arm_sim", "arm_actor", "--eval-episodes", str(episodes),
             "--run-dir", str(eval_dir), "--plain",
             "--set", "arm_sim.clock_mode=realtime", "--set", "arm_sim.randomization_split=eval",
             "--set", f"arm_sim.reset_seeds_from={EVAL_SEED}", "--set", "arm_actor.sync_updates_per_step=0",
             "--set", f"arm_actor.policy_file={run_dir / 'policy.policy'}",
             "--set", f"arm_actor.key_file={run_dir / 'secret.key'}",
             log=eval_dir.with_suffix(".log"), timeout_s=episodes * 60 + 600)
    summary = json.loads((eval_dir / "eval.json").read_text())
    return {"policy_version": summary["policy_version"], "success_rate": summary["success_rate"],
            "successes": [r["success"] for r in summary["results"]],
            "steps": [r["steps"] for r in summary["results"]], "train_steps": summary["train_steps"],
            "act_latency_ms_p99": summary.get("act_latency_ms_p99"), "missed_periods": summary.get("missed_periods"),
            "wall_s": round(time.monotonic() - started, 1)}


def seed_row(seed: int, steps: int, episodes: int, runs: Path, commit: str) -> dict:
    """`commit`: the code the rows ran, taken when the benchmark started."""
    run_dir = runs / f"seed{seed}"
    train_wall_s = train(seed, steps, run_dir)
    policy, version = final_policy(run_dir)
    matched = in_process(run_dir, policy, episodes, "eval")
    graph = through_graph(run_dir, episodes, runs / f"seed{seed}_graph_{time.strftime('%Y%m%d%H%M%S')}")
    if graph["policy_version"] != version or graph["train_steps"] != 0:
        raise SystemExit(f"arm_transfer: the graph flew policy version {graph['policy_version']} after "
                         f"{graph['train_steps']} training steps, not the pinned version {version}")
    dynamics = {split: in_process(run_dir, policy, episodes, split)["success_rate"] for split in DYNAMICS}
    learner = json.loads((run_dir / "learner_summary.json").read_text())
    return {"seed": seed, "steps": steps, "episodes": episodes, "run_dir": str(run_dir), "train_wall_s": train_wall_s,
            "learner_updates": learner.get("updates"), "policy_version": version,
            "in_process_same_plants": matched, "graph": graph, "in_process_as_drawn": matched["success_rate"],
            "dynamics": dynamics,
            "episodes_that_differ": [i for i, (a, b) in enumerate(zip(matched["successes"], graph["successes"]))
                                     if a != b],
            "date": time.strftime("%Y-%m-%d"), "commit": commit}


def summarize(rows: list[dict]) -> dict:
    in_process_successes = sum(sum(r["in_process_same_plants"]["successes"]) for r in rows)
    graph_successes = sum(sum(r["graph"]["successes"]) for r in rows)
    dynamics = {split: statistics.median(r["dynamics"][split] for r in rows) for split in DYNAMICS}
    ratio = graph_successes / in_process_successes if in_process_successes else None
    summary = {"seeds": [r["seed"] for r in rows], "episodes": rows[0]["episodes"] if rows else None,
               "in_process_success": statistics.median(r["in_process_same_plants"]["success_rate"] for r in rows),
               "graph_success": statistics.median(r["graph"]["success_rate"] for r in rows),
               "in_process_as_drawn_success": statistics.median(r["in_process_as_drawn"] for r in rows),
               "graph_success_ratio": round(ratio, 3) if ratio is not None else None,
               "graph_act_latency_ms_p99": max((r["graph"]["act_latency_ms_p99"] or 0.0) for r in rows),
               "dynamics_success": dynamics, "min_dynamics_success": min(dynamics.values()),
               "targets": {"graph_success_ratio": 0.95, "min_dynamics_success": 0.8}}
    summary["meets_targets"] = {"graph_success_ratio": ratio is not None and ratio >= 0.95,
                                "min_dynamics_success": summary["min_dynamics_success"] >= 0.8}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "arm_transfer",
                        help="where each seed's training run is kept (and reused once finished)")
    parser.add_argument("--quick", action="store_true", help="1 seed of 600 steps, 5 episodes a row")
    args = parser.parse_args()
    # One thread for the in-process evaluations: the forward passes of one episode gain nothing from more.
    torch.set_num_threads(1)
    if args.quick:
        args.seeds, args.steps, args.episodes = args.seeds[:1], 600, 5
        args.runs = args.runs.with_name(args.runs.name + "_quick")
    args.runs.mkdir(parents=True, exist_ok=True)
    commit, rows = _commit(), []
    for seed in args.seeds:
        rows.append(seed_row(seed, args.steps, args.episodes, args.runs, commit))
        print(json.dumps(rows[-1]), flush=True)
        if not args.quick:
            with open(RESULTS / "arm_transfer.jsonl", "a") as out:
                out.write(json.dumps(rows[-1]) + "\n")
    summary = {**summarize(rows), "steps": args.steps, "quick": args.quick, "date": time.strftime("%Y-%m-%d")}
    if not args.quick:
        (RESULTS / "arm_transfer.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
