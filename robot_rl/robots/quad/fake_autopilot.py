"""A fake PX4 on loopback: the vehicle's side of the MAVLink protocol `MavlinkLink` speaks (heartbeats,
COMMAND_ACKs, OFFBOARD / arm / land and the auto-disarm after landing), recording everything the link
sends. With it the quadrotor link and node fly with no vehicle; it lives in the package so that the
tests and the safety benchmark share this one copy (pymavlink, the `hardware` extra, is its only need)."""

from __future__ import annotations

import select
import socket
import threading
import time

# PX4 custom modes as HEARTBEAT.custom_mode carries them: main mode << 16 | sub mode << 24
PX4_POSCTL = 3 << 16
PX4_OFFBOARD = 6 << 16
PX4_AUTO_LAND = (4 << 16) | (6 << 24)


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 that is free now: the link's `udpin:` end, the fake's `udpout:`."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeAutopilot:
    """A PX4 on 127.0.0.1: sends HEARTBEATs (10 Hz, while `heartbeat`) to the link's `udpin` port,
    parses and records (arrival time, message) everything the link sends, and answers COMMAND_LONGs
    with a COMMAND_ACK (DENIED for the commands in `deny`), switching mode / arming / landing like PX4.
    After a land it disarms `disarm_after_land_s` later (PX4's auto-disarm after touchdown)."""

    def __init__(self, port: int, deny=(), disarm_after_land_s: float = 0.3, heartbeat: bool = True):
        from pymavlink import mavutil

        self.mav = mavutil.mavlink
        self.conn = mavutil.mavlink_connection(f"udpout:127.0.0.1:{port}", source_system=1, source_component=1)
        self.lock = threading.Lock()
        self.received: list[tuple[float, object]] = []
        self.armed = False
        self.custom_mode = PX4_POSCTL
        self.deny = set(deny)
        self.heartbeat = heartbeat
        self.disarm_after_land_s = disarm_after_land_s
        self.land_time: float | None = None
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._heartbeats, daemon=True),
                         threading.Thread(target=self._receive, daemon=True)]
        for t in self._threads:
            t.start()

    def _heartbeats(self) -> None:
        mav = self.mav
        while not self._stop.is_set():
            with self.lock:
                if self.land_time is not None and time.monotonic() - self.land_time > self.disarm_after_land_s:
                    self.armed, self.land_time = False, None
                if self.heartbeat:
                    base = mav.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED | (mav.MAV_MODE_FLAG_SAFETY_ARMED if self.armed else 0)
                    self.conn.mav.heartbeat_send(mav.MAV_TYPE_QUADROTOR, mav.MAV_AUTOPILOT_PX4, base, self.custom_mode,
                                                 mav.MAV_STATE_ACTIVE)
            self._stop.wait(0.1)

    def _receive(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.conn.fd], [], [], 0.02)
            if not ready:
                continue
            while (msg := self.conn.recv_msg()) is not None:
                now = time.monotonic()
                with self.lock:
                    self.received.append((now, msg))
                    if msg.get_type() == "COMMAND_LONG":
                        self._command(msg, now)

    def _command(self, msg, now: float) -> None:
        mav, cmd = self.mav, msg.command
        if cmd in self.deny:
            result = mav.MAV_RESULT_DENIED
        else:
            result = mav.MAV_RESULT_ACCEPTED
            if cmd == mav.MAV_CMD_DO_SET_MODE:
                self.custom_mode = (int(msg.param2) << 16) | (int(msg.param3) << 24)
            elif cmd == mav.MAV_CMD_COMPONENT_ARM_DISARM:
                self.armed = msg.param1 == 1.0
                self.land_time = None  # an explicit arm / disarm overrides the pending auto-disarm
            elif cmd == mav.MAV_CMD_NAV_LAND:
                if self.armed:
                    self.custom_mode, self.land_time = PX4_AUTO_LAND, now
                else:
                    result = mav.MAV_RESULT_DENIED
        self.conn.mav.command_ack_send(cmd, result)

    def messages(self, kind: str, since: float = 0.0) -> list[tuple[float, object]]:
        """(arrival time, message) of every `kind` message (e.g. "SET_ATTITUDE_TARGET") since `since`."""
        with self.lock:
            return [(t, m) for t, m in self.received if m.get_type() == kind and t >= since]

    def commands(self, command: int, since: float = 0.0) -> list[tuple[float, object]]:
        return [(t, m) for t, m in self.messages("COMMAND_LONG", since) if m.command == command]

    def wait_for(self, predicate, timeout: float, what: str) -> None:
        """Polls `predicate` for up to `timeout` s (for a caller that has no ROS executor to spin)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return
            time.sleep(0.005)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=1.0)
        self.conn.close()
