"""Teleoperation without ROS: input devices (SpaceMouse, gamepad over evdev or a Joy message,
keyboard in a terminal), their per-device mapping files (hardware/teleop_*.yaml) and the
person/policy arbitration, and the actor's view of what the person commands (`HumanCommand`).
The node is `robot_rl.nodes.teleop`."""

from robot_rl.teleop.arbitration import EVENTS, ArbitrationConfig, ArbitrationOutput, Arbitrator, EngageRule
from robot_rl.teleop.backend import DeviceError, InputBackend
from robot_rl.teleop.devices import backend_opener
from robot_rl.teleop.evdev_gamepad import EvdevBackend, EvdevState
from robot_rl.teleop.inputs import ACTIONS, AXES, EPISODE_LABELS, SESSION_KEYS, InputRejections, TeleopInput
from robot_rl.teleop.joy import JoyDecoder
from robot_rl.teleop.keyboard import KeyboardBackend, KeyDecoder
from robot_rl.teleop.mapping import DEVICE_KINDS, DeviceMapping, InputMapper, load_mapping, parse_mapping
from robot_rl.teleop.spacemouse import SpaceMouseBackend, SpaceMouseReport, parse_spacemouse_report
from robot_rl.teleop.takeover import HumanCommand, human_action

__all__ = [
    "ACTIONS", "AXES", "DEVICE_KINDS", "EPISODE_LABELS", "EVENTS", "SESSION_KEYS", "ArbitrationConfig", "ArbitrationOutput",
    "Arbitrator", "DeviceError", "DeviceMapping", "EngageRule", "EvdevBackend", "EvdevState", "InputBackend",
    "HumanCommand", "InputMapper", "InputRejections", "JoyDecoder", "KeyDecoder", "KeyboardBackend", "SpaceMouseBackend",
    "SpaceMouseReport", "TeleopInput", "backend_opener", "human_action", "load_mapping", "parse_mapping", "parse_spacemouse_report",
]
