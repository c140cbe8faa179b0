"""The actor<->learner protocol, free of ROS (message conversion is robot_rl/ros/messages.py).

Everything on `rl/transitions`, `rl/acks` and `rl/policy` is one binary format: a codec payload
(codec.py: magic, version, CRC-32, a safetensors body whose header names the payload's kind and
meta; version 2 appends an HMAC-SHA256 keyed by the run's secret, secret.py). kinds.py lists the
kinds and what each carries; layout.py is the transition layout and the checks a batch passes
before it is stored; ppo_policy.py carries PPO's deployable policy as one kind. Delivery is at least
once from the actor (outbox.py: kept and resent until acknowledged) and stored exactly once by the
learner (sequences.py: duplicates and replays recognised per actor), which appends every accepted
payload to its journal (journal.py) before acknowledging it.
"""
