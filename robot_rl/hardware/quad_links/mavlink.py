"""Moved to `robot_rl.robots.quad.links.mavlink`; this path works, with a DeprecationWarning, until 0.2.0."""

from robot_rl import _moved

_moved(__name__, "robot_rl.robots.quad.links.mavlink")
