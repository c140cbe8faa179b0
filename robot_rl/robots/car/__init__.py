"""The 1/10-scale race car (FastRLAP): racing from pixels with autonomous practice, a real car's VESC node."""

from robot_rl.robots.registry import DEFAULT_RESTARTS, NodeKind, Robot

ROBOT = Robot(
    name="car",
    description="1/10-scale race car driving from pixels with autonomous practice (FastRLAP)",
    tasks={"car_race": "robot_rl.robots.car.tasks:car_race"},
    nodes={
        "car_sim": NodeKind("car_sim", "robot_rl.nodes.car_sim", critical=True, role="simulator", serves_reset=True),
        "car_actor": NodeKind("car_actor", "robot_rl.nodes.car_actor", critical=True, finishes_run=True,
                              max_restarts=DEFAULT_RESTARTS, role="actor"),
        "car": NodeKind("car", "robot_rl.nodes.car", critical=True, role="hardware"),
    },
    hardware_nodes={"car_sim": "car"},
    shipped_policies={"car_race": "robot_rl.robots.car.evaluate:shipped_laps"},
    graph_evaluators={"car_actor": "robot_rl.robots.car.evaluate:graph_laps"},
    recipes="robot_rl.robots.car.recipes:add_parsers",
)
