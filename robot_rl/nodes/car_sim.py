"""Simulated race car (FastRLAP): the MuJoCo car on a procedural track, publishing what the real
`car` node and the camera node publish and obeying the same `car/cmd_vel` contract (validated by
the same function, limits and practice settings from the same hardware YAML).

Publishes, all with the same stamp (conventions in robot_rl/ros/car_io.py): `front/color/image_raw`
+ `front/color/camera_info`, `car/imu`, then `car/odom` (sensor-data QoS; odom last: it completes an
observation); `/clock` in lockstep; `car/practice` when the practice state changes; `/diagnostics`.
Subscribes `car/cmd_vel` (Twist) and `/estop` (std_msgs/Bool, latched: speed 0, steering held,
until `~/reset_estop`). Service `~/reset` (std_srvs/Trigger): a new randomization draw and the car
back on the start line; the response message is JSON `{"stamp_ns": <stamp of its first observation>}`.

Autonomous practice runs inside the node (car_io.CarPractice, the real car's code): after a crash
or when stuck, the car ignores the actor's commands for the reverse manoeuvre, then drives again.

Clock modes (as quad_sim): `lockstep` advances one control period per valid command (it answers
the newest observation; the observation is republished when none comes); `realtime` steps on a
wall-clock timer with the latest command, and a command older than `command_timeout_s` is
replaced by speed 0, steering held (counted `stale_commands`).
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from typing import NoReturn

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image, Imu
from std_msgs.msg import String

from robot_rl.robots.car.sim import CarRaceConfig, CarSim
from robot_rl.envs.randomization import Randomization
from robot_rl.robots.car.track import generate_track
from robot_rl.hardware.cameras.frame_geometry import Intrinsics
from robot_rl.hardware.safety import Rejected
from robot_rl.robots.car.hardware import CarLimits, load_car_hardware
from robot_rl.resources import package_path
from robot_rl.ros import qos
from robot_rl.ros.camera_io import camera_info_msg
from robot_rl.ros.car_io import CarCommand, CarPractice, PracticeEvent, imu_msg, odometry_msg, parse_cmd_vel, \
    practice_msg
from robot_rl.ros.hardware_node import SimEstop
from robot_rl.ros.messages import image_to_msg, ns_to_stamp
from robot_rl.ros.node_utils import Param, ParameterError, declare_params, diagnostics, params_from_dataclass, \
    run_node
from robot_rl.ros.sim_time import CLOCK_PARAMS, SimulatedTime

CAMERA = "front"
CAMERA_FRAME = f"{CAMERA}_color_optical_frame"

PARAMS = [
    *CLOCK_PARAMS,
    Param("hardware", "car_vesc", "Hardware YAML whose command contract (speed and steering limits, practice "
          "settings) the simulated car obeys, as the real car node does."),
    Param("max_speed", 0.0, "Forward speed limit [m/s] of car/cmd_vel (0: the hardware YAML's).", 0.0, 30.0),
    Param("max_steer", 0.0, "Steering angle limit [rad] of car/cmd_vel (0: the hardware YAML's).", 0.0, 1.0),
    *params_from_dataclass(CarRaceConfig, only=("track_seed", "boundary", "image_size", "control_hz", "randomization",
                                                "randomization_split"),
                           defaults={"randomization": "sim/car/randomization.yaml"}),
    Param("command_timeout_s", 0.1, "Realtime mode: speed 0 when the last command is older.", 0.01, 10.0),
    Param("seed", 0, "Random seed of the draws, the sensor noise and the recovery steering.", 0, 2**31 - 1),
]


class CarSimNode(Node):
    def __init__(self):
        super().__init__("car_sim")
        p = self.params = declare_params(self, PARAMS)
        try:
            self.hw = load_car_hardware(p["hardware"])
            self.randomization = Randomization.load(package_path(p["randomization"])) if p["randomization"] else None
        except (FileNotFoundError, ValueError) as exc:
            raise ParameterError(str(exc)) from None
        self.limits = CarLimits(max_speed=p["max_speed"] or self.hw.limits.max_speed,
                                max_reverse_speed=self.hw.limits.max_reverse_speed,
                                max_steer=p["max_steer"] or self.hw.limits.max_steer)
        if not -self.limits.max_reverse_speed <= self.hw.practice.recovery_speed <= self.limits.max_speed:
            raise ParameterError(f"max_speed {self.limits.max_speed} excludes the recovery speed "
                                 f"{self.hw.practice.recovery_speed} m/s of {self.hw.source}")
        self.rng = np.random.default_rng(p["seed"])
        self.track = generate_track(np.random.default_rng(p["track_seed"]))
        self.sim = CarSim(self.track, p["boundary"], p["image_size"], p["control_hz"])
        self.practice = CarPractice(self.hw.practice, p["control_hz"], self.limits.max_steer, self.rng)
        self.last_cmd: tuple[CarCommand, float] | None = None  # command, wall time received
        self.latency: deque[tuple[float, float]] = deque()  # the drawn action latency, as in CarRaceEnv
        self.steer = 0.0  # held while the car may not move
        self.counters = {"steps": 0, "resets": 0, "commands_received": 0, "rejected_commands": 0,
                         "clamped_commands": 0, "commands_with_ignored_fields": 0, "stale_commands": 0,
                         "estopped_steps": 0, "recovery_steps": 0, "republished": 0, "estops": 0}
        self.rejected: dict[str, int] = {}
        self.ignored: dict[str, int] = {}
        self.image_pub = self.create_publisher(Image, f"{CAMERA}/color/image_raw", qos.SENSOR)
        self.info_pub = self.create_publisher(CameraInfo, f"{CAMERA}/color/camera_info", qos.SENSOR)
        self.camera_info = self._camera_info()
        self.imu_pub = self.create_publisher(Imu, "car/imu", qos.SENSOR)
        self.odom_pub = self.create_publisher(Odometry, "car/odom", qos.SENSOR)
        self.practice_pub = self.create_publisher(String, "car/practice", qos.EVENTS)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(Twist, "car/cmd_vel", self._on_cmd, qos.COMMAND_INPUT)
        self.estop = SimEstop(self, self.counters, "speed 0")
        self.time = SimulatedTime(self, 1.0 / p["control_hz"], p["clock_mode"] == "lockstep",
                                  p["republish_period_s"], self.counters, self._publish_observation,
                                  self._realtime_step, self._on_reset, tick_phase=p["tick_phase"])
        self.create_timer(1.0, self._publish_diagnostics)
        self._new_episode()
        self.time.publish()

    # ---- commands -----------------------------------------------------------------------------

    def _on_cmd(self, msg: Twist) -> None:
        self.counters["commands_received"] += 1
        try:
            cmd = parse_cmd_vel(msg, self.limits)
        except Rejected as exc:
            self.counters["rejected_commands"] += 1
            self.rejected[exc.reason] = self.rejected.get(exc.reason, 0) + 1
            self.get_logger().warning(f"rejected car/cmd_vel: {exc}", throttle_duration_sec=5.0)
            return
        self.counters["clamped_commands"] += int(bool(cmd.clamped))
        if cmd.ignored:
            self.counters["commands_with_ignored_fields"] += 1
            for name in cmd.ignored:
                self.ignored[name] = self.ignored.get(name, 0) + 1
            self.get_logger().warning(f"car/cmd_vel: ignored nonzero {', '.join(cmd.ignored)} (only linear.x = "
                                      "speed and angular.z = steering are used)", throttle_duration_sec=5.0)
        self.last_cmd = (cmd, time.monotonic())
        if self.time.lockstep:
            self._step(cmd)

    def _realtime_step(self) -> None:
        cmd = self.last_cmd
        if cmd is None or time.monotonic() - cmd[1] > self.params["command_timeout_s"]:
            self.counters["stale_commands"] += int(cmd is not None)
            self._step(None)
        else:
            self._step(cmd[0])

    def _step(self, cmd: CarCommand | None) -> None:
        """One control period; `cmd` None: no live command (the car stops, steering held)."""
        commanded = cmd is not None and not self.estop.active
        if not commanded:
            self.counters["estopped_steps"] += int(self.estop.active)
            speed, steer = 0.0, self.steer
        elif self.practice.state == "recovering":
            speed, steer = self.practice.recovery_command()  # the actor's command is ignored
            self.counters["recovery_steps"] += 1
        else:
            self.latency.append((cmd.speed, cmd.steer))
            speed, steer = self.latency.popleft()
        self.sim.step(speed, steer)
        self.steer = steer
        self.time.advance()
        self.counters["steps"] += 1
        if commanded:
            self._publish_practice(self.practice.after_step(self.sim.position, self.sim.peak_accel, self.time.now_ns))
        self.time.publish()

    # ---- observations -------------------------------------------------------------------------

    def _publish_observation(self, stamp_ns: int) -> None:
        stamp = ns_to_stamp(stamp_ns)
        self.image_pub.publish(image_to_msg(self.sim.frame(), stamp, CAMERA_FRAME))
        self.camera_info.header.stamp = stamp
        self.info_pub.publish(self.camera_info)
        sensors = self.sim.sensors(self.rng)
        self.imu_pub.publish(imu_msg(sensors, stamp_ns))
        self.odom_pub.publish(odometry_msg(sensors, stamp_ns))

    def _publish_practice(self, event: PracticeEvent | None) -> None:
        if event is not None:
            self.practice_pub.publish(practice_msg(event))
            self.get_logger().info(f"practice: {event.state}" + (f" after {event.event}" if event.event else ""))

    def _camera_info(self) -> CameraInfo:
        size = self.params["image_size"]
        f = 0.5 * size / math.tan(math.radians(self.sim.model.camera(CAMERA).fovy[0]) / 2)
        c = (size - 1) / 2
        return camera_info_msg(Intrinsics(size, size, f, f, c, c), CAMERA_FRAME)

    def _publish_diagnostics(self) -> None:
        values = dict(self.counters)
        values.update(self.practice.counts, estopped=self.estop.active, practice_state=self.practice.state,
                      rejected_by_reason=json.dumps(self.rejected), ignored_fields=json.dumps(self.ignored),
                      max_speed=self.limits.max_speed, max_steer=self.limits.max_steer,
                      track_length_m=round(self.track.length, 2), friction=round(float(self.sim.params["friction"]), 3))
        self.diag_pub.publish(diagnostics(self, values))

    # ---- episodes -----------------------------------------------------------------------------

    def _new_episode(self) -> None:
        """A fresh randomization draw, the car at rest on the start line."""
        params = self.randomization.sample(self.params["randomization_split"], self.rng) if self.randomization else {}
        self.sim.apply(params)
        self.sim.place(*self.track.start_pose(self.sim.params["start_offset"]))
        self.latency = deque([(0.0, 0.0)] * int(self.sim.params["action_latency_steps"]))
        self.steer = 0.0

    def _on_reset(self) -> None:
        self._new_episode()
        self.last_cmd = None
        self._publish_practice(self.practice.reset(self.time.now_ns))

    def close(self) -> None:
        self.sim.close()


def main(args=None) -> NoReturn:
    run_node(CarSimNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
