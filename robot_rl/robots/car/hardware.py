"""The race car's hardware: the VESC motor controller's UART protocol (our own codec: pyvesc is not
installable here), a serial link to it, wheel odometry from its RPM, and the car's hardware YAML
(hardware/car_vesc.yaml) with the command contract the real and the simulated car share.

VESC packets (bldc firmware, packet.c / commands.c), all integers big-endian:

    short: 0x02, len (1 byte),  payload, CRC16 (2 bytes), 0x03    payloads up to 255 bytes
    long:  0x03, len (2 bytes), payload, CRC16 (2 bytes), 0x03

The CRC is CRC-16/XMODEM (polynomial 0x1021, initial value 0) of the payload; payload[0] is the
command id. Used here: COMM_SET_RPM (int32 electrical RPM), COMM_SET_SERVO_POS (int16 position in
thousandths, 0..1), COMM_GET_VALUES (empty request; the reply carries temperatures, currents,
duty, electrical RPM, input voltage, charge counters, tachometer and the fault code).

Without ROS, without pyserial until a `VescLink` is opened.
"""

from __future__ import annotations

import binascii
import math
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.robots.car.control import PracticeConfig
from robot_rl.hardware.files import load_hardware_file
from robot_rl.hardware.files import number_field, section_field, string_field

__all__ = ["COMM_GET_VALUES", "COMM_SET_RPM", "COMM_SET_SERVO_POS", "GET_VALUES_REQUEST", "CarHardware", "CarLimits",
           "PacketDecoder", "VescConfig", "VescError", "VescLink", "VescValues", "WheelOdometry", "crc16",
           "drive_packets", "erpm_to_speed", "frame", "load_car_hardware", "parse_values", "set_rpm",
           "set_servo_pos", "speed_to_erpm", "steer_to_servo"]

COMM_GET_VALUES, COMM_SET_RPM, COMM_SET_SERVO_POS = 4, 8, 12
SHORT_START, LONG_START, END = 0x02, 0x03, 0x03
MAX_PAYLOAD = 512
"""The firmware's PACKET_MAX_PL_LEN: a longer announced payload is line noise, not a packet (and a
false start byte can hold decoding back by at most this many bytes before its CRC fails)."""

FAULT_NAMES = {0: "none", 1: "over_voltage", 2: "under_voltage", 3: "drv", 4: "abs_over_current",
               5: "over_temp_fet", 6: "over_temp_motor"}
"""mc_fault_code of the bldc firmware (later codes are reported by number)."""


class VescError(RuntimeError):
    """The VESC cannot be reached (port missing, write blocked) or sent something unusable."""


# ---- packet codec ----------------------------------------------------------------------------------


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM, the VESC's packet checksum (binascii.crc_hqx with initial value 0 is exactly it)."""
    return binascii.crc_hqx(bytes(data), 0)


def frame(payload: bytes) -> bytes:
    """One VESC packet around `payload` (short or long form by its length)."""
    n = len(payload)
    if not 0 < n <= 0xFFFF:
        raise ValueError(f"a VESC payload has 1 to 65535 bytes, got {n}")
    head = bytes([SHORT_START, n]) if n <= 0xFF else bytes([LONG_START]) + struct.pack(">H", n)
    return head + bytes(payload) + struct.pack(">H", crc16(payload)) + bytes([END])


def set_rpm(erpm: int) -> bytes:
    return frame(struct.pack(">Bi", COMM_SET_RPM, int(erpm)))


def set_servo_pos(position: float) -> bytes:
    """Servo position 0..1 (sent in thousandths)."""
    if not 0.0 <= position <= 1.0:
        raise ValueError(f"servo position must be in [0, 1], got {position!r}")
    return frame(struct.pack(">Bh", COMM_SET_SERVO_POS, int(round(position * 1000))))


GET_VALUES_REQUEST = frame(bytes([COMM_GET_VALUES]))


class PacketDecoder:
    """Cuts a byte stream into VESC payloads; line noise, bad CRCs and bad end bytes are skipped
    (counted in `counters`) and decoding resynchronises on the next start byte."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.counters: Counter[str] = Counter()

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        payloads, buf = [], self._buffer
        while buf:
            if buf[0] not in (SHORT_START, LONG_START):
                self.counters["skipped_bytes"] += 1
                del buf[0]
                continue
            head = 2 if buf[0] == SHORT_START else 3
            if len(buf) < head:
                break
            n = buf[1] if head == 2 else struct.unpack_from(">H", buf, 1)[0]
            if not 0 < n <= MAX_PAYLOAD:
                self.counters["bad_length"] += 1
                del buf[0]
                continue
            if len(buf) < head + n + 3:
                break  # the rest has not arrived yet
            payload = bytes(buf[head:head + n])
            crc, end = struct.unpack_from(">HB", buf, head + n)
            if end != END or crc != crc16(payload):
                self.counters["bad_crc" if end == END else "bad_end"] += 1
                del buf[0]  # a start byte inside noise: resynchronise one byte further
                continue
            del buf[:head + n + 3]
            payloads.append(payload)
            self.counters["packets"] += 1
        return payloads


@dataclass(frozen=True)
class VescValues:
    """A COMM_GET_VALUES reply (the fields every firmware since 3.x sends, in its units)."""

    temp_fet_c: float
    temp_motor_c: float
    motor_current_a: float
    input_current_a: float
    duty: float
    erpm: float
    input_voltage_v: float
    tachometer: int
    fault_code: int

    @property
    def fault(self) -> str:
        return FAULT_NAMES.get(self.fault_code, f"fault_{self.fault_code}")


_VALUES = struct.Struct(">hhiiiihihiiiiiiB")  # temps, 4 currents, duty, rpm, v_in, 4 counters, 2 tachos, fault


def parse_values(payload: bytes) -> VescValues:
    """Decodes a COMM_GET_VALUES reply payload (command id first); newer firmware appends fields,
    which are ignored. Raises VescError for another command or a short payload."""
    if not payload or payload[0] != COMM_GET_VALUES:
        raise VescError(f"not a COMM_GET_VALUES reply: command id {payload[:1].hex() or 'missing'}")
    if len(payload) < 1 + _VALUES.size:
        raise VescError(f"COMM_GET_VALUES reply of {len(payload)} bytes, expected at least {1 + _VALUES.size}")
    (t_fet, t_motor, i_motor, i_in, _id, _iq, duty, rpm, v_in, _ah, _ahc, _wh, _whc, tacho, _tacho_abs,
     fault) = _VALUES.unpack_from(payload, 1)
    return VescValues(t_fet / 10, t_motor / 10, i_motor / 100, i_in / 100, duty / 1000, float(rpm), v_in / 10,
                      tacho, fault)


# ---- the car's hardware description ----------------------------------------------------------------


@dataclass(frozen=True)
class CarLimits:
    """The car/cmd_vel contract: speeds [m/s] and steering angle [rad] commands are clamped to."""

    max_speed: float
    max_reverse_speed: float
    max_steer: float


@dataclass(frozen=True)
class VescConfig:
    erpm_per_mps: float
    servo_center: float
    servo_per_rad: float
    servo_min: float = 0.0
    servo_max: float = 1.0


def speed_to_erpm(speed: float, config: VescConfig) -> int:
    return int(round(speed * config.erpm_per_mps))


def erpm_to_speed(erpm: float, config: VescConfig) -> float:
    return float(erpm) / config.erpm_per_mps


def steer_to_servo(steer: float, config: VescConfig) -> float:
    """Steering angle [rad] -> servo position, clamped to the servo's [servo_min, servo_max]."""
    position = config.servo_center + config.servo_per_rad * steer
    return float(min(max(position, config.servo_min), config.servo_max))


def drive_packets(speed: float, steer: float, config: VescConfig) -> bytes:
    """SET_RPM and SET_SERVO_POS for (speed m/s, steer rad), already within the command limits."""
    return set_rpm(speed_to_erpm(speed, config)) + set_servo_pos(steer_to_servo(steer, config))


@dataclass(frozen=True)
class CarHardware:
    """A checked hardware/car_*.yaml."""

    name: str
    source: str
    port: str
    baud: int
    write_timeout_s: float
    limits: CarLimits
    vesc: VescConfig
    imu_topic: str
    practice: PracticeConfig


def load_car_hardware(name_or_path: str, share_dir: Path | None = None) -> CarHardware:
    """Reads and checks a car hardware YAML; raises ValueError naming the file and the bad field."""
    return load_hardware_file(name_or_path, parse_car_hardware, share_dir)


def parse_car_hardware(data: Any, name: str = "car", source: str = "") -> CarHardware:
    if not isinstance(data, dict):
        raise ValueError("the hardware description must be a mapping")
    command, vesc, imu = section_field(data, "command"), section_field(data, "vesc"), section_field(data, "imu")
    limits = CarLimits(max_speed=number_field(command, "max_speed", None, "command", 0.1, 30.0),
                       max_reverse_speed=number_field(command, "max_reverse_speed", None, "command", 0.0, 30.0),
                       max_steer=number_field(command, "max_steer", None, "command", 0.01, 1.0))
    config = VescConfig(erpm_per_mps=number_field(vesc, "erpm_per_mps", None, "vesc", 1.0, 1e6),
                        servo_center=number_field(vesc, "servo_center", 0.5, "vesc", 0.0, 1.0),
                        servo_per_rad=number_field(vesc, "servo_per_rad", None, "vesc", -10.0, 10.0),
                        servo_min=number_field(vesc, "servo_min", 0.0, "vesc", 0.0, 1.0),
                        servo_max=number_field(vesc, "servo_max", 1.0, "vesc", 0.0, 1.0))
    if config.servo_per_rad == 0 or not config.servo_min <= config.servo_center <= config.servo_max:
        raise ValueError("vesc: servo_per_rad must be nonzero and servo_min <= servo_center <= servo_max")
    practice_data = section_field(data, "practice")
    try:
        practice = PracticeConfig(**practice_data)
    except TypeError as exc:
        raise ValueError(f"practice: {exc} (fields: {sorted(PracticeConfig.__dataclass_fields__)})") from None
    except ValueError as exc:
        raise ValueError(f"practice: {exc}") from None
    if not -limits.max_reverse_speed <= practice.recovery_speed <= limits.max_speed:
        raise ValueError(f"practice.recovery_speed {practice.recovery_speed} lies outside the command limits "
                         f"[-{limits.max_reverse_speed}, {limits.max_speed}] m/s")
    return CarHardware(name=name, source=source, port=string_field(data, "port", "", "", allow_empty=True),
                       baud=int(number_field(data, "baud", 115200, "", 1200, 10_000_000)),
                       write_timeout_s=number_field(data, "write_timeout_s", 0.05, "", 0.001, 5.0),
                       limits=limits, vesc=config, imu_topic=string_field(imu, "topic", "", "imu", allow_empty=True),
                       practice=practice)


# ---- the link ----------------------------------------------------------------------------------------


class VescLink:
    """A VESC on a serial device (USB CDC-ACM or UART) or any pyserial URL (loop://, socket://).
    Reads never block: `read_values` decodes whatever has arrived."""

    def __init__(self, port: str, baud: int = 115200, write_timeout_s: float = 0.05):
        import serial  # robot_rl[hardware]: only a real car needs pyserial

        self._serial_errors = (serial.SerialException, OSError)
        if not port:
            raise VescError("no VESC port given (hardware YAML `port`, or the node's `port` parameter)")
        try:
            self._serial = serial.serial_for_url(port, baudrate=baud, timeout=0, write_timeout=write_timeout_s)
        except (serial.SerialException, ValueError, OSError) as exc:
            raise VescError(f"cannot open the VESC at {port!r}: {exc}. Is it plugged in and powered (ls /dev/ttyACM*), "
                            f"and may this user open it (group dialout)?") from None
        self.port = port
        self.decoder = PacketDecoder()
        self.counters: Counter[str] = Counter()

    def write(self, data: bytes) -> None:
        try:
            self._serial.write(data)
        except self._serial_errors as exc:
            self.counters["write_errors"] += 1
            raise VescError(f"writing to the VESC at {self.port!r} failed: {exc}") from None

    def read_values(self) -> VescValues | None:
        """The newest COMM_GET_VALUES reply among the bytes that arrived since the last call."""
        try:
            data = self._serial.read(self._serial.in_waiting or 1)
        except self._serial_errors as exc:
            self.counters["read_errors"] += 1
            raise VescError(f"reading from the VESC at {self.port!r} failed: {exc}") from None
        latest = None
        for payload in self.decoder.feed(data):
            if payload[0] == COMM_GET_VALUES:
                latest = parse_values(payload)
                self.counters["values"] += 1
            else:
                self.counters["other_packets"] += 1  # e.g. our own commands on a loop:// port
        return latest

    def close(self) -> None:
        self._serial.close()


# ---- wheel odometry ----------------------------------------------------------------------------------


class WheelOdometry:
    """Dead reckoning in the `odom` frame from the wheel speed (VESC RPM) and the IMU's yaw rate:
    it drifts, and serves the stuck detector; a fixed-frame position needs GPS or motion capture."""

    def __init__(self) -> None:
        self.position = np.zeros(3)
        self.yaw = 0.0
        self._time: float | None = None

    def update(self, time_s: float, speed: float, yaw_rate: float) -> None:
        if self._time is not None:
            dt = max(0.0, time_s - self._time)
            self.yaw = math.remainder(self.yaw + yaw_rate * dt, math.tau)
            self.position[:2] += speed * dt * np.array([math.cos(self.yaw), math.sin(self.yaw)])
        self._time = time_s

    @property
    def quat(self) -> np.ndarray:
        """Heading as a (w, x, y, z) quaternion."""
        return np.array([math.cos(self.yaw / 2), 0.0, 0.0, math.sin(self.yaw / 2)])
