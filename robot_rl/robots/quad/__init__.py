"""The quadrotor with a racket (JuggleRL): ball juggling in randomized MuJoCo, PPO, a real quadrotor's node."""

from robot_rl.robots.registry import NodeKind, Robot

ROBOT = Robot(
    name="quad",
    description="quadrotor with a racket juggling a ball (JuggleRL)",
    nodes={
        "quad_sim": NodeKind("quad_sim", "robot_rl.nodes.quad_sim", critical=True, role="simulator",
                             serves_reset=True),
        "juggle_actor": NodeKind("juggle_actor", "robot_rl.nodes.juggle_actor", critical=True, finishes_run=True,
                                 role="actor"),
        "quadrotor": NodeKind("quadrotor", "robot_rl.nodes.quadrotor", critical=True, role="hardware"),
        # PPO in the quadrotor's own vectorized simulation, publishing policies to juggle_actor.
        "ppo_learner": NodeKind("ppo_learner", "robot_rl.nodes.ppo_learner", critical=True, role="learner"),
    },
    hardware_nodes={"quad_sim": "quadrotor"},
    shipped_policies={"quad_juggle": "robot_rl.robots.quad.evaluate:juggling_trials"},
    recipes="robot_rl.robots.quad.recipes:add_parsers",
)
