"""Hardware-facing logic without ROS that every robot shares: the safety gate of every robot node (`safety`),
the hardware YAML lookup (`files`) and camera sources (`cameras/`). A robot's own hardware lives in its robot
package (the arm's adapters, the quadrotor's links, the car's VESC: `robot_rl.robots.<robot>`). Their messages
live in `robot_rl.ros` (`arm_driver_io`, `camera_io`, `quad_io`, `car_io`), their nodes in `robot_rl.nodes`."""

from robot_rl.hardware.safety import Rejected, SafetyConfig, SafetyGate, StopReason, clamp_box, limit_step

__all__ = ["Rejected", "SafetyConfig", "SafetyGate", "StopReason", "clamp_box", "limit_step"]
