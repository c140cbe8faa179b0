"""Arm state and commands <-> standard ROS messages, in one place for the sim node, the real
arm node and the actor, so what a robot publishes is exactly what the actor rebuilds.

Topics: `joint_states` (JointState: arm joints plus a `gripper` joint whose position is
the finger opening in metres), `arm/ee_pose` and `cube/pose` (PoseStamped, world frame),
`arm/cmd` (TwistStamped: end-effector linear velocity in m/s, stamped with the
observation it answers) and `arm/gripper` (Float32: 0 open .. 1 closed).
"""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped
from sensor_msgs.msg import JointState
from std_msgs.msg import Float32

from robot_rl.robots.arm.sim import ArmSimConfig
from robot_rl.ros import qos
from robot_rl.ros.messages import ns_to_stamp
from robot_rl.ros.node_utils import params_from_dataclass
from robot_rl.teleop.takeover import human_action

GRIPPER_JOINT = "gripper"
STATE_TOPICS = (("joint_states", JointState), ("arm/ee_pose", PoseStamped), ("cube/pose", PoseStamped))
"""The topics (and message types) `msgs_to_state` rebuilds the arm's state from, in its argument order."""
WORLD_FRAME = "world"


def _pose(stamp_ns: int, pos: np.ndarray, quat_wxyz: np.ndarray) -> PoseStamped:
    msg = PoseStamped()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id = WORLD_FRAME
    p, q = msg.pose.position, msg.pose.orientation
    p.x, p.y, p.z = (float(v) for v in pos)
    q.w, q.x, q.y, q.z = (float(v) for v in quat_wxyz)
    return msg


def state_to_msgs(state: dict[str, np.ndarray], joint_names: list[str], stamp_ns: int
                  ) -> tuple[JointState, PoseStamped, PoseStamped]:
    joints = JointState()
    joints.header.stamp = ns_to_stamp(stamp_ns)
    joints.name = [*joint_names, GRIPPER_JOINT]
    joints.position = [*map(float, state["joint_pos"]), float(state["gripper"][0])]
    joints.velocity = [*map(float, state["joint_vel"]), 0.0]
    return joints, _pose(stamp_ns, state["ee_pos"], state["ee_quat"]), _pose(stamp_ns, state["cube_pos"],
                                                                              state["cube_quat"])


def _pose_arrays(msg: PoseStamped, what: str) -> tuple[np.ndarray, np.ndarray]:
    p, q = msg.pose.position, msg.pose.orientation
    pos = np.array([p.x, p.y, p.z])
    quat = np.array([q.w, q.x, q.y, q.z])
    if not (np.isfinite(pos).all() and np.isfinite(quat).all()):
        raise ValueError(f"{what} pose contains NaN or Inf")
    return pos, quat


def msgs_to_state(joints: JointState, ee_pose: PoseStamped, cube_pose: PoseStamped, num_arm_joints: int = 7
                  ) -> dict[str, np.ndarray]:
    """Rebuilds the task's state dict; raises ValueError on malformed messages."""
    names = list(joints.name)
    if GRIPPER_JOINT not in names or len(names) != num_arm_joints + 1:
        raise ValueError(f"joint_states must name {num_arm_joints} arm joints and {GRIPPER_JOINT!r}, got {names}")
    if len(joints.position) != len(names) or len(joints.velocity) != len(names):
        raise ValueError("joint_states position/velocity lengths do not match its names")
    pos, vel = np.asarray(joints.position, float), np.asarray(joints.velocity, float)
    if not (np.isfinite(pos).all() and np.isfinite(vel).all()):
        raise ValueError("joint_states contains NaN or Inf")
    g = names.index(GRIPPER_JOINT)
    arm = [i for i in range(len(names)) if i != g]
    ee_pos, ee_quat = _pose_arrays(ee_pose, "end-effector")
    cube_pos, cube_quat = _pose_arrays(cube_pose, "cube")
    return {"joint_pos": pos[arm], "joint_vel": vel[arm], "gripper": pos[[g]], "ee_pos": ee_pos,
            "ee_quat": ee_quat, "cube_pos": cube_pos, "cube_quat": cube_quat}


def action_to_msgs(action: np.ndarray, stamp_ns: int, action_scale: float, control_hz: float
                   ) -> tuple[TwistStamped, Float32]:
    """Normalised action [dx, dy, dz, grip] in [-1, 1] -> EE velocity (m/s) and gripper closure."""
    twist = TwistStamped()
    twist.header.stamp = ns_to_stamp(stamp_ns)
    twist.header.frame_id = WORLD_FRAME
    v = np.clip(action[:3], -1.0, 1.0) * action_scale * control_hz
    twist.twist.linear.x, twist.twist.linear.y, twist.twist.linear.z = (float(x) for x in v)
    return twist, Float32(data=float((np.clip(action[3], -1.0, 1.0) + 1.0) / 2.0))


def msgs_to_action(twist: TwistStamped, gripper: float, action_scale: float, control_hz: float) -> np.ndarray:
    """Inverse of action_to_msgs, clamped to the action box; raises ValueError on NaN/Inf."""
    lin = twist.twist.linear
    v = np.array([lin.x, lin.y, lin.z, gripper], dtype=float)
    if not np.isfinite(v).all():
        raise ValueError("arm command contains NaN or Inf")
    action = np.empty(4, dtype=np.float32)
    action[:3] = np.clip(v[:3] / (action_scale * control_hz), -1.0, 1.0)
    action[3] = np.clip(2.0 * v[3] - 1.0, -1.0, 1.0)
    return action


ACTOR_PARAMS = params_from_dataclass(ArmSimConfig, only=("action_scale", "control_hz"))
"""The arm actor's own parameters, the simulator's settings (the velocity commands scale by both);
`ros/actor_node.py: actor_params` adds the shared ones."""


COMMAND_TOPICS = (("arm/cmd", TwistStamped), ("arm/gripper", Float32))
"""The arm's commands: the twist, stamped with the observation it answers, and the gripper, sent just before it."""


class ArmTopics:
    """What the arm's actor reads and sends, decoded without a node: its state from `STATE_TOPICS`, its action
    from `COMMAND_TOPICS` (the actor node's I/O, and bags: `robot_rl/ros/bag_import.py`)."""

    state_topics = STATE_TOPICS
    command_topics = COMMAND_TOPICS
    params = ACTOR_PARAMS

    def __init__(self, params: dict, task):
        self.action_scale, self.control_hz = params["action_scale"], params["control_hz"]
        self.action_dim = task.action_dim

    def state(self, msgs: dict) -> dict[str, np.ndarray]:
        return msgs_to_state(*(msgs[topic] for topic, _ in STATE_TOPICS))

    def action(self, msgs: dict) -> np.ndarray:
        """The action the commands in `msgs` (topic -> message) carry; ValueError if malformed."""
        (twist, _), (gripper, _) = COMMAND_TOPICS
        return msgs_to_action(msgs[twist], msgs[gripper].data, self.action_scale, self.control_hz)


class ArmActorIO(ArmTopics):
    """The arm actor's robot I/O (`ros/actor_node.py: RobotActorIO`): state from `STATE_TOPICS`, commands on
    `arm/cmd` and `arm/gripper`."""

    def __init__(self, node, params: dict, task):
        super().__init__(params, task)
        (twist, twist_type), (gripper, gripper_type) = COMMAND_TOPICS
        self.cmd_pub = node.create_publisher(twist_type, twist, qos.COMMAND)
        self.gripper_pub = node.create_publisher(gripper_type, gripper, qos.COMMAND)
        self.last: tuple[TwistStamped, Float32] | None = None

    def publish(self, action: np.ndarray, stamp_ns: int) -> None:
        self.last = action_to_msgs(action, stamp_ns, self.action_scale, self.control_hz)
        self.resend()

    def resend(self) -> None:
        twist, gripper = self.last
        self.gripper_pub.publish(gripper)  # first: the lockstep simulator steps on the twist
        self.cmd_pub.publish(twist)

    def hold(self, last_action: np.ndarray | None) -> np.ndarray:
        hold = np.zeros(self.action_dim, np.float32)
        # The gripper keeps what it holds; open after a reset.
        hold[3:] = last_action[3:] if last_action is not None else -1.0
        return hold

    def person_action(self, twist: np.ndarray, gripper: float) -> np.ndarray:
        return human_action(twist, gripper, self.action_dim)
