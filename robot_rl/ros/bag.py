"""Record any set of ROS 2 topics to an MCAP file (ROS 2 profile), readable by Foxglove, `ros2 bag`
and `mcap_ros2.reader.read_ros2_messages`.

    robot-rl record-bag --topics /front/color/image_raw /joint_states --out run.mcap --duration 60

Messages are stored exactly as they travelled: subscriptions are `raw=True`, so the CDR bytes go to
the file without a deserialise/serialise round trip. Each type gets a `ros2msg` schema: its .msg text
followed by the .msg text of every type it depends on, each introduced by a line of 80 '=' and
`MSG: pkg/Type` (what rosbag2 writes). The .msg files come from the installed packages' share/
directories; where a package ships none, the text is built from the generated message class (fields
only, constants are then left out, which does not affect decoding).

Topics may appear after the start: the graph is polled and each named topic is subscribed as soon as
it has a publisher, with a QoS matching its publishers (best effort if any publisher is, transient-local
durability if all are, so latched messages are recorded too). A topic with only subscribers so far
waits: its publishers' QoS is not known yet (a reliable guess misses a best-effort camera or joint
state publisher for good). Publishers that appear after the subscription are not matched again.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

__all__ = ["BagRecorder", "message_class", "message_definition", "normalize_type", "record"]

SEPARATOR = "=" * 80
SCHEMA_ENCODING = "ros2msg"
MESSAGE_ENCODING = "cdr"


# ------------------------------------------------------------------------------------------------
# message definitions
# ------------------------------------------------------------------------------------------------


def normalize_type(type_name: str) -> str:
    """"std_msgs/String", "std_msgs/msg/String" -> "std_msgs/msg/String"."""
    parts = [p for p in type_name.strip().split("/") if p]
    if len(parts) == 2:
        parts = [parts[0], "msg", parts[1]]
    if len(parts) != 3 or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) for p in parts):
        raise ValueError(f"not a ROS message type name: {type_name!r}")
    return "/".join(parts)


@functools.lru_cache(maxsize=None)
def message_class(type_name: str) -> type:
    """The generated Python class of a message type ("sensor_msgs/msg/Image")."""
    pkg, sub, name = normalize_type(type_name).split("/")
    try:
        module = importlib.import_module(f"{pkg}.{sub}")
        return getattr(module, name)
    except (ImportError, AttributeError) as exc:
        raise LookupError(f"message type {type_name} is not installed ({exc})") from exc


def _share_dirs() -> list[Path]:
    dirs = [Path(p) / "share" for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    dirs += [Path(sys.prefix) / "share", Path(sys.base_prefix) / "share"]
    return dirs


def _msg_file(type_name: str) -> Path | None:
    pkg, sub, name = type_name.split("/")
    for share in _share_dirs():
        path = share / pkg / sub / f"{name}.msg"
        if path.is_file():
            return path
    return None


def _dependencies(cls: type) -> list[str]:
    """Message types a class refers to, in field order (from the rosidl introspection SLOT_TYPES)."""
    out = []
    for slot in getattr(cls, "SLOT_TYPES", ()):
        while hasattr(slot, "value_type"):  # arrays and sequences
            slot = slot.value_type
        namespaces = getattr(slot, "namespaces", None)
        if namespaces:
            out.append("/".join([*namespaces, slot.name]))
    return out


_IDL_TO_MSG = {"boolean": "bool", "octet": "byte", "float": "float32", "double": "float64"}


def _msg_field_type(idl: str) -> str:
    """`get_fields_and_field_types()` spelling -> .msg spelling."""
    m = re.fullmatch(r"sequence<(.+?)(?:,\s*(\d+))?>", idl)
    if m:
        return _msg_field_type(m.group(1)) + (f"[<={m.group(2)}]" if m.group(2) else "[]")
    m = re.fullmatch(r"(.+)\[(\d+)\]", idl)
    if m:
        return _msg_field_type(m.group(1)) + f"[{m.group(2)}]"
    return _IDL_TO_MSG.get(idl, idl)


def _text_from_class(cls: type) -> str:
    return "".join(f"{_msg_field_type(t)} {name}\n" for name, t in cls.get_fields_and_field_types().items())


def _msg_text(type_name: str, prefer_files: bool) -> str:
    path = _msg_file(type_name) if prefer_files else None
    text = path.read_text() if path is not None else _text_from_class(message_class(type_name))
    return text if text.endswith("\n") else text + "\n"


def message_definition(type_name: str, *, prefer_files: bool = True) -> str:
    """The `ros2msg` schema text of a type: its definition, then each dependency once (depth first),
    each after a separator line and `MSG: pkg/Type`."""
    root = normalize_type(type_name)
    order: list[str] = []
    seen = {root}

    def visit(name: str) -> None:
        for dep in _dependencies(message_class(name)):
            if dep not in seen:
                seen.add(dep)
                order.append(dep)
                visit(dep)

    visit(root)
    parts = [_msg_text(root, prefer_files)]
    for dep in order:
        pkg, _, name = dep.split("/")
        parts.append(f"{SEPARATOR}\nMSG: {pkg}/{name}\n{_msg_text(dep, prefer_files)}")
    return "".join(parts)


# ------------------------------------------------------------------------------------------------
# recording
# ------------------------------------------------------------------------------------------------


@dataclass
class TopicStats:
    type_name: str
    channel_id: int
    messages: int = 0
    bytes: int = 0


@dataclass
class RecordSummary:
    path: str
    duration_s: float
    topics: dict[str, TopicStats] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    @property
    def messages(self) -> int:
        return sum(t.messages for t in self.topics.values())


def _absolute(topic: str) -> str:
    topic = topic.strip()
    return topic if topic.startswith("/") else "/" + topic


def _matching_qos(publishers: list[Any]):
    """A subscription's QoS that every one of `publishers` (rclpy TopicEndpointInfo) can deliver to."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    reliable = all(p.qos_profile.reliability == ReliabilityPolicy.RELIABLE for p in publishers)
    latched = all(p.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for p in publishers)
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100,
                      reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)


class BagRecorder:
    """Subscribes (raw) to the named topics on `node` as they appear and writes them to `path`."""

    def __init__(self, node: Any, path: str | os.PathLike, topics: Iterable[str], *, compression: str = "zstd",
                 chunk_size: int = 4 * 1024 * 1024):
        from mcap.writer import CompressionType, Writer

        kinds = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}
        if compression not in kinds:
            raise ValueError(f"compression must be one of {sorted(kinds)}, not {compression!r}")
        self.node = node
        self.path = str(path)
        self.wanted = list(dict.fromkeys(_absolute(t) for t in topics))
        if not self.wanted:
            raise ValueError("no topics to record")
        self.topics: dict[str, TopicStats] = {}
        self._schemas: dict[str, int] = {}
        self._lock = threading.Lock()
        self._file = open(self.path, "wb")
        self._writer = Writer(self._file, chunk_size=chunk_size, compression=kinds[compression])
        from robot_rl import __version__

        self._writer.start(profile="ros2", library=f"robot_rl/{__version__} record-bag")
        self._closed = False
        self.started = time.monotonic()

    def poll(self) -> list[str]:
        """Subscribes to the named topics that appeared since the last call; returns them."""
        new = []
        graph = dict(self.node.get_topic_names_and_types())
        for topic in self.wanted:
            if topic in self.topics or topic not in graph or not graph[topic]:
                continue
            publishers = self.node.get_publishers_info_by_topic(topic)
            if not publishers:  # only subscribers so far: the QoS to match is not known yet
                continue
            type_name = graph[topic][0]
            try:
                msg_cls = message_class(type_name)
                schema_id = self._schema(type_name)
            except (LookupError, ValueError, OSError) as exc:
                self.node.get_logger().error(f"cannot record {topic} ({type_name}): {exc}",
                                             throttle_duration_sec=10.0)
                continue
            if len(graph[topic]) > 1:
                self.node.get_logger().warning(f"{topic} carries several types {graph[topic]}; recording {type_name}")
            channel_id = self._writer.register_channel(topic=topic, message_encoding=MESSAGE_ENCODING,
                                                       schema_id=schema_id)
            self.topics[topic] = TopicStats(type_name, channel_id)
            self.node.create_subscription(msg_cls, topic, functools.partial(self._on_message, topic),
                                          _matching_qos(publishers), raw=True)
            new.append(topic)
        return new

    def _schema(self, type_name: str) -> int:
        if type_name not in self._schemas:
            text = message_definition(type_name)
            self._schemas[type_name] = self._writer.register_schema(name=normalize_type(type_name),
                                                                    encoding=SCHEMA_ENCODING, data=text.encode())
        return self._schemas[type_name]

    def _on_message(self, topic: str, data: bytes, info: Any) -> None:
        # two arguments: rclpy then passes the message info (source timestamp) along
        receive_ns = time.time_ns()
        publish_ns = int((info or {}).get("source_timestamp", 0) or 0)
        stats = self.topics[topic]
        with self._lock:
            if self._closed:
                return
            self._writer.add_message(channel_id=stats.channel_id, log_time=receive_ns, data=bytes(data),
                                     publish_time=publish_ns or receive_ns, sequence=stats.messages)
            stats.messages += 1
            stats.bytes += len(data)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._writer.finish()
            self._file.close()

    @property
    def missing(self) -> list[str]:
        return [t for t in self.wanted if t not in self.topics]


def record(topics: Iterable[str], out: str | os.PathLike, *, duration: float | None = None,
           compression: str = "zstd", overwrite: bool = False, poll_period_s: float = 0.5,
           stop: threading.Event | None = None, log=print) -> RecordSummary:
    """Records until `duration` seconds have passed, `stop` is set, or SIGINT/SIGTERM (Ctrl-C) arrives
    (handled when called from the main thread); the file is always finished properly."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from robot_rl.ros.node_utils import ResilientExecutor

    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; remove it or pass --force")
    if duration is not None and duration <= 0:
        raise ValueError(f"duration must be positive, got {duration}")
    out.parent.mkdir(parents=True, exist_ok=True)
    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    context = rclpy.Context()
    rclpy.init(args=[], context=context, signal_handler_options=SignalHandlerOptions.NO)
    node = recorder = None
    try:
        node = rclpy.create_node("robot_rl_record_bag", context=context, start_parameter_services=False)
        executor = ResilientExecutor(context=context)
        executor.add_node(node)
        recorder = BagRecorder(node, out, topics, compression=compression)
        log(f"record-bag: recording {', '.join(recorder.wanted)} to {out}"
            + (f" for {duration:g} s" if duration else " until Ctrl-C"))
        start = time.monotonic()
        next_poll = 0.0
        while not stop.is_set():
            now = time.monotonic()
            if duration is not None and now - start >= duration:
                break
            if now >= next_poll and recorder.missing:
                for topic in recorder.poll():
                    log(f"record-bag: subscribed to {topic} ({recorder.topics[topic].type_name})")
                next_poll = now + poll_period_s
            executor.spin_once(timeout_sec=0.05)
        elapsed = time.monotonic() - start
    finally:
        if recorder is not None:
            recorder.close()
        if node is not None:
            node.destroy_node()
        if context.ok():
            rclpy.shutdown(context=context)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    summary = RecordSummary(str(out), elapsed, dict(recorder.topics), recorder.missing)
    for topic, stats in summary.topics.items():
        log(f"record-bag: {topic}: {stats.messages} messages, {stats.bytes / 1e6:.1f} MB")
    if summary.missing:
        log(f"record-bag: never saw {', '.join(summary.missing)}")
    return summary
