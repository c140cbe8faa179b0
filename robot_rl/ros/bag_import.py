"""Episode datasets from ROS 2 bags (MCAP): `robot-rl dataset import run.mcap`, a graph's
`--set learner.demos=run.mcap` and `robot-rl train --env ID --demos run.mcap`.

A bag of a session holds what the task's actor read and sent. Needed: the actor's state topics and the task's
cameras (the observations) and its commands (the actions); the robot's `topic_decoders` (robots/registry.py)
say which they are and how they decode. Optional: the actor's step log `episode/step` (ros/step_log.py: which
observations were steps, who drove each, the outcome and label each was recorded with, where episodes end and
which a recording threw away), and `episode/event` (where episodes start).

The pairing is exact, not nearest in time: a step's observation is the set of messages stamped with the step's
stamp (the synchronized set the actor acted on), its action the command stamped with it (the actor stamps each
command with the observation it answers), and an unstamped command that goes with it (the arm's gripper) is the
newest one published before it.

Without the step log every commanded observation is a step, stored as policy-driven and unlabelled, with the
task's own reward, and episodes split where `episode/event` starts them; that is warned about. A needed topic
missing is refused in one line naming it; an episode not all of whose messages are in the bag (the recording
started late or stopped early, a best-effort sensor message was lost) is left out with a warning; a damaged or
truncated file is refused naming what is broken.
"""

from __future__ import annotations

import bisect
import contextlib
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from robot_rl.data.episodes import EpisodeDataset, EpisodeSchema, EpisodeWriter
from robot_rl.robots import registry
from robot_rl.ros.step_log import STEP_TOPIC, StepOutcome, parse_step_msg
from robot_rl.tasks import ActionHistory, TaskSpec, dataset_task_config, get_task, task_factories, task_observation

MCAP_MAGIC = b"\x89MCAP0\r\n"
EPISODE_EVENTS = "episode/event"


class BagError(ValueError):
    """A bag that cannot become episodes: the message names the file and what is wrong."""


def is_bag(path: str | Path) -> bool:
    """A path that names an MCAP bag (by its suffix, as `dataset import` chooses the format)."""
    return Path(path).suffix.lower() == ".mcap"


def _warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


# ---- reading --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One message of a bag."""

    topic: str
    publish_ns: int
    log_ns: int
    msg: Any


class Bag:
    """The topics and messages of an MCAP file (ROS 2 profile, CDR), decoded without ROS (mcap_ros2)."""

    def __init__(self, path: str | Path):
        from mcap.reader import make_reader

        self.path = Path(path)
        if not self.path.is_file():
            raise BagError(f"no bag at {self.path}")
        with open(self.path, "rb") as f:
            head = f.read(len(MCAP_MAGIC))
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - len(MCAP_MAGIC)))
            tail = f.read()
        if head != MCAP_MAGIC:
            raise BagError(f"{self.path} is not an MCAP file (it does not begin with the MCAP magic bytes)")
        if tail != MCAP_MAGIC or size < 2 * len(MCAP_MAGIC):
            raise BagError(f"{self.path} is truncated: it does not end with the MCAP magic bytes (a recording that "
                           "did not finish?)")
        self._file = open(self.path, "rb")
        self._reader = make_reader(self._file, validate_crcs=True)
        self.topics: dict[str, str] = {}
        """Topic -> message type ("sensor_msgs/msg/Image")."""
        with self._damage("its summary"):
            summary = self._reader.get_summary()
            if summary is not None:
                self.topics = {channel.topic: summary.schemas[channel.schema_id].name if channel.schema_id else ""
                               for channel in summary.channels.values()}
            else:  # no summary section: the channels as the messages name them
                self.topics = {channel.topic: schema.name if schema is not None else ""
                               for schema, channel, _ in self._reader.iter_messages()}

    @contextlib.contextmanager
    def _damage(self, what: str) -> Iterator[None]:
        try:
            yield
        except BagError:
            raise
        except Exception as exc:  # the reader's errors (McapError, CRC, decompression, EOF) all mean damage
            raise BagError(f"{self.path} is damaged: reading {what} failed: {type(exc).__name__}: {exc}") from None

    def messages(self, topics: list[str]) -> Iterator[Record]:
        """The messages of `topics`, decoded, in the order they were logged."""
        from mcap_ros2.decoder import DecoderFactory

        factory = DecoderFactory()
        decoders: dict[int, Callable[[bytes], Any]] = {}
        with self._damage(f"the messages of {', '.join(topics)}"):
            for schema, channel, message in self._reader.iter_messages(topics=topics, log_time_order=True):
                if channel.id not in decoders:
                    decoder = factory.decoder_for(channel.message_encoding, schema)
                    if decoder is None:
                        raise BagError(f"{self.path}: {channel.topic} is not CDR with a ros2msg schema "
                                       f"({channel.message_encoding!r}); it cannot be decoded")
                    decoders[channel.id] = decoder
                try:
                    msg = decoders[channel.id](message.data)
                except Exception as exc:  # noqa: BLE001 - any decoding failure is a damaged message
                    raise BagError(f"{self.path} is damaged: message {message.sequence} on {channel.topic} (logged "
                                   f"at {message.log_time} ns) does not decode as {schema.name}: {exc}") from None
                yield Record(channel.topic, message.publish_time, message.log_time, msg)

    def close(self) -> None:
        self._file.close()


def _time_ns(stamp: Any) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def _stamp_ns(msg: Any) -> int:
    return _time_ns(msg.header.stamp)


# ---- what the task's actor reads and sends ----------------------------------------------------------


@dataclass
class ActorTopics:
    """The bag's names of the topics a task's actor steps on and commands, and their decoder."""

    decoder: Any
    state: dict[str, str]
    """Bag topic -> the actor's name of it (the decoder's `state(msgs)` keys)."""
    cameras: dict[str, str]
    """Bag topic -> camera."""
    commands: dict[str, str]
    """Bag topic -> the actor's name; the first is stamped with the observation it answers."""
    types: dict[str, str]
    """Bag topic -> the message type it must have."""


def _bag_name(topic: str, namespace: str) -> str:
    return "/" + "/".join(part for part in (*namespace.split("/"), *topic.split("/")) if part)


def _message_type(cls: type) -> str:
    module = cls.__module__.split(".")
    return f"{module[0]}/msg/{cls.__name__}"


def actor_topics(task: TaskSpec, settings: Mapping[str, Any] | None = None, namespace: str = "") -> ActorTopics:
    """The topics `task`'s actor reads and sends, named as a bag under `namespace` holds them, with the decoder its
    robot declares built with the actor's parameters (`settings`, `{actor node}.{parameter}` -> value, override
    their defaults; a name the decoder does not take is refused)."""
    from robot_rl.config_fields import ParameterError, closest_name
    from robot_rl.ros.node_utils import check_bounds, coerce_value

    decoder_class = registry.topic_decoder(task.actor_node)
    if decoder_class is None:
        raise BagError(f"task {task.name}: no robot says how the {task.actor_node} node's topics decode "
                       "(Robot.topic_decoders), so its bags cannot be read")
    params = {param.name: param for param in decoder_class.params}
    values = {name: param.default for name, param in params.items()}
    known = {f"{task.actor_node}.{name}": name for name in params}
    for key, value in (settings or {}).items():
        if key not in known:
            raise BagError(f"unknown setting {key!r}{closest_name(key, known)}; the {task.actor_node} node's topics "
                           f"decode with {', '.join(sorted(known)) or 'no settings'}")
        name = known[key]
        try:
            values[name] = coerce_value(params[name], value)
            check_bounds(params[name], values[name])
        except ParameterError as exc:
            raise BagError(str(exc)) from None
    decoder = decoder_class(values, task)
    topics = ActorTopics(decoder, state={}, cameras={}, commands={}, types={})
    for topic, msg_type in decoder.state_topics:
        topics.state[_bag_name(topic, namespace)] = topic
        topics.types[_bag_name(topic, namespace)] = _message_type(msg_type)
    for camera in task.cameras:
        name = _bag_name(registry.CAMERA_TOPICS[0].format(camera=camera), namespace)
        topics.cameras[name] = camera
        topics.types[name] = "sensor_msgs/msg/Image"
    for topic, msg_type in decoder.command_topics:
        topics.commands[_bag_name(topic, namespace)] = topic
        topics.types[_bag_name(topic, namespace)] = _message_type(msg_type)
    return topics


def _checked_topics(bag: Bag, topics: ActorTopics, task: TaskSpec) -> None:
    missing = [topic for topic in topics.types if topic not in bag.topics]
    if missing:
        raise BagError(f"{bag.path} has no {', '.join(missing)}: the {task.name} task's actor needs "
                       f"{'it' if len(missing) == 1 else 'them'} (record {'it' if len(missing) == 1 else 'them'} too)")
    for topic, wanted in topics.types.items():
        if bag.topics[topic] != wanted:
            raise BagError(f"{bag.path}: {topic} carries {bag.topics[topic] or 'no schema'}, not {wanted}")


# ---- which observations were steps -----------------------------------------------------------------


@dataclass
class PlannedEpisode:
    """An episode as the bag says it went: the stamps of its steps' observations and then of its final one, who
    drove each step, and each step's recorded outcome (None: not known, the task's reward and unlabelled)."""

    index: int
    stamps: list[int]
    interventions: list[bool]
    outcomes: list[Any]


def _step_log(bag: Bag, topic: str) -> list:
    entries = []
    for record in bag.messages([topic]):
        try:
            entries.append(parse_step_msg(record.msg))
        except ValueError as exc:
            raise BagError(f"{bag.path} is damaged: the {topic} message logged at {record.log_ns} ns is not a step "
                           f"log entry: {exc}") from None
    return entries


def _incomplete(steps: dict[int, Any]) -> str:
    """Why an episode's step log entries are not a whole episode ('' when they are)."""
    last = max(steps)
    if 0 not in steps:
        return "the recording began after it did"
    if len(steps) != last + 1:
        return f"{last + 1 - len(steps)} of its step log entries are missing"
    ends = [step for step, entry in steps.items() if entry.end]
    if ends != [last]:
        return "the recording stopped before it ended" if not ends else "its step log ends it twice"
    return ""


def plan_from_step_log(entries: list, bag_name: str, warn: Callable[[str], None]) -> list[PlannedEpisode]:
    """The episodes the actor recorded, as its step log says (the episodes a recording threw away are left out,
    as the session left them out)."""
    discarded = {entry.episode for entry in entries if entry.discarded}
    by_episode: dict[int, dict[int, Any]] = {}
    for entry in entries:
        if not entry.discarded:
            by_episode.setdefault(entry.episode, {}).setdefault(entry.step, entry)
    plans = []
    for index in sorted(set(by_episode) - discarded):
        why = _incomplete(by_episode[index])
        if why:
            warn(f"{bag_name}: episode {index} is not all in the bag ({why}): left out")
            continue
        log = [by_episode[index][step] for step in range(len(by_episode[index]))]
        # A step is a transition the actor recorded: the observation after it carries the recorded outcome.
        taken = [i for i in range(len(log) - 1) if log[i + 1].outcome is not None]
        if taken:
            plans.append(PlannedEpisode(index, [log[i].stamp_ns for i in taken] + [log[-1].stamp_ns],
                                        [log[i].intervention for i in taken], [log[i + 1].outcome for i in taken]))
    return plans


def plan_from_commands(command_stamps: list[int], start_stamps: list[int]) -> list[PlannedEpisode]:
    """Without a step log: every commanded observation is a step, an episode begins at each start (none: one
    episode), and its last commanded observation is its final one."""
    groups: dict[int, list[int]] = {}
    for stamp in sorted(set(command_stamps)):
        groups.setdefault(bisect.bisect_right(start_stamps, stamp), []).append(stamp)
    episodes = [group for group in groups.values() if len(group) > 1]
    return [PlannedEpisode(index, group, [False] * (len(group) - 1), [None] * (len(group) - 1))
            for index, group in enumerate(episodes)]


# ---- observations and actions ------------------------------------------------------------------------


class Commands:
    """The actor's commands in a bag: the stamped one by the stamp of the observation it answers, each unstamped
    one (sent just before it) by when it was published."""

    def __init__(self, bag: Bag, topics: ActorTopics):
        self.topics = topics
        stamped, *others = topics.commands
        self.stamped_topic = stamped
        self.stamped: dict[int, Record] = {}
        self.others: dict[str, tuple[list[int], list[Any]]] = {topic: ([], []) for topic in others}
        for record in bag.messages(list(topics.commands)):
            if record.topic == stamped:
                self.stamped.setdefault(_stamp_ns(record.msg), record)  # a resend repeats the first
            else:
                times, msgs = self.others[record.topic]
                position = bisect.bisect_right(times, record.publish_ns)
                times.insert(position, record.publish_ns)
                msgs.insert(position, record.msg)

    def action(self, stamp_ns: int) -> np.ndarray | str:
        """The action the actor sent for the observation stamped `stamp_ns`, or what the bag lacks for it."""
        record = self.stamped.get(stamp_ns)
        if record is None:
            return f"no {self.stamped_topic} stamped {stamp_ns} ns"
        msgs = {self.topics.commands[self.stamped_topic]: record.msg}
        for topic, (times, others) in self.others.items():
            position = bisect.bisect_right(times, record.publish_ns)
            if position == 0:
                return f"no {topic} published before the {self.stamped_topic} stamped {stamp_ns} ns"
            msgs[self.topics.commands[topic]] = others[position - 1]
        return self.topics.decoder.action(msgs)


def observation_messages(bag: Bag, topics: ActorTopics, stamps: set[int]) -> dict[int, dict[str, Any]]:
    """Stamp -> {bag topic: the first message stamped so} of the state topics and cameras, for `stamps`."""
    sets: dict[int, dict[str, Any]] = {}
    for record in bag.messages([*topics.state, *topics.cameras]):
        stamp = _stamp_ns(record.msg)
        if stamp in stamps:
            sets.setdefault(stamp, {}).setdefault(record.topic, record.msg)
    return sets


def _state(msgs: dict[str, Any], topics: ActorTopics, stamp: int, bag_name: str) -> dict[str, np.ndarray] | str:
    """The task state the actor rebuilt from the messages stamped `stamp` (as its node does), or what is missing."""
    from robot_rl.ros.messages import msg_to_image

    missing = [topic for topic in (*topics.state, *topics.cameras) if topic not in msgs]
    if missing:
        return f"no {missing[0]} stamped {stamp} ns"
    try:
        state = topics.decoder.state({name: msgs[topic] for topic, name in topics.state.items()})
        for topic, camera in topics.cameras.items():
            state[camera] = msg_to_image(msgs[topic], copy=True)
    except ValueError as exc:
        raise BagError(f"{bag_name} is damaged: the observation stamped {stamp} ns is malformed: {exc}") from None
    return state


# ---- the dataset --------------------------------------------------------------------------------------


def _task(bag: Bag, entries: list, task: TaskSpec | None, env_id: str | None) -> TaskSpec:
    """The bag's task: the one its step log names, checked against what the caller expects."""
    named = sorted({entry.task for entry in entries})
    if len(named) > 1:
        raise BagError(f"{bag.path}: its step log names the tasks {', '.join(named)}; import one session's bag")
    if task is not None:
        if named and named[0] != task.name:
            raise BagError(f"{bag.path} was recorded with task {named[0]}, not {task.name}")
    elif named:
        try:
            task = get_task(named[0])
        except ValueError as exc:
            raise BagError(f"{bag.path} was recorded with a task this robot_rl cannot read: {exc}") from None
    elif env_id is not None:
        matching = [name for name, factory in task_factories().items() if factory().env_id == env_id]
        if len(matching) != 1:
            raise BagError(f"{bag.path} has no step log ({STEP_TOPIC}) naming its task, and {len(matching)} tasks "
                           f"simulate {env_id}{': ' + ', '.join(matching) if matching else ''}")
        task = get_task(matching[0])
    else:
        raise BagError(f"{bag.path} has no step log ({STEP_TOPIC}) naming its task: name it (--task)")
    if env_id is not None and task.env_id != env_id:
        raise BagError(f"{bag.path} holds episodes of task {task.name}, whose environment is {task.env_id}, not "
                       f"{env_id}")
    return task


def _write_episode(writer: EpisodeWriter, plan: PlannedEpisode, sets: dict[int, dict[str, Any]], commands: Commands,
                   topics: ActorTopics, task: TaskSpec, bag_name: str) -> str:
    """Writes one planned episode; returns '' or, writing nothing, what the bag lacks for it."""
    states = []
    for stamp in plan.stamps:
        state = _state(sets.get(stamp, {}), topics, stamp, bag_name)
        if isinstance(state, str):
            return state
        states.append(state)
    try:
        actions = [commands.action(stamp) for stamp in plan.stamps[:-1]]
        lacking = next((action for action in actions if isinstance(action, str)), "")
        if lacking:
            return lacking
        observations, sent = [], ActionHistory.of(task)  # the commands the actor had sent, as it observed them
        for k, state in enumerate(states):
            obs = task_observation(task, sent.joined(state))
            observations.append(obs if isinstance(obs, dict) else {"state": obs})
            if k < len(actions):
                sent.push(actions[k])
        for k, action in enumerate(actions):
            outcome = plan.outcomes[k] or StepOutcome(float(task.reward(states[k + 1])), False, False, None)
            writer.add_step(observations[k], action, outcome.reward, outcome.terminated, outcome.truncated,
                            plan.interventions[k], outcome.success_label, plan.stamps[k] * 1e-9)
        writer.end_episode(observations[-1], bool(task.success(states[-1])))
    except ValueError as exc:  # a malformed command, or values the task or the dataset refuse
        writer.discard_episode()
        raise BagError(f"{bag_name}: episode {plan.index} cannot be stored as task {task.name}'s: {exc}") from None
    return ""


def import_bag(path: str | Path, out: str | Path, task: TaskSpec | None = None,
               settings: Mapping[str, Any] | None = None, namespace: str = "", env_id: str | None = None,
               warn: Callable[[str], None] = _warn_stderr) -> EpisodeDataset:
    """Writes the episodes of the bag at `path` as an episode dataset at `out` (through EpisodeWriter, so it is
    checked and checksummed like any recording) and returns it opened. `task`: the task expected (default: the one
    its step log names); `env_id`: the simulation whose task it must be; `settings`: the actor's parameters its
    commands were made with, where not the defaults; `namespace`: the robot's, in a fleet. BagError for a bag that
    cannot be imported."""
    bag = Bag(path)
    try:
        log_topic = _bag_name(STEP_TOPIC, namespace)
        entries = _step_log(bag, log_topic) if log_topic in bag.topics else []
        task = _task(bag, entries, task, env_id)
        topics = actor_topics(task, settings, namespace)
        _checked_topics(bag, topics, task)
        commands = Commands(bag, topics)
        if log_topic in bag.topics:
            plans = plan_from_step_log(entries, bag.path.name, warn)
        else:
            events = _bag_name(EPISODE_EVENTS, namespace)
            starts = sorted(_time_ns(r.msg.stamp) for r in bag.messages([events]) if r.msg.frame_id == "start") \
                if events in bag.topics else []
            warn(f"{bag.path.name} has no {log_topic} (the actor's step log): every commanded observation is taken "
                 f"as a step, policy-driven and unlabelled, with the task's reward"
                 + (f"; episodes start where {events} says" if starts else f"; one episode ({events} is missing too)"))
            plans = plan_from_commands(list(commands.stamped), starts)
        if not plans:
            raise BagError(f"{bag.path} holds no complete episode of task {task.name}")
        sets = observation_messages(bag, topics, {stamp for plan in plans for stamp in plan.stamps})
        writer = EpisodeWriter(out, EpisodeSchema(task.frame_shapes, task.obs_dim, task.action_dim),
                               dataset_task_config(task, "bag"))
        for plan in plans:
            lacking = _write_episode(writer, plan, sets, commands, topics, task, bag.path.name)
            if lacking:
                warn(f"{bag.path.name}: episode {plan.index} is not all in the bag ({lacking}): left out")
        if writer.num_episodes == 0:
            raise BagError(f"{bag.path} holds no complete episode of task {task.name}")
    finally:
        bag.close()
    return EpisodeDataset(out)


@contextlib.contextmanager
def imported_bag(path: str | Path, task: TaskSpec | None = None, env_id: str | None = None,
                 warn: Callable[[str], None] = _warn_stderr) -> Iterator[Path]:
    """The bag's episodes as a dataset in a temporary directory, for the while (demonstrations from a bag)."""
    with tempfile.TemporaryDirectory(prefix="robot_rl-bag-") as tmp:
        target = Path(tmp) / "episodes.zarr"
        import_bag(path, target, task=task, env_id=env_id, warn=warn)
        yield target
