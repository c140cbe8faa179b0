"""Simulated juggling quadrotor: publishes what motion capture gives the real `quadrotor` node and
obeys the same `quad/cmd_ctbr` contract (validated by the same functions, frames and limits from
the same hardware YAML), with the rate controller, mixer and motor model inside the physics.

Publishes `quad/odom` (nav_msgs/Odometry) and `ball/pose` (PoseStamped), same stamp, conventions
in robot_rl/ros/quad_io.py; `/clock` in lockstep; `/diagnostics`. Subscribes `quad/cmd_ctbr`
(TwistStamped) and `/estop` (std_msgs/Bool, latched: the motors stop until `~/reset_estop`).
Service `~/reset` (std_srvs/Trigger): a new episode with a fresh randomization draw; the response
message is JSON `{"stamp_ns": <stamp of its first observation>}`.

Clock modes (as the arm's sim node): `lockstep` advances one 20 ms policy period when the
command answering the current observation arrives (republishing the observation when none comes);
`realtime` steps on a 50 Hz wall-clock timer with the latest command, and a command older than
`command_timeout_s` is replaced by a level hover command (counted `stale_commands`).
"""

from __future__ import annotations

import json
import time
from typing import NoReturn

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, TwistStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node

from robot_rl.robots.quad.control import GRAVITY
from robot_rl.robots.quad.physics import SimPhysics
from robot_rl.robots.quad.vec_env import JuggleCore
from robot_rl.robots.quad.links.config import load_quad_hardware
from robot_rl.hardware.safety import Rejected
from robot_rl.resources import package_path
from robot_rl.ros import qos
from robot_rl.ros.hardware_node import SimEstop
from robot_rl.ros.messages import stamp_to_ns
from robot_rl.ros.node_utils import Param, ParameterError, declare_params, diagnostics, run_node
from robot_rl.ros.quad_io import parse_ctbr, state_to_msgs
from robot_rl.ros.sim_time import CLOCK_PARAMS, SimulatedTime

PARAMS = [
    *CLOCK_PARAMS,
    Param("hardware", "px4_quad", "Hardware YAML whose command contract (frames, thrust and rate limits) the "
          "simulated quadrotor obeys, as the real node would."),
    Param("randomization", "sim/quad/randomization.yaml", "Randomization file drawn at every reset ('' for the "
          "nominal plant)."),
    Param("randomization_split", "eval", "Split (or shift) of the randomization file to draw from: train, eval, "
          "restitution_low, heldout_thrust, ..."),
    Param("ball_mass", 0.0, "Fix the ball mass [kg] (0: as drawn), e.g. 0.005.", 0.0, 1.0),
    Param("plant", "", "Plant parameters fixed in every draw, NAME=VALUE items separated by spaces (names as in "
          "the randomization file), e.g. 'restitution=0.65 ball_start_offset=0,0,0.8'."),
    Param("command_timeout_s", 0.1, "Realtime mode: hover level when the last command is older.", 0.01, 10.0),
    Param("seed", 0, "Random seed of the draws.", 0, 2**31 - 1),
]

HOVER = np.array([GRAVITY, 0.0, 0.0, 0.0])


def parse_plant(text: str) -> dict[str, float | list[float]]:
    """The `plant` parameter's NAME=VALUE items (ValueError naming a malformed one or an unknown name)."""
    from argparse import ArgumentTypeError

    from robot_rl.arguments import name_equals_numbers
    from robot_rl.robots.quad.vec_env import check_plant_overrides

    try:
        plant = dict(name_equals_numbers(item) for item in text.split())
    except ArgumentTypeError as exc:
        raise ValueError(f"plant: {exc}") from None
    check_plant_overrides(plant)
    return plant
MOTORS_OFF = np.zeros(4)


class QuadSimNode(Node):
    def __init__(self):
        super().__init__("quad_sim")
        p = self.params = declare_params(self, PARAMS)
        try:
            self.hw = load_quad_hardware(p["hardware"])
            randomization = package_path(p["randomization"]) if p["randomization"] else None
            overrides = parse_plant(p["plant"]) | ({"ball_mass": p["ball_mass"]} if p["ball_mass"] > 0 else {})
            self.core = JuggleCore(SimPhysics(), randomization=randomization, split=p["randomization_split"],
                                   overrides=overrides, seed=p["seed"], auto_reset=False)
        except (FileNotFoundError, ValueError) as exc:
            raise ParameterError(str(exc)) from None
        self.last_cmd: tuple[int, np.ndarray, float] | None = None  # answered stamp, ctbr, wall time
        self.counters = {"steps": 0, "resets": 0, "commands_received": 0, "rejected_commands": 0,
                         "clamped_commands": 0, "stale_commands": 0, "republished": 0, "hits": 0, "episode_hits": 0,
                         "episode_ended": 0, "estops": 0}
        self.rejected: dict[str, int] = {}
        self.odom_pub = self.create_publisher(Odometry, "quad/odom", qos.SENSOR)
        self.ball_pub = self.create_publisher(PoseStamped, "ball/pose", qos.SENSOR)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(TwistStamped, "quad/cmd_ctbr", self._on_cmd, qos.COMMAND_INPUT)
        self.estop = SimEstop(self, self.counters, "motors off")
        self.time = SimulatedTime(self, 1.0 / self.core.config.policy_hz, p["clock_mode"] == "lockstep",
                                  p["republish_period_s"], self.counters, self._publish_observation,
                                  self._realtime_step, self._on_reset, tick_phase=p["tick_phase"])
        self.create_timer(1.0, self._publish_diagnostics)
        self.core.reset()
        self.time.publish()

    # ---- commands -----------------------------------------------------------------------------

    def _on_cmd(self, msg: TwistStamped) -> None:
        self.counters["commands_received"] += 1
        try:
            thrust, rates, thrust_clamped, rates_clamped = parse_ctbr(msg, self.hw)
        except Rejected as exc:
            self.counters["rejected_commands"] += 1
            self.rejected[exc.reason] = self.rejected.get(exc.reason, 0) + 1
            self.get_logger().warning(f"rejected quad/cmd_ctbr: {exc}", throttle_duration_sec=5.0)
            return
        self.counters["clamped_commands"] += int(thrust_clamped or rates_clamped)
        stamp = stamp_to_ns(msg.header.stamp)
        self.last_cmd = (stamp, np.array([thrust, *rates]), time.monotonic())
        if self.time.lockstep and stamp == self.time.now_ns:  # a resend answers an older observation: applied
            self._step(self.last_cmd[1])

    def _realtime_step(self) -> None:
        cmd = self.last_cmd
        if cmd is None or time.monotonic() - cmd[2] > self.params["command_timeout_s"]:
            self.counters["stale_commands"] += int(cmd is not None)
            self._step(HOVER)
        else:
            self._step(cmd[1])

    def _step(self, ctbr: np.ndarray) -> None:
        command = MOTORS_OFF if self.estop.active else ctbr
        self.core.physics.step(command[None])
        state = self.core.physics.state()
        _, terminated, events = self.core.task.step(state, np.zeros((1, 4)))
        self.counters["hits"] += int(events["hit"][0])
        self.counters["episode_hits"] = int(self.core.task.hits[0])
        self.counters["episode_ended"] = int(terminated[0])
        self.time.advance()
        self.counters["steps"] += 1
        self.time.publish()

    # ---- observations -------------------------------------------------------------------------

    def _publish_observation(self, stamp_ns: int) -> None:
        odom, ball = state_to_msgs(self.core.physics.state(), 0, stamp_ns, self.hw.state_frame,
                                   self.hw.command_frame)
        self.ball_pub.publish(ball)
        self.odom_pub.publish(odom)

    def _publish_diagnostics(self) -> None:
        values = dict(self.counters)
        values.update(estopped=self.estop.active, rejected_by_reason=json.dumps(self.rejected),
                      restitution=round(float(self.core.plant["restitution"][0]), 3),
                      ball_mass=round(float(self.core.plant["ball_mass"][0]), 4))
        self.diag_pub.publish(diagnostics(self, values))

    def _on_reset(self) -> None:
        self.core.reset()
        self.last_cmd = None
        self.counters["episode_hits"] = self.counters["episode_ended"] = 0


def main(args=None) -> NoReturn:
    run_node(QuadSimNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
