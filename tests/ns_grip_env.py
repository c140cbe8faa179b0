"""Registers DictGrip (tests/dict_grip_env.py) under the namespace "ns_grip_env" when imported, as suites such as
gym-hil register "gym_hil/...": "ns_grip_env/DictGrip-v0" resolves once the module named like the namespace is
imported (robot_rl.envs.adapter.import_env_namespace does that). PYTHONPATH=tests."""

import gymnasium as gym

gym.register("ns_grip_env/DictGrip-v0", entry_point="dict_grip_env:DictGrip")
