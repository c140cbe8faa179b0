"""The planar arm's own `robot-rl` command: `robot-rl planar expert` measures its scripted expert in simulation
(what a robot author checks before recording demonstrations with it)."""

from __future__ import annotations

import argparse
import json

import numpy as np

from robot_rl.arguments import at_least


def cmd_expert(args: argparse.Namespace) -> int:
    from planar_robot.sim import PlanarArm
    from planar_robot.tasks import planar_reach

    task, arm, rng = planar_reach(), PlanarArm(), np.random.default_rng(args.seed)
    steps = []
    try:
        for _ in range(args.episodes):
            arm.reset(rng)
            for step in range(1, task.max_episode_steps + 1):
                arm.step(task.expert(arm.state(), rng, args.noise))
                if task.success(arm.state()):
                    steps.append(step)
                    break
    finally:
        arm.close()
    print(json.dumps({"episodes": args.episodes, "success_rate": len(steps) / args.episodes, "noise": args.noise,
                      "median_steps": float(np.median(steps)) if steps else None}))
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    planar = sub.add_parser("planar", help="the planar arm (a robot from an outside package)")
    planar_sub = planar.add_subparsers(dest="action", required=True)
    expert = planar_sub.add_parser("expert", help="the scripted expert's success in simulation (JSON)")
    expert.add_argument("--episodes", type=at_least(1), default=50)
    expert.add_argument("--noise", type=at_least(0.0, float), default=0.1)
    expert.add_argument("--seed", type=at_least(0), default=0)
    expert.set_defaults(handler=cmd_expert)
