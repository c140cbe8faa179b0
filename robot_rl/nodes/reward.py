"""Reward node: camera images and a language goal in, dense progress rewards out (VLAC-style).

Subscribes
    <cam>/color/image_raw   sensor_msgs/Image rgb8, SENSOR QoS (as the actor), for each of `cameras`;
                            the cameras' frames are paired by header stamp (within stamp_tolerance_s)
    task/goal               std_msgs/String, reliable + transient local (qos.LATCHED): the goal
                            sentence; publishers must be transient local too (``ros2 topic pub
                            --qos-durability transient_local``). A different goal starts a new episode.
    teleop/event            std_msgs/String (qos.EVENTS): "reset" and "rerecord" start a new episode
    episode/event           std_msgs/Header (qos.EVENTS): frame_id "start" starts a new episode whose first
                            frame is the first stamped at or after header.stamp (frames of the old
                            episode still arriving are scored in it; stamp 0: the next frame; a start
                            at or before the current episode's first frame changes nothing). This topic is
                            an addition to DESIGN.md's topic table: whoever knows when an episode
                            begins (the actor after a reset, a script) announces it here.

A new episode forgets the first frame, the frame scored last, the accumulated value and the done
count; the next paired frame becomes the episode's first frame (not scored itself: it is what
progress is measured from).

Publishes
    reward                  geometry_msgs/Vector3Stamped (qos.EVENTS: reliable, keep last 100), one
                            per scored observation; header.stamp = the stamp of the observation it
                            scores; x = reward (reward_scale * progress delta), y = the episode's
                            accumulated value (v <- v + (1 - v) delta), z = done probability;
                            header.frame_id = "late" when it went out more than max_latency_s after the
                            observation's stamp by this node's clock (set use_sim_time with a
                            simulator), else "": the learner relabels late rewards
    reward/done             std_msgs/Header, once per episode, after done_consecutive scored frames
                            in a row with done probability >= the done threshold; stamp = the
                            observation that completed them (the actor ends the episode there),
                            frame_id "done"
    /diagnostics            counts (frames received / rejected by reason / unmatched / paired /
                            skipped / scored), late rewards, scoring and stamp-to-publish latency
                            (mean, p99 in ms), the current value; WARN without a goal or with late
                            rewards, ERROR when the model failed to load (the node then exits 1)

Scoring runs on a worker thread: the image callback only checks, pairs and hands the newest set
to a depth-1 slot (robot_rl.rewards.online), so a slow model never blocks the executor; sets the
worker had no time for are counted as skipped. All logic lives in `robot_rl.rewards.online`.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import Vector3Stamped
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import Image
from std_msgs.msg import Header, String

from robot_rl.config_fields import config_from_params
from robot_rl.device import resolve_device
from robot_rl.rewards.backends import check_model_path, load_backend
from robot_rl.rewards.online import RewardConfig, RewardResult, RewardStream, ScoringWorker
from robot_rl.ros import qos
from robot_rl.ros.messages import ns_to_stamp, stamp_to_ns
from robot_rl.ros.node_utils import Param, ParameterError, declare_params, diagnostics, params_from_dataclass, run_node
from robot_rl.ros.reward_io import EPISODE_EVENTS, feed_image

PARAMS = [
    *params_from_dataclass(RewardConfig),
    Param("torch_threads", 0, "Torch CPU threads for scoring; 0: torch's default.", 0, 256),
    Param("diagnostics_period_s", 1.0, "Period of /diagnostics.", 0.05, 60.0),
]

_OK, _WARN, _ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR
FAILED_DIAGNOSTICS = 3
"""/diagnostics ERROR messages published after a failed model load before the node exits."""


class RewardNode(Node):
    def __init__(self):
        super().__init__("reward")
        p = self.params = declare_params(self, PARAMS)
        try:
            self.config = config_from_params(RewardConfig, p)
            check_model_path(p["backend"], p["model_path"])
            self.device = resolve_device(p["device"])
        except ValueError as exc:
            raise ParameterError(f"reward: {exc}") from None
        if p["torch_threads"] > 0:
            import torch

            torch.set_num_threads(p["torch_threads"])
        self.stream = RewardStream(self.config, now_ns=lambda: self.get_clock().now().nanoseconds)
        self.reward_pub = self.create_publisher(Vector3Stamped, "reward", qos.EVENTS)
        self.done_pub = self.create_publisher(Header, "reward/done", qos.EVENTS)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        # Goal and episode events first: the executor takes ready messages in subscription order, so
        # a start that is waiting is applied before camera frames that arrived with it.
        self.create_subscription(String, "task/goal", self._on_goal, qos.LATCHED)
        for topic, starts in EPISODE_EVENTS.items():
            msg_type = Header if topic == "episode/event" else String
            self.create_subscription(msg_type, topic, lambda m, t=topic, s=starts: self._on_event(t, s, m), qos.EVENTS)
        for camera in self.config.cameras:
            self.create_subscription(Image, f"{camera}/color/image_raw",
                                     lambda m, c=camera: self._on_image(c, m), qos.SENSOR)
        self.events: dict[str, int] = {}
        self.rewards_published = 0
        self._reported = {"late": 0, "score_errors": 0, "rejected": 0}
        self._failed_diagnostics = 0
        self.worker = ScoringWorker(self.stream, self._load, self._publish, self._on_load_error).start()
        # Diagnostics on wall time: they go on while a simulator's /clock stands still.
        self.create_timer(p["diagnostics_period_s"], self._publish_diagnostics,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        goal = f"goal {self.config.goal!r}" if self.config.goal else "no goal yet (waiting on task/goal)"
        self.get_logger().info(f"loading the {p['backend']} model from {p['model_path']} on {self.device}; "
                               f"cameras {list(self.config.cameras)}; {goal}")

    # ---- worker thread ---------------------------------------------------------------------------

    def _load(self):
        backend = load_backend(self.config.backend, self.config.model_path, self.device, self.config.cameras)
        self.get_logger().info(f"scoring with the {backend.description} (done threshold "
                               f"{self.config.done_threshold or backend.done_threshold})")
        return backend

    def _on_load_error(self, message: str) -> None:
        self.get_logger().error(message)

    def _publish(self, result: RewardResult) -> None:
        msg = Vector3Stamped()
        msg.header.stamp = ns_to_stamp(result.stamp_ns)
        msg.header.frame_id = "late" if result.late else ""
        msg.vector.x, msg.vector.y, msg.vector.z = result.reward, result.value, result.done_probability
        self.reward_pub.publish(msg)
        self.rewards_published += 1
        if result.done:
            self.done_pub.publish(Header(stamp=ns_to_stamp(result.stamp_ns), frame_id="done"))
            self.get_logger().info(f"episode {result.episode} done (value {result.value:.3f})")

    # ---- executor --------------------------------------------------------------------------------

    def _on_image(self, camera: str, msg: Image) -> None:
        status = feed_image(self.stream, camera, msg)
        if status.startswith("rejected"):
            self.get_logger().warning(f"rejected an image ({self.stream.last_rejection})",
                                      throttle_duration_sec=5.0)

    def _on_goal(self, msg: String) -> None:
        try:
            changed = self.stream.set_goal(msg.data)
        except ValueError as exc:
            self.events["bad_goal"] = self.events.get("bad_goal", 0) + 1
            self.get_logger().warning(f"ignored task/goal: {exc}")
            return
        if changed:
            self.get_logger().info(f"goal {self.stream.goal!r}: new episode")

    def _on_event(self, topic: str, starts: tuple[str, ...], msg: String | Header) -> None:
        stamped = isinstance(msg, Header)
        event = (msg.frame_id if stamped else msg.data).strip()
        key = f"{topic.replace('/', '_')}_{event or 'empty'}"
        self.events[key] = self.events.get(key, 0) + 1
        if event in starts:
            start = stamp_to_ns(msg.stamp) if stamped else 0
            self.stream.new_episode(start or None)
            self.get_logger().info(f"{topic} {event!r}: a new episode starts with the next frame"
                                   + (f" stamped at or after {start}" if start else ""))
        elif topic == "episode/event":
            self.get_logger().warning(f"unknown episode/event {event!r}; known: {list(starts)}",
                                      throttle_duration_sec=5.0)

    def _publish_diagnostics(self) -> None:
        stats = self.stream.stats()
        values = {"backend": self.config.backend, "model_path": self.config.model_path, "device": self.device,
                  "cameras": ",".join(self.config.cameras), "model_loaded": self.stream.backend is not None,
                  **stats, "rewards_published": self.rewards_published,
                  "publish_errors": self.worker.publish_errors, **{f"event_{k}": n for k, n in self.events.items()}}
        new = {key: stats[stat] - self._reported[key] for key, stat in
               (("late", "rewards_late"), ("score_errors", "score_errors"), ("rejected", "frames_rejected"))}
        self._reported = {"late": stats["rewards_late"], "score_errors": stats["score_errors"],
                          "rejected": stats["frames_rejected"]}
        if self.stream.load_error:
            level, message = _ERROR, f"model failed to load: {self.stream.load_error}"
        elif self.stream.backend is None:
            level, message = _WARN, f"loading the {self.config.backend} model"
        elif self.stream.needs_goal and not self.stream.goal:
            level, message = _WARN, "no goal yet: frames are not scored (publish one on task/goal)"
        elif new["late"]:
            level, message = _WARN, f"{new['late']} reward(s) late (> {self.config.max_latency_s} s after the frame)"
        elif new["score_errors"]:
            level, message = _WARN, f"{new['score_errors']} scoring error(s): {stats['last_score_error']}"
        elif new["rejected"]:
            level, message = _WARN, f"{new['rejected']} image(s) rejected: {stats['last_rejection']}"
        elif not stats["frames_received"]:
            level, message = _OK, "waiting for frames"
        else:
            level, message = _OK, "scoring"
        self.diag_pub.publish(diagnostics(self, values, level, message))
        if self.stream.load_error:
            self._failed_diagnostics += 1
            if self._failed_diagnostics >= FAILED_DIAGNOSTICS:
                print(f"[robot_rl] reward: {self.stream.load_error}", file=sys.stderr, flush=True)
                self.exit_code = 1
                self.request_shutdown()

    def close(self) -> None:
        self.worker.stop()


def main(args=None) -> NoReturn:
    run_node(RewardNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
