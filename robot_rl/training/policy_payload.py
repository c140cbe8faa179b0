"""A learner's policy payload as the policy an actor acts with, checked against the task it is to act in."""

from __future__ import annotations

from typing import NamedTuple

from robot_rl.agents.policy import Policy, PolicySpec
from robot_rl.tasks import TaskSpec
from robot_rl.transport import codec


def policy_from_payload(payload: codec.Payload, task: TaskSpec) -> Policy:
    """The policy a learner's policy payload carries, checked against the task it is to act in.
    Raises ValueError if it does not fit."""
    spec = PolicySpec.from_json(payload.meta["spec"])
    state_dim = spec.obs_dim if spec.encoder is None else spec.encoder["state_dim"]
    if (state_dim, spec.full_action_dim) != (task.obs_dim, task.action_dim):
        history = task.action_history * task.action_dim
        older = (f"; {task.name} observes its last {task.action_history} actions ({history} values) since "
                 f"2026-11-29, and a policy trained before observes {task.obs_dim - history}"
                 if history and state_dim == task.obs_dim - history else "")
        raise ValueError(f"policy for state_dim={state_dim}, action_dim={spec.full_action_dim} does not fit "
                         f"task {task.name} ({task.obs_dim}, {task.action_dim}){older}")
    policy = Policy(spec)
    policy.load_state_dict(codec.arrays_to_state_dict(payload.arrays))  # ValueError if they do not fit
    return policy


class PreparedPolicy(NamedTuple):
    """Weights decoded into a policy of their own, waiting to be swapped in (`ActorCore.adopt_policy`)."""

    policy: Policy
    version: int
    learner_updates: int
