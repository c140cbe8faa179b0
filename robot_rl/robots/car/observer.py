"""The race car's task state outside the simulator: what `car_actor` feeds `ActorCore` each step.

`CarRaceEnv` computes its observation, reward and laps from the simulator; on the ROS graph (the
car sim node or the real car) the same quantities come from the camera, `car/odom`, `car/imu` and
`car/practice`. `CarObserver` rebuilds them with the env's own functions (`car_state_observation`,
`progress_reward`, `LapTimer`) and the frozen encoder of a frame-stack policy, encoding only the
newest frame per step. Its states are the `car_race` task's (robot_rl/tasks.py):

    {"features": K frame embeddings, "state": proprioception, "reward": float, "laps": clean laps
     this episode, "crashed": bool, "lap_time": float | None}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.agents.frame_stack_policy import FeatureStack, FrameStackPolicy
from robot_rl.robots.car.sim import STATE_DIM, CarRaceConfig, car_state_observation, progress_reward
from robot_rl.robots.car.track import LapTimer, extract_checkpoints

__all__ = ["FEATURE_DIM", "CarObserver", "car_observation", "load_checkpoints"]

FEATURE_DIM = 3 * 50 + STATE_DIM
"""The car_race task's observation: 3 frames x 50-d embeddings (the shipped IQL encoder) + state."""


def car_observation(state: dict[str, Any]) -> np.ndarray:
    return np.concatenate([state["features"], state["state"]]).astype(np.float32)


def load_checkpoints(source: str, spacing: float) -> np.ndarray:
    """Checkpoints from "track:<seed>" (the simulated track's slow scripted lap, as CarRaceEnv
    places them) or from a file of one slow demonstration lap's positions (.npy or .csv, rows x, y
    [, z] in the odometry frame, in driving order from the start line)."""
    if source.startswith("track:"):
        from robot_rl.robots.car.sim import CarRaceEnv

        env = CarRaceEnv(track_seed=int(source.split(":", 1)[1]), render=False, randomization=None,
                         checkpoint_spacing=spacing)
        env.close()
        return env.checkpoints
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"no demonstration lap at {path} (give track:<seed> in simulation)")
    positions = np.load(path) if path.suffix == ".npy" else np.loadtxt(path, delimiter=",", ndmin=2)
    if positions.ndim != 2 or positions.shape[1] not in (2, 3) or not np.isfinite(positions).all():
        raise ValueError(f"{path}: a demonstration lap is rows of finite x, y[, z], got shape {positions.shape}")
    return extract_checkpoints(positions, spacing)


class CarObserver:
    """Per-step task states from the car's sensors; `reset()` at every episode start."""

    def __init__(self, policy: FrameStackPolicy, checkpoints: np.ndarray, config: CarRaceConfig = CarRaceConfig()):
        if policy.feature_dim != FEATURE_DIM:
            raise ValueError(f"the car_race task takes {FEATURE_DIM} features, the policy gives {policy.feature_dim}")
        self.policy, self.config = policy, config
        self.timer = LapTimer(checkpoints, config.reach_radius)
        self.stack = FeatureStack(policy.frame_stack)
        self._laps_at_start = 0

    def reset(self, after_recovery: bool) -> None:
        """A new episode: the next frame fills the stack; a lap in progress through a crash or a
        recovery is not clean."""
        self.stack.reset()
        self._laps_at_start = len(self.timer.laps)
        if after_recovery:
            self.timer.interrupt()

    def state(self, frame: np.ndarray, sensors: dict[str, np.ndarray], time_s: float, previous_action: np.ndarray,
              event: str | None) -> dict[str, Any]:
        """The state after a step: `event` is "crash" or "stuck" when the car's practice monitor
        saw one on this observation (then the step costs crash_cost)."""
        first = self.stack.empty
        self.stack.push(self.policy.encode(frame))
        reward, lap_time = 0.0, None
        if not first:  # an episode's first observation ends no step: no reward, no progress (as the env's reset)
            yaw = float(sensors["yaw"])
            c, s = np.cos(yaw), np.sin(yaw)
            body = np.asarray(sensors["velocity"], float)
            world_velocity = np.array([c * body[0] - s * body[1], s * body[0] + c * body[1]])
            reward = progress_reward(world_velocity, sensors["position"], self.timer.next_checkpoint)
            lap_time = self.timer.update(sensors["position"], time_s)
        if event is not None:
            excess = max(0.0, float(np.linalg.norm(sensors["accel"])) - self.config.practice.crash_accel)
            reward -= self.config.crash_cost + self.config.crash_accel_cost * excess
        proprio = car_state_observation(sensors, self.timer.next_checkpoint, previous_action)
        return {"features": self.stack.flat(), "state": proprio, "reward": reward, "crashed": event == "crash",
                "laps": len(self.timer.laps) - self._laps_at_start, "lap_time": lap_time}
