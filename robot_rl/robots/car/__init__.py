"""The 1/10-scale race car (FastRLAP): racing from pixels with autonomous practice, a real car's VESC node."""

from robot_rl.robots.registry import CAMERA_TOPICS, DEFAULT_RESTARTS, RESET, Endpoints, NodeKind, Robot

SENSOR_TOPICS = ("car/imu", "car/odom", "car/practice")

ROBOT = Robot(
    name="car",
    description="1/10-scale race car driving from pixels with autonomous practice (FastRLAP)",
    tasks={"car_race": "robot_rl.robots.car.tasks:car_race"},
    nodes={
        "car_sim": NodeKind("car_sim", "robot_rl.nodes.car_sim", critical=True, role="simulator", serves_reset=True,
                            endpoints=Endpoints(publish=(*CAMERA_TOPICS, *SENSOR_TOPICS, "/clock"),
                                                subscribe=("car/cmd_vel", "/estop", "session/status"),
                                                serves=("~/reset", "~/reset_estop"))),
        "car_actor": NodeKind("car_actor", "robot_rl.nodes.car_actor", critical=True, finishes_run=True,
                              max_restarts=DEFAULT_RESTARTS, role="actor",
                              endpoints=Endpoints(publish=("car/cmd_vel", "rl/transitions"),
                                                  subscribe=(*SENSOR_TOPICS, CAMERA_TOPICS[0], "rl/policy", "rl/acks"),
                                                  calls=(RESET,))),
        "car": NodeKind("car", "robot_rl.nodes.car", critical=True, role="hardware",
                        endpoints=Endpoints(publish=SENSOR_TOPICS, subscribe=("car/cmd_vel", "/estop"),
                                            serves=("~/reset_estop",))),
    },
    hardware_nodes={"car_sim": "car"},
    shipped_policies={"car_race": "robot_rl.robots.car.evaluate:shipped_laps"},
    graph_evaluators={"car_actor": "robot_rl.robots.car.evaluate:graph_laps"},
    recipes="robot_rl.robots.car.recipes:add_parsers",
)
