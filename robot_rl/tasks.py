"""Tasks: one place that says what a task observes, how it is rewarded and when it succeeds.

The simulator env, the ROS actor (which rebuilds the same state dict from topics) and
the learner all read the task from here, so the three can never disagree. Robots declare their tasks
(`robot_rl/robots/registry.py`); a Gymnasium environment run as a graph is the `env` task.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

import numpy as np

from robot_rl.outputs import atomic_write_text
from robot_rl.robots.registry import expert_factories, task_factories

State = dict[str, np.ndarray]


@dataclass(frozen=True)
class TaskSpec:
    name: str
    obs_dim: int
    """Length of the flat observation vector built by `observation`."""
    action_dim: int
    max_episode_steps: int
    """Horizon; reaching it truncates the episode (bootstrapped, not terminal)."""
    control_hz: float
    observation: Callable[[State], np.ndarray]
    reward: Callable[[State], float]
    success: Callable[[State], bool]
    terminate_on_success: bool
    expert: Callable[..., np.ndarray] | None
    """Scripted expert (state, rng, noise) -> action, for demonstrations and scripted humans."""
    env_id: str
    """Gymnasium id of the matching simulated environment."""
    cameras: tuple[str, ...] = ()
    """Camera frames the policy sees (pixel tasks); `observation` is then the proprioception."""
    image_size: int = 0
    """Height and width of those frames."""
    failure: Callable[[State], bool] | None = None
    """A terminal failure (a crash): the episode terminates there, without success."""
    action_rate_limit: float | None = None
    """Every executed action within this of the previous one (FastRLAP: 0.2); None: off."""
    actor_node: str = ""
    """The node that builds this task's states from the robot's topics (how `robot-rl eval` judges a graph run's
    policy: the robot's graph evaluator for that node)."""
    terminated: Callable[[State], bool] | None = None
    """The episode ends here as terminal (an environment's own `terminated`); None: success ends it where
    `terminate_on_success` says so."""
    truncated: Callable[[State], bool] | None = None
    """The robot or environment cut the episode short here (bootstrapped); None: only the horizon does."""
    action_history: int = 0
    """The last this many actions decided join the observation: `observation` reads them from the state's
    `LAST_ACTIONS` ((k, action_dim), newest first), which whoever acts keeps (`ActionHistory`). Under action
    latency they are the commands still in flight, which the robot's sensors cannot show yet."""
    rest_action: tuple[float, ...] = ()
    """What the robot does before its first decision (the history's entries before there are k): empty, zeros."""

    @property
    def frame_shapes(self) -> dict[str, tuple[int, int, int]]:
        return {camera: (self.image_size, self.image_size, 3) for camera in self.cameras}


LAST_ACTIONS = "last_actions"
"""The state's key for the actions decided last (`TaskSpec.action_history`)."""


class ActionHistory:
    """The last `length` actions decided, newest first; an episode starts from `rest` in every entry. One
    keeper for the simulator env, the actor, demonstrations and imported recordings, so all build the same
    observation."""

    def __init__(self, length: int, rest: np.ndarray):
        self.rest = np.asarray(rest, np.float32)
        self._actions: deque[np.ndarray] = deque(maxlen=length)
        self.reset()

    @classmethod
    def of(cls, task: TaskSpec) -> "ActionHistory":
        return cls(task.action_history, task.rest_action or np.zeros(task.action_dim))

    def reset(self, actions=()) -> None:
        """A new episode; `actions` (oldest first): what was decided before it (a snapshot's)."""
        self._actions.clear()
        self._actions.extend(self.rest.copy() for _ in range(self._actions.maxlen))
        self._actions.extend(np.asarray(a, np.float32) for a in actions)

    def push(self, action) -> None:
        self._actions.append(np.array(action, np.float32))

    @property
    def array(self) -> np.ndarray:
        """(length, action dim), newest first."""
        return np.asarray(self._actions, np.float32).reshape(self._actions.maxlen, self.rest.size)[::-1]

    def oldest_first(self) -> list[np.ndarray]:
        return [a.copy() for a in self._actions]

    def joined(self, state: State) -> State:
        """`state` with the history under `LAST_ACTIONS` (as it is without a history)."""
        return {**state, LAST_ACTIONS: self.array} if self._actions.maxlen else state


def task_observation(task: TaskSpec, state: State):
    """The flat task observation, or for pixel tasks {camera frames..., "state": observation}."""
    vector = np.asarray(task.observation(state), dtype=np.float32)
    if vector.shape != (task.obs_dim,) or not np.isfinite(vector).all():
        raise ValueError(f"task observation has shape {vector.shape} or non-finite values")
    if not task.cameras:
        return vector
    frames = {}
    for camera, shape in task.frame_shapes.items():
        frame = state.get(camera)
        if frame is None or frame.shape != shape or frame.dtype != np.uint8:
            got = None if frame is None else (frame.shape, frame.dtype)
            raise ValueError(f"camera {camera!r} frame must be uint8 {shape}, got {got}")
        frames[camera] = frame
    return {**frames, "state": vector}


def dataset_task_config(task: TaskSpec, source: str) -> dict:
    """What an episode dataset of `task` says about it (stored inside it; appending checks it matches); `source`:
    how its episodes were made (e.g. "teleop": a recording session)."""
    return {"task": task.name, "obs_dim": task.obs_dim, "action_dim": task.action_dim,
            "cameras": list(task.cameras), "image_size": task.image_size, "control_hz": task.control_hz,
            "max_episode_steps": task.max_episode_steps, "source": source}


ENV_TASK = "env"
"""The task name of a graph that runs a Gymnasium environment (`robot-rl train --env ID --graph`): what the
task is lives in the run's env task file (`env_task`), written by `ros/graph.py: prepare_run`."""


@dataclass(frozen=True)
class EnvTaskFile:
    """One Gymnasium environment as a graph's task, written once per run and read by every node, so the
    simulator, actor, learner and evaluation see the environment through the same adapter."""

    env_id: str
    env_kwargs: dict
    adapter: dict
    """The resolved `EnvAdapter` (JSON form), its state normalisation fitted before the graph starts."""
    max_episode_steps: int
    control_hz: float

    def save(self, path) -> None:
                atomic_write_text(path, json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path) -> "EnvTaskFile":
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise ValueError(f"env task file {path}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"env task file {path} is not JSON: {exc}") from None
        names = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or set(data) != names:
            raise ValueError(f"env task file {path} must hold exactly {sorted(names)}")
        return cls(**data)

    def make_adapter(self):
        from robot_rl.envs.adapter import EnvAdapter

        return EnvAdapter.from_json(self.adapter)

    def task(self) -> TaskSpec:
        """The TaskSpec the graph's nodes act on: the environment's normalised state and cameras, its own
        reward, success, termination and truncation (carried on `env/outcome`, see ros/env_io.py)."""
        adapter = self.make_adapter()
        return TaskSpec(
            name=f"{ENV_TASK}:{self.env_id}", obs_dim=adapter.state_dim, action_dim=adapter.action_dim,
            max_episode_steps=self.max_episode_steps, control_hz=self.control_hz,
            observation=lambda s: adapter.normalizer(s["state"]), reward=lambda s: float(s["reward"]),
            success=lambda s: bool(s["success"]), terminate_on_success=False, expert=None, env_id=self.env_id,
            cameras=adapter.cameras, image_size=adapter.image_size or 0, actor_node="env_actor",
            terminated=lambda s: bool(s["terminated"]), truncated=lambda s: bool(s["truncated"]))


def get_task(name: str, env_task: str = "") -> TaskSpec:
    """The task `name`; the `env` task is the one described by the env task file `env_task`."""
    if name == ENV_TASK:
        if not env_task:
            raise ValueError(f"task {ENV_TASK!r} is described by its env task file: set env_task (written by "
                             "`robot-rl train --env ID --graph` into the run directory)")
        return EnvTaskFile.load(env_task).task()
    try:
        factory = task_factories()[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(task_names())}") from None
    return factory()


def task_names() -> list[str]:
    return sorted([*task_factories(), ENV_TASK])


def expert_for_env(env_id: str) -> Callable[..., np.ndarray] | None:
    """The scripted expert of the task whose simulated environment is `env_id`, or of that
    simulation-only environment (a robot's `experts`); None if none."""
    for factory in task_factories().values():
        task = factory()
        if task.env_id == env_id:
            return task.expert
    factory = expert_factories().get(env_id)
    return factory() if factory is not None else None
