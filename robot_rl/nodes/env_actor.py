"""Gymnasium-environment actor node (`env_actor`): the actor node of `ros/actor_node.py` over an
environment's topics (`ros/env_io.py`), for the task of the run's env task file (`env_task`)."""

from __future__ import annotations

from typing import NoReturn

from robot_rl.ros.actor_node import ActorNode, actor_params
from robot_rl.ros.env_io import ACTOR_PARAMS, EnvActorIO
from robot_rl.ros.node_utils import run_node
from robot_rl.tasks import ENV_TASK

PARAMS = actor_params(ENV_TASK, "/env_sim/reset", ACTOR_PARAMS)


def main(args=None) -> NoReturn:
    run_node(lambda: ActorNode("env_actor", PARAMS, EnvActorIO), args)


if __name__ == "__main__":
    raise SystemExit(main())
