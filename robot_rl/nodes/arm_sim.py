"""Simulated arm node (`arm_sim`; the old name `sim` works with a deprecation warning until 0.2.0):
publishes exactly what the real arm and cameras publish and obeys the same command topics, so the
actor cannot tell the two apart.

Clock modes:
- `lockstep` (training, CI): the simulation advances one control period when the command
  answering the current observation arrives, and publishes `/clock`; training runs as fast
  as the actor and simulator can go, not at wall-clock speed. If no command arrives within
  `republish_period_s`, the current observation is published again (best-effort sensor
  topics may drop a message; the actor answers a repeat by resending its command).
- `realtime` (people in the loop): a wall-clock timer steps at the control rate with the
  latest command; a command older than `command_timeout_s` is replaced by "hold still".
  Observations are stamped with simulated time (one period per step), or with the wall clock
  (`stamp_clock: wall`) as a robot's are, so that the actor pairs them with real cameras' frames
  (camera nodes in front of the actor instead of `publish_images`).

A true `/estop` (std_msgs/Bool) stops the arm where it is and holds it there, gripper included, whatever the
commands say (the steps are counted as `estopped_steps`), until `~/reset_estop`, as the real arm's node does.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import NoReturn

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, TwistStamped
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float32

from robot_rl.config_fields import config_from_params
from robot_rl.robots.arm.sim import ArmSim, ArmSimConfig
from robot_rl.robots.arm.pick_cube import ArmRandomizer, CommandDelay, read_sensors
from robot_rl.envs.randomization import Randomization
from robot_rl.resources import package_path
from robot_rl.ros import qos
from robot_rl.ros.arm_io import msgs_to_action, state_to_msgs
from robot_rl.ros.messages import image_to_msg, ns_to_stamp, stamp_to_ns
from robot_rl.ros.node_utils import (
    Param,
    ParameterError,
    declare_params,
    diagnostics,
    params_from_dataclass,
    run_node,
)
from robot_rl.ros.hardware_node import SimEstop
from robot_rl.ros.sim_time import CLOCK_PARAMS, SimulatedTime

PARAMS = [
    *CLOCK_PARAMS,
    *params_from_dataclass(ArmSimConfig),
    Param("publish_images", False, "Render and publish camera images."),
    Param("command_timeout_s", 0.3, "Realtime mode: hold still when the last command is older.", 0.01, 10.0),
    Param("stamp_clock", "simulated", "Realtime mode: stamp observations with simulated time or with the wall clock "
          "(as a robot does, to pair with real cameras' frames).", choices=["simulated", "wall"]),
    Param("randomization", "", "Domain randomization file drawn at every reset (e.g. sim/arm/randomization.yaml; "
          "'' for none): physics, appearance, action latency (each command runs that many ticks after it arrives, "
          "as in ArmPickCube) and proprioception noise (on the published end-effector pose, finger opening and "
          "joint velocities)."),
    Param("randomization_split", "train", "Split (or shift) of the randomization file to draw from: train, eval, "
          "dynamics_cube_mass, ..."),
    Param("seed", 0, "Random seed of the cube placement.", 0, 2**31 - 1),
    Param("reset_seeds_from", -1, "Each reset draws its scene from a seed of its own, the k-th reset's the k-th draw "
          "of a generator seeded with this, as `robot-rl eval --seed` draws its episodes: the same scenes through "
          "the graph as in one process (-1: every reset from one generator seeded with `seed`).", -1, 2**31 - 1),
    Param("viewer", "never", "Also show the scene in MuJoCo's own viewer window: always (refused without a "
          "display), auto (where a display can be opened, else a warning) or never. Over SSH use the session_view "
          "node's browser view.", choices=["never", "auto", "always"]),
]


VIEWER_CLOSE_TIMEOUT_S = 5.0
"""How long closing waits for MuJoCo's viewer thread to finish its last frame."""


class ArmSimNode(Node):
    def __init__(self):
        super().__init__("arm_sim")
        p = self.params = declare_params(self, PARAMS)
        self.sim = ArmSim(config_from_params(ArmSimConfig, {**p, "cameras": tuple(p["cameras"])},
                                             render=p["publish_images"]))
        self.rng = np.random.default_rng(p["seed"])
        self.reset_seeds = np.random.default_rng(p["reset_seeds_from"]) if p["reset_seeds_from"] >= 0 else None
        self.randomizer = ArmRandomizer(self.sim)
        self.randomization = None
        if p["randomization"]:
            try:
                self.randomization = Randomization.load(package_path(p["randomization"]))
                self.randomization.check_split(p["randomization_split"])
            except (FileNotFoundError, ValueError) as exc:
                raise ParameterError(f"randomization: {exc}") from None
        self.gripper_cmd = 0.0
        self.gripper_fresh = False
        self.delay = CommandDelay(0)
        self.sensor_noise = 0.0
        self.last_cmd: tuple[TwistStamped, float] | None = None  # message, wall time received
        self.counters = {"steps": 0, "resets": 0, "commands_received": 0, "rejected_commands": 0,
                         "stale_commands": 0, "republished": 0, "estopped_steps": 0}

        self.joint_pub = self.create_publisher(JointState, "joint_states", qos.SENSOR)
        self.ee_pub = self.create_publisher(PoseStamped, "arm/ee_pose", qos.SENSOR)
        self.cube_pub = self.create_publisher(PoseStamped, "cube/pose", qos.SENSOR)
        self.image_pubs = {}
        if p["publish_images"]:
            for cam in p["cameras"]:
                self.image_pubs[cam] = (self.create_publisher(Image, f"{cam}/color/image_raw", qos.SENSOR),
                                        self.create_publisher(CameraInfo, f"{cam}/color/camera_info", qos.SENSOR),
                                        self._camera_info(cam))
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(TwistStamped, "arm/cmd", self._on_cmd, qos.COMMAND_INPUT)
        self.create_subscription(Float32, "arm/gripper", self._on_gripper, qos.COMMAND_INPUT)
        self.estop = SimEstop(self, self.counters, "the arm holds where it stopped", on_stop=self.sim.stop_here)
        try:
            self.time = SimulatedTime(self, 1.0 / p["control_hz"], p["clock_mode"] == "lockstep",
                                      p["republish_period_s"], self.counters, self._publish_observation,
                                      self._realtime_step, self._on_reset, wall_stamps=p["stamp_clock"] == "wall",
                                      tick_phase=p["tick_phase"])
        except ValueError as exc:
            raise ParameterError(f"arm_sim: stamp_clock:=wall: {exc}") from None
        self.create_timer(1.0, lambda: self.diag_pub.publish(diagnostics(self, dict(self.counters))))
        self.viewer_threads: list[threading.Thread] = []
        self.viewer = self._open_viewer(p["viewer"]) if p["viewer"] != "never" else None
        self.sim.reset(self.rng)
        self.time.publish()

    def _open_viewer(self, mode: str):
        """MuJoCo's passive viewer: it renders on a thread of its own; each step only copies the state
        into it (`sync`), so a slow window never holds the control loop. Without a display, "always" is
        refused and "auto" goes on without the window."""
        problem = "" if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") else "DISPLAY is not set"
        if not problem:
            import mujoco.viewer

            try:
                before = set(threading.enumerate())
                viewer = mujoco.viewer.launch_passive(self.sim.model, self.sim.data, show_left_ui=False,
                                                      show_right_ui=False)
                self.viewer_threads = [t for t in threading.enumerate() if t not in before]
                return viewer
            except Exception as exc:  # noqa: BLE001 - GLFW reports a missing or refused display in several ways
                problem = f"the window could not open: {exc}"
        if mode == "always":
            raise ParameterError(f"arm_sim: viewer:=always needs a display ({problem}); over SSH use the browser view "
                                 "(robot-rl record/train --view browser)")
        self.get_logger().warning(f"no MuJoCo viewer window ({problem}); the browser view still shows the scene")
        return None

    # ---- commands -----------------------------------------------------------------------------

    def _on_gripper(self, msg: Float32) -> None:
        self.counters["commands_received"] += 1
        if not math.isfinite(msg.data):
            self.counters["rejected_commands"] += 1
            self.get_logger().warning("rejected non-finite gripper command", throttle_duration_sec=5.0)
            return
        if not self.estop.active:
            self.gripper_cmd = min(max(float(msg.data), 0.0), 1.0)
        self.gripper_fresh = True
        self._maybe_lockstep()

    def _on_cmd(self, msg: TwistStamped) -> None:
        self.counters["commands_received"] += 1
        try:
            msgs_to_action(msg, self.gripper_cmd, self.params["action_scale"], self.params["control_hz"])
        except ValueError as exc:
            self.counters["rejected_commands"] += 1
            self.get_logger().warning(f"rejected arm command: {exc}", throttle_duration_sec=5.0)
            return
        self.last_cmd = (msg, time.monotonic())
        self._maybe_lockstep()

    def _maybe_lockstep(self) -> None:
        if not self.time.lockstep or self.last_cmd is None or not self.gripper_fresh:
            return
        if stamp_to_ns(self.last_cmd[0].header.stamp) != self.time.now_ns:
            return  # answers an older observation (a resend): already applied
        self._step(self.last_cmd[0])

    def _realtime_step(self) -> None:
        cmd = self.last_cmd
        if cmd is None or time.monotonic() - cmd[1] > self.params["command_timeout_s"]:
            if cmd is not None:
                self.counters["stale_commands"] += 1
            cmd = (TwistStamped(), 0.0)  # zero velocity: hold the current target
        self._step(cmd[0])

    def _step(self, twist: TwistStamped) -> None:
        if self.estop.active:
            self.counters["estopped_steps"] += 1
            hold = msgs_to_action(TwistStamped(), self.gripper_cmd, self.params["action_scale"],  # zero velocity
                                  self.params["control_hz"])
            self.delay.cancel(hold)  # commands sent before the stop never run after it
            self.sim.step(hold)
        else:
            self.sim.step(self.delay(msgs_to_action(twist, self.gripper_cmd, self.params["action_scale"],
                                                    self.params["control_hz"])))
        self.gripper_fresh = False
        self.time.advance()
        self.counters["steps"] += 1
        self.time.publish()

    # ---- observations -------------------------------------------------------------------------

    def _publish_observation(self, stamp_ns: int) -> None:
        stamp = ns_to_stamp(stamp_ns)
        for cam, (image_pub, info_pub, info) in self.image_pubs.items():
            image_pub.publish(image_to_msg(self.sim.render(cam), stamp, f"{cam}_color_optical_frame"))
            info.header.stamp = stamp
            info_pub.publish(info)
        if self.viewer is not None and self.viewer.is_running():
            self.viewer.sync()
        joints, ee, cube = state_to_msgs(read_sensors(self.sim.state(), self.sensor_noise, self.rng),
                                         self.sim.joint_names, stamp_ns)
        self.ee_pub.publish(ee)
        self.cube_pub.publish(cube)
        self.joint_pub.publish(joints)  # last: the actor treats a repeat of this one as "command lost"

    def _camera_info(self, camera: str) -> CameraInfo:
        import mujoco

        size = self.params["image_size"]
        cam_id = mujoco.mj_name2id(self.sim.model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if cam_id < 0:
            raise ValueError(f"the simulated scene has no camera {camera!r}")
        f = 0.5 * size / math.tan(math.radians(self.sim.model.cam_fovy[cam_id]) / 2)
        c = (size - 1) / 2
        info = CameraInfo(height=size, width=size, distortion_model="plumb_bob")
        info.header.frame_id = f"{camera}_color_optical_frame"
        info.d = [0.0] * 5
        info.k = [f, 0.0, c, 0.0, f, c, 0.0, 0.0, 1.0]
        info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        info.p = [f, 0.0, c, 0.0, 0.0, f, c, 0.0, 0.0, 0.0, 1.0, 0.0]
        return info

    # ---- reset --------------------------------------------------------------------------------

    def _on_reset(self) -> None:
        if self.reset_seeds is not None:  # as gymnasium's reset(seed=...) seeds the environment's generator
            self.rng = np.random.default_rng(int(self.reset_seeds.integers(2**31)))
        if self.randomization is not None:
            sample = self.randomization.sample(self.params["randomization_split"], self.rng)
            self.randomizer.apply({k: v for k, v in sample.items() if k in ArmRandomizer.SCENE_PARAMETERS})
            self.delay = CommandDelay(int(sample.get("action_latency_steps", 0)))
            self.sensor_noise = float(sample.get("observation_noise", 0.0))
        self.sim.reset(self.rng)
        self.last_cmd = None
        self.gripper_fresh = False

    def close(self) -> None:
        if self.viewer is not None:
            # close() only asks the viewer's thread to stop. The thread goes on with GLFW, the model and
            # the data until it ends: exiting (GLFW's own atexit teardown) or freeing them before that
            # crashed the process, so it is waited for.
            self.viewer.close()
            for thread in self.viewer_threads:
                thread.join(timeout=VIEWER_CLOSE_TIMEOUT_S)
        self.sim.close()


def main(args=None) -> NoReturn:
    run_node(ArmSimNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
