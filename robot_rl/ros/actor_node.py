"""The actor node of an off-policy task, written once for every robot whose states and commands a
`RobotActorIO` translates (`nodes/arm_actor.py`: the arm's topics, `ros/arm_io.py`; `nodes/env_actor.py`:
any Gymnasium environment's, `ros/env_io.py`): synchronized observations in, policy actions out,
transitions to the learner.

It acts once per new synchronized observation set (`control_mode: on_observation`, the
lockstep simulator and any robot publishing at the control rate) or on a timer at the
control rate with the freshest set (`control_mode: timer`, cameras faster than control).
Weights are decoded on a worker thread and swapped in between steps. Each transition batch is
written to the outbox directory (`<run_dir>/outbox-<actor_id>/`) before it is sent and resent
until the learner acknowledges it; with the step counters stored beside it, an actor killed at any
moment and started again loses no batch it made, reuses no sequence number or episode index, and
continues its step count.

A person at the teleop node takes over whenever `teleop/engaged` is true: their `teleop/cmd` and
`teleop/gripper` are executed instead of the policy's action and the transitions are flagged as
interventions (the learner stores them as demonstrations too). A command older than
`teleop_timeout_s` is stale and the policy drives again, and one given before an episode began does not act in
it (it answered the scene before the reset). `teleop/event` labels end the episode
(success, failure, reset, rerecord).

`mode: record` (what `robot-rl record` starts) is a recording session: only the person drives
(the robot holds still otherwise), nothing is learned, and episodes are appended to the zarr
dataset `record_path`; "rerecord" throws the current or just finished episode away. A finished
episode is committed when the countdown after it ends (the next episode runs); after the last one
that countdown is a review (phase "review"): "rerecord" records it again, else the session ends.
A person's success or failure label that the task's own success check contradicts is stored as
given, with the check's verdict beside it, and warned about (log, status message).

For the person in the loop it publishes `session/status` (`robot_rl.teleop.session_status.SessionStatus`
as JSON: who drives, the episode clock, the last reward, kept and discarded episodes) at every
step and phase change; the person's view and the console show it. After each reset the robot
holds for `reset_time_s` (a countdown), and the person's pause key (teleop/event "pause") holds
it until pressed again; neither takes a step, so the episode clock stops. A simulator freezes while
the status says "paused" (`robot_rl.ros.sim_time`); a real robot holds where it is.

Act latency (observation stamp to command, on the wall clock; inside the node under simulated
time) is reported on /diagnostics as p50/p99 over the last steps, with the steps that missed their
control period counted; for a task with cameras also the frame age (the oldest camera frame's capture
stamp to the command). `timing_log` appends every step's figures to a CSV file (`TIMING_LOG_COLUMNS`).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import TwistStamped, Vector3Stamped
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Float32, Header, String
from std_srvs.srv import Trigger

from robot_rl.config_fields import config_from_params
from robot_rl.data.episodes import EpisodeSchema, EpisodeWriter
from robot_rl.ros import qos
from robot_rl.ros.act_timing import ActTiming
from robot_rl.ros.learner_link import LearnerLink
from robot_rl.ros.link_params import LINK_PARAMS
from robot_rl.ros.messages import msg_to_image, ns_to_stamp, stamp_to_ns
from robot_rl.ros.node_utils import (
    Param,
    ParameterError,
    declare_params,
    diagnostics,
    params_from_dataclass,
    reset_stamp,
    set_torch_threads,
    timer_once,
)
from robot_rl.ros.step_log import STEP_TOPIC, StepOutcome, discard_msg, step_msg
from robot_rl.ros.sync import StampSynchronizer
from robot_rl.tasks import State, TaskSpec, dataset_task_config, get_task, task_names
from robot_rl.teleop.session_status import SessionClock, SessionStatus
from robot_rl.teleop.takeover import HumanCommand
from robot_rl.training.actor import LABELS, ActorConfig, ActorCore
from robot_rl.transport import codec
from robot_rl.transport.outbox import Outbox
from robot_rl.transport.secret import run_key


class RobotActorIO(Protocol):
    """What an actor node needs to know of its robot's topics: the state it synchronizes and the commands it
    sends. Made by the node (`make(node, params, task)`) once its parameters are read."""

    state_topics: Sequence[tuple[str, type]]
    """Topics (and types) of one synchronized state, besides the task's cameras. The simulator publishes the
    first one last: its repeat with the stamp acted on means the command went missing."""

    def state(self, msgs: dict[str, Any]) -> State:
        """The task's state from one synchronized set (cameras are added by the node); ValueError if malformed."""

    def publish(self, action: np.ndarray, stamp_ns: int) -> None:
        """Sends the action (in [-1, 1]) as the robot's commands, stamped with the observation it answers."""

    def resend(self) -> None:
        """Sends the last commands again (the lockstep simulator repeated an observation)."""

    def hold(self, last_action: np.ndarray | None) -> np.ndarray:
        """The action that holds the robot still, its gripper as `last_action` left it (None: after a reset)."""

    def person_action(self, twist: np.ndarray, gripper: float) -> np.ndarray:
        """The task action a person's teleop twist (6 values in [-1, 1]) and gripper (-1 open .. 1 close) mean."""


COMMON_PARAMS = [
    Param("mode", "train", "train: the policy acts and transitions go to the learner; record: a person's "
          "episodes go to the dataset record_path.", choices=["train", "record"]),
    Param("record_path", "", "Record mode: zarr episode dataset to append to (created if absent)."),
    Param("run_dir", "runs/default", "Directory for the outbox spill and the evaluation result."),
    Param("policy_file", "", "Evaluate only this policy (a graph run's policy.policy or a learner snapshot, signed "
          "with key_file's secret): eval_episodes deterministic episodes, no training, no learner needed ('': "
          "train)."),
    *params_from_dataclass(ActorConfig),
    *LINK_PARAMS,
    Param("control_mode", "on_observation", "When to act.", choices=["on_observation", "timer"]),
    Param("obs_slop_s", 0.0, "Max stamp difference within one observation set.", 0.0, 1.0),
    Param("max_obs_age_s", 0.5, "Timer mode: observation sets older than this are not acted on.", 0.001, 10.0),
    Param("teleop_timeout_s", 0.3, "A teleop/cmd older than this is stale: the policy drives again.", 0.01, 10.0),
    Param("reset_time_s", 0.0, "Seconds the robot holds after each reset before the episode runs: a countdown for "
          "a person in the loop (0: none).", 0.0, 600.0),
    Param("reward_source", "task", "task: rewards and episode ends from the task's own functions (simulation, "
          "instrumented robots); reward_node: from the reward node's `reward` and `reward/done` (learned "
          "progress rewards from the cameras), evaluation still judged by the task.", choices=["task", "reward_node"]),
    Param("timing_log", "", "CSV file every step's timing is appended to (when its command went out, the observation "
          "stamp, the episode, act latency, control time, learner wait and frame age in ms), for latency "
          "measurements over any window of a run; '' for none."),
]

def actor_params(default_task: str, default_reset_service: str, robot_params: Sequence[Param]) -> list[Param]:
    """An actor node's parameters: the task, its mode, the actor core's and learner link's, and the robot's own."""
    return [
        Param("task", default_task, "Task name.", choices=task_names()),
        *COMMON_PARAMS,
        Param("reset_service", default_reset_service, "std_srvs/Trigger service that resets the robot or simulator "
              "('' for none: each episode starts where the robot is)."),
        *robot_params,
    ]


class ActorNode(Node):
    """The actor node `name` over the robot I/O `make_io(node, params, task)` builds; `params` lists what it
    declares (`actor_params`)."""

    def __init__(self, name: str, params: Sequence[Param],
                 make_io: Callable[[Node, dict[str, Any], TaskSpec], RobotActorIO]):
        super().__init__(name)
        p = self.params = declare_params(self, params)
        set_torch_threads(p["torch_threads"])
        try:
            self.task = get_task(p["task"], p.get("env_task", ""))
        except ValueError as exc:
            raise ParameterError(f"{name}: {exc}") from None
        if self.task.actor_node != name:
            raise ParameterError(f"task {self.task.name} runs with the {self.task.actor_node} node, not {name}")
        self.control_hz = p.get("control_hz", self.task.control_hz)
        self.run_dir = Path(p["run_dir"])
        pinned = None  # read before anything is written: a mistyped policy_file leaves no run behind
        if p["policy_file"]:
            try:
                pinned = Path(p["policy_file"]).read_bytes()
            except OSError as exc:
                raise ParameterError(f"{name}: policy_file: {exc}") from None
        outbox_dir = self.run_dir / f"outbox-{p['actor_id']}"
        # No memory budget: every batch goes to disk at once, so a killed actor loses none.
        outbox = Outbox(outbox_dir, max_memory_bytes=0, resend_after_s=p["resend_after_s"])
        recording = p["mode"] == "record"
        recorder = None
        if recording:
            if not p["record_path"]:
                raise ParameterError(f"{name}: mode record needs record_path (the dataset to write)")
            try:
                recorder = EpisodeWriter(p["record_path"], EpisodeSchema(
                    self.task.frame_shapes, self.task.obs_dim, self.task.action_dim),
                    dataset_task_config(self.task, "teleop"))
            except ValueError as exc:
                raise ParameterError(f"{name}: cannot record into {p['record_path']}: {exc}") from None
        config = config_from_params(ActorConfig, p, record_only=recording,
                                    learned_reward=p["reward_source"] == "reward_node")
        self.core = ActorCore(self.task, config, outbox, recorder, progress_path=outbox_dir / "progress.json",
                              key=run_key(p), pack_in_background=True)
        if pinned is not None:
            try:
                self.core.pin_policy(codec.decode(pinned, expect_kind="policy", key=self.core.key))
            except ValueError as exc:
                raise ParameterError(f"{name}: policy_file {p['policy_file']}: {exc}") from None
        if self.core.train_steps:
            self.get_logger().info(f"continuing from {outbox_dir}: {self.core.train_steps} training steps, "
                                   f"{len(outbox)} batches not yet acknowledged")
        self.core_lock = threading.Lock()
        # Pixel tasks add their cameras to the synchronized set (rgb8 at the task's image size).
        self.camera_topics = {f"{camera}/color/image_raw": camera for camera in self.task.cameras}
        self.io = make_io(self, p, self.task)
        self.state_topics = tuple(topic for topic, _ in self.io.state_topics)
        self.sync = StampSynchronizer((*self.state_topics, *self.camera_topics), int(p["obs_slop_s"] * 1e9))
        self.latest: tuple[int, dict] | None = None
        self.acted_stamp = -1
        self.episode_start_stamp: int | None = None
        self.commanded = False
        """Commands answer the current episode's last observation (a repeat of it is answered by resending)."""
        self.invalid_messages = 0
        self.learner_waits = 0
        self.draining_since: float | None = None
        self.last_observation = time.monotonic()
        """When any observation topic last delivered (since start before the first): a silent robot shows."""
        self.latest_received = 0.0
        """When the newest complete observation set formed (monotonic)."""
        try:
            self.act_timing = ActTiming(1.0 / self.control_hz, bool(self.camera_topics), p["timing_log"])
        except (OSError, ValueError) as exc:
            raise ParameterError(f"{name}: cannot write timing_log {p['timing_log']!r}: {exc}") from None
        self.session = SessionClock(p["reset_time_s"])
        self.last_action: np.ndarray | None = None
        self.driver = self._driver(None)
        self.status_message = ""

        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.status_pub = self.create_publisher(String, "session/status", qos.EVENTS)
        # The person's topics are subscribed before the observations: the executor serves ready
        # messages in subscription order, so after a stall the actor acts on a state only once the
        # person's commands queued with it are in (else a live command looks stale).
        self.human = HumanCommand(self.task.action_dim, p["teleop_timeout_s"], to_action=self.io.person_action)
        self.teleop_events = 0
        self.create_subscription(Bool, "teleop/engaged", lambda m: self.human.on_engaged(m.data), qos.COMMAND)
        self.create_subscription(TwistStamped, "teleop/cmd", self._on_teleop_cmd, qos.COMMAND)
        self.create_subscription(Float32, "teleop/gripper", lambda m: self.human.on_gripper(m.data), qos.COMMAND)
        self.create_subscription(String, "teleop/event", self._on_teleop_event, qos.EVENTS)
        topic_types = [*self.io.state_topics, *((t, Image) for t in self.camera_topics)]
        for topic, msg_type in topic_types:
            self.create_subscription(msg_type, topic, lambda m, t=topic: self._on_observation(t, m), qos.SENSOR)
        self.link = LearnerLink(self, self.core, self.core_lock)
        # Tells the reward node (and anyone) that a new episode begins: its next frame is the first.
        self.episode_pub = self.create_publisher(Header, "episode/event", qos.EVENTS)
        # What each step did, so that a bag of the session rebuilds its episodes exactly (ros/step_log.py).
        self.step_pub = self.create_publisher(JointState, STEP_TOPIC, qos.EVENTS)
        self.observation_index = 0
        """Index in its episode of the next observation stepped on."""
        self.invalid_rewards = 0
        self.reward_waits = 0
        if p["reward_source"] == "reward_node":
            self.create_subscription(Vector3Stamped, "reward", self._on_reward, qos.EVENTS)
            self.create_subscription(Header, "reward/done", self._on_reward_done, qos.EVENTS)
        self.reset_client = self.create_client(Trigger, p["reset_service"]) if p["reset_service"] else None
        # Transport and diagnostics run on wall time even when the node follows /clock (use_sim_time):
        # draining to the learner must go on after the simulator stops stepping.
        self.wall_clock = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(p["send_period_s"], self._send_due, clock=self.wall_clock)
        self.create_timer(1.0, self._publish_diagnostics, clock=self.wall_clock)
        if p["control_mode"] == "timer":
            self.create_timer(1.0 / self.control_hz, self._on_control_tick)
        self._request_reset()

    # ---- observations and acting --------------------------------------------------------------

    def _on_observation(self, topic: str, msg) -> None:
        self.last_observation = time.monotonic()
        stamp = stamp_to_ns(msg.header.stamp)
        if topic == self.state_topics[0] and stamp == self.acted_stamp and self.commanded:
            # The lockstep simulator repeats an observation when our command went missing.
            self.io.resend()
            return
        complete = self.sync.add(topic, stamp, msg)
        if complete is not None:
            self.latest = complete
            self.latest_received = time.monotonic()
        # Also on repeats: a step deferred while waiting for the learner is taken on the next one.
        if self.params["control_mode"] == "on_observation" and self.latest is not None:
            self._act()

    def _on_control_tick(self) -> None:
        if self.latest is not None:
            age = self.get_clock().now().nanoseconds - self.latest[0]
            if age <= self.params["max_obs_age_s"] * 1e9:
                self._act()

    def _act(self) -> None:
        started, started_cpu = time.monotonic(), time.thread_time()
        stamp, msgs = self.latest
        if self.episode_start_stamp is None or stamp < self.episode_start_stamp or stamp <= self.acted_stamp:
            return
        try:
            state = self.io.state(msgs)
            for topic, camera in self.camera_topics.items():
                state[camera] = msg_to_image(msgs[topic], copy=True)
            frames_stamp = min((stamp_to_ns(msgs[topic].header.stamp) for topic in self.camera_topics), default=None)
        except ValueError as exc:
            self.invalid_messages += 1
            self.get_logger().warning(f"invalid observation: {exc}", throttle_duration_sec=5.0)
            return
        if self.session.phase(time.monotonic()) != "running" and self.core.in_episode:
            self.acted_stamp = stamp
            self._hold(stamp)
            self._publish_status()
            return
        if self.core.reviewing == "last":  # its review is over: kept, and the session ends before another step
            self._commit_reviewed()
            return
        with self.core_lock:
            if self.core.in_episode and self.core.waiting_for_learner():
                self.learner_waits += 1
                self.act_timing.deferred(stamp, started)
                return
            if self.core.in_episode and self.core.waiting_for_rewards():
                self.reward_waits += 1
                self.act_timing.deferred(stamp, started)
                return
            self.acted_stamp = stamp
            human_action = self.human.action(time.monotonic())
            train_steps, discarded = self.core.train_steps, self.core.episodes_discarded
            try:
                result = self.core.step(state, human_action, stamp)
            except ValueError as exc:  # e.g. a frame of the wrong size: skip it, the robot's watchdog holds
                self.invalid_messages += 1
                self.get_logger().warning(f"observation not usable: {exc}", throttle_duration_sec=5.0)
                return
            self._log_step(stamp, result, human_action, train_steps, discarded)
        if result.action is not None:
            self.last_action = result.action
            self._publish_command(result.action, stamp)
            self.act_timing.acted(stamp, started, time.monotonic(), self._act_latency_s(stamp), frames_stamp,
                                  self.core.episode_index - 1, time.thread_time() - started_cpu)
            with self.core_lock:  # a batch taken in this step is packed (on its thread) now that the command is out
                self.core.flush_if_due()
            self.driver = self._driver(human_action)
            self._publish_status()
            if self.core.reviewing:
                self._commit_reviewed()
            return
        self._on_episode_end(result.episode)

    def _commit_reviewed(self) -> None:
        """The countdown after a recorded episode is over: it is kept (written after the next episode's first
        command is out: the write took 50-60 ms and would hold that command), and after the last one the
        session ends."""
        with self.core_lock:
            self.core.commit_recording()
        if self.core.finished:
            self.episode_start_stamp = None  # no step of the episode begun here is taken
            self._finish(drained=True)

    def _log_step(self, stamp: int, result, human_action, train_steps: int, discarded: int) -> None:
        """The step log of the step just taken at the observation stamped `stamp` (training and recorded
        episodes: evaluation is not training data); `train_steps` and `discarded`: the core's counts before it."""
        c = self.core
        ended = result.action is None
        if not (result.episode.evaluation if ended else c.evaluating):
            outcome = StepOutcome(*c.last_recorded) if c.train_steps != train_steps else None
            episode = result.episode.index if ended else c.episode_index - 1
            self.step_pub.publish(step_msg(self.task.name, episode, self.observation_index, stamp,
                                           None if ended else human_action is not None, outcome, ended))
            self.observation_index += 1
        self._log_discard(discarded, stamp)

    def _log_discard(self, discarded: int, stamp: int) -> None:
        """Tells the step log which episode a recording threw away since the core counted `discarded`."""
        if self.core.episodes_discarded != discarded:
            self.step_pub.publish(discard_msg(self.task.name, self.core.history[-1].index, stamp))

    def _driver(self, human_action) -> str:
        """Who drove the last step: the person, else the policy (a recording session: nobody, the robot holds)."""
        if human_action is not None:
            return "person"
        return "holding" if self.core.config.record_only else "policy"

    def _hold(self, stamp: int) -> None:
        """The robot holds still (during the countdown and pauses), its gripper as last commanded."""
        self._publish_command(self.io.hold(self.last_action), stamp)

    def _act_latency_s(self, stamp: int) -> float:
        # Under simulated time the stamp is not on the wall clock: only the node's own share is measured.
        if self.get_parameter("use_sim_time").value:
            return time.monotonic() - self.latest_received
        return (self.get_clock().now().nanoseconds - stamp) * 1e-9

    def _publish_status(self, done: bool = False) -> None:
        """The person's session status: the session's phase now (`SessionClock.shown`), or "done". Only a running
        episode has a driver; otherwise the robot holds."""
        c, hz = self.core, self.control_hz
        phase, countdown_s = self.session.shown(time.monotonic(), c.in_episode, c.reviewing == "last")
        phase = "done" if done else phase
        status = SessionStatus(
            mode="record" if c.config.record_only else "train", phase=phase,
            driver=self.driver if phase == "running" else "holding",
            episode=max(0, c.episode_index - 1) if c.in_episode else c.episode_index, step=c.episode_steps,
            elapsed_s=c.episode_steps / hz, episode_time_s=c.max_episode_steps / hz, countdown_s=countdown_s,
            last_reward=c.last_reward,
            success=c.last_success, kept=c.episodes_recorded, discarded=c.episodes_discarded,
            message=self.status_message)
        self.status_pub.publish(String(data=status.to_json()))

    def _on_reward(self, msg: Vector3Stamped) -> None:
        with self.core_lock:
            try:
                self.core.on_learned_reward(stamp_to_ns(msg.header.stamp), msg.vector.x)
            except ValueError as exc:
                self.invalid_rewards += 1
                self.get_logger().warning(f"rejected reward: {exc}", throttle_duration_sec=5.0)
                return
            resume = self.reward_waits and not self.core.waiting_for_rewards()
        if resume and self.latest is not None and self.params["control_mode"] == "on_observation":
            self._act()  # the step that waited for this reward

    def _on_reward_done(self, msg: Header) -> None:
        with self.core_lock:
            self.core.on_learned_done(stamp_to_ns(msg.stamp))

    def _on_teleop_cmd(self, msg: TwistStamped) -> None:
        t = msg.twist
        self.human.on_twist((t.linear.x, t.linear.y, t.linear.z, t.angular.x, t.angular.y, t.angular.z),
                            time.monotonic())

    def _on_teleop_event(self, msg: String) -> None:
        if msg.data == "pause":
            paused = self.session.toggle_pause()
            self.status_message = ""  # the console and the view say PAUSED, and resumed, themselves
            self.get_logger().info(f"person {'paused' if paused else 'resumed'} the session")
            self._publish_status()
            return
        if msg.data not in LABELS:  # takeover/handback are carried by teleop/engaged
            return
        self.teleop_events += 1
        self.get_logger().info(f"person labelled the episode: {msg.data}")
        with self.core_lock:
            reviewing, discarded = self.core.reviewing, self.core.episodes_discarded
            self.core.label(msg.data)
            self._log_discard(discarded, self.acted_stamp)
        if reviewing and not self.core.reviewing:
            self.status_message = f"episode {self.core.last_discard[0]} dropped: recording it again"
            self._publish_status()

    def _publish_command(self, action: np.ndarray, stamp: int) -> None:
        self.commanded = True
        self.io.publish(action, stamp)

    def _on_episode_end(self, episode) -> None:
        self.commanded = False
        self.episode_start_stamp = None
        text = (f"episode {episode.index}: return {episode.ret:.2f}, success {episode.success}, "
                f"policy v{episode.policy_version}")
        self.last_action = None
        if episode.evaluation:
            self.get_logger().info(f"evaluation {text}")
            self.status_message = f"evaluation {text}"
        elif self.core.last_discard is not None and self.core.last_discard[0] == episode.index:
            self.get_logger().warning(f"episode {episode.index} discarded: {self.core.last_discard[1]}")
            self.status_message = f"episode {episode.index} discarded: {self.core.last_discard[1]}"
        else:
            self.get_logger().info(f"training {text}", throttle_duration_sec=5.0)
            self.status_message = (f"episode {episode.index} done ({episode.steps} steps, success {episode.success})"
                                   + ("; r during the countdown throws it away" if self.core.reviewing else ""))
        disagreement = self.core.label_disagreement
        if disagreement is not None and disagreement[0] == episode.index:
            verdict = "success" if episode.success_check else "failure"
            warning = (f"WARNING: episode {episode.index} labelled {disagreement[1]}, but the task's own success "
                       f"check says {verdict}; both are stored (label and check)")
            self.get_logger().info(warning)  # the console shows it once, as the status message
            self.status_message = f"{warning}. {self.status_message}"
        if self.core.finished:
            self.draining_since = time.monotonic()
            return
        self._request_reset()

    def _request_reset(self) -> None:
        if self.reset_client is None:  # no reset service: the next observation begins the episode
            self._start_episode(self.latest[0] + 1 if self.latest is not None else 0)
            return
        if not self.reset_client.wait_for_service(timeout_sec=0.0):
            timer_once(self, 0.2, self._request_reset, self.wall_clock)
            return
        # The reward node's episode ends with the last observation we saw (stamp 0: none yet); the
        # start is announced again, stamped with the reset's observation, once the reset is done.
        after_last = self.latest[0] + 1 if self.latest is not None else 0
        self.episode_pub.publish(Header(stamp=ns_to_stamp(after_last), frame_id="start"))
        self.reset_client.call_async(Trigger.Request()).add_done_callback(self._on_reset_done)

    def _on_reset_done(self, future) -> None:
        response = future.result()
        stamp = reset_stamp(response)
        if stamp is None:
            self.get_logger().warning(f"reset failed ({response.message!r}); retrying")
            timer_once(self, 0.5, self._request_reset, self.wall_clock)
            return
        self._start_episode(stamp)

    def _start_episode(self, stamp: int) -> None:
        """The new episode begins with the observation stamped `stamp` (or the first after it)."""
        with self.core_lock:
            self.core.start_episode(commit_recording=False)
        self.human.new_episode()
        self.session.reset_done(time.monotonic())
        self.episode_start_stamp = stamp
        self.observation_index = 0
        self._publish_status()
        # The reward node's episode begins at the same observation (if the start announced before the
        # reset arrived late, frames up to this one may have been scored in the old episode).
        self.episode_pub.publish(Header(stamp=ns_to_stamp(stamp), frame_id="start"))
        if self.latest is not None and self.params["control_mode"] == "on_observation":
            self._act()

    # ---- learner link -------------------------------------------------------------------------

    def _send_due(self) -> None:
        self.link.send_due()
        with self.core_lock:
            resume = self.reward_waits and self.core.in_episode and not self.core.waiting_for_rewards()
        if resume and self.latest is not None and self.params["control_mode"] == "on_observation":
            self._act()  # a step that waited for a reward which is not coming
        if self.draining_since is not None:
            drained = self.core.unacknowledged == 0
            if drained or time.monotonic() - self.draining_since > self.params["drain_timeout_s"]:
                self._finish(drained)

    def _finish(self, drained: bool) -> None:
        if self.core.in_episode:  # begun but never to be recorded (the review after a recording's last episode)
            self.step_pub.publish(discard_msg(self.task.name, self.core.episode_index - 1, self.acted_stamp))
        self._publish_status(done=True)
        if self.core.config.record_only:
            summary = {**self.core.record_summary(), "teleop_stale_steps": self.human.stale}
            (self.run_dir / "record.json").write_text(json.dumps(summary, indent=2))
            self.get_logger().info(f"recorded {summary['episodes_recorded']} episodes "
                                   f"({summary['episodes_discarded']} discarded) -> {summary['dataset']}")
            self.exit_code = 0
            self.request_shutdown()
            return
        summary = self.core.eval_summary() | {"transitions_sent": self.core.transitions_sent,
                                              "transitions_acked_all": drained,
                                              "unacked_payloads": self.core.unacknowledged,
                                              **self.act_timing.summary()}
        path = self.run_dir / "eval.json"
        path.write_text(json.dumps(summary, indent=2))
        self.get_logger().info(f"evaluation: success rate {summary['success_rate']:.2f} over "
                               f"{summary['episodes']} episodes -> {path}")
        self.draining_since = None
        self.exit_code = 0 if drained else 3
        self.request_shutdown()

    def _publish_diagnostics(self) -> None:
        c = self.core
        values = {
            "episodes": c.episode_index, "train_steps": c.train_steps, "policy_version": c.policy_version,
            "success_rate_last20": round(c.success_rate(20), 3), "evaluating": c.evaluating,
            "eval_done": len(c.eval_results), "eval_success_rate": round(c.success_rate(10_000, True), 3),
            "transitions_sent": c.transitions_sent, "payloads_sent": c.payloads_sent, "payloads_acked": c.acked,
            "outbox_pending": len(c.outbox), "outbox_spilled": c.outbox.spilled, "resends": c.outbox.resends,
            "sync_dropped": self.sync.dropped, "invalid_messages": self.invalid_messages + self.link.rejected,
            "learner_waits": self.learner_waits, "learner_updates_seen": c.learner_updates,
            "teleop_engaged": self.human.engaged, "teleop_stale_steps": self.human.stale,
            "teleop_rejected": self.human.rejected, "teleop_labels": self.teleop_events,
            "intervention_rate_last20": round(c.intervention_rate(20), 3),
            "episode_steps": c.episode_steps, "last_return": round(c.history[-1].ret, 4) if c.history else 0.0,
            "episodes_recorded": c.episodes_recorded, "episodes_discarded": c.episodes_discarded,
            "learned_rewards_received": c.learned_rewards_received, "late_rewards_sent": c.late_rewards_sent,
            "invalid_rewards": self.invalid_rewards, "reward_waits": self.reward_waits,
            "observation_age_s": round(time.monotonic() - self.last_observation, 1),
            **self.act_timing.summary(), "paused": self.session.paused,
        }
        # Late joiners (the view, the console) get the status between steps too.
        self._publish_status()
        level, message = self.link.health()
        self.diag_pub.publish(diagnostics(self, values, level, message))

    def close(self) -> None:
        self.link.close()
        self.act_timing.close()
        with self.core_lock:
            self.core.commit_recording()  # a session stopped during the reset keeps its last episode
