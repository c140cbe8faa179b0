"""Car racing from pixels (FastRLAP in simulation): a 1/10-scale car learns to lap a track.

- `CarSim`: the MuJoCo car (`sim/car/car.xml`) on a procedural track (`robot_rl.robots.car.track`,
  walls or cones added with MjSpec), Ackermann steering, rear-wheel speed control; senses what
  the real car has: forward camera, IMU (accelerometer with gravity, gyro), wheel-odometry-like
  body velocity and a position (GPS / motion capture). The car sim node runs the same class.
- `CarRaceEnv` (`robot_rl/CarRace-v0`): FastRLAP's observation (3 stacked frames, IMU, body
  velocity, the next checkpoint in the car's frame, the previous action), actions
  speed = 2.5 + 2.0 a0 m/s and steer = 0.5 a1 rad, each within +-0.2 of the previous action; reward
  = velocity toward the next checkpoint, minus a crash cost. Checkpoints come from one slow
  scripted lap, as FastRLAP's come from one slow teleoperated lap. Practice is autonomous: after
  the first `reset`, a reset does not teleport the car; it backs out of the crash or the
  corner it is stuck in (`robot_rl.robots.car.control`) and drives on from there.
- `pure_pursuit_action`: the scripted driver that sees the true state: the expert whose lap time
  is the benchmark's reference, and (slow, noisy) the prior-data and demonstration-lap driver.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from robot_rl.config_fields import setting
from robot_rl.envs.randomization import OPTIONAL_SPLITS, SPLITS, Randomization
from robot_rl.robots.car.control import PracticeConfig, PracticeMonitor, Recovery
from robot_rl.robots.car.track import LapTimer, Track, TrackConfig, extract_checkpoints, generate_track
from robot_rl.resources import package_path

__all__ = ["CAR_MODEL", "DEFAULT_RANDOMIZATION", "NOMINAL", "STATE_DIM", "CarRaceConfig", "CarRaceEnv", "CarSim",
           "DriverConfig", "car_state_observation", "progress_reward", "pure_pursuit_action"]

CAR_MODEL: Path = package_path(Path("sim") / "car" / "car.xml")
DEFAULT_RANDOMIZATION: Path = package_path(Path("sim") / "car" / "randomization.yaml")
WHEELBASE, TRACK_WIDTH, WHEEL_RADIUS = 0.33, 0.24, 0.05
GRAVITY = 9.81
IMU_FILTER_STEPS = 4
"""Physics steps (5 ms each) an IMU sample averages: a 20 ms output filter, as real IMUs low-pass."""
SETTLE_STEPS = 60
"""Physics steps (0.3 s) a placed car settles on its suspension before anything starts."""
STATE_DIM = 10
"""accel / g (3), body velocity x, y, yaw rate, next checkpoint in the car frame / 5 m (2), previous action (2)."""

NOMINAL: dict[str, Any] = {
    "friction": 0.9, "mass_scale": 1.0, "motor_scale": 1.0, "steer_bias": 0.0, "camera_pitch": 0.0,
    "light_diffuse": np.array([0.8, 0.8, 0.8]), "light_dir": np.array([0.3, 0.2, -1.0]), "floor_rgb": np.array([1.0, 1.0, 1.0]),
    "wall_rgb": np.array([0.9, 0.9, 0.9]), "stripe_rgb": np.array([0.85, 0.1, 0.1]), "action_latency_steps": 0,
    "velocity_noise": 0.0, "accel_noise": 0.0, "gyro_noise": 0.0, "start_offset": np.zeros(3),
}
"""Every randomization parameter (names as in `sim/car/randomization.yaml`) and its nominal value."""


def _ackermann(steer: float) -> tuple[float, float]:
    """Left and right wheel angles for a bicycle-model steering angle (inner wheel turns more)."""
    if abs(steer) < 1e-6:
        return 0.0, 0.0
    radius = WHEELBASE / np.tan(steer)
    return float(np.arctan(WHEELBASE / (radius - TRACK_WIDTH / 2))), float(np.arctan(WHEELBASE / (radius + TRACK_WIDTH / 2)))


class CarSim:
    """One car on one track: commands in (speed m/s, steering rad), sensors out."""

    def __init__(self, track: Track, boundary: str = "walls", image_size: int = 64, control_hz: float = 20.0,
                 render: bool = True):
        if boundary not in ("walls", "cones"):
            raise ValueError(f"boundary must be 'walls' or 'cones', got {boundary!r}")
        self.track, self.boundary, self.image_size, self.control_hz = track, boundary, image_size, control_hz
        self.model = self._build(track, boundary)
        self.data = mujoco.MjData(self.model)
        self.substeps = max(1, round(1.0 / (control_hz * self.model.opt.timestep)))
        self._nominal = {"mass": self.model.body("car").mass.copy(),
                         "drive": self.model.actuator_forcerange[2].copy(),
                         "camera_quat": self.model.camera("front").quat.copy()}
        self._sensor = {name: self.model.sensor(name).adr[0] for name in ("accel", "gyro", "velocity")}
        walls = np.array([i for i in range(self.model.ngeom) if (self.model.geom(i).name or "").startswith("wall_")])
        striped = (np.arange(len(walls)) // 3) % 2 == 1  # stripes every few segments: texture the camera can track
        self._walls, self._stripes = walls[~striped], walls[striped]
        self.renderer = mujoco.Renderer(self.model, image_size, image_size) if render else None
        self.params: dict[str, Any] = dict(NOMINAL)
        self.peak_accel = np.array([0.0, 0.0, GRAVITY])

    @staticmethod
    def _build(track: Track, boundary: str) -> mujoco.MjModel:
        spec = mujoco.MjSpec.from_file(str(CAR_MODEL))
        world = spec.worldbody
        for side, points in (("left", track.left), ("right", track.right)):
            nxt = np.roll(points, -1, axis=0)
            if boundary == "walls":
                for i, (a, b) in enumerate(zip(points, nxt)):
                    mid, d = (a + b) / 2, b - a
                    world.add_geom(name=f"wall_{side}_{i}", type=mujoco.mjtGeom.mjGEOM_BOX,
                                   size=[np.linalg.norm(d) / 2 + 0.03, 0.04, 0.12], pos=[*mid, 0.12],
                                   euler=[0, 0, np.arctan2(d[1], d[0])], contype=0, conaffinity=3,
                                   rgba=[0.9, 0.9, 0.9, 1])
            else:
                s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(nxt - points, axis=1))])
                marks = np.arange(0.0, s[-1], 0.7)
                closed = np.vstack([points, points[:1]])
                for i, m in enumerate(marks):
                    pos = [np.interp(m, s, closed[:, 0]), np.interp(m, s, closed[:, 1])]
                    world.add_geom(name=f"wall_{side}_{i}", type=mujoco.mjtGeom.mjGEOM_CYLINDER,
                                   size=[0.06, 0.12], pos=[*pos, 0.12], contype=0, conaffinity=3,
                                   rgba=[0.95, 0.45, 0.05, 1])
        return spec.compile()

    # ---- randomization -------------------------------------------------------------------------

    def apply(self, params: dict[str, Any]) -> None:
        """Sets physical and visual parameters (missing ones nominal); see `NOMINAL`."""
        unknown = sorted(set(params) - set(NOMINAL))
        if unknown:
            raise ValueError(f"unknown car randomization parameter(s) {unknown}; known: {sorted(NOMINAL)}")
        p = self.params = {**NOMINAL, **params}
        m = self.model
        m.geom_friction[:, 0] = p["friction"]
        m.body("car").mass[:] = self._nominal["mass"] * p["mass_scale"]
        m.actuator_forcerange[2] = self._nominal["drive"] * p["motor_scale"]
        pitch = float(p["camera_pitch"])  # extra downward pitch about the camera's x axis
        q = np.empty(4)
        mujoco.mju_mulQuat(q, self._nominal["camera_quat"], np.array([np.cos(pitch / 2), np.sin(pitch / 2), 0, 0]))
        m.camera("front").quat[:] = q
        m.light_diffuse[0] = p["light_diffuse"]
        direction = np.asarray(p["light_dir"], float)
        m.light_dir[0] = direction / np.linalg.norm(direction)
        m.mat_rgba[m.material("floor").id, :3] = p["floor_rgb"]
        m.geom_rgba[self._walls, :3] = p["wall_rgb"]
        m.geom_rgba[self._stripes, :3] = p["stripe_rgb"]

    # ---- driving -------------------------------------------------------------------------------

    def place(self, position: np.ndarray, yaw: float) -> None:
        """Puts the car at rest at (x, y) facing `yaw`."""
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:3] = [position[0], position[1], 0.07]
        self.data.qpos[3:7] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
        self.data.ctrl[:] = 0.0
        for _ in range(SETTLE_STEPS):  # onto its springs, so the first IMU sample reads 1 g
            mujoco.mj_step(self.model, self.data)
        self.data.time = 0.0
        self.peak_accel = self.data.sensordata[self._sensor["accel"]:self._sensor["accel"] + 3].copy()

    def step(self, speed: float, steer: float) -> None:
        """One control period at (speed m/s, steer rad); keeps the peak acceleration sample."""
        left, right = _ackermann(float(np.clip(steer + self.params["steer_bias"], -0.55, 0.55)))
        self.data.ctrl[:] = [left, right, speed / WHEEL_RADIUS]
        peak, adr, window = None, self._sensor["accel"], []
        for _ in range(self.substeps):
            mujoco.mj_step(self.model, self.data)
            window.append(self.data.sensordata[adr:adr + 3].copy())
            # The IMU's output filter: samples are means over IMU_FILTER_STEPS physics steps.
            if len(window) == IMU_FILTER_STEPS:
                a = np.mean(window, axis=0)
                window.clear()
                if peak is None or a @ a > peak @ peak:
                    peak = a
        self.peak_accel = peak if peak is not None else np.mean(window, axis=0)

    @property
    def time(self) -> float:
        return float(self.data.time)

    @property
    def position(self) -> np.ndarray:
        return self.data.qpos[:3].copy()

    @property
    def speed(self) -> float:
        """Ground speed [m/s] (true state: for the scripted drivers and the env's bookkeeping)."""
        return float(np.linalg.norm(self.data.qvel[:2]))

    @property
    def yaw(self) -> float:
        w, x, y, z = self.data.qpos[3:7]
        return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))

    def sensors(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """IMU and body velocity as the real car's sensors give them (noise from the parameters,
        drawn from `rng`, so a seeded episode is reproducible)."""
        d, s, p = self.data, self._sensor, self.params
        noise = lambda scale, n: rng.normal(0.0, scale, n) if scale > 0 else np.zeros(n)  # noqa: E731
        return {"accel": d.sensordata[s["accel"]:s["accel"] + 3] + noise(p["accel_noise"], 3),
                "gyro": d.sensordata[s["gyro"]:s["gyro"] + 3] + noise(p["gyro_noise"], 3),
                "velocity": d.sensordata[s["velocity"]:s["velocity"] + 3] + noise(p["velocity_noise"], 3),
                "position": self.position, "yaw": np.array(self.yaw), "quat": d.qpos[3:7].copy()}

    def frame(self) -> np.ndarray:
        """The forward camera: (H, W, 3) uint8."""
        if self.renderer is None:
            raise RuntimeError("this CarSim was built with render=False")
        self.renderer.update_scene(self.data, camera="front")
        return self.renderer.render()

    def close(self) -> None:
        if self.renderer is not None:
            self.renderer.close()
            self.renderer = None


def car_state_observation(sensors: dict[str, np.ndarray], checkpoint: np.ndarray, previous_action: np.ndarray
                          ) -> np.ndarray:
    """FastRLAP's proprioception: IMU, body velocity, the next checkpoint in the car's frame, the
    previous action (`STATE_DIM` values). Shared by the env and the ROS actor."""
    yaw = float(sensors["yaw"])
    rel = np.asarray(checkpoint, float)[:2] - np.asarray(sensors["position"], float)[:2]
    c, s = np.cos(yaw), np.sin(yaw)
    goal = np.array([c * rel[0] + s * rel[1], -s * rel[0] + c * rel[1]]) / 5.0
    obs = np.concatenate([np.asarray(sensors["accel"], float) / GRAVITY, np.asarray(sensors["velocity"], float)[:2],
                          [float(np.asarray(sensors["gyro"])[2])], np.clip(goal, -2.0, 2.0),
                          np.asarray(previous_action, float)])
    return obs.astype(np.float32)


def progress_reward(velocity_xy: np.ndarray, position: np.ndarray, checkpoint: np.ndarray) -> float:
    """FastRLAP's reward before costs: the world-frame velocity toward the next checkpoint [m/s].
    Shared by the env and the ROS car actor."""
    to_goal = np.asarray(checkpoint, float)[:2] - np.asarray(position, float)[:2]
    return float(np.asarray(velocity_xy, float)[:2] @ to_goal / max(np.linalg.norm(to_goal), 1e-6))


@dataclass(frozen=True)
class DriverConfig:
    """The scripted pure-pursuit driver (true state): the expert, or (slow, with the caller's
    lateral offset and steering disturbance) the prior-data driver."""

    max_speed: float = 4.5
    """Speed on straights [m/s]."""
    lateral_accel: float = 6.0
    """Corner speed: sqrt(lateral_accel / curvature) [m/s^2] (the car's grip is about 7.5)."""
    brake_horizon_s: float = 0.8
    """Looks this far ahead (at the current speed) for the tightest curvature to slow for."""
    lookahead: tuple[float, float] = (0.7, 0.2)
    """Pure-pursuit lookahead = a + b * speed [m]."""


def pure_pursuit_action(track: Track, position: np.ndarray, yaw: float, speed: float, config: DriverConfig,
                        speed_offset: float = 2.5, speed_scale: float = 2.0, steer_scale: float = 0.5,
                        lateral: float = 0.0, steer_disturbance: float = 0.0) -> np.ndarray:
    """The normalized action [speed, steer] that follows the centreline (shifted by `lateral` m)
    at a curvature-limited speed."""
    i = track.nearest(position)
    step = track.length / len(track.centre)
    ahead = lambda dist: (i + int(round(dist / step))) % len(track.centre)  # noqa: E731
    horizon = [ahead(d) for d in np.arange(0.0, max(speed, 0.5) * config.brake_horizon_s + 0.5, step)]
    curvature = float(np.abs(track.curvature[horizon]).max())
    target_speed = min(config.max_speed, np.sqrt(config.lateral_accel / max(curvature, 1e-6)))
    j = ahead(config.lookahead[0] + config.lookahead[1] * max(speed, 0.0))
    target = track.centre[j] + track.normal[j] * lateral
    rel = target - np.asarray(position, float)[:2]
    alpha = np.arctan2(rel[1], rel[0]) - yaw
    distance = max(float(np.linalg.norm(rel)), 1e-3)
    steer = np.arctan2(2.0 * WHEELBASE * np.sin(alpha), distance)
    action = np.array([(target_speed - speed_offset) / speed_scale, steer / steer_scale + steer_disturbance])
    return np.clip(action, -1.0, 1.0).astype(np.float32)


@dataclass(frozen=True)
class CarRaceConfig:
    """The racing task (defaults: FastRLAP's settings, scaled to a 1/10 car on a ~40 m track)."""

    track_seed: int = setting(0, "Seed of the procedural track.", low=0, high=2**31 - 1)
    """Seed of the procedural track (the benchmark's held-out track is one no prior data saw)."""
    track: TrackConfig = field(default_factory=TrackConfig)
    """Distribution the track is drawn from."""
    boundary: str = setting("walls", "Track boundary.", choices=("walls", "cones"))
    """Track boundary: "walls" or "cones"."""
    control_hz: float = setting(20.0, "Control rate: one step per period.", low=1.0, high=200.0)
    """Control rate (FastRLAP's sim: 20 Hz)."""
    image_size: int = setting(64, "Camera image height and width [px].", low=16, high=512)
    """Camera frames are (image_size, image_size, 3) uint8 (FastRLAP: 128; 64 on CPU)."""
    frame_stack: int = 3
    """Frames stacked in an observation (FastRLAP: 3)."""
    speed_offset: float = 2.5
    """Speed at action 0 [m/s] (FastRLAP: speed = 2.0 a + 2.5)."""
    speed_scale: float = 2.0
    steer_scale: float = 0.5
    """Steering angle at action 1 [rad]."""
    action_rate_limit: float | None = 0.2
    """Each executed action stays within this of the previous one (FastRLAP: 0.2); None: off."""
    checkpoint_spacing: float = 3.0
    """Distance between checkpoints along the demonstration lap [m]."""
    reach_radius: float = setting(1.2, "A checkpoint counts as reached within this distance [m].", low=0.05,
                                  high=20.0)
    """A checkpoint counts as reached within this distance [m] (FastRLAP's outdoor tracks: 3 m)."""
    crash_cost: float = 10.0
    """Reward subtracted on a crash or when stuck (FastRLAP: 10 + f(max accel))."""
    crash_accel_cost: float = 0.1
    """Plus this times the peak acceleration beyond the crash threshold [per m/s^2]."""
    max_episode_steps: int = 2000
    """Truncates an episode that neither crashes nor gets stuck (100 s at 20 Hz)."""
    autonomous_resets: bool = True
    """After the first reset, `reset()` recovers in place instead of teleporting to the start."""
    practice: PracticeConfig = field(default_factory=PracticeConfig)
    """Stuck and crash detection, recovery manoeuvre."""
    randomization: str | None = setting(str(DEFAULT_RANDOMIZATION), "Randomization file drawn at every reset ('' "
                                        "for the nominal car).", unset="")
    """Randomization YAML (None: nominal car, fixed start)."""
    randomization_split: str = setting("train", "Ranges to draw from.", choices=(*SPLITS, *OPTIONAL_SPLITS))
    """Which ranges: "train" or "eval"."""
    render: bool = True
    """False: no camera (state-only drivers, lap timing of the expert)."""
    demo_speed: float = 1.5
    """Speed of the slow scripted demonstration lap that places the checkpoints [m/s]."""

    def __post_init__(self) -> None:
        if self.boundary not in ("walls", "cones") or self.frame_stack < 1 or self.image_size < 16:
            raise ValueError("boundary walls|cones, frame_stack >= 1 and image_size >= 16 required")
        if self.action_rate_limit is not None and not 0 < self.action_rate_limit <= 2:
            raise ValueError(f"action_rate_limit must be in (0, 2] or None, got {self.action_rate_limit}")
        if not self.reach_radius > 0 or not self.checkpoint_spacing > self.reach_radius:
            raise ValueError("checkpoint_spacing must exceed reach_radius > 0")


class CarRaceEnv(gym.Env):
    """FastRLAP's racing task; see the module docstring. `info` carries `lap_time` (a clean lap
    just ended), `laps`, `checkpoint`, `event` ("crash"/"stuck"/None) and `executed_action`."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, config: CarRaceConfig | None = None, render_mode: str | None = None, **overrides):
        self.config = c = replace(config or CarRaceConfig(), **overrides)
        self.render_mode = render_mode
        self.track = generate_track(np.random.default_rng(c.track_seed), c.track)
        self.sim = CarSim(self.track, c.boundary, c.image_size, c.control_hz, render=c.render)
        self.randomization = Randomization.load(c.randomization) if c.randomization else None
        self.checkpoints = extract_checkpoints(self.demo_lap(), c.checkpoint_spacing)
        self.timer = LapTimer(self.checkpoints, c.reach_radius)
        self.monitor = PracticeMonitor(c.practice)
        self.observation_space = gym.spaces.Dict({
            "frames": gym.spaces.Box(0, 255, (c.frame_stack, c.image_size, c.image_size, 3), np.uint8),
            "state": gym.spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._frames: deque[np.ndarray] = deque(maxlen=c.frame_stack)
        self._queue: deque[np.ndarray] = deque()
        self._previous = np.zeros(2, np.float32)
        self._steps = 0
        self._placed = False
        self._event: str | None = None
        self.recovery_steps = 0
        """Control steps spent in recovery manoeuvres so far (not environment steps)."""

    # ---- the demonstration lap -------------------------------------------------------------

    def demo_lap(self) -> np.ndarray:
        """Positions of one slow scripted lap from the start line (the person's demonstration lap
        on a real track), recorded at the control rate on the nominal car."""
        c, sim = self.config, self.sim
        sim.apply({})
        position, yaw = self.track.start_pose()
        sim.place(position, yaw)
        driver = DriverConfig(max_speed=c.demo_speed)
        positions, travelled = [sim.position], 0.0
        for _ in range(int(4 * self.track.length / c.demo_speed * c.control_hz)):
            sim.step(*self._command(self.expert_action(driver)))
            travelled += float(np.linalg.norm(sim.position[:2] - positions[-1][:2]))
            positions.append(sim.position)
            if travelled > self.track.length * 0.9 and np.linalg.norm(sim.position[:2] - position) < 0.5:
                return np.asarray(positions)
        raise RuntimeError("the scripted demonstration lap did not close (the track is not drivable)")

    # ---- gymnasium -----------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        c = self.config
        teleport = not self._placed or not c.autonomous_resets or bool((options or {}).get("teleport"))
        params = self.randomization.sample(c.randomization_split, self.np_random) if self.randomization else {}
        self.sim.apply(params)
        if teleport:
            self.sim.place(*self.track.start_pose(self.sim.params["start_offset"]))
            self.timer = LapTimer(self.checkpoints, c.reach_radius)
            self._placed = True
        elif self._event in ("crash", "stuck"):
            # Autonomous practice: back out of the crash or the corner the car is stuck in.
            recovery = Recovery(c.practice, c.control_hz, self.np_random)
            while not recovery.done:
                speed, steer = recovery.command()
                self.sim.step(speed, c.steer_scale * steer)
                self.recovery_steps += 1
            self.timer.interrupt()  # a lap with a crash or a recovery in it is not clean
        self.monitor.reset()
        self._event = None
        self._steps = 0
        self._previous = np.zeros(2, np.float32)
        self._queue = deque([np.zeros(2, np.float32)] * int(self.sim.params["action_latency_steps"]))
        self._frames.clear()
        obs = self._observe(fill=True)
        return obs, {"checkpoint": self.timer.next_index, "laps": len(self.timer.laps)}

    def _command(self, action: np.ndarray) -> tuple[float, float]:
        """Normalized action -> (speed m/s, steering rad)."""
        c = self.config
        return c.speed_offset + c.speed_scale * float(action[0]), c.steer_scale * float(action[1])

    def _observe(self, fill: bool = False) -> dict[str, np.ndarray]:
        c = self.config
        if c.render:
            frame = self.sim.frame()
            for _ in range(c.frame_stack if fill else 1):
                self._frames.append(frame)
            frames = np.stack(self._frames)
        else:
            frames = np.zeros(self.observation_space["frames"].shape, np.uint8)
        state = car_state_observation(self.sim.sensors(self.np_random), self.timer.next_checkpoint, self._previous)
        return {"frames": frames, "state": state}

    def step(self, action):
        c = self.config
        action = np.asarray(action, np.float32).reshape(-1)
        if action.shape != (2,) or not np.isfinite(action).all():
            raise ValueError(f"action must be 2 finite values (speed, steer), got {action!r}")
        action = np.clip(action, -1.0, 1.0)
        if c.action_rate_limit is not None:
            action = np.clip(action, self._previous - c.action_rate_limit, self._previous + c.action_rate_limit)
        self._queue.append(action)
        self.sim.step(*self._command(self._queue.popleft()))
        self._previous = action
        self._steps += 1
        reward = progress_reward(self.sim.data.qvel[:2], self.sim.position, self.timer.next_checkpoint)
        lap_time = self.timer.update(self.sim.position, self.sim.time)
        self._event = self.monitor.update(self.sim.position, self.sim.peak_accel)
        terminated = self._event == "crash"
        if self._event is not None:
            excess = max(0.0, float(np.linalg.norm(self.sim.peak_accel)) - c.practice.crash_accel)
            reward -= c.crash_cost + c.crash_accel_cost * excess
        truncated = self._event == "stuck" or self._steps >= c.max_episode_steps
        if truncated and self._event is None:
            self._event = "time_limit"
        info = {"lap_time": lap_time, "laps": len(self.timer.laps), "checkpoint": self.timer.next_index,
                "event": self._event, "executed_action": action, "speed": self.sim.speed}
        return self._observe(), reward, terminated, truncated, info

    def expert_action(self, config: DriverConfig = DriverConfig(), **kwargs) -> np.ndarray:
        """The true-state pure-pursuit driver's action now."""
        c = self.config
        return pure_pursuit_action(self.track, self.sim.position, self.sim.yaw, self.sim.speed, config, c.speed_offset,
                                   c.speed_scale, c.steer_scale, **kwargs)

    def render(self):
        return self.sim.frame() if self.render_mode == "rgb_array" else None

    def close(self):
        self.sim.close()
