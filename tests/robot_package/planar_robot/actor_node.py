"""The planar arm's actor node (`planar_actor`): robot_rl's actor node (`robot_rl.ros.actor_node`) over the
planar arm's topics. Everything an actor does (the policy, transitions to the learner and their outbox, a
person's takeover, evaluation) is robot_rl's; this file says only what the robot's state and commands are."""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import PointStamped
from sensor_msgs.msg import JointState

from planar_robot.topics import COMMAND_TOPIC, JOINTS_TOPIC, TARGET_TOPIC, command_msg, msgs_to_state
from robot_rl.ros import qos
from robot_rl.ros.actor_node import ActorNode, actor_params
from robot_rl.ros.node_utils import run_node

PARAMS = actor_params("planar_reach", "/planar_sim/reset", [])


class PlanarActorIO:
    """robot_rl.ros.actor_node.RobotActorIO for the planar arm."""

    state_topics = ((JOINTS_TOPIC, JointState), (TARGET_TOPIC, PointStamped))

    def __init__(self, node, params: dict, task):
        self.cmd_pub = node.create_publisher(JointState, COMMAND_TOPIC, qos.COMMAND)
        self.last: JointState | None = None

    def state(self, msgs: dict) -> dict[str, np.ndarray]:
        return msgs_to_state(msgs[JOINTS_TOPIC], msgs[TARGET_TOPIC])

    def publish(self, action: np.ndarray, stamp_ns: int) -> None:
        self.last = command_msg(action, stamp_ns)
        self.resend()

    def resend(self) -> None:
        self.cmd_pub.publish(self.last)

    def hold(self, last_action: np.ndarray | None) -> np.ndarray:
        return np.zeros(2, np.float32)

    def person_action(self, twist: np.ndarray, gripper: float) -> np.ndarray:
        """A person's linear x and y drive the shoulder and the elbow."""
        return np.clip(np.asarray(twist[:2], np.float32), -1.0, 1.0)


def main(args=None) -> int:
    return run_node(lambda: ActorNode("planar_actor", PARAMS, PlanarActorIO), args)


if __name__ == "__main__":
    raise SystemExit(main())
