"""Learner node: transitions in, SAC updates, policy weights out, checkpoints and logs.

Three threads. The executor's callback accepts each transition payload (verifies, deduplicates and
journals it: milliseconds) and acknowledges it at once; an ingest thread computes its features and
stores it; the training thread updates, publishes and checkpoints. Storing and training share only the
replay memories (`LearnerCore.memory_lock`, held to store or to draw a batch). So neither a long update
(a compiled step's first call compiles for 10-50 s) nor features computed slowly beside it (a pixel
payload's took ~1 s then) delay an acknowledgement into an actor's resend.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from pathlib import Path
from typing import NoReturn

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Vector3Stamped
from rclpy.node import Node
from std_msgs.msg import Header, UInt8MultiArray

from robot_rl.agents.sac import SACConfig
from robot_rl.config_fields import config_from_params
from robot_rl.data.dataset import load_transitions
from robot_rl.outputs import atomic_write_bytes
from robot_rl.ros import qos
from robot_rl.ros.messages import bytes_to_uint8_multiarray, stamp_to_ns, uint8_multiarray_view
from robot_rl.ros.node_utils import (
    TORCH_THREADS,
    Param,
    ParameterError,
    declare_params,
    diagnostics,
    params_from_dataclass,
    run_node,
    set_torch_threads,
)
from robot_rl.tasks import get_task, task_names
from robot_rl.training.learner import IngestResult, LearnerConfig, LearnerCore
from robot_rl.transport import codec
from robot_rl.transport.secret import SECRET_FILE, ensure_run_secret

UPDATE_RATE_WINDOW_S = 10.0
"""Seconds over which updates/s is measured: transitions arrive in batches (the car's 50 steps every
2.5 s) and the learner catches up in bursts, so a 1 s window mostly read 0 or a burst."""
INGEST_WAIT_S = 0.05
"""How long the ingest thread waits for a payload before it looks at learned rewards and the stop flag again."""

PARAMS = [
    Param("task", "arm_lift", "Task name (decides observation and action sizes).", choices=task_names()),
    Param("env_task", "", "Task env: the run's env task file (env_task.json), written by `robot-rl train --env ID "
          "--graph`."),
    Param("run_dir", "runs/default", "Directory for checkpoints, the transition journal and TensorBoard logs."),
    Param("demos", "", "Path of a zarr demonstration dataset, or of a bag (.mcap) of the task's topics, loaded into "
          "the demo buffer ('' for none)."),
    Param("reward_model", "", "With learned rewards (actor reward_source: reward_node): the reward node's progress "
          "model directory, to relabel the demonstrations' rewards the same way ('' keeps the recorded ones)."),
    Param("reward_goal", "", "Goal sentence the demonstrations are relabelled against (with reward_model)."),
    # The node trains in bfloat16 where the hardware has it natively; SACConfig's own default stays float32.
    *params_from_dataclass(SACConfig, defaults={"precision": "auto"}),
    Param("lr", 3e-4, "Learning rate of actor, critics and temperature.", 1e-7, 1.0),
    *params_from_dataclass(LearnerConfig),
    Param("publish_period_s", 1.0, "Seconds between policy publications.", 0.01, 3600.0),
    Param("checkpoint_period_s", 30.0, "Seconds between checkpoints.", 0.5, 86400.0),
    Param("snapshot_period_s", 0.0, "Seconds between policy snapshots (<run_dir>/snapshots/: the published policy "
          "payload of that moment, for evaluating success against time after the run; 0: none).", 0.0, 86400.0),
    Param("snapshot_every_transitions", 0, "Stored transitions between policy snapshots (as snapshot_period_s, for "
          "success against environment steps: lockstep runs; 0: none).", 0, 10**9),
    Param("train_niceness", 10, "Niceness of the training thread (Linux): the control loops of the robot's nodes "
          "on this machine keep their CPU while the learner trains on every spare cycle.", 0, 19),
    TORCH_THREADS,
]


def lower_thread_priority(niceness: int) -> str | None:
    """Gives the calling thread (and the threads it starts, e.g. torch's) at least `niceness` (Linux
    threads have their own); returns why it could not, or None."""
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, max(niceness, os.getpriority(os.PRIO_PROCESS, thread)))
    except (AttributeError, OSError) as exc:  # no setpriority (not Linux/Unix), or not allowed
        return f"{type(exc).__name__}: {exc}"
    return None


AUTOGROUP = Path("/proc/self/autogroup")


def autogroup_nice(group: Path = AUTOGROUP) -> int | None:
    """The niceness of this process's scheduling group (Linux autogroup: one per session), or None where it has no
    group of its own: a kernel without autogroup (no file), or the kernel's default group, the root one (an empty
    file: a session under a container's init, which never made a group), whose niceness cannot be set."""
    try:
        text = group.read_text()
    except OSError:
        return None
    return int(text.split("nice")[1]) if text.strip() else None


def lower_session_priority(niceness: int) -> str | None:
    """Gives this process's scheduling group (Linux autogroup: one per session) at least `niceness` when the
    process leads its session, and returns why it could not, or None. Under autogroup scheduling a thread's niceness
    weighs only against threads of its own session, so a learner in a session of its own (robot-rl train's
    supervisor starts each node so) competes with the actors' sessions as an equal however nice its training thread
    is; a learner sharing its session (ros2 launch) leaves the group alone, as the control loops are in it too."""
    if os.getsid(0) != os.getpid():  # shares its session's group
        return None
    try:
        current = autogroup_nice()
        if current is not None:  # None: no group of its own to nice
            AUTOGROUP.write_text(str(max(niceness, current)))
    except (OSError, IndexError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def demonstration_arrays(path: str, task, reward_model: str = "", reward_goal: str = "") -> dict:
    """Transitions (wire layout) from a zarr dataset (scripted-demo transitions or recorded episodes) or a bag of
    the task's topics (.mcap); with `reward_model`, an episode dataset's rewards and ends come from that progress
    model."""
    import zarr

    from robot_rl.ros.bag_import import imported_bag, is_bag
    from robot_rl.data.episodes import EpisodeDataset

    if is_bag(path):  # a bag of the task's topics: its episodes, imported for the while
        with imported_bag(path, task=task) as dataset:
            return demonstration_arrays(str(dataset), task, reward_model, reward_goal)
    if not Path(path).exists():
        raise FileNotFoundError(f"no demonstration dataset at {path}")
    if zarr.open_group(path, mode="r").attrs.get("format") != "robot_rl.episodes":
        if reward_model:
            raise ValueError(f"demos {path} hold no camera frames to relabel with {reward_model}: record an "
                             "episode dataset (robot-rl record, robot-rl demos --env)")
        arrays, attrs = load_transitions(path)
        if attrs.get("task") != task.name:
            raise ValueError(f"demos {path} are for task {attrs.get('task')!r}, not {task.name!r}")
        if not any(len(values) for values in arrays.values()):
            raise ValueError(f"demos {path} hold no transitions")
        return arrays
    dataset = EpisodeDataset(path)
    if dataset.task_config.get("task", task.name) != task.name:
        raise ValueError(f"demos {path} are for task {dataset.task_config.get('task')!r}, not {task.name!r}")
    if len(dataset) == 0:
        raise ValueError(f"demos {path} hold no episodes")
    if reward_model:
        from robot_rl.rewards.env_reward import LearnedRewardConfig, relabel_episodes
        from robot_rl.rewards.progress import ProgressModel

        if not reward_goal:
            raise ValueError("reward_model needs reward_goal, the goal sentence to score against")
        return relabel_episodes(path, ProgressModel.load(reward_model), LearnedRewardConfig(reward_model, reward_goal),
                                task.cameras)
    return dataset.transitions(task.cameras)


class LearnerNode(Node):
    def __init__(self, **node_options):
        super().__init__("learner", **node_options)
        p = declare_params(self, PARAMS)
        set_torch_threads(p["torch_threads"])
        try:
            task = get_task(p["task"], p["env_task"])
            sac = config_from_params(SACConfig, p, actor_lr=p["lr"], critic_lr=p["lr"], temperature_lr=p["lr"])
            config = config_from_params(LearnerConfig, p, obs_dim=task.obs_dim, action_dim=task.action_dim, sac=sac,
                                        cameras=task.cameras, image_size=task.image_size or 64)
            # read before the run directory is touched: refused demonstrations leave nothing behind
            demos = demonstration_arrays(p["demos"], task, p["reward_model"], p["reward_goal"]) if p["demos"] else None
            # Only this run's actors hold the secret (created here when the run directory is new).
            self.core = LearnerCore(config, p["run_dir"], key=ensure_run_secret(p["run_dir"]))
            resumed = self.core.restore()
        except (ValueError, FileNotFoundError) as exc:
            raise ParameterError(str(exc)) from None
        self.params = p
        if resumed:
            self.get_logger().info(f"resumed from {p['run_dir']}: {self.core.agent.num_updates} updates, "
                                   f"{len(self.core.online)} transitions in the buffer")
        if demos is not None:
            self.get_logger().info(f"loaded {self.core.load_demonstrations(demos)} demonstration transitions")

        from torch.utils.tensorboard import SummaryWriter

        # Made before anything can arrive: the ingest thread logs the episodes that payloads report to it.
        self.writer = SummaryWriter(str(Path(p["run_dir"]) / "tensorboard"))
        self.inbox: queue.Queue[IngestResult] = queue.Queue()
        """Accepted (journaled, acknowledged) payloads waiting to be stored."""
        self.ack_pub = self.create_publisher(UInt8MultiArray, "rl/acks", qos.EVENTS)
        self.policy_pub = self.create_publisher(UInt8MultiArray, "rl/policy", qos.POLICY)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(UInt8MultiArray, "rl/transitions", self._on_transitions, qos.TRANSITIONS)
        # Learned rewards that reached an actor too late come here too; the training thread applies them.
        self.reward_inbox: queue.Queue[tuple[int, float | None]] = queue.Queue()
        self.create_subscription(Vector3Stamped, "reward", lambda m: self.reward_inbox.put(
            (stamp_to_ns(m.header.stamp), m.vector.x)), qos.EVENTS)
        self.create_subscription(Header, "reward/done", lambda m: self.reward_inbox.put(
            (stamp_to_ns(m.stamp), None)), qos.EVENTS)
        self.stats = {"updates_per_s": 0.0, "last_metrics": {}}
        self.last_payload: bytes | None = None
        """The policy payload last published (written beside each checkpoint)."""
        self.actors_heard: set[str] = set()
        if not self.core.transitions_received:  # said once: a learner started alone is waiting, not hung
            self.get_logger().info(f"waiting for the first transitions on {self.resolve_topic_name('rl/transitions')} "
                                   "(from the actors of this run)")
        self._stop = threading.Event()
        self._ingest_thread = threading.Thread(target=self._ingest_loop, name="learner-ingest", daemon=True)
        self._ingest_thread.start()
        self._thread = threading.Thread(target=self._train_loop, name="learner-train", daemon=True)
        self._thread.start()
        self.create_timer(1.0, self._publish_diagnostics)

    def _on_transitions(self, msg: UInt8MultiArray) -> None:
        data = bytes(uint8_multiarray_view(msg))
        try:
            result = self.core.accept(data)
        except (codec.PayloadError, ValueError) as exc:
            if getattr(exc, "reason", None) in codec.FORGED_REASONS:
                exc = f"{exc} (an actor on another machine needs a copy of {SECRET_FILE}: its key_file parameter)"
            self.get_logger().warning(f"rejected transition payload ({len(data)} bytes): {exc}",
                                      throttle_duration_sec=5.0)
            return
        if result.actor_id not in self.actors_heard:
            self.actors_heard.add(result.actor_id)
            self.get_logger().info(f"transitions arriving from {result.actor_id} ({len(self.actors_heard)} "
                                   f"actor(s) so far); updates start after {self.core.config.warmup_transitions} "
                                   "stored")
        self.ack_pub.publish(bytes_to_uint8_multiarray(self.core.ack_payload(result.actor_id, [result.seq])))
        if not result.duplicate:
            self.inbox.put(result)

    # ---- training thread ----------------------------------------------------------------------

    def _drain_rewards(self) -> None:
        while True:
            try:
                stamp, reward = self.reward_inbox.get_nowait()
            except queue.Empty:
                break
            try:
                if reward is None:
                    self.core.on_learned_done(stamp)
                else:
                    self.core.on_learned_reward(stamp, reward)
            except ValueError as exc:
                self.get_logger().warning(f"rejected reward: {exc}", throttle_duration_sec=5.0)
        self.core.expire_late()

    def _ingest_loop(self) -> None:
        """Stores the accepted payloads (and learned rewards that came late) beside the training thread's updates;
        asked to stop, it first stores every payload still waiting (each was acknowledged: the summary and the
        final checkpoint count it)."""
        lower_thread_priority(self.params["train_niceness"])  # learner work too (the training thread says if not)
        while True:
            self._drain_rewards()
            try:
                result = self.inbox.get(timeout=INGEST_WAIT_S)
            except queue.Empty:
                if self._stop.is_set():  # stopping only with nothing left: what was acknowledged is stored
                    break
                continue
            self.core.store(result)
            for episode in self.core.episode_stats:
                self._log_episode(episode)
            self.core.episode_stats.clear()

    def _train_loop(self) -> None:
        niceness = self.params["train_niceness"]
        failed = [why for why in (lower_thread_priority(niceness), lower_session_priority(niceness)) if why]
        if failed:
            self.get_logger().warning(f"training at normal priority ({'; '.join(failed)}): it competes with "
                                      "control loops")
        last_publish = last_checkpoint = last_rate = last_snapshot = time.monotonic()
        every = self.params["snapshot_every_transitions"]

        def next_snapshot() -> int | None:  # the next multiple of `every` stored transitions
            return (self.core.transitions_received // every + 1) * every if every else None

        next_snapshot_at = next_snapshot()
        updates_at_last_rate = self.core.agent.num_updates
        if self.core.agent.num_updates:
            self._publish_policy()
        while not self._stop.is_set():
            if self.core.ready():
                metrics = self.core.train_step()
                n = self.core.agent.num_updates
                if n % 100 == 0:
                    self.stats["last_metrics"] = metrics
                    for key, value in metrics.items():
                        self.writer.add_scalar(f"train/{key}", value, n)
            else:
                time.sleep(0.005)
            now = time.monotonic()
            snapshot_due = 0 < self.params["snapshot_period_s"] <= now - last_snapshot or (
                next_snapshot_at is not None and self.core.transitions_received >= next_snapshot_at)
            if (now - last_publish >= self.params["publish_period_s"] or snapshot_due) and self.core.agent.num_updates:
                payload = self._publish_policy()
                last_publish = now
                if snapshot_due:
                    self._write_snapshot(payload)
                    last_snapshot = now
                    next_snapshot_at = next_snapshot()
            if now - last_checkpoint >= self.params["checkpoint_period_s"]:
                self._save_checkpoint()
                last_checkpoint = now
            if now - last_rate >= UPDATE_RATE_WINDOW_S:
                n = self.core.agent.num_updates
                self.stats["updates_per_s"] = (n - updates_at_last_rate) / (now - last_rate)
                updates_at_last_rate, last_rate = n, now
                step = self.core.transitions_received
                self.writer.add_scalar("learner/updates_per_s", self.stats["updates_per_s"], step)
                self.writer.add_scalar("learner/updates_per_transition", self.core.updates_per_transition(), step)
                self.writer.add_scalar("learner/policy_version", self.core.policy_version, step)
                self.writer.add_scalar("buffer/online", len(self.core.online), step)
                self.writer.add_scalar("buffer/demos", len(self.core.demos), step)
        self._ingest_thread.join()  # the final checkpoint after the last acknowledged payload is stored
        self._save_checkpoint()

    def _save_checkpoint(self) -> None:
        """The agent's checkpoint, and beside it the policy last published (<run_dir>/policy.policy, a signed
        payload: what `robot-rl eval --policy <run dir>` runs)."""
        self.core.save_checkpoint()
        if self.last_payload is not None:
            atomic_write_bytes(Path(self.params["run_dir"]) / "policy.policy", self.last_payload)

    def _publish_policy(self) -> bytes:
        payload = self.core.policy_payload()
        self.last_payload = payload
        try:
            self.policy_pub.publish(bytes_to_uint8_multiarray(payload))
        except RuntimeError:  # rclpy's RCLError
            if self.context.ok():
                raise
            # A Ctrl-C took the context down before close() stopped this thread: stop here, so the
            # loop's final checkpoint is still written (an exception would end the thread without it).
            self._stop.set()
        return payload

    def _write_snapshot(self, payload: bytes) -> None:
        """The policy just published, pinned: snapshots/<wall time ns>-v<version>.policy (a signed codec
        payload; `benchmarks/graph_realtime.py` evaluates them after the run, off the learner's CPU)."""
        folder = Path(self.params["run_dir"]) / "snapshots"
        folder.mkdir(exist_ok=True)
        atomic_write_bytes(folder / f"{time.time_ns()}-v{self.core.policy_version:06d}.policy", payload)

    def _log_episode(self, episode: dict) -> None:
        """TensorBoard, and one JSON line per episode in episodes.jsonl (what `robot-rl report` plots)."""
        step = self.core.transitions_received
        self.writer.add_scalar("episode/return", episode["return"], step)
        self.writer.add_scalar("episode/success", float(episode["success"]), step)
        self.writer.add_scalar("episode/intervention_count", episode["interventions"], step)
        self.writer.add_scalar("episode/intervention_steps", episode.get("intervention_steps", 0), step)
        with open(Path(self.params["run_dir"]) / "episodes.jsonl", "a") as f:
            f.write(json.dumps({**episode, "env_steps": step, "time": round(time.time(), 3),
                                "learner_updates": self.core.agent.num_updates}) + "\n")

    # ---- executor thread ----------------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        s = self.core.summary()
        values = {k: s[k] for k in ("updates", "updates_per_transition", "policy_version", "online_size", "demo_size",
                                    "transitions_received", "duplicates", "rejected", "resumed")}
        values.update(payloads_forged=self.core.forged, payloads_replayed=self.core.duplicates)
        values["updates_per_s"] = round(self.stats["updates_per_s"], 2)
        values["inbox"] = self.inbox.qsize()
        values["rejected_by_reason"] = json.dumps(self.core.rejected)
        values.update(late_rewards_waiting=len(self.core.awaiting_reward),
                      late_rewards_filled=self.core.late_rewards_filled,
                      late_rewards_dropped=self.core.late_rewards_dropped)
        values.update({k: round(v, 5) for k, v in self.stats["last_metrics"].items()})
        self.diag_pub.publish(diagnostics(self, values))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.writer.close()
        self.core.close()
        summary = self.core.summary() | {"rejected_by_reason": self.core.rejected}
        (Path(self.params["run_dir"]) / "learner_summary.json").write_text(json.dumps(summary, indent=2, default=str))


def main(args=None) -> NoReturn:
    run_node(LearnerNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
