"""Teleop input backends: SpaceMouse (HID, `spacemouse`), gamepad (Linux evdev, `evdev_gamepad`, or a Joy
message, `joy`), keyboard (a terminal in raw mode, so it works over SSH and without a display,
`keyboard`). Each turns raw input into `TeleopInput` snapshots through the device's `DeviceMapping`;
nothing here needs ROS. This module opens the one a node asks for.

- A backend's `read(timeout_s)` blocks at most `timeout_s` (the node calls it on a thread of its
  own) and returns a snapshot per change of the device's state; when nothing changed it returns
  the current state re-stamped, because the device is evidently connected: a held button stays
  fresh and only a lost device goes silent (which hands control back). A device that stopped
  working (unplugged, closed terminal) raises `DeviceError`; the node reports it and reopens.
- Malformed input (a HID report of the wrong length, an unknown key, an evdev value outside the
  axis's range, a Joy message with NaN) is never applied: it is counted in `InputRejections`
  and the last good state is kept.
- `backend_opener` checks at start-up what can be checked without the device (its Python
  library is installed, the mapping's evdev codes exist, stdin is a terminal) and raises
  ValueError; the function it returns opens the device, raising `DeviceError` while it is absent.
- The Joy backend is `JoyDecoder`: the node's subscription feeds it the message's axes and buttons.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Callable

from robot_rl.teleop.backend import Clock, InputBackend
from robot_rl.teleop.evdev_gamepad import evdev_codes, open_evdev
from robot_rl.teleop.inputs import InputRejections
from robot_rl.teleop.keyboard import open_keyboard
from robot_rl.teleop.mapping import DeviceMapping
from robot_rl.teleop.spacemouse import hid_module, open_spacemouse

__all__ = ["backend_opener"]


def backend_opener(device: str, mapping: DeviceMapping, path: str, rejections: InputRejections,
                   clock: Clock = time.monotonic) -> Callable[[], InputBackend]:
    """Checks what can be checked before the device is there (raises ValueError: the library is
    missing, the mapping's evdev codes do not exist, stdin is not a terminal) and returns a
    function that opens the device (raises DeviceError while it is absent or unreadable).

    `path`: spacemouse a hidraw path (""; the first device with one of `usb_ids`); evdev
    /dev/input/eventN or a device name substring ("": `evdev.name`); keyboard a terminal such as
    /dev/pts/3 ("": stdin). Not for "joy" (fed by the node's subscription through `JoyDecoder`)."""
    if mapping.device != device:
        raise ValueError(f"the mapping is for {mapping.device!r}, not {device!r}")
    if device == "spacemouse":
        hid = hid_module()
        return lambda: open_spacemouse(hid, mapping, path, rejections, clock)
    if device == "evdev":
        try:
            evdev = importlib.import_module("evdev")
        except ImportError:
            raise ValueError("device 'evdev' needs python-evdev: pip install evdev (the 'teleop' extra)") from None
        codes = evdev_codes(evdev, mapping)
        return lambda: open_evdev(evdev, codes, mapping, path, rejections, clock)
    if device == "keyboard":
        if not path and not os.isatty(sys.stdin.fileno()):
            raise ValueError("device 'keyboard' reads the terminal, but stdin is not one: run the node in a "
                             "terminal (over SSH too) or set device_path to a terminal such as /dev/pts/3")
        return lambda: open_keyboard(mapping, path, rejections, clock)
    raise ValueError(f"device {device!r} has no reader of its own (joy is fed by the node's subscription)")
