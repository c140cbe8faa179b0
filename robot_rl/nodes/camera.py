"""Camera node: a RealSense or OpenCV camera published on the realsense-ros topic layout.

    <camera_name>/color/image_raw                  sensor_msgs/Image rgb8 (cropped + resized)
    <camera_name>/color/camera_info                sensor_msgs/CameraInfo of that image
    <camera_name>/aligned_depth_to_color/image_raw sensor_msgs/Image 16UC1 (publish_depth, RealSense)
    <camera_name>/aligned_depth_to_color/camera_info
    <camera_name>/color/native/image_raw           sensor_msgs/Image rgb8 as captured, before crop and resize
    <camera_name>/color/native/camera_info         (publish_native, and only while anyone subscribes: a
                                                   full-resolution recording; unwatched, it costs nothing)

All on SENSOR QoS, stamped with the frame's capture time (the device's clock when it gives one).
Frames are grabbed and published on a thread of their own, so a slow or unplugged camera never
blocks the executor. A missing or failing device is reported on /diagnostics (level ERROR, the reason
in the message) and retried with exponential backoff; the node itself keeps running.
"""

from __future__ import annotations

import threading
import time
from typing import NoReturn

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image

from robot_rl.hardware.cameras.frame_geometry import Frame, Geometry, Intrinsics
from robot_rl.hardware.cameras.opencv import OpenCVSource
from robot_rl.hardware.cameras.realsense import RealSenseSource
from robot_rl.hardware.cameras.source import Backoff, CameraError, CameraSource, EndOfStream, SourceClosed
from robot_rl.ros import qos
from robot_rl.ros.camera_io import camera_info_msg, depth_to_msg
from robot_rl.ros.messages import image_to_msg, ns_to_stamp
from robot_rl.ros.node_utils import Param, ParameterError, declare_params, diagnostics, run_node

PARAMS = [
    Param("backend", "realsense", "Camera driver.", choices=["realsense", "opencv"]),
    Param("serial", "", "RealSense serial number; empty: the first camera found."),
    Param("device", "", "OpenCV: a /dev/videoN path, a video file or a stream URL; empty: use device_index."),
    Param("device_index", 0, "OpenCV: camera index when `device` is empty.", 0, 63),
    Param("width", 640, "Native capture width (RealSense stream / requested OpenCV size; 0: the camera's).", 0, 4096),
    Param("height", 480, "Native capture height.", 0, 4096),
    Param("fps", 30, "Capture rate (OpenCV files: playback rate; 0: the file's own).", 0, 300),
    Param("crop_x", 0, "Crop box left edge in native pixels.", 0, 4096),
    Param("crop_y", 0, "Crop box top edge in native pixels.", 0, 4096),
    Param("crop_width", 0, "Crop box width; 0: to the right edge.", 0, 4096),
    Param("crop_height", 0, "Crop box height; 0: to the bottom edge.", 0, 4096),
    Param("output_width", 128, "Published image width (the policy's); 0: the crop's.", 0, 4096),
    Param("output_height", 128, "Published image height; 0: the crop's.", 0, 4096),
    Param("camera_name", "camera", "Topic prefix: <camera_name>/color/image_raw, ..."),
    Param("frame_id", "", "Frame of the images; empty: <camera_name>_color_optical_frame."),
    Param("publish_depth", True, "Publish depth aligned to colour (RealSense only)."),
    Param("publish_native", False, "Also publish the colour image as captured (before crop and resize) on "
          "<camera_name>/color/native/image_raw while anyone subscribes, e.g. a full-resolution recording."),
    Param("loop", True, "OpenCV video files: start over at the end instead of stopping."),
    Param("fx", 0.0, "OpenCV: focal length x at the native size (0: uncalibrated, K all zeros).", 0.0, 1e5),
    Param("fy", 0.0, "OpenCV: focal length y at the native size.", 0.0, 1e5),
    Param("cx", 0.0, "OpenCV: principal point x at the native size.", 0.0, 1e5),
    Param("cy", 0.0, "OpenCV: principal point y at the native size.", 0.0, 1e5),
    Param("frame_timeout_s", 1.0, "RealSense: no frame for this long means the camera is gone.", 0.05, 60.0),
    Param("reconnect_backoff_s", 0.5, "First wait before reopening a missing or failed camera.", 0.01, 60.0),
    Param("reconnect_backoff_max_s", 5.0, "Longest wait between reopening attempts.", 0.01, 600.0),
    Param("diagnostics_period_s", 1.0, "Period of /diagnostics.", 0.05, 60.0),
]


def make_source(p: dict) -> CameraSource:
    geometry = Geometry(crop=(p["crop_x"], p["crop_y"], p["crop_width"], p["crop_height"]),
                        output_size=(p["output_width"], p["output_height"]))
    if p["reconnect_backoff_max_s"] < p["reconnect_backoff_s"]:
        raise ParameterError(f"reconnect_backoff_max_s={p['reconnect_backoff_max_s']} is smaller than "
                             f"reconnect_backoff_s={p['reconnect_backoff_s']}")
    backoff = Backoff(p["reconnect_backoff_s"], p["reconnect_backoff_max_s"])
    if p["backend"] == "realsense":
        return RealSenseSource(p["serial"], p["width"] or 640, p["height"] or 480, p["fps"] or 30,
                               enable_depth=p["publish_depth"], frame_timeout_s=p["frame_timeout_s"],
                               geometry=geometry, backoff=backoff)
    calibration = None
    if p["fx"] > 0 and p["fy"] > 0:
        if p["width"] <= 0 or p["height"] <= 0:
            raise ParameterError("fx/fy/cx/cy need the native width and height they were calibrated at")
        calibration = Intrinsics(p["width"], p["height"], p["fx"], p["fy"], p["cx"], p["cy"])
    return OpenCVSource(p["device"] or p["device_index"], p["width"], p["height"], p["fps"], loop=p["loop"],
                        intrinsics=calibration, geometry=geometry, backoff=backoff)


class CameraNode(Node):
    def __init__(self):
        super().__init__("camera")
        p = self.params = declare_params(self, PARAMS)
        name = p["camera_name"].strip("/") or "camera"
        self.frame_id = p["frame_id"] or f"{name}_color_optical_frame"
        self.source = make_source(p)
        self.image_pub = self.create_publisher(Image, f"{name}/color/image_raw", qos.SENSOR)
        self.info_pub = self.create_publisher(CameraInfo, f"{name}/color/camera_info", qos.SENSOR)
        self.depth_pub = self.depth_info_pub = self.native_pub = self.native_info_pub = None
        if p["publish_native"]:
            self.native_pub = self.create_publisher(Image, f"{name}/color/native/image_raw", qos.SENSOR)
            self.native_info_pub = self.create_publisher(CameraInfo, f"{name}/color/native/camera_info", qos.SENSOR)
        if p["publish_depth"] and self.source.has_depth:
            self.depth_pub = self.create_publisher(Image, f"{name}/aligned_depth_to_color/image_raw", qos.SENSOR)
            self.depth_info_pub = self.create_publisher(CameraInfo, f"{name}/aligned_depth_to_color/camera_info",
                                                        qos.SENSOR)
        elif p["publish_depth"] and p["backend"] != "realsense":
            self.get_logger().info("publish_depth is ignored: the opencv backend has no depth")
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.published = 0
        self.native_published = 0
        self.publish_errors = 0
        self.camera_errors = 0
        self.last_frame_wall = 0.0
        self.last_stamp_ns = 0
        self.stale_stamps = 0
        self.end_of_stream = False
        self.error = ""
        self._info_cache: dict[Intrinsics, CameraInfo] = {}
        self._diag_last = (time.monotonic(), 0)
        self._stop = threading.Event()
        self.create_timer(p["diagnostics_period_s"], self._publish_diagnostics)
        self.get_logger().info(f"{p['backend']} camera {self.source.name}: publishing {name}/color/image_raw"
                               + (" and aligned depth" if self.depth_pub else ""))
        self._thread = threading.Thread(target=self._grab_loop, name="camera-grab", daemon=True)
        self._thread.start()

    # ---- grabbing (own thread) ----------------------------------------------------------------

    def _grab_loop(self) -> None:
        while not self._stop.is_set():
            try:
                frame = self.source.read()
            except SourceClosed:
                break
            except EndOfStream as exc:
                self.end_of_stream, self.error = True, str(exc)
                self.get_logger().info(f"{exc}; no more frames")
                break
            except CameraError as exc:
                self.camera_errors += 1
                self.error = str(exc)
                self.get_logger().error(f"{exc} (retrying in {self.source.backoff.delay_s:.1f} s)",
                                        throttle_duration_sec=5.0)
                continue
            except Exception as exc:  # never let the thread die silently
                self.camera_errors += 1
                self.error = f"unexpected camera error: {exc!r}"
                self.get_logger().error(self.error, throttle_duration_sec=5.0)
                self._stop.wait(0.5)
                continue
            self.error = ""
            try:
                self._publish(frame)
            except Exception as exc:  # e.g. the context is shutting down
                self.publish_errors += 1
                if not self._stop.is_set():
                    self.get_logger().error(f"cannot publish a frame: {exc!r}", throttle_duration_sec=5.0)

    def _camera_info(self, intrinsics: Intrinsics, stamp) -> CameraInfo:
        info = self._info_cache.get(intrinsics)
        if info is None:
            info = self._info_cache[intrinsics] = camera_info_msg(intrinsics, self.frame_id)
        info.header.stamp = stamp
        return info

    def _publish(self, frame: Frame) -> None:
        if frame.stamp_ns <= self.last_stamp_ns:
            self.stale_stamps += 1  # a device clock that went back (reconnect): still publish
        self.last_stamp_ns = frame.stamp_ns
        stamp = ns_to_stamp(frame.stamp_ns)
        info = self._camera_info(self.source.intrinsics, stamp)
        self.image_pub.publish(image_to_msg(frame.color, stamp, self.frame_id, "rgb8"))
        self.info_pub.publish(info)
        if self.depth_pub is not None and frame.depth is not None:
            self.depth_pub.publish(depth_to_msg(frame.depth, stamp, self.frame_id))
            self.depth_info_pub.publish(info)
        self.published += 1
        # The policy's image first: the full-size copy and its serialisation only for someone who listens.
        if self.native_pub is not None and frame.native is not None and self.native_pub.get_subscription_count():
            self.native_pub.publish(image_to_msg(frame.native, stamp, self.frame_id, "rgb8"))
            self.native_info_pub.publish(self._camera_info(self.source.native_intrinsics, stamp))
            self.native_published += 1
        self.last_frame_wall = time.monotonic()

    # ---- diagnostics (executor) ---------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        now = time.monotonic()
        then, count = self._diag_last
        fps = (self.published - count) / max(now - then, 1e-6)
        self._diag_last = (now, self.published)
        stats = self.source.stats()
        values = {
            "fps": round(fps, 2),
            "frames_published": self.published,
            "native_frames_published": self.native_published,
            "dropped_frames": stats["dropped_frames"],
            "reconnects": stats["reconnects"],
            "disconnects": stats["disconnects"],
            "open_failures": stats["open_failures"],
            "camera_errors": self.camera_errors,
            "publish_errors": self.publish_errors,
            "stale_stamps": self.stale_stamps,
            "connected": stats["connected"],
            "device": self.source.name,
            "last_error": self.error or self.source.last_error,
        }
        intrinsics = self.source.intrinsics
        if intrinsics is not None:
            values["resolution"] = f"{intrinsics.width}x{intrinsics.height}"
        age = now - self.last_frame_wall if self.published else float("inf")
        if self.end_of_stream:
            level, message = DiagnosticStatus.WARN, self.error
        elif self.error and not stats["connected"]:
            level, message = DiagnosticStatus.ERROR, self.error
        elif age > max(2.0, 3 * self.params["diagnostics_period_s"]):
            level, message = DiagnosticStatus.WARN, "no frames yet" if not self.published else \
                f"no frame for {age:.1f} s"
        else:
            level, message = DiagnosticStatus.OK, "ok"
        self.diag_pub.publish(diagnostics(self, values, level, message))

    def close(self) -> None:
        self._stop.set()
        self.source.close()  # interrupts backoff / pacing / frame waits inside read()
        self._thread.join(timeout=5.0)


def main(args=None) -> NoReturn:
    run_node(CameraNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
