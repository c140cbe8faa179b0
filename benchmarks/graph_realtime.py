"""The product as users run it: `robot-rl train` graphs (simulator, actor(s), learner as separate
processes) learning pixel pick-cube, and the car from pixels, in real time, against wall-clock minutes.

Each arm and seed is one `robot-rl train` command, timed from its start (demonstration generation
included). During the run the learner writes a policy snapshot every `--snapshot-s` seconds
(`learner.snapshot_period_s`, the payload it publishes at that moment); after the run, off the
learner's CPU, every snapshot (one pinned policy version) is evaluated for 50 episodes on the eval
split of `robot_rl/ArmPickCube-v0` (the same simulator and task observation as the graph's actor,
its randomized eval ranges). A target counts as reached at the first of two consecutive snapshots
both at or above it. Transitions are counted from each actor's own ledger (the sequence numbers it
sent, `eval.json`) against what the learner stored.

Arms (`--arm`):
- realtime: 1 robot at 10 Hz on the wall clock, the learner fully asynchronous;
- wide: the same on `arm_pick_cube_wide` (the cube anywhere in 30 x 30 cm at any yaw, its 20
  demonstrations from that range, its encoder pretrained on it; snapshots judged on its range);
- two_actors: the same with 2 robots (`--actors 2`) feeding the one learner;
- killed_actor: realtime with the actor SIGKILLed halfway through (the supervisor restarts it and
  it goes on from its outbox): the transition ledger under a crash, not part of the time medians;
- hil: realtime with the scripted human driving a `sensor_msgs/Joy` into the teleop node;
- lockstep: the config as shipped (lockstep, 1 update per step), a snapshot every 1,000 stored
  transitions, success against env steps (`--steps`);
- in_process: the same recipe (the shipped learner's feature views) in the in-process loop
  (`training/gym_loop.py`, `benchmarks/pick_cube.py`'s setup), evaluated every 1,000 steps by
  the same rule: the reference of `lockstep_step_ratio`;
- car: `robot-rl train --task car_race` at 20 Hz on the wall clock, the learner asynchronous with
  `benchmarks/car_race.py`'s CPU learner (`CAR_LEARNER`), practising on the held-out track 7.
  `car_first_lap_min` is the wall clock from the command's start to the car's first clean lap in
  its own practice (the actor's lap timer, as car_race.py's `first_lap_steps`); each snapshot and
  the final policy drive one timed lap on each of car_race.py's 20 eval-split draws, against the
  scripted expert on the same draws (`car_lap_time_ratio`, medians with failed laps infinitely slow).

    python benchmarks/graph_realtime.py --arm realtime --seed 0 --minutes 20   # one row
    python benchmarks/graph_realtime.py --arm lockstep --seed 0 --steps 10000   # one row, against steps
    python benchmarks/graph_realtime.py --arm wide --seed 0 --minutes 30        # one wide row
    python benchmarks/graph_realtime.py --arm car --seed 0 --minutes 10         # one car row
    python benchmarks/graph_realtime.py --summary                               # rows -> summary
    python benchmarks/graph_realtime.py --arm hil --seed 0 --minutes 8 --keep-run R  # the run's logs kept in R
    python benchmarks/graph_realtime.py --quick                                 # a short run of the same

Each run appends one row to benchmarks/results/graph_realtime.jsonl (a run of at most --minutes, so
the set runs in pieces); `--summary` reads the rows, writes benchmarks/results/graph_realtime.json and
graph_realtime.png (success against wall-clock minutes and steps, the car's clean laps against
minutes) and prints the summary as the last line.
Every row names the recipe it ran (`RECIPE_SETTINGS` of the shipped task config's learner, settings and
code changes (`PERSON_CHANGES`) that act on a person's corrections only in the hil arm's, code changes
(`FLEET_CHANGES`) that act on a fleet only in the two_actors arm's, code changes (`LEARNER_CHANGES`) that act on
the wall clock only in the real-time arms', code changes to what the simulator trains on (`SIM_CHANGES`), and the
task's `TASK_SETTINGS`); the summary's
figures are the
current recipe's on this machine, and each earlier recipe's stay beside them under `earlier_recipes`.
Every row names its machine too (`machine()`: CPU model, cores and native bfloat16 or not; a real-time row's
minutes depend on its learner's updates per second): the shipped recipe's rows from another machine are
summarized apart, under `earlier_recipes` as "<recipe> on <machine>", and rows from before rows named their machine
as "<recipe> on a machine not recorded" (most ran on another machine, the car's for one).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from robot_rl.device import cpu_has_native_bf16, cpu_model

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ROWS = RESULTS / "graph_realtime.jsonl"
TASK = "arm_pick_cube"
WIDE_TASK = "arm_pick_cube_wide"
"""Its config (config/arm_pick_cube_wide.yaml) is arm_pick_cube's but for the cube's range and the encoder
(tests/test_graph_realtime_summary.py), so both run the same learner recipe."""
CONTROL_HZ = 10.0
RECIPE_SETTINGS = {"feature_views": 1, "bc_weight": 1.0, "max_update_ratio": 1.0, "warmup_transitions": 500,
                   "compile": False}
"""Learner settings that changed the recipe between recorded rows, with the value rows that do not
name them ran (they predate the setting)."""
TASK_SETTINGS = {"action_history": 0}
"""Task settings that changed the recipe (`TaskSpec`: the pick-cube task observes its last actions since
2026-11-29), named "task.<name>", with the value rows that do not name them ran."""
PERSON_CHANGES = ("corrections_end_at_reset",)
"""Changes to the person's path through the graph (code, not settings), named "person.<name>": True in the code
now, False for rows that do not name them. corrections_end_at_reset (2026-11-30): the scripted person lets go at
a reset and the actor does not act on a command given before the episode began; before it, a rescue under way
at an episode's end went on into the next episode (its first step the old scene's lift-and-close, stored as a
correction)."""
FLEET_CHANGES = ("ticks_staggered",)
"""Changes to how a fleet's robots share the machine (code), named "fleet.<name>": True in the code now, False for
rows that do not name them. ticks_staggered (2026-11-30): a fleet's realtime simulators tick index/N of a period
apart (`tick_phase`); before, their phases fell where their processes' start put them."""
LEARNER_CHANGES = ("group_niced", "acks_beside_updates", "acks_on_arrival")
"""Changes to the learner's code that act on the wall clock only, named "learner.<name>": True in the code now,
False for rows that do not name them. group_niced (2026-11-30, 7fe893b): a learner leading its own session (as
robot-rl train's supervisor starts it) gives its session's scheduling group `train_niceness` too; before, only
its training thread had it, which under the kernel's autogroup scheduling weighed against the learner's own
threads alone, so the learner took the CPU from the simulator and the actor as an equal. acks_beside_updates
(2026-12-01): the learner node stores payloads on a thread of its own, beside the training thread's updates, and
acknowledges each as soon as it is stored; before, between updates, and a drain's acknowledgements together after its
last payload, so an update that took seconds (a compiled step's first call) held acknowledgements back until actors
resent them (counted as duplicate transitions). acks_on_arrival (2026-12-01, after 265e304): the node's ROS callback
verifies, journals and acknowledges each payload as it arrives, and the ingest thread only computes features and
stores (and, stopped, stores what still waits before the learner's summary counts it); before, a payload's
acknowledgement waited for the features of those queued before it (1 s each while the first compiled update compiled:
one resend in two_actors seed 0 at 265e304)."""
SIM_CHANGES = ("latency_and_noise",)
"""Changes to what the graph's simulator trains on (code), named "sim.<name>": True in the code now, False for rows
that do not name them. latency_and_noise (2026-12-02, session 49): arm_sim draws and simulates the randomization's
action latency and proprioception noise as ArmPickCube does (the train split: 0, 0 or 1 steps, noise up to 0.002);
before, it simulated neither, so the graph trained on latency 0 and exact joint readings."""
CODE_CHANGES = (*PERSON_CHANGES, *FLEET_CHANGES, *LEARNER_CHANGES, *SIM_CHANGES)
"""Every named code change: True in the code now, False for a row that does not name it."""
PERSON_SETTINGS = ("bc_weight", *PERSON_CHANGES)
"""Settings that act on a person's corrections only: part of the hil arm's recipe alone."""
WALL_CLOCK_SETTINGS = ("max_update_ratio", "compile")
"""Settings that act on the wall clock only: a lockstep graph holds its learner to the actor's sync_updates_per_step
(robot_rl/ros/graph.py), and the in-process loop to its updates_per_step; compile is the same math, faster."""
SNAPSHOT_TRANSITIONS = 1_000
"""Steps between the lockstep graph's snapshots and the in-process loop's evaluations."""

CAR_TASK, CAR_HZ = "car_race", 20.0
CAR_LEARNER = ["--set", "learner.num_critics=2", "--set", "learner.utd_ratio=1", "--set", "learner.batch_size=256"]
"""benchmarks/car_race.py's CPU learner (`--sac cpu`): FastRLAP's shipped 10 critics at UTD 8 and batch 512
take about 0.3 s per update on this 2-core CPU."""

REALTIME = ["--set", "arm_sim.clock_mode=realtime", "--set", "arm_actor.sync_updates_per_step=0"]
ARMS = {
    "realtime": REALTIME,
    "wide": REALTIME,
    "two_actors": [*REALTIME, "--actors", "2"],
    "killed_actor": REALTIME,
    "hil": [*REALTIME, "--set", "robot_rl.nodes=[arm_sim, arm_actor, learner, teleop, scripted_human]",
            "--set", "teleop.device=joy", "--set", "scripted_human.task=arm_pick_cube"],
    "lockstep": ["--set", f"learner.snapshot_every_transitions={SNAPSHOT_TRANSITIONS}"],
    "car": ["--set", "car_sim.clock_mode=realtime", "--set", "car_actor.sync_updates_per_step=0", *CAR_LEARNER],
}
REALTIME_ARMS = ("realtime", "wide", "two_actors", "hil")
STEP_ARMS = ("lockstep", "in_process")
"""Arms judged against environment steps; in_process is not a graph (`run_in_process`)."""


def arm_task(arm: str) -> tuple[str, float]:
    """The task an arm trains and its control rate."""
    return (CAR_TASK, CAR_HZ) if arm == "car" else (WIDE_TASK if arm == "wide" else TASK, CONTROL_HZ)


def stop_group(process: subprocess.Popen, timeout: float = 120.0) -> int:
    """SIGINT to the process's group (a graph's nodes with it: their own shutdown, final checkpoint and
    evaluation), then SIGKILL after `timeout`; its exit code."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGINT)
        except ProcessLookupError:  # it ended meanwhile
            pass
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.wait()


def run_arm(arm: str, seed: int, steps: int, snapshot_s: float, run_dir: Path, eval_episodes: int = 50) -> dict:
    """One `robot-rl train` of the arm for `steps` environment steps (in real time, minutes at the task's
    control rate), then the learner's snapshots evaluated."""
    task, hz = arm_task(arm)
    minutes = steps / hz / 60
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", "--task", task, "--seed", str(seed), "--steps", str(steps),
           "--eval-episodes", "0", "--run-dir", str(run_dir), "--plain", "--status-period", "60",
           "--set", f"learner.snapshot_period_s={snapshot_s}", *ARMS[arm]]
    if arm != "car":  # every step's act latency, per robot, for a kept run to say which steps were slow
        cmd += ["--set", f"arm_actor.timing_log={run_dir.parent / 'timing.csv'}"]
    started, commit = time.time(), _commit()  # the code this run ran, not the checkout at its end
    log = open(run_dir.with_suffix(".log"), "w")
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    killed_at = None
    try:
        if arm == "killed_actor":
            try:
                process.wait(timeout=minutes * 60 / 2)
            except subprocess.TimeoutExpired:
                kill_node(run_dir)
                killed_at = round((time.time() - started) / 60, 2)
        code = process.wait(timeout=minutes * 60 * 3 + 600)
    except subprocess.TimeoutExpired:
        code = stop_group(process)
    except BaseException:  # Ctrl-C or kill: the graph lives in a session of its own, so it stops with the benchmark
        stop_group(process)
        raise
    wall_s = time.time() - started
    log.close()
    restarts = run_dir.with_suffix(".log").read_text().count("; restarting")
    if not (run_dir / "learner_summary.json").is_file():  # the run never trained: say why, not a missing file
        tail = run_dir.with_suffix(".log").read_text()[-3000:]
        raise SystemExit(f"graph_realtime: `robot-rl train` ended with exit code {code} and no learner summary; "
                         f"its output ended with:\n{tail}")
    learner = json.loads((run_dir / "learner_summary.json").read_text())
    ledgers = [json.loads(p.read_text()) for p in sorted(run_dir.glob("robot*/eval.json"))] or \
        [json.loads((run_dir / "eval.json").read_text())]
    sent = sum(r["transitions_sent"] for r in ledgers)
    snapshots = evaluate_snapshots(run_dir, started, eval_episodes, arm)
    extra = car_results(run_dir, started, ledgers[0], eval_episodes) if arm == "car" else {}
    return {**extra, "arm": arm, "seed": seed, "minutes_budget": minutes, "exit_code": code, "wall_s": round(wall_s, 1),
            "env_steps": sent, "transitions_sent": sent, "transitions_stored": learner["transitions_received"],
            "lost_transitions": sent - learner["transitions_received"],
            "duplicate_transitions": learner.get("duplicates", 0),
            "learner_updates": learner.get("updates"), "learner_updates_per_s": round(
                learner.get("updates", 0) / max(wall_s, 1.0), 2),
            "updates_per_transition": learner.get("updates_per_transition"), "snapshot_s": snapshot_s,
            "act_latency_ms_p99": max((r.get("act_latency_ms_p99", 0) for r in ledgers
                                       if isinstance(r.get("act_latency_ms_p99"), float)), default=None),
            "missed_periods": sum(r.get("missed_periods", 0) for r in ledgers),
            "intervention_steps": _intervention_steps(run_dir), "actor_killed_at_min": killed_at,
            "node_restarts": restarts,
            "snapshots": snapshots, "minutes_to_90": first_reached(snapshots, 0.9, "minutes"),
            "steps_to_90": first_reached(snapshots, 0.9, "transitions"),
            "recipe": arm_recipe(arm, shipped_settings()), "machine": machine(), "date": time.strftime("%Y-%m-%d"),
            "commit": commit}


def kill_node(run_dir: Path, node: str = "arm_actor") -> int:
    """SIGKILLs node `node` of the run in `run_dir` (the process started with its module and the run's params
    file); returns its pid."""
    from robot_rl.ros.node_kinds import NODE_KINDS

    wanted = {NODE_KINDS[node].module, str(run_dir / "params.yaml")}
    for proc in Path("/proc").iterdir():
        try:
            argv = set((proc / "cmdline").read_bytes().decode(errors="replace").split("\0"))
        except OSError:  # not a process, or one that just ended
            continue
        if proc.name.isdigit() and wanted <= argv:
            os.kill(int(proc.name), signal.SIGKILL)
            return int(proc.name)
    raise RuntimeError(f"no {node} process of {run_dir} to kill")


def run_in_process(seed: int, steps: int, eval_episodes: int = 50) -> dict:
    """The in-process loop with the shipped learner's recipe, evaluated every SNAPSHOT_TRANSITIONS steps."""
    import dataclasses

    from pick_cube import ENV_ID, config_for

    from robot_rl.tasks import expert_for_env
    from robot_rl.training.gym_loop import Trainer

    learner = shipped_learner()
    config = dataclasses.replace(config_for(seed, steps, False, SNAPSHOT_TRANSITIONS, eval_episodes),
                                 feature_views=learner["feature_views"], feature_jitter=learner["feature_jitter"],
                                 warmup_steps=learner["warmup_transitions"])
    started, commit = time.time(), _commit()
    snapshots: list[dict] = []

    def log(row: dict) -> None:
        snapshots.append({"minutes": round((time.time() - started) / 60, 2), "transitions": row["steps"],
                          "success": row["success_rate"]})
        print(json.dumps(snapshots[-1]), flush=True)

    Trainer(config, expert=expert_for_env(ENV_ID), log=log).run()
    return {"arm": "in_process", "seed": seed, "steps_budget": steps, "wall_s": round(time.time() - started, 1),
            "env_steps": steps, "snapshots": snapshots, "minutes_to_90": first_reached(snapshots, 0.9, "minutes"),
            "steps_to_90": first_reached(snapshots, 0.9, "transitions"),
            "recipe": arm_recipe("in_process", shipped_settings()), "machine": machine(),
            "date": time.strftime("%Y-%m-%d"), "commit": commit}


def shipped_learner() -> dict:
    """The learner's parameters in the shipped task config."""
    import yaml

    return yaml.safe_load((ROOT / "config" / f"{TASK}.yaml").read_text())["learner"]["ros__parameters"]


def shipped_settings() -> dict:
    """The shipped task config's values of RECIPE_SETTINGS, the task's of TASK_SETTINGS, and every CODE_CHANGES."""
    from robot_rl.tasks import get_task

    learner, task = shipped_learner(), get_task(TASK)
    return {**{k: learner.get(k, v) for k, v in RECIPE_SETTINGS.items()},
            **{k: getattr(task, k) for k in TASK_SETTINGS},
            **dict.fromkeys(CODE_CHANGES, True)}


def recipe_name(settings: dict) -> str:
    prefix = {**dict.fromkeys(TASK_SETTINGS, "task"), **dict.fromkeys(PERSON_CHANGES, "person"),
              **dict.fromkeys(FLEET_CHANGES, "fleet"), **dict.fromkeys(SIM_CHANGES, "sim")}
    return ",".join(f"{prefix.get(k, 'learner')}.{k}={v}" for k, v in settings.items())


def arm_recipe(arm: str, settings: dict) -> str:
    """The recipe an arm ran, e.g. "learner.feature_views=4" (the hil arm also names its person settings, the
    two_actors arm its fleet's; the car, another task, its own learner settings)."""
    if arm == "car":
        return ",".join(CAR_LEARNER[1::2])
    return recipe_name({k: v for k, v in settings.items() if (arm == "hil" or k not in PERSON_SETTINGS)
                        and (arm == "two_actors" or k not in FLEET_CHANGES)
                        and (arm not in STEP_ARMS or k not in (*WALL_CLOCK_SETTINGS, *LEARNER_CHANGES))})


def row_recipe(row: dict) -> str:
    if row["arm"] == "car":
        return row.get("recipe", "")
    named = dict(item.split(".", 1)[1].split("=", 1) for item in row.get("recipe", "").split(",") if item)
    return arm_recipe(row["arm"], {**RECIPE_SETTINGS, **TASK_SETTINGS,
                                   **dict.fromkeys(CODE_CHANGES, False), **named})


def car_snapshot(run_dir: Path, path: Path, started: float, laps: int) -> dict:
    """A car policy (snapshot or the final policy.policy) timed on car_race.py's eval draws."""
    from car_race import EVAL_DRAWS

    from robot_rl.training.evaluate import evaluate_graph_policy

    result = evaluate_graph_policy(run_dir, path, CAR_TASK, laps, seed=EVAL_DRAWS[0], split="eval")
    return {"minutes": saved_minutes(path, started), "version": result["policy_version"],
            "transitions": result["transitions"], "success": result["clean_laps"] / laps,
            "clean_laps": result["clean_laps"], "laps": laps, "median_lap_s": result["median_lap_s"],
            "lap_times_s": result["lap_times_s"]}


def car_results(run_dir: Path, started: float, ledger: dict, laps: int) -> dict:
    """The car's first clean practice lap (wall clock since the command started), its final policy timed
    on the eval draws, and the scripted expert on the same draws."""
    from car_race import EVAL_DRAWS, expert_eval_laps

    from robot_rl.robots.car.train import lap_time_ratio

    first = ledger["laps"][0] if ledger["laps"] else None
    expert = expert_eval_laps(EVAL_DRAWS[:laps])
    final = car_snapshot(run_dir, run_dir / "policy.policy", started, laps)
    ratio = lap_time_ratio(final["lap_times_s"], expert)
    return {"first_lap_min": round((first[2] - started) / 60, 2) if first else None,
            "first_lap_step": first[0] if first else None, "practice_laps": len(ledger["laps"]),
            "best_practice_lap_s": ledger["best_lap_s"] and round(ledger["best_lap_s"], 3), "final": final,
            "expert_lap_times_s": [None if t is None else round(t, 3) for t in expert],
            "lap_time_ratio": round(ratio, 3) if ratio < float("inf") else None}


def evaluate_snapshots(run_dir: Path, started: float, episodes: int, arm: str) -> list[dict]:
    """Every snapshot (one pinned policy version) on the eval split, the same draws for each."""
    evaluate = car_snapshot if arm == "car" else pick_cube_snapshot
    return [evaluate(run_dir, path, started, episodes) for path in sorted((run_dir / "snapshots").glob("*.policy"))]


def saved_minutes(path: Path, started: float) -> float:
    """Minutes from the command's start to a snapshot (its name starts with the wall time in ns) or a file."""
    saved_s = int(path.name.split("-")[0]) / 1e9 if path.parent.name == "snapshots" else path.stat().st_mtime
    return round((saved_s - started) / 60, 2)


def pick_cube_snapshot(run_dir: Path, path: Path, started: float, episodes: int) -> dict:
    """A pick-cube snapshot's success in scenes of the run's own cube range (params.yaml: wide or not)."""
    from robot_rl.training.evaluate import evaluate_graph_policy

    result = evaluate_graph_policy(run_dir, path, TASK, episodes, seed=10_000, split="eval")
    return {"minutes": saved_minutes(path, started), "version": result["policy_version"],
            "transitions": result["transitions"], "success": result["success_rate"]}


def first_reached(snapshots: list[dict], target: float, key: str) -> float | None:
    for first, second in zip(snapshots, snapshots[1:]):
        if first["success"] >= target and second["success"] >= target:
            return first[key]
    return None


def _intervention_steps(run_dir: Path) -> int:
    path = run_dir / "episodes.jsonl"
    if not path.exists():
        return 0
    return sum(json.loads(line).get("intervention_steps", 0) for line in path.read_text().splitlines() if line)


def read_rows(path: Path) -> list[dict]:
    """The rows a benchmark appended to `path` (JSON lines), in order."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


UNRECORDED_MACHINE = "a machine not recorded"
"""Where a row from before rows named their machine ran, in the summary."""


def machine() -> str:
    """This machine's CPU model, core count and whether it has native bfloat16 matmuls (where the learner's
    `precision: auto` trains in bfloat16), e.g. "Intel(R) Xeon(R) Processor, 2 cores, native bfloat16": a virtual
    machine's model name can be the same for hosts whose learners differ twofold."""
    bf16 = "native bfloat16" if cpu_has_native_bf16() else "no native bfloat16"
    return f"{cpu_model()}, {os.cpu_count()} cores, {bf16}"


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip()


def summarize(rows: list[dict], shipped: dict, here: str | None = None) -> dict:
    """The figures of the rows that ran the `shipped` settings on this machine (`here`, default `machine()`),
    then each earlier recipe's, and any recipe's from another machine ("<recipe> on <machine>"), under
    `earlier_recipes`; a row without a machine (recorded before rows named one) is under "<recipe> on a machine not
    recorded", never taken for this machine's."""
    here = here or machine()

    def group(row: dict) -> str:
        where = row.get("machine", UNRECORDED_MACHINE)
        return row_recipe(row) if where == here else f"{row_recipe(row)} on {where}"

    current = [r for r in rows if group(r) == arm_recipe(r["arm"], shipped)]
    summary = summarize_recipe(current)
    summary["recipe"] = recipe_name(shipped)
    summary["machine"] = here
    earlier = [r for r in rows if r not in current]
    summary["earlier_recipes"] = {name: summarize_recipe([r for r in earlier if group(r) == name])
                                  for name in dict.fromkeys(map(group, earlier))}
    return summary


def summarize_recipe(rows: list[dict]) -> dict:
    """Medians over seeds per arm; a seed that never reached 90 % counts as its run's length."""
    by_arm: dict[str, list[dict]] = {}
    for row in rows:
        by_arm.setdefault(row["arm"], []).append(row)

    def median_minutes(arm: str) -> tuple[float | None, int, int]:
        runs = by_arm.get(arm, [])
        if not runs:
            return None, 0, 0
        values = [r["minutes_to_90"] if r["minutes_to_90"] is not None else r["wall_s"] / 60 for r in runs]
        return round(statistics.median(values), 2), sum(r["minutes_to_90"] is not None for r in runs), len(runs)

    def median_steps(arm: str) -> tuple[float | None, int, int]:
        runs = by_arm.get(arm, [])
        values = [r["steps_to_90"] if r["steps_to_90"] is not None else r["env_steps"] for r in runs]
        return (statistics.median(values) if runs else None), sum(r["steps_to_90"] is not None for r in runs), len(runs)

    summary: dict = {"rows": len(rows)}
    for arm in REALTIME_ARMS:
        minutes, reached, seeds = median_minutes(arm)
        summary[f"{arm}_wall_min_to_90"] = minutes
        summary[f"{arm}_seeds_reaching_90"] = f"{reached}/{seeds}"
    summary["wall_min_to_90"] = summary.pop("realtime_wall_min_to_90")
    single, double = summary["wall_min_to_90"], summary["two_actors_wall_min_to_90"]
    summary["two_actor_time_ratio"] = round(double / single, 2) if single and double else None
    summary["hil_wall_min_to_90"] = summary.pop("hil_wall_min_to_90")
    summary["hil_intervention_steps"] = [r["intervention_steps"] for r in by_arm.get("hil", [])]
    for arm in STEP_ARMS:
        steps, reached, seeds = median_steps(arm)
        summary[f"{arm}_steps_to_90"] = steps
        summary[f"{arm}_seeds_reaching_90"] = f"{reached}/{seeds}"
    graph, loop = summary["lockstep_steps_to_90"], summary["in_process_steps_to_90"]
    summary["lockstep_step_ratio"] = round(graph / loop, 2) if graph and loop else None
    graph_rows = [r for r in rows if r["arm"] != "in_process"]
    summary["lost_transitions"] = sum(r["lost_transitions"] for r in graph_rows)
    summary["duplicate_transitions"] = sum(r["duplicate_transitions"] for r in graph_rows)
    latencies = [r["act_latency_ms_p99"] for r in rows if r["arm"] in REALTIME_ARMS and r["act_latency_ms_p99"]]
    summary["act_latency_p99_ms"] = max(latencies) if latencies else None
    summary["learner_updates_per_s"] = {arm: [r["learner_updates_per_s"] for r in runs] for arm, runs in by_arm.items()
                                        if arm != "in_process"}
    summary["updates_per_transition"] = {arm: [r.get("updates_per_transition") for r in runs]
                                         for arm, runs in by_arm.items() if arm != "in_process"}
    summary["killed_actor_runs"] = [{key: r.get(key) for key in ("seed", "actor_killed_at_min", "node_restarts",
                                                                 "lost_transitions", "duplicate_transitions")}
                                    for r in by_arm.get("killed_actor", [])]
    cars = by_arm.get("car", [])
    summary["car_first_lap_min"] = round(statistics.median(
        r["first_lap_min"] if r["first_lap_min"] is not None else r["wall_s"] / 60 for r in cars), 2) if cars else None
    summary["car_seeds_lapping"] = f"{sum(r['first_lap_min'] is not None for r in cars)}/{len(cars)}"
    ratios = [r["lap_time_ratio"] if r["lap_time_ratio"] is not None else float("inf") for r in cars]
    ratio = statistics.median(ratios) if ratios else float("inf")
    summary["car_lap_time_ratio"] = round(ratio, 3) if ratio < float("inf") else None
    summary["car_failed_laps"] = [r["final"]["laps"] - r["final"]["clean_laps"] for r in cars]
    summary["not_measured"] = [name for name in ("wide_wall_min_to_90", "lockstep_step_ratio", "car_first_lap_min")
                               if summary.get(name) is None]
    seeds = {"wall_min_to_90": "realtime", "wide_wall_min_to_90": "wide", "two_actor_time_ratio": "two_actors",
             "hil_wall_min_to_90": "hil", "lockstep_step_ratio": "lockstep", "car_first_lap_min": "car"}
    summary["fewer_than_3_seeds"] = [f"{key} ({len(by_arm.get(arm, []))} of 3)" for key, arm in seeds.items()
                                     if summary.get(key) is not None and len(by_arm.get(arm, [])) < 3]
    return summary


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, by_steps, car) = plt.subplots(1, 3, figsize=(19, 4.5))
    for row in rows:
        points, steps = row["snapshots"], row["arm"] in STEP_ARMS
        axis = car if row["arm"] == "car" else by_steps if steps else ax
        label = f"{row['arm']} seed {row['seed']}" + ("" if row["arm"] == "car" else f" ({row_recipe(row)})")
        axis.plot([p["transitions" if steps else "minutes"] for p in points], [p["success"] for p in points],
                  marker="o", label=label)
        if row["arm"] == "car" and row["first_lap_min"] is not None:
            car.axvline(row["first_lap_min"], linestyle=":", color=axis.lines[-1].get_color())
    ax.set_xlabel("wall-clock minutes since `robot-rl train` started")
    ax.set_title("pixel pick-cube through the ROS 2 graph, real time")
    by_steps.set_xlabel("environment steps")
    by_steps.set_title("lockstep graph against the in-process loop")
    car.set_xlabel("wall-clock minutes since `robot-rl train` started")
    car.set_title("car, real time: clean timed laps (dotted: first practice lap)")
    for axis in (ax, by_steps, car):
        axis.axhline(0.9, color="grey", linestyle="--", linewidth=1)
        axis.set_ylabel("clean laps, 20 eval-split draws" if axis is car else "success, 50 eval-split episodes")
        axis.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", choices=[*ARMS, "in_process"], default="realtime")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minutes", type=float, default=20.0, help="wall-clock budget of a real-time run")
    parser.add_argument("--steps", type=int, default=10_000, help="step budget of a lockstep or in_process run")
    parser.add_argument("--snapshot-s", type=float, default=60.0,
                        help="seconds between the learner's snapshots (rows before issue 42's: 120)")
    parser.add_argument("--summary", action="store_true", help="summarize the recorded rows instead of running")
    parser.add_argument("--keep-run", type=Path, default=None,
                        help="keep the graph run (its logs, tensorboard, snapshots; each arm actor's per-step timing "
                        "in timing.csv, timing-robotN.csv with two) in this new directory instead of a temporary one, "
                        "to read afterwards")
    parser.add_argument("--quick", action="store_true",
                        help="a 1.5-minute (lockstep, in_process: 2,000-step) run of the arm, snapshots judged on 5 "
                        "episodes, not recorded")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops the run's graph as Ctrl-C does
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_LOCALHOST_ONLY", "1")
    if args.summary:
        rows = read_rows(ROWS)
        summary = summarize(rows, shipped_settings())
        (RESULTS / "graph_realtime.json").write_text(json.dumps(summary, indent=2))
        plot(rows, RESULTS / "graph_realtime.png")
        print(json.dumps(summary), flush=True)
        return
    # --quick: 1.5 minutes (or 2,000 steps), judged on 5 episodes, not recorded.
    minutes, snapshot_s, episodes = (1.5, 30.0, 5) if args.quick else (args.minutes, args.snapshot_s, 50)
    if args.arm == "car":  # timed laps, one per eval draw, instead of episodes
        episodes = 4 if args.quick else 20
    steps = 2_000 if args.quick else args.steps
    if args.keep_run is not None and args.arm == "in_process":
        parser.error("--keep-run keeps a graph run's directory; the in_process arm has none")
    if args.keep_run is not None and args.keep_run.exists():
        parser.error(f"--keep-run {args.keep_run} exists: a kept run is never written over")
    with tempfile.TemporaryDirectory(prefix="graph_realtime-") as tmp:
        run_dir = (args.keep_run or Path(tmp)) / "run"
        if args.keep_run is not None:
            args.keep_run.mkdir(parents=True)
        if args.arm == "in_process":
            row = run_in_process(args.seed, steps, episodes)
        elif args.arm == "lockstep":
            row = run_arm(args.arm, args.seed, steps, 0.0, run_dir, episodes)
        else:
            row = run_arm(args.arm, args.seed, int(minutes * 60 * arm_task(args.arm)[1]), snapshot_s, run_dir, episodes)
    if args.quick:
        print(json.dumps(row), flush=True)
        assert row.get("lost_transitions", 0) == 0 and row["snapshots"], row
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(ROWS, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
