"""The person's view of a session: frames composed from cameras and the session status, the MJPEG
server that shows them (headers name what each frame showed), the recorder, and the session_view
node as a separate process fed over loopback DDS."""

from __future__ import annotations

import io
import json
import signal
import socket
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from robot_rl.teleop.session_status import KEY_LEGEND, SessionStatus
from robot_rl.view.compose import (
    BORDER,
    DRIVER_COLOURS,
    MAX_CAMERAS,
    MIN_WIDTH,
    NO_STATUS_COLOUR,
    SCENE_HEIGHT,
    compose_frame,
)
from robot_rl.view.mjpeg import BOUNDARY, MjpegServer
from robot_rl.view.recording import FrameRecorder, check_record_path

LEGEND = KEY_LEGEND["keyboard"]


def _camera(height: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _status(**fields) -> SessionStatus:
    return SessionStatus(**{"phase": "running", "driver": "person", "episode": 2, "elapsed_s": 12.0,
                            "episode_time_s": 30.0, "last_reward": 0.25, **fields})


# ---- compose -------------------------------------------------------------------------------------


def test_one_camera_is_scaled_to_the_scene_height_and_the_frame_has_room_for_text():
    frame = compose_frame({"front": _camera(64, 64, 0)}, _status(), LEGEND)
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    assert frame.shape[1] == MIN_WIDTH + 2 * BORDER  # a 320-pixel camera is narrower than the text
    assert frame.shape[0] > SCENE_HEIGHT + 2 * BORDER


def test_two_cameras_of_different_sizes_are_tiled_side_by_side_at_one_height():
    front = np.zeros((64, 64, 3), np.uint8)
    front[..., 0] = 255  # red, scaled to 320 x 320
    wrist = np.zeros((120, 240, 3), np.uint8)
    wrist[..., 2] = 255  # blue, scaled to 640 x 320
    frame = compose_frame({"front": front, "wrist": wrist}, _status(), LEGEND)
    red = (frame[..., 0] > 200) & (frame[..., 1] < 60) & (frame[..., 2] < 60)
    blue = (frame[..., 2] > 200) & (frame[..., 0] < 60) & (frame[..., 1] < 60)
    red_rows, red_cols = np.flatnonzero(red.any(axis=1)), np.flatnonzero(red.any(axis=0))
    blue_rows, blue_cols = np.flatnonzero(blue.any(axis=1)), np.flatnonzero(blue.any(axis=0))
    assert len(red_rows) == len(blue_rows) == SCENE_HEIGHT and red_rows[0] == blue_rows[0]
    assert len(red_cols) == 320 and len(blue_cols) == 640
    assert red_cols[-1] < blue_cols[0]  # in the mapping's order, left to right
    assert red.sum() > 0.9 * 320 * 320 and blue.sum() > 0.9 * 640 * 320  # only the name labels cover them
    assert frame.shape[1] >= 320 + 640 + 2 * BORDER


def test_the_border_says_who_drives():
    images = {"front": _camera(64, 64, 3)}
    person = compose_frame(images, _status(driver="person"), LEGEND)
    policy = compose_frame(images, _status(driver="policy"), LEGEND)
    holding = compose_frame(images, _status(driver="holding"), LEGEND)
    nobody = compose_frame(images, None, LEGEND)
    assert tuple(person[0, 0]) == DRIVER_COLOURS["person"]
    assert tuple(policy[0, 0]) == DRIVER_COLOURS["policy"]
    assert tuple(holding[-1, -1]) == DRIVER_COLOURS["holding"]
    assert tuple(nobody[0, 0]) == NO_STATUS_COLOUR
    assert len({DRIVER_COLOURS["person"], DRIVER_COLOURS["policy"], DRIVER_COLOURS["holding"]}) == 3


def test_without_images_the_scene_says_which_topics_it_waits_for():
    topics = ["front/color/image_raw", "wrist/color/image_raw"]
    frame = compose_frame({}, None, LEGEND, topics)
    assert frame.shape[0] > SCENE_HEIGHT
    text_pixels = (frame[:, BORDER:-BORDER].max(axis=2) > 200).sum()
    assert text_pixels > 500  # the placeholder's text (and the legend) are drawn
    empty_legend = compose_frame({}, None, "", topics)
    assert empty_legend.shape[0] < frame.shape[0]  # no legend band without a legend


def test_the_countdown_shows_over_the_scene_and_a_pause_leaves_the_pictures_visible():
    grey = {"front": np.full((64, 64, 3), 100, np.uint8)}
    running = compose_frame(grey, _status(), LEGEND)
    paused = compose_frame(grey, _status(phase="paused"), LEGEND)
    three = compose_frame(grey, _status(phase="countdown", countdown_s=2.2), LEGEND)
    seven = compose_frame(grey, _status(phase="countdown", countdown_s=6.5), LEGEND)
    assert running.shape == paused.shape == three.shape == seven.shape

    def white_in_scene_centre(frame: np.ndarray) -> int:
        h, w = frame.shape[:2]
        centre = frame[h // 2 - 50:h // 2 + 50, w // 2 - 150:w // 2 + 150]
        return int((centre.min(axis=2) > 240).sum())

    assert white_in_scene_centre(running) == 0
    assert white_in_scene_centre(three) > 200 and white_in_scene_centre(seven) > 200
    assert not np.array_equal(three, seven)
    # paused: the middle of the pictures as they were, and a banner with white text along their bottom edge
    h = running.shape[0]
    assert np.array_equal(paused[h // 2 - 80:h // 2 + 80], running[h // 2 - 80:h // 2 + 80])
    banner = (paused[h // 2 + 80:] != running[h // 2 + 80:]).any(axis=2)
    assert banner.sum() > 5000 and (paused[h // 2 + 80:][banner].min(axis=1) > 240).sum() > 100


def test_bad_images_and_too_many_cameras_are_refused():
    with pytest.raises(ValueError, match="rgb8"):
        compose_frame({"front": np.zeros((64, 64), np.uint8)}, None, LEGEND)
    with pytest.raises(ValueError, match="rgb8"):
        compose_frame({"front": np.zeros((64, 64, 3), np.float32)}, None, LEGEND)
    with pytest.raises(ValueError, match="at most"):
        compose_frame({f"c{i}": _camera(8, 8, i) for i in range(MAX_CAMERAS + 1)}, None, LEGEND)


# ---- MJPEG server -------------------------------------------------------------------------------


def _jpeg(frame: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="JPEG")
    return buffer.getvalue()


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, dict(response.headers), response.read()


def _read_part(stream) -> tuple[dict[str, str], bytes]:
    """The next part of a multipart/x-mixed-replace stream: (headers, body)."""
    line = stream.readline()
    while line.strip() == b"":
        line = stream.readline()
    assert line.strip() == f"--{BOUNDARY}".encode(), line
    headers = {}
    while (line := stream.readline().strip()):
        name, _, value = line.decode().partition(":")
        headers[name.strip()] = value.strip()
    return headers, stream.read(int(headers["Content-Length"]))


@pytest.fixture
def server():
    view = MjpegServer("127.0.0.1", 0)
    yield view
    view.close()


def test_server_serves_the_page_the_newest_frame_and_its_status(server):
    assert server.port > 0 and server.url == f"http://127.0.0.1:{server.port}/"
    code, _, page = _get(server.url)
    assert code == 200 and b"robot_rl session view" in page and b"/stream.mjpg" in page
    assert f"ssh -L {server.port}:localhost:{server.port}".encode() in page
    with pytest.raises(urllib.error.HTTPError) as nothing_yet:
        _get(server.url + "frame.jpg")
    assert nothing_yet.value.code == 503
    assert _get(server.url + "status.json")[2] == b"null"

    server.publish(_jpeg(np.zeros((32, 32, 3), np.uint8)), None)
    status = _status(driver="policy", elapsed_s=65.0, episode_time_s=90.0)
    server.publish(_jpeg(np.full((32, 32, 3), 200, np.uint8)), status)
    code, headers, body = _get(server.url + "frame.jpg")
    assert code == 200 and headers["Content-Type"] == "image/jpeg"
    assert headers["X-Session-Driver"] == "policy" and headers["X-Session-Clock"] == "01:05 / 01:30"
    assert headers["X-Session-Phase"] == "running" and headers["X-Frame-Index"] == "2"
    assert np.asarray(Image.open(io.BytesIO(body))).mean() > 150
    assert SessionStatus.from_json(_get(server.url + "status.json")[2].decode()) == status
    with pytest.raises(urllib.error.HTTPError) as missing:
        _get(server.url + "nothing")
    assert missing.value.code == 404


def test_stream_sends_each_newest_frame_with_its_headers(server):
    server.publish(_jpeg(np.zeros((16, 16, 3), np.uint8)), _status(driver="person"))
    with urllib.request.urlopen(server.url + "stream.mjpg", timeout=5) as stream:
        assert stream.headers["Content-Type"] == f"multipart/x-mixed-replace; boundary={BOUNDARY}"
        headers, body = _read_part(stream)
        assert headers["X-Session-Driver"] == "person" and headers["X-Frame-Index"] == "1"
        Image.open(io.BytesIO(body)).verify()
        deadline = time.monotonic() + 5
        while server.clients != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.clients == 1
        server.publish(_jpeg(np.full((16, 16, 3), 255, np.uint8)), _status(driver="holding", phase="paused"))
        headers, _ = _read_part(stream)
        assert headers["X-Session-Driver"] == "holding" and headers["X-Session-Phase"] == "paused"
        assert headers["X-Frame-Index"] == "2"
    deadline = time.monotonic() + 5
    while server.clients and time.monotonic() < deadline:
        server.publish(_jpeg(np.zeros((16, 16, 3), np.uint8)), None)  # the write that notices the gone client
        time.sleep(0.05)
    assert server.clients == 0


def test_a_client_that_never_reads_does_not_hold_up_publishing(server):
    big = _jpeg(_camera(480, 640, 4))  # random pixels: a JPEG of several hundred kB
    slow = socket.create_connection(("127.0.0.1", server.port))
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.sendall(b"GET /stream.mjpg HTTP/1.0\r\n\r\n")
    try:
        started = time.monotonic()
        for _ in range(200):  # far more than the socket buffers hold
            frame = server.publish(big, _status())
        assert time.monotonic() - started < 1.0
        assert frame.index == 200
        # Another client still gets the newest frame at once.
        code, headers, _ = _get(server.url + "frame.jpg")
        assert code == 200 and headers["X-Frame-Index"] == "200"
    finally:
        slow.close()


def test_a_port_out_of_range_or_in_use_is_refused(server):
    with pytest.raises(ValueError, match="port"):
        MjpegServer("127.0.0.1", 70000)
    with pytest.raises(OSError):
        MjpegServer("127.0.0.1", server.port)


# ---- recording ----------------------------------------------------------------------------------


def test_recorder_writes_numbered_jpegs_to_a_folder_and_refuses_unknown_suffixes(tmp_path):
    recorder = FrameRecorder(tmp_path / "view", fps=10)
    for i in range(3):
        recorder.write(np.full((40, 60, 3), 50 * i, np.uint8))
    recorder.close()
    assert sorted(p.name for p in (tmp_path / "view").iterdir()) == [f"frame_00000{i}.jpg" for i in (1, 2, 3)]
    with pytest.raises(ValueError, match="record path"):
        check_record_path(tmp_path / "view.gif")


def test_recorder_writes_a_video_when_opencv_is_installed(tmp_path):
    cv2 = pytest.importorskip("cv2")
    recorder = FrameRecorder(tmp_path / "view.avi", fps=10)
    recorder.write(np.zeros((40, 60, 3), np.uint8))
    recorder.write(np.zeros((50, 70, 3), np.uint8))  # another size: scaled to the first
    recorder.close()
    capture = cv2.VideoCapture(str(tmp_path / "view.avi"))
    assert capture.get(cv2.CAP_PROP_FRAME_COUNT) == 2 and capture.get(cv2.CAP_PROP_FRAME_WIDTH) == 60
    capture.release()


# ---- the node -----------------------------------------------------------------------------------


def test_node_shows_the_published_camera_and_status(tmp_path):
    pytest.importorskip("rclpy")
    from sensor_msgs.msg import Image as ImageMsg
    from std_msgs.msg import String

    from robot_rl.ros import qos
    from robot_rl.ros.messages import image_to_msg
    from robot_rl.ros.probe import RosProbe, start_node

    log = tmp_path / "session_view.log"
    proc, domain_id = start_node("robot_rl.nodes.session_view", log, "port:=0", f"run_dir:={tmp_path}",
                                 "cameras:=[front]", "diagnostics_period_s:=0.2",
                                 f"record_path:={tmp_path / 'view'}")
    probe = RosProbe(domain_id, "session_view_test")
    probe.watched = "session_view"
    image_pub = probe.node.create_publisher(ImageMsg, "front/color/image_raw", qos.SENSOR)
    status_pub = probe.node.create_publisher(String, "session/status", qos.EVENTS)
    url_file = tmp_path / "view_url.txt"
    try:
        probe.wait_for(lambda: url_file.exists() or proc.poll() is not None, 20, "view_url.txt")
        assert proc.poll() is None, log.read_text()[-3000:]
        url = url_file.read_text().strip()
        assert url.startswith("http://127.0.0.1:") and f"session view: {url}" in log.read_text()

        scene = np.zeros((64, 64, 3), np.uint8)
        scene[:, :32] = (255, 0, 0)  # half red, half blue: anything but uniform
        scene[:, 32:] = (0, 0, 255)
        status = _status(driver="person", elapsed_s=7.0, episode_time_s=20.0)

        def shown() -> bool:
            image_pub.publish(image_to_msg(scene))
            status_pub.publish(String(data=status.to_json()))
            probe.spin(0.1)
            try:
                return _get(url + "frame.jpg")[1]["X-Session-Driver"] == "person"
            except OSError:
                return False

        deadline = time.monotonic() + 15
        while not shown() and time.monotonic() < deadline:
            pass
        code, headers, body = _get(url + "frame.jpg")
        assert headers["X-Session-Driver"] == "person", log.read_text()[-3000:]
        assert headers["X-Session-Clock"] == "00:07 / 00:20"
        frame = np.asarray(Image.open(io.BytesIO(body)).convert("RGB")).astype(int)
        reddish = (frame[..., 0] > 200) & (frame[..., 2] < 60)
        bluish = (frame[..., 2] > 200) & (frame[..., 0] < 60)
        assert reddish.sum() > 10_000 and bluish.sum() > 10_000  # the camera, scaled up, is in the frame
        assert json.loads(_get(url + "status.json")[2])["driver"] == "person"

        status_pub.publish(String(data="{not json"))  # now that the view is matched: counted, not fatal
        probe.wait_for(lambda: probe.value("invalid_status") >= 1, 10, "the malformed status counted")
        assert probe.diag["url"] == url
        assert probe.value("frames_composed") >= 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0, log.read_text()[-3000:]
        assert any(Path(tmp_path / "view").glob("frame_*.jpg"))  # the recording
    finally:
        probe.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_node_refuses_unknown_cameras_and_bad_addresses(tmp_path):
    pytest.importorskip("rclpy")
    import subprocess
    import sys

    from robot_rl.nodes.session_view import view_cameras
    from robot_rl.ros.graph import loopback_environment
    from robot_rl.ros.node_utils import ParameterError
    from robot_rl.ros.probe import fresh_domain_id

    assert view_cameras("arm_pick_cube", []) == ("front", "wrist")
    assert view_cameras("car_race", ["front"]) == ("front",)  # a task without cameras of its own: any name
    for cameras, match in ((["side"], "unknown camera 'side'"), (["front", "front"], "twice"),
                           (["front/"], "topic prefix"), ([3], "topic prefix")):
        with pytest.raises(ParameterError, match=match):
            view_cameras("arm_pick_cube", cameras)
    with pytest.raises(ParameterError, match="has no cameras"):
        view_cameras("arm_lift", [])
    for param, message in (("host:=my-laptop", "host 'my-laptop' is not an IP address"),
                           ("record_path:=view.gif", "record path"), ("port:=70000", "'port'")):
        result = subprocess.run([sys.executable, "-m", "robot_rl.nodes.session_view", "--ros-args", "-p", param],
                                env=loopback_environment(fresh_domain_id()), capture_output=True, text=True,
                                timeout=30, cwd=tmp_path)
        assert result.returncode == 2 and message in result.stderr, result.stderr
