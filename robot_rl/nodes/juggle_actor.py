"""Juggling actor: flies the quadrotor with the exported PPO policy at the observation rate (50 Hz).

Subscribes `quad/odom` and `ball/pose` (paired by stamp; validated by the real quadrotor node's
functions), publishes `quad/cmd_ctbr` stamped with the observation it answers. With
`follow_learner`, policies arriving on `rl/policy` (from the `ppo_learner` node; with a `run_dir`,
only those signed with its run secret) replace the loaded one at the next episode. The observation,
hit counting and termination are the training env's own (robot_rl/robots/quad/juggling.py): the
policy sees here what it saw in training, less the simulated noise; a policy with memory gets its window of
recent observations from the actor, which keeps it (restarted with each episode). An episode ends when the task
terminates (ball lost, crash) or after `max_episode_s`; the actor then calls `reset_service` and
starts the next. After `episodes` episodes it writes `<run_dir>/<node name>_summary.json` (hits per
episode) and exits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, TwistStamped
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from std_msgs.msg import UInt8MultiArray
from std_srvs.srv import Trigger

from robot_rl.agents.ppo import DeployedPolicy
from robot_rl.robots.quad.control import ctbr_from_action
from robot_rl.robots.quad.juggling import JuggleConfig, JuggleTask
from robot_rl.robots.quad.links.config import load_quad_hardware
from robot_rl.hardware.safety import Rejected
from robot_rl.resources import package_path
from robot_rl.ros import qos
from robot_rl.ros.messages import stamp_to_ns, uint8_multiarray_view
from robot_rl.ros.node_utils import (
    TORCH_THREADS,
    Param,
    ParameterError,
    declare_params,
    diagnostics,
    reset_stamp,
    run_node,
    set_torch_threads,
    timer_once,
)
from robot_rl.ros.quad_io import JuggleObserver, ctbr_to_msg, parse_ball, parse_odom
from robot_rl.ros.sync import StampSynchronizer
from robot_rl.transport.ppo_policy import decode_ppo_policy
from robot_rl.transport.secret import ensure_run_secret

PARAMS = [
    Param("policy_dir", "policies/quad_juggle", "Exported policy directory (policy.safetensors + card.json)."),
    Param("hardware", "px4_quad", "Hardware YAML naming the frames (state and command) of the messages."),
    Param("episodes", 0, "Stop after this many episodes (0: run until stopped).", 0, 1_000_000),
    Param("max_episode_s", 600.0, "End an episode after this much (simulated) time [s].", 0.1, 86400.0),
    Param("reset_service", "/quad_sim/reset", "Trigger service that starts a new episode ('' for none: a "
          "person resets the real robot and the next observation starts the episode)."),
    Param("run_dir", "", "Where the summary goes and the secret policies must be signed with ('' for none)."),
    Param("device", "cpu", "Torch device of the policy."),
    Param("follow_learner", False, "Fly the policies the ppo_learner publishes on rl/policy (from the next episode)."),
    TORCH_THREADS,
]


class JuggleActorNode(Node):
    def __init__(self):
        super().__init__("juggle_actor")
        p = self.params = declare_params(self, PARAMS)
        set_torch_threads(p["torch_threads"])
        try:
            self.hw = load_quad_hardware(p["hardware"])
            self.policy = DeployedPolicy.load(package_path(p["policy_dir"]), device=p["device"])
        except (FileNotFoundError, ValueError) as exc:
            raise ParameterError(str(exc)) from None
        self.stream = self.policy.stream(1)
        self.config = JuggleConfig()
        self.task = JuggleTask(1, self.config)
        self.observer = JuggleObserver()
        self.max_steps = int(round(p["max_episode_s"] * self.config.policy_hz))
        self.sync = StampSynchronizer(["odom", "ball"])
        self.in_episode = False
        self.resetting = False
        self.episode_start: int | None = None
        self.last_action = np.zeros((1, 4))
        self.acted_stamp = -1
        self.episode_hits: list[int] = []
        self.episode_steps: list[int] = []
        self.ended_by: list[str] = []
        self.invalid: dict[str, int] = {}
        self.cmd_pub = self.create_publisher(TwistStamped, "quad/cmd_ctbr", qos.COMMAND)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(Odometry, "quad/odom", lambda m: self._on_msg("odom", m), qos.SENSOR)
        self.create_subscription(PoseStamped, "ball/pose", lambda m: self._on_msg("ball", m), qos.SENSOR)
        self.next_policy: DeployedPolicy | None = None
        self.policy_version = 0
        self.invalid_policies = 0
        # With a run directory, only policies signed with the run's secret are flown.
        self.key = ensure_run_secret(p["run_dir"]) if p["follow_learner"] and p["run_dir"] else None
        if p["follow_learner"]:
            self.create_subscription(UInt8MultiArray, "rl/policy", self._on_policy, qos.POLICY)
        self.reset_client = self.create_client(Trigger, p["reset_service"]) if p["reset_service"] else None
        # Retries and diagnostics on wall time: with use_sim_time, a lockstep /clock stands still
        # until we command, so a sim-time timer would never fire.
        self.wall_clock = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(1.0, self._publish_diagnostics, clock=self.wall_clock)
        self._request_reset()

    def _on_policy(self, msg: UInt8MultiArray) -> None:
        try:
            policy = decode_ppo_policy(uint8_multiarray_view(msg), self.key, self.params["device"])
            if (policy.frame_dim, policy.action_dim) != (self.policy.frame_dim, self.policy.action_dim):
                raise ValueError(f"policy for {policy.frame_dim} -> {policy.action_dim}, "
                                 f"expected {self.policy.frame_dim} -> {self.policy.action_dim}")
        except ValueError as exc:
            self.invalid_policies += 1
            self.get_logger().warning(f"ignored a policy from rl/policy: {exc}", throttle_duration_sec=5.0)
            return
        self.next_policy = policy  # swapped in at the next episode: one policy per episode

    # ---- episodes -----------------------------------------------------------------------------

    def _request_reset(self) -> None:
        if self.reset_client is None:
            self.in_episode = False  # the next observation starts one
            return
        self.resetting = True
        if not self.reset_client.wait_for_service(timeout_sec=0.0):
            timer_once(self, 0.2, self._request_reset, self.wall_clock)
            return
        self.reset_client.call_async(Trigger.Request()).add_done_callback(self._on_reset_done)

    def _on_reset_done(self, future) -> None:
        response = future.result()
        self.episode_start = reset_stamp(response)
        if self.episode_start is None:
            self.get_logger().warning(f"reset failed ({response.message!r}); retrying")
            timer_once(self, 0.5, self._request_reset, self.wall_clock)
            return
        self.resetting = False
        self.in_episode = False  # the reset's observation starts it

    def _end_episode(self, reason: str) -> None:
        self.episode_hits.append(int(self.task.hits[0]))
        self.episode_steps.append(int(self.task.steps[0]))
        self.ended_by.append(reason)
        self.get_logger().info(f"episode {len(self.episode_hits)}: {self.episode_hits[-1]} hits in "
                               f"{self.episode_steps[-1] / self.config.policy_hz:.1f} s ({reason})")
        target = self.params["episodes"]
        if target and len(self.episode_hits) >= target:
            self._write_summary()
            self.request_shutdown()
            return
        self._request_reset()

    # ---- acting -------------------------------------------------------------------------------

    def _on_msg(self, name: str, msg) -> None:
        if self.resetting:
            return  # the reset's own observation is republished until answered
        stamp = stamp_to_ns(msg.header.stamp)
        complete = self.sync.add(name, stamp, msg)
        if complete is None:
            # a lockstep repeat of the observation we answered: our command went missing, resend it
            if name == "odom" and stamp == self.acted_stamp:
                self._publish(stamp)
            return
        stamp, msgs = complete
        if self.reset_client is not None and stamp < (self.episode_start or 0):
            return  # an observation of the previous episode still in flight
        try:
            pos, quat, vel, rates = parse_odom(msgs["odom"], self.hw)
            ball = parse_ball(msgs["ball"], self.hw)
            if not self.in_episode:
                self.observer.reset()
            state = self.observer.state(stamp, pos, quat, vel, rates, ball)
        except (Rejected, ValueError) as exc:
            reason = getattr(exc, "reason", "stamp")
            self.invalid[reason] = self.invalid.get(reason, 0) + 1
            self.get_logger().warning(f"invalid observation: {exc}", throttle_duration_sec=5.0)
            return
        if not self.in_episode:
            if self.next_policy is not None:
                self.policy, self.next_policy = self.next_policy, None
                self.stream = self.policy.stream(1)
                self.policy_version += 1
            self.stream.reset([0])
            self.task.reset([0], state)
            self.in_episode = True
        else:
            _, terminated, events = self.task.step(state, self.last_action)
            if terminated[0] or self.task.steps[0] >= self.max_steps:
                reason = next((r for r in ("ball_lost", "crash", "non_finite") if events[r][0]), "time_limit")
                self.in_episode = False
                self._end_episode(reason)
                return
        self.last_action = np.asarray(self.stream(self.task.observation(state)), dtype=np.float64).reshape(1, 4)
        self._publish(stamp)

    def _publish(self, stamp: int) -> None:
        self.acted_stamp = stamp
        self.cmd_pub.publish(ctbr_to_msg(ctbr_from_action(self.last_action[0]), stamp, self.hw.command_frame))

    # ---- reporting ----------------------------------------------------------------------------

    def summary(self) -> dict:
        hits = self.episode_hits
        return {"episodes": len(hits), "hits": hits, "mean_hits": float(np.mean(hits)) if hits else 0.0,
                "episode_s": [s / self.config.policy_hz for s in self.episode_steps], "ended_by": self.ended_by,
                "invalid_observations": self.invalid, "policy": str(package_path(self.params["policy_dir"])),
                "policy_version": self.policy_version, "invalid_policies": self.invalid_policies,
                "headline": f"juggling, {np.mean(hits) if hits else 0.0:.1f} hits per episode over {len(hits)} "
                            f"episodes (ended by {self.ended_by})"}

    def _write_summary(self) -> None:
        if self.params["run_dir"]:
            path = Path(self.params["run_dir"]) / f"{self.get_name()}_summary.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.summary(), indent=1))

    def _publish_diagnostics(self) -> None:
        s = self.summary()
        self.diag_pub.publish(diagnostics(self, {
            "episodes": s["episodes"], "mean_hits": s["mean_hits"], "hits_this_episode": int(self.task.hits[0]),
            "steps_this_episode": int(self.task.steps[0]), "invalid_observations": json.dumps(self.invalid),
            "sync_dropped": self.sync.dropped, "policy_version": self.policy_version,
            "invalid_policies": self.invalid_policies}))


def main(args=None) -> NoReturn:
    run_node(JuggleActorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
