"""The car's task: racing laps from frozen-encoder features of its camera, as car_actor assembles them."""

from __future__ import annotations

from robot_rl.tasks import TaskSpec


def car_race() -> TaskSpec:
    from robot_rl.robots.car.sim import CarRaceConfig
    from robot_rl.robots.car.observer import FEATURE_DIM, car_observation

    config = CarRaceConfig()
    # States come from robot_rl.robots.car.observer.CarObserver (frozen-encoder features of the
    # last frames, proprioception, progress reward, lap and crash flags), assembled by car_actor.
    return TaskSpec(
        name="car_race", obs_dim=FEATURE_DIM, action_dim=2, max_episode_steps=config.max_episode_steps,
        control_hz=config.control_hz, observation=car_observation, reward=lambda s: float(s["reward"]),
        success=lambda s: int(s["laps"]) > 0, terminate_on_success=False, expert=None,
        env_id="robot_rl/CarRace-v0", failure=lambda s: bool(s["crashed"]),
        action_rate_limit=config.action_rate_limit, actor_node="car_actor",
    )
