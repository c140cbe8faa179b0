"""A Gymnasium environment's state, outcome and commands <-> standard ROS messages, in one place for the
`env_sim` node and the `env_actor` node, so what the simulator publishes is exactly what the actor rebuilds.

An environment has no fixed kinematics to put in a Twist or a Pose, so its vectors travel in the
standard stamped vector message, `sensor_msgs/JointState` (one named entry per value in `position`):

* `env/state` (JointState): the environment's state entries as its adapter declares them
  (`robot_rl/envs/adapter.py`), raw (the actor normalises them with the adapter saved in the run);
  one name per value, `key` or `key[i]`.
* `env/outcome` (Vector3Stamped, the same stamp): x the reward of the step that reached this
  observation, y success (1 or 0), z how the episode goes on: 0 running, 1 terminated, 2 truncated by
  the environment.
* `env/cmd` (JointState, stamped with the observation it answers): the agent's action in [-1, 1], one
  name per entry. Cameras are `<camera>/color/image_raw` as for every robot.
"""

from __future__ import annotations

import math

import numpy as np
from geometry_msgs.msg import Vector3Stamped
from sensor_msgs.msg import JointState

from robot_rl.envs.adapter import EnvAdapter
from robot_rl.ros import qos
from robot_rl.ros.messages import ns_to_stamp
from robot_rl.ros.node_utils import Param
from robot_rl.tasks import EnvTaskFile

STATE_TOPIC, OUTCOME_TOPIC, COMMAND_TOPIC = "env/state", "env/outcome", "env/cmd"
RUNNING, TERMINATED, TRUNCATED = 0, 1, 2
"""Values of `env/outcome`'s z."""


def _names(keys: list[str], sizes: list[int]) -> list[str]:
    return [key if size == 1 else f"{key}[{i}]" for key, size in zip(keys, sizes) for i in range(size)]


def state_names(adapter: EnvAdapter) -> list[str]:
    """One name per state value: `key` for a single value, `key[i]` for a vector's entries."""
    return _names(adapter.state_keys, adapter.state_sizes)


def action_names(adapter: EnvAdapter) -> list[str]:
    """One name per entry of the agent's action (the environment's action entries, flattened)."""
    return _names([entry.path or "action" for entry in adapter.actions], [entry.size for entry in adapter.actions])


def vector_msg(values: np.ndarray, names: list[str], stamp_ns: int) -> JointState:
    msg = JointState()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.name = list(names)
    msg.position = np.asarray(values, np.float64).ravel().tolist()
    return msg


def msg_vector(msg: JointState, names: list[str], what: str) -> np.ndarray:
    """The values of a `vector_msg`, checked: the names expected, one finite value each (ValueError otherwise)."""
    if list(msg.name) != names:
        raise ValueError(f"{what} names {list(msg.name)[:8]} do not match the environment's {names[:8]}")
    values = np.asarray(msg.position, np.float64)
    if values.shape != (len(names),):
        raise ValueError(f"{what} has {values.size} values for {len(names)} names")
    if not np.isfinite(values).all():
        raise ValueError(f"{what} contains NaN or Inf")
    return values


def outcome_msg(reward: float, success: bool, end: int, stamp_ns: int) -> Vector3Stamped:
    msg = Vector3Stamped()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.vector.x, msg.vector.y, msg.vector.z = float(reward), float(bool(success)), float(end)
    return msg


def msgs_to_state(state: JointState, outcome: Vector3Stamped, names: list[str]) -> dict[str, np.ndarray]:
    """The env task's state dict (tasks.py: EnvTaskFile.task): raw state, reward, success, terminated,
    truncated; ValueError on malformed messages."""
    values = msg_vector(state, names, STATE_TOPIC)
    v = outcome.vector
    if not math.isfinite(v.x):
        raise ValueError(f"{OUTCOME_TOPIC} reward is {v.x}")
    if v.y not in (0.0, 1.0) or v.z not in (RUNNING, TERMINATED, TRUNCATED):
        raise ValueError(f"{OUTCOME_TOPIC} success {v.y} must be 0 or 1 and end {v.z} one of 0, 1, 2")
    return {"state": values.astype(np.float32), "reward": np.float32(v.x), "success": v.y == 1.0,
            "terminated": v.z == TERMINATED, "truncated": v.z == TRUNCATED}


ACTOR_PARAMS = [Param("env_task", "", "The run's env task file (env_task.json), written by `robot-rl train --env ID "
                      "--graph`.")]
"""The env actor's own parameter (`ros/actor_node.py: actor_params` adds the shared ones)."""


class EnvActorIO:
    """The env actor's robot I/O (`ros/actor_node.py: RobotActorIO`): state from `env/state` and
    `env/outcome`, commands on `env/cmd`, a person's device mapped by the adapter's `teleop_axes`."""

    state_topics = ((STATE_TOPIC, JointState), (OUTCOME_TOPIC, Vector3Stamped))

    def __init__(self, node, params: dict, task):
        self.adapter = EnvTaskFile.load(params["env_task"]).make_adapter()
        self.state_names, self.action_names = state_names(self.adapter), action_names(self.adapter)
        self.cmd_pub = node.create_publisher(JointState, COMMAND_TOPIC, qos.COMMAND)
        self.logger = node.get_logger()
        self.last: JointState | None = None

    def state(self, msgs: dict) -> dict[str, np.ndarray]:
        return msgs_to_state(msgs[STATE_TOPIC], msgs[OUTCOME_TOPIC], self.state_names)

    def publish(self, action: np.ndarray, stamp_ns: int) -> None:
        self.last = vector_msg(np.clip(action, -1.0, 1.0), self.action_names, stamp_ns)
        self.resend()

    def resend(self) -> None:
        self.cmd_pub.publish(self.last)

    def hold(self, last_action: np.ndarray | None) -> np.ndarray:
        return self.adapter.hold_action(last_action)

    def person_action(self, twist: np.ndarray, gripper: float) -> np.ndarray | None:
        """None (the policy drives, said once in the log) when the adapter does not say what the device drives."""
        try:
            return self.adapter.person_action(twist, gripper)
        except ValueError as exc:
            self.logger.error(f"a person's command is ignored: {exc}", once=True)
            return None
