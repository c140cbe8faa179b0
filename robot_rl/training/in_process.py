"""The actor/learner pair in one process, with the same cores and payloads as the ROS graph.

Used for demonstration collection, quick experiments and learning tests; the ROS graph
adds only transport and process boundaries around exactly these calls.
"""

from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

from robot_rl.tasks import ActionHistory, State, TaskSpec
from robot_rl.training.actor import ActorCore
from robot_rl.training.actor_episodes import EpisodeStats
from robot_rl.training.learner import LearnerCore
from robot_rl.transport import codec
from robot_rl.transport.layout import TRANSITION_FIELDS, stack_transitions


class Robot(Protocol):
    """What the loop needs from a simulator (ArmSim fits): reset, step, state."""

    def reset(self, rng: np.random.Generator) -> None: ...
    def step(self, action: np.ndarray) -> None: ...
    def state(self) -> State: ...
    def render(self, camera: str, size: int | None = None) -> np.ndarray: ...


def collect_demonstrations(task: TaskSpec, robot: Robot, episodes: int, seed: int = 0, noise: float = 0.0,
                           successful_only: bool = True,
                           before_reset: Callable[[np.random.Generator], None] | None = None
                           ) -> tuple[dict[str, np.ndarray], dict]:
    """Runs the task's scripted expert; returns stacked transitions (with camera frames for pixel
    tasks) and episode statistics. `before_reset(rng)` may randomize the scene of each episode."""
    if task.expert is None:
        raise ValueError(f"task {task.name} has no scripted expert")
    rng = np.random.default_rng(seed)
    fields: dict[str, list] = {k: [] for k in TRANSITION_FIELDS}
    kept = attempted = 0
    actions = ActionHistory.of(task)
    while kept < episodes:
        attempted += 1
        if attempted > 10 * episodes + 10:
            raise RuntimeError(f"scripted expert succeeded in only {kept} of {attempted} episodes")
        if before_reset is not None:
            before_reset(rng)
        robot.reset(rng)
        actions.reset()
        state = robot.state()
        frames = {c: robot.render(c, task.image_size) for c in task.cameras}
        obs = task.observation(actions.joined(state))
        episode = {k: [] for k in fields}
        for t in range(task.max_episode_steps):
            action = task.expert(state, rng, noise)
            actions.push(action)
            robot.step(action)
            state = robot.state()
            next_frames = {c: robot.render(c, task.image_size) for c in task.cameras}
            next_obs = task.observation(actions.joined(state))
            success = task.success(state)
            terminated = success and task.terminate_on_success
            values = {"obs": obs, "action": action, "reward": task.reward(state), "next_obs": next_obs,
                      "terminated": terminated, "truncated": not terminated and t == task.max_episode_steps - 1,
                      "intervention": False}
            for camera in task.cameras:
                values[f"obs_{camera}"], values[f"next_obs_{camera}"] = frames[camera], next_frames[camera]
            for name, value in values.items():
                episode.setdefault(name, []).append(value)
            frames, obs = next_frames, next_obs
            if terminated:
                break
        if success or not successful_only:
            kept += 1
            for name in episode:
                fields.setdefault(name, []).extend(episode[name])
    arrays = stack_transitions(fields, task.obs_dim, task.action_dim, task.frame_shapes)
    return arrays, {"episodes": kept, "attempted": attempted, "noise": noise, "seed": seed}


def train_in_process(robot: Robot, actor: ActorCore, learner: LearnerCore, updates_per_step: float = 1.0,
                     publish_every: int = 50, seed: int = 0,
                     on_episode: Callable[[EpisodeStats], None] | None = None) -> dict:
    """Runs training then evaluation until the actor is finished; returns the evaluation summary."""
    rng = np.random.default_rng(seed)
    last_published = -1

    def train_and_publish(now: bool = False) -> None:
        nonlocal last_published
        learner.core.catch_up(updates_per_step)
        n = learner.agent.num_updates
        if n and (now or n // publish_every != last_published):
            last_published = n // publish_every
            actor.load_policy(codec.decode(learner.policy_payload(), key=actor.key))

    while not actor.finished:
        robot.reset(rng)
        actor.start_episode()
        while True:
            result = actor.step(robot.state())
            if result.action is None:
                break
            robot.step(result.action)
            _deliver(actor, learner)
            train_and_publish()
        _deliver(actor, learner)
        if actor.evaluating and not actor.evaluation_started:
            train_and_publish(now=True)  # evaluation keeps the policy it starts with: the one trained on every step
        if on_episode is not None:
            on_episode(result.episode)
    return actor.eval_summary()


def _deliver(actor: ActorCore, learner: LearnerCore) -> None:
    for seq, payload in actor.outbox.due(limit=1 << 30):
        result = learner.ingest(payload)
        actor.handle_ack(codec.decode(learner.ack_payload(result.actor_id, [result.seq]), key=actor.key))
