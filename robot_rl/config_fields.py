"""Settings declared once, on the config dataclasses: a field made with `setting(...)` carries what
its node parameter needs (a description, a range or choices, the parameter value that stands for
None), and the nodes derive their parameters from it (`robot_rl.ros.node_utils.params_from_dataclass`)
and build the config back from the parameter values (`config_from_params`)."""

from __future__ import annotations

import dataclasses
import difflib
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


class ParameterError(ValueError):
    """A parameter or setting value refused; a node exits with this message, a command prints it."""


def coerce_to_default(name: str, default: Any, value: Any) -> Any:
    """`value` as the type of `default` (a parameter's or a config field's): an integer where a float is declared
    becomes a float (`sync_updates_per_step=0`), a list where a tuple is declared a tuple of the elements' type;
    any other mismatch raises ParameterError naming `name`, the value and the type expected."""
    if isinstance(default, (list, tuple)):  # tuples: the defaults of config dataclasses
        if not isinstance(value, (list, tuple)):
            raise ParameterError(f"parameter {name!r}={value!r}: expected a list")
        if not default:
            return type(default)(value)
        return type(default)(coerce_to_default(name, default[0], v) for v in value)
    if isinstance(default, bool) or isinstance(value, bool):
        ok = isinstance(default, bool) and isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float))
        value = float(value) if ok else value
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise ParameterError(f"parameter {name!r}={value!r} ({type(value).__name__}): expected "
                             f"{type(default).__name__}, like its default {default!r}")
    return value


def closest_name(name: str, known) -> str:
    """' (did you mean 'x'?)' for the known name closest to a mistyped one; '' when none is close."""
    match = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def checked_fields(defaults: Any, values: Mapping[str, Any], prefix: str, exclude: tuple[str, ...] = ()) -> dict:
    """`values` for fields of the dataclass instance `defaults`, each converted to the type of its default as node
    parameters are (`coerce_to_default`); an unknown field or a value of the wrong type raises ParameterError naming
    it as `prefix` + field (and the closest field)."""
    declared = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(defaults) if f.name not in exclude}
    ranges = {name: s for name, (_, s) in settings_of(type(defaults)).items()}
    out = {}
    for name, value in values.items():
        if name not in declared:
            raise ParameterError(f"unknown setting {prefix}{name}{closest_name(name, declared)}")
        default = declared[name]
        if default is None or value is None or isinstance(default, dict):  # no type to hold it to
            out[name] = value
        else:
            out[name] = coerce_to_default(f"{prefix}{name}", default, value)
            if name in ranges:
                s = ranges[name]
                check_range(f"{prefix}{name}", out[name], s.low, s.high, s.choices)
    return out


def check_range(name: str, value: Any, low: float | int | None, high: float | int | None,
                choices: Sequence[str] | None) -> None:
    """ParameterError when `value` (each element of a list) is outside [low, high] or not one of `choices`."""
    if low is not None and high is not None:
        elements = value if isinstance(value, (list, tuple)) else [value]
        if not all(low <= element <= high for element in elements):
            each = " (each element)" if isinstance(value, (list, tuple)) else ""
            raise ParameterError(f"parameter {name!r}={value!r} is outside its range [{low}, {high}]{each}")
    if choices is not None and value not in choices:
        raise ParameterError(f"parameter {name!r}={value!r} is not one of {list(choices)}")
