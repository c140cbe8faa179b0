"""The view over HTTP, for any browser (over SSH: `ssh -L PORT:localhost:PORT host`):

    /             a page showing the stream
    /stream.mjpg  multipart/x-mixed-replace JPEG stream of the newest frame
    /frame.jpg    the newest frame, once
    /status.json  the session status the newest frame was rendered from (null before the first)

Every JPEG (each part of the stream too) carries X-Session-Driver, X-Session-Clock,
X-Session-Phase and X-Frame-Index, so a program reads what the person was shown with the frame.
The server keeps one frame, the newest: `publish` replaces it and never waits for a client; each
stream client sends the newest frame it has not sent yet, so a slow client skips frames instead
of queueing them.
"""

from __future__ import annotations

import html
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from robot_rl.teleop.session_status import SessionStatus

BOUNDARY = "robot_rl_frame"
CLIENT_WRITE_TIMEOUT_S = 10.0
"""A client that takes longer than this to accept one frame is dropped (a stalled browser tab)."""
STOP_POLL_S = 0.25
"""How often idle stream handlers look whether the server is closing."""


@dataclass(frozen=True)
class ViewFrame:
    jpeg: bytes
    status: SessionStatus | None
    index: int
    """Counts frames published since the server started, from 1."""

    def headers(self) -> dict[str, str]:
        status = self.status
        return {"Content-Type": "image/jpeg", "Content-Length": str(len(self.jpeg)),
                "X-Session-Driver": "none" if status is None else status.driver,
                "X-Session-Clock": "-" if status is None else status.clock_text(),
                "X-Session-Phase": "none" if status is None else status.phase,
                "X-Frame-Index": str(self.index)}


def check_port(port: int) -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port {port!r} must be an integer in [0, 65535] (0: any free port)")


class MjpegServer:
    """Serves published frames on `host`:`port` from a daemon thread; `port` 0 picks a free port
    (read `port` or `url`). Raises OSError when the address cannot be bound."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8765):
        check_port(port)
        self._newest: ViewFrame | None = None
        self._changed = threading.Condition()
        self._closing = False
        self._clients = 0
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self.host, self.port = host, self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": STOP_POLL_S},
                                        name="view-http", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    @property
    def clients(self) -> int:
        """Stream clients connected now."""
        return self._clients

    def publish(self, jpeg: bytes, status: SessionStatus | None) -> ViewFrame:
        """Makes `jpeg` (rendered from `status`) the newest frame; returns it with its index."""
        with self._changed:
            frame = ViewFrame(jpeg, status, 1 if self._newest is None else self._newest.index + 1)
            self._newest = frame
            self._changed.notify_all()
        return frame

    def newest(self) -> ViewFrame | None:
        return self._newest

    def _next_after(self, index: int) -> ViewFrame | None:
        """The newest frame once it is newer than `index`; None when the server closes."""
        with self._changed:
            while not self._closing and (self._newest is None or self._newest.index <= index):
                self._changed.wait(STOP_POLL_S)
            return None if self._closing else self._newest

    def _count_client(self, delta: int) -> None:
        with self._changed:
            self._clients += delta

    def page(self) -> str:
        port = self.port
        return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>robot_rl session view</title>
<style>body {{ background: #181818; color: #ddd; font-family: sans-serif; margin: 1em; }}
img {{ max-width: 100%; }} code {{ color: #fc6; }}</style></head>
<body><img src="/stream.mjpg" alt="session view stream">
<p>From another machine: <code>ssh -L {port}:localhost:{port} {html.escape(socket.gethostname())}</code>,
then open <code>http://localhost:{port}/</code>. Also: <a href="/frame.jpg">/frame.jpg</a>,
<a href="/status.json">/status.json</a>.</p></body></html>
"""

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _handler_for(view: MjpegServer) -> type[BaseHTTPRequestHandler]:
    class ViewHandler(BaseHTTPRequestHandler):
        server_version = "robot_rl-view"
        timeout = CLIENT_WRITE_TIMEOUT_S

        def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
            route = self.path.split("?", 1)[0]
            if route == "/":
                self._send(200, "text/html; charset=utf-8", view.page().encode())
            elif route == "/status.json":
                frame = view.newest()
                status = "null" if frame is None or frame.status is None else frame.status.to_json()
                self._send(200, "application/json", status.encode())
            elif route == "/frame.jpg":
                frame = view.newest()
                if frame is None:
                    self._send(503, "text/plain", b"no frame composed yet\n")
                else:
                    self.send_response(200)
                    self._frame_headers(frame)
                    self.end_headers()
                    self.wfile.write(frame.jpeg)
            elif route == "/stream.mjpg":
                self._stream()
            else:
                self._send(404, "text/plain", f"no such page {route}; try /\n".encode())

        def _send(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _frame_headers(self, frame: ViewFrame) -> None:
            for name, value in frame.headers().items():
                self.send_header(name, value)
            self.send_header("Cache-Control", "no-store")

        def _stream(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={BOUNDARY}")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            view._count_client(+1)
            try:
                sent = 0
                while (frame := view._next_after(sent)) is not None:
                    part = [f"--{BOUNDARY}"] + [f"{name}: {value}" for name, value in frame.headers().items()]
                    self.wfile.write(("\r\n".join(part) + "\r\n\r\n").encode() + frame.jpeg + b"\r\n")
                    self.wfile.flush()
                    sent = frame.index
            except (ConnectionError, TimeoutError):
                pass  # the client went away or stalled: its stream ends, the others go on
            finally:
                view._count_client(-1)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
            pass  # one line per request would flood the node's log at 10 frames a second

    return ViewHandler
