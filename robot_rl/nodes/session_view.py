"""Session view node: what a person in the loop sees while they teleoperate, in a browser.

- Subscribes to each camera's `<camera>/color/image_raw` (sensor_msgs/Image rgb8, sensor QoS) and
  to `session/status` (std_msgs/String, the actor's `robot_rl.teleop.session_status.SessionStatus` JSON),
  keeping only the newest image of each camera and the newest status.
- A thread of its own composes them (`robot_rl.view.compose`: cameras scaled up side by side, the
  status and the device's key legend burned in, a border in the colour of whoever drives),
  encodes a JPEG and hands it to the HTTP server (`robot_rl.view.mjpeg`) at most `max_fps` times a
  second: composing and encoding never run on the executor, and inputs that arrive faster than
  that replace each other (counted as dropped) instead of queueing.
- Serves http://<host>:<port>/ (127.0.0.1 by default: reach it over SSH with
  `ssh -L PORT:localhost:PORT host`); logs the URL and writes it to `<run_dir>/view_url.txt`.
- `record_path`: also keeps the composed frames as a video (.avi, .mp4) or a folder of JPEGs.
- `rerun`: also logs the session to Rerun (`robot_rl.view.rerun_log.LiveRerun`: an .rrd file, the
  viewer spawned here, or a viewer's address): the cameras and status, and besides them the actor's
  `arm/cmd` + `arm/gripper`, the person's `teleop/cmd` + `teleop/gripper`, `joint_states` and the
  reward node's `reward` (value, done probability), each as it arrives, on the executor.
- `/diagnostics`: url, frames composed and dropped, stream clients, age of the newest status,
  malformed statuses (counted and logged; never fatal).
"""

from __future__ import annotations

import io
import ipaddress
import math
import re
import threading
import time
import traceback
from pathlib import Path
from typing import NoReturn

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import TwistStamped, Vector3Stamped
from PIL import Image as PILImage
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float32, String

from robot_rl.outputs import UserError, atomic_path
from robot_rl.ros import qos
from robot_rl.ros.messages import msg_to_image
from robot_rl.ros.node_utils import Param, ParameterError, declare_params, diagnostics, run_node
from robot_rl.tasks import get_task, task_names
from robot_rl.teleop.mapping import DEVICE_KINDS
from robot_rl.teleop.session_status import KEY_LEGEND, SessionStatus
from robot_rl.view.compose import MAX_CAMERAS, compose_frame
from robot_rl.view.mjpeg import MjpegServer
from robot_rl.view.recording import FrameRecorder, check_record_path
from robot_rl.view.rerun_log import LiveRerun, RerunConfig, RerunSession


class CameraListParam(Param):
    """A list parameter whose default is empty: rclpy would type that default as a byte array and
    refuse `-p cameras:=[front]`, so its type is left open (the node checks the names)."""

    def descriptor(self) -> ParameterDescriptor:
        descriptor = super().descriptor()
        descriptor.dynamic_typing = True
        return descriptor


PARAMS = [
    Param("task", "arm_pick_cube", "Task of the session: its cameras are shown unless `cameras` names others.",
          choices=task_names()),
    CameraListParam("cameras", [], f"Cameras to show, left to right (1 to {MAX_CAMERAS}; "
                    "<camera>/color/image_raw each). Empty: the task's cameras."),
    Param("env_task", "", "Task env: the run's env task file (env_task.json), which names the environment's cameras."),
    Param("device", "keyboard", "The person's input device: picks the key legend shown.", choices=DEVICE_KINDS),
    Param("host", "127.0.0.1", "Address the HTTP server binds. Keep the loopback default and reach it over SSH; "
          "any other address lets everyone on that network watch, unauthenticated."),
    Param("port", 8765, "HTTP port; 0: any free port (logged and written to <run_dir>/view_url.txt).", 0, 65535),
    Param("max_fps", 10.0, "Most frames composed per second.", 0.5, 60.0),
    Param("jpeg_quality", 80, "JPEG quality of the stream (and of the camera frames logged to Rerun).", 10, 95),
    Param("record_path", "", "Also record the view: a video (.avi Motion-JPEG, .mp4; needs OpenCV) or a folder "
          "of numbered JPEGs (no suffix), played back at max_fps. Empty: no recording."),
    Param("rerun", "", "Also log the session to Rerun: a new file ending in .rrd (open it with `rerun FILE.rrd`), "
          "'spawn' (start the viewer here; needs a display) or a viewer's address rerun+http://HOST:9876/proxy. "
          "Empty: no Rerun."),
    Param("run_dir", "", "Run directory: view_url.txt is written there. Empty: none."),
    Param("stale_s", 2.0, "Diagnostics warn when no image or no status arrived for this long.", 0.1, 600.0),
    Param("diagnostics_period_s", 1.0, "Period of /diagnostics.", 0.05, 60.0),
]

CAMERA_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(/[A-Za-z][A-Za-z0-9_]*)*$")
"""A camera name as a ROS topic prefix: `front`, `arm/wrist`."""

STOP_POLL_S = 0.25
"""How often the idle compose thread looks whether the node is closing."""

_OK, _WARN = DiagnosticStatus.OK, DiagnosticStatus.WARN


def view_cameras(task: str, cameras: list, env_task: str = "") -> tuple[str, ...]:
    """The cameras to show: `cameras`, or the task's when empty; ParameterError naming a bad one."""
    try:
        known = get_task(task, env_task).cameras
    except ValueError as exc:
        raise ParameterError(f"session_view: {exc}") from None
    chosen = tuple(cameras) or known
    if not chosen:
        raise ParameterError(f"session_view: task {task!r} has no cameras; name the cameras to show, e.g. "
                             "-p cameras:=[front]")
    for camera in chosen:
        if not isinstance(camera, str) or not CAMERA_NAME.match(camera):
            raise ParameterError(f"session_view: camera {camera!r} is not a topic prefix such as 'front'")
        if known and camera not in known:
            raise ParameterError(f"session_view: unknown camera {camera!r} for task {task!r}; its cameras: "
                                 f"{', '.join(known)}")
    if len(set(chosen)) != len(chosen):
        raise ParameterError(f"session_view: cameras {list(chosen)} name a camera twice")
    if len(chosen) > MAX_CAMERAS:
        raise ParameterError(f"session_view: at most {MAX_CAMERAS} cameras fit the view, got {list(chosen)}")
    return chosen


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        raise ParameterError(f"session_view: host {host!r} is not an IP address (or localhost)") from None


class SessionViewNode(Node):
    def __init__(self):
        super().__init__("session_view")
        p = self.params = declare_params(self, PARAMS)
        self.cameras = view_cameras(p["task"], p["cameras"], p["env_task"])
        self.topics = {camera: f"{camera}/color/image_raw" for camera in self.cameras}
        self.legend = KEY_LEGEND.get(p["device"], "")
        _is_loopback(p["host"])  # a bad address is refused before anything starts
        try:
            record_path = check_record_path(p["record_path"]) if p["record_path"] else None
        except ValueError as exc:
            raise ParameterError(f"session_view: {exc}") from None

        # Written by executor callbacks, read by the compose thread and the diagnostics: under the lock.
        self._lock = threading.Lock()
        self._images: dict[str, Image] = {}  # newest message per camera, decoded on the compose thread
        self._unshown: set[str] = set()  # cameras whose newest image has not been composed yet
        self._status: SessionStatus | None = None
        self._status_wall = math.nan  # time.monotonic() of the newest status
        self._image_wall = math.nan
        self._inputs_changed = threading.Event()
        self.counters = {"images_received": 0, "frames_composed": 0, "frames_dropped": 0, "invalid_status": 0,
                         "invalid_images": 0, "rerun_errors": 0}
        self._last_invalid = ""
        self._stop = threading.Event()

        self.recorder = None
        if record_path is not None:
            try:
                self.recorder = FrameRecorder(record_path, p["max_fps"])
            except OSError as exc:
                raise ParameterError(f"session_view: record_path {str(record_path)!r}: {exc}") from None
            if self.recorder.note:
                self.get_logger().warning(self.recorder.note)
            self.get_logger().info(f"recording the view to {self.recorder.output}")
        try:
            self.server = MjpegServer(p["host"], p["port"])
        except OSError as exc:
            raise ParameterError(f"session_view: cannot serve on {p['host']}:{p['port']}: {exc}") from None
        self.url = self.server.url
        if not _is_loopback(p["host"]):
            self.get_logger().warning(f"the view is served on {p['host']}: anyone who reaches that address can "
                                      "watch (no authentication)")
        self.get_logger().info(f"session view: {self.url}")
        if p["run_dir"]:
            with atomic_path(Path(p["run_dir"]) / "view_url.txt") as tmp:
                tmp.write_text(self.url + "\n")

        for camera, topic in self.topics.items():
            self.create_subscription(Image, topic, lambda msg, c=camera: self._on_image(c, msg), qos.SENSOR)
        self.create_subscription(String, "session/status", self._on_status, qos.EVENTS)
        self.rerun = self._start_rerun(p) if p["rerun"] else None
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_timer(p["diagnostics_period_s"], self._publish_diagnostics,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._inputs_changed.set()  # the placeholder first: the page shows something before the first image
        self._composer = threading.Thread(target=self._compose_loop, name="view-compose", daemon=True)
        self._composer.start()

    def _start_rerun(self, p: dict) -> LiveRerun:
        try:
            session = RerunSession(RerunConfig(p["rerun"], cameras=self.cameras, jpeg_quality=p["jpeg_quality"],
                                               recording_name=f"{p['task']} session"))
        except (ValueError, UserError) as exc:
            raise ParameterError(f"session_view: rerun: {exc}") from None
        self.get_logger().info(f"logging the session to Rerun: {session.path or p['rerun']}")
        for kind, prefix in (("executed", "arm"), ("human", "teleop")):
            self.create_subscription(TwistStamped, f"{prefix}/cmd", lambda m, k=kind: self._log_rerun(
                self.rerun.on_twist, k, _twist(m.twist), time.time()), qos.COMMAND)
            self.create_subscription(Float32, f"{prefix}/gripper", lambda m, k=kind: self._log_rerun(
                self.rerun.on_gripper, k, m.data), qos.COMMAND)
        self.create_subscription(JointState, "joint_states", lambda m: self._log_rerun(
            self.rerun.on_joints, list(m.name), np.asarray(m.position, np.float64), time.time()), qos.SENSOR)
        self.create_subscription(Vector3Stamped, "reward", lambda m: self._log_rerun(
            self.rerun.on_reward, m.vector.y, m.vector.z, time.time()), qos.EVENTS)
        return LiveRerun(session)

    # ---- executor side ---------------------------------------------------------------------------------

    def _log_rerun(self, log, *args) -> None:
        """One message into the Rerun session; a failure is counted and logged, never fatal."""
        try:
            log(*args)
        except Exception as exc:  # noqa: BLE001 - a bad message (or a full disk) must not end the view
            with self._lock:
                self.counters["rerun_errors"] += 1
            self.get_logger().warning(f"logging to Rerun failed: {exc}", throttle_duration_sec=5.0)

    def _on_image(self, camera: str, msg: Image) -> None:
        with self._lock:
            if camera in self._unshown:
                self.counters["frames_dropped"] += 1
            self._images[camera] = msg
            self._unshown.add(camera)
            self._image_wall = time.monotonic()
            self.counters["images_received"] += 1
        self._inputs_changed.set()
        if self.rerun is not None:
            self._log_rerun(lambda: self.rerun.on_camera(camera, _rgb(msg_to_image(msg), msg.encoding), time.time()))

    def _on_status(self, msg: String) -> None:
        try:
            status = SessionStatus.from_json(msg.data)
        except ValueError as exc:
            with self._lock:
                self.counters["invalid_status"] += 1
                self._last_invalid = str(exc)
            self.get_logger().warning(f"ignored a malformed session/status: {exc}", throttle_duration_sec=5.0)
            return
        with self._lock:
            self._status, self._status_wall = status, time.monotonic()
        self._inputs_changed.set()
        if self.rerun is not None:
            self._log_rerun(self.rerun.on_status, status, time.time())

    def _publish_diagnostics(self) -> None:
        now = time.monotonic()
        status_age, image_age = now - self._status_wall, now - self._image_wall
        stale = self.params["stale_s"]
        if not image_age <= stale:  # NaN (never) too
            level, message = _WARN, f"no camera image for {stale} s on {', '.join(self.topics.values())}"
        elif not status_age <= stale:
            level, message = _WARN, f"no session/status for {stale} s"
        else:
            level, message = _OK, "showing the session"
        with self._lock:
            values = dict(self.counters)
        values.update({"url": self.url, "clients": self.server.clients,
                       "last_status_age_s": "never" if math.isnan(status_age) else round(status_age, 2),
                       "last_image_age_s": "never" if math.isnan(image_age) else round(image_age, 2),
                       "last_invalid_status": self._last_invalid,
                       "cameras": ",".join(self.cameras),
                       "recording": "" if self.recorder is None else str(self.recorder.output),
                       "rerun": "" if self.rerun is None else str(self.rerun.session.path or self.params["rerun"])})
        self._diag_pub.publish(diagnostics(self, values, level, message))

    # ---- compose thread ----------------------------------------------------------------------------------

    def _compose_loop(self) -> None:
        period = 1.0 / self.params["max_fps"]
        while not self._stop.is_set():
            started = time.monotonic()
            if not self._inputs_changed.wait(STOP_POLL_S):
                continue
            self._inputs_changed.clear()
            try:
                self._compose()
            except Exception:  # noqa: BLE001 - one bad frame (or a full disk) must not end the view
                self.get_logger().error(f"composing the view failed: {traceback.format_exc()}",
                                        throttle_duration_sec=5.0)
            # Pace to max_fps: inputs arriving meanwhile replace each other, none queue.
            self._stop.wait(max(0.0, period - (time.monotonic() - started)))

    def _compose(self) -> None:
        with self._lock:
            messages, status = dict(self._images), self._status
            self._unshown.clear()
        images = {}
        for camera in self.cameras:
            msg = messages.get(camera)
            if msg is None:
                continue
            try:
                images[camera] = _rgb(msg_to_image(msg), msg.encoding)
            except ValueError as exc:
                with self._lock:
                    self.counters["invalid_images"] += 1
                    if self._images.get(camera) is msg:  # counted and logged once, not at every frame
                        del self._images[camera]
                self.get_logger().warning(f"ignored an image on {self.topics[camera]}: {exc}",
                                          throttle_duration_sec=5.0)
        frame = compose_frame(images, status, self.legend, list(self.topics.values()))
        buffer = io.BytesIO()
        PILImage.fromarray(frame).save(buffer, format="JPEG", quality=self.params["jpeg_quality"])
        self.server.publish(buffer.getvalue(), status)
        with self._lock:
            self.counters["frames_composed"] += 1
        if self.recorder is not None and images:  # the placeholder is not worth keeping
            self.recorder.write(frame)

    def close(self) -> None:
        self._stop.set()
        self._inputs_changed.set()
        self._composer.join(timeout=2.0)
        self.server.close()
        if self.recorder is not None:
            self.recorder.close()
            self.get_logger().info(f"recorded {self.recorder.frames} frames to {self.recorder.output}")
        if self.rerun is not None:
            self.rerun.session.close()
            self.get_logger().info(f"Rerun: the session up to step {self.rerun.step} is in "
                                   f"{self.rerun.session.path or self.params['rerun']}")


def _twist(twist) -> tuple[float, ...]:
    return (twist.linear.x, twist.linear.y, twist.linear.z, twist.angular.x, twist.angular.y, twist.angular.z)


def _rgb(image: np.ndarray, encoding: str) -> np.ndarray:
    """A camera image as rgb8 HxWx3 (msg_to_image also reads bgr8, and mono8 as HxW: shown in grey)."""
    if image.ndim == 2:
        return np.repeat(image[:, :, None], 3, axis=2)
    return np.ascontiguousarray(image[:, :, ::-1] if encoding == "bgr8" else image)


def main(args=None) -> NoReturn:
    run_node(SessionViewNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
