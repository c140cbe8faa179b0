"""One frame of the person's view: the camera images side by side, scaled up to a readable size,
framed in the colour of whoever drives, with the session status above and the key legend below.

    +-----------------------------------------------+   border: the driver's colour
    | [PERSON] PERSON DRIVING  episode 3  00:12 ... |   status band: badge, headline, message
    | +-----------+ +-----------+                   |
    | |  front    | |  wrist    |        3          |   scene: cameras, the countdown over them,
    |== PAUSED: the robot holds (a simulation ...) =|   or a PAUSED banner along their bottom edge
    | +-----------+ +-----------+                   |
    | space take over/hand back  arrows x/y ...     |   legend band
    +-----------------------------------------------+
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from robot_rl.teleop.session_status import SessionStatus

SCENE_HEIGHT = 320
"""Height every camera image is scaled to: a 64-pixel policy image is unreadable at its own size."""
MIN_WIDTH = 640
"""The text bands need this much width even for one small camera."""
BORDER = 8
GAP = 4
PAD = 8
TEXT_SIZE = 16
BIG_TEXT_SIZE = 96
BANNER_TEXT_SIZE = 24
BANNER_FILL = (20, 20, 20)

DRIVER_COLOURS: dict[str, tuple[int, int, int]] = {
    "person": (255, 140, 0),  # orange: a person's commands reach the robot
    "policy": (40, 120, 255),  # blue
    "holding": (150, 150, 150),  # grey: nobody drives, the robot holds still
}
NO_STATUS_COLOUR = (70, 70, 70)
"""Border before the first session status arrives."""
BACKGROUND = (24, 24, 24)
TEXT = (235, 235, 235)
MESSAGE_TEXT = (255, 220, 120)
MAX_CAMERAS = 3


@lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)


def driver_colour(status: SessionStatus | None) -> tuple[int, int, int]:
    return NO_STATUS_COLOUR if status is None else DRIVER_COLOURS[status.driver]


def _scaled(image: np.ndarray, height: int) -> Image.Image:
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or image.shape[0] == 0 or image.shape[1] == 0:
        raise ValueError(f"camera image must be uint8 HxWx3 (rgb8), got {image.dtype} {image.shape}")
    picture = Image.fromarray(np.ascontiguousarray(image))
    width = max(1, round(image.shape[1] * height / image.shape[0]))
    # Nearest keeps a small policy image's pixels crisp when blown up; bilinear is smoother otherwise.
    resample = Image.Resampling.NEAREST if height >= 2 * image.shape[0] else Image.Resampling.BILINEAR
    return picture.resize((width, height), resample)


def _wrapped(draw: ImageDraw.ImageDraw, text: str, font, width: int, separator: str = " ") -> list[str]:
    """`text` broken at `separator`s into lines no wider than `width` pixels (a longer piece stays whole)."""
    lines: list[str] = []
    for piece in text.split(separator):
        if lines and draw.textlength(f"{lines[-1]}{separator}{piece}", font=font) <= width:
            lines[-1] = f"{lines[-1]}{separator}{piece}"
        elif piece.strip() or not lines:
            lines.append(piece.strip())
    return lines


def _line_height(font) -> int:
    top, bottom = font.getbbox("Ag")[1::2]
    return bottom - top + 4


def _status_lines(status: SessionStatus | None) -> tuple[str, str, str]:
    """(badge, headline, message)."""
    if status is None:
        return "NO STATUS", "no session status yet (session/status)", ""
    return status.driver.upper(), status.headline(), status.message


def _big_text(status: SessionStatus | None) -> str:
    if status is None or status.phase not in ("countdown", "review"):
        return ""
    return str(max(0, math.ceil(status.countdown_s)))


def _paused_banner(draw: ImageDraw.ImageDraw, left: int, right: int, bottom: int) -> None:
    """PAUSED along the bottom edge of the scene, so the person still sees the pictures they paused on."""
    font = _font(BANNER_TEXT_SIZE)
    height = _line_height(font) + PAD
    draw.rectangle((left, bottom - height, right, bottom), fill=BANNER_FILL)
    draw.text(((left + right) // 2, bottom - height // 2), "PAUSED: the robot holds (a simulation freezes)",
              font=font, fill=(255, 255, 255), anchor="mm")


def compose_frame(images: Mapping[str, np.ndarray], status: SessionStatus | None, legend: str,
                  waiting_for: Sequence[str] = ()) -> np.ndarray:
    """The view as uint8 HxWx3: `images` (camera name -> rgb8 image of any size, at most
    MAX_CAMERAS) each scaled to SCENE_HEIGHT and tiled left to right in the mapping's order, the
    status above them, `legend` below, a border in the driver's colour, the countdown's seconds over the
    scene and a PAUSED banner along its bottom edge. Without images the scene says it waits for the topics in
    `waiting_for`."""
    if len(images) > MAX_CAMERAS:
        raise ValueError(f"the view tiles at most {MAX_CAMERAS} cameras, got {len(images)}: {sorted(images)}")
    tiles = [(name, _scaled(image, SCENE_HEIGHT)) for name, image in images.items()]
    scene_width = sum(tile.width for _, tile in tiles) + GAP * max(0, len(tiles) - 1)
    inner_width = max(MIN_WIDTH, scene_width)
    font, big_font = _font(TEXT_SIZE), _font(BIG_TEXT_SIZE)
    line = _line_height(font)
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))

    badge, headline, message = _status_lines(status)
    badge_width = int(measure.textlength(badge, font=font)) + 2 * PAD
    top_lines = _wrapped(measure, headline, font, inner_width - badge_width - 3 * PAD)
    message_lines = _wrapped(measure, message, font, inner_width - 2 * PAD) if message else []
    # the legends separate keys by two spaces: a line never parts a key from what it does
    legend_lines = _wrapped(measure, legend, font, inner_width - 2 * PAD, "  ") if legend else []
    top_height = PAD + line * (len(top_lines) + len(message_lines)) + PAD
    bottom_height = PAD + line * len(legend_lines) + PAD if legend_lines else 0

    width = inner_width + 2 * BORDER
    height = BORDER + top_height + SCENE_HEIGHT + bottom_height + BORDER
    colour = driver_colour(status)
    frame = Image.new("RGB", (width, height), colour)
    draw = ImageDraw.Draw(frame)
    draw.rectangle((BORDER, BORDER, width - BORDER - 1, height - BORDER - 1), fill=BACKGROUND)

    # status band: the badge in the driver's colour, the headline beside it, the message under them
    x, y = BORDER + PAD, BORDER + PAD
    draw.rectangle((x, y - 2, x + badge_width, y + line - 2), fill=colour)
    draw.text((x + PAD, y), badge, font=font, fill=(0, 0, 0))
    for i, text in enumerate(top_lines):
        draw.text((x + badge_width + PAD, y + i * line), text, font=font, fill=TEXT)
    for i, text in enumerate(message_lines):
        draw.text((x, y + (len(top_lines) + i) * line), text, font=font, fill=MESSAGE_TEXT)

    # scene
    scene_top = BORDER + top_height
    if tiles:
        x = BORDER + (inner_width - scene_width) // 2
        for name, tile in tiles:
            frame.paste(tile, (x, scene_top))
            draw.text((x + 4, scene_top + 2), name, font=font, fill=TEXT, stroke_width=2, stroke_fill=(0, 0, 0))
            x += tile.width + GAP
    else:
        topics = ", ".join(waiting_for) or "(no camera topics)"
        for i, text in enumerate(_wrapped(measure, f"waiting for camera images on {topics}", font,
                                          inner_width - 4 * PAD)):
            draw.text((BORDER + 2 * PAD, scene_top + SCENE_HEIGHT // 2 - line + i * line), text, font=font,
                      fill=TEXT)

    if status is not None and status.phase == "paused":
        _paused_banner(draw, BORDER, BORDER + inner_width - 1, scene_top + SCENE_HEIGHT - 1)
    big = _big_text(status)
    if big:
        centre = (BORDER + inner_width // 2, scene_top + SCENE_HEIGHT // 2)
        draw.text(centre, big, font=big_font, fill=(255, 255, 255), anchor="mm", stroke_width=4,
                  stroke_fill=(0, 0, 0))

    # legend band
    y = scene_top + SCENE_HEIGHT + PAD
    for i, text in enumerate(legend_lines):
        draw.text((BORDER + PAD, y + i * line), text, font=font, fill=TEXT)
    return np.asarray(frame)
