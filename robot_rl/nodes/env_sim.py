"""Any Gymnasium environment as a simulated robot (`env_sim`): it steps the environment of the run's env
task file through its adapter and publishes what a robot publishes (cameras as `sensor_msgs/Image`,
its state, reward, success and episode end, `/clock` in lockstep), takes the actor's commands on
`env/cmd` (topics: `robot_rl/ros/env_io.py`) and serves `~/reset`.

Clock modes (`ros/sim_time.py`, as every simulator's):
- `lockstep`: the environment steps when the command answering the current observation arrives.
- `realtime`: a wall-clock timer steps at the task's control rate with the latest command; a command
  older than `command_timeout_s` is replaced by holding (zero action, the gripper as last commanded).

After the environment ends an episode (terminated or truncated) it is not stepped again until
`~/reset`. A true `/estop` freezes the environment (no step, commands refused and counted) until
`~/reset_estop`.
"""

from __future__ import annotations

import time
from typing import NoReturn

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Vector3Stamped
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState

import robot_rl.envs  # noqa: F401 - registers ours (robot_rl/...), which an env task may name
from robot_rl.envs.adapter import make_canonical, seeded_reset
from robot_rl.ros import qos
from robot_rl.ros.env_io import (
    COMMAND_TOPIC,
    OUTCOME_TOPIC,
    RUNNING,
    STATE_TOPIC,
    TERMINATED,
    TRUNCATED,
    action_names,
    msg_vector,
    outcome_msg,
    state_names,
    vector_msg,
)
from robot_rl.ros.hardware_node import SimEstop
from robot_rl.ros.messages import image_to_msg, ns_to_stamp, stamp_to_ns
from robot_rl.ros.node_utils import Param, ParameterError, declare_params, diagnostics, run_node
from robot_rl.ros.sim_time import CLOCK_PARAMS, SimulatedTime
from robot_rl.tasks import EnvTaskFile

PARAMS = [
    Param("env_task", "", "The run's env task file (env_task.json: the environment, its options and adapter), "
          "written by `robot-rl train --env ID --graph`."),
    *CLOCK_PARAMS,
    Param("command_timeout_s", 0.3, "Realtime mode: hold when the last command is older.", 0.01, 10.0),
    Param("seed", 0, "Seed of the episodes' reset seeds (NumPy's global generator is seeded with each too).", 0,
          2**31 - 1),
]


class EnvSimNode(Node):
    def __init__(self):
        super().__init__("env_sim")
        p = self.params = declare_params(self, PARAMS)
        if not p["env_task"]:
            raise ParameterError("env_sim: env_task is required (the run's env_task.json)")
        try:
            self.task_file = EnvTaskFile.load(p["env_task"])
            adapter = self.task_file.make_adapter()
            self.env = make_canonical(self.task_file.env_id, self.task_file.env_kwargs, adapter=adapter,
                                      normalize=False)
        except (ValueError, ImportError) as exc:
            raise ParameterError(f"env_sim: {exc}") from None
        self.adapter = adapter
        self.state_names, self.action_names = state_names(adapter), action_names(adapter)
        self.rng = np.random.default_rng(p["seed"])
        self.last_cmd: tuple[np.ndarray, int, float] | None = None  # action, stamp it answers, wall time received
        self.counters = {"steps": 0, "resets": 0, "commands_received": 0, "rejected_commands": 0,
                         "stale_commands": 0, "commands_after_episode_end": 0, "estopped_commands": 0,
                         "republished": 0}
        self.state_pub = self.create_publisher(JointState, STATE_TOPIC, qos.SENSOR)
        self.outcome_pub = self.create_publisher(Vector3Stamped, OUTCOME_TOPIC, qos.SENSOR)
        self.image_pubs = {camera: self.create_publisher(Image, f"{camera}/color/image_raw", qos.SENSOR)
                           for camera in adapter.cameras}
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(JointState, COMMAND_TOPIC, self._on_cmd, qos.COMMAND_INPUT)
        self.estop = SimEstop(self, self.counters, "the environment is frozen")
        self.time = SimulatedTime(self, 1.0 / self.task_file.control_hz, p["clock_mode"] == "lockstep",
                                  p["republish_period_s"], self.counters, self._publish_observation,
                                  self._realtime_step, self._on_reset, tick_phase=p["tick_phase"])
        self.create_timer(1.0, lambda: self.diag_pub.publish(diagnostics(self, dict(self.counters))))
        self._reset_env()
        self.time.publish()

    # ---- commands -----------------------------------------------------------------------------

    def _on_cmd(self, msg: JointState) -> None:
        self.counters["commands_received"] += 1
        try:
            action = msg_vector(msg, self.action_names, COMMAND_TOPIC)
        except ValueError as exc:
            self.counters["rejected_commands"] += 1
            self.get_logger().warning(f"rejected command: {exc}", throttle_duration_sec=5.0)
            return
        if self.estop.active:
            self.counters["estopped_commands"] += 1
            return
        self.last_cmd = (np.clip(action, -1.0, 1.0), stamp_to_ns(msg.header.stamp), time.monotonic())
        if self.time.lockstep and self.last_cmd[1] == self.time.now_ns:  # else it answers an older observation: applied
            self._step(self.last_cmd[0])

    def _realtime_step(self) -> None:
        if self.estop.active:
            return
        cmd = self.last_cmd
        if cmd is None or time.monotonic() - cmd[2] > self.params["command_timeout_s"]:
            self.counters["stale_commands"] += int(cmd is not None)
            self._step(self.adapter.hold_action(cmd[0] if cmd is not None else None))
        else:
            self._step(cmd[0])

    def _step(self, action: np.ndarray) -> None:
        if self.end != RUNNING:  # the episode is over: nothing moves until ~/reset
            self.counters["commands_after_episode_end"] += 1
            return
        self.obs, reward, terminated, truncated, info = self.env.step(action)
        self.reward, self.success = reward, bool(info["is_success"])
        self.end = TERMINATED if terminated else TRUNCATED if truncated else RUNNING
        self.time.advance()
        self.counters["steps"] += 1
        self.time.publish()

    # ---- observations -------------------------------------------------------------------------

    def _publish_observation(self, stamp_ns: int) -> None:
        stamp = ns_to_stamp(stamp_ns)
        obs = self.obs if isinstance(self.obs, dict) else {"state": self.obs}
        for camera, pub in self.image_pubs.items():
            pub.publish(image_to_msg(obs[camera], stamp, f"{camera}_color_optical_frame"))
        self.outcome_pub.publish(outcome_msg(self.reward, self.success, self.end, stamp_ns))
        # Last: the actor takes a repeat of the state as "my command was lost".
        self.state_pub.publish(vector_msg(obs["state"], self.state_names, stamp_ns))

    # ---- reset --------------------------------------------------------------------------------

    def _reset_env(self) -> None:
        self.obs, _ = seeded_reset(self.env, int(self.rng.integers(2**31)))
        self.reward, self.success, self.end = 0.0, False, RUNNING

    def _on_reset(self) -> None:
        self._reset_env()
        self.last_cmd = None

    def close(self) -> None:
        self.env.close()


def main(args=None) -> NoReturn:
    run_node(EnvSimNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
