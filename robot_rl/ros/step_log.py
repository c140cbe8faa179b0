"""The actor's step log, `episode/step`: what the actor did at each observation it stepped on, so that a bag
of a session (`ros2 bag record`, `robot-rl record-bag`) rebuilds the episodes it recorded exactly
(`robot_rl/ros/bag_import.py`).

Why the actor publishes it: the sensor and command topics alone cannot say which observations were steps
(commands also hold the robot during the countdown and pauses, and are resent when the lockstep simulator
repeats an observation), who drove each step (a person's command goes stale after `teleop_timeout_s` on the
actor's own clock), which step a person's label ended, or which episodes a recording threw away.

One `sensor_msgs/JointState` per observation stepped on (the standard stamped vector message, as `env/*`
uses it): `header.stamp` is the observation's stamp (the stamp the step's command carries), `header.frame_id`
the task's name, and each value is named:

* `episode`, `step`: the episode's index and the observation's index in it (0: the first).
* `intervention` (when an action was taken here): 1 when it was the person's, 0 the policy's or holding.
* `reward`, `terminated`, `truncated`, `success_label` (when the transition that reached this observation
  was recorded): as the episode dataset stores them (`success_label` 1, 0, or -1 unlabelled).
* `end`: 1 when the episode ended here (no action taken).

An episode thrown away (re-recorded, or nobody drove it) is said once more: `episode` and `discarded` 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

from sensor_msgs.msg import JointState

from robot_rl.ros.messages import ns_to_stamp, stamp_to_ns

STEP_TOPIC = "episode/step"
OUTCOME_FIELDS = ("reward", "terminated", "truncated", "success_label")
UNLABELLED = -1


class StepOutcome(NamedTuple):
    """What the transition that reached an observation was recorded with."""

    reward: float
    terminated: bool
    truncated: bool
    success_label: bool | None


@dataclass(frozen=True)
class StepEntry:
    """One `episode/step` message, checked."""

    task: str
    episode: int
    stamp_ns: int
    step: int = -1
    """Index of the observation in its episode; -1 in a discard."""
    intervention: bool | None = None
    """Who took the action at this observation (None: no action, the episode ended here)."""
    outcome: StepOutcome | None = None
    end: bool = False
    discarded: bool = False


def step_msg(task: str, episode: int, step: int, stamp_ns: int, intervention: bool | None,
             outcome: StepOutcome | None, end: bool) -> JointState:
    values: dict[str, float] = {"episode": episode, "step": step}
    if intervention is not None:
        values["intervention"] = float(intervention)
    if outcome is not None:
        label = UNLABELLED if outcome.success_label is None else int(outcome.success_label)
        values.update(reward=outcome.reward, terminated=float(outcome.terminated),
                      truncated=float(outcome.truncated), success_label=label)
    values["end"] = float(end)
    return _msg(task, stamp_ns, values)


def discard_msg(task: str, episode: int, stamp_ns: int) -> JointState:
    return _msg(task, stamp_ns, {"episode": episode, "discarded": 1.0})


def _msg(task: str, stamp_ns: int, values: dict[str, float]) -> JointState:
    msg = JointState()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id = task
    msg.name = list(values)
    msg.position = [float(v) for v in values.values()]
    return msg


def _flag(values: dict[str, float], name: str) -> bool:
    if values[name] not in (0.0, 1.0):
        raise ValueError(f"{name} must be 0 or 1, got {values[name]}")
    return values[name] == 1.0


def _index(values: dict[str, float], name: str) -> int:
    value = values.get(name)
    if value is None or not (value >= 0 and value == int(value)):
        raise ValueError(f"{name} must be an index >= 0, got {value}")
    return int(value)


def parse_step_msg(msg: Any) -> StepEntry:
    """The entry an `episode/step` message carries (a JointState, rclpy's or a bag reader's); ValueError if
    it is not one."""
    names, positions = list(msg.name), [float(v) for v in msg.position]
    if len(names) != len(positions) or len(set(names)) != len(names):
        raise ValueError(f"names {names} and {len(positions)} values do not pair up")
    values = dict(zip(names, positions))
    head = {"task": str(msg.header.frame_id), "episode": _index(values, "episode"),
            "stamp_ns": stamp_to_ns(msg.header.stamp)}
    if not head["task"]:
        raise ValueError("no task named in header.frame_id")
    if set(values) == {"episode", "discarded"}:
        if not _flag(values, "discarded"):
            raise ValueError("discarded must be 1")
        return StepEntry(**head, discarded=True)
    known = {"episode", "step", "intervention", *OUTCOME_FIELDS, "end"}
    unknown = sorted(set(values) - known)
    if unknown or "end" not in values:
        raise ValueError(f"unknown values {unknown}" if unknown else "no end value")
    end = _flag(values, "end")
    if ("intervention" in values) == end:
        raise ValueError("an action (intervention) must be given exactly where the episode did not end")
    outcome = None
    given = [name for name in OUTCOME_FIELDS if name in values]
    if given and len(given) != len(OUTCOME_FIELDS):
        raise ValueError(f"outcome values {given} without the others of {list(OUTCOME_FIELDS)}")
    if given:
        label = values["success_label"]
        if label not in (UNLABELLED, 0.0, 1.0) or not math.isfinite(values["reward"]):
            raise ValueError(f"success_label {label} must be -1, 0 or 1 and reward {values['reward']} finite")
        outcome = StepOutcome(values["reward"], _flag(values, "terminated"), _flag(values, "truncated"),
                              None if label == UNLABELLED else label == 1.0)
    intervention = _flag(values, "intervention") if not end else None
    return StepEntry(**head, step=_index(values, "step"), intervention=intervention, outcome=outcome, end=end)
