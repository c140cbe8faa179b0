"""Learned rewards: `robot_rl.rewards.success` holds the SERL/HIL-SERL image success classifier."""
