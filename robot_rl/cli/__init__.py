"""The `robot-rl` command.

  robot-rl train [--task TASK] [--steps N] ...        start the task's node graph and train
  robot-rl train --env <gymnasium id> [--encoder DIR]  SAC/RLPD on any Gymnasium env, no ROS
  robot-rl pretrain-encoder --out DIR                 pretrain the shipped vision encoder
  robot-rl node NAME [--ros-args ...]                run one node (what `ros2 run` would)
  robot-rl demos --task TASK --episodes 20 --out demos.zarr
  robot-rl demos --env ID --goal "pick up the cube" --out pick.zarr
  robot-rl record --task TASK --device spacemouse --episodes 20 --out demos.zarr
  robot-rl dataset verify demos.zarr                 check every chunk of a dataset (exists, checksum)
  robot-rl report RUN_DIR                            success and intervention rate over a run (PNG)
  robot-rl view DATASET|RUN_DIR --out view.rrd       replay episodes / a run's learning curve in Rerun
  robot-rl eval --policy RUN_DIR|POLICY_DIR          evaluate a saved policy (train --env, graph run, shipped)
  robot-rl reward train --demos DATASET... --out DIR  train the local progress reward model
  robot-rl reward eval --demos DATASET... --model DIR  VOC, negative share, wrong goal, done F1

and each robot's own recipes (`robot_rl/robots/<robot>/recipes.py`; `robot-rl --help` lists them).
"""

from __future__ import annotations

import sys

from robot_rl.cli import data, evaluation, graph, models, view
from robot_rl.arguments import Parser
from robot_rl.outputs import expected_failure
from robot_rl.robots import registry


def build_parser() -> Parser:
    parser = Parser(prog="robot-rl", description="Reinforcement learning on robots over ROS 2.")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (graph, models, data, evaluation, view):
        module.add_parsers(sub)
    for add_parsers in registry.recipe_parsers():
        add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # --debug anywhere before --ros-args (users put it after the subcommand too).
    end = argv.index("--ros-args") if "--ros-args" in argv else len(argv)
    debug = "--debug" in argv[:end]
    argv = [a for a in argv[:end] if a != "--debug"] + argv[end:]
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    args.debug = debug
    if rest and args.command != "node":  # a node takes its --ros-args
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.rest = rest  # a node's ROS arguments
    args.argv = argv  # the command line as given: an interrupted session prints how to carry it on
    name = " ".join(filter(None, (args.command, getattr(args, "action", None))))
    try:
        return args.handler(args)
    except Exception as exc:
        # A failure the user can cause and fix: one line, exit code 2; anything else is a bug and keeps its traceback.
        line = expected_failure(exc)
        if args.debug or line is None:
            raise
        print(f"robot-rl {name}: {line}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"robot-rl {name}: interrupted; outputs being written were not kept", file=sys.stderr, flush=True)
        return 130
