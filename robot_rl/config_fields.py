"""Settings declared once, on the config dataclasses: a field made with `setting(...)` carries what
its node parameter needs (a description, a range or choices, the parameter value that stands for
None), and the nodes derive their parameters from it (`robot_rl.ros.node_utils.params_from_dataclass`)
and build the config back from the parameter values (`config_from_params`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, TypeVar

Config = TypeVar("Config")

_KEY = "robot_rl.setting"


@dataclass(frozen=True)
class Setting:
    description: str
    low: float | int | None = None
    high: float | int | None = None
    """The node parameter's range (library users may go beyond it; the dataclass checks what it must)."""
    choices: tuple[str, ...] | None = None
    unset: Any = None
    """The parameter value that stands for the field's None (ROS parameters cannot be None): 0, ''."""


def setting(default: Any, description: str, *, low: float | int | None = None, high: float | int | None = None,
            choices: Sequence[str] | None = None, unset: Any = None) -> Any:
    """A dataclass field with default `default` that is also a node parameter of the same name."""
    return dataclasses.field(default=default, metadata={_KEY: Setting(
        description, low, high, tuple(choices) if choices is not None else None, unset)})


def settings_of(cls: type) -> dict[str, tuple[dataclasses.Field, Setting]]:
    """Field name -> (field, Setting) for the fields of dataclass `cls` made with `setting`, in field order."""
    return {f.name: (f, f.metadata[_KEY]) for f in dataclasses.fields(cls) if _KEY in f.metadata}


def config_from_params(cls: type[Config], params: Mapping[str, Any], **others: Any) -> Config:
    """A `cls` whose settings take their values from `params` (node parameter values by name; a
    setting's `unset` value becomes None, one absent keeps its default); `others` are the fields
    that are no node parameters."""
    values = {}
    for name, (_, s) in settings_of(cls).items():
        if name in params:
            values[name] = None if s.unset is not None and params[name] == s.unset else params[name]
    return cls(**values, **others)
