"""The arm hardware description (hardware/<arm>.yaml), checked: which controller interface the
arm's driver offers, its topics and frames, the workspace box, joint limits, homing, gripper and
the DH kinematics the joint interfaces need."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.robots.arm.kinematics import Kinematics
from robot_rl.hardware.files import load_hardware_file

INTERFACES = ("cartesian_pose", "servo_twist", "joint_trajectory", "forward_position")
JOINT_INTERFACES = ("joint_trajectory", "forward_position")


@dataclass(frozen=True)
class ArmHardware:
    """A parsed hardware/<arm>.yaml (see the examples there for every field)."""

    name: str
    interface: str
    joint_names: tuple[str, ...]
    joint_states_topic: str
    ee_pose_topic: str  # "" = computed from the kinematic model
    state_frame: str
    command_frame: str
    max_speed: np.ndarray  # m/s per axis
    output_topic: str
    output_frame: str
    time_from_start_s: float
    workspace_low: np.ndarray
    workspace_high: np.ndarray
    max_lead: float
    activation_margin: float
    state_margin: float
    joint_low: np.ndarray | None
    joint_high: np.ndarray | None
    joint_max_speed: float
    joint_state_margin: float
    home_position: np.ndarray
    home_speed: float
    home_tolerance: float
    gripper_topic: str
    gripper_open: float
    gripper_closed: float
    observation_ee_pose_topic: str
    kinematics: Kinematics | None = None
    source: str = field(default="", compare=False)

    def max_step(self, control_hz: float) -> np.ndarray:
        """Per-axis Cartesian limit per control period (m)."""
        return self.max_speed / control_hz

    def max_joint_step(self, control_hz: float) -> float:
        return self.joint_max_speed / control_hz


def _vec(section: dict, key: str, n: int | None, where: str, default: Any = None) -> np.ndarray:
    value = section.get(key, default)
    if value is None:
        raise ValueError(f"{where}.{key} is required")
    a = np.asarray(value, dtype=np.float64)
    if a.ndim == 0 and n is not None:
        a = np.full(n, float(a))
    if (n is not None and a.shape != (n,)) or not np.isfinite(a).all():
        raise ValueError(f"{where}.{key} must be {n or 'a list of'} finite numbers, got {value!r}")
    return a


def _num(section: dict, key: str, where: str, default: float | None = None, low: float = 0.0,
         positive: bool = False) -> float:
    value = section.get(key, default)
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}.{key} must be a number, got {value!r}") from None
    if not math.isfinite(x) or x < low or (positive and x <= 0):
        raise ValueError(f"{where}.{key} must be a finite number {'>' if positive else '>='} {low}, got {value!r}")
    return x


def _topic(section: dict, key: str, where: str, default: str | None = None, allow_empty: bool = False) -> str:
    value = section.get(key, default)
    if value is None or not isinstance(value, str) or (not value and not allow_empty):
        raise ValueError(f"{where}.{key} must be a topic name string, got {value!r}")
    return value


def load_hardware(name_or_path: str, share_dir: Path | None = None) -> ArmHardware:
    """Reads and checks a hardware YAML; raises ValueError naming the file and the bad field."""
    return load_hardware_file(name_or_path, parse_hardware, share_dir)


def parse_hardware(data: Any, name: str = "arm", source: str = "") -> ArmHardware:
    if not isinstance(data, dict):
        raise ValueError("the hardware description must be a mapping")
    sections = {k: data.get(k) or {} for k in ("state", "command", "output", "workspace", "joints", "home",
                                                "gripper", "observation")}
    for key, section in sections.items():
        if not isinstance(section, dict):
            raise ValueError(f"{key} must be a mapping")
    interface = data.get("interface")
    if interface not in INTERFACES:
        raise ValueError(f"interface must be one of {list(INTERFACES)}, got {interface!r}")
    names = data.get("joint_names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names) \
            or len(set(names)) != len(names):
        raise ValueError(f"joint_names must be a non-empty list of distinct names, got {names!r}")
    n = len(names)
    st, cmd, out, ws, jt, home, grip, obs = sections.values()
    low, high = _vec(ws, "low", 3, "workspace"), _vec(ws, "high", 3, "workspace")
    if not (low < high).all():
        raise ValueError(f"workspace.low {low.tolist()} must be below workspace.high {high.tolist()}")
    max_speed = _vec(cmd, "max_speed", 3, "command")
    if not (max_speed > 0).all():
        raise ValueError("command.max_speed must be > 0 on every axis")
    joint_low = joint_high = None
    if "low" in jt or "high" in jt or interface in JOINT_INTERFACES:
        joint_low, joint_high = _vec(jt, "low", n, "joints"), _vec(jt, "high", n, "joints")
        if not (joint_low < joint_high).all():
            raise ValueError("joints.low must be below joints.high")
    home_pos = _vec(home, "position", 3, "home")
    if not ((home_pos >= low) & (home_pos <= high)).all():
        raise ValueError(f"home.position {home_pos.tolist()} is outside the workspace box")
    kin = None
    kin_data = data.get("kinematics")
    if kin_data is not None:
        kin = _parse_kinematics(kin_data, n)
    ee_topic = _topic(st, "ee_pose_topic", "state", "", allow_empty=True)
    if interface in JOINT_INTERFACES and kin is None:
        raise ValueError(f"interface {interface} needs a kinematics section (DH parameters)")
    if not ee_topic and kin is None:
        raise ValueError("state.ee_pose_topic is empty and there is no kinematics section to compute the pose")
    hw = ArmHardware(
        name=name, interface=interface, joint_names=tuple(names),
        joint_states_topic=_topic(st, "joint_states_topic", "state", "joint_states"),
        ee_pose_topic=ee_topic,
        state_frame=_topic(st, "frame", "state"),
        command_frame=_topic(cmd, "frame", "command", "world"),
        max_speed=max_speed,
        output_topic=_topic(out, "topic", "output"),
        output_frame=_topic(out, "frame", "output", "", allow_empty=True),
        time_from_start_s=_num(out, "time_from_start_s", "output", 0.1, positive=True),
        workspace_low=low, workspace_high=high,
        max_lead=_num(ws, "max_lead", "workspace", 0.05, positive=True),
        activation_margin=_num(ws, "activation_margin", "workspace", 0.02),
        state_margin=_num(ws, "state_margin", "workspace", 0.5),
        joint_low=joint_low, joint_high=joint_high,
        joint_max_speed=_num(jt, "max_speed", "joints", 1.0, positive=True),
        joint_state_margin=_num(jt, "state_margin", "joints", 0.2),
        home_position=home_pos,
        home_speed=_num(home, "speed", "home", 0.1, positive=True),
        home_tolerance=_num(home, "tolerance", "home", 0.01, positive=True),
        gripper_topic=_topic(grip, "topic", "gripper", "", allow_empty=True),
        gripper_open=_num(grip, "open", "gripper", 0.08, low=-1e9),
        gripper_closed=_num(grip, "closed", "gripper", 0.0, low=-1e9),
        observation_ee_pose_topic=_topic(obs, "ee_pose_topic", "observation", "", allow_empty=True),
        kinematics=kin, source=source)
    return hw


def _parse_kinematics(data: Any, n: int) -> Kinematics:
    if not isinstance(data, dict):
        raise ValueError("kinematics must be a mapping")
    convention = data.get("convention", "modified")
    if convention not in ("modified", "standard"):
        raise ValueError(f"kinematics.convention must be 'modified' or 'standard', got {convention!r}")

    def rows(key: str, count: int | None) -> np.ndarray:
        value = data.get(key, [] if count is None else None)
        a = np.asarray(value, dtype=np.float64).reshape(-1, 4) if value else np.zeros((0, 4))
        if (count is not None and a.shape != (count, 4)) or not np.isfinite(a).all():
            raise ValueError(f"kinematics.{key} must be {count or 'some'} rows of [a, d, alpha, theta_offset]")
        return a

    return Kinematics(convention, rows("dh", n), rows("tool_dh", None),
                      _num(data, "damping", "kinematics", 0.05, positive=True),
                      _num(data, "orientation_weight", "kinematics", 0.5))
