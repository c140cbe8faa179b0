"""What the person was shown, kept to watch later: a video (`.avi` Motion-JPEG or `.mp4`, written
with OpenCV) or, for a path without a suffix, a folder of numbered JPEGs (`frame_000001.jpg`, ...).
OpenCV is optional (`pip install opencv-python-headless`, or robot_rl[hardware]); without it a
video path falls back to a folder of JPEGs beside it and says so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

VIDEO_CODECS = {".avi": "MJPG", ".mp4": "mp4v"}
JPEG_QUALITY = 85


def check_record_path(path: str | Path) -> Path:
    """`path` as a Path; ValueError for a suffix that is neither a video nor none (a folder)."""
    path = Path(path)
    if path.suffix and path.suffix.lower() not in VIDEO_CODECS:
        raise ValueError(f"record path {str(path)!r}: expected a video ({', '.join(VIDEO_CODECS)}) or a "
                         "folder for numbered JPEGs (no suffix)")
    return path


class FrameRecorder:
    """Writes frames at `fps` to `path` (see the module). A video keeps the first frame's size: later
    frames of another size (a camera that appeared late) are scaled to it."""

    def __init__(self, path: str | Path, fps: float):
        self.path = check_record_path(path)
        self.fps = fps
        self.note = ""
        """Why the recording is not what the path asked for (logged by the caller); empty if it is."""
        self.frames = 0
        self._writer = None
        self._size: tuple[int, int] | None = None  # (width, height) of the video
        self._folder: Path | None = None
        if self.path.suffix:
            try:
                import cv2
            except ImportError:
                self._folder = self.path.with_name(f"{self.path.stem}_frames")
                self.note = (f"OpenCV is not installed (pip install opencv-python-headless): recording numbered "
                             f"JPEGs to {self._folder} instead of {self.path}")
            else:
                self._cv2 = cv2
        else:
            self._folder = self.path
        if self._folder is not None:
            self._folder.mkdir(parents=True, exist_ok=True)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    @property
    def output(self) -> Path:
        """Where the frames go: the video file or the JPEG folder."""
        return self._folder or self.path

    def write(self, frame: np.ndarray) -> None:
        self.frames += 1
        if self._folder is not None:
            Image.fromarray(frame).save(self._folder / f"frame_{self.frames:06d}.jpg", quality=JPEG_QUALITY)
            return
        height, width = frame.shape[:2]
        if self._writer is None:
            self._size = (width, height)
            fourcc = self._cv2.VideoWriter_fourcc(*VIDEO_CODECS[self.path.suffix.lower()])
            self._writer = self._cv2.VideoWriter(str(self.path), fourcc, float(self.fps), self._size)
            if not self._writer.isOpened():
                raise OSError(f"OpenCV cannot write a video to {self.path}")
        if (width, height) != self._size:
            frame = np.asarray(Image.fromarray(frame).resize(self._size, Image.Resampling.BILINEAR))
        self._writer.write(np.ascontiguousarray(frame[:, :, ::-1]))  # OpenCV takes BGR

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None
