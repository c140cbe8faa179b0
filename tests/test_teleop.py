"""Teleop logic without ROS: SpaceMouse HID reports, evdev events (and a uinput gamepad where the
kernel offers one), the keyboard backend on a real pseudo-terminal, Joy decoding, the mapping
files and their validation, and the person/policy arbitration."""

from __future__ import annotations

import importlib.util
import os
import pty
import select
import struct
import termios
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from robot_rl.hardware.safety import Rejected
from robot_rl.teleop import (
    ArbitrationConfig, Arbitrator, DeviceError, EngageRule, EvdevState, InputMapper, InputRejections, JoyDecoder,
    KeyDecoder, SpaceMouseReport, TeleopInput, backend_opener, load_mapping, parse_mapping, parse_spacemouse_report,
)
from robot_rl.teleop import devices, evdev_gamepad, spacemouse
from robot_rl.ros.session import person_prompts
from robot_rl.teleop.session_status import KEY_LEGEND, SessionClock, SessionStatus

ROOT = Path(__file__).resolve().parents[1]


def _yaml(name: str) -> dict:
    return yaml.safe_load((ROOT / "hardware" / f"{name}.yaml").read_text())


# ---- SpaceMouse -----------------------------------------------------------------------------------------


def _report(report_id: int, *values: int) -> bytes:
    return bytes([report_id]) + struct.pack(f"<{len(values)}h", *values)


def test_spacemouse_reports_both_formats_and_buttons():
    # Bytes as a SpaceNavigator sends them (usbmon captures): translation, rotation, buttons.
    assert parse_spacemouse_report(bytes.fromhex("01 00 00 00 00 00 00")) == SpaceMouseReport(translation=(0, 0, 0))
    assert parse_spacemouse_report(bytes.fromhex("02 00 00 e2 ff 00 00")) == SpaceMouseReport(rotation=(0, -30, 0))
    assert parse_spacemouse_report([3, 1, 0]) == SpaceMouseReport(buttons=0b01)  # hidapi returns a list of ints
    assert parse_spacemouse_report([3, 3, 0]).buttons == 0b11
    assert parse_spacemouse_report(_report(1, 350, -350, 12)).translation == (350, -350, 12)
    # Newer devices: translation and rotation in one 13-byte report id 1.
    both = parse_spacemouse_report(_report(1, 1, -2, 3, -4, 5, -32768))
    assert both == SpaceMouseReport(translation=(1, -2, 3), rotation=(-4, 5, -32768))
    assert parse_spacemouse_report(bytes([3, 0, 0, 0, 0x80])).buttons == 1 << 31  # 32-button models
    assert parse_spacemouse_report(bytes([0x17, 100])) is None  # battery level: no input


@pytest.mark.parametrize("report,reason,match", [
    (b"", "malformed", "empty"),
    (bytes([1, 0, 0, 0, 0]), "malformed", "id 1.*5 bytes"),
    (bytes([1]) + bytes(8), "malformed", "id 1.*9 bytes"),
    (bytes([2]) + bytes(12), "malformed", "id 2.*13 bytes"),
    (bytes([3]), "malformed", "bit mask"),
    ([1, 300, 0, 0, 0, 0, 0], "malformed", "byte string"),
    (bytes([9, 1, 2]), "unknown_report", "report id 9"),
])
def test_spacemouse_malformed_reports_are_rejected(report, reason, match):
    with pytest.raises(Rejected, match=match) as exc:
        parse_spacemouse_report(report)
    assert exc.value.reason == reason


class FakeHid:
    """cython-hidapi's `device`: `read(max_length, timeout_ms)` -> list of ints, [] on timeout."""

    def __init__(self, reports):
        self.reports = list(reports)
        self.opened = None
        self.closed = False

    def open_path(self, path):
        self.opened = path

    def read(self, max_length, timeout_ms):
        assert max_length >= 13 and timeout_ms >= 1
        if not self.reports:
            return []
        report = self.reports.pop(0)
        if isinstance(report, Exception):
            raise report
        return list(report)

    def close(self):
        self.closed = True


class FakeHidModule:
    def __init__(self, infos, device):
        self.infos, self._device = infos, device

    def enumerate(self, vendor_id=0, product_id=0):
        return self.infos

    def device(self):
        return self._device


def _open_fake_spacemouse(monkeypatch, reports, infos=None):
    mapping = load_mapping("teleop_spacemouse", "spacemouse")
    hid = FakeHid(reports)
    infos = infos if infos is not None else [
        {"vendor_id": 0x256F, "product_id": 0xC62F, "path": b"/dev/hidraw7", "usage_page": 12, "usage": 1,
         "product_string": "SpaceMouse Wireless Receiver"},
        {"vendor_id": 0x256F, "product_id": 0xC62F, "path": b"/dev/hidraw8", "usage_page": 1, "usage": 8,
         "product_string": "SpaceMouse Wireless Receiver"},
    ]
    monkeypatch.setattr(devices, "hid_module", lambda: FakeHidModule(infos, hid))
    rejections = InputRejections()
    return backend_opener("spacemouse", mapping, "", rejections)(), hid, rejections


def test_spacemouse_backend_maps_reports_to_teleop_input(monkeypatch):
    reports = [
        _report(1, 0, 350, 0),                   # legacy translation: ty = +full scale
        _report(2, 0, 0, 175),                   # legacy rotation: rz = half scale
        bytes([1, 0, 0]),                        # malformed: rejected, state kept
        bytes([3, 0b01, 0]),                     # left button
        _report(1, 700, 0, -175, 0, 0, 0),       # combined report, beyond full scale: clipped
        bytes([0x17, 80]),                       # battery: ignored
    ]
    backend, hid, rejections = _open_fake_spacemouse(monkeypatch, reports)
    assert hid.opened == b"/dev/hidraw8"  # the multi-axis collection (usage page 1, usage 8)
    assert "SpaceMouse Wireless Receiver" in backend.description
    samples = [backend.read(0.01)[0] for _ in range(len(reports) + 1)]
    # teleop_spacemouse.yaml (SERL's mapping): x <- ty, y <- tx, z <- -tz, yaw <- -rz
    assert np.allclose(samples[0].twist, [1, 0, 0, 0, 0, 0])
    assert np.allclose(samples[1].twist, [1, 0, 0, 0, 0, -0.5])
    assert np.allclose(samples[2].twist, samples[1].twist)
    assert samples[3].buttons == {"gripper_close"}
    assert np.allclose(samples[4].twist, [0, 1, 0.5, 0, 0, 0])  # 700 counts clip to 1.0; rotation zeroed
    assert samples[4].buttons == {"gripper_close"}  # held until the next button report
    assert np.allclose(samples[6].twist, samples[4].twist)  # timeout: the same state, re-stamped
    assert samples[6].stamp > samples[4].stamp
    counts, last = rejections.snapshot()
    assert counts == {"malformed": 1} and "3 bytes" in last
    hid.reports.append(OSError("read error"))
    with pytest.raises(DeviceError, match="read failed"):
        backend.read(0.01)
    backend.close()
    assert hid.closed


def test_spacemouse_open_failures_are_device_errors(monkeypatch):
    with pytest.raises(DeviceError, match="no SpaceMouse found.*256f:c62e"):
        _open_fake_spacemouse(monkeypatch, [], infos=[{"vendor_id": 0x1234, "product_id": 1, "path": b"x"}])

    class NoPermission(FakeHid):
        def open_path(self, path):
            raise OSError("open failed")

    mapping = load_mapping("teleop_spacemouse", "spacemouse")
    info = {"vendor_id": 0x046D, "product_id": 0xC626, "path": b"/dev/hidraw1"}
    monkeypatch.setattr(devices, "hid_module", lambda: FakeHidModule([info], NoPermission([])))
    with pytest.raises(DeviceError, match="open failed.*udev"):
        backend_opener("spacemouse", mapping, "", InputRejections())()


def test_hidapi_module_is_found():
    pytest.importorskip("hid", reason="cython-hidapi (pip install hidapi) is not installed")
    module = spacemouse.hid_module()
    assert hasattr(module, "device") and hasattr(module, "enumerate")


# ---- evdev --------------------------------------------------------------------------------------------

ABS_X, ABS_Y, ABS_RY = 0x00, 0x01, 0x04
BTN_A, BTN_TR = 0x130, 0x137
EV_SYN, EV_KEY, EV_ABS = 0, 1, 3


def test_evdev_events_to_state():
    rejections = InputRejections()
    state = EvdevState({ABS_X: ("ABS_X", -32768, 32767), ABS_Y: ("ABS_Y", 0, 255)},
                       {BTN_TR: "BTN_TR"}, rejections)
    assert not state.apply(EV_ABS, ABS_X, 32767)
    assert not state.apply(EV_ABS, ABS_Y, 0)
    assert not state.apply(EV_KEY, BTN_TR, 1)
    assert not state.apply(EV_KEY, BTN_A, 1)  # not mapped: ignored
    assert state.apply(EV_SYN, 0, 0)
    assert state.raw_axes == {"ABS_X": 1.0, "ABS_Y": -1.0} and state.raw_buttons == {"BTN_TR"}
    state.apply(EV_ABS, ABS_Y, 400)  # outside [0, 255]: rejected, the last value kept
    state.apply(EV_KEY, BTN_TR, 7)
    state.apply(EV_KEY, BTN_TR, 2)  # auto-repeat: still held
    assert state.raw_axes["ABS_Y"] == -1.0 and state.raw_buttons == {"BTN_TR"}
    counts, _ = rejections.snapshot()
    assert counts == {"axis_out_of_range": 1, "bad_event": 1}
    # dropped events: nothing applied until the report ends, then the state must be read back
    state.apply(EV_SYN, 3, 0)
    state.apply(EV_KEY, BTN_TR, 0)
    assert state.apply(EV_SYN, 0, 0) and state.needs_resync and state.raw_buttons == {"BTN_TR"}
    state.resync({ABS_X: 0, ABS_Y: 255}, [BTN_A])
    assert not state.needs_resync and state.raw_buttons == set()
    assert state.raw_axes["ABS_Y"] == 1.0 and abs(state.raw_axes["ABS_X"]) < 1e-4
    with pytest.raises(ValueError, match="empty range"):
        EvdevState({ABS_X: ("ABS_X", 5, 5)}, {}, rejections)


def _uinput_usable() -> str | None:
    """Why a uinput gamepad cannot be made here (None: it can)."""
    if importlib.util.find_spec("evdev") is None:
        return "python-evdev is not installed"
    if not os.path.exists("/dev/uinput"):
        return "/dev/uinput does not exist (no uinput kernel module in this machine or container)"
    if not os.access("/dev/uinput", os.W_OK):
        return "/dev/uinput is not writable by this user"
    return None


def test_evdev_backend_reads_a_uinput_gamepad():
    reason = _uinput_usable()
    if reason:
        pytest.skip(reason)
    from evdev import AbsInfo, UInput, ecodes

    stick = AbsInfo(value=0, min=-32768, max=32767, fuzz=0, flat=0, resolution=0)
    caps = {ecodes.EV_KEY: [ecodes.BTN_A, ecodes.BTN_B, ecodes.BTN_X, ecodes.BTN_Y, ecodes.BTN_TL, ecodes.BTN_TR,
                            ecodes.BTN_START],
            ecodes.EV_ABS: [(ecodes.ABS_X, stick), (ecodes.ABS_Y, stick), (ecodes.ABS_RY, stick)]}
    name = f"robot_rl test pad {os.getpid()}"
    with UInput(caps, name=name) as pad:
        time.sleep(0.3)  # udev creates the event node
        mapping = load_mapping("teleop_gamepad", "evdev")
        rejections = InputRejections()
        backend = backend_opener("evdev", mapping, name, rejections)()
        try:
            assert name in backend.description
            pad.write(ecodes.EV_ABS, ecodes.ABS_Y, -32768)  # left stick fully forward
            pad.write(ecodes.EV_KEY, ecodes.BTN_TR, 1)
            pad.syn()
            sample = backend.read(1.0)[-1]
            assert sample.twist[0] == pytest.approx(1.0) and sample.buttons == {"takeover"}
            pad.write(ecodes.EV_KEY, ecodes.BTN_TR, 0)
            pad.write(ecodes.EV_ABS, ecodes.ABS_Y, 0)
            pad.syn()
            sample = backend.read(1.0)[-1]
            assert np.allclose(sample.twist, 0, atol=1e-9) and sample.buttons == frozenset()
            assert len(backend.read(0.01)) == 1  # quiet: the same state, re-stamped
        finally:
            backend.close()


class FakeInputDevice:
    """The parts of `evdev.InputDevice` the backend uses; events go through a pipe so select works."""

    name, path = "Fake Pad", "/dev/input/event42"

    def __init__(self):
        from evdev import AbsInfo

        self._read_end, self._write_end = os.pipe()
        self.fd = self._read_end
        self.events = []
        self.abs = {ABS_X: AbsInfo(0, -32768, 32767, 0, 0, 0), ABS_Y: AbsInfo(-32768, -32768, 32767, 0, 0, 0),
                    ABS_RY: AbsInfo(0, -32768, 32767, 0, 0, 0)}
        self.keys = [BTN_TR]  # held when opened

    def capabilities(self, absinfo=True):
        return {EV_ABS: list(self.abs.items()), EV_KEY: [BTN_A, BTN_TR]}

    def absinfo(self, code):
        return self.abs[code]

    def active_keys(self):
        return list(self.keys)

    def send(self, *events):
        from evdev import InputEvent

        self.events += [InputEvent(0, 0, *e) for e in events]
        os.write(self._write_end, b"x")

    def read(self):
        os.read(self._read_end, 1024)
        if not self.events:
            raise BlockingIOError
        events, self.events = self.events, []
        yield from events

    def close(self):
        os.close(self._read_end)
        os.close(self._write_end)


def test_evdev_backend_with_a_fake_device():
    evdev = pytest.importorskip("evdev")
    data = _yaml("teleop_gamepad")
    data["evdev"]["buttons"] = {"BTN_TR": "takeover", "BTN_A": "failure"}
    mapping = parse_mapping(data, "evdev")
    codes = {name: evdev.ecodes.ecodes[name] for name in ("ABS_X", "ABS_Y", "ABS_RY", "BTN_TR", "BTN_A")}
    device = FakeInputDevice()
    backend = evdev_gamepad.EvdevBackend(device, codes, mapping, InputRejections())
    try:
        first = backend.read(0.01)
        assert len(first) == 1 and first[0].buttons == {"takeover"}  # state read back at open
        assert first[0].twist[0] == pytest.approx(1.0)  # stick was already fully forward
        device.send((EV_ABS, ABS_Y, 0), (EV_KEY, BTN_A, 1), (EV_SYN, 0, 0), (EV_KEY, BTN_TR, 0), (EV_SYN, 0, 0))
        a, b = backend.read(0.5)
        assert a.buttons == {"takeover", "failure"} and b.buttons == {"failure"} and abs(a.twist[0]) < 1e-4
        device.keys = []
        device.send((EV_SYN, 3, 0), (EV_KEY, BTN_A, 1), (EV_SYN, 0, 0))  # dropped: read back from the device
        assert backend.read(0.5)[-1].buttons == frozenset()
    finally:
        backend.close()
    if not evdev.list_devices():  # nothing readable under /dev/input here
        with pytest.raises(DeviceError, match="no gamepad.*no input devices"):
            backend_opener("evdev", load_mapping("teleop_gamepad", "evdev"), "", InputRejections())()


def test_evdev_mapping_codes_are_checked_before_opening(tmp_path):
    pytest.importorskip("evdev")
    data = _yaml("teleop_gamepad")
    data["evdev"]["axes"]["x"]["source"] = "ABS_NOPE"
    mapping = parse_mapping(data, "evdev", "bad", "bad.yaml")
    with pytest.raises(ValueError, match="ABS_NOPE"):
        backend_opener("evdev", mapping, "", InputRejections())


# ---- keyboard -----------------------------------------------------------------------------------------


def test_key_decoder_names_keys_and_rejects_the_rest():
    d = KeyDecoder()
    assert d.feed(b"s \r\x1b[A\x1b[5~\x1bOB\x7f") == ["s", "space", "enter", "up", "page_up", "down", "backspace"]
    assert d.feed(b"\x1b[") == [] and d.feed(b"6~x") == ["page_down", "x"]  # split across reads
    assert d.feed(b"\x1b") == [] and d.flush() == ["esc"]  # a lone ESC is the Esc key once input pauses
    out = d.feed(b"\x01\x1bx\x1b[99~\xc3\xa9q")
    assert [o.reason for o in out[:4]] == ["unknown_key"] * 4 and out[4] == "q"
    assert [str(o) for o in out[:4]] == ["unknown_key: ctrl+a", "unknown_key: alt+'x'",
                                         "unknown_key: escape sequence b'\\x1b[99~'",
                                         "unknown_key: non-ASCII input b'\\xc3\\xa9'"]
    assert d.feed(b"\x1b[" + b"1" * 40)[0].reason == "unknown_key"  # runaway sequence


@pytest.fixture
def terminal():
    """A pseudo-terminal: (master fd to type into, path of the slave the backend opens)."""
    master, slave = pty.openpty()
    yield master, os.ttyname(slave)
    os.close(master)
    os.close(slave)


def _drain(backend, seconds: float):
    samples, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        samples += backend.read(0.02)
    return samples


def test_keyboard_backend_on_a_pty(terminal):
    master, path = terminal
    mapping = load_mapping("teleop_keyboard", "keyboard")
    rejections = InputRejections()
    fd = os.open(path, os.O_RDONLY | os.O_NOCTTY)
    before = termios.tcgetattr(fd)
    os.close(fd)
    backend = backend_opener("keyboard", mapping, path, rejections)()
    try:
        # raw mode: a single key arrives without Enter and is not echoed back
        os.write(master, b"s")
        samples = _drain(backend, 0.1)
        assert samples[0].buttons == {"success"} and samples[1].buttons == frozenset()  # a tap
        os.write(master, b"\x1b[A")  # up arrow: +y (up in the wrist picture) for key_hold_s, a tap's fine step
        samples = _drain(backend, 0.05)
        assert samples[0].twist[1] == pytest.approx(mapping.keyboard.tap_speed) and mapping.keyboard.tap_speed < 0.5
        time.sleep(mapping.keyboard.key_hold_s)
        assert backend.read(0.05)[-1].twist[1] == 0.0  # no auto-repeat came: motion ended
        deflections = []
        for _ in range(40):  # right arrow held: the terminal repeats it, and it moves faster and faster
            os.write(master, b"\x1b[C")
            deflections.append(_drain(backend, 0.03)[-1].twist[0])
        assert deflections[0] < 0.5 and deflections == sorted(deflections) and deflections[-1] == 1.0
        os.write(master, b"\x1b[6~q ")
        samples = _drain(backend, 0.1)
        assert samples[0].twist[2] == pytest.approx(-mapping.keyboard.tap_speed)  # page_down: -z
        assert any(s.buttons == {"takeover"} for s in samples)
        counts, last = rejections.snapshot()
        assert counts == {"unknown_key": 1} and "'q'" in last
        assert select.select([master], [], [], 0.05)[0] == []  # nothing echoed
    finally:
        backend.close()
    fd = os.open(path, os.O_RDONLY | os.O_NOCTTY)
    assert termios.tcgetattr(fd) == before  # terminal restored
    os.close(fd)


def test_keyboard_closed_terminal_is_a_device_error():
    master, slave = pty.openpty()
    mapping = load_mapping("teleop_keyboard", "keyboard")
    backend = backend_opener("keyboard", mapping, os.ttyname(slave), InputRejections())()
    os.close(slave)
    os.close(master)  # hang-up: reads fail with EIO
    with pytest.raises(DeviceError):
        for _ in range(10):
            backend.read(0.05)
    backend.close()
    with pytest.raises(DeviceError, match="not a terminal"):
        backend_opener("keyboard", mapping, "/dev/null", InputRejections())()
    with pytest.raises(DeviceError, match="cannot open"):
        backend_opener("keyboard", mapping, "/dev/pts/no-such-terminal", InputRejections())()


# ---- joy ----------------------------------------------------------------------------------------------


def test_joy_decoder_maps_and_rejects():
    decode = JoyDecoder(load_mapping("teleop_gamepad", "joy"))
    axes, buttons = [0.0] * 6, [0] * 11
    axes[1], axes[0], buttons[10], buttons[3] = 1.0, -0.55, 1, 1
    sample = decode(axes, buttons, 1.0)
    assert sample.twist[0] == 1.0 and sample.twist[1] == pytest.approx(-0.5)  # deadzone 0.1, rescaled
    assert sample.buttons == {"takeover", "success"} and sample.stamp == 1.0
    for axes, buttons, reason in (([0.0] * 3, [0] * 11, "joy_layout"), ([0.0] * 6, [0] * 5, "joy_layout"),
                                  ([float("nan")] + [0.0] * 5, [0] * 11, "nan"),
                                  ([1.5] + [0.0] * 5, [0] * 11, "axis_out_of_range"),
                                  ([0.0] * 6, [2] + [0] * 10, "bad_button")):
        with pytest.raises(Rejected) as exc:
            decode(axes, buttons, 0.0)
        assert exc.value.reason == reason


# ---- mapping files ---------------------------------------------------------------------------------------


def test_the_arrows_move_the_gripper_as_the_wrist_picture_shows_it():
    """Each motion key moves the gripper toward that side of the picture the view names (the wrist camera,
    looking down from the hand); PgUp raises it (up in the front picture too)."""
    import mujoco

    from robot_rl.robots.arm.sim import ArmSim

    sim = ArmSim()
    sim.reset(np.random.default_rng(0))
    keys = load_mapping("teleop_keyboard", "keyboard").keyboard.motion_keys
    assert "wrist picture" in KEY_LEGEND["keyboard"]
    hand = sim.data.site_xpos[sim.model.site("ee").id].copy()

    def picture_move(camera: str, key: str) -> np.ndarray:
        """(right, up) in `camera`'s picture of a point below the hand moved 5 cm the way `key` drives."""
        cam = sim.model.camera(camera).id
        position, axes = sim.data.cam_xpos[cam], sim.data.cam_xmat[cam].reshape(3, 3)  # columns: right, up, back
        axis, direction = keys[key]
        step = np.zeros(3)
        step["xyz".index(axis)] = 0.05 * direction
        below = hand - [0.0, 0.0, 0.1]
        before, after = (axes.T @ (p - position) for p in (below, below + step))
        return after[:2] / -after[2] - before[:2] / -before[2]

    mujoco.mj_forward(sim.model, sim.data)
    for key, picture in (("up", (0, 1)), ("down", (0, -1)), ("right", (1, 0)), ("left", (-1, 0))):
        move = picture_move("wrist", key)
        assert np.dot(move, picture) > 0.9 * np.linalg.norm(move), (key, move)
    assert picture_move("front", "page_up")[1] > 0 and picture_move("front", "page_down")[1] < 0
    sim.close()



def test_shipped_mappings_load():
    for name, device in (("teleop_spacemouse", "spacemouse"), ("teleop_gamepad", "evdev"),
                         ("teleop_gamepad", "joy"), ("teleop_keyboard", "keyboard")):
        mapping = load_mapping(name, device)
        assert mapping.device == device and mapping.buttons
        assert {"success", "failure", "rerecord", "reset"} <= set(mapping.buttons.values()) or device == "spacemouse"
    with pytest.raises(ValueError, match="no 'keyboard' section"):
        load_mapping("teleop_gamepad", "keyboard")
    with pytest.raises(ValueError, match="does not exist"):
        load_mapping("teleop_nothing", "joy")


def test_mapper_deadzone_scale_and_clip():
    data = _yaml("teleop_gamepad")
    data["deadzone"] = 0.2
    data["joy"]["axes"] = {"x": {"source": 0, "scale": -2.0}, "yaw": {"source": 1, "scale": 0.5}}
    mapper = InputMapper(parse_mapping(data, "joy"))
    sample = mapper({0: 0.6, 1: -0.1, 7: 1.0}, [10, 5], 0.0)
    assert sample.twist[0] == pytest.approx(-1.0)  # (0.6 - 0.2) / 0.8 * -2 = -1
    assert sample.twist[5] == 0.0  # inside the deadzone
    assert mapper({0: 1.0}, [], 0.0).twist[0] == -1.0  # clipped
    assert mapper({0: 0.3}, [], 0.0).twist[0] == pytest.approx(-0.25)  # continuous past the deadzone
    assert sample.buttons == {"takeover"}  # button 5 (GUIDE) is not mapped: ignored


@pytest.mark.parametrize("device,edit,match", [
    ("joy", lambda d: d.update(deadzone=1.5), "deadzone"),
    ("joy", lambda d: d.update(extra=1), "unknown keys.*extra"),
    ("joy", lambda d: d["joy"]["axes"].update(w={"source": 0}), "joy.axes: unknown keys.*'w'"),
    ("joy", lambda d: d["joy"]["axes"]["x"].update(source=-1), "joy.axes.x.source"),
    ("joy", lambda d: d["joy"]["axes"]["x"].update(scale=0), "joy.axes.x.scale"),
    ("joy", lambda d: d["joy"]["axes"]["x"].pop("source"), "joy.axes.x: needs a source"),
    ("joy", lambda d: d["joy"]["buttons"].update({11: "jump"}), "joy.buttons.11: unknown action 'jump'"),
    ("joy", lambda d: d["engage"].update(buttons=["fly"]), "engage: buttons: unknown actions"),
    ("joy", lambda d: d["engage"].update(buttons=[]), "nothing takes over"),
    ("joy", lambda d: d["engage"].update(deflection_threshold=2.0), "deflection_threshold"),
    ("joy", lambda d: d["engage"].update(toggle="yes please"), "engage.toggle"),
    ("evdev", lambda d: d["evdev"]["axes"]["x"].update(source="BTN_A"), "evdev.axes.x.source.*ABS_"),
    ("evdev", lambda d: d["evdev"]["buttons"].update({"ABS_Z": "success"}), "evdev.buttons.ABS_Z"),
    ("spacemouse", lambda d: d["spacemouse"]["axes"]["x"].update(source=6), "not a SpaceMouse axis"),
    ("spacemouse", lambda d: d["spacemouse"].update(usb_ids=[[0x256F]]), "usb_ids"),
    ("spacemouse", lambda d: d["spacemouse"].update(full_scale=0), "full_scale"),
    ("keyboard", lambda d: d["keyboard"]["motion_keys"].update(w="forward"), "motion_keys.w.*direction"),
    ("keyboard", lambda d: d["keyboard"]["buttons"].update(F1="success"), "buttons.F1.*not a key"),
    ("keyboard", lambda d: d["keyboard"]["buttons"].update(up="success"), "both motion_keys and buttons"),
    ("keyboard", lambda d: d["keyboard"].update(key_hold_s=-1), "key_hold_s"),
    ("keyboard", lambda d: d["keyboard"].update(tap_speed=0), "keyboard.tap_speed"),
    ("keyboard", lambda d: d["keyboard"].update(full_speed_after_s="slowly"), "keyboard.full_speed_after_s"),
])
def test_mapping_validation_names_the_field(device, edit, match):
    data = _yaml({"joy": "teleop_gamepad", "evdev": "teleop_gamepad", "spacemouse": "teleop_spacemouse",
                  "keyboard": "teleop_keyboard"}[device])
    edit(data)
    with pytest.raises(ValueError, match=match):
        parse_mapping(data, device)


def test_bad_yaml_file_names_the_file(tmp_path):
    path = tmp_path / "pad.yaml"
    path.write_text("joy: {axes: [\n")
    with pytest.raises(ValueError, match="pad.yaml: not valid YAML"):
        load_mapping(str(path), "joy")
    path.write_text("- just a list\n")
    with pytest.raises(ValueError, match="pad.yaml: the file must be a mapping"):
        load_mapping(str(path), "joy")


# ---- arbitration ---------------------------------------------------------------------------------------


def _input(t: float, x: float = 0.0, *buttons: str) -> TeleopInput:
    return TeleopInput(np.array([x, 0, 0, 0, 0, 0.0]), frozenset(buttons), t)


def _arbitrator(**kw) -> Arbitrator:
    engage = kw.pop("engage", EngageRule())
    return Arbitrator(ArbitrationConfig(engage=engage, **{"hold_s": 0.5, "silence_timeout_s": 0.3, **kw}))


def _run(arb: Arbitrator, inputs, until: float, period: float = 0.02, start: float = 0.0):
    """Steps at `period` from `start` to `until`, feeding each input when its stamp is reached;
    returns the outputs with their times."""
    inputs = sorted(inputs, key=lambda s: s.stamp)
    outputs = []
    for i in range(int(round((until - start) / period)) + 1):
        t = round(start + i * period, 9)
        while inputs and inputs[0].stamp <= t + 1e-9:
            arb.on_input(inputs.pop(0))
        outputs.append((t, arb.step(t)))
    return outputs


def _stream(t0: float, t1: float, x: float = 0.0, *buttons: str, period: float = 0.02):
    return [_input(round(t0 + i * period, 9), x, *buttons) for i in range(int(round((t1 - t0) / period)) + 1)]


def test_takeover_by_deflection_hold_and_exactly_one_zero_on_release():
    arb = _arbitrator()
    # at rest (below SERL's 0.001) for 0.2 s, deflected 0.2-0.4 s, then at rest again
    inputs = _stream(0.0, 0.18, 0.0005) + _stream(0.2, 0.4, 0.6) + _stream(0.42, 1.5, 0.0)
    outputs = _run(arb, inputs, 1.5)
    engaged = [t for t, o in outputs if o.engaged]
    assert engaged[0] == pytest.approx(0.2) and engaged[-1] == pytest.approx(0.9)  # 0.5 s after the last input
    commands = [(t, o.command) for t, o in outputs if o.command is not None]
    assert all(o.command is None for t, o in outputs if t < 0.2)  # the policy drives
    moving = [c for t, c in commands if t <= 0.4]
    assert all(c[0] == 0.6 for c in moving)
    zeros_after = [(t, c) for t, c in commands if t > 0.9]
    assert len(zeros_after) == 1 and not zeros_after[0][1].any()  # exactly one zero, then nothing
    events = [(t, e) for t, o in outputs for e in o.events]
    assert events == [(pytest.approx(0.2), "takeover"), (pytest.approx(0.92), "handback")]
    out = next(o for t, o in outputs if o.engaged)
    assert out.intervention and np.allclose(out.action, [0.6, 0, 0, -1.0])  # 4-D: dx dy dz gripper
    assert outputs[0][1].action is None and not outputs[0][1].intervention
    assert arb.counters["takeovers"] == 1 and arb.counters["handbacks"] == 1 and arb.counters["zero_commands"] == 1


def test_takeover_by_button_and_deflection_ignored_when_configured():
    arb = _arbitrator(engage=EngageRule(deflection_threshold=None, buttons=frozenset({"takeover"})), hold_s=0.0)
    inputs = _stream(0.0, 0.2, 0.9) + _stream(0.22, 0.5, 0.9, "takeover") + _stream(0.52, 0.8, 0.9)
    outputs = _run(arb, inputs, 0.8)
    engaged = [t for t, o in outputs if o.engaged]
    assert engaged[0] == pytest.approx(0.22) and engaged[-1] == pytest.approx(0.5)  # a drifting stick never
    zeros = [t for t, o in outputs if o.command is not None and not o.command.any()]
    assert zeros == [pytest.approx(0.52)]


def test_a_released_takeover_button_hands_back_at_once_despite_the_hold():
    # HIL-SERL / LeRobot: hold RB to drive; letting go hands back. SERL's 0.5 s hold is for a
    # SpaceMouse's deflection, and kept after a button it would store the robot standing still.
    arb = _arbitrator(engage=EngageRule(deflection_threshold=None))
    inputs = _stream(0.0, 0.3, 0.7, "takeover") + _stream(0.32, 0.4, 0.0, "takeover") + _stream(0.42, 1.2)
    outputs = _run(arb, inputs, 1.2)
    engaged = [t for t, o in outputs if o.engaged]
    assert engaged[0] == pytest.approx(0.0) and engaged[-1] == pytest.approx(0.4)  # held still 0.32-0.4: still theirs
    assert [(t, e) for t, o in outputs for e in o.events] == [(0.0, "takeover"), (pytest.approx(0.42), "handback")]
    zeros = [t for t, o in outputs if o.command is not None and not o.command.any() and not o.engaged]
    assert zeros == [pytest.approx(0.42)]
    # with deflection engaging too, the stick's last deflection still starts the hold
    arb = _arbitrator(engage=EngageRule(buttons=frozenset({"takeover"})))
    outputs = _run(arb, _stream(0.0, 0.3, 0.7, "takeover") + _stream(0.32, 1.2), 1.2)
    assert [t for t, o in outputs if o.engaged][-1] == pytest.approx(0.8)


def test_a_device_slower_than_the_hold_keeps_control_while_held():
    arb = _arbitrator(hold_s=0.0)
    outputs = _run(arb, _stream(0.0, 0.6, 0.5, period=0.1), 0.6)  # inputs every 0.1 s, steps every 0.02 s
    assert all(o.engaged for t, o in outputs)


def test_silence_hands_back_and_needs_a_neutral_input():
    arb = _arbitrator()
    outputs = _run(arb, _stream(0.0, 0.3, 0.8), 1.0)  # the device stops reporting at 0.3 s, deflected
    handback = [t for t, o in outputs if "handback" in o.events]
    assert handback == [pytest.approx(0.62)]  # silence_timeout 0.3 s, before the 0.5 s hold ends
    assert arb.last_handback_reason == "silence" and arb.counters["silence_handbacks"] == 1
    assert sum(o.command is not None and not o.command.any() for _, o in outputs) == 1
    assert arb.silent(1.0) and not arb.silent(0.2)
    # back with the same stuck deflection: no takeover until the device has been at rest once
    outputs = _run(arb, _stream(1.0, 1.2, 0.8) + _stream(1.22, 1.3) + _stream(1.32, 1.4, 0.8), 1.4, start=1.0)
    engaged = [t for t, o in outputs if o.engaged]
    assert engaged[0] == pytest.approx(1.32)


def test_estop_releases_once_ignores_input_and_needs_neutral():
    arb = _arbitrator()
    outputs = _run(arb, _stream(0.0, 0.2, 0.7, "takeover"), 0.2)
    assert outputs[-1][1].engaged
    arb.set_estop(True)
    out = arb.step(0.21)
    assert not out.engaged and out.events == ("handback",) and not out.command.any()
    assert arb.last_handback_reason == "estop" and arb.counters["estop_handbacks"] == 1
    outputs = _run(arb, _stream(0.22, 0.6, 0.7, "takeover", "gripper_close", "success"), 0.6, start=0.22)
    assert all(not o.engaged and o.command is None for _, o in outputs)
    assert arb.gripper == -1.0  # gripper presses are ignored while stopped
    assert [e for _, o in outputs for e in o.events] == ["success"]  # labels still get through
    arb.set_estop(False)
    outputs = _run(arb, _stream(0.62, 0.7, 0.7, "takeover") + _stream(0.72, 0.74) + _stream(0.76, 0.8, 0.7),
                   0.8, start=0.62)
    engaged = [t for t, o in outputs if o.engaged]
    assert engaged[0] == pytest.approx(0.76)  # held through the e-stop: must let go first


def test_gripper_follows_presses_while_engaged_and_is_held():
    arb = _arbitrator(engage=EngageRule(buttons=frozenset({"takeover", "gripper_close", "gripper_open"})))
    arb.on_input(_input(0.0, 0.0, "gripper_close"))  # SERL: a gripper button takes over and closes
    out = arb.step(0.0)
    assert out.engaged and out.gripper == 1.0 and out.action[3] == 1.0
    for t, buttons in ((0.05, ()), (0.1, ("gripper_close", "gripper_open")), (0.15, ())):
        arb.on_input(_input(t, 0.0, *buttons))
    assert arb.step(0.15).gripper == 1.0  # held; both at once is ambiguous: ignored
    arb.on_input(_input(0.2, 0.0, "gripper_open"))
    assert arb.step(0.2).gripper == -1.0
    arb.on_input(_input(0.25, 0.0, "gripper_close"))
    arb.on_input(_input(0.3, 0.0, "failure"))  # an episode label: the robot resets with the gripper open
    out = arb.step(0.3)
    assert out.gripper == -1.0 and out.events == ("failure",)
    # not engaged: gripper buttons that do not take over change nothing
    arb = _arbitrator(engage=EngageRule(deflection_threshold=None))
    arb.on_input(_input(0.0, 0.0, "gripper_close"))
    assert arb.step(0.0).gripper == -1.0 and not arb.engaged


def test_toggle_takeover():
    arb = _arbitrator(engage=EngageRule(toggle=True), hold_s=0.11)
    tap = [_input(0.0, 0.0, "takeover"), _input(0.01)]
    outputs = _run(arb, tap + _stream(0.02, 1.0), 1.0)  # quiet but connected device
    assert all(o.engaged for t, o in outputs)  # toggled on: no hold expiry
    outputs = _run(arb, [_input(1.02, 0.0, "takeover"), _input(1.03)] + _stream(1.04, 1.4), 1.4, start=1.02)
    engaged = [t for t, o in outputs if o.engaged]
    assert engaged[-1] == pytest.approx(1.12)  # toggled off at 1.02, then the hold
    assert [e for _, o in outputs for e in o.events] == ["handback"]


def test_labels_and_event_order():
    arb = _arbitrator()
    for t, x, buttons in ((0.0, 0.5, ()), (0.01, 0.5, ("success",)), (0.02, 0.5, ("success",)), (0.03, 0.5, ()),
                          (0.04, 0.5, ("rerecord", "reset"))):
        arb.on_input(_input(t, x, *buttons))
    assert arb.step(0.05).events == ("takeover", "success", "rerecord", "reset")  # one per press
    assert arb.step(0.06).events == ()
    assert arb.status(0.06)["success"] == 1
    arb.on_input(_input(0.07, 0.0, "gripper_close"))
    arb.on_input(_input(0.08, 0.0, "pause"))  # a session key: an event that ends nothing and keeps the gripper
    out = arb.step(0.08)
    assert out.events == ("pause",) and out.gripper == 1.0 and arb.counters["pause"] == 1


def test_config_and_input_validation():
    with pytest.raises(ValueError, match="silence_timeout_s"):
        ArbitrationConfig(silence_timeout_s=0.0)
    with pytest.raises(ValueError, match="hold_s"):
        ArbitrationConfig(hold_s=float("nan"))
    with pytest.raises(ValueError, match="initial_gripper"):
        ArbitrationConfig(initial_gripper=2.0)
    with pytest.raises(ValueError, match="twist"):
        TeleopInput(np.array([2.0, 0, 0, 0, 0, 0]), frozenset(), 0.0)
    with pytest.raises(ValueError, match="unknown actions"):
        TeleopInput(np.zeros(6), frozenset({"jump"}), 0.0)


def test_human_command_follows_the_teleop_topics_and_goes_stale():
    from robot_rl.teleop.takeover import HumanCommand, human_action

    human = HumanCommand(action_dim=4, timeout_s=0.3)
    assert human.action(0.0) is None  # nobody engaged
    human.on_twist([0.5, -0.25, 1.0, 0.3, 0, 0], now=1.0)
    assert human.action(1.0) is None  # a command without engagement drives nothing
    human.on_engaged(True)
    human.on_twist([0.5, -0.25, 1.0, 0.3, 0, 0], now=1.0)
    human.on_gripper(1.0)
    np.testing.assert_allclose(human.action(1.1), [0.5, -0.25, 1.0, 1.0])
    assert human.action(1.31) is None and human.stale == 1  # the command went stale: the policy drives
    human.on_twist([float("nan")] * 6, now=1.4)
    human.on_twist([2.0, 0, 0, 0, 0, 0], now=1.4)
    human.on_gripper(float("inf"))
    assert human.rejected == 3 and human.action(1.4) is None and human.gripper == 1.0
    human.on_twist([0.0] * 6, now=1.5)
    np.testing.assert_allclose(human.action(1.5), [0, 0, 0, 1.0])
    human.new_episode()  # the robot reset: the command given before answered the old scene
    assert human.action(1.5) is None and human.engaged
    human.on_twist([0.0] * 6, now=1.52)  # their next command drives the new episode
    np.testing.assert_allclose(human.action(1.52), [0, 0, 0, 1.0])
    human.on_engaged(False)
    assert human.action(1.5) is None
    np.testing.assert_allclose(human_action(np.arange(6) / 10, -1.0, 7), [0, 0.1, 0.2, 0.3, 0.4, 0.5, -1.0])
    with pytest.raises(ValueError, match="4 .* or 7"):
        HumanCommand(action_dim=2)


def test_raw_for_inverts_the_joy_mapping():
    from robot_rl.teleop.mapping import InputMapper

    mapper = InputMapper(load_mapping("teleop_gamepad", "joy"))
    for twist in ([0.5, -0.25, 1.0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [-1, 1, -0.01, 0, 0, 0]):
        raw, buttons = mapper.raw_for(twist, ["takeover", "gripper_close"])
        sample = mapper(raw, buttons, 0.0)
        np.testing.assert_allclose(sample.twist, twist, atol=1e-9)
        assert sample.buttons == {"takeover", "gripper_close"}
    assert mapper.raw_for([0.5, 0, 0, 0, 0, 0], [])[0][1] == pytest.approx(0.1 + 0.5 * 0.9)  # deadzone 0.1
    with pytest.raises(ValueError, match="roll"):
        mapper.raw_for([0, 0, 0, 0.5, 0, 0], [])
    with pytest.raises(ValueError, match="no button"):
        InputMapper(load_mapping("teleop_keyboard", "keyboard")).raw_for(np.zeros(6), ["unknown_action"])


def test_scripted_gamepad_takes_over_through_the_joy_layout():
    from robot_rl.robots.arm.sim import ArmSim, ArmSimConfig, scripted_lift_action
    from robot_rl.teleop.joy import JoyDecoder
    from robot_rl.teleop.scripted_gamepad import ScriptedGamepad
    from robot_rl.teleop.scripted_human import InterventionConfig, ScriptedIntervener

    mapping = load_mapping("teleop_gamepad", "joy")
    gamepad = ScriptedGamepad(ScriptedIntervener(scripted_lift_action, InterventionConfig(off_track_steps=2,
                                                                                          hold_steps=3)),
                              mapping, np.random.default_rng(0))
    decode = JoyDecoder(mapping)
    sim = ArmSim(ArmSimConfig(render=False))
    sim.reset(np.random.default_rng(0))
    state = sim.state()
    expert = scripted_lift_action(state, None, 0.0)
    wrong = -expert
    wrong[3] = expert[3]
    seen = [decode(*gamepad.step(state, wrong), 0.0) for _ in range(6)]
    assert [("takeover" in s.buttons) for s in seen] == [False, True, True, True, False, True]
    np.testing.assert_allclose(seen[1].twist[:3], np.clip(expert[:3], -1, 1), atol=1e-6)  # the expert's motion
    assert ("gripper_close" in seen[1].buttons) == (expert[3] > 0)
    assert not seen[0].buttons and not seen[0].twist.any()  # hands off: centred, nothing pressed
    assert gamepad.takeovers == 2
    gamepad.new_episode()  # the robot resets mid-takeover: the person lets go and judges the new episode afresh
    assert not gamepad.intervening and not any(gamepad.buttons) and not any(gamepad.axes)
    seen = [decode(*gamepad.step(state, wrong), 0.0) for _ in range(2)]
    assert [("takeover" in s.buttons) for s in seen] == [False, True]  # a new streak of off_track_steps
    with pytest.raises(ValueError, match="joy"):
        ScriptedGamepad(gamepad.intervener, load_mapping("teleop_keyboard", "keyboard"), np.random.default_rng(0))


def test_the_scripted_person_lets_go_when_the_robot_stops_following_and_takes_over_again():
    """A silence of the gamepad hands control back, and the teleop waits for a person to let go before it
    re-engages: the scripted person notices the robot ignoring its held takeover, lets go, and takes over again
    (a person who kept holding would never drive again: a recording session once hung so under load)."""
    from robot_rl.robots.arm.sim import ArmSim, ArmSimConfig, scripted_lift_action
    from robot_rl.teleop.arbitration import Arbitrator, ArbitrationConfig
    from robot_rl.teleop.joy import JoyDecoder
    from robot_rl.teleop.scripted_gamepad import ScriptedGamepad
    from robot_rl.teleop.scripted_human import InterventionConfig, ScriptedIntervener

    mapping = load_mapping("teleop_gamepad", "joy")
    gamepad = ScriptedGamepad(ScriptedIntervener(scripted_lift_action, InterventionConfig(
        takeover_prob_start=1.0, takeover_prob_end=1.0, off_track_steps=1, hold_steps=1000)), mapping,
        np.random.default_rng(0))
    teleop = Arbitrator(ArbitrationConfig(engage=mapping.engage, hold_s=0.05, silence_timeout_s=0.5))
    decode = JoyDecoder(mapping)
    sim = ArmSim(ArmSimConfig(render=False))
    sim.reset(np.random.default_rng(0))
    state = sim.state()
    wrong = -scripted_lift_action(state, None, 0.0)

    def joy(now: float) -> bool:
        teleop.on_input(decode(gamepad.axes, gamepad.buttons, now))
        return teleop.step(now).engaged

    gamepad.step(state, wrong)
    assert joy(0.0) and gamepad.takeovers == 1
    assert not teleop.step(0.6).engaged  # the gamepad went silent for 0.6 s: control handed back
    assert not joy(0.62) and not joy(0.8)  # still holding: the teleop waits for the person to let go
    assert not gamepad.teleop_engaged(False, 0.62) and gamepad.intervening  # not noticed yet
    assert gamepad.teleop_engaged(False, 0.95)  # 0.33 s ignored: let go
    assert not gamepad.intervening and gamepad.regrips == 1 and not any(gamepad.buttons)
    assert not joy(0.96)  # the neutral input the teleop waited for
    gamepad.step(state, wrong)  # the next control step: still off track, take over again
    assert joy(1.0) and gamepad.takeovers == 2
    assert not gamepad.teleop_engaged(True, 1.5) and gamepad.intervening  # followed: nothing to notice
    sim.close()


def test_the_reset_counts_as_countdown_so_go_waits_for_the_scene():
    """Between an episode's end and its reset's end the person is counted down, never told GO: a recording whose
    last episode was re-recorded then (CI) said GO at once, the person drove during the real countdown, and the
    episode they meant to label ended after one step nobody drove."""
    clock = SessionClock(reset_time_s=2.0)
    clock.reset_done(10.0)
    assert clock.shown(11.0, True, False) == ("countdown", 1.0)
    assert clock.shown(12.5, True, False) == ("running", 0.0)
    # The episode ended at 13.0 and the scene is being reset: the clock's own countdown ran out long ago.
    assert clock.shown(13.1, False, False) == ("countdown", 2.0)
    assert clock.shown(13.1, False, True) == ("review", 2.0)  # "re-record within 2 s", not 0
    clock.reset_done(13.5)
    assert clock.shown(14.0, True, True) == ("review", 1.5)
    assert clock.shown(15.5, True, False) == ("running", 0.0)
    clock.toggle_pause()
    assert clock.shown(15.5, True, False) == ("paused", 0.0)

    clock = SessionClock(reset_time_s=2.0)  # what the console says: the last episode re-recorded during the reset
    said, before = [], None
    for now, in_episode, last_in_review in [(13.1, False, True), (13.2, False, False), (13.5, True, False),
                                            (15.5, True, False)]:
        if now == 13.5:
            clock.reset_done(now)
        phase, countdown_s = clock.shown(now, in_episode, last_in_review)
        status = SessionStatus(mode="record", phase=phase, episode=2, countdown_s=countdown_s)
        said += person_prompts(before, status)
        before = status
    assert [line.split(":")[0] for line in said] == ["that was the last episode", "reset", "\a>>> episode 2"]
