"""Car actor (FastRLAP on ROS): drives `car/cmd_vel` from the camera, `car/odom` and `car/imu`,
sends the transitions to the learner, and practises without a person.

Each synchronized observation (`front/color/image_raw`, `car/imu`, `car/odom`, same stamp) becomes a
`car_race` task state (`CarObserver`: the newest frame through the frozen encoder of `policy_dir`,
stacked with the previous ones, FastRLAP's proprioception, the progress reward, the lap timer);
`ActorCore` turns it into an action (rate-limited to +-0.2 of the previous one), a transition and
episode bookkeeping, exactly as for the arm. The action maps to a speed and a steering angle as in
`CarRaceEnv`. The actor drives with the pretrained actor of `policy_dir` until the learner's first
policy arrives on `rl/policy`; transitions hold encoder features, not frames (the learner stores
and trains on them directly).

Practice: the car (`car_sim` or the real `car`) watches for crashes and for being stuck and backs
out on its own, announcing it on `car/practice`. The observation that shows a crash ends the
episode as *terminated* (minus the crash cost); one that shows the car stuck ends it as
*truncated*; while the car recovers the actor only keeps the lockstep clock going (zero
commands, ignored by the car); the next episode starts when the car says it is driving again. An
episode that reaches the task's step limit is truncated and the next one starts at once, where
the car is (no resets: FastRLAP never teleports).

After `total_steps` training steps and `eval_episodes` deterministic episodes it writes
`<run_dir>/eval.json` (laps included: training step, lap time and the wall clock at the line) once the
learner has every transition, and exits.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import NoReturn

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import Image, Imu
from std_msgs.msg import String
from std_srvs.srv import Trigger

from robot_rl.agents.frame_stack_policy import load_frame_stack_policy
from robot_rl.agents.policy import Policy, PolicySpec
from robot_rl.config_fields import config_from_params
from robot_rl.robots.car.sim import CarRaceConfig
from robot_rl.hardware.safety import Rejected
from robot_rl.outputs import atomic_write_text
from robot_rl.ros import qos
from robot_rl.ros.car_io import cmd_vel_msg, msgs_to_sensors, parse_practice
from robot_rl.ros.learner_link import LearnerLink
from robot_rl.ros.link_params import LINK_PARAMS
from robot_rl.ros.messages import msg_to_image, stamp_to_ns
from robot_rl.ros.node_utils import (
    Param,
    ParameterError,
    declare_params,
    diagnostics,
    params_from_dataclass,
    reset_stamp,
    run_node,
    set_torch_threads,
    timer_once,
)
from robot_rl.ros.sync import StampSynchronizer
from robot_rl.tasks import get_task
from robot_rl.training.actor import ActorConfig, ActorCore
from robot_rl.robots.car.observer import CarObserver, load_checkpoints
from robot_rl.transport.outbox import Outbox
from robot_rl.transport.secret import run_key

PARAMS = [
    Param("policy_dir", "policies/car_race_iql_64", "Frame-stack policy (IQL export): its frozen encoder makes the "
          "features; its actor drives until the learner's first policy arrives."),
    Param("checkpoints", "track:7", "track:<seed> (the simulated track's slow scripted lap) or a file with one slow "
          "demonstration lap's positions (.npy / .csv rows x, y in the odometry frame, from the start line)."),
    *params_from_dataclass(CarRaceConfig, only=("reach_radius",)),
    Param("run_dir", "runs/default", "Directory for the outbox spill and eval.json."),
    # No exploration with random actions (the pretrained actor drives), no learned rewards, no recording.
    *params_from_dataclass(ActorConfig, exclude=("random_steps", "record_episodes", "keep_idle", "episode_time_s",
                                                 "sync_rewards", "reward_wait_s"),
                           defaults={"actor_id": "car_actor0", "total_steps": 48_000, "eval_episodes": 3}),
    *LINK_PARAMS,
    Param("obs_slop_s", 0.0, "Max stamp difference within one observation set (0 in simulation, where the car "
          "stamps all three alike; a real camera's stamps differ from the odometry's).", 0.0, 1.0),
    Param("reset_service", "/car_sim/reset", "Trigger service that puts the car on the start line once, before the "
          "first episode ('' for none: the car starts where it stands)."),
    Param("device", "cpu", "Torch device of the encoder and actor."),
]

IMAGE, IMU, ODOM = "front/color/image_raw", "car/imu", "car/odom"


def initial_policy(frame_stack_actor, obs_dim: int) -> Policy:
    """The pretrained actor as a flat-feature Policy (what the learner publishes later)."""
    spec = PolicySpec(obs_dim, frame_stack_actor.action_dim, frame_stack_actor.hidden_dims,
                      frame_stack_actor.layer_norm)
    return Policy(spec, {f"actor.{k}": v for k, v in frame_stack_actor.state_dict().items()})


class CarActorNode(Node):
    def __init__(self):
        super().__init__("car_actor")
        p = self.params = declare_params(self, PARAMS)
        set_torch_threads(p["torch_threads"])
        self.task = get_task("car_race")
        self.race = CarRaceConfig(reach_radius=p["reach_radius"])
        try:
            policy = load_frame_stack_policy(p["policy_dir"], p["device"])
            self.observer = CarObserver(policy, load_checkpoints(p["checkpoints"], self.race.checkpoint_spacing),
                                        self.race)
        except (FileNotFoundError, ValueError) as exc:
            raise ParameterError(f"car_actor: {exc}") from None
        self.run_dir = Path(p["run_dir"])
        outbox_dir = self.run_dir / f"outbox-{p['actor_id']}"
        # As the arm's actor: every batch on disk at once, the counters beside it, so a restarted
        # car actor (crash, SIGKILL) goes on where it stopped and loses no transition.
        outbox = Outbox(outbox_dir, max_memory_bytes=0, resend_after_s=p["resend_after_s"])
        self.core = ActorCore(self.task, config_from_params(ActorConfig, p), outbox,
                              progress_path=outbox_dir / "progress.json", key=run_key(p),
                              pack_in_background=True)
        self.practice_path = outbox_dir / "practice.json"  # laps and practice events, for a restart's summary
        self.core.policy = initial_policy(policy.actor, self.task.obs_dim)
        self.core_lock = threading.Lock()
        self.sync = StampSynchronizer((IMAGE, IMU, ODOM), int(p["obs_slop_s"] * 1e9))
        self.latest: tuple[int, dict] | None = None
        self.previous_action = np.zeros(2, np.float32)
        self.acted_stamp = -1
        self.last_command: Twist | None = None
        self.start_stamp: int | None = None
        self.recovering = False
        self.recovery_stamp = -1
        self.driving_from = -1
        self.practice_event: tuple[str, int] | None = None  # (crash | stuck, stamp) not yet acted on
        self.after_recovery = False
        self.laps: list[tuple[int, float, float | None]] = []  # (training step, lap s, wall clock at the line)
        self.events = {"crash": 0, "stuck": 0, "time_limit": 0}
        if self.practice_path.exists():
            practice = json.loads(self.practice_path.read_text())
            # Runs saved before laps carried their wall-clock time have two entries per lap.
            self.laps = [(int(lap[0]), float(lap[1]), float(lap[2]) if len(lap) > 2 else None)
                         for lap in practice["laps"]]
            self.events.update({k: int(v) for k, v in practice["events"].items()})
            self.get_logger().info(f"continuing from {outbox_dir}: {self.core.train_steps} training steps, "
                                   f"{len(self.laps)} laps")
        self.invalid_messages = 0
        self.learner_waits = 0
        self.draining_since: float | None = None

        self.cmd_pub = self.create_publisher(Twist, "car/cmd_vel", qos.COMMAND)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        # Practice events are subscribed before the sensors: the executor serves ready messages in
        # subscription order, so the event is in before the observation that shows it.
        self.create_subscription(String, "car/practice", self._on_practice, qos.EVENTS)
        for topic, msg_type in ((IMAGE, Image), (IMU, Imu), (ODOM, Odometry)):
            self.create_subscription(msg_type, topic, lambda m, t=topic: self._on_observation(t, m), qos.SENSOR)
        self.link = LearnerLink(self, self.core, self.core_lock)
        # Transport and diagnostics on wall time: a lockstep /clock stands still between commands.
        self.wall_clock = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(p["send_period_s"], self._send_due, clock=self.wall_clock)
        self.create_timer(1.0, self._publish_diagnostics, clock=self.wall_clock)
        self.reset_client = self.create_client(Trigger, p["reset_service"]) if p["reset_service"] else None
        if self.reset_client is None:
            self.start_stamp = 0
        else:
            self._request_reset()

    # ---- the car's own state ------------------------------------------------------------------

    def _request_reset(self) -> None:
        if not self.reset_client.wait_for_service(timeout_sec=0.0):
            timer_once(self, 0.2, self._request_reset, self.wall_clock)
            return
        self.reset_client.call_async(Trigger.Request()).add_done_callback(self._on_reset_done)

    def _on_reset_done(self, future) -> None:
        stamp = reset_stamp(future.result())
        if stamp is None:
            self.get_logger().warning(f"reset failed ({future.result().message!r}); retrying")
            timer_once(self, 0.5, self._request_reset, self.wall_clock)
            return
        self.start_stamp = stamp
        self._act_on_latest()

    def _on_practice(self, msg: String) -> None:
        try:
            event = parse_practice(msg)
        except ValueError as exc:
            self.invalid_messages += 1
            self.get_logger().warning(f"invalid car/practice: {exc}", throttle_duration_sec=5.0)
            return
        if event.state == "recovering" and event.event is not None:
            self.practice_event = (event.event, event.stamp_ns)
        elif event.state == "driving":
            self.driving_from = event.stamp_ns

    # ---- acting -------------------------------------------------------------------------------

    def _on_observation(self, topic: str, msg) -> None:
        stamp = stamp_to_ns(msg.header.stamp)
        if topic == ODOM and stamp == self.acted_stamp and self.last_command is not None:
            self.cmd_pub.publish(self.last_command)  # the lockstep car repeats an observation we answered
            return
        complete = self.sync.add(topic, stamp, msg)
        if complete is not None:
            self.latest = complete
        self._act_on_latest()

    def _act_on_latest(self) -> None:
        # Also on repeats: a set completed before the reset answered, or one deferred for the learner.
        if self.latest is not None and self.start_stamp is not None and self.latest[0] >= self.start_stamp:
            self._act(*self.latest)

    def _act(self, stamp: int, msgs: dict) -> None:
        if stamp <= self.acted_stamp:
            return
        try:
            sensors = msgs_to_sensors(msgs[ODOM], msgs[IMU])
            frame = msg_to_image(msgs[IMAGE], copy=True)
        except (Rejected, ValueError) as exc:
            self.invalid_messages += 1
            self.get_logger().warning(f"invalid observation: {exc}", throttle_duration_sec=5.0)
            return
        event = None
        if self.practice_event is not None and self.practice_event[1] <= stamp:
            event, self.recovery_stamp = self.practice_event[0], self.practice_event[1]
            self.practice_event, self.recovering = None, True
        elif self.recovering:
            if self.driving_from <= self.recovery_stamp or stamp < self.driving_from:
                self._command(stamp, 0.0, 0.0)  # the car backs out on its own; keep its clock going
                return
            self.recovering, self.after_recovery = False, True
        with self.core_lock:
            if self.core.in_episode and self.core.waiting_for_learner():
                self.learner_waits += 1
                return
            try:
                action = self._step(stamp, frame, sensors, event)
            except ValueError as exc:  # a frame of the wrong size: skip it, the car's watchdog holds
                self.invalid_messages += 1
                self.get_logger().warning(f"observation not usable: {exc}", throttle_duration_sec=5.0)
                return
        if action is None:
            self._command(stamp, 0.0, 0.0)
        else:
            self.previous_action = action
            self._command(stamp, self.race.speed_offset + self.race.speed_scale * float(action[0]),
                          self.race.steer_scale * float(action[1]))
        with self.core_lock:  # a batch taken in this step is packed (on its thread) now that the command is out
            self.core.flush_if_due()

    def _step(self, stamp: int, frame: np.ndarray, sensors: dict, event: str | None) -> np.ndarray | None:
        """One ActorCore step (holding the core lock); None when the car is to recover or the run is over."""
        if not self.core.in_episode:
            if self.core.finished:
                return None
            self.core.start_episode()
            self.observer.reset(after_recovery=self.after_recovery)
            self.after_recovery, self.previous_action = False, np.zeros(2, np.float32)
        state = self.observer.state(frame, sensors, stamp * 1e-9, self.previous_action, event)
        if state["lap_time"] is not None and not self.core.evaluating:
            self.laps.append((self.core.train_steps + 1, float(state["lap_time"]), time.time()))
            self._save_practice()
        if event == "stuck":
            self.core.label("reset")  # being slow is not a terminal state: truncated
        result = self.core.step(state, None, stamp)
        if result.action is not None:
            return result.action
        self.events[event or "time_limit"] += 1
        self._save_practice()
        self._on_episode_end(result.episode)
        if event is not None or self.core.finished:
            return None
        return self._step(stamp, frame, sensors, None)  # a time limit: the next episode starts here

    def _save_practice(self) -> None:
        atomic_write_text(self.practice_path, json.dumps({"laps": self.laps, "events": self.events}))

    def _command(self, stamp: int, speed: float, steer: float) -> None:
        self.acted_stamp = stamp
        self.last_command = cmd_vel_msg(speed, steer)
        self.cmd_pub.publish(self.last_command)

    def _on_episode_end(self, episode) -> None:
        kind = "evaluation" if episode.evaluation else "training"
        self.get_logger().info(f"{kind} episode {episode.index}: return {episode.ret:.1f}, {len(self.laps)} laps "
                               f"so far, policy v{episode.policy_version}", throttle_duration_sec=5.0)
        if self.core.finished:
            self.draining_since = time.monotonic()

    # ---- learner link and reporting -----------------------------------------------------------

    def _send_due(self) -> None:
        self.link.send_due()
        if self.draining_since is not None:
            drained = self.core.unacknowledged == 0
            if drained or time.monotonic() - self.draining_since > self.params["drain_timeout_s"]:
                self._finish(drained)

    def summary(self) -> dict:
        return {**self.core.eval_summary(), "laps": self.laps, "events": self.events,
                "first_lap_step": self.laps[0][0] if self.laps else None,
                "best_lap_s": min((lap[1] for lap in self.laps), default=None),
                "transitions_sent": self.core.transitions_sent}

    def _finish(self, drained: bool) -> None:
        summary = self.summary() | {"transitions_acked_all": drained, "unacked_payloads": self.core.unacknowledged}
        path = self.run_dir / "eval.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2))
        self.get_logger().info(f"{len(self.laps)} clean laps, best {summary['best_lap_s']} s -> {path}")
        self.draining_since = None
        self.exit_code = 0 if drained else 3
        self.request_shutdown()

    def _publish_diagnostics(self) -> None:
        c = self.core
        self.diag_pub.publish(diagnostics(self, {
            "episodes": c.episode_index, "train_steps": c.train_steps, "policy_version": c.policy_version,
            "laps": len(self.laps), "best_lap_s": self.summary()["best_lap_s"] or 0.0, "recovering": self.recovering,
            "crashes": self.events["crash"], "stuck": self.events["stuck"], "evaluating": c.evaluating,
            "transitions_sent": c.transitions_sent, "payloads_acked": c.acked, "outbox_pending": len(c.outbox),
            "sync_dropped": self.sync.dropped, "invalid_messages": self.invalid_messages + self.link.rejected,
            "learner_waits": self.learner_waits, "learner_updates_seen": c.learner_updates}, *self.link.health()))

    def close(self) -> None:
        self.link.close()


def main(args=None) -> NoReturn:
    run_node(CarActorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
