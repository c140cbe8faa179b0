"""Scripted demonstrations of an arm task, recorded in process in the simulator configured as the graph's
arm_sim (its rate, action scale, cube range and randomized scenes), so they match what the actor will see."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def record(config: Mapping[str, Any], task, episodes: int, seed: int, noise: float) -> tuple[dict[str, np.ndarray],
                                                                                           dict[str, Any]]:
    from robot_rl.robots.arm.sim import ArmSim, ArmSimConfig
    from robot_rl.training.in_process import collect_demonstrations

    sim_params = config.get("arm_sim", {}).get("ros__parameters", {})
    robot = ArmSim(ArmSimConfig(**{k: sim_params[k] for k in ("control_hz", "action_scale", "cube_xy_range")
                                   if k in sim_params}, render=bool(task.cameras)))
    before_reset = None
    if sim_params.get("randomization"):  # demonstrations in the same randomized scenes as training
        from robot_rl.robots.arm.pick_cube import ArmRandomizer
        from robot_rl.envs.randomization import Randomization
        from robot_rl.resources import package_path

        randomization = Randomization.load(package_path(sim_params["randomization"]))
        randomizer = ArmRandomizer(robot)
        split = sim_params.get("randomization_split", "train")

        def before_reset(rng):
            sample = randomization.sample(split, rng)
            randomizer.apply({k: v for k, v in sample.items() if k in ArmRandomizer.SCENE_PARAMETERS})
    try:
        return collect_demonstrations(task, robot, episodes, seed, noise, before_reset=before_reset)
    finally:
        robot.close()
