"""LeRobot's HIL-SERL beside robot_rl on gym-hil's pixel pick-cube, with the same demonstrations (issue 40).

The rules, fixed before any result:

* Environment, both systems: `gym_hil/PandaPickCubeRandomCpu-v0` (`peer_lerobot/random_cube_env.py`): gym-hil
  0.1.14's pick-cube with pixels (front and wrist, 128 px), the cube placed at random, no reset delay, its cameras
  drawn as `gym_hil_cpu.py` draws them (OSMesa renders gym-hil's shadowed scene at ~1.6 steps/s here, so neither
  system could run at 10 Hz). gym-hil's 100-step limit and success flag.
* Demonstrations, both systems: 20 successful episodes of `gym_hil_expert.py: PickCubeExpert` (action noise 0.1,
  reset seeds from 1000), recorded once with `robot-rl record --env --expert` and exported with `robot-rl dataset
  export --format lerobot --camera-names pixels_front=front,pixels_wrist=wrist --task pick_cube --fps 10`: ours
  trains on the recording, LeRobot on the export. They are kept in benchmarks/results/peer_lerobot_demos/ (or
  --data-dir), never overwritten; its manifest.json holds the recipe and every file's SHA-256, checked at each use.
* LeRobot (`peer_lerobot/lerobot_processes.py`): its own `python -m lerobot.rl.learner` and actor processes from
  `.venv-peer-lerobot` (lerobot[hilserl] 0.4.4), `peer_lerobot/gym_hil_pick_cube.json` (its documented gym_hil
  values and defaults; NOTES.md says which the task forces), on the CPU, offline, wandb off.
* Ours: `robot-rl train --env <the same id> --graph` as `env_graph.py` runs it (its encoder, learner and real-time
  settings; `env_graph.run_arm`).
* Encoder, both systems: `policies/encoders/gym_hil_pick_cube_128` (pretrained only on gym-hil renders of random
  actions), frozen. Ours loads it as `env_graph.py` does; LeRobot's policy loads its conv stacks as a local Hugging
  Face model (`peer_lerobot/hf_encoder.py`) in place of the hub's `helper2424/resnet10` of its documented gym_hil
  configuration, frozen as documented, and pools them with its own spatial embeddings.
* Budget: `--steps` env steps (30,000: 50 minutes at 10 Hz); both actors step at 10 Hz on the wall clock.
* Snapshots every 2,000 env steps: ours, the learner's policy at every 2,000 stored transitions
  (`learner.snapshot_every_transitions`); LeRobot's, the policy its actor acts with at the first episode end at or
  after every 2,000 env steps (`peer_lerobot/snapshotting_actor.py` says why not its learner's `save_freq`); both
  also at the budget (ours: the learner's last policy; LeRobot's: the actor's at its last step).
* One evaluator judges both: robot_rl's `evaluate_policy`, 50 episodes with the cube positions seeded explicitly
  (reset seeds drawn from 10,000, NumPy's global state seeded per episode), deterministic actions, success = gym-hil's
  own flag. Ours through robot_rl's adapter in `.venv-gym-hil`; LeRobot's snapshots loaded by its own
  `SACPolicy.from_pretrained` in its venv, through its own environment processors (`peer_lerobot/snapshot_judge.py`).
  Snapshots in order until two consecutive pass (>= 90 %), each stopped at its sixth failure; the budget's policy
  is judged on all 50 (`success_at_budget`).
* Figures, per system: medians over seeds of the env steps (`steps_to_90`) and wall-clock minutes from the
  command's start (`wall_min_to_90`) to the first of two consecutive passing snapshots, a seed that never got there
  counted as its budget (its steps, its run's minutes); `seeds_reaching_90`; `success_at_budget`; the learners'
  updates per second. `step_ratio_vs_lerobot` / `wall_ratio_vs_lerobot` are ours over LeRobot's, and no result when
  LeRobot's policies succeeded in no judged episode (the summary then quotes LeRobot's own logs).
* Restart check (`--kill-learner-at-steps K`, a row apart from the medians): the learner is SIGKILLed once K env
  steps were played and resumed by the system's own path: ours, the graph's supervisor respawns it and it restores
  its checkpoint and transition journal while the actor resends what was not acknowledged; LeRobot's, `--resume=true`
  from its last checkpoint (`--lerobot-save-freq` sets how often it writes one; its default is every 20,000
  optimization steps), and its actor restarted if it does not reconnect. The row says whether the run continued and
  what it lost.

    .venv-gym-hil/bin/python benchmarks/peer_lerobot.py --system lerobot --seed 0 --steps 30000   # one row
    .venv-gym-hil/bin/python benchmarks/peer_lerobot.py --system ours --seed 0 --steps 30000      # one row
    .venv-gym-hil/bin/python benchmarks/peer_lerobot.py --system ours --seed 0 --kill-learner-at-steps 10000
    .venv/bin/python benchmarks/peer_lerobot.py --summary                                          # rows -> summary
    .venv-gym-hil/bin/python benchmarks/peer_lerobot.py --quick                                    # both, briefly

Each run appends a row to benchmarks/results/peer_lerobot.jsonl; `--summary` writes peer_lerobot.json and
peer_lerobot.png and prints the summary as the last line. `--quick`: 1,000 steps of each system (or --system's),
3 fresh demonstrations, snapshots every 250 steps judged on 5 episodes; it prints the summary of its rows last and
records nothing. Runs needing the venvs re-run themselves in `make gym-hil-env`'s; `make peer-lerobot` builds
LeRobot's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import env_graph
from graph_realtime import _commit, first_reached, kill_node, read_rows

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
HERE = BENCHMARKS / "peer_lerobot"
sys.path.insert(0, str(HERE))

import lerobot_processes  # noqa: E402

RESULTS = BENCHMARKS / "results"
ROWS = RESULTS / "peer_lerobot.jsonl"
DEMOS = RESULTS / "peer_lerobot_demos"
GYM_HIL_VENV = ROOT / ".venv-gym-hil"
STACK_VENV = ROOT / ".venv"
SYSTEMS = ("ours", "lerobot")
DEMO_SEED = 1000
EXPORT = ["--format", "lerobot", "--camera-names", "pixels_front=front,pixels_wrist=wrist", "--task", "pick_cube",
          "--fps", "10"]
SNAPSHOT_EVERY, EPISODES, DEMO_EPISODES = 2_000, 50, 20
QUICK_STEPS, QUICK_SNAPSHOT_EVERY, QUICK_EPISODES, QUICK_DEMO_EPISODES = 1_000, 250, 5, 3
TARGET = env_graph.TARGET
RUN_FACTS = "run_facts.json"
"""A LeRobot run's facts (seed, budget, commit, what its logs say), written in its directory before judging."""


# ---- demonstrations ----------------------------------------------------------------------------------------------

def demo_recipe(episodes: int) -> dict:
    from random_cube_env import ROBOT_RL_ENV_ID

    return {"env_id": ROBOT_RL_ENV_ID, "env_kwargs": env_graph.ENV_KWARGS, "expert": env_graph.EXPERT,
            "noise": env_graph.DEMO_NOISE, "seed": DEMO_SEED, "episodes": episodes, "export": EXPORT}


def file_digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under `folder` but its manifest, by relative path."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "manifest.json"}


def demonstrations(folder: Path, episodes: int) -> tuple[Path, Path]:
    """The recording (ours) and its LeRobot export in `folder`, recorded there first when `folder` does not exist.
    A folder that is not one complete recording of this recipe is refused, never overwritten."""
    recipe = demo_recipe(episodes)
    if folder.exists():
        check_demonstrations(folder, recipe)
    else:
        folder.mkdir(parents=True)
        started = time.time()
        recording, export = folder / "demos.zarr", folder / "demos_lerobot"
        env_graph.robot_rl("record", "--env", recipe["env_id"], "--env-kwargs", json.dumps(recipe["env_kwargs"]),
                           "--expert", recipe["expert"], "--noise", str(recipe["noise"]), "--seed", str(DEMO_SEED),
                           "--episodes", str(episodes), "--out", str(recording), *env_graph.ADAPTER,
                           log=folder / "record.log")
        # LeRobot's format needs the lerobot extra (pyarrow, av), which the stack's venv has and gym-hil's lacks
        env_graph.robot_rl("dataset", "export", str(recording), *EXPORT, "--out", str(export),
                           log=folder / "export.log", python=str(STACK_VENV / "bin" / "python"))
        manifest = {"recipe": recipe, "seconds": round(time.time() - started, 1), "files": file_digests(folder)}
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return folder / "demos.zarr", folder / "demos_lerobot"


def check_demonstrations(folder: Path, recipe: dict) -> None:
    """SystemExit naming what is wrong unless `folder` holds exactly what its manifest says, of `recipe`."""
    again = "remove it (or give another --data-dir) to record the demonstrations again"
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        files, recorded = manifest["files"], manifest["recipe"]
    except FileNotFoundError:
        raise SystemExit(f"peer_lerobot: {folder} has no manifest.json (an interrupted recording, or not this "
                         f"benchmark's); {again}") from None
    except (ValueError, KeyError, TypeError):
        raise SystemExit(f"peer_lerobot: {folder}/manifest.json is corrupt (not the JSON this benchmark writes); "
                         f"{again}") from None
    if recorded != recipe:
        raise SystemExit(f"peer_lerobot: {folder} was recorded with {json.dumps(recorded)}, not this benchmark's "
                         f"{json.dumps(recipe)}; {again}")
    found = file_digests(folder)
    differing = sorted(name for name in files.keys() | found.keys() if files.get(name) != found.get(name))
    if differing:
        raise SystemExit(f"peer_lerobot: {folder} is corrupt: {len(differing)} file(s) missing, added or changed "
                         f"since its manifest, e.g. {', '.join(differing[:3])}; {again}")


# ---- runs --------------------------------------------------------------------------------------------------------

def common_figures(snapshots: list[dict]) -> dict:
    """Env steps and minutes to 90 % by the rule (a snapshot stopped early is below it)."""
    scored = [{**s, "success": s["success"] or 0.0} for s in snapshots]
    return {"steps_to_90": first_reached(scored, TARGET, "transitions"),
            "wall_min_to_90": first_reached(scored, TARGET, "minutes")}


def run_ours(seed: int, steps: int, every: int, episodes: int, demos: Path, run_dir: Path,
             kill_at: int | None) -> dict:
    from random_cube_env import ROBOT_RL_ENV_ID

    killed: dict = {}
    done = threading.Event()
    if kill_at is not None:
        threading.Thread(target=kill_our_learner_at, args=(run_dir, kill_at, killed, done), daemon=True).start()
    try:
        row = env_graph.run_arm("one_actor", seed, steps / (60 * env_graph.CONTROL_HZ), 0.0, run_dir, demos, episodes,
                                env_id=ROBOT_RL_ENV_ID,
                                extra=["--set", f"learner.snapshot_every_transitions={every}"])
    finally:
        done.set()
    final = env_graph.graph_judge(run_dir, episodes)(run_dir / "policy.policy", None)
    row.pop("arm")
    row.pop("minutes_to_90")  # env_graph's name for wall_min_to_90 (common_figures)
    restart = our_restart(run_dir, row, killed) if kill_at is not None else None
    return {"system": "ours", "seed": seed, "steps_budget": steps, **row, **common_figures(row["snapshots"]),
            "success_at_budget": final["success_rate"], "restart": restart}


def kill_our_learner_at(run_dir: Path, at_steps: int, killed: dict, done: threading.Event) -> None:
    """SIGKILLs the graph's learner once its episodes.jsonl shows `at_steps` stored transitions."""
    episodes = run_dir / "episodes.jsonl"
    while not done.wait(1.0):
        lines = episodes.read_text().splitlines() if episodes.exists() else []
        try:
            last = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:  # a line being written
            continue
        if last and last["env_steps"] >= at_steps:
            kill_node(run_dir, "learner")
            killed.update(killed_at_env_steps=last["env_steps"], updates_at_kill=last["learner_updates"])
            return


def our_restart(run_dir: Path, row: dict, killed: dict) -> dict:
    """Whether the killed learner came back and went on, and what the run lost, from the learner's own log."""
    if not killed:
        return {"continued": None, "why": "the run ended before the kill"}
    log = (run_dir / "logs" / "learner.log").read_text(errors="replace")
    resumed = re.search(r"resumed from \S+: (\d+) updates, (\d+) transitions in the buffer", log)
    restored = int(resumed.group(1)) if resumed else 0
    return {**killed, "continued": bool(resumed) and row["transitions_stored"] > killed["killed_at_env_steps"],
            "node_restarts": run_dir.with_suffix(".log").read_text(errors="replace").count("; restarting"),
            "updates_restored": restored, "transitions_restored": int(resumed.group(2)) if resumed else 0,
            "updates_lost_at_least": killed["updates_at_kill"] - restored,
            "env_steps_lost": row["lost_transitions"]}


def run_lerobot(seed: int, steps: int, every: int, episodes: int, export: Path, run_dir: Path,
                kill_at: int | None, save_freq: int | None) -> dict:
    run = lerobot_processes.LeRobotRun(run_dir, export, env_graph.ENCODER, seed, steps, every, save_freq)
    run_facts = {"seed": seed, "steps_budget": steps, "commit": _commit(), "snapshot_every": every,
                 "episodes_per_snapshot": episodes, "kill_learner_at_steps": kill_at, **run.run(kill_at),
                 "date": time.strftime("%Y-%m-%d")}
    # Judging takes a while after the run: an interrupted judging is finished from this (--judge-run), not by
    # hours of running again.
    (run_dir / RUN_FACTS).write_text(json.dumps(run_facts) + "\n")
    return judge_lerobot_run(run_dir, run_facts)


def judge_lerobot_run(run_dir: Path, run_facts: dict) -> dict:
    """LeRobot's row: the run's facts and its snapshots judged. Interrupted, the run directory stays and the
    command that finishes the row (--judge-run) is printed."""
    facts = dict(run_facts)
    seed, steps, commit = facts.pop("seed"), facts.pop("steps_budget"), facts.pop("commit")
    started, first_at = facts.pop("started"), facts.pop("first_update_at")
    episodes = facts["episodes_per_snapshot"]
    judge = lerobot_processes.SnapshotJudge(run_dir, episodes, env_graph.EVAL_SEED)
    try:
        paths = lerobot_processes.snapshot_paths(run_dir / "snapshots")
        snapshots = env_graph.judge_in_order(paths, judge, started, episodes)
        final = [p for p in paths if lerobot_processes.env_steps_of(p) == steps]
        success_at_budget = judge(final[0], None)["success_rate"] if final else None
    except BaseException:
        print(f"peer_lerobot: judging LeRobot's run stopped; the run is kept: finish its row with "
              f"--judge-run {run_dir}", file=sys.stderr, flush=True)
        raise
    finally:
        judge.close()
    loads = json.loads((paths[-1] / "snapshot.json").read_text())["parameter_loads"] if paths else 0
    return {"system": "lerobot", "seed": seed, "steps_budget": steps, **facts,
            "learner_updates_per_s": round(facts["learner_updates"] / max(facts["wall_s"], 1.0), 3),
            "first_update_min": round((first_at - started) / 60, 2) if first_at else None,
            "parameter_loads": loads, "snapshots": snapshots, **common_figures(snapshots),
            "success_at_budget": success_at_budget, "lerobot_version": lerobot_processes.version(),
            "config": str(lerobot_processes.CONFIG.relative_to(ROOT)), "commit": commit}


def judge_interrupted_run(run_dir: Path) -> dict:
    """The row of a LeRobot run whose judging was interrupted, from its directory (its run facts and snapshots);
    the row keeps the run's commit and says when it was judged (`judged_later`)."""
    facts_path = run_dir / RUN_FACTS
    if not facts_path.is_file():
        raise SystemExit(f"peer_lerobot: {facts_path} is missing: {run_dir} is not a LeRobot run that played its "
                         "budget (the folder an interrupted row printed)")
    return {**judge_lerobot_run(run_dir, json.loads(facts_path.read_text())),
            "judged_later": time.strftime("%Y-%m-%d")}


def run_system(system: str, seed: int, steps: int, quick: bool, demos: tuple[Path, Path], run_dir: Path,
               kill_at: int | None, save_freq: int | None) -> dict:
    every, episodes = (QUICK_SNAPSHOT_EVERY, QUICK_EPISODES) if quick else (SNAPSHOT_EVERY, EPISODES)
    if system == "ours":
        row = run_ours(seed, steps, every, episodes, demos[0], run_dir, kill_at)
    else:
        row = run_lerobot(seed, steps, every, episodes, demos[1], run_dir, kill_at, save_freq)
    row.update(snapshot_every=every, kill_learner_at_steps=kill_at)
    print(json.dumps(row), flush=True)
    return row


# ---- summary -----------------------------------------------------------------------------------------------------

def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def system_figures(runs: list[dict]) -> dict:
    """Medians over seeds; a seed that never reached 90 % counts as its budget (steps, the run's minutes)."""
    steps = [r["steps_to_90"] if r["steps_to_90"] is not None else r["steps_budget"] for r in runs]
    minutes = [r["wall_min_to_90"] if r["wall_min_to_90"] is not None else r["wall_s"] / 60 for r in runs]
    wall = median(minutes)
    return {"steps_to_90": median(steps), "wall_min_to_90": None if wall is None else round(wall, 2),
            "success_at_budget": median([r["success_at_budget"] or 0.0 for r in runs]),
            "seeds_reaching_90": f"{sum(r['steps_to_90'] is not None for r in runs)}/{len(runs)}",
            "learner_updates_per_s": median([r["learner_updates_per_s"] for r in runs])}


def learned(runs: list[dict]) -> bool:
    """Whether any judged episode of any of these runs' policies succeeded."""
    return any(r["success_at_budget"] or any(s["successes"] for s in r["snapshots"]) for r in runs)


def summarize(rows: list[dict]) -> dict:
    """Both systems' figures over the timed rows (restart checks apart), and ours over LeRobot's."""
    timed = [r for r in rows if r.get("kill_learner_at_steps") is None]
    by_system = {system: [r for r in timed if r["system"] == system] for system in SYSTEMS}
    versions = sorted({r["lerobot_version"] for r in rows if r["system"] == "lerobot"})
    summary: dict = {"lerobot_version": ", ".join(versions) or lerobot_processes.version(), "rows": len(rows),
                     "steps_budget": sorted({r["steps_budget"] for r in timed}),
                     "snapshot_every": sorted({r["snapshot_every"] for r in timed}),
                     "rule": "first of two consecutive snapshots at >= 90 % on the same seeded episodes; a seed "
                             "that never got there counts as its budget"}
    for system, runs in by_system.items():
        for key, value in system_figures(runs).items():
            summary[f"{system}_{key}"] = value
    ours, theirs = by_system["ours"], by_system["lerobot"]
    summary["lerobot_learned"] = learned(theirs) if theirs else None
    summary["step_ratio_vs_lerobot"] = summary["wall_ratio_vs_lerobot"] = None
    if ours and theirs and summary["lerobot_learned"]:
        summary["step_ratio_vs_lerobot"] = round(summary["ours_steps_to_90"] / summary["lerobot_steps_to_90"], 3)
        summary["wall_ratio_vs_lerobot"] = round(summary["ours_wall_min_to_90"] / summary["lerobot_wall_min_to_90"],
                                                 3)
        summary["lerobot_median_is_its_budget"] = 2 * sum(r["steps_to_90"] is not None for r in theirs) <= len(theirs)
    elif theirs:
        summary["ratio_not_a_result"] = ("LeRobot's policies succeeded in no judged episode of any seed, so it did "
                                         "not learn; its own logs per seed are under lerobot_logs")
    summary["lerobot_logs"] = [{key: r.get(key) for key in (
        "seed", "learner_updates", "first_update_min", "learner_updates_per_s", "actor_episodes", "actor_successes",
        "parameter_loads", "env_steps", "ended", "problems")} for r in theirs]
    summary["restart_checks"] = [{"system": r["system"], "seed": r["seed"], **(r["restart"] or {"continued": None})}
                                 for r in rows if r.get("kill_learner_at_steps") is not None]
    summary["lost_transitions_ours"] = sum(r["lost_transitions"] for r in ours)
    summary["fewer_than_3_seeds"] = [system for system, runs in by_system.items() if len(runs) < 3]
    return summary


def curve_points(row: dict) -> list[dict]:
    """A timed row's points for the plot, in order: each snapshot, then the budget's policy on all 50 episodes. A
    snapshot judged in full is its success; one stopped at its sixth failure is the rate over the episodes it
    played, with what the unplayed ones could make it (all failing, all succeeding) as its range. The budget's
    result takes the place of a snapshot taken at the budget, which it judged again in full."""
    points = []
    for s in row["snapshots"]:
        if s["success"] is not None:
            points.append({"steps": s["transitions"], "minutes": s["minutes"], "success": s["success"],
                           "low": s["success"], "high": s["success"], "kind": "full"})
        else:
            points.append({"steps": s["transitions"], "minutes": s["minutes"],
                           "success": s["successes"] / s["stopped_after"], "low": s["successes"] / EPISODES,
                           "high": s["success_at_most"], "kind": "stopped"})
    budget_minutes = row["wall_s"] / 60 if row["system"] == "ours" else row["snapshots"][-1]["minutes"]
    if points and points[-1]["steps"] >= row["steps_budget"]:
        budget_minutes = points.pop()["minutes"]
    points.append({"steps": row["steps_budget"], "minutes": budget_minutes, "success": row["success_at_budget"],
                   "low": row["success_at_budget"], "high": row["success_at_budget"], "kind": "budget"})
    return points


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    colours = {"ours": "tab:blue", "lerobot": "tab:orange"}
    markers = {"full": "o", "stopped": "v", "budget": "s"}
    for row in rows:
        if row.get("kill_learner_at_steps") is not None:
            continue
        points = curve_points(row)
        style = {"color": colours[row["system"]], "alpha": 0.45 + 0.25 * (row["seed"] % 3)}
        for axis, key in zip(axes, ("steps", "minutes")):
            axis.plot([p[key] for p in points], [p["success"] for p in points], linewidth=1,
                      label=f"{row['system']} seed {row['seed']}", **style)
            for kind, marker in markers.items():
                these = [p for p in points if p["kind"] == kind]
                axis.errorbar([p[key] for p in these], [p["success"] for p in these], fmt=marker, markersize=4,
                              yerr=[[p["success"] - p["low"] for p in these],
                                    [p["high"] - p["success"] for p in these]],
                              elinewidth=0.6, capsize=0, **style)
    for axis, label in zip(axes, ("env steps", "wall-clock minutes since the run's start")):
        axis.axhline(TARGET, color="grey", linestyle="--", linewidth=1)
        axis.set_ylim(-0.02, 1.02)
        axis.set_xlabel(label)
        axis.set_ylabel(f"success on {EPISODES} seeded episodes")
        axis.legend(fontsize=6, loc="center right")
    axes[0].set_title("gym-hil pick-cube, pixels, random cube: robot_rl vs LeRobot HIL-SERL", fontsize=10)
    fig.text(0.01, 0.01, "o: all 50 judged.  v: stopped at its sixth failure; the rate over the episodes played, the "
             "bar what the unplayed ones could make it.  s: the budget's policy on all 50.", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)


# ---- command line ------------------------------------------------------------------------------------------------

def check_venvs() -> None:
    """One line naming the make target when a venv is missing; then this script again in gym-hil's venv."""
    for venv, target in ((STACK_VENV, "make setup"), (GYM_HIL_VENV, "make gym-hil-env"),
                         (lerobot_processes.VENV, "make peer-lerobot")):
        if not (venv / "bin" / "python").is_file():
            raise SystemExit(f"peer_lerobot: {venv.relative_to(ROOT)} is missing; build it with `{target}`")
    if Path(sys.prefix).resolve() != GYM_HIL_VENV.resolve():
        python = str(GYM_HIL_VENV / "bin" / "python")
        os.execv(python, [python, str(Path(__file__).resolve()), *sys.argv[1:]])


def run_systems(args: argparse.Namespace) -> list[dict]:
    """The asked systems' rows, run in a temporary directory that is deleted once they are judged (a failure
    or an interruption keeps it: a LeRobot run's judging can be finished, `--judge-run`)."""
    systems = [args.system] if args.system else list(SYSTEMS)
    steps = QUICK_STEPS if args.quick else args.steps
    tmp = Path(tempfile.mkdtemp(prefix="peer_lerobot-"))
    data_dir = tmp / "demos" if args.quick else args.data_dir
    demos = demonstrations(data_dir, QUICK_DEMO_EPISODES if args.quick else DEMO_EPISODES)
    rows = [run_system(system, args.seed, steps, args.quick, demos, tmp / system, args.kill_learner_at_steps,
                       args.lerobot_save_freq) for system in systems]
    shutil.rmtree(tmp)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--system", choices=SYSTEMS, help="the system to run (--quick: both unless given)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=30_000, help="env steps of the run (the budget)")
    parser.add_argument("--data-dir", type=Path, default=DEMOS, help="where the demonstrations are kept")
    parser.add_argument("--kill-learner-at-steps", type=int, metavar="K",
                        help="restart check: kill the learner after K env steps and resume it")
    parser.add_argument("--lerobot-save-freq", type=int, metavar="N",
                        help="LeRobot's save_freq (optimization steps between checkpoints, its resume points); "
                        "default: the config's, LeRobot's 20,000")
    parser.add_argument("--judge-run", type=Path, metavar="DIR",
                        help="finish the row of a LeRobot run whose judging was interrupted (its directory, as the "
                        "interrupted command printed it)")
    parser.add_argument("--summary", action="store_true", help="summarize the recorded rows instead of running")
    parser.add_argument("--quick", action="store_true", help="1,000 steps each, 3 demonstrations, snapshots every "
                        "250 steps judged on 5 episodes; nothing recorded")
    args = parser.parse_args()
    # `kill` stops a run as Ctrl-C does: the systems' processes, which live in sessions of their own, with it
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.summary:
        rows = read_rows(ROWS)
        summary = summarize(rows)
        (RESULTS / "peer_lerobot.json").write_text(json.dumps(summary, indent=2) + "\n")
        plot(rows, RESULTS / "peer_lerobot.png")
        print(json.dumps(summary), flush=True)
        return
    if not args.quick and args.system is None and args.judge_run is None:
        parser.error("--system is required (or --summary, --judge-run or --quick)")
    if args.kill_learner_at_steps is not None and not 0 < args.kill_learner_at_steps < args.steps:
        parser.error("--kill-learner-at-steps must be between 0 and --steps")
    check_venvs()
    # Software GL before anything imports MuJoCo (the judge of our snapshots runs here); robot-rl's processes
    # import the environment's module (random_cube_env) from peer_lerobot/.
    os.environ.update(env_graph.subprocess_env())
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ["PYTHONPATH"]])
    env_graph.check_setup()
    if args.judge_run is not None:
        rows = [judge_interrupted_run(args.judge_run)]
        print(json.dumps(rows[0]), flush=True)
    else:
        rows = run_systems(args)
    if args.quick:
        assert all(row["snapshots"] for row in rows), "a --quick run judged no snapshot"
        print(json.dumps(summarize(rows)), flush=True)
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(ROWS, "a") as f:
        f.write(json.dumps(rows[0]) + "\n")
    print(json.dumps(summarize(read_rows(ROWS))), flush=True)  # the figures so far; --summary also writes them


if __name__ == "__main__":
    main()
