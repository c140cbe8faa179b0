"""The SpaceMouse over HID: its input reports parsed, applied to the device's state, and the device
found and opened with cython-hidapi."""

from __future__ import annotations

import importlib
import struct
import time
from dataclasses import dataclass
from typing import Any, Sequence

from robot_rl.hardware.safety import Rejected
from robot_rl.teleop.backend import Clock, DeviceError, InputBackend
from robot_rl.teleop.inputs import InputRejections, TeleopInput
from robot_rl.teleop.mapping import DeviceMapping

__all__ = ["SpaceMouseBackend", "SpaceMouseReport", "hid_module", "open_spacemouse", "parse_spacemouse_report"]

REPORT_TRANSLATION, REPORT_ROTATION, REPORT_BUTTONS = 1, 2, 3
REPORT_BATTERY = 0x17
"""Battery level of the wireless models: carries no input, ignored."""


@dataclass(frozen=True)
class SpaceMouseReport:
    """The content of one SpaceMouse HID input report (None: not in this report)."""

    translation: tuple[int, int, int] | None = None
    """Raw counts tx, ty, tz (int16)."""
    rotation: tuple[int, int, int] | None = None
    """Raw counts rx, ry, rz (int16)."""
    buttons: int | None = None
    """Bit mask of the held buttons: bit i = button i (0 = left, 1 = right)."""


def parse_spacemouse_report(report: bytes | Sequence[int]) -> SpaceMouseReport | None:
    """Parses a SpaceMouse input report as read from HID (report id first):

    - id 1, 7 bytes: translation, 3 x int16 little-endian (SpaceNavigator, SpaceMouse Pro...);
    - id 1, 13 bytes: translation then rotation, 6 x int16 (SpaceMouse Wireless, Compact and newer);
    - id 2, 7 bytes: rotation, 3 x int16;
    - id 3, 2 bytes or more: button bit mask, little-endian.

    Returns None for the battery report (id 0x17); raises Rejected ("malformed" for a bad length,
    "unknown_report" for other ids)."""
    try:
        data = bytes(report)
    except (TypeError, ValueError):
        raise Rejected("malformed", f"not a byte string: {report!r:.80}") from None
    if not data:
        raise Rejected("malformed", "empty report")
    report_id, body = data[0], data[1:]
    if report_id == REPORT_TRANSLATION:
        if len(body) == 12:
            values = struct.unpack("<6h", body)
            return SpaceMouseReport(translation=values[:3], rotation=values[3:])
        if len(body) == 6:
            return SpaceMouseReport(translation=struct.unpack("<3h", body))
        raise Rejected("malformed", f"translation report (id 1) of {len(data)} bytes; expected 7 or 13")
    if report_id == REPORT_ROTATION:
        if len(body) != 6:
            raise Rejected("malformed", f"rotation report (id 2) of {len(data)} bytes; expected 7")
        return SpaceMouseReport(rotation=struct.unpack("<3h", body))
    if report_id == REPORT_BUTTONS:
        if not body:
            raise Rejected("malformed", "button report (id 3) without a bit mask")
        return SpaceMouseReport(buttons=int.from_bytes(body, "little"))
    if report_id == REPORT_BATTERY:
        return None
    raise Rejected("unknown_report", f"report id {report_id} ({len(data)} bytes)")


class SpaceMouseBackend(InputBackend):
    """Reads an opened HID device (cython-hidapi's `device`: `read(max_length, timeout_ms)` -> list
    of ints, [] on timeout). Raw axes 0-5 = tx ty tz rx ry rz / `full_scale`; raw buttons = bit
    indices."""

    def __init__(self, device: Any, mapping: DeviceMapping, rejections: InputRejections, description: str,
                 clock: Clock = time.monotonic):
        super().__init__(mapping, rejections, description, clock)
        self._device = device
        self._full_scale = mapping.spacemouse.full_scale

    def read(self, timeout_s: float) -> list[TeleopInput]:
        try:
            data = self._device.read(64, max(1, round(timeout_s * 1000)))
        except (OSError, ValueError) as exc:
            raise DeviceError(f"{self.description}: read failed: {exc}") from None
        if data:
            try:
                self._apply(parse_spacemouse_report(data))
            except Rejected as exc:
                self._reject(exc)
        return [self._snapshot()]

    def _apply(self, report: SpaceMouseReport | None) -> None:
        if report is None:
            return
        for offset, values in ((0, report.translation), (3, report.rotation)):
            if values is not None:
                for i, v in enumerate(values):
                    self._raw_axes[offset + i] = v / self._full_scale
        if report.buttons is not None:
            self._raw_buttons = {bit for bit in range(report.buttons.bit_length()) if report.buttons >> bit & 1}

    def close(self) -> None:
        self._device.close()


def hid_module() -> Any:
    # cython-hidapi ships two builds: `hidraw` (Linux kernel hidraw: the kernel driver stays
    # attached, read access to /dev/hidraw* is enough) and `hid` (libusb: detaches the kernel
    # driver, needs USB device access). Prefer hidraw where it exists.
    for name in ("hidraw", "hid"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "device") and hasattr(module, "enumerate"):
            return module
    raise ValueError("device 'spacemouse' needs cython-hidapi: pip install hidapi (the 'teleop' extra)")


def open_spacemouse(hid: Any, mapping: DeviceMapping, path: str, rejections: InputRejections,
                     clock: Clock) -> SpaceMouseBackend:
    ids = list(mapping.spacemouse.usb_ids)
    wanted = ", ".join(f"{v:04x}:{p:04x}" for v, p in ids)
    if path:
        target, description = path.encode(), path
    else:
        found = [d for d in hid.enumerate() if (d.get("vendor_id"), d.get("product_id")) in ids]
        if not found:
            raise DeviceError(f"no SpaceMouse found (USB ids {wanted}): is it plugged in (and its receiver paired)?")
        # Devices with several HID collections: the multi-axis controller is usage page 1, usage 8.
        found.sort(key=lambda d: (ids.index((d["vendor_id"], d["product_id"])),
                                  (d.get("usage_page"), d.get("usage")) != (1, 8)))
        info = found[0]
        target = info["path"]
        description = f"{info.get('product_string') or 'SpaceMouse'} at {info['path'].decode(errors='replace')}"
    device = hid.device()
    try:
        device.open_path(target)
    except (OSError, ValueError) as exc:
        raise DeviceError(f"cannot open {description}: {exc} (no permission? a udev rule must give your user "
                          "read access to the SpaceMouse's /dev/hidraw*)") from None
    return SpaceMouseBackend(device, mapping, rejections, description, clock)
