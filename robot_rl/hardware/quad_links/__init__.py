"""Moved to `robot_rl.robots.quad.links`; this path and its modules work, with a DeprecationWarning, until 0.2.0."""

import warnings

warnings.warn("robot_rl.hardware.quad_links moved to robot_rl.robots.quad.links; the old path is removed in 0.2.0",
              DeprecationWarning, stacklevel=2)
