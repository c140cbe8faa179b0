"""Hardware-facing logic without ROS: the safety gate shared by every robot node (`safety`), the
hardware YAML lookup (`files`), the real arm's description and command adapters (`arm_config`,
`arm_adapters`), camera sources (`cameras/`) and quadrotor links (`quad_links/`); the car's VESC lives in
its robot package (`robot_rl.robots.car.hardware`). Their messages live in `robot_rl.ros` (`arm_driver_io`,
`camera_io`, `quad_io`, `car_io`), their nodes in `robot_rl.nodes`."""

from robot_rl.hardware.safety import Rejected, SafetyConfig, SafetyGate, StopReason, clamp_box, limit_step

__all__ = ["Rejected", "SafetyConfig", "SafetyGate", "StopReason", "clamp_box", "limit_step"]
