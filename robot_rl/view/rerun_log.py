"""A session in Rerun (https://rerun.io, the viewer LeRobot uses): cameras, proprioception, the
policy's, the person's and the executed actions, who drives, reward, value and done probability,
live or replayed, saved as an `.rrd` file or streamed to a viewer. No ROS here: the `session_view`
node, `robot-rl view` and the in-process loops feed it.

Entity paths (fixed; tests and users' scripts read them):

    cameras/<camera>     Image (RGB; JPEG-compressed with `jpeg_quality`)
    state                Scalars, one series per state entry (named by `state_names`)
    action/executed      Scalars: the action that reached the robot
    action/policy        Scalars: what the policy proposed (also while a person drives, where known)
    action/human         Scalars: the person's action, at the steps the person drove
    driver               TextLog: "person", "policy" or "holding", logged when it changes
    driver/person        Scalars: 1 while a person drives, else 0
    reward, value, done_probability   Scalars, where known
    episode              Scalars: the episode index at every step
    episode/end          TextLog: how each episode ended
    episode/success      Scalars: 1 success, 0 failure, at each episode's end where known
    curve/<name>         Scalars: a run's learning curve (`curve`): per training episode `return`,
                         `success`, `length`, `interventions`; per evaluation `eval_success_rate`...

Timelines: "step" (a sequence: control steps, counted across episodes), "time" (the step's time
in seconds since the epoch, where the caller knows it); the learning curve's "episode" (training
episodes) and "env_step" (environment steps of training when the row was written).
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from robot_rl.outputs import UserError, atomic_path, check_output
from robot_rl.teleop.session_status import DRIVERS, SessionStatus

ACTION_KINDS = ("executed", "policy", "human")
"""The entities under action/."""

SPAWN = "spawn"
"""The target that starts a Rerun viewer on this machine."""

VIEWER_URL_PREFIXES = ("rerun+http://", "rerun+https://", "rerun://")
"""How a target names a viewer that runs elsewhere (its gRPC proxy), e.g. rerun+http://127.0.0.1:9876/proxy."""


def has_display() -> bool:
    """Whether a window can open here (a viewer can be spawned)."""
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def check_target(target: str) -> str:
    """`target` if it names a place for a recording (see RerunConfig.target); ValueError otherwise."""
    if target == SPAWN or target.startswith(VIEWER_URL_PREFIXES) or target.endswith(".rrd"):
        return target
    raise ValueError(f"Rerun output {target!r}: expected a file ending in .rrd, {SPAWN!r} (a viewer here) or a "
                     "viewer's address such as rerun+http://127.0.0.1:9876/proxy")


@dataclass(frozen=True)
class RerunConfig:
    """Where a session's recording goes and how it is laid out."""

    target: str
    """A file ending in .rrd (open it with `rerun FILE.rrd`, here or on another machine), "spawn" (start
    the Rerun viewer on this machine; needs a display) or a running viewer's address,
    rerun+http://HOST:PORT/proxy (`rerun` listens on port 9876; over SSH: `ssh -R 9876:localhost:9876`)."""
    cameras: tuple[str, ...] = ()
    """Cameras laid out side by side next to the time series (others still logged, placed by the viewer)."""
    state_names: tuple[str, ...] = ()
    """Names of the state entries' series; empty: their indices."""
    action_names: tuple[str, ...] = ()
    """Names of the action entries' series; empty: their indices."""
    jpeg_quality: int = 0
    """Camera images are JPEG-compressed at this quality (1-100): files 4-25 times smaller for about 0.2 ms
    per 64x64 frame (1 ms at 640x480). 0: stored raw, the exact pixels."""
    overwrite: bool = False
    """Replace an existing .rrd file (refused otherwise)."""
    recording_name: str = "robot_rl"
    """What the viewer calls the recording."""
    application_id: str = "robot_rl"
    """Rerun's application id: recordings of one application share the viewer's layout."""

    def __post_init__(self) -> None:
        check_target(self.target)
        if not (isinstance(self.jpeg_quality, int) and 0 <= self.jpeg_quality <= 100):
            raise ValueError(f"jpeg_quality must be an integer from 0 (raw) to 100, got {self.jpeg_quality!r}")
        for what, names in (("cameras", self.cameras), ("state_names", self.state_names),
                            ("action_names", self.action_names)):
            if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
                raise ValueError(f"{what} must be distinct non-empty names, got {list(names)}")


def _rerun():
    try:
        import rerun
    except ImportError:
        raise UserError("the Rerun view needs rerun-sdk: pip install 'robot_rl[view]'") from None
    return rerun


def blueprint(cameras: Sequence[str], curve: bool = False):
    """The layout: cameras side by side on the left, the time series and the session's text on the
    right (with `curve`, a run's learning curve above them)."""
    rrb = _rerun().blueprint
    series = rrb.Vertical(
        *([rrb.TimeSeriesView(origin="curve", name="learning curve")] if curve else []),
        rrb.TimeSeriesView(origin="action", name="actions"),
        rrb.TimeSeriesView(origin="state", name="state"),
        rrb.TimeSeriesView(origin="/", contents=["reward", "value", "done_probability", "driver/person",
                                                 "episode/success"], name="reward, value, done, person"),
        rrb.TextLogView(origin="/", contents=["driver", "episode/end"], name="session"),
        row_shares=[*([2] if curve else []), 3, 2, 2, 1],
    )
    if not cameras:
        return rrb.Blueprint(series, collapse_panels=True)
    views = [rrb.Spatial2DView(origin=f"cameras/{camera}", name=camera) for camera in cameras]
    return rrb.Blueprint(rrb.Horizontal(rrb.Vertical(*views), series, column_shares=[2, 3]), collapse_panels=True)


class RerunSession:
    """One recording of a session (see the module for what goes where). Use as a context manager or
    call `close()`: a file target is written under a temporary name and renamed into place then."""

    def __init__(self, config: RerunConfig):
        rr = self._rr = _rerun()
        self.config = config
        self._exit = contextlib.ExitStack()
        self._recording = rr.RecordingStream(config.application_id, recording_id=uuid.uuid4())
        layout = blueprint(config.cameras)
        self.path: Path | None = None
        if config.target == SPAWN:
            if not has_display():
                raise UserError("the Rerun viewer needs a display (DISPLAY is not set); save a recording instead "
                                "(a path ending in .rrd) and open it elsewhere with `rerun FILE.rrd`")
            self._recording.spawn(default_blueprint=layout)
        elif config.target.startswith(VIEWER_URL_PREFIXES):
            self._recording.connect_grpc(config.target, default_blueprint=layout)
        else:
            self.path = check_output(config.target, "Rerun recording", overwrite=config.overwrite)
            self._recording.save(self._exit.enter_context(atomic_path(self.path)), default_blueprint=layout)
        self._recording.send_recording_name(config.recording_name)
        self._named: set[str] = set()  # entities whose series names were sent
        self._driver: str | None = None
        self._curve_shown = False
        self.steps = 0
        """Steps logged (each `step` call)."""

    # ---- pieces (the live view logs each as its message arrives) -----------------------------------

    def set_time(self, step: int | None = None, wall_time: float | None = None) -> None:
        """The time of what is logged next from this thread: the "step" sequence and "time" (seconds since
        the epoch); one left out is not set (the recording keeps no earlier value for it)."""
        self._recording.reset_time()
        if step is not None:
            self._recording.set_time("step", sequence=int(step))
        if wall_time is not None:
            self._recording.set_time("time", timestamp=float(wall_time))

    def cameras(self, images: Mapping[str, np.ndarray]) -> None:
        """One RGB uint8 HxWx3 image per camera."""
        for camera, image in images.items():
            if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
                raise ValueError(f"camera {camera!r}: expected an RGB uint8 HxWx3 image, got {image.dtype} "
                                 f"{image.shape}")
            entry = self._rr.Image(image, color_model="RGB")
            self._recording.log(f"cameras/{camera}", entry.compress(self.config.jpeg_quality)
                                if self.config.jpeg_quality else entry)

    def state(self, values: np.ndarray, names: Sequence[str] = ()) -> None:
        """The state vector; `names` (first call only) instead of the config's state_names."""
        self._series("state", values, names or self.config.state_names)

    def action(self, kind: str, values: np.ndarray, names: Sequence[str] = ()) -> None:
        """An action of `kind` (ACTION_KINDS: executed, policy, human); `names` as for `state`."""
        if kind not in ACTION_KINDS:
            raise ValueError(f"action kind {kind!r}: expected one of {ACTION_KINDS}")
        self._series(f"action/{kind}", values, names or self.config.action_names)

    def driver(self, driver: str) -> None:
        """Who drives now: the text when it changes, the `driver/person` series every call."""
        if driver not in DRIVERS:
            raise ValueError(f"driver {driver!r}: expected one of {DRIVERS}")
        if driver != self._driver:
            self._recording.log("driver", self._rr.TextLog(driver, level="WARN" if driver == "person" else "INFO"))
            self._driver = driver
        self._recording.log("driver/person", self._rr.Scalars(float(driver == "person")))

    def scalar(self, name: str, value: float | None) -> None:
        """`reward`, `value`, `done_probability` or `episode`; None or NaN: not known, nothing logged."""
        if name not in ("reward", "value", "done_probability", "episode"):
            raise ValueError(f"scalar {name!r}: expected reward, value, done_probability or episode")
        if value is not None and not math.isnan(value):
            self._recording.log(name, self._rr.Scalars(float(value)))

    def _series(self, entity: str, values: np.ndarray, names: Sequence[str]) -> None:
        values = np.asarray(values, np.float64).reshape(-1)
        if entity not in self._named and names:
            if len(names) != values.size:
                raise ValueError(f"{entity}: {values.size} values but {len(names)} names {list(names)}")
            self._recording.log(entity, self._rr.SeriesLines(names=list(names)), static=True)
        self._named.add(entity)
        self._recording.log(entity, self._rr.Scalars(values))

    # ---- what the control loops call -------------------------------------------------------------------

    def step(self, step: int, cameras: Mapping[str, np.ndarray], state: np.ndarray | None,
             action: np.ndarray | None, policy_action: np.ndarray | None, driver: str, reward: float | None = None,
             value: float | None = None, done_probability: float | None = None, episode: int = 0,
             wall_time: float | None = None) -> None:
        """One control step: the observation (cameras, state) and what was done from it. `action` is
        what reached the robot (None: the episode's final observation, nothing done from it); it is
        the person's action too when `driver` is "person". `reward` is where the step led."""
        self.set_time(step, wall_time)
        self.cameras(cameras)
        if state is not None:
            self.state(state)
        if action is not None:
            self.action("executed", action)
            if driver == "person":
                self.action("human", action)
        if policy_action is not None:
            self.action("policy", policy_action)
        self.driver(driver)
        self.scalar("reward", reward)
        self.scalar("value", value)
        self.scalar("done_probability", done_probability)
        self.scalar("episode", episode)
        self.steps += 1

    def episode_end(self, episode: int, success: bool | None, reason: str) -> None:
        """How episode `episode` ended (logged at the time last set: its last step)."""
        outcome = {True: "success", False: "failure", None: "not labelled"}[success]
        self._recording.log("episode/end", self._rr.TextLog(f"episode {episode} ended: {outcome} ({reason})",
                                                            level="INFO"))
        if success is not None:
            self._recording.log("episode/success", self._rr.Scalars(float(success)))

    def curve(self, values: Mapping[str, float | None], episode: int | None = None, env_step: int | None = None,
              wall_time: float | None = None) -> None:
        """One row of a run's learning curve (an episode's return and success, an evaluation's success
        rate) as curve/<name>, on the "episode" and "env_step" timelines (environment steps of training)."""
        if not self._curve_shown:
            self._recording.send_blueprint(blueprint(self.config.cameras, curve=True))
            self._curve_shown = True
        self._recording.reset_time()
        if episode is not None:
            self._recording.set_time("episode", sequence=int(episode))
        if env_step is not None:
            self._recording.set_time("env_step", sequence=int(env_step))
        if wall_time is not None:
            self._recording.set_time("time", timestamp=float(wall_time))
        for name, value in values.items():
            if value is not None and not math.isnan(float(value)):
                self._recording.log(f"curve/{name}", self._rr.Scalars(float(value)))

    def close(self) -> None:
        """Sends what is buffered; a file is complete and in place once this returns. Idempotent."""
        if self._recording is None:
            return
        recording, self._recording = self._recording, None
        recording.flush()
        recording.disconnect()  # finishes the file (its footer) before it is renamed into place
        self._exit.close()

    def __enter__(self) -> RerunSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LiveRerun:
    """A graph session logged as its topics deliver it (the session_view node feeds it, without ROS
    types): the actor's session status (who drives, reward, episode), camera images, the commands
    the actor sends (action/executed; action/policy too while the policy drives) and the person's
    (action/human), the robot's joint states (state) and the reward node's value and done
    probability. Everything is logged when it arrives, on the wall clock and at the session's step:
    the status' control steps, counted across episodes."""

    COMMAND_NAMES = ("linear.x", "linear.y", "linear.z", "angular.x", "angular.y", "angular.z", "gripper")
    """A command's series: the twist of arm/cmd or teleop/cmd and the newest arm/gripper or teleop/gripper."""

    def __init__(self, session: RerunSession):
        self.session = session
        self.status: SessionStatus | None = None
        self.step = 0
        self._steps_before = 0  # control steps of the episodes before the current one
        self._gripper = {"executed": 0.0, "human": 0.0}

    def _now(self, wall_time: float) -> None:
        self.session.set_time(self.step, wall_time)

    def on_status(self, status: SessionStatus, wall_time: float) -> None:
        previous = self.status
        if previous is not None and status.episode != previous.episode:
            self._now(wall_time)
            # The status says no more about the end: success is the task's estimate at its last step.
            self.session.episode_end(previous.episode, previous.success, "the next episode began")
            self._steps_before += previous.step
        self.status = status
        self.step = self._steps_before + status.step
        self._now(wall_time)
        self.session.driver(status.driver)
        self.session.scalar("reward", status.last_reward)
        self.session.scalar("episode", status.episode)

    def on_camera(self, camera: str, image: np.ndarray, wall_time: float) -> None:
        self._now(wall_time)
        self.session.cameras({camera: image})

    def on_gripper(self, kind: str, value: float) -> None:
        """The gripper command of `kind` ("executed": the actor's, "human": the person's), logged with its next twist."""
        self._gripper[kind] = float(value)

    def on_twist(self, kind: str, twist: Sequence[float], wall_time: float) -> None:
        """A twist command (linear x, y, z, angular x, y, z) of `kind` ("executed" or "human")."""
        command = np.array([*twist, self._gripper[kind]], np.float64)
        self._now(wall_time)
        self.session.action(kind, command, self.COMMAND_NAMES)
        if kind == "executed" and self.status is not None and self.status.driver == "policy":
            self.session.action("policy", command, self.COMMAND_NAMES)

    def on_joints(self, names: Sequence[str], positions: np.ndarray, wall_time: float) -> None:
        self._now(wall_time)
        self.session.state(positions, names)

    def on_reward(self, value: float, done_probability: float, wall_time: float) -> None:
        """The reward node's estimate of the newest frame: its value (progress) and done probability."""
        self._now(wall_time)
        self.session.scalar("value", value)
        self.session.scalar("done_probability", done_probability)
