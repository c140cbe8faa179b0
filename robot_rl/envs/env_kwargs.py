"""An environment's keyword arguments (`--env-kwargs`, a task file's `env.kwargs`) checked against its creator's
signature before it is made: a mistyped name or a value of the wrong kind is refused naming both, instead of a
TypeError from gymnasium or an arithmetic error minutes later inside the environment's physics."""

from __future__ import annotations

import inspect
from typing import Any, Mapping

import gymnasium as gym
import numpy as np


def env_signature(env_id: str) -> dict[str, inspect.Parameter]:
    """The keyword parameters of the creator of the environment registered as `env_id`, by name."""
    creator = gym.spec(env_id.rpartition(":")[2]).entry_point  # "module:Name-v0": registered as Name-v0
    if isinstance(creator, str):
        creator = gym.envs.registration.load_env_creator(creator)
    return {name: p for name, p in inspect.signature(creator).parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _value_kind(value: Any) -> str | None:
    """What a JSON-like value is, in the words an error uses: "true/false", "a number", "text", "a list"."""
    if isinstance(value, (bool, np.bool_)):
        return "true/false"
    if isinstance(value, (int, float, np.number)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (list, tuple)):
        return "a list"
    return None


def check_env_kwargs(env_id: str, kwargs: Mapping[str, Any]) -> None:
    """Each keyword argument for `env_id` of the kind its default is (a number where the default is one, text where
    text); ValueError naming the first that is not. The environment would take a string for a number and fail
    minutes later inside its physics (`'ten' / 2.0`)."""
    parameters = env_signature(env_id)
    for name, value in kwargs.items():
        parameter = parameters.get(name)
        if parameter is None or parameter.default is inspect.Parameter.empty or parameter.default is None \
                or value is None:
            continue
        expected, given = _value_kind(parameter.default), _value_kind(value)
        if expected is not None and given != expected:
            raise ValueError(f"{env_id}'s {name} takes {expected} (default {parameter.default!r}), got {value!r}")


def make_env(env_id: str, kwargs: Mapping | None = None) -> gym.Env:
    """gymnasium.make(env_id, **kwargs), the keyword arguments checked first (`check_env_kwargs`); ValueError naming
    the environment and its arguments for any it refuses."""
    kwargs = dict(kwargs or {})
    check_env_kwargs(env_id, kwargs)
    try:
        return gym.make(env_id, **kwargs)
    except TypeError as exc:  # an argument it does not take
        raise ValueError(f"{env_id} refuses env_kwargs {kwargs}: {' '.join(str(exc).split())}") from None
