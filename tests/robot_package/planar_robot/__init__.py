"""A two-link planar arm in MuJoCo with one overhead camera, reaching a target: a robot added to robot_rl from
outside (ARCHITECTURE.md, "How to add a robot"). Everything robot_rl needs to know is this `ROBOT`."""

from robot_rl.robots.registry import DEFAULT_RESTARTS, RESET, TELEOP_TOPICS, Endpoints, NodeKind, Robot

STATE = ("planar/joint_states", "planar/target")

ROBOT = Robot(
    name="planar",
    description="two-link planar arm reaching a target (an outside package's robot)",
    tasks={"planar_reach": "planar_robot.tasks:planar_reach"},
    nodes={
        "planar_sim": NodeKind("planar_sim", "planar_robot.sim_node", critical=True, role="simulator",
                               serves_reset=True, endpoints=Endpoints(
                                   publish=(*STATE, "overhead/color/image_raw", "/clock"),
                                   subscribe=("planar/cmd", "/estop", "session/status"),
                                   serves=("~/reset", "~/reset_estop"))),
        "planar_actor": NodeKind("planar_actor", "planar_robot.actor_node", critical=True, finishes_run=True,
                                 max_restarts=DEFAULT_RESTARTS, role="actor", endpoints=Endpoints(
                                     publish=("planar/cmd", "episode/event", "episode/step", "rl/transitions",
                                              "session/status"),
                                     subscribe=(*STATE, *TELEOP_TOPICS, "reward", "reward/done", "rl/policy",
                                                "rl/acks"),
                                     calls=(RESET,))),
    },
    demonstrations="planar_robot.sim:record_demonstrations",
    graph_evaluators={"planar_actor": "planar_robot.evaluate:episodes"},
    recipes="planar_robot.recipes:add_parsers",
    configs="planar_robot:config",
)
