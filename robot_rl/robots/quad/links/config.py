"""The quadrotor hardware description (hardware/<quad>.yaml), checked, and the link it names."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.control.checks import finite
from robot_rl.hardware.files import load_hardware_file, number_field, section_field, string_field
from robot_rl.robots.quad.links.crazyflie import CrazyflieConfig, CrazyflieLink, MotorThrustModel
from robot_rl.robots.quad.links.link import Geofence, QuadLink
from robot_rl.robots.quad.links.mavlink import GRAVITY, MavlinkConfig, MavlinkLink


@dataclass(frozen=True)
class QuadHardware:
    """A checked hardware/<quad>.yaml."""

    name: str
    source: str
    link: str
    connection: str
    command_frame: str
    thrust_limits: tuple[float, float]
    max_rates: np.ndarray
    state_frame: str
    odom_topic: str
    ball_topic: str
    observation_odom_topic: str
    observation_ball_topic: str
    geofence: Geofence | None
    estop_action: str
    mavlink: MavlinkConfig | None
    crazyflie: CrazyflieConfig | None

    def link_config(self, connection: str = "") -> MavlinkConfig | CrazyflieConfig:
        """The link's configuration, with `connection` (if given) replacing the YAML's."""
        from dataclasses import replace

        if self.mavlink is not None:
            return replace(self.mavlink, connection=connection) if connection else self.mavlink
        return replace(self.crazyflie, uri=connection) if connection else self.crazyflie


COMMAND_THRUST_RANGE = (0.0, 15.0)
"""What quad/cmd_ctbr's thrust (m/s^2) may span; a YAML's limits must lie inside."""
COMMAND_MAX_RATE = math.pi
"""Body-rate magnitude limit (rad/s) of quad/cmd_ctbr; a YAML's limits must be at most this."""


def load_quad_hardware(name_or_path: str, share_dir: Path | None = None) -> QuadHardware:
    """Reads and checks a quadrotor hardware YAML; raises ValueError naming the file and the bad field."""
    return load_hardware_file(name_or_path, parse_quad_hardware, share_dir)


def _vector(section: dict, key: str, n: int, where: str, default: Any = None) -> np.ndarray:
    value = section.get(key, default)
    try:
        return finite(f"{where}.{key}", value, n)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}.{key} must be {n} finite numbers ({exc})") from None


def parse_quad_hardware(data: Any, name: str = "quad", source: str = "") -> QuadHardware:
    if not isinstance(data, dict):
        raise ValueError("the hardware description must be a mapping")
    link = data.get("link")
    if link not in ("mavlink", "crazyflie"):
        raise ValueError(f"link must be 'mavlink' or 'crazyflie', got {link!r}")
    connection = string_field(data, "connection", "", "")
    command, state = section_field(data, "command"), section_field(data, "state")
    obs = section_field(data, "observation")
    safety = section_field(data, "safety")

    thrust = _vector(command, "thrust", 2, "command", COMMAND_THRUST_RANGE)
    lo_t, hi_t = COMMAND_THRUST_RANGE
    if not lo_t <= thrust[0] < thrust[1] <= hi_t:
        raise ValueError(f"command.thrust must be [low, high] with {lo_t} <= low < high <= {hi_t} m/s^2, "
                         f"got {thrust.tolist()}")
    rates = _vector(command, "max_rate", 3, "command", [COMMAND_MAX_RATE] * 3)
    if (rates <= 0).any() or (rates > COMMAND_MAX_RATE + 1e-9).any():
        raise ValueError(f"command.max_rate must be in (0, pi] rad/s per axis, got {rates.tolist()}")

    fence = None
    fence_data = data.get("geofence")
    if fence_data is not None:
        if not isinstance(fence_data, dict):
            raise ValueError("geofence must be a mapping with low and high")
        try:
            fence = Geofence(tuple(_vector(fence_data, "low", 3, "geofence")),
                             tuple(_vector(fence_data, "high", 3, "geofence")))
        except ValueError as exc:
            raise ValueError(str(exc) if "geofence" in str(exc) else f"geofence: {exc}") from None

    setpoint_timeout = number_field(safety, "setpoint_timeout_s", 0.3 if link == "mavlink" else 0.2, "safety",
                                    0.01, 5.0)
    estop_action = string_field(safety, "estop_action", "land" if link == "mavlink" else "stop", "safety")
    mav = cf = None
    if link == "mavlink":
        m = section_field(data, "mavlink")
        try:
            mav = MavlinkConfig(
                connection=connection, baud=int(number_field(m, "baud", 921600, "mavlink", 1200, 10_000_000)),
                autopilot=string_field(m, "autopilot", "px4", "mavlink"),
                hover_thrust=number_field(m, "hover_thrust", 0.5, "mavlink", 0.05, 0.95),
                gravity=number_field(m, "gravity", GRAVITY, "mavlink", 1.0, 20.0),
                source_system=int(number_field(m, "source_system", 255, "mavlink", 1, 255)),
                source_component=int(number_field(m, "source_component", 191, "mavlink", 0, 255)),
                target_system=int(number_field(m, "target_system", 0, "mavlink", 0, 255)),
                target_component=int(number_field(m, "target_component", 0, "mavlink", 0, 255)),
                heartbeat_hz=number_field(m, "heartbeat_hz", 20.0, "mavlink", 10.0, 100.0),
                link_timeout_s=number_field(safety, "link_timeout_s", 1.0, "safety", 0.1, 30.0),
                setpoint_timeout_s=setpoint_timeout,
                offboard_stream_s=number_field(m, "offboard_stream_s", 1.0, "mavlink", 1.0, 10.0),
                stream_hz=number_field(m, "stream_hz", 20.0, "mavlink", 2.0, 200.0),
                ack_timeout_s=number_field(m, "ack_timeout_s", 1.0, "mavlink", 0.05, 10.0),
                command_retries=int(number_field(m, "command_retries", 3, "mavlink", 1, 20)),
                estop_action=estop_action, geofence=fence)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
    else:
        c = section_field(data, "crazyflie")
        model = section_field(c, "thrust_model")
        try:
            coeffs = _vector(model, "coefficients", 3, "crazyflie.thrust_model", MotorThrustModel().coefficients)
            thrust_model = MotorThrustModel(
                mass_kg=number_field(model, "mass_kg", 0.032, "crazyflie.thrust_model", 0.005, 5.0),
                coefficients=tuple(float(x) for x in coeffs),
                motors=int(number_field(model, "motors", 4, "crazyflie.thrust_model", 1, 8)))
            if thrust_model.max_accel() < thrust[1]:
                raise ValueError(f"crazyflie.thrust_model reaches only {thrust_model.max_accel():.2f} m/s^2 at full "
                                 f"PWM: lower command.thrust's high limit ({thrust[1]:g})")
            arming = c.get("arming_request", True)
            if not isinstance(arming, bool):
                raise ValueError("crazyflie.arming_request must be true or false")
            cf = CrazyflieConfig(uri=connection, thrust_model=thrust_model, setpoint_timeout_s=setpoint_timeout,
                                 estop_action=estop_action, arming_request=arming, geofence=fence)
        except ValueError as exc:
            raise ValueError(str(exc) if "crazyflie" in str(exc) or "estop" in str(exc) or "setpoint" in str(exc)
                             else f"crazyflie: {exc}") from None
    return QuadHardware(
        name=name, source=source, link=link, connection=connection,
        command_frame=string_field(command, "frame", "base_link", "command"),
        thrust_limits=(float(thrust[0]), float(thrust[1])), max_rates=rates,
        state_frame=string_field(state, "frame", "map", "state"),
        odom_topic=string_field(state, "odom_topic", "quad/odom", "state"),
        ball_topic=string_field(state, "ball_topic", "ball/pose", "state", allow_empty=True),
        observation_odom_topic=string_field(obs, "odom_topic", "", "observation", allow_empty=True),
        observation_ball_topic=string_field(obs, "ball_topic", "", "observation", allow_empty=True),
        geofence=fence, estop_action=estop_action, mavlink=mav, crazyflie=cf)


def make_link(hw: QuadHardware, connection: str = "", crazyflie: Any = None) -> QuadLink:
    """The link a hardware description names (not connected yet)."""
    config = hw.link_config(connection)
    if isinstance(config, MavlinkConfig):
        return MavlinkLink(config)
    return CrazyflieLink(config, crazyflie)
