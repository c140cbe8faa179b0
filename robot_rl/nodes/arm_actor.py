"""Arm actor node (`arm_actor`; the old name `actor` works with a deprecation warning until 0.2.0): the
actor node of `ros/actor_node.py` over the arm's topics (`ros/arm_io.py`)."""

from __future__ import annotations

from typing import NoReturn

from robot_rl.ros.actor_node import ActorNode, actor_params
from robot_rl.ros.arm_io import ACTOR_PARAMS, ArmActorIO
from robot_rl.ros.node_utils import run_node

PARAMS = actor_params("arm_lift", "/arm_sim/reset", ACTOR_PARAMS)


def main(args=None) -> NoReturn:
    run_node(lambda: ActorNode("arm_actor", PARAMS, ArmActorIO), args)


if __name__ == "__main__":
    raise SystemExit(main())
