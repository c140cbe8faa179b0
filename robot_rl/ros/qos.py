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

__all__ = [
    "COMMAND",
    "EVENTS",
    "FASTDDS_SHM_SEGMENT_BYTES",
    "LATCHED",
    "POLICY",
    "SENSOR",
    "TRANSITIONS",
    "fastdds_profile_xml",
    "write_fastdds_profile",
]

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

#: Command subscribers on robot nodes: matches COMMAND publishers, but a few deep so a burst
#: of commands (or malformed ones) is seen, validated and counted rather than overwritten unread.
COMMAND_INPUT = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=10,
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


# --------------------------------------------------------------------------
# Fast DDS transport profile for large payloads
# --------------------------------------------------------------------------

#: Shared-memory segment size for the large-payload profile. Must hold every
#: un-acknowledged sample a participant has in flight (e.g. a 5 MB weights
#: sample plus a window of ~3 MB transition batches). /dev/shm pages are only
#: committed when touched.
FASTDDS_SHM_SEGMENT_BYTES = 64 * 1024 * 1024

_FASTDDS_PROFILE_TEMPLATE = """<?xml version="1.0" encoding="UTF-8" ?>
<!-- robot_rl: Fast DDS participant profile for multi-MB payloads on one machine.
     Load with FASTDDS_DEFAULT_PROFILES_FILE=<this file>. It adds only a large shared-memory
     transport; rmw_fastrtps appends its own (localhost) UDP transport after it. For actors and
     learners on different machines, use a profile of your own instead. -->
<dds xmlns="http://www.eprosima.com">
  <profiles>
    <transport_descriptors>
      <transport_descriptor>
        <transport_id>robot_rl_shm</transport_id>
        <type>SHM</type>
        <segment_size>{segment_size}</segment_size>
      </transport_descriptor>
    </transport_descriptors>
    <participant profile_name="robot_rl_large_payloads" is_default_profile="true">
      <rtps>
        <userTransports>
          <transport_id>robot_rl_shm</transport_id>
        </userTransports>
        <useBuiltinTransports>false</useBuiltinTransports>
      </rtps>
    </participant>
  </profiles>
</dds>
"""


def fastdds_profile_xml(segment_size: int = FASTDDS_SHM_SEGMENT_BYTES) -> str:
    """Fast DDS XML profile with a large shared-memory segment.

    Why: with ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` (or
    ``ROS_LOCALHOST_ONLY=1``) rmw_fastrtps disables Fast DDS builtin
    transports and installs its own SHM (default 512 KiB segment) + UDP
    transports, so ``FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA`` is silently
    ignored. A multi-MB sample then overflows the tiny SHM segment, fragments
    are dropped and only recovered through NACK/heartbeat repair (~50-80 ms
    for 5 MB instead of ~10-15 ms). rmw_fastrtps *appends* its transports to
    those of the default XML profile, so this larger SHM transport is used
    first. Export ``FASTDDS_DEFAULT_PROFILES_FILE`` pointing at a file with
    this content for every robot_rl process (see :func:`write_fastdds_profile`).
    """
    if int(segment_size) <= 0:
        raise ValueError("segment_size must be positive")
    return _FASTDDS_PROFILE_TEMPLATE.format(segment_size=int(segment_size))


def write_fastdds_profile(path, segment_size: int = FASTDDS_SHM_SEGMENT_BYTES):
    """Write :func:`fastdds_profile_xml` to ``path`` and return it as a Path."""
    from pathlib import Path

    p = Path(path)
    p.write_text(fastdds_profile_xml(segment_size), encoding="utf-8")
    return p
