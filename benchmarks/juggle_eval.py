"""Juggling evaluation of a policy (default the shipped ``policies/quad_juggle``) in randomized simulation.

Each set is 10 trials, each until the ball drops, the quadrotor crashes or 10 minutes of simulated time, with
plants drawn from a split of ``sim/quad/randomization.yaml``:

* ``eval``: the training ranges (today's; the 5 g ball is an override on top, outside the training range);
* ``heldout``: every transfer parameter beyond its range at once (reported; issue 41 retired its target);
* ``train_hard``: those parameters all at the hard end of their training ranges at once;
* ``restitution_low``: a ball of restitution 0.60-0.70, the rest from ``eval`` (JuggleRL measured a real
  ball at ~0.64 outside the racket's sweet spot);
* one shift at a time (``heldout_<parameter>``): that parameter alone 10-20 % of its training width beyond
  the widened training range on its harder side, the rest from ``eval``; ``heldout_restitution`` (beyond the
  widened restitution range, 0.52-0.56) is reported without a target.

Counted as JuggleRL counts (`robot_rl/robots/quad/juggling.py`): a true hit is a racket contact with the
ball's centre inside the racket cylinder, a velocity jump, and at least 0.6 s after the last one. Apexes are
measured above the racket surface where it met the ball. JuggleRL's 311 / 462 / 146 were counted on a real
quadrotor; ours are simulated. A set's rate, ``hits_per_trial_min``, is its hits over the trials' full
length (a trial whose ball dropped at 5 s still counts its 10 minutes): the rate a person watching would
see. ``ratio`` is that rate over the ``eval`` set's.

    python benchmarks/juggle_eval.py [--policy DIR] [--oracle DIR] [--trials 10] [--max-s 600] [--quick]

``--oracle DIR``: a policy trained on ``train_restitution_low`` (restitution 0.60-0.70 alone:
``robot-rl juggle train --split train_restitution_low``), judged on ``restitution_low`` beside the policy.
``--quick``: 2 trials of 20 s per set (a smoke run, not the figure; each set costs its simulated time
whatever the number of trials, ~2 ms a step here).

Targets (issue 41): ``mean_hits`` >= 600, ``max_hits`` >= 700, ``mean_hits_5g`` >= 500 on ``eval``;
``restitution_low`` ratio >= 0.5, or, when the oracle's own ratio there is below 0.5, >= 0.8 of the oracle's
rate; every other one-shift row's ratio >= 0.5 (``min_heldout_ratio``). The targets of issues 5 and 21
(mean_hits >= 311, max >= 462, 5 g >= 146, mean_hits_heldout >= 150) are reported under ``earlier_targets``.
Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from robot_rl.agents.ppo import DeployedPolicy
from robot_rl.resources import package_path
from robot_rl.robots.quad.train import evaluate_policy, summarize

ONE_SHIFT = ("heldout_ball_mass", "heldout_thrust", "heldout_motor_lag", "heldout_latency", "heldout_position_noise",
             "heldout_velocity_noise", "heldout_rate_noise")
"""The one-shift held-out rows with a target (ratio >= 0.5)."""


def judge(policy, split: str, trials: int, max_s: float, seed: int, overrides: dict | None = None) -> dict:
    summary = summarize(evaluate_policy(policy, trials, max_s, split=split, seed=seed, overrides=overrides))
    summary["hits_per_trial_min"] = 60.0 * sum(summary["hits"]) / (trials * max_s)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default=str(package_path("policies/quad_juggle")))
    parser.add_argument("--oracle", help="a policy trained on train_restitution_low, judged on restitution_low")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--max-s", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--write-card", action="store_true", help="record the result in the policy's card.json")
    parser.add_argument("--out", help="also write the last line's JSON to this file")
    parser.add_argument("--quick", action="store_true", help="2 trials of 20 s per set (same measurement, shorter)")
    args = parser.parse_args()
    # One thread: a forward pass over a few trials gains nothing from more, and an OpenMP team spinning
    # beside the simulation's threads (or a training run's) slowed a whole evaluation several-fold.
    torch.set_num_threads(1)
    if args.quick:
        args.trials, args.max_s = 2, 20.0
        if args.write_card:
            parser.error("--write-card records the full evaluation; run it without --quick")
    policy = DeployedPolicy.load(args.policy)
    oracle = DeployedPolicy.load(args.oracle) if args.oracle else None
    started = time.monotonic()
    # (name, split, seed offset, overrides): each set its own plants; the seeds are those of earlier rows
    sets = [("eval", "eval", 0, None), ("5g", "eval", 1, {"ball_mass": 0.005}), ("heldout", "heldout", 2, None),
            ("train_hard", "train_hard", 3, None), ("restitution_low", "restitution_low", 4, None),
            *((split, split, 5 + i, None) for i, split in enumerate(("heldout_restitution", *ONE_SHIFT)))]
    rows = {}
    for name, split, offset, overrides in sets:
        rows[name] = judge(policy, split, args.trials, args.max_s, args.seed + offset, overrides)
        row = rows[name]
        print(f"{name}: true hits {row['hits']} ({row['hits_per_trial_min']:.1f}/min of trial, mean trial "
              f"{row['mean_duration_s']:.0f} s, ended by {row['ended_by']}), mean apex "
              f"{row['mean_apex_above_contact_m']:.2f} m above the contact, racket "
              f"{row['mean_racket_speed_at_hit_m_s']:.2f} m/s at the hits", flush=True)
    eval_rate = rows["eval"]["hits_per_trial_min"]
    ratios = {name: row["hits_per_trial_min"] / eval_rate if eval_rate > 0 else 0.0 for name, row in rows.items()}
    result = {"policy": str(args.policy), "history_steps": policy.history_steps,
              "mean_hits": rows["eval"]["mean_hits"], "max_hits": rows["eval"]["max_hits"],
              "mean_hits_5g": rows["5g"]["mean_hits"], "max_hits_5g": rows["5g"]["max_hits"],
              "mean_hits_heldout": rows["heldout"]["mean_hits"],
              "mean_hits_train_hard": rows["train_hard"]["mean_hits"],
              "hits_per_min": round(eval_rate, 1),
              "rows": {name: {"hits_per_trial_min": round(row["hits_per_trial_min"], 1),
                              "ratio": round(ratios[name], 3), "mean_hits": row["mean_hits"],
                              "max_hits": row["max_hits"], "mean_trial_s": round(row["mean_duration_s"], 1),
                              "racket_speed_at_hit_m_s": round(row["mean_racket_speed_at_hit_m_s"], 3)}
                       for name, row in rows.items()},
              "min_heldout_ratio": round(min(ratios[name] for name in ONE_SHIFT), 3),
              "restitution_low_ratio": round(ratios["restitution_low"], 3)}
    restitution_target = 0.5 * eval_rate
    if oracle is not None:
        oracle_row = judge(oracle, "restitution_low", args.trials, args.max_s, args.seed + 4)
        print(f"oracle on restitution_low: true hits {oracle_row['hits']} "
              f"({oracle_row['hits_per_trial_min']:.1f}/min of trial), racket "
              f"{oracle_row['mean_racket_speed_at_hit_m_s']:.2f} m/s at the hits", flush=True)
        result["oracle"] = {"policy": str(args.oracle),
                            "hits_per_trial_min": round(oracle_row["hits_per_trial_min"], 1),
                            "mean_hits": oracle_row["mean_hits"],
                            "racket_speed_at_hit_m_s": round(oracle_row["mean_racket_speed_at_hit_m_s"], 3)}
        if oracle_row["hits_per_trial_min"] < 0.5 * eval_rate:
            restitution_target = 0.8 * oracle_row["hits_per_trial_min"]
            result["restitution_low_target_from"] = "0.8 of the oracle (the oracle juggles less than 0.5 of eval)"
    result["restitution_low_target_hits_per_min"] = round(restitution_target, 1)
    result["meets_targets"] = bool(
        rows["eval"]["mean_hits"] >= 600 and rows["eval"]["max_hits"] >= 700 and rows["5g"]["mean_hits"] >= 500
        and rows["restitution_low"]["hits_per_trial_min"] >= restitution_target and result["min_heldout_ratio"] >= 0.5)
    result["earlier_targets"] = {"issue 5: mean >= 311, max >= 462, 5 g >= 146": bool(
        rows["eval"]["mean_hits"] >= 311 and rows["eval"]["max_hits"] >= 462 and rows["5g"]["mean_hits"] >= 146),
        "issue 21: mean_hits_heldout >= 150 (retired by issue 41)": bool(rows["heldout"]["mean_hits"] >= 150)}
    result.update({"hit_rule": "JuggleRL true hit: in the racket cylinder, velocity jump, >= 0.6 s since the last",
                   "counted_on": "simulation (JuggleRL's targets were counted on a real quadrotor)",
                   "trials": args.trials, "max_s": args.max_s, "seed": args.seed, "quick": args.quick,
                   "wall_clock_s": round(time.monotonic() - started, 1)})
    if args.write_card:
        card_path = Path(args.policy) / "card.json"
        card = json.loads(card_path.read_text())
        card["evaluation"] = {"benchmark": "benchmarks/juggle_eval.py", **result,
                              "trials": {name: row for name, row in rows.items()}}
        card_path.write_text(json.dumps(card, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
