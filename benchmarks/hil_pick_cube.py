"""Human in the loop on pixel pick-cube: steps to 90 % success with and without a scripted human.

Both arms are `benchmarks/pick_cube.py`'s setup (64x64 front + wrist cameras + proprioception,
sparse reward, frozen pretrained encoder, evaluation on the eval ranges every `--eval-every` steps,
50 episodes) with `--demos` scripted demonstrations (default 3: HIL-SERL's premise is a few
demonstrations plus corrections; with pick_cube.py's 20 the task is learned without help in
5-9k steps) and the same seeds, and the same learner: SAC + RLPD with behaviour cloning of the
policy's mode on intervention rows (`--bc-weight`, SACConfig.bc_weight; with no interventions
the without arm is plain SAC + RLPD, HIL-SERL's learner). In the HIL arm a scripted human
(`ScriptedIntervener` with its defaults: the decision logic the scripted human node drives a
gamepad with, see tests/test_hil_graph.py) takes over when the policy has been off track for a
while, with a takeover probability decaying over training; the transitions it drove go to the
online and demonstration buffers (HIL-SERL), and the cloning term learns the corrections made at
the policy's own states (HG-DAgger). Each run stops at its first evaluation at >= 90 %. Runs
train in `--jobs` worker processes with one torch thread each.

    python benchmarks/hil_pick_cube.py [--seeds 0 1 2] [--steps 20000] [--demos 3] [--bc-weight 1]
                                       [--jobs 2] [--quick] [--wide]

`--wide` runs all three arms on the wide variant (config/arm_pick_cube_wide.yaml: the cube anywhere
in 30 x 30 cm at any yaw, the encoder pretrained on that range), where the policy reaches states
the expert's own episodes rarely visit, which is where corrections should matter.

A third arm, `demos_matched`, is the fair control: no human, but as offline data the same number
of expert transitions the human arm of the same seed had received when it first reached 90 % (all
it received, if it never did), stored as corrections (intervention rows: the same RLPD half-batch
and the same behaviour-cloning term). It runs after the human arm of its seed. What it tests:
corrections at the policy's own states against the same amount of expert data given up front.

Targets (issue 4): `step_ratio` = median steps to 90 % with interventions / without <= 0.6;
(issue 21) `step_ratio_vs_demos_matched` = with / demos_matched <= 0.6. `expert_transitions`
gives, per arm and seed, the expert transitions beyond the `--demos` demonstrations all arms share.
A seed that never reaches 90 % counts as `--steps` + one evaluation period (a lower bound on its
true steps, so a ratio computed with it is conservative for the arm that did not finish).
Writes hil_pick_cube.png (success versus steps, both arms, every seed). Last line: JSON with
`step_ratio`, per-arm per-seed steps to 90 %, `wall_s`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from functools import partial
from multiprocessing import get_context
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pick_cube import ENV_ID, config_for  # noqa: E402

from robot_rl.tasks import expert_for_env  # noqa: E402
from robot_rl.training.gym_loop import Trainer  # noqa: E402

TARGET = 0.9
BC_WEIGHT = 1.0


def steps_to_target(rows: list[dict], cap: int) -> int:
    return next((r["steps"] for r in rows if r["success_rate"] >= TARGET), cap)


def plot(curves: dict[str, dict[int, list[dict]]], path: Path, wide: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for arm, style in (("without", "--"), ("with", "-"), ("demos_matched", ":")):
        for seed, rows in curves.get(arm, {}).items():
            ax.plot([r["steps"] for r in rows], [100 * r["success_rate"] for r in rows], style, marker="o",
                    label=f"{arm} interventions, seed {seed}")
    ax.axhline(100 * TARGET, color="grey", linestyle=":", linewidth=1)
    ax.set(xlabel="environment steps", ylabel="evaluation success (%)", ylim=(-2, 102),
           title=f"pixel pick-cube{' (wide)' if wide else ''}: scripted human in the loop vs. none")
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def train_arm(run: tuple[str, int, int], steps: int, eval_every: int, eval_episodes: int, demos: int,
              bc_weight: float, wide: bool) -> list[dict]:
    """One training run of one arm ("with" or "without" the scripted human, or "demos_matched" with
    that many expert transitions up front); its learning curve."""
    arm, seed, up_front = run
    torch.set_num_threads(1)
    base = config_for(seed, steps, False, eval_every, eval_episodes, wide)
    config = replace(base, interventions=arm == "with", stop_success_rate=TARGET, demo_episodes=demos,
                     correction_transitions=up_front, sac=replace(base.sac, bc_weight=bc_weight))
    trainer = Trainer(config, expert=expert_for_env(ENV_ID),
                      log=lambda row: print(json.dumps({"arm": arm, "seed": seed, **row}), flush=True))
    return trainer.run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20_000, help="step budget of each run")
    parser.add_argument("--eval-every", type=int, default=1_000)
    parser.add_argument("--demos", type=int, default=3, help="scripted demonstrations in both arms")
    parser.add_argument("--bc-weight", type=float, default=BC_WEIGHT,
                        help="behaviour cloning of intervention rows (SACConfig.bc_weight)")
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at once, one process and thread each")
    parser.add_argument("--quick", action="store_true", help="one seed, 2k steps, 10 evaluation episodes")
    parser.add_argument("--wide", action="store_true",
                        help="the arm_pick_cube_wide variant: the cube anywhere in 30 x 30 cm at any yaw")
    parser.add_argument("--out", default=".", help="directory for the PNG")
    parser.add_argument("--replot", metavar="JSONL", help="only redraw the PNG beside recorded rows (the JSON lines "
                        "this script printed; with --wide for a wide run)")
    args = parser.parse_args()
    if args.replot:
        curves: dict[str, dict[int, list[dict]]] = {}
        for line in Path(args.replot).read_text().splitlines():
            row = json.loads(line)
            if "arm" in row:
                curves.setdefault(row["arm"], {}).setdefault(row["seed"], []).append(row)
        plot(curves, Path(args.replot).with_suffix(".png"), args.wide)
        return
    seeds = args.seeds[:1] if args.quick else args.seeds
    steps, eval_every = (2_000, 1_000) if args.quick else (args.steps, args.eval_every)
    eval_episodes = 10 if args.quick else 50
    start = time.perf_counter()
    settings = dict(steps=steps, eval_every=eval_every, eval_episodes=eval_episodes, demos=args.demos,
                    bc_weight=args.bc_weight, wide=args.wide)
    curves: dict[str, dict[int, list[dict]]] = {"without": {}, "with": {}, "demos_matched": {}}
    # One run per worker process, one torch thread each: the runs are independent and a
    # single small-batch update does not keep two cores busy.
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as pool:
        runs = [(arm, seed, 0) for seed in seeds for arm in ("with", "without")]
        for (arm, seed, _), rows in zip(runs, pool.map(partial(train_arm, **settings), runs)):
            curves[arm][seed] = rows
        # The control gets what the human arm of its seed had given when it reached 90 %.
        received = {seed: next((r for r in rows if r["success_rate"] >= TARGET), rows[-1])["expert_transitions"]
                    for seed, rows in curves["with"].items()}
        runs = [("demos_matched", seed, received[seed]) for seed in seeds]
        for (arm, seed, _), rows in zip(runs, pool.map(partial(train_arm, **settings), runs)):
            curves[arm][seed] = rows
    cap = steps + eval_every
    reached = {arm: [steps_to_target(rows, cap) for rows in by_seed.values()] for arm, by_seed in curves.items()}
    finished = {arm: sum(s < cap for s in values) for arm, values in reached.items()}
    medians = {arm: statistics.median(values) for arm, values in reached.items()}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    png = Path(args.out) / f"hil_pick_cube{'_wide' if args.wide else ''}.png"
    plot(curves, png, args.wide)
    print(json.dumps({"step_ratio": round(medians["with"] / medians["without"], 3),
                      "step_ratio_vs_demos_matched": round(medians["with"] / medians["demos_matched"], 3),
                      "steps_to_90_with": reached["with"], "steps_to_90_without": reached["without"],
                      "steps_to_90_demos_matched": reached["demos_matched"], "seeds_reaching_90": finished,
                      "expert_transitions": {"with": [received[s] for s in seeds], "without": [0] * len(seeds),
                                             "demos_matched": [received[s] for s in seeds]},
                      "median_with": medians["with"], "median_without": medians["without"],
                      "median_demos_matched": medians["demos_matched"],
                      "never_reached_counts_as": cap, "seeds": seeds, "wall_s": round(time.perf_counter() - start, 1),
                      "demos": args.demos, "bc_weight": args.bc_weight, "wide": args.wide, "png": str(png),
                      "meets_target": medians["with"] <= 0.6 * medians["without"],
                      "meets_target_vs_demos_matched": medians["with"] <= 0.6 * medians["demos_matched"]}))


if __name__ == "__main__":
    main()
