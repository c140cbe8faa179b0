"""Per-device mapping files (hardware/teleop_*.yaml): raw device axes and buttons -> `TeleopInput`.

A file has common settings and one section per device kind it supports (a gamepad file has both
`evdev` and `joy`, whose axis and button numbering differ):

```yaml
deadzone: 0.05                 # |raw| below this reads 0; the rest is rescaled to stay continuous
engage:                        # when the person takes over (see arbitration.EngageRule)
  deflection_threshold: 0.001  # null: deflection alone never takes over
  buttons: [takeover]          # actions that take over while held (or toggled)
  toggle: false
joy:
  axes:                        # output axis (x y z roll pitch yaw) <- raw axis; missing axes stay 0
    x: {source: 1, scale: 1.0} # scale multiplies after the deadzone; its sign sets the direction
  buttons:                     # raw button -> action (gripper_open gripper_close takeover success
    10: takeover               #   failure rerecord reset); unmapped buttons are ignored
```

Raw axes are normalised to [-1, 1] by the backend before the mapping: SpaceMouse counts divided
by `full_scale`, evdev values over the device's own [min, max], Joy as published.
Device-specific settings (`spacemouse.usb_ids`, `evdev.name`, the keyboard's keys) are described
in `parse_mapping`. Every error names the file and the field.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Mapping

import numpy as np

from robot_rl.hardware.files import load_hardware_file
from robot_rl.teleop.arbitration import EngageRule
from robot_rl.teleop.inputs import ACTIONS, AXES, TeleopInput

__all__ = ["DEFAULT_MAPPINGS", "DEVICE_KINDS", "KEY_NAMES", "AxisSource", "DeviceMapping", "EvdevSettings", "InputMapper",
           "KeyboardSettings", "SpaceMouseSettings", "load_mapping", "parse_mapping"]

DEVICE_KINDS = ("spacemouse", "evdev", "joy", "keyboard")
DEFAULT_MAPPINGS = {"spacemouse": "teleop_spacemouse", "evdev": "teleop_gamepad", "joy": "teleop_gamepad",
                    "keyboard": "teleop_keyboard"}
"""The mapping file (in the package's hardware/ folder) each device kind uses unless told otherwise."""
"""The input backends; each is a section name in the mapping files."""

SPACEMOUSE_AXES = 6
"""Raw SpaceMouse axes: 0-5 = tx, ty, tz, rx, ry, rz as the device reports them."""

KEY_NAMES = ("space", "enter", "tab", "backspace", "esc", "up", "down", "left", "right", "home", "end",
             "page_up", "page_down", "insert", "delete")
"""Named keys a terminal reports (besides the printable ASCII characters, named by themselves)."""

_SECTION_KEYS = {
    "spacemouse": {"axes", "buttons", "usb_ids", "full_scale"},
    "evdev": {"axes", "buttons", "name"},
    "joy": {"axes", "buttons"},
    "keyboard": {"motion_keys", "speed", "key_hold_s", "tap_speed", "full_speed_after_s", "buttons"},
}
_EVDEV_CODE = re.compile(r"^(ABS|BTN|KEY)_[A-Z0-9_]+$")


@dataclass(frozen=True)
class AxisSource:
    """Where one output axis comes from."""

    source: int | str
    """The raw axis: SpaceMouse 0-5 (tx ty tz rx ry rz), evdev an ABS_* code name, joy an index
    into `Joy.axes`, keyboard the output axis its motion keys drive."""
    scale: float
    """Multiplies the raw value after the deadzone (negative flips the direction); the result is
    clipped to [-1, 1]."""


@dataclass(frozen=True)
class SpaceMouseSettings:
    usb_ids: tuple[tuple[int, int], ...]
    """(vendor id, product id) of the devices to look for, in order of preference."""
    full_scale: float
    """Raw counts that read as 1.0 (most models deflect to about +-350)."""


@dataclass(frozen=True)
class EvdevSettings:
    name: str
    """Substring of the input device's name to open when no path is given ("": the first device
    that has every mapped axis and button)."""


@dataclass(frozen=True)
class KeyboardSettings:
    motion_keys: Mapping[str, tuple[str, float]]
    """Key -> (output axis, direction +1/-1) it drives while pressed."""
    key_hold_s: float
    """A motion key drives its axis this long after its last press or auto-repeat (a terminal
    reports presses, never releases). Longer bridges the auto-repeat's initial delay (~0.25-0.5 s)
    smoothly but keeps moving that long after the key is let go."""
    tap_speed: float = 0.2
    """How far a motion key's first press deflects its axis, as a share of `speed`: a tap is a fine step."""
    full_speed_after_s: float = 1.0
    """Holding the key (or tapping it again at once) grows the deflection linearly to `speed` in this long."""

    def deflection(self, held_s: float) -> float:
        """A motion key's deflection after it was held `held_s` seconds, in (0, 1]."""
        return min(1.0, self.tap_speed + (1.0 - self.tap_speed) * held_s / self.full_speed_after_s)


@dataclass(frozen=True)
class DeviceMapping:
    """One device's mapping, validated."""

    device: str
    """The backend (`DEVICE_KINDS`)."""
    axes: Mapping[str, AxisSource]
    """Output axis (`AXES`) -> its source; axes not listed stay 0."""
    buttons: Mapping[Hashable, str]
    """Raw button (SpaceMouse bit index, evdev BTN_/KEY_ name, joy index, key name) -> action."""
    deadzone: float
    """|raw value| below this reads 0; above it the value is rescaled so the output is continuous."""
    engage: EngageRule
    """When the person takes over."""
    name: str = ""
    """File stem, for messages."""
    source: str = ""
    """File path, for messages."""
    spacemouse: SpaceMouseSettings | None = None
    evdev: EvdevSettings | None = None
    keyboard: KeyboardSettings | None = None


class InputMapper:
    """Raw device state -> `TeleopInput`: per-axis source, deadzone, scale and clipping; raw
    buttons -> actions (unmapped buttons are ignored)."""

    def __init__(self, mapping: DeviceMapping):
        self.mapping = mapping
        self._axes = [(AXES.index(axis), src.source, src.scale) for axis, src in mapping.axes.items()]
        self._dz = mapping.deadzone

    def __call__(self, raw_axes: Mapping[Hashable, float], raw_buttons: Iterable[Hashable],
                 stamp: float) -> TeleopInput:
        twist = np.zeros(6)
        for index, source, scale in self._axes:
            value = float(raw_axes.get(source, 0.0))
            magnitude = max(0.0, abs(value) - self._dz) / (1.0 - self._dz)
            twist[index] = scale * math.copysign(magnitude, value)
        np.clip(twist, -1.0, 1.0, out=twist)
        buttons = frozenset(self.mapping.buttons[b] for b in raw_buttons if b in self.mapping.buttons)
        return TeleopInput(twist, buttons, stamp)

    def raw_for(self, twist, actions: Iterable[str]) -> tuple[dict[Hashable, float], list[Hashable]]:
        """The inverse: raw axes and buttons that read as `twist` with `actions` held (what a hand
        does to the device; the scripted human drives a gamepad this way). Raises ValueError for a
        twist axis the mapping has no source for, or an action no button means."""
        twist = np.clip(np.asarray(twist, dtype=np.float64), -1.0, 1.0)
        raw: dict[Hashable, float] = {}
        mapped = {index for index, _, _ in self._axes}
        for index in np.flatnonzero(twist):
            if index not in mapped:
                raise ValueError(f"the mapping has no source for axis {AXES[index]!r}")
        for index, source, scale in self._axes:
            value = twist[index] / scale
            magnitude = min(abs(value), 1.0)
            raw[source] = math.copysign(self._dz + magnitude * (1.0 - self._dz), value) if magnitude > 0 else 0.0
        by_action = {action: button for button, action in self.mapping.buttons.items()}
        missing = set(actions) - set(by_action)
        if missing:
            raise ValueError(f"no button of the mapping means {sorted(missing)}")
        return raw, [by_action[a] for a in actions]


def load_mapping(name_or_path: str, device: str) -> DeviceMapping:
    """`teleop_spacemouse` (in the package's hardware/ folder) or a path -> the `device` section's
    mapping; ValueError naming the file and the bad field."""
    return load_hardware_file(name_or_path, lambda data, name, source: parse_mapping(data, device, name, source))


def parse_mapping(data: Any, device: str, name: str = "", source: str = "") -> DeviceMapping:
    """Validates a mapping file's content for one device kind.

    Device sections besides `axes` and `buttons`:
    - `spacemouse`: `usb_ids` ([[vendor, product], ...]), `full_scale` (counts read as 1.0).
      Axis sources 0-5, buttons by bit index in the button report (0 = left, 1 = right).
    - `evdev`: `name` (device name substring). Axis sources ABS_* names, buttons BTN_*/KEY_* names.
    - `joy`: axis sources and buttons are indices into `Joy.axes` / `Joy.buttons`.
    - `keyboard`: instead of `axes`: `motion_keys` (key -> "+x", "-z", ...), `speed` (how far a
      held motion key deflects its axis, (0, 1]), `tap_speed` (a first press's share of it, (0, 1]),
      `full_speed_after_s`, `key_hold_s`; `buttons` map keys to actions. Keys are printable ASCII
      characters or one of `KEY_NAMES`.
    """
    if device not in DEVICE_KINDS:
        raise ValueError(f"unknown device {device!r}; known: {list(DEVICE_KINDS)}")
    top = _section(data, "the file", {"deadzone", "engage", *DEVICE_KINDS})
    if device not in top:
        raise ValueError(f"no {device!r} section; this file maps {[k for k in DEVICE_KINDS if k in top]}")
    deadzone = _number(top.get("deadzone", 0.0), "deadzone", 0.0, 0.95)
    engage = _engage(top.get("engage", {}))
    section = _section(top[device], device, _SECTION_KEYS[device])
    extra: dict[str, Any] = {}
    if device == "keyboard":
        settings = _keyboard(section)
        speed = _number(section.get("speed", 1.0), "keyboard.speed", 0.0, 1.0)
        if speed == 0.0:
            raise ValueError("keyboard.speed must be > 0")
        driven = {axis for axis, _ in settings.motion_keys.values()}
        axes = {axis: AxisSource(axis, speed) for axis in AXES if axis in driven}
        extra["keyboard"] = settings
    else:
        axes = _axes(section.get("axes", {}), device)
        if device == "spacemouse":
            extra["spacemouse"] = _spacemouse(section)
        elif device == "evdev":
            device_name = section.get("name", "")
            if not isinstance(device_name, str):
                raise ValueError(f"evdev.name must be a string, got {device_name!r}")
            extra["evdev"] = EvdevSettings(device_name)
    buttons = _buttons(section.get("buttons", {}), device)
    if device == "keyboard":
        both = set(buttons) & set(extra["keyboard"].motion_keys)
        if both:
            raise ValueError(f"keyboard: keys {sorted(both)} are both motion_keys and buttons")
    if not axes and not buttons:
        raise ValueError(f"{device}: maps no axis and no button")
    return DeviceMapping(device, axes, buttons, deadzone, engage, name, source, **extra)


# ---- field checks -------------------------------------------------------------------------------------


def _section(value: Any, where: str, allowed: set[str]) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a mapping, got {type(value).__name__}")
    unknown = set(map(str, value)) - allowed
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    return value


def _number(value: Any, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise ValueError(f"{where} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def _engage(value: Any) -> EngageRule:
    section = _section(value, "engage", {"deflection_threshold", "buttons", "toggle"})
    buttons = section.get("buttons", ["takeover"])
    toggle = section.get("toggle", False)
    if not isinstance(buttons, list) or not all(isinstance(b, str) for b in buttons):
        raise ValueError(f"engage.buttons must be a list of actions, got {buttons!r}")
    if not isinstance(toggle, bool):
        raise ValueError(f"engage.toggle must be true or false, got {toggle!r}")
    try:
        return EngageRule(section.get("deflection_threshold", 0.001), frozenset(buttons), toggle)
    except ValueError as exc:
        raise ValueError(f"engage: {exc}") from None


def _raw_id(value: Any, device: str, kind: str, where: str) -> int | str:
    """Checks a raw axis (kind "axis") or button id for the device."""
    if device in ("spacemouse", "joy"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{where}: {value!r} is not a {device} {kind} index (an integer >= 0)")
        if device == "spacemouse" and kind == "axis" and value >= SPACEMOUSE_AXES:
            raise ValueError(f"{where}: {value} is not a SpaceMouse axis (0-5: tx ty tz rx ry rz)")
        return value
    if device == "evdev":
        prefixes = ("ABS_",) if kind == "axis" else ("BTN_", "KEY_")
        if not isinstance(value, str) or not _EVDEV_CODE.match(value) or not value.startswith(prefixes):
            raise ValueError(f"{where}: {value!r} is not an evdev {kind} code name ({'/'.join(prefixes)}...)")
        return value
    return _key_name(value, where)


def _key_name(value: Any, where: str) -> str:
    if isinstance(value, str) and (value in KEY_NAMES or (len(value) == 1 and "!" <= value <= "~")):
        return value
    raise ValueError(f"{where}: {value!r} is not a key (a printable ASCII character or one of {list(KEY_NAMES)})")


def _axes(value: Any, device: str) -> dict[str, AxisSource]:
    section = _section(value, f"{device}.axes", set(AXES))
    axes = {}
    for axis, spec in section.items():
        where = f"{device}.axes.{axis}"
        spec = _section(spec, where, {"source", "scale"})
        if "source" not in spec:
            raise ValueError(f"{where}: needs a source")
        scale = _number(spec.get("scale", 1.0), f"{where}.scale", -100.0, 100.0)
        if scale == 0.0:
            raise ValueError(f"{where}.scale must not be 0 (leave the axis out instead)")
        axes[axis] = AxisSource(_raw_id(spec["source"], device, "axis", f"{where}.source"), scale)
    return axes


def _buttons(value: Any, device: str) -> dict[Hashable, str]:
    if not isinstance(value, dict):
        raise ValueError(f"{device}.buttons must be a mapping of button -> action, got {type(value).__name__}")
    buttons = {}
    for raw, action in value.items():
        where = f"{device}.buttons.{raw}"
        if action not in ACTIONS:
            raise ValueError(f"{where}: unknown action {action!r}; known: {list(ACTIONS)}")
        buttons[_raw_id(raw, device, "button", where)] = action
    return buttons


def _spacemouse(section: dict) -> SpaceMouseSettings:
    ids = section.get("usb_ids")
    if not isinstance(ids, list) or not ids:
        raise ValueError("spacemouse.usb_ids must be a non-empty list of [vendor id, product id]")
    pairs = []
    for pair in ids:
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 0xFFFF for v in pair)):
            raise ValueError(f"spacemouse.usb_ids: {pair!r} is not [vendor id, product id] (16-bit integers)")
        pairs.append((pair[0], pair[1]))
    full_scale = _number(section.get("full_scale", 350), "spacemouse.full_scale", 1.0, 32767.0)
    return SpaceMouseSettings(tuple(pairs), full_scale)


def _keyboard(section: dict) -> KeyboardSettings:
    keys = section.get("motion_keys", {})
    if not isinstance(keys, dict):
        raise ValueError("keyboard.motion_keys must be a mapping of key -> direction such as +x or -yaw")
    motion = {}
    for key, direction in keys.items():
        where = f"keyboard.motion_keys.{key}"
        if not isinstance(direction, str) or direction[:1] not in "+-" or direction[1:] not in AXES:
            raise ValueError(f"{where}: {direction!r} is not a direction (+ or - then one of {list(AXES)})")
        motion[_key_name(key, where)] = (direction[1:], 1.0 if direction[0] == "+" else -1.0)
    hold = _number(section.get("key_hold_s", 0.15), "keyboard.key_hold_s", 0.01, 2.0)
    tap = _number(section.get("tap_speed", 0.2), "keyboard.tap_speed", 0.01, 1.0)
    ramp = _number(section.get("full_speed_after_s", 1.0), "keyboard.full_speed_after_s", 0.01, 60.0)
    return KeyboardSettings(motion, hold, tap, ramp)
