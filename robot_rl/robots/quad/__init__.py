"""The quadrotor with a racket (JuggleRL): ball juggling in randomized MuJoCo, PPO, a real quadrotor's node."""

from robot_rl.robots.registry import RESET, Endpoints, NodeKind, Robot

STATE_TOPICS = ("quad/odom", "ball/pose")

ROBOT = Robot(
    name="quad",
    description="quadrotor with a racket juggling a ball (JuggleRL)",
    nodes={
        "quad_sim": NodeKind("quad_sim", "robot_rl.nodes.quad_sim", critical=True, role="simulator",
                             serves_reset=True,
                             endpoints=Endpoints(publish=(*STATE_TOPICS, "/clock"),
                                                 subscribe=("quad/cmd_ctbr", "/estop", "session/status"),
                                                 serves=("~/reset", "~/reset_estop"))),
        "juggle_actor": NodeKind("juggle_actor", "robot_rl.nodes.juggle_actor", critical=True, finishes_run=True,
                                 role="actor",
                                 endpoints=Endpoints(publish=("quad/cmd_ctbr",), subscribe=(*STATE_TOPICS, "rl/policy"),
                                                     calls=(RESET,))),
        "quadrotor": NodeKind("quadrotor", "robot_rl.nodes.quadrotor", critical=True, role="hardware",
                              endpoints=Endpoints(subscribe=("quad/cmd_ctbr", *STATE_TOPICS, "/estop"),
                                                  serves=("~/arm", "~/land", "~/reset_estop"))),
        # PPO in the quadrotor's own vectorized simulation, publishing policies to juggle_actor.
        "ppo_learner": NodeKind("ppo_learner", "robot_rl.nodes.ppo_learner", critical=True, role="learner",
                                endpoints=Endpoints(publish=("rl/policy",))),
    },
    hardware_nodes={"quad_sim": "quadrotor"},
    shipped_policies={"quad_juggle": "robot_rl.robots.quad.evaluate:juggling_trials"},
    recipes="robot_rl.robots.quad.recipes:add_parsers",
)
