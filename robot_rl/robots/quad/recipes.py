"""The quadrotor's `robot-rl` recipes without ROS: `juggle train` (PPO in the randomized vector simulation,
JuggleRL) and `juggle eval` (long juggling trials)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from robot_rl.arguments import at_least, in_range, name_equals_numbers, overwrite_flag
from robot_rl.outputs import atomic_path, check_output


def cmd_juggle(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from robot_rl.robots.quad.train import (JuggleTrainConfig, check_split, evaluate_policy, summarize,
                                             train_juggling)

    check_split(args.split)  # a mistyped split is refused before anything runs or is written
    if args.action == "eval":
        from robot_rl.agents.ppo import DeployedPolicy

        policy = DeployedPolicy.load(args.policy)
        overrides = dict(args.plant) | ({"ball_mass": args.ball_mass} if args.ball_mass else {})
        summary = summarize(evaluate_policy(policy, args.trials, args.max_s, split=args.split, overrides=overrides,
                                            seed=args.seed))
        print(json.dumps({"split": args.split, "fixed_plant": overrides, **summary}))
        return 0
    from robot_rl.robots.quad.vec_env import check_plant_overrides

    check_plant_overrides(dict(args.plant))  # before anything is written
    out = Path(args.out)
    run_dir = Path(args.run_dir) if args.run_dir else out.parent / f"{out.name}-run"
    check_output(out, "policy directory", overwrite=args.overwrite)
    check_output(run_dir, "run directory", overwrite=args.overwrite)
    config = replace(JuggleTrainConfig(), num_envs=args.num_envs, iterations=args.iterations, seed=args.seed,
                     eval_every=args.eval_every,
                     device=args.device, physics=args.physics, time_budget_s=args.time_budget_min * 60.0,
                     hard_fraction=args.hard_fraction, split=args.split, overrides=dict(args.plant))
    config.ppo = replace(config.ppo, history_steps=args.history_steps)
    from robot_rl.training.ppo_runner import sigint_stops

    # Both written in hidden siblings and renamed into place when training ends: a Ctrl-C or an error leaves
    # neither behind (and an --overwrite'n one as it was).
    with sigint_stops() as stop, atomic_path(out, directory=True) as out_tmp, \
            atomic_path(run_dir, directory=True) as run_tmp:
        card = train_juggling(config, out_tmp, run_tmp, stop=stop)
    print(json.dumps(card.get("evaluation_during_training", {})))
    return 0


def plant_flag(parser: argparse.ArgumentParser, where: str) -> None:
    """`--plant NAME=VALUE` (repeatable): a quadrotor plant parameter fixed in every `where`."""
    parser.add_argument("--plant", type=name_equals_numbers, action="append", default=[], metavar="NAME=VALUE",
                        help=f"fix a plant parameter in every {where} (repeatable; names as in "
                             "sim/quad/randomization.yaml, e.g. --plant restitution=0.7 "
                             "--plant action_latency_steps=2)")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    juggle = sub.add_parser("juggle", help="quadrotor juggling (JuggleRL): PPO training and evaluation, no ROS")
    juggle_sub = juggle.add_subparsers(dest="action", required=True)
    jtrain = juggle_sub.add_parser("train", help="train from scratch; exports the best evaluated policy")
    jtrain.add_argument("--out", required=True, help="policy directory (policy.safetensors + card.json)")
    jtrain.add_argument("--run-dir", help="checkpoints and TensorBoard (default: <out>-run)")
    jtrain.add_argument("--num-envs", type=at_least(1), default=2048)
    jtrain.add_argument("--iterations", type=at_least(1), default=1500)
    jtrain.add_argument("--time-budget-min", type=at_least(0.0, float), default=0.0,
                        help="stop after this many minutes (0: none)")
    jtrain.add_argument("--seed", type=at_least(0), default=0)
    jtrain.add_argument("--eval-every", type=at_least(1), default=50,
                        help="evaluate (and export the policy if it is the best so far) every this many iterations")
    jtrain.add_argument("--hard-fraction", type=in_range(0.0, 1.0), default=0.0,
                        help="share of training plants from the randomization's train_hard split (every parameter "
                             "at the hard end of its training range at once)")
    jtrain.add_argument("--split", default="train",
                        help="randomization split (or shift) of sim/quad/randomization.yaml to train, and evaluate "
                             "while training, on: train_wide widens restitution to 0.60; heldout or "
                             "train_restitution_low train an oracle, the most a policy could reach there")
    plant_flag(jtrain, "training draw")
    overwrite_flag(jtrain, "the policy and run directories (retraining a shipped policy too)")
    jtrain.add_argument("--history-steps", type=at_least(1), default=1,
                        help="observations the policy reads, newest last (1: the current one; 50: one second at "
                             "50 Hz through a temporal convolution, a policy with memory that can tell the ball it "
                             "hits from its last bounces; robot_rl.agents.memory)")
    jtrain.add_argument("--device", default="auto")
    jtrain.add_argument("--physics", default="auto", choices=["auto", "rollout", "warp", "mjx"],
                        help="simulation back end (auto: on a GPU MuJoCo MJX, the whole env on the device, else "
                             "MuJoCo Warp; mujoco.rollout on CPU threads)")
    jeval = juggle_sub.add_parser("eval", help="juggling trials in randomized sim; prints hits per trial (JSON)")
    jeval.add_argument("--policy", required=True)
    jeval.add_argument("--trials", type=at_least(1), default=10)
    jeval.add_argument("--max-s", type=at_least(0.02, float), default=600.0,
                       help="simulated length limit of a trial [s]")
    jeval.add_argument("--ball-mass", type=at_least(1e-4, float), help="fix the ball mass [kg] (e.g. 0.005)")
    plant_flag(jeval, "trial")
    jeval.add_argument("--seed", type=at_least(0), default=1000)
    jeval.add_argument("--split", default="eval",
                       help="plants from a split (or shift) of sim/quad/randomization.yaml: the training ranges "
                            "(eval), their hard end (train_hard), all beyond them (heldout), one parameter beyond "
                            "them (heldout_restitution, heldout_thrust, ...) or restitution_low")
    juggle.set_defaults(handler=cmd_juggle)
