"""Hardware-facing logic without ROS: the safety gate shared by every robot node and the arm
command adapters. The rclpy side lives in `robot_rl.ros.hardware_node` and `robot_rl.nodes`."""

from robot_rl.hardware.safety import Rejected, SafetyConfig, SafetyGate, StopReason, clamp_box, limit_step

__all__ = ["Rejected", "SafetyConfig", "SafetyGate", "StopReason", "clamp_box", "limit_step"]
