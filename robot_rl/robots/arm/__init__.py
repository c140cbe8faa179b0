"""The 7-DoF arm with a parallel gripper (SERL / HIL-SERL): lift and pick-cube in MuJoCo, a real arm's node."""

from robot_rl.robots.registry import DEFAULT_RESTARTS, NodeKind, Robot

ROBOT = Robot(
    name="arm",
    description="7-DoF arm with a parallel gripper: lift and pick a cube (SERL / HIL-SERL)",
    tasks={"arm_lift": "robot_rl.robots.arm.tasks:arm_lift",
           "arm_pick_cube": "robot_rl.robots.arm.tasks:arm_pick_cube"},
    nodes={
        "arm_sim": NodeKind("arm_sim", "robot_rl.nodes.arm_sim", critical=True, role="simulator", serves_reset=True),
        "arm_actor": NodeKind("arm_actor", "robot_rl.nodes.arm_actor", critical=True, finishes_run=True,
                              max_restarts=DEFAULT_RESTARTS, role="actor"),
        "arm": NodeKind("arm", "robot_rl.nodes.arm", critical=True, role="hardware", serves_reset=True),
    },
    hardware_nodes={"arm_sim": "arm"},
    experts={"robot_rl/ArmPushCube-v0": "robot_rl.robots.arm.tasks:push_cube_expert"},
    demonstrations="robot_rl.robots.arm.demos:record",
    graph_evaluators={"arm_actor": "robot_rl.robots.arm.evaluate:graph_episodes"},
    view_simulator="arm_sim",
    renamed_nodes={"sim": "arm_sim", "actor": "arm_actor"},  # the names before 0.1.x's robot-explicit ones
    default_for={"train": "arm_lift", "demos": "arm_lift", "init": "arm_lift", "record": "arm_pick_cube"},
)
