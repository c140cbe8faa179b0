"""gym-hil's Panda pick-cube with pixels through the ROS 2 graph on the wall clock: minutes to 90 %.

A third-party Gymnasium environment as a robot in the graph (`robot-rl train --env ID --graph`: env_sim, env_actor
and the learner as separate processes talking over DDS), on the benchmark LeRobot's HIL-SERL users train on:
gym-hil 0.1.14's `PandaPickCube-v0` with image observations (front and wrist cameras) and the cube placed at random.

The rules, fixed before any result:

* Environment: `gym_hil_cpu/PandaPickCube-v0` (`benchmarks/gym_hil_cpu.py`): gym-hil's own environment with its
  cameras rendered at its 128 px without shadows or multisampling, because this CPU's software renderer draws
  gym-hil's default frames at 2 steps a second, and nothing can then run at 10 Hz. `{"image_obs": true,
  "random_block_position": true, "reset_delay_seconds": 0}`; gym-hil's 100-step limit and success flag.
* Demonstrations: 20 successful episodes of `benchmarks/gym_hil_expert.py: PickCubeExpert` (it finds the cube in the
  front camera) with action noise 0.1, recorded once per seed (reset seeds from 1000 x (seed + 1)) with `robot-rl
  demos --env --expert` before the clock starts (not counted).
* Encoder (the issue's rule: from scratch, or pretrained only on renders of gym-hil under random actions without
  task labels): `policies/encoders/gym_hil_pick_cube_128`, pretrained by `robot-rl pretrain-encoder --env` on
  frames of this environment under uniformly random actions, regressing the positions of the simulator's free,
  mocap and chain-end bodies (the cube, the target, the fingers); no
  reward, success, expert action or demonstration. Frozen in the learner, 4 feature views (as arm_pick_cube).
* Learner: config/env.yaml's SAC + RLPD (2 critics, batch 256, discount 0.97, 500 warm-up transitions, at most
  1 update per transition) with arm_pick_cube's UTD 2; the actor never waits for it (`sync_updates_per_step` 0).
* Clock: the simulator steps at 10 Hz on the wall clock; minutes count from the `robot-rl train` command's start.
* Judging: the learner pins a policy snapshot every 60 s; after the run each is judged on the same 50 episodes
  (reset seeds drawn from 10,000; `seeded_reset` seeds NumPy's global state, from which gym-hil places the cube),
  deterministic actions, success = gym-hil's success flag. A snapshot passes at >= 90 % (45 of 50): its
  episodes stop at the sixth failure, when it can no longer pass. The time to 90 % is the first of two
  consecutive passing snapshots; the snapshots after that pair are not judged.
* Figures: the median over 3 seeds of the minutes to 90 %, a seed that never got there counted as its run's
  length, and how many seeds got there: `gym_hil_wall_min_to_90` (one robot; target <= 30) and
  `gym_hil_two_actors_wall_min_to_90` (`--actors 2`, two simulated robots feeding the one learner; target <= 20).

    .venv-gym-hil/bin/python benchmarks/env_graph.py --arm one_actor --seed 0 --minutes 30   # one row
    .venv-gym-hil/bin/python benchmarks/env_graph.py --arm two_actors --seed 0 --minutes 20  # one row
    .venv-gym-hil/bin/python benchmarks/env_graph.py --summary                               # rows -> summary
    .venv-gym-hil/bin/python benchmarks/env_graph.py --quick                                 # a short run

Each run appends a row to benchmarks/results/env_graph.jsonl; `--summary` writes benchmarks/results/env_graph.json
and prints it as the last line. `--quick`: 2 minutes, 3 demonstrations, snapshots every 30 s judged on 5 episodes,
nothing recorded. Runs in `make gym-hil-env`'s venv (gym-hil pins MuJoCo below 3.9).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from graph_realtime import _commit, first_reached, read_rows, saved_minutes

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
ROWS = RESULTS / "env_graph.jsonl"
ENV_ID = "gym_hil_cpu/PandaPickCube-v0"
ENV_KWARGS = {"image_obs": True, "random_block_position": True, "reset_delay_seconds": 0}
ADAPTER = ["--set", "adapter.gripper_index=3", "--set", "adapter.gripper_open=0", "--set", "adapter.gripper_close=2"]
"""gym-hil's gripper: action entry 3 in [0, 2], 0 opens and 2 closes."""
EXPERT = "gym_hil_expert:PickCubeExpert"
DEMO_NOISE = 0.1
"""Gaussian noise on the expert's actions in its demonstrations (`robot-rl demos`'s default)."""
ENCODER = ROOT / "policies" / "encoders" / "gym_hil_pick_cube_128"
CONTROL_HZ = 10.0
LEARNER = ["--set", f"learner.encoder={ENCODER}", "--set", "learner.feature_views=4", "--set", "learner.utd_ratio=2"]
REALTIME = ["--set", "env_sim.clock_mode=realtime", "--set", "env_actor.sync_updates_per_step=0"]
ARMS = {"one_actor": [], "two_actors": ["--actors", "2"]}
FIGURES = {"one_actor": "gym_hil_wall_min_to_90", "two_actors": "gym_hil_two_actors_wall_min_to_90"}
TARGETS_MIN = {"one_actor": 30.0, "two_actors": 20.0}
EVAL_SEED = 10_000
TARGET = 0.9


def subprocess_env() -> dict[str, str]:
    """This folder on PYTHONPATH (the environment's module, the expert), DDS on this machine, software GL."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCHMARKS), env.get("PYTHONPATH")]))
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_LOCALHOST_ONLY", "1")
    env.setdefault("MUJOCO_GL", "osmesa")
    env.setdefault("PYOPENGL_PLATFORM", env["MUJOCO_GL"])
    return env


def robot_rl(*args: str, log: Path, python: str = sys.executable, timeout_s: float | None = None) -> None:
    """`robot-rl ARGS` (run by `python`, killed after `timeout_s`), its output in `log`; exits naming the log's end
    if it fails."""
    with open(log, "w") as out:
        code = subprocess.run([python, "-m", "robot_rl.cli", *args], stdout=out, stderr=subprocess.STDOUT,
                              env=subprocess_env(), timeout=timeout_s).returncode
    if code != 0:
        raise SystemExit(f"{Path(sys.argv[0]).stem}: `robot-rl {' '.join(args[:3])} ...` exited with {code}; its "
                         f"output ended with:\n{log.read_text()[-3000:]}")


def record_demos(out: Path, episodes: int, seed: int) -> float:
    """The expert's successful episodes into `out`; returns the seconds it took (not counted in the run)."""
    started = time.time()
    robot_rl("demos", "--env", ENV_ID, "--expert", EXPERT, "--env-kwargs", json.dumps(ENV_KWARGS), *ADAPTER,
             "--episodes", str(episodes), "--noise", str(DEMO_NOISE), "--seed", str(seed), "--out", str(out),
             log=out.with_suffix(".log"))
    return time.time() - started


def run_arm(arm: str, seed: int, minutes: float, snapshot_s: float, run_dir: Path, demos: Path,
            episodes: int, env_id: str = ENV_ID, extra: Sequence[str] = ()) -> dict:
    """One `robot-rl train --env --graph` for `minutes` of wall clock, then its snapshots judged. `env_id` (the
    same scene under another registration) and `extra` settings are benchmarks/peer_lerobot.py's."""
    steps = round(minutes * 60 * CONTROL_HZ)
    cmd = ["train", "--env", env_id, "--graph", "--env-kwargs", json.dumps(ENV_KWARGS), *ADAPTER,
           "--demos", str(demos), "--control-hz", str(CONTROL_HZ), "--seed", str(seed), "--steps", str(steps),
           "--eval-episodes", "0", "--run-dir", str(run_dir), "--plain", "--status-period", "60",
           "--set", f"learner.snapshot_period_s={snapshot_s}", *LEARNER, *REALTIME, *ARMS[arm], *extra]
    started, commit = time.time(), _commit()
    robot_rl(*cmd, log=run_dir.with_suffix(".log"))
    wall_s = time.time() - started
    learner = json.loads((run_dir / "learner_summary.json").read_text())
    ledgers = [json.loads(p.read_text()) for p in sorted(run_dir.glob("robot*/eval.json"))] or \
        [json.loads((run_dir / "eval.json").read_text())]
    sent = sum(r["transitions_sent"] for r in ledgers)
    snapshots = judge_snapshots(run_dir, started, episodes)
    return {"arm": arm, "seed": seed, "minutes_budget": minutes, "wall_s": round(wall_s, 1), "env_steps": sent,
            "transitions_sent": sent, "transitions_stored": learner["transitions_received"],
            "lost_transitions": sent - learner["transitions_received"],
            "duplicate_transitions": learner.get("duplicates", 0), "learner_updates": learner.get("updates"),
            "learner_updates_per_s": round(learner.get("updates", 0) / max(wall_s, 1.0), 2),
            "act_latency_ms_p99": max((r.get("act_latency_ms_p99") or 0 for r in ledgers), default=None),
            "missed_periods": sum(r.get("missed_periods", 0) for r in ledgers),
            # A snapshot stopped early (success None) is below the target.
            "snapshots": snapshots, "minutes_to_90": first_reached(
                [{**row, "success": row["success"] or 0.0} for row in snapshots], TARGET, "minutes"),
            "episodes_per_snapshot": episodes, "date": time.strftime("%Y-%m-%d"), "commit": commit}


def judge_snapshots(run_dir: Path, started: float, episodes: int) -> list[dict]:
    """The run's snapshots in the order they were saved, each on the same episodes, until two consecutive pass."""
    return judge_in_order(sorted((run_dir / "snapshots").glob("*.policy")), graph_judge(run_dir, episodes), started,
                          episodes)


def graph_judge(run_dir: Path, episodes: int) -> Callable[[Path, int | None], dict]:
    """judge(policy file of graph run `run_dir`, max_failures) on the benchmark's `episodes` seeded episodes."""
    from robot_rl.tasks import ENV_TASK
    from robot_rl.training.evaluate import evaluate_graph_policy

    return lambda path, max_failures: evaluate_graph_policy(run_dir, path, ENV_TASK, episodes, seed=EVAL_SEED,
                                                            max_failures=max_failures)


def judge_in_order(paths: Sequence[Path], judge: Callable[[Path, int | None], dict], started: float,
                   episodes: int) -> list[dict]:
    """Snapshots (`paths`, in the order they were saved) judged by `judge(path, max_failures)` (robot_rl's
    evaluator result) until two consecutive pass; each stops at the failure that makes it miss the target."""
    allowed_failures = episodes - math.ceil(TARGET * episodes - 1e-9)  # 45 of 50 must succeed: 5 may fail
    judged: list[dict] = []
    for path in paths:
        result = judge(path, allowed_failures)
        passed = result["success_rate"] is not None and result["success_rate"] >= TARGET
        judged.append({"minutes": saved_minutes(path, started), "version": result["policy_version"],
                       "transitions": result["transitions"], "success": result["success_rate"],
                       "success_at_most": result.get("success_at_most"), "stopped_after": result.get("stopped_after"),
                       "successes": sum(r["success"] for r in result["results"]), "passed": passed})
        print(json.dumps(judged[-1]), flush=True)
        if len(judged) >= 2 and judged[-2]["passed"] and passed:
            break
    return judged


def summarize(rows: list[dict]) -> dict:
    """Per arm: the median over seeds of the minutes to 90 % (a seed that never got there counts as its run's
    length) and how many seeds got there."""
    summary: dict = {"rows": len(rows), "env_id": ENV_ID, "env_kwargs": ENV_KWARGS, "encoder": str(ENCODER.name),
                     "rule": "first of two consecutive 60 s snapshots at >= 90 % on the same 50 seeded episodes"}
    for arm, figure in FIGURES.items():
        runs = [r for r in rows if r["arm"] == arm]
        minutes = [r["minutes_to_90"] if r["minutes_to_90"] is not None else r["wall_s"] / 60 for r in runs]
        reached = sum(r["minutes_to_90"] is not None for r in runs)
        prefix = figure.removesuffix("_wall_min_to_90")
        summary[figure] = round(statistics.median(minutes), 2) if runs else None
        summary[f"{prefix}_seeds_reaching_90"] = f"{reached}/{len(runs)}"
        summary[f"{prefix}_target_min"] = TARGETS_MIN[arm]
        summary[f"{prefix}_met"] = bool(runs) and len(runs) >= 3 and reached * 2 > len(runs) and \
            summary[figure] <= TARGETS_MIN[arm]
    summary["lost_transitions"] = sum(r["lost_transitions"] for r in rows)
    summary["duplicate_transitions"] = sum(r["duplicate_transitions"] for r in rows)
    summary["fewer_than_3_seeds"] = [arm for arm in FIGURES if 0 < sum(r["arm"] == arm for r in rows) < 3]
    return summary


def check_setup() -> None:
    try:
        import gym_hil  # noqa: F401
    except ImportError:
        raise SystemExit("env_graph: gym-hil is not installed here; run it with `make gym-hil-env` and "
                         ".venv-gym-hil/bin/python benchmarks/env_graph.py") from None
    if not (ENCODER / "card.json").is_file():
        raise SystemExit(f"env_graph: no encoder at {ENCODER}; make it with `robot-rl pretrain-encoder --env {ENV_ID} "
                         f"--env-kwargs '{json.dumps(ENV_KWARGS)}' {' '.join(ADAPTER)} --frames 15000 --out {ENCODER}`"
                         " (PYTHONPATH=benchmarks)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", choices=list(ARMS), default="one_actor")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget of the run")
    parser.add_argument("--summary", action="store_true", help="summarize the recorded rows instead of running")
    parser.add_argument("--quick", action="store_true", help="2 minutes, 3 demonstrations, snapshots every 30 s "
                        "judged on 5 episodes; nothing recorded")
    args = parser.parse_args()
    if args.summary:
        rows = read_rows(ROWS)
        summary = summarize(rows)
        (RESULTS / "env_graph.json").write_text(json.dumps(summary, indent=2) + "\n")
        print(json.dumps(summary), flush=True)
        return
    check_setup()
    minutes, snapshot_s, episodes, demo_episodes = (2.0, 30.0, 5, 3) if args.quick else \
        (args.minutes, 60.0, 50, 20)
    with tempfile.TemporaryDirectory(prefix="env_graph-") as tmp:
        demos = Path(tmp) / "demos.zarr"
        demo_s = record_demos(demos, demo_episodes, seed=1000 * (args.seed + 1))
        row = run_arm(args.arm, args.seed, minutes, snapshot_s, Path(tmp) / "run", demos, episodes)
    row["demo_seconds_not_counted"] = round(demo_s, 1)
    print(json.dumps(row), flush=True)
    if args.quick:
        assert row["lost_transitions"] == 0 and row["snapshots"], row
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(ROWS, "a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
