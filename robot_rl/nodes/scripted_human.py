"""Scripted human node: a simulated person at a gamepad, for HIL sessions in simulation.

Watches the arm (`joint_states`, `arm/ee_pose`, `cube/pose`) and what the actor executes
(`arm/cmd`, `arm/gripper`) and the episodes' starts (`episode/event`: the person lets go at a reset);
after each executed command it judges the policy with the task's scripted expert
(`robot_rl.teleop.scripted_gamepad.ScriptedGamepad`) and publishes the gamepad's state on `joy`
(`sensor_msgs/Joy`) at `rate_hz` and on every change, as the `joy` package's joy_node does.
Run the teleop node with `device:=joy` next to it: interventions then travel the same path as a
real person's (teleop node, arbitration, actor, learner), so they are tested and measured end to end.
"""

from __future__ import annotations

import time
from functools import partial
from typing import NoReturn

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import TwistStamped
from rclpy.node import Node
from sensor_msgs.msg import Joy
from std_msgs.msg import Bool, Float32, Header

from robot_rl.config_fields import config_from_params
from robot_rl.robots.arm.sim import ArmSimConfig
from robot_rl.ros import qos
from robot_rl.ros.arm_io import STATE_TOPICS, msgs_to_action, msgs_to_state
from robot_rl.ros.node_utils import Param, ParameterError, declare_params, diagnostics, params_from_dataclass, \
    run_node
from robot_rl.tasks import get_task, task_names
from robot_rl.teleop.mapping import load_mapping
from robot_rl.teleop.scripted_gamepad import ScriptedGamepad
from robot_rl.teleop.scripted_human import InterventionConfig, ScriptedIntervener

PARAMS = [
    Param("task", "arm_lift", "Task whose scripted expert the person follows.", choices=task_names()),
    Param("mapping", "teleop_gamepad", "Gamepad mapping (joy section) the person's hands produce; the teleop "
          "node must read the same one."),
    Param("rate_hz", 50.0, "Rate of joy messages (joy_node's autorepeat).", 1.0, 1000.0),
    *params_from_dataclass(ArmSimConfig, only=("action_scale", "control_hz")),
    *params_from_dataclass(InterventionConfig),
    Param("expert_gain", 0.5, "Gain of the arm expert the person follows: below 1 it tolerates the step of "
          "reaction latency a person (scripted or not) has.", 0.05, 1.0),
    Param("label_success", False, "Press the success button when the state shows success (tasks whose "
          "episodes do not end on success by themselves, as on a real robot)."),
    Param("seed", 0, "Random seed.", 0, 2**31 - 1),
]


class ScriptedHumanNode(Node):
    def __init__(self):
        super().__init__("scripted_human")
        p = self.params = declare_params(self, PARAMS)
        task = get_task(p["task"])
        if task.expert is None or task.action_dim != 4:
            raise ParameterError(f"scripted_human: task {task.name} has no scripted arm expert")
        try:
            mapping = load_mapping(p["mapping"], "joy")
        except ValueError as exc:
            raise ParameterError(f"scripted_human: {exc}") from None
        expert = partial(task.expert, gain=p["expert_gain"])
        intervener = ScriptedIntervener(expert, config_from_params(InterventionConfig, p))
        # A task that ends its episodes on success needs no label (one would reach the next episode).
        success = task.success if p["label_success"] and not task.terminate_on_success else None
        self.gamepad = ScriptedGamepad(intervener, mapping, np.random.default_rng(p["seed"]), success)
        self.state_msgs: dict[str, object] = {}
        self.gripper = 0.0
        self.steps = self.invalid = 0
        self.joy_pub = self.create_publisher(Joy, "joy", 10)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        for topic, msg_type in STATE_TOPICS:
            self.create_subscription(msg_type, topic, lambda m, t=topic: self.state_msgs.__setitem__(t, m), qos.SENSOR)
        # The actor publishes arm/gripper just before arm/cmd: the command completes the step.
        self.create_subscription(Float32, "arm/gripper", self._on_gripper, qos.COMMAND)
        self.create_subscription(TwistStamped, "arm/cmd", self._on_command, qos.COMMAND)
        self.create_subscription(Bool, "teleop/engaged", self._on_teleop_engaged, qos.COMMAND)
        self.create_subscription(Header, "episode/event", self._on_episode_event, qos.EVENTS)
        self.create_timer(1.0 / p["rate_hz"], self._publish_joy)
        self.create_timer(1.0, self._publish_diagnostics)

    def _on_gripper(self, msg: Float32) -> None:
        self.gripper = float(msg.data)

    def _on_command(self, msg: TwistStamped) -> None:
        if len(self.state_msgs) < len(STATE_TOPICS):
            return
        try:
            state = msgs_to_state(*(self.state_msgs[t] for t, _ in STATE_TOPICS))
            action = msgs_to_action(msg, self.gripper, self.params["action_scale"], self.params["control_hz"])
        except ValueError as exc:
            self.invalid += 1
            self.get_logger().warning(f"cannot judge this step: {exc}", throttle_duration_sec=5.0)
            return
        before = (self.gamepad.axes, self.gamepad.buttons)
        self.steps += 1
        if self.gamepad.step(state, action) != before:
            self._publish_joy()  # a hand moves at once, not at the next autorepeat

    def _on_teleop_engaged(self, msg: Bool) -> None:
        if self.gamepad.teleop_engaged(bool(msg.data), time.monotonic()):
            self._publish_joy()  # the hands let go at once

    def _on_episode_event(self, msg: Header) -> None:
        if msg.frame_id == "start":  # the actor announces the reset before it asks for it
            before = (self.gamepad.axes, self.gamepad.buttons)
            self.gamepad.new_episode()
            if (self.gamepad.axes, self.gamepad.buttons) != before:
                self._publish_joy()

    def _publish_joy(self) -> None:
        msg = Joy()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.axes, msg.buttons = self.gamepad.axes, self.gamepad.buttons
        self.joy_pub.publish(msg)

    def _publish_diagnostics(self) -> None:
        g = self.gamepad
        self.diag_pub.publish(diagnostics(self, {
            "steps_judged": self.steps, "takeovers": g.takeovers, "regrips": g.regrips, "success_labels": g.labels,
            "intervening": g.intervening,
            "intervention_steps": g.intervener.intervention_steps,
            "takeover_probability": round(g.intervener.takeover_probability, 4), "invalid": self.invalid}))


def main(args=None) -> NoReturn:
    run_node(ScriptedHumanNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
