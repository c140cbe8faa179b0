"""Camera sources and the camera node.

RealSense: librealsense itself runs here — a `rs.software_device` with a depth and a colour sensor
(different intrinsics) is fed frames from a thread, and `RealSenseSource` drives a real `rs.pipeline`
and `rs.align` over it. OpenCV: a small MJPG/AVI file written with `cv2.VideoWriter`. The node runs as
a separate process on such a file (loopback DDS, a domain id of its own)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from robot_rl.hardware.cameras.source import (  # noqa: E402
    Backoff, CameraError, EndOfStream, HardwareClock, SourceClosed,
)
from robot_rl.hardware.cameras.frame_geometry import Geometry, Intrinsics  # noqa: E402
from robot_rl.hardware.cameras.opencv import OpenCVSource  # noqa: E402
from robot_rl.hardware.cameras.realsense import RealSenseSource  # noqa: E402
from robot_rl.ros.probe import fresh_domain_id  # noqa: E402

# ------------------------------------------------------------------------------------------------
# geometry (pure)
# ------------------------------------------------------------------------------------------------


def test_crop_resize_updates_intrinsics_consistently():
    intr = Intrinsics(640, 480, fx=600.0, fy=610.0, cx=319.5, cy=239.5)
    geometry = Geometry(crop=(80, 0, 480, 0), output_size=(128, 128))
    assert geometry.crop_box(640, 480) == (80, 0, 480, 480)
    out = geometry.apply_intrinsics(intr)
    s = 128 / 480
    assert (out.width, out.height) == (128, 128)
    assert out.fx == pytest.approx(600 * s) and out.fy == pytest.approx(610 * s)
    # a 3-D point projects to the same place before and after, up to the crop + scale
    X, Y, Z = 0.13, -0.07, 0.9
    u, v = intr.fx * X / Z + intr.cx, intr.fy * Y / Z + intr.cy
    u2, v2 = out.fx * X / Z + out.cx, out.fy * Y / Z + out.cy
    assert u2 == pytest.approx((u - 80 + 0.5) * s - 0.5) and v2 == pytest.approx((v + 0.5) * s - 0.5)
    color = np.zeros((480, 640, 3), np.uint8)
    depth = np.zeros((480, 640), np.uint16)
    c, d = geometry.apply(color, depth)
    assert c.shape == (128, 128, 3) and d.shape == (128, 128) and d.dtype == np.uint16
    with pytest.raises(ValueError, match="does not fit"):
        Geometry(crop=(600, 0, 100, 0)).crop_box(640, 480)
    assert Geometry().apply_intrinsics(intr) == intr
    uncalibrated = Geometry(output_size=(64, 48)).apply_intrinsics(Intrinsics(640, 480))
    assert not uncalibrated.calibrated and (uncalibrated.width, uncalibrated.height) == (64, 48)


def test_backoff_and_hardware_clock():
    b = Backoff(0.1, 0.5)
    assert [b.failed() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    b.reset()
    assert b.remaining() == 0 and b.failed() == 0.1
    clock = HardwareClock(max_drift=1e-3)
    device0, host0 = 5_000_000_000, 1_700_000_000_000_000_000
    latencies = [3_000_000, 1_000_000, 2_000_000, 5_000_000]  # transport latency of each frame
    mapped = [clock.to_host(device0 + i * 33_000_000, host0 + i * 33_000_000 + lat) for i, lat in enumerate(latencies)]
    # the smallest latency so far wins; a larger one moves the offset by at most max_drift * elapsed
    assert mapped[0] == host0 + 3_000_000
    assert mapped[1] == host0 + 33_000_000 + 1_000_000
    for a, b in zip(mapped[1:], mapped[2:]):
        assert 33_000_000 < b - a <= 33_000_000 + 40_000  # 1e-3 * ~35 ms of rise, not the 1-3 ms jitter


# ------------------------------------------------------------------------------------------------
# RealSense through librealsense's software device
# ------------------------------------------------------------------------------------------------

W, H, FPS = 640, 480, 30
DEPTH_F, COLOR_F = 400.0, 600.0


class FakeRealSense:
    """A librealsense software device with a depth sensor (f=400) and a colour sensor (f=600), same
    optical centre, fed by a thread: depth is a 1 m plane with a 0.8 m square (half-width 40 px) in the
    middle; colour is red on the left half and blue on the right, with a frame counter in green."""

    def __init__(self, rs, domain=None, serial="123456789"):
        self.rs = rs
        self.domain = domain or rs.timestamp_domain.global_time
        dev = self.device = rs.software_device()
        dev.register_info(rs.camera_info.serial_number, serial)
        dev.register_info(rs.camera_info.name, "Software D435")
        self.depth_sensor = dev.add_sensor("Stereo Module")
        self.color_sensor = dev.add_sensor("RGB Camera")
        self.depth_profile = self.depth_sensor.add_video_stream(
            self._stream(rs.stream.depth, 0, 2, rs.format.z16, DEPTH_F), True)
        self.depth_sensor.add_read_only_option(rs.option.depth_units, 0.001)
        self.color_profile = self.color_sensor.add_video_stream(
            self._stream(rs.stream.color, 1, 3, rs.format.rgb8, COLOR_F), True)
        extrinsics = rs.extrinsics()
        extrinsics.rotation = [1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0]
        extrinsics.translation = [0.0, 0.0, 0.0]
        self.depth_profile.register_extrinsics_to(self.color_profile, extrinsics)
        dev.create_matcher(rs.matchers.default)
        self.depth = np.full((H, W), 1000, np.uint16)
        self.depth[H // 2 - 40:H // 2 + 40, W // 2 - 40:W // 2 + 40] = 800
        self.color = np.zeros((H, W, 3), np.uint8)
        self.color[:, : W // 2, 0] = 220
        self.color[:, W // 2:, 2] = 180
        self.paused = threading.Event()
        self.idle = threading.Event()  # set by the feeder once it has seen `paused`: no frame is on its way
        self.stopped = threading.Event()
        self.stamps_ms: list[float] = []
        self.number = 0
        self.skip_every = 0  # drop every n-th frame number (to test dropped-frame counting)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _stream(self, kind, uid, bpp, fmt, focal):
        rs = self.rs
        intr = rs.intrinsics()
        intr.width, intr.height, intr.fx, intr.fy = W, H, focal, focal
        intr.ppx, intr.ppy = W / 2 - 0.5, H / 2 - 0.5
        intr.model, intr.coeffs = rs.distortion.brown_conrady, [0.0] * 5
        s = rs.video_stream()
        s.type, s.index, s.uid, s.width, s.height, s.fps, s.bpp, s.fmt, s.intrinsics = \
            kind, 0, uid, W, H, FPS, bpp, fmt, intr
        return s

    def _frame(self, pixels, bpp, profile, stamp_ms, number):
        f = self.rs.software_video_frame()
        f.pixels, f.bpp, f.stride = pixels, bpp, W * bpp
        f.timestamp, f.domain, f.frame_number = stamp_ms, self.domain, number
        f.profile = profile.as_video_stream_profile()
        return f

    def _run(self):
        while not self.stopped.is_set():
            if self.paused.is_set():
                self.idle.set()
                time.sleep(0.01)
                continue
            self.idle.clear()
            self.number += 1
            if self.skip_every and self.number % self.skip_every == 0:
                self.number += 1
            if self.domain == self.rs.timestamp_domain.hardware_clock:
                stamp_ms = 5000.0 + self.number * 1000.0 / FPS  # device clock, not the epoch
            else:
                stamp_ms = time.time() * 1000.0
            color = self.color.copy()
            color[0, 0, 1] = self.number % 256
            depth_frame = self._frame(self.depth, 2, self.depth_profile, stamp_ms, self.number)
            depth_frame.depth_units = 0.001
            self.depth_sensor.on_video_frame(depth_frame)
            self.color_sensor.on_video_frame(self._frame(color, 3, self.color_profile, stamp_ms, self.number))
            self.stamps_ms.append(stamp_ms)
            time.sleep(1.0 / FPS)

    def pause(self):
        """Stops the frames and returns once the feeder has (a frame made just before `paused` was set
        would otherwise arrive after it: CI saw a loaded machine's read get one)."""
        self.idle.clear()
        self.paused.set()
        assert self.idle.wait(5.0), "the fake camera's feeder never paused"

    def resume(self):
        """Frames flow again ("plugged back in")."""
        self.paused.clear()

    def close(self):
        self.stopped.set()
        self.thread.join(timeout=2)


@pytest.fixture
def rs():
    return pytest.importorskip("pyrealsense2")


def test_realsense_pipeline_aligns_crops_resizes_and_stamps(rs):
    fake = FakeRealSense(rs)
    source = RealSenseSource("123456789", W, H, FPS, device=fake.device,
                             geometry=Geometry(crop=(80, 0, 480, 480), output_size=(128, 128)))
    try:
        source.open()
        assert source.depth_scale == pytest.approx(0.001)
        frames = [source.read() for _ in range(5)]
    finally:
        source.close()
        fake.close()
    f = frames[-1]
    assert f.color.shape == (128, 128, 3) and f.color.dtype == np.uint8
    assert f.depth.shape == (128, 128) and f.depth.dtype == np.uint16
    assert [fr.seq for fr in frames] == list(range(5))
    # RGB order kept: red left of the centre line (x=320 -> 64 after crop + resize), blue right of it
    assert f.color[64, 10, 0] == 220 and f.color[64, 10, 2] == 0
    assert f.color[64, 120, 2] == 180 and f.color[64, 120, 0] == 0
    # alignment: the depth square of half-width 40 px at f=400 covers 40*600/400 = 60 colour px,
    # i.e. 60*128/480 = 16 output px around the centre (63.5, 63.5)
    assert f.depth[64, 64] == 800 and f.depth[64 + 12, 64 - 12] == 800
    assert f.depth[64, 64 + 20] == 1000 and f.depth[64 - 20, 64] == 1000
    square = np.argwhere(f.depth[64] == 800).ravel()
    assert 30 <= len(square) <= 34  # 2 * 16 output pixels, +-1 at each edge
    # intrinsics follow the crop and the resize
    intr = source.intrinsics
    s = 128 / 480
    assert (intr.width, intr.height) == (128, 128)
    assert intr.fx == pytest.approx(COLOR_F * s) and intr.fy == pytest.approx(COLOR_F * s)
    assert intr.cx == pytest.approx((W / 2 - 0.5 - 80 + 0.5) * s - 0.5)
    assert intr.cy == pytest.approx((H / 2 - 0.5 + 0.5) * s - 0.5)
    assert intr.distortion_model == "plumb_bob"
    # global-time stamps are the device's (host epoch ms), not the receive time
    assert all(fr.hardware_stamp for fr in frames)
    injected_ns = {int(round(ms * 1e6)) for ms in fake.stamps_ms}
    assert all(fr.stamp_ns in injected_ns for fr in frames)
    assert np.all(np.diff([fr.stamp_ns for fr in frames]) > 0)


def test_realsense_colour_only_with_device_clock_and_dropped_frames(rs):
    fake = FakeRealSense(rs, domain=rs.timestamp_domain.hardware_clock)
    fake.skip_every = 3
    source = RealSenseSource(width=W, height=H, fps=FPS, enable_depth=False, device=fake.device)
    try:
        frames = [source.read() for _ in range(8)]  # read() opens by itself
    finally:
        source.close()
        fake.close()
    assert all(f.depth is None and f.color.shape == (H, W, 3) for f in frames)
    assert source.intrinsics.fx == pytest.approx(COLOR_F) and source.depth_scale == 0.0
    # device-clock stamps (5 s after its power-up) are mapped onto the host's epoch clock
    now = time.time_ns()
    assert all(now - 5e9 < f.stamp_ns <= now + 1e9 for f in frames)
    assert np.all(np.diff([f.stamp_ns for f in frames]) > 0)
    assert source.dropped >= 1  # frame numbers 3, 6, ... never came


def test_realsense_reconnects_after_the_stream_stops_and_after_removal(rs):
    fake = FakeRealSense(rs)
    source = RealSenseSource(width=W, height=H, fps=FPS, device=fake.device, frame_timeout_s=0.3,
                             backoff=Backoff(0.05, 0.2))
    try:
        source.read()
        fake.pause()  # "unplugged": nothing arrives any more
        with pytest.raises(CameraError, match="no frames"):
            for _ in range(8):  # frames that came before the pause may still wait in the pipeline's queue
                source.read()
        assert not source.is_open and source.disconnects == 1
        fake.resume()
        frame = source.read()  # reopens the pipeline after the backoff
        assert frame.color.shape == (H, W, 3)
        assert source.reconnects == 1 and source.is_open
        # a devices-changed event naming our camera as removed closes it as well

        class Removed:
            @staticmethod
            def was_removed(device):
                return True

        source._on_devices_changed(Removed())
        with pytest.raises(CameraError, match="disconnected"):
            source.read()
        source.read()
        assert source.disconnects == 2 and source.reconnects == 2
    finally:
        source.close()
        fake.close()
    with pytest.raises(SourceClosed):
        source.read()


def test_realsense_missing_camera_is_a_clear_error_and_backs_off(rs):
    source = RealSenseSource("000000000000", backoff=Backoff(0.2, 1.0))
    with pytest.raises(CameraError, match="000000000000"):
        source.read()
    start = time.monotonic()
    with pytest.raises(CameraError):
        source.read()  # waits for the backoff before trying again
    assert time.monotonic() - start >= 0.15
    assert source.open_failures == 2 and source.backoff.delay_s == pytest.approx(0.4)
    source.close()


# ------------------------------------------------------------------------------------------------
# OpenCV
# ------------------------------------------------------------------------------------------------

VIDEO_FRAMES, VIDEO_W, VIDEO_H = 12, 160, 120


def _write_video(path, frames=VIDEO_FRAMES, fps=20.0):
    """Left third red, middle green, right blue (RGB), plus a bright bar whose height grows per frame."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (VIDEO_W, VIDEO_H))
    assert writer.isOpened()
    for i in range(frames):
        rgb = np.zeros((VIDEO_H, VIDEO_W, 3), np.uint8)
        rgb[:, :48] = (200, 30, 30)
        rgb[:, 56:104] = (30, 200, 30)
        rgb[:, 112:] = (30, 30, 200)
        rgb[: 8 * (i + 1), 150:] = 255
        writer.write(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def test_opencv_video_file_rgb_order_resize_and_end(tmp_path):
    path = _write_video(tmp_path / "clip.avi")
    source = OpenCVSource(str(path), loop=False, pace=False)
    frames = []
    with source:
        while True:
            try:
                frames.append(source.read())
            except EndOfStream:
                break
    assert len(frames) == VIDEO_FRAMES
    f = frames[0]
    assert f.color.shape == (VIDEO_H, VIDEO_W, 3) and f.color.dtype == np.uint8 and f.depth is None
    tol = 12  # MJPG
    assert np.all(np.abs(f.color[60, 20].astype(int) - (200, 30, 30)) <= tol)
    assert np.all(np.abs(f.color[60, 80].astype(int) - (30, 200, 30)) <= tol)
    assert np.all(np.abs(f.color[60, 130].astype(int) - (30, 30, 200)) <= tol)
    bars = [int((fr.color[:, 155, 0] > 128).sum()) for fr in frames]
    assert all(abs(b - 8 * (i + 1)) <= 2 for i, b in enumerate(bars)), bars  # frames in order, none lost
    assert not source.intrinsics.calibrated and source.intrinsics.width == VIDEO_W

    calib = Intrinsics(VIDEO_W, VIDEO_H, 100.0, 100.0, 79.5, 59.5)
    resized = OpenCVSource(str(path), loop=True, pace=False, intrinsics=calib,
                           geometry=Geometry(crop=(40, 0, 120, 120), output_size=(64, 64)))
    with resized:
        looped = [resized.read() for _ in range(VIDEO_FRAMES + 3)]  # past the end: starts over
    assert [fr.seq for fr in looped] == list(range(VIDEO_FRAMES + 3))
    g = looped[0]
    assert g.color.shape == (64, 64, 3)
    assert np.all(np.abs(g.color[32, 16].astype(int) - (30, 200, 30)) <= tol)  # x=70 in the source
    assert np.all(np.abs(g.color[32, 45].astype(int) - (30, 30, 200)) <= tol)  # x=124
    assert int((looped[VIDEO_FRAMES].color[:, 62, 0] > 128).sum()) == pytest.approx(8 * 64 / 120, abs=2)
    assert resized.intrinsics.fx == pytest.approx(100 * 64 / 120)
    assert resized.intrinsics.cx == pytest.approx((79.5 - 40 + 0.5) * 64 / 120 - 0.5)


def test_opencv_paces_files_and_reports_missing_devices(tmp_path):
    path = _write_video(tmp_path / "clip.avi", frames=30, fps=20.0)
    source = OpenCVSource(str(path))
    with source:
        source.read()
        start = time.monotonic()
        for _ in range(6):
            source.read()
        elapsed = time.monotonic() - start
    assert 0.2 <= elapsed <= 0.6  # 6 frames at 20 fps
    missing = OpenCVSource("/dev/video-does-not-exist", backoff=Backoff(0.05, 0.1))
    with pytest.raises(CameraError, match="/dev/video-does-not-exist"):
        missing.read()
    assert missing.open_failures == 1 and not missing.is_open
    with pytest.raises(CameraError, match="no such video file"):
        OpenCVSource(str(tmp_path / "nope.avi")).open()


# ------------------------------------------------------------------------------------------------
# the camera node, as a separate process
# ------------------------------------------------------------------------------------------------


def _observer(domain_id):
    rclpy = pytest.importorskip("rclpy")
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain_id)
    node = rclpy.create_node("camera_test_observer", context=context)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    return rclpy, context, node, executor


def _spin_until(executor, predicate, timeout, what, log=None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.05)
        if predicate():
            return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f"\n{log.read_text()}" if log else ""))


def _start_node(tmp_path, domain_id, *params):
    from robot_rl.ros.graph import loopback_environment

    log = tmp_path / "camera.log"
    args = [sys.executable, "-m", "robot_rl.nodes.camera", "--ros-args"]
    for p in params:
        args += ["-p", p]
    proc = subprocess.Popen(args, env=loopback_environment(domain_id), stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT)
    return proc, log


def test_camera_node_publishes_a_video_file(tmp_path):
    pytest.importorskip("rclpy")
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import CameraInfo, Image

    from robot_rl.ros import qos
    from robot_rl.ros.messages import msg_to_image, stamp_to_ns

    path = _write_video(tmp_path / "clip.avi", frames=20, fps=20.0)
    domain_id = fresh_domain_id()
    proc, log = _start_node(tmp_path, domain_id, "backend:=opencv", f"device:={path}", "camera_name:=front",
                            "output_width:=64", "output_height:=48", "crop_x:=0", "crop_width:=160",
                            "width:=160", "height:=120", "fps:=0",
                            "fx:=100.0", "fy:=100.0", "cx:=79.5", "cy:=59.5", "diagnostics_period_s:=0.5",
                            "publish_native:=true")
    rclpy, context, node, executor = _observer(domain_id)
    got = {"image": [], "info": [], "diag": {}, "native": [], "native_info": []}

    def on_diag(msg):
        for status in msg.status:
            if status.name.endswith("camera"):
                got["diag"] = {kv.key: kv.value for kv in status.values}

    node.create_subscription(Image, "front/color/image_raw", got["image"].append, qos.SENSOR)
    node.create_subscription(CameraInfo, "front/color/camera_info", got["info"].append, qos.SENSOR)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
    # The full-size picture as captured, for a recording: published only while someone subscribes.
    node.create_subscription(Image, "front/color/native/image_raw", got["native"].append, qos.SENSOR)
    node.create_subscription(CameraInfo, "front/color/native/camera_info", got["native_info"].append, qos.SENSOR)
    try:
        _spin_until(executor, lambda: len(got["image"]) >= 10 and len(got["info"]) >= 10 and len(got["native"]) >= 5
                    and float(got["diag"].get("fps", 0)) > 0 and int(got["diag"].get("native_frames_published", 0)),
                    60, "images, camera info and diagnostics", log)
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)
        node.destroy_node()
        rclpy.shutdown(context=context)
    assert code == 0, log.read_text()
    img = got["image"][-1]
    assert (img.width, img.height, img.encoding, img.step) == (64, 48, "rgb8", 64 * 3)
    assert img.header.frame_id == "front_color_optical_frame"
    array = msg_to_image(img)
    assert array[24, 5, 0] > 150 and array[24, 5, 2] < 60  # red on the left: RGB order
    stamps = [stamp_to_ns(m.header.stamp) for m in got["image"]]
    assert all(b > a for a, b in zip(stamps, stamps[1:]))
    assert abs(stamps[-1] - time.time_ns()) < 30e9
    info = got["info"][-1]
    assert (info.width, info.height) == (64, 48)
    assert info.k[0] == pytest.approx(100 * 64 / 160) and info.k[4] == pytest.approx(100 * 48 / 120)
    assert stamp_to_ns(info.header.stamp) in stamps or stamp_to_ns(info.header.stamp) > stamps[0]
    assert 10 <= float(got["diag"]["fps"]) <= 30
    native = got["native"][-1]
    assert (native.width, native.height, native.encoding) == (160, 120, "rgb8")
    assert stamp_to_ns(native.header.stamp) in stamps or stamp_to_ns(native.header.stamp) > stamps[-1]
    full = msg_to_image(native)
    assert full[60, 20, 0] > 150 and full[60, 20, 2] < 60 and full[60, 130, 2] > 150  # uncropped: blue on the right
    assert got["native_info"][-1].k[0] == pytest.approx(100.0) and got["native_info"][-1].width == 160


def test_camera_node_keeps_running_without_its_device_and_says_why(tmp_path):
    pytest.importorskip("rclpy")
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

    domain_id = fresh_domain_id()
    proc, log = _start_node(tmp_path, domain_id, "backend:=opencv", "device:=/dev/video-robot-rl-missing",
                            "reconnect_backoff_s:=0.2", "reconnect_backoff_max_s:=0.4", "diagnostics_period_s:=0.5")
    rclpy, context, node, executor = _observer(domain_id)
    seen = []
    node.create_subscription(DiagnosticArray, "/diagnostics",
                             lambda m: seen.extend(s for s in m.status if s.name.endswith("camera")), 10)
    try:
        def failing_repeatedly():
            return any(s.level == DiagnosticStatus.ERROR and "/dev/video-robot-rl-missing" in s.message
                       and int({kv.key: kv.value for kv in s.values}.get("open_failures", 0)) >= 3 for s in seen)

        _spin_until(executor, failing_repeatedly, 60, "an ERROR diagnostic naming the missing device", log)
        assert proc.poll() is None  # still running, still retrying
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)
        node.destroy_node()
        rclpy.shutdown(context=context)
    assert code == 0, log.read_text()
    assert "/dev/video-robot-rl-missing" in log.read_text()
