"""The kinds of node a graph can hold: how each is started, whether the run depends on it, and
how often it is respawned after a crash (the restart policy)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeKind:
    executable: str
    """Console script (`ros2 run robot_rl <executable>`)."""
    module: str
    """Python module with main(), for starting the node without the ROS CLI."""
    critical: bool
    """The graph shuts down when this node dies unexpectedly."""
    finishes_run: bool = False
    """A clean exit of this node means the run is complete (the actor after evaluation)."""
    max_restarts: int = 0
    """Times the node is respawned after a crash before its death ends the run (see `crashed`);
    a config's `robot_rl: {restarts: {learner: 5}}` overrides it per node. Only nodes that resume
    where they stopped (the learner from checkpoint + journal, actors from their outbox and
    counters, the stateless reward node) restart by default."""


DEFAULT_RESTARTS = 3


def crashed(returncode: int) -> bool:
    """A crash worth a restart: killed by a signal (negative code) or an uncaught exception (1).
    Other codes are the node's own decision (0 done, 2 refused parameters, 3 data not delivered)
    and would only repeat."""
    return returncode < 0 or returncode == 1


NODE_KINDS: dict[str, NodeKind] = {
    "sim": NodeKind("sim", "robot_rl.nodes.sim", critical=True),
    "actor": NodeKind("actor", "robot_rl.nodes.actor", critical=True, finishes_run=True,
                      max_restarts=DEFAULT_RESTARTS),
    "learner": NodeKind("learner", "robot_rl.nodes.learner", critical=True, max_restarts=DEFAULT_RESTARTS),
    "camera": NodeKind("camera", "robot_rl.nodes.camera", critical=False),
    "arm": NodeKind("arm", "robot_rl.nodes.arm", critical=True),
    "quadrotor": NodeKind("quadrotor", "robot_rl.nodes.quadrotor", critical=True),
    "teleop": NodeKind("teleop", "robot_rl.nodes.teleop", critical=False),
    "scripted_human": NodeKind("scripted_human", "robot_rl.nodes.scripted_human", critical=False),
    # Critical: a graph that learns from its rewards must not go on without them (a model that
    # fails to load ends the node, and so the run, with the reason).
    "reward": NodeKind("reward", "robot_rl.nodes.reward", critical=True, max_restarts=DEFAULT_RESTARTS),
    "quad_sim": NodeKind("quad_sim", "robot_rl.nodes.quad_sim", critical=True),
    "juggle_actor": NodeKind("juggle_actor", "robot_rl.nodes.juggle_actor", critical=True, finishes_run=True),
    "ppo_learner": NodeKind("ppo_learner", "robot_rl.nodes.ppo_learner", critical=True),
    "car_sim": NodeKind("car_sim", "robot_rl.nodes.car_sim", critical=True),
    "car": NodeKind("car", "robot_rl.nodes.car", critical=True),
    "car_actor": NodeKind("car_actor", "robot_rl.nodes.car_actor", critical=True, finishes_run=True,
                          max_restarts=DEFAULT_RESTARTS),
}

# Real-robot nodes take the simulator's place with `backend: real` (see hardware/).
BACKEND_REPLACEMENTS = {"real": {"sim": "arm", "quad_sim": "quadrotor", "car_sim": "car"}}
