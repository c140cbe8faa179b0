"""The 7-DoF arm with a parallel gripper (SERL / HIL-SERL): lift and pick-cube in MuJoCo, a real arm's node."""

from robot_rl.robots.registry import CAMERA_TOPICS, DEFAULT_RESTARTS, RESET, TELEOP_TOPICS, Endpoints, NodeKind, Robot

STATE_TOPICS = ("joint_states", "arm/ee_pose", "cube/pose")
COMMAND_TOPICS = ("arm/cmd", "arm/gripper")

ROBOT = Robot(
    name="arm",
    description="7-DoF arm with a parallel gripper: lift and pick a cube (SERL / HIL-SERL)",
    tasks={"arm_lift": "robot_rl.robots.arm.tasks:arm_lift",
           "arm_pick_cube": "robot_rl.robots.arm.tasks:arm_pick_cube"},
    nodes={
        "arm_sim": NodeKind("arm_sim", "robot_rl.nodes.arm_sim", critical=True, role="simulator", serves_reset=True,
                            endpoints=Endpoints(publish=(*STATE_TOPICS, *CAMERA_TOPICS, "/clock"),
                                                subscribe=(*COMMAND_TOPICS, "/estop", "session/status"),
                                                serves=("~/reset", "~/reset_estop"))),
        "arm_actor": NodeKind("arm_actor", "robot_rl.nodes.arm_actor", critical=True, finishes_run=True,
                              max_restarts=DEFAULT_RESTARTS, role="actor",
                              endpoints=Endpoints(publish=(*COMMAND_TOPICS, "episode/event", "episode/step",
                                                           "rl/transitions", "session/status"),
                                                  subscribe=(*STATE_TOPICS, CAMERA_TOPICS[0], *TELEOP_TOPICS, "reward",
                                                             "reward/done", "rl/policy", "rl/acks"),
                                                  calls=(RESET,))),
        # Hardware nodes also talk to their device's driver topics (hardware/<device>.yaml): add those to the
        # permissions of a real robot.
        "arm": NodeKind("arm", "robot_rl.nodes.arm", critical=True, role="hardware", serves_reset=True,
                        endpoints=Endpoints(publish=("arm/ee_pose",), subscribe=(*COMMAND_TOPICS, "joint_states",
                                                                                 "/estop"),
                                            serves=("~/reset", "~/reset_estop"))),
    },
    hardware_nodes={"arm_sim": "arm"},
    experts={"robot_rl/ArmPushCube-v0": "robot_rl.robots.arm.tasks:push_cube_expert"},
    encoder_scenes={"robot_rl/ArmPickCube-v0": "robot_rl.robots.arm.pretrain:scene_frames"},
    demonstrations="robot_rl.robots.arm.demos:record",
    graph_evaluators={"arm_actor": "robot_rl.robots.arm.evaluate:graph_episodes"},
    topic_decoders={"arm_actor": "robot_rl.ros.arm_io:ArmTopics"},
    view_simulator="arm_sim",
    renamed_nodes={"sim": "arm_sim", "actor": "arm_actor"},  # the names before 0.1.x's robot-explicit ones
    default_for={"train": "arm_lift", "demos": "arm_lift", "init": "arm_lift", "record": "arm_pick_cube"},
)
