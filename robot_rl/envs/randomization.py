"""Domain randomization: named parameter distributions with separate train and eval ranges.

Robot-agnostic: this module only describes and samples parameters; each simulator applies a
sample to its own model (the arm: :meth:`robot_rl.robots.arm.sim.ArmSim.apply_randomization`).

File format (YAML, or the same structure as a dict)::

    train:                                  # ranges the policy is trained on
      cube_size: {uniform: [0.035, 0.045]}  # scalar uniform [low, high]
      light_dir: {uniform: {low: [-0.3, 0.1, -1.0], high: [0.3, 0.6, -1.0]}}  # vector uniform
      cube_mass: {log_uniform: [0.05, 0.2]} # log-uniform, 0 < low <= high (scalar or vector)
      latency:   {choice: [0, 1]}           # one of the listed values (numbers, strings, lists)
      noise:     {constant: 0.002}          # always this value
    eval:                                   # deployment distribution benchmarks report on
      ...
    pretrain:                               # optional: what a pretrained vision encoder sees
      ...

A file may also name *shifts*: splits made from another split with some of its parameters drawn
differently, for held-out rows that move one parameter at a time::

    shifts:
      restitution_low: {from: eval, set: {restitution: {uniform: [0.60, 0.70]}}}

A shift keeps its base's parameters in the base's file order (so a seed draws the same values for
every parameter it does not set) and may only set parameters its base lists; its base is a section
or an earlier shift. Shifts are used by name like any split.

``uniform`` and ``log_uniform`` take ``[low, high]`` or ``{low: ..., high: ...}``, where low
and high are both numbers or both lists of equal length (vector-valued: each element is
drawn independently).  ``train`` and ``eval`` are required; they may list different parameters (a
parameter a section omits stays at the simulator's nominal value).  ``pretrain`` is optional (a
file without it pretrains on ``train``): an encoder that is frozen later should have seen more
visual variety than any one policy is trained on.  Sampled numbers are
Python floats, vectors float64 arrays; ``choice`` returns the listed element itself (lists
as float64 arrays) and ``constant`` its value (lists as float64 arrays).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import yaml

__all__ = [
    "DISTRIBUTION_KINDS",
    "OPTIONAL_SPLITS",
    "SHIFTS",
    "SPLITS",
    "Choice",
    "Constant",
    "Distribution",
    "LogUniform",
    "Randomization",
    "Uniform",
    "parse_distribution",
]

#: Required sections of a randomization file.
SPLITS: tuple[str, ...] = ("train", "eval")
#: Optional sections: ``pretrain`` falls back to ``train`` when a file lacks it; ``heldout``
#: (plants beyond the training ranges, for transfer) and ``train_hard`` (the harder end of the
#: training ranges, drawn jointly for a fraction of training episodes; it may only narrow
#: parameters that ``train`` lists) must be written to be used.
OPTIONAL_SPLITS: tuple[str, ...] = ("pretrain", "heldout", "train_hard")
#: The section of named shifts (see the module docstring).
SHIFTS = "shifts"

Value = float | str | np.ndarray


def _as_value(value: Any) -> Value:
    """Lists become float64 arrays; numbers floats (ints kept, e.g. step counts); strings as is."""
    if isinstance(value, (list, tuple)):
        return np.asarray(value, dtype=np.float64)
    return value


@dataclass(frozen=True)
class Uniform:
    """Uniform on [low, high] (element-wise for vectors)."""

    low: np.ndarray
    """Lower bound, shape () for a scalar parameter or (n,) for a vector."""
    high: np.ndarray
    """Upper bound, same shape as ``low``, element-wise >= ``low``."""

    def sample(self, rng: np.random.Generator) -> Value:
        x = rng.uniform(self.low, self.high)
        return float(x) if self.low.ndim == 0 else x

    def sample_batch(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, size=(n, *self.low.shape))


@dataclass(frozen=True)
class LogUniform:
    """Log-uniform on [low, high] (0 < low <= high; element-wise for vectors)."""

    low: np.ndarray
    """Lower bound (> 0), shape () or (n,)."""
    high: np.ndarray
    """Upper bound, same shape as ``low``, element-wise >= ``low``."""

    def sample(self, rng: np.random.Generator) -> Value:
        x = np.exp(rng.uniform(np.log(self.low), np.log(self.high)))
        return float(x) if self.low.ndim == 0 else x

    def sample_batch(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.exp(rng.uniform(np.log(self.low), np.log(self.high), size=(n, *self.low.shape)))


@dataclass(frozen=True)
class Choice:
    """One of a list of values, uniformly."""

    values: tuple[Any, ...]
    """Candidates as written in the file (numbers, strings or lists); at least one."""

    def sample(self, rng: np.random.Generator) -> Value:
        return _as_value(self.values[int(rng.integers(len(self.values)))])

    def sample_batch(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return _stack([_as_value(self.values[i]) for i in rng.integers(len(self.values), size=n)])


@dataclass(frozen=True)
class Constant:
    """Always the same value."""

    value: Any
    """The value as written in the file (number, string or list)."""

    def sample(self, rng: np.random.Generator) -> Value:
        return _as_value(self.value)

    def sample_batch(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return _stack([_as_value(self.value)] * n)


def _stack(values: list[Value]) -> np.ndarray:
    """Draws of one parameter as an array: (n,) numbers or strings (object), (n, d) vectors."""
    if any(isinstance(v, str) for v in values):
        return np.array(values, dtype=object)
    return np.asarray(values, dtype=np.float64)


Distribution = Uniform | LogUniform | Choice | Constant

#: Distribution kinds a parameter may use (the single key of its mapping).
DISTRIBUTION_KINDS: tuple[str, ...] = ("uniform", "log_uniform", "choice", "constant")


def _bounds(where: str, kind: str, spec: Any) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(spec, Mapping):
        if set(spec) != {"low", "high"}:
            raise ValueError(f"{where}: {kind} mapping needs exactly the keys low and high, got {sorted(spec)}")
        low, high = spec["low"], spec["high"]
    elif isinstance(spec, (list, tuple)) and len(spec) == 2:
        low, high = spec
    else:
        raise ValueError(f"{where}: {kind} needs [low, high] or {{low: ..., high: ...}}, got {spec!r}")
    try:
        lo, hi = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {kind} bounds must be numbers or lists of numbers, got {spec!r}") from None
    if lo.shape != hi.shape or lo.ndim > 1 or (lo.ndim == 1 and lo.size == 0):
        raise ValueError(f"{where}: {kind} low and high must both be numbers or equal-length lists, got {spec!r}")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ValueError(f"{where}: {kind} bounds must be finite, got {spec!r}")
    if np.any(lo > hi):
        raise ValueError(f"{where}: {kind} low > high ({low} > {high})")
    return lo, hi


def parse_distribution(where: str, spec: Any) -> Distribution:
    """Distribution from its file form ``{kind: arguments}``; ``where`` names it in errors."""
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ValueError(f"{where}: expected a mapping with one distribution kind "
                         f"({', '.join(DISTRIBUTION_KINDS)}), got {spec!r}")
    ((kind, args),) = spec.items()
    if kind == "uniform":
        return Uniform(*_bounds(where, kind, args))
    if kind == "log_uniform":
        low, high = _bounds(where, kind, args)
        if np.any(low <= 0):
            raise ValueError(f"{where}: log_uniform bounds must be > 0, got low {low}")
        return LogUniform(low, high)
    if kind == "choice":
        if not isinstance(args, (list, tuple)) or not args:
            raise ValueError(f"{where}: choice needs a non-empty list of values, got {args!r}")
        for value in args:
            _check_value(where, value)
        return Choice(tuple(args))
    if kind == "constant":
        _check_value(where, args)
        return Constant(args)
    raise ValueError(f"{where}: unknown distribution kind {kind!r}; expected one of {', '.join(DISTRIBUTION_KINDS)}")


def _check_value(where: str, value: Any) -> None:
    """Accepts a string, a finite number or a non-empty list of finite numbers."""
    if isinstance(value, str):
        return
    if isinstance(value, bool) or value is None or isinstance(value, Mapping):
        raise ValueError(f"{where}: values must be numbers, strings or lists of numbers, got {value!r}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: values must be numbers, strings or lists of numbers, got {value!r}") from None
    if arr.ndim > 1 or (arr.ndim == 1 and arr.size == 0) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{where}: values must be finite numbers or non-empty flat lists, got {value!r}")


class Randomization:
    """Named parameter distributions for the ``train`` and ``eval`` splits.

    Args:
        spec: ``{"train": {name: {kind: args}}, "eval": {...}}`` (see the module docstring).
        source: where ``spec`` came from, for error messages.

    Raises:
        ValueError: a missing or unknown section, or a malformed parameter (the message
            names ``split.parameter``).
    """

    def __init__(self, spec: Mapping[str, Any], source: str = "randomization") -> None:
        if not isinstance(spec, Mapping):
            raise ValueError(f"{source}: expected a mapping with sections {', '.join(SPLITS)}, "
                             f"got {type(spec).__name__}")
        missing = [s for s in SPLITS if s not in spec]
        if missing:
            raise ValueError(f"{source}: missing section(s) {', '.join(missing)}")
        unknown = sorted(set(spec) - set(SPLITS) - set(OPTIONAL_SPLITS) - {SHIFTS})
        if unknown:
            raise ValueError(f"{source}: unknown section(s) {', '.join(map(str, unknown))}; "
                             f"expected {', '.join(SPLITS + OPTIONAL_SPLITS + (SHIFTS,))}")
        self.source = source
        self.distributions: dict[str, dict[str, Distribution]] = {}
        for split in (*SPLITS, *(s for s in OPTIONAL_SPLITS if s in spec)):
            params = spec[split]
            if params is None:  # an empty YAML section
                params = {}
            if not isinstance(params, Mapping):
                raise ValueError(f"{source}: section {split} must map parameter names to distributions")
            self.distributions[split] = {
                str(name): parse_distribution(f"{source}: {split}.{name}", dist) for name, dist in params.items()
            }
        foreign = sorted(set(self.distributions.get("train_hard", {})) - set(self.distributions["train"]))
        if foreign:
            raise ValueError(f"{source}: train_hard names {', '.join(foreign)}, which train does not randomize "
                             "(train_hard narrows training ranges; it cannot add parameters)")
        self._add_shifts(spec.get(SHIFTS) or {})

    def _add_shifts(self, shifts: Any) -> None:
        source = self.source
        if not isinstance(shifts, Mapping):
            raise ValueError(f"{source}: section {SHIFTS} must map split names to {{from: SPLIT, set: {{...}}}}")
        for name, shift in shifts.items():
            where = f"{source}: {SHIFTS}.{name}"
            if name in self.distributions or name in OPTIONAL_SPLITS:
                raise ValueError(f"{where}: the name of a section; a shift needs a name of its own")
            if not isinstance(shift, Mapping) or set(shift) != {"from", "set"} or not isinstance(shift["set"], Mapping):
                raise ValueError(f"{where}: expected {{from: SPLIT, set: {{parameter: distribution, ...}}}}, "
                                 f"got {shift!r}")
            base = self.distributions.get(shift["from"])
            if base is None:
                raise ValueError(f"{where}: from {shift['from']!r} is not a section or an earlier shift; "
                                 f"there are {', '.join(self.distributions)}")
            foreign = sorted(set(map(str, shift["set"])) - set(base))
            if foreign:
                raise ValueError(f"{where}: sets {', '.join(foreign)}, which {shift['from']} does not list "
                                 "(a shift redraws its base's parameters; it cannot add any)")
            changed = {str(k): parse_distribution(f"{where}.{k}", d) for k, d in shift["set"].items()}
            self.distributions[str(name)] = {k: changed.get(k, d) for k, d in base.items()}

    @classmethod
    def load(cls, source: str | os.PathLike | Mapping[str, Any] | Randomization) -> Randomization:
        """From a YAML path, a dict in the file's structure, or an existing object (returned as is)."""
        if isinstance(source, Randomization):
            return source
        if isinstance(source, Mapping):
            return cls(source)
        if not isinstance(source, (str, os.PathLike)):
            raise ValueError(f"randomization must be a YAML path or a mapping, got {type(source).__name__}")
        path = Path(source)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ValueError(f"cannot read randomization file {path}: {exc}") from None
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: invalid YAML: {exc}") from None
        return cls(spec, source=str(path))

    @property
    def splits(self) -> tuple[str, ...]:
        """Every split the file defines, shifts included, in file order."""
        return tuple(self.distributions)

    def check_split(self, split: str) -> None:
        """ValueError naming the splits there are when this file has no split (or shift) `split`."""
        self._split(split)

    def parameters(self, split: str) -> tuple[str, ...]:
        """Parameter names of a split, in file order."""
        return tuple(self._split(split))

    def sample(self, split: str, rng: np.random.Generator) -> dict[str, Value]:
        """One draw of every parameter of ``split`` (in file order, so a seed reproduces it)."""
        return {name: dist.sample(rng) for name, dist in self._split(split).items()}

    def sample_batch(self, split: str, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        """``n`` independent draws of every parameter of ``split`` at once (batched simulators):
        ``(n,)`` arrays for numbers (strings as an object array), ``(n, d)`` for vectors."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return {name: dist.sample_batch(rng, n) for name, dist in self._split(split).items()}

    def _split(self, split: str) -> dict[str, Distribution]:
        if split == "pretrain" and split not in self.distributions:
            return self.distributions["train"]
        try:
            return self.distributions[split]
        except KeyError:
            raise ValueError(f"{self.source} has no randomization split {split!r}; it has "
                             f"{', '.join(self.distributions)}") from None

    def __repr__(self) -> str:
        counts = ", ".join(f"{s}: {len(d)} parameters" for s, d in self.distributions.items())
        return f"Randomization({self.source}; {counts})"
