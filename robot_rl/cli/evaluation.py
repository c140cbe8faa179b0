"""`robot-rl eval --policy PATH`: evaluate any saved policy (robot_rl.training.evaluate)."""

from __future__ import annotations

import argparse
import json

from robot_rl.arguments import at_least
from robot_rl.outputs import atomic_write_text, check_output


def cmd_eval(args: argparse.Namespace) -> int:
    from robot_rl.cli.gym import checked_env_id, env_kwargs_arg
    from robot_rl.training.evaluate import evaluate_saved

    if args.out:
        check_output(args.out, "evaluation file", overwrite=args.overwrite)
    result = evaluate_saved(args.policy, episodes=args.episodes, seed=args.seed, task=args.task,
                            env_id=checked_env_id(args.env) if args.env else None,
                            env_kwargs=env_kwargs_arg(args.env_kwargs), split=args.split, max_s=args.max_s)
    if args.out:
        atomic_write_text(args.out, json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "results"}), flush=True)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="evaluate a saved policy: a train --env run, a graph run or a shipped policy")
    ev.add_argument("--policy", required=True, help="run directory (train --env or train), policy.pt, or a shipped "
                                                     "policy directory (card.json; policies/)")
    ev.add_argument("--task", help="a graph run's task (default: the one in its params.yaml)")
    ev.add_argument("--env", help="a train --env policy on another registered Gymnasium id (default: its own)")
    ev.add_argument("--env-kwargs", metavar="JSON", help="options for the environment (default: the run's)")
    ev.add_argument("--episodes", type=at_least(1), default=50, help="episodes (or the robot's trials or timed laps)")
    ev.add_argument("--seed", type=at_least(0), default=10_000, help="first seed of the evaluation draws")
    ev.add_argument("--split", help="randomization split of the evaluation draws (default: eval)")
    ev.add_argument("--max-s", type=at_least(0.02, float),
                    help="simulated seconds a trial or a timed lap may last (default: the robot's own)")
    ev.add_argument("--out", help="also write the full result (every episode) to this JSON file")
    ev.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    ev.set_defaults(handler=cmd_eval)
