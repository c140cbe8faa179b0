"""Real race car node (FastRLAP's car): drives the VESC motor controller (motor speed and steering
servo) over its UART protocol from the actor's `car/cmd_vel`, safely, and practises autonomously
with the same code as the simulated car. The camera is the `camera` node's (front/color/image_raw).

Command interface
-----------------
`car/cmd_vel` (geometry_msgs/Twist, reliable), conventions and validation in
robot_rl/ros/car_io.py (the simulated car's too): `linear.x` speed [m/s], `angular.z` steering
angle [rad], clamped to the hardware YAML's `command` limits (counted); NaN/Inf refused (counted
per reason); other nonzero fields ignored and reported.

Outputs
-------
Every control period (`control_hz`, 20 Hz) the node sends COMM_SET_RPM (speed x `erpm_per_mps`)
and COMM_SET_SERVO_POS (servo_center + servo_per_rad x steer, clamped to the servo's range): the
command while motion is allowed; speed 0 with the steering held otherwise: no command yet, a
command older than `command_timeout_s` (sent at once when it expires), `/estop` (latched: stays 0
until `~/reset_estop` and a new command), a VESC silent for `state_timeout_s`, deactivation. Keep
the VESC's own app timeout set (see hardware/car_vesc.yaml) for a node that dies.

State
-----
COMM_GET_VALUES every period; each reply publishes `car/odom` (Odometry, frames odom -> base_link):
the wheel speed as `twist.linear.x`, the IMU's yaw rate as `twist.angular.z`, and a dead-reckoned
pose that drifts (a fixed-frame position for the checkpoints needs GPS or motion capture: see the
YAML). The YAML's `imu.topic` (sensor_msgs/Imu from an external IMU driver, default `imu/data`)
feeds the crash detector (peak acceleration per period) and the yaw rate, and is republished,
checked, on `car/imu`. `car/practice` and the reverse manoeuvre as in car_sim (car_io.CarPractice).
`/diagnostics`: the VESC's input voltage, fault, temperatures, link and decoder counters.

A VESC port that cannot be opened ends the node at start with the reason (exit code 2).
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any, NoReturn

import numpy as np
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu
from std_msgs.msg import String

from robot_rl.hardware.safety import StopReason
from robot_rl.robots.car.hardware import GET_VALUES_REQUEST, VescError, VescLink, VescValues, WheelOdometry, drive_packets, \
    erpm_to_speed, load_car_hardware
from robot_rl.ros import qos
from robot_rl.ros.car_io import CarCommand, CarPractice, odometry_msg, parse_cmd_vel, parse_imu, practice_msg
from robot_rl.ros.hardware_node import HardwareNode
from robot_rl.ros.node_utils import Param, ParameterError, run_node

PARAMS = [
    Param("hardware", "car_vesc", "Hardware description: a name in the package's hardware/ folder or a path to a "
          "YAML file."),
    Param("port", "", "Overrides the YAML's VESC port (a device such as /dev/ttyACM0 or a pyserial URL). Empty: "
          "the YAML's."),
    Param("seed", 0, "Seed of the recovery manoeuvre's steering draws.", 0, 2**31 - 1),
]

SAFETY_DEFAULTS = {"control_hz": 20.0, "command_timeout_s": 0.1, "state_timeout_s": 0.5}

# IMU drivers publish at 100-400 Hz, best effort: a deep queue so a burst between two executor
# turns still reaches the crash detector sample by sample.
INPUT_IMU = copy.copy(qos.SENSOR)
INPUT_IMU.depth = 50


class CarNode(HardwareNode):
    def __init__(self):
        super().__init__("car", PARAMS, safety_defaults=SAFETY_DEFAULTS)
        try:
            self.hw = load_car_hardware(self.params["hardware"])
        except ValueError as exc:
            raise ParameterError(f"parameter 'hardware': {exc}") from None
        hw = self.hw
        self.port = self.params["port"] or hw.port
        try:
            self.link = VescLink(self.port, hw.baud, hw.write_timeout_s)
        except VescError as exc:
            raise ParameterError(f"parameter 'port': {exc}") from None
        self.practice = CarPractice(hw.practice, self.control_hz, hw.limits.max_steer,
                                    np.random.default_rng(self.params["seed"]))
        self.odometry = WheelOdometry()
        self.command: CarCommand | None = None
        self.steer = 0.0  # held while the car may not move
        self.values: VescValues | None = None
        self.values_time: float | None = None
        self.imu_time: float | None = None
        self.yaw_rate = 0.0
        self.peak_accel: np.ndarray | None = None  # largest IMU sample since the last control step
        self.counts: Counter[str] = Counter()
        self.ignored: Counter[str] = Counter()
        self.odom_pub = self.create_publisher(Odometry, "car/odom", qos.SENSOR)
        self.practice_pub = self.create_publisher(String, "car/practice", qos.EVENTS)
        self.imu_pub = self.create_publisher(Imu, "car/imu", qos.SENSOR) if hw.imu_topic else None
        self.create_checked_subscription(Twist, "car/cmd_vel", self._on_cmd, qos.COMMAND_INPUT, "cmd_vel")
        if hw.imu_topic:
            self.create_checked_subscription(Imu, hw.imu_topic, self._on_imu, INPUT_IMU, "imu")
        self.create_timer(self.control_period_s, self._poll_vesc, clock=self.steady_clock)
        self.get_logger().info(f"hardware {hw.name} ({hw.source}): VESC at {self.port}, IMU "
                               f"{hw.imu_topic or 'none (no crash detection)'}")

    # ---- inputs ----------------------------------------------------------------------------------

    def _on_cmd(self, msg: Twist) -> None:
        cmd = parse_cmd_vel(msg, self.hw.limits)
        if cmd.ignored:
            self.ignored.update(cmd.ignored)
            self.get_logger().warning(f"car/cmd_vel: ignored nonzero {', '.join(cmd.ignored)} (only linear.x = speed "
                                      "and angular.z = steering are used)", throttle_duration_sec=5.0)
        if not self.accept_command():
            return
        if cmd.clamped:
            self.gate.count_clamped()
            self.counts.update(f"clamped_{name.replace('.', '_')}" for name in cmd.clamped)
        self.command = cmd

    def _on_imu(self, msg: Imu) -> None:
        self.check_stamp(msg.header.stamp, self.params["state_timeout_s"])
        imu = parse_imu(msg)
        accel = imu["accel"]
        if self.peak_accel is None or accel @ accel > self.peak_accel @ self.peak_accel:
            self.peak_accel = accel
        self.yaw_rate, self.imu_time = float(imu["gyro"][2]), self.now()
        self.imu_pub.publish(msg)

    def _poll_vesc(self) -> None:
        """Reads the reply to the last COMM_GET_VALUES, asks for the next one, publishes odometry."""
        try:
            values = self.link.read_values()
            self.link.write(GET_VALUES_REQUEST)
        except VescError as exc:
            self.counts["link_errors"] += 1
            self.get_logger().error(str(exc), throttle_duration_sec=5.0)
            return
        if values is None:
            return
        now = self.now()
        self.values, self.values_time = values, now
        self.state_received()
        if values.fault_code:
            self.get_logger().error(f"VESC fault: {values.fault}", throttle_duration_sec=5.0)
        imu_fresh = self.imu_time is not None and now - self.imu_time <= self.params["state_timeout_s"]
        yaw_rate = self.yaw_rate if imu_fresh else 0.0
        speed = erpm_to_speed(values.erpm, self.hw.vesc)
        self.odometry.update(now, speed, yaw_rate)
        sensors = {"position": self.odometry.position, "quat": self.odometry.quat, "velocity": [speed, 0.0, 0.0],
                   "gyro": [0.0, 0.0, yaw_rate]}
        self.odom_pub.publish(odometry_msg(sensors, self.get_clock().now().nanoseconds))

    # ---- HardwareNode hooks ----------------------------------------------------------------------

    def activation_check(self) -> str | None:
        timeout = self.params["state_timeout_s"] or 1.0
        if self.values_time is None or self.now() - self.values_time > timeout:
            return (f"no COMM_GET_VALUES reply from the VESC at {self.port} in the last "
                    f"{timeout:g} s (powered? the right port and baud?)")
        return None

    def control_step(self, verdict: StopReason) -> None:
        peak, self.peak_accel = self.peak_accel, None
        if not verdict.allows_motion:
            speed, steer = 0.0, self.steer
        elif self.practice.state == "recovering":
            speed, steer = self.practice.recovery_command()  # the actor's command is ignored
            self.counts["recovery_steps"] += 1
        else:
            speed, steer = self.command.speed, self.command.steer
        self.link.write(drive_packets(speed, steer, self.hw.vesc))
        self.steer = steer
        self.counts["outputs"] += 1
        if verdict.allows_motion:
            event = self.practice.after_step(self.odometry.position, peak, self.get_clock().now().nanoseconds)
            if event is not None:
                self.practice_pub.publish(practice_msg(event))
                self.get_logger().info(f"practice: {event.state}" + (f" after {event.event}" if event.event else ""))

    def diagnostic_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {"port": self.port, "practice_state": self.practice.state, **self.practice.counts,
                                  **self.counts, **{f"vesc_{k}": v for k, v in self.link.counters.items()},
                                  **{f"decoder_{k}": v for k, v in self.link.decoder.counters.items()},
                                  **{f"ignored_{k.replace('.', '_')}": v for k, v in self.ignored.items()}}
        v = self.values
        if v is not None:
            values.update(vesc_input_voltage_v=v.input_voltage_v, vesc_erpm=v.erpm, vesc_fault=v.fault,
                          vesc_temp_fet_c=v.temp_fet_c, vesc_temp_motor_c=v.temp_motor_c,
                          vesc_motor_current_a=v.motor_current_a,
                          speed_mps=round(erpm_to_speed(v.erpm, self.hw.vesc), 3))
        return values

    def close(self) -> None:
        super().close()  # deactivates: the last safe output
        self.link.close()


def main(args=None) -> NoReturn:
    run_node(CarNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
