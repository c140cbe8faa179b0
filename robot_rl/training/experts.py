"""Scripted experts for any Gymnasium environment, and their episodes recorded as a person's are.

An expert is a Python callable named "module:callable" (`load_expert`; a class is instantiated with
no arguments). It is called as `expert(observation, info) -> action` with the environment's own
observation and info, as the environment returns them (before `EnvAdapter`), and returns the
environment's own action (its units: a gripper in [0, 2] stays in [0, 2]). An expert with phases
may have a `reset()` method: it is called at the start of every episode, before the first call.

`record_expert_episodes` writes such an expert's episodes into an episode dataset the way
`robot-rl record --env` writes a person's (`data/env_recorder.py`): raw state, cameras at the
adapter's size, actions in the environment's units, every step marked as driven by the
demonstrator. Episodes are seeded (`seeded_reset`, seed + attempt), so a dataset is recorded again
identically.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from robot_rl.data.env_recorder import EnvEpisodeRecorder
from robot_rl.envs.adapter import CanonicalEnv, seeded_reset

ATTEMPTS_PER_EPISODE = 5
"""Keeping only successful episodes, recording stops with an error after this many attempts per episode asked for."""


class ExpertError(ValueError):
    """The expert failed or returned something that is not an action for the environment (one line for the user)."""


class Expert(Protocol):
    """A scripted policy in the environment's own terms (see the module); `reset()` is optional."""

    def __call__(self, observation: Any, info: Mapping[str, Any]) -> Any: ...


def load_expert(spec: str) -> Expert:
    """The expert named by `spec`, "module:callable" ("package.module:Class" or "module:object.attribute");
    a class is instantiated with no arguments.

    Raises:
        ValueError: `spec` is not "module:callable", the module cannot be imported, it has no such
            attribute, or what it names is not callable (each message says which).
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expert {spec!r}: expected module:callable (e.g. my_experts:PickCube)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = " (is its folder on PYTHONPATH?)" if getattr(exc, "name", None) == module_name else ""
        raise ValueError(f"expert {spec!r}: cannot import {module_name!r}: {exc}{hint}") from None
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            offered = sorted(name for name, value in vars(module).items() if not name.startswith("_") and callable(value))
            raise ValueError(f"expert {spec!r}: {module_name} has no {attribute!r}; its callables: "
                             f"{', '.join(offered) or 'none'}")
        target = getattr(target, part)
    if isinstance(target, type):
        try:
            target = target()
        except TypeError as exc:
            raise ValueError(f"expert {spec!r}: the class must be constructible with no arguments ({exc})") from None
    if not callable(target):
        raise ValueError(f"expert {spec!r}: {attribute} is a {type(target).__name__}, not callable as "
                         "expert(observation, info) -> action")
    return target


@dataclass
class ExpertEpisode:
    """How one expert episode went."""

    success: bool
    """The environment reported success at some step."""
    steps: int
    episode_return: float
    final_observation: Any
    """The last observation as the adapter gives it (what `EnvEpisodeRecorder.end_episode` takes)."""


def run_expert_episode(env: CanonicalEnv, expert: Expert, seed: int, recorder: EnvEpisodeRecorder | None = None,
                       noise: float = 0.0, rng: np.random.Generator | None = None,
                       max_steps: int = 1000) -> ExpertEpisode:
    """One episode of `expert` on the environment inside `env` (the expert sees what that environment gives)
    from `seeded_reset(seed)`, until the environment ends it or `max_steps` (then truncated). With `recorder`
    its steps are staged there (the caller ends or discards the episode). `noise`: standard deviation of
    Gaussian noise added to the expert's action in the agent's [-1, 1], drawn from `rng` (default: one
    seeded with `seed`); the action executed and recorded is the noisy one."""
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    adapter, inner = env.adapter, env.env
    rng = rng if rng is not None else np.random.default_rng(seed)
    observation, info = seeded_reset(inner, seed)
    if callable(getattr(expert, "reset", None)):
        expert.reset()
    adapted = adapter.observation(observation, env.normalize)
    success, episode_return, step = False, 0.0, 0
    while True:
        step += 1
        try:
            proposed = expert(observation, info)
        except Exception as exc:  # the user's code: named, with how it is called (--debug shows its traceback)
            raise ExpertError(f"the expert raised {type(exc).__name__} at step {step} of the episode seeded {seed}: "
                              f"{exc} (it is called as expert(observation, info) -> action)") from exc
        try:
            action = adapter.agent_action(proposed)
        except (TypeError, ValueError) as exc:
            raise ExpertError(f"the expert's action {proposed!r}: {exc}") from None
        if noise > 0:
            action = np.clip(action + rng.normal(0.0, noise, action.shape), -1.0, 1.0).astype(np.float32)
        observation, reward, terminated, truncated, info = inner.step(adapter.env_action(action))
        success = success or adapter.success(info)
        episode_return += float(reward)
        ended = bool(terminated or truncated) or step == max_steps
        if recorder is not None:
            recorder.add_step(adapted, action, float(reward), bool(terminated), ended and not terminated, True,
                              success if ended else None)
        adapted = adapter.observation(observation, env.normalize)
        if ended:
            return ExpertEpisode(success, step, episode_return, adapted)


def record_expert_episodes(env: CanonicalEnv, recorder: EnvEpisodeRecorder, expert: Expert, episodes: int, *,
                           seed: int = 0, noise: float = 0.0, successful_only: bool = True, max_steps: int = 1000,
                           say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Records `episodes` episodes of `expert` into `recorder` (`env` made with `normalize=False`, as
    `robot-rl record --env` makes it); attempt i is reset with seed + i. With `successful_only`, failed
    attempts are discarded. Returns counts: episodes_recorded, attempts, successes, steps.

    Raises:
        RuntimeError: keeping only successful episodes, `ATTEMPTS_PER_EPISODE` x `episodes` attempts did
            not give `episodes` of them.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}")
    rng = np.random.default_rng(seed)  # the noise; the resets are seeded by attempt
    kept = attempts = successes = steps = 0
    while kept < episodes:
        if attempts >= ATTEMPTS_PER_EPISODE * episodes:
            raise RuntimeError(f"the expert succeeded in {successes} of {attempts} attempts, short of the "
                               f"{episodes} successful episodes asked for")
        episode = run_expert_episode(env, expert, seed + attempts, recorder, noise, rng, max_steps)
        attempts += 1
        successes += episode.success
        if successful_only and not episode.success:
            recorder.discard_episode()
            continue
        recorder.end_episode(episode.final_observation)
        kept += 1
        steps += episode.steps
        if say is not None:
            say(f"episode {kept} kept: {episode.steps} steps, {'success' if episode.success else 'failure'} "
                f"(attempt {attempts}, seed {seed + attempts - 1})")
    return {"episodes_recorded": kept, "attempts": attempts, "successes": successes, "steps": steps}
