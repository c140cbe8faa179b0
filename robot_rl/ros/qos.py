"""QoS profiles, named for what they carry. Use these everywhere instead of
ad-hoc depths so publishers and subscribers always match.

These are shared module-level objects: do not mutate them; build a new
``QoSProfile`` (or ``copy.copy`` one) if a node really needs something else.

Note on TRANSITIONS: depth 1000 counts *messages*. With batched transition
messages (~3 MB for 32 transitions with two 128x128 RGB frames) a full
history is ~3 GB per endpoint, so senders should apply their own
back-pressure (acks / bounded in-flight window) rather than rely on depth.
"""

from __future__ import annotations

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
)

__all__ = ["COMMAND", "EVENTS", "LATCHED", "POLICY", "SENSOR", "TRANSITIONS"]

#: Camera / joint-state streams: newest data wins, drop rather than stall.
SENSOR = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=5,
    reliability=ReliabilityPolicy.BEST_EFFORT,
    durability=DurabilityPolicy.VOLATILE,
)

#: Actuator commands: delivered, but only the latest one matters.
COMMAND = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)

#: Actor -> learner transition batches: reliable with a deep queue.
TRANSITIONS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1000,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)

#: Learner -> actor policy weights: late joiners get the latest weights.
POLICY = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)

#: Latched state such as /estop: late joiners immediately see the last value.
LATCHED = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)

#: Episode / status events and acks: reliable, tolerant of bursts.
EVENTS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=100,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
