"""robot_rl: real-world robot reinforcement learning on ROS 2."""
__version__ = "0.1.0"
