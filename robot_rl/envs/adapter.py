"""Any Gymnasium environment as the agent sees it: cameras + one normalised state vector, actions in [-1, 1].

Third-party robot-learning environments give observations as (nested) Dicts of state vectors and
camera images, actions in their own ranges (a gripper in [0, 2], a discrete open/close), and
success under one of several info keys. `EnvAdapter` maps one environment's conventions onto
ours, declared once and saved with the policy, so no user writes a wrapper and a saved policy
runs on the same environment again (`robot-rl eval`):

* observations: every Box entry of the (flattened, "a/b" for nested keys) Dict is a camera (uint8
  HxWxC or CxHxW, C in 1 or 3, or HxW) or state (anything else, raveled and concatenated in the
  declared order); `obs_keys` chooses and orders them. Cameras are resized to one square size.
* state normalisation: each state feature is mapped to about [-1, 1], through its declared bounds
  where the space has usable ones, otherwise through mean and standard deviation measured on the
  first observations of the run (demonstrations and warm-up); the numbers travel with the policy.
* actions: the agent's [-1, 1] is mapped linearly onto each Box entry's bounds, onto a declared
  gripper's open (-1) and close (+1) values, and onto a Discrete entry's choices (rounded).
* success: info's "is_success", "succeed" or "success" (or a named key) becomes info["is_success"].
* a person's takeover reported by the environment (info "is_intervention" / "intervention" with
  the applied action under "action_intervention" / "teleop_action" / "intervention_action", as
  LeRobot's gym environments report it) becomes info["intervention"] and, in the agent's action
  space, info["intervention_action"].
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from robot_rl.envs.env_kwargs import make_env

SUCCESS_KEYS = ("is_success", "succeed", "success")
INTERVENTION_KEYS = ("is_intervention", "intervention")
INTERVENTION_ACTION_KEYS = ("action_intervention", "teleop_action", "intervention_action")
NORMALIZE_MODES = ("auto", "bounds", "off")
MAX_BOUNDS_WIDTH = 1e4
"""Declared bounds wider than this (e.g. +-1e6 placeholders) say nothing about scale: statistics instead."""
TELEOP_AXES = ("x", "y", "z", "roll", "pitch", "yaw")
STATS_CLIP = 10.0
"""Normalised features measured by statistics are clipped here (an outlier cannot blow up the critic)."""


@dataclass
class AdapterConfig:
    """What a user may declare about an environment's conventions (everything has a default that
    reads the environment's own spaces)."""

    obs_keys: tuple[str, ...] | None = None
    """Observation entries to use, in order ("a/b" for nested Dict keys); None: every Box entry in the
    space's order."""
    image_size: int | None = None
    """Square size every camera is resized to; None: the cameras' own size, which must be square and shared."""
    success_key: str | None = None
    """info key with the success flag; None: the first of "is_success", "succeed", "success" present."""
    gripper_index: int | None = None
    """Index of the gripper in the flattened action; with gripper_open/gripper_close it is driven
    -1 (open) .. +1 (close) by the agent instead of being rescaled onto its bounds."""
    gripper_open: float | None = None
    """The gripper entry's open value in the environment's units (e.g. 0 for a [0, 2] gripper)."""
    gripper_close: float | None = None
    """The gripper entry's closed value in the environment's units (e.g. 2 for a [0, 2] gripper)."""
    teleop_axes: tuple[str, ...] | None = None
    """What a person's device drives in each entry of the agent's action: x, y, z, roll, pitch, yaw (the
    device's twist; "-x" flips), gripper (-1 open, +1 close) or none (held at 0). None: an action of 4
    entries is (x, y, z, gripper) and of 7 (x, y, z, roll, pitch, yaw, gripper), as the arm tasks'."""
    normalize_state: str = "auto"
    """"auto": every state feature to about [-1, 1] (bounds where usable, else statistics); "bounds": only
    features with usable bounds; "off": state as the environment gives it."""


@dataclass
class StateNormalizer:
    """x -> clip((x - offset) / scale); features measured by statistics are clipped to +-STATS_CLIP."""

    offset: list[float]
    scale: list[float]
    clip: list[float]
    pending: list[bool] = field(default_factory=list)
    """Features still waiting for statistics (`fit`); they pass through unchanged until then."""

    @classmethod
    def from_bounds(cls, low: np.ndarray, high: np.ndarray, mode: str) -> "StateNormalizer":
        if mode not in NORMALIZE_MODES:
            raise ValueError(f"normalize_state must be one of {NORMALIZE_MODES}, got {mode!r}")
        n = len(low)
        usable = np.isfinite(low) & np.isfinite(high) & (high > low) & (high - low <= MAX_BOUNDS_WIDTH)
        if mode == "off":
            usable = np.zeros(n, bool)
        low, high = np.where(usable, low, -1.0), np.where(usable, high, 1.0)  # no inf arithmetic
        offset = np.where(usable, (low + high) / 2, 0.0)
        scale = np.where(usable, (high - low) / 2, 1.0)
        pending = ~usable if mode == "auto" else np.zeros(n, bool)
        return cls(offset.tolist(), scale.tolist(), np.where(usable, 1.0, np.inf).tolist(), pending.tolist())

    @property
    def needs_statistics(self) -> bool:
        return any(self.pending)

    def fit(self, samples: np.ndarray) -> None:
        """Mean and standard deviation of the pending features over `samples` (N, D)."""
        if not self.needs_statistics:
            return
        samples = np.asarray(samples, np.float64)
        if samples.ndim != 2 or len(samples) < 2:
            raise ValueError(f"state statistics need at least 2 observations, got {samples.shape}")
        mean, std = samples.mean(0), samples.std(0)
        pending = np.asarray(self.pending)
        offset, scale, clip = np.asarray(self.offset), np.asarray(self.scale), np.asarray(self.clip)
        offset[pending] = mean[pending]
        # A feature that never moved keeps unit scale: dividing by ~0 would turn noise into huge inputs.
        scale[pending] = np.where(std[pending] > 1e-6, std[pending], 1.0)
        clip[pending] = STATS_CLIP
        self.offset, self.scale, self.clip = offset.tolist(), scale.tolist(), clip.tolist()
        self.pending = [False] * len(self.pending)

    def keep_raw(self, index: int) -> None:
        """Feature `index` passes through unchanged (e.g. a gripper command whose sign means closed)."""
        self.offset[index], self.scale[index], self.clip[index], self.pending[index] = 0.0, 1.0, np.inf, False

    def __call__(self, state: np.ndarray) -> np.ndarray:
        state = np.asarray(state, np.float32)
        out = (state - np.asarray(self.offset, np.float32)) / np.asarray(self.scale, np.float32)
        clip = np.asarray(self.clip, np.float32)
        return np.clip(out, -clip, clip).astype(np.float32)


def flat_entries(space: spaces.Space, prefix: str = "") -> list[tuple[str, spaces.Space]]:
    """(path, leaf space) of every leaf of a (nested) Dict space, in the space's order."""
    if isinstance(space, spaces.Dict):
        return [entry for key, sub in space.spaces.items() for entry in flat_entries(sub, f"{prefix}{key}/")]
    return [(prefix.rstrip("/"), space)]


def leaf(value: Any, path: str) -> Any:
    for key in path.split("/") if path else ():
        value = value[key]
    return value


def image_layout(space: spaces.Space) -> str | None:
    """"hwc", "chw" or "hw" for a uint8 Box that is a camera image; None for anything else."""
    if not isinstance(space, spaces.Box) or space.dtype != np.uint8:
        return None
    shape = space.shape
    if len(shape) == 2 and min(shape) >= 8:
        return "hw"
    if len(shape) == 3 and shape[-1] in (1, 3) and min(shape[:2]) >= 8:
        return "hwc"
    if len(shape) == 3 and shape[0] in (1, 3) and min(shape[1:]) >= 8:
        return "chw"
    return None


def _hwc(frame: np.ndarray, layout: str) -> np.ndarray:
    frame = np.asarray(frame, np.uint8)
    if layout == "chw":
        frame = frame.transpose(1, 2, 0)
    elif layout == "hw":
        frame = frame[..., None]
    return np.repeat(frame, 3, axis=-1) if frame.shape[-1] == 1 else frame


def resize_frame(frame: np.ndarray, size: int) -> np.ndarray:
    """An (H, W, 3) uint8 frame at size x size (bilinear; a writable copy), unchanged when it already is."""
    frame = np.asarray(frame, np.uint8)
    if frame.shape[:2] == (size, size):
        return frame
    from PIL import Image

    return np.array(Image.fromarray(frame).resize((size, size), Image.BILINEAR))


@dataclass
class ActionEntry:
    """One entry of the environment's (flattened) action space and its slice of the agent's action."""

    path: str
    kind: str
    """"box" (rescaled onto low/high) or "discrete" (n choices, rounded)."""
    size: int
    low: list[float]
    high: list[float]
    shape: list[int]


def _action_entries(space: spaces.Space) -> list[ActionEntry]:
    entries = []
    for path, sub in flat_entries(space):
        if isinstance(sub, spaces.Box):
            low, high = np.broadcast_to(sub.low, sub.shape).ravel(), np.broadcast_to(sub.high, sub.shape).ravel()
            if not (np.isfinite(low).all() and np.isfinite(high).all()):
                raise ValueError(f"action {path or 'space'} must be bounded, got {sub}")
            entries.append(ActionEntry(path, "box", int(np.prod(sub.shape)), low.tolist(), high.tolist(),
                                       list(sub.shape)))
        elif isinstance(sub, spaces.Discrete):
            start = int(sub.start)
            entries.append(ActionEntry(path, "discrete", 1, [float(start)], [float(start + sub.n - 1)], []))
        else:
            raise ValueError(f"action {path or 'space'}: {type(sub).__name__} is not supported (Box, Discrete, or a "
                             "Dict of them)")
    return entries


class AdapterMismatch(ValueError):
    """A saved adapter does not fit the environment it is used on (`EnvAdapter.check_fits`)."""


@dataclass
class EnvAdapter:
    """One environment's conventions resolved against its spaces (see the module); JSON-serialisable."""

    state_keys: list[str]
    state_sizes: list[int]
    camera_keys: list[str]
    camera_layouts: list[str]
    image_size: int | None
    success_key: str | None
    actions: list[ActionEntry]
    action_is_dict: bool
    gripper_index: int | None
    gripper_open: float | None
    gripper_close: float | None
    teleop_axes: list[str] | None
    normalizer: StateNormalizer

    # ---- construction ----------------------------------------------------------------------

    @classmethod
    def for_env(cls, env: gym.Env, config: AdapterConfig | None = None) -> "EnvAdapter":
        config = config or AdapterConfig()
        name = env.spec.id if env.spec else type(env.unwrapped).__name__
        entries = dict(flat_entries(env.observation_space))
        if config.obs_keys is not None:
            unknown = [k for k in config.obs_keys if k not in entries]
            if unknown:
                raise ValueError(f"{name}: no observation entr{'y' if len(unknown) == 1 else 'ies'} {unknown}; "
                                 f"it has {sorted(entries)}")
            chosen = list(config.obs_keys)
        else:
            chosen = [k for k, s in entries.items() if isinstance(s, spaces.Box)]
        state_keys, sizes, cameras, layouts, lows, highs = [], [], [], [], [], []
        for key in chosen:
            space = entries[key]
            if not isinstance(space, spaces.Box):
                raise ValueError(f"{name}: observation {key!r} is a {type(space).__name__}; only Box entries "
                                 "(state vectors and camera images) are supported")
            layout = image_layout(space)
            if layout is not None:
                cameras.append(key)
                layouts.append(layout)
                continue
            state_keys.append(key)
            sizes.append(int(np.prod(space.shape)))
            lows.append(np.broadcast_to(space.low, space.shape).ravel().astype(np.float64))
            highs.append(np.broadcast_to(space.high, space.shape).ravel().astype(np.float64))
        if not state_keys and not cameras:
            raise ValueError(f"{name}: no usable observation entries in {env.observation_space}")
        image_size = config.image_size
        if cameras and image_size is None:
            shapes = {k: _hwc(np.zeros(entries[k].shape, np.uint8), lay).shape[:2] for k, lay in zip(cameras, layouts)}
            sizes_seen = set(shapes.values())
            if len(sizes_seen) != 1 or len(set(next(iter(sizes_seen)))) != 1:
                raise ValueError(f"{name}: camera frames {shapes} are not one square size; set image_size=N to "
                                 "resize every camera to N x N")
            image_size = next(iter(sizes_seen))[0]
        if image_size is not None and image_size < 8:
            raise ValueError(f"image_size must be at least 8, got {image_size}")
        actions = _action_entries(env.action_space)
        if not any(a.kind == "box" for a in actions):
            raise ValueError(f"{name}: SAC needs a continuous (Box) action; {env.action_space} has none")
        total = sum(a.size for a in actions)
        gripper = (config.gripper_index, config.gripper_open, config.gripper_close)
        if any(v is not None for v in gripper) and not all(v is not None for v in gripper):
            raise ValueError("a gripper is declared by gripper_index, gripper_open and gripper_close together")
        if config.gripper_index is not None and not 0 <= config.gripper_index < total:
            raise ValueError(f"gripper_index {config.gripper_index} is outside the action's {total} entries")
        teleop_axes = list(config.teleop_axes) if config.teleop_axes is not None else None
        if teleop_axes is not None:
            unknown = [a for a in teleop_axes if a.lstrip("-") not in (*TELEOP_AXES, "gripper", "none")]
            if unknown or len(teleop_axes) != total:
                raise ValueError(f"teleop_axes needs one of {', '.join(TELEOP_AXES)}, gripper or none (x may be "
                                 f"-x) for each of the {total} action entries, got {teleop_axes}")
        low = np.concatenate(lows) if lows else np.zeros(0)
        high = np.concatenate(highs) if highs else np.zeros(0)
        return cls(state_keys, sizes, cameras, layouts, image_size if cameras else None, config.success_key,
                   actions, isinstance(env.action_space, spaces.Dict), *gripper, teleop_axes,
                   StateNormalizer.from_bounds(low, high, config.normalize_state))

    def check_fits(self, env: gym.Env) -> None:
        """Raises AdapterMismatch naming the first entry of `env`'s spaces that differs from what this (saved)
        adapter was resolved against: a policy saved with it would otherwise fail on a shape deep inside, or act
        wrongly."""
        name = env.spec.id if env.spec else type(env.unwrapped).__name__
        entries = dict(flat_entries(env.observation_space))
        for key, size in zip(self.state_keys, self.state_sizes):
            found = entries.get(key)
            if found is None or image_layout(found) is not None or int(np.prod(found.shape)) != size:
                what = "no such entry" if found is None else f"{found}"
                label = f"observation {key!r}" if key else "the observation"
                raise AdapterMismatch(f"{name}: {label} is {what}, where the saved adapter expects a state of {size} "
                                      "values")
        missing = [k for k in self.camera_keys if k not in entries or image_layout(entries[k]) is None]
        if missing:
            raise AdapterMismatch(f"{name}: no camera {missing}, which the saved adapter reads")
        actions = _action_entries(env.action_space)
        if [(a.path, a.kind, a.size) for a in actions] != [(a.path, a.kind, a.size) for a in self.actions]:
            saved = ", ".join(f"{a.path or 'action'}: {a.kind} of {a.size}" for a in self.actions)
            raise AdapterMismatch(f"{name}: action {env.action_space} is not the one the saved adapter maps onto "
                                  f"({saved})")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | Mapping) -> "EnvAdapter":
        data = dict(json.loads(text) if isinstance(text, str) else text)
        data["actions"] = [ActionEntry(**a) for a in data["actions"]]
        data["normalizer"] = StateNormalizer(**data["normalizer"])
        return cls(**data)

    # ---- observations ------------------------------------------------------------------------

    @property
    def state_dim(self) -> int:
        return sum(self.state_sizes)

    @property
    def action_dim(self) -> int:
        return sum(a.size for a in self.actions)

    def observation_space(self) -> spaces.Space:
        state = spaces.Box(-np.inf, np.inf, (self.state_dim,), np.float32)
        if not self.camera_keys:
            return state
        size = self.image_size
        return spaces.Dict({**{k: spaces.Box(0, 255, (size, size, 3), np.uint8) for k in self.camera_keys},
                            "state": state})

    def raw_state(self, obs: Any) -> np.ndarray:
        """The declared state entries concatenated, not yet normalised."""
        if not self.state_keys:
            return np.zeros(0, np.float32)
        parts = [np.asarray(leaf(obs, k), np.float32).ravel() for k in self.state_keys]
        for key, part, size in zip(self.state_keys, parts, self.state_sizes):
            if part.size != size:
                raise ValueError(f"observation {key!r} has {part.size} values, its space declares {size}")
        return np.concatenate(parts)

    def frame(self, obs: Any, key: str, layout: str) -> np.ndarray:
        return resize_frame(_hwc(leaf(obs, key), layout), self.image_size)

    def observation(self, obs: Any, normalize: bool = True) -> Any:
        """The agent's observation: the state vector, or a dict of cameras + "state"."""
        state = self.raw_state(obs)
        if normalize:
            state = self.normalizer(state)
        if not self.camera_keys:
            return state
        return {**{name: self.frame(obs, k, lay) for name, k, lay in zip(self.cameras, self.camera_keys,
                                                                          self.camera_layouts)},
                "state": state}

    @property
    def cameras(self) -> tuple[str, ...]:
        """The agent's camera names: nested keys joined by "_"; an observation that is one image is "image"."""
        return tuple(k.replace("/", "_") or "image" for k in self.camera_keys)

    # ---- actions -------------------------------------------------------------------------------

    def env_action(self, action: np.ndarray) -> Any:
        """The agent's action in [-1, 1] -> the environment's action."""
        action = np.clip(np.asarray(action, np.float64).ravel(), -1.0, 1.0)
        if action.size != self.action_dim:
            raise ValueError(f"action has {action.size} entries, the environment takes {self.action_dim}")
        out, i = {}, 0
        for entry in self.actions:
            part = action[i:i + entry.size]
            low, high = np.asarray(entry.low), np.asarray(entry.high)
            value = low + (part + 1.0) / 2.0 * (high - low)
            if self.gripper_index is not None and i <= self.gripper_index < i + entry.size:
                j = self.gripper_index - i
                value[j] = self.gripper_open + (part[j] + 1.0) / 2.0 * (self.gripper_close - self.gripper_open)
            if entry.kind == "discrete":
                out[entry.path] = int(np.clip(np.rint(value[0]), low[0], high[0]))
            else:
                out[entry.path] = value.reshape(entry.shape).astype(np.float32)
            i += entry.size
        if not self.action_is_dict:
            return out[self.actions[0].path]
        nested: dict = {}
        for path, value in out.items():
            *parents, last = path.split("/")
            node = nested
            for key in parents:
                node = node.setdefault(key, {})
            node[last] = value
        return nested

    def agent_action(self, env_action: Any) -> np.ndarray:
        """The environment's action (a person's, a dataset's) -> the agent's [-1, 1] (the inverse of env_action)."""
        flat = None if isinstance(env_action, Mapping) else np.asarray(env_action, np.float64).ravel()
        if flat is not None and flat.size != self.action_dim:
            raise ValueError(f"action has {flat.size} values, the environment's action has {self.action_dim}")
        parts, i = [], 0
        for entry in self.actions:
            # A Dict action as the environment takes it, or all its entries concatenated (as datasets store it).
            value = flat[i:i + entry.size] if flat is not None else np.asarray(leaf(env_action, entry.path),
                                                                              np.float64).ravel()
            if value.size != entry.size:
                raise ValueError(f"action {entry.path or 'vector'} has {value.size} values, expected {entry.size}")
            low, high = np.asarray(entry.low), np.asarray(entry.high)
            width = np.where(high > low, high - low, 1.0)
            part = 2.0 * (value - low) / width - 1.0
            if self.gripper_index is not None and i <= self.gripper_index < i + entry.size:
                j = self.gripper_index - i
                part[j] = 2.0 * (value[j] - self.gripper_open) / (self.gripper_close - self.gripper_open) - 1.0
            parts.append(part)
            i += entry.size
        action = np.concatenate(parts).astype(np.float32)
        if not np.isfinite(action).all():
            raise ValueError(f"action {env_action!r} contains NaN or Inf")
        return np.clip(action, -1.0, 1.0)

    def hold_action(self, last_action: np.ndarray | None) -> np.ndarray:
        """The agent's action that holds still: zero (the middle of each range), a declared gripper as `last_action`
        left it (open when None, after a reset)."""
        hold = np.zeros(self.action_dim, np.float32)
        if self.gripper_index is not None:
            hold[self.gripper_index] = last_action[self.gripper_index] if last_action is not None else -1.0
        return hold

    def person_action(self, twist: np.ndarray, gripper: float) -> np.ndarray:
        """The agent's action a person's device means: its twist (6, in [-1, 1]) and held gripper command
        (-1 open, +1 close) placed by `teleop_axes`."""
        axes = self.teleop_axes
        if axes is None:
            defaults = {4: ["x", "y", "z", "gripper"], 7: [*TELEOP_AXES, "gripper"]}
            if self.action_dim not in defaults:
                raise ValueError(f"a person's device drives this environment's {self.action_dim} action entries "
                                 "only when told how: set adapter.teleop_axes (e.g. [x, y, gripper])")
            axes = defaults[self.action_dim]
        values = {name: float(v) for name, v in zip(TELEOP_AXES, np.asarray(twist, np.float64))}
        values.update(gripper=float(gripper), none=0.0)
        action = [-values[a[1:]] if a.startswith("-") else values[a] for a in axes]
        return np.clip(np.asarray(action, np.float32), -1.0, 1.0)

    # ---- info ----------------------------------------------------------------------------------

    def success(self, info: Mapping) -> bool:
        keys = (self.success_key,) if self.success_key else SUCCESS_KEYS
        for key in keys:
            if key in info:
                return bool(np.asarray(info[key]).any())
        return False

    def intervention(self, info: Mapping) -> np.ndarray | None:
        """The agent-space action a person applied at this step, if the environment reports a takeover."""
        flag = next((info[k] for k in INTERVENTION_KEYS if k in info), False)
        if not bool(np.asarray(flag).any()):
            return None
        key = next((k for k in INTERVENTION_ACTION_KEYS if k in info), None)
        if key is None:
            raise ValueError(f"the environment reports an intervention but no action under any of "
                             f"{INTERVENTION_ACTION_KEYS}")
        return self.agent_action(info[key])


class CanonicalEnv(gym.Wrapper):
    """`env` seen through `adapter`: agent observations and actions, info["is_success"], and a person's
    takeover as info["intervention"] / info["intervention_action"]. With `normalize=False` the state is
    left raw (what datasets store; the trainer normalises it once statistics exist)."""

    def __init__(self, env: gym.Env, adapter: EnvAdapter, normalize: bool = True):
        super().__init__(env)
        self.adapter, self.normalize = adapter, normalize
        self.observation_space = adapter.observation_space()
        self.action_space = spaces.Box(-1.0, 1.0, (adapter.action_dim,), np.float32)

    def _info(self, info: Mapping) -> dict:
        info = dict(info)
        info["is_success"] = self.adapter.success(info)
        action = self.adapter.intervention(info)
        info["intervention"] = action is not None
        if action is not None:
            info["intervention_action"] = action
        return info

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.adapter.observation(obs, self.normalize), self._info(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(self.adapter.env_action(action))
        return self.adapter.observation(obs, self.normalize), float(reward), bool(terminated), bool(truncated), \
            self._info(info)


def import_env_namespace(env_id: str) -> str:
    """Imports what registers `env_id` and returns the id as Gymnasium's registry knows it.

    "module:Name-v0" imports `module` (as gymnasium.make would) and returns "Name-v0". "ns/Name-v0", as
    users of third-party suites write it (`gym_hil/PandaPickCube-v0`), imports the module named like the
    namespace when no environment of that namespace is registered yet: suites register themselves on
    import, and Gymnasium itself only imports for "module:". A namespace that names no importable module is
    left for Gymnasium's own "Namespace ... not found" error.

    Raises:
        ImportError: the module exists but failed to import (e.g. a dependency of the suite is missing).
    """
    module, sep, registry_id = env_id.partition(":")
    if sep:
        importlib.import_module(module)
        return registry_id
    namespace, slash, _ = env_id.partition("/")
    registered = any(spec.namespace == namespace for spec in gym.registry.values())
    if slash and namespace.isidentifier() and not registered and importlib.util.find_spec(namespace) is not None:
        importlib.import_module(namespace)
    return env_id


def seeded_reset(env: gym.Env, seed: int, options: Mapping | None = None) -> tuple[Any, dict]:
    """`env.reset(seed=seed, options=options)` after seeding NumPy's global random state from `seed`.

    Gymnasium's seed reaches only `env.np_random`; third-party environments that draw from NumPy's global
    state (gym-hil places its cube with `np.random.uniform`) repeat an episode only when that is seeded too,
    which evaluation and recording on fixed episodes need. `seed` is in [0, 2**32)."""
    np.random.seed(seed)
    return env.reset(seed=seed, options=None if options is None else dict(options))


def make_canonical(env_id: str, kwargs: Mapping | None = None, config: AdapterConfig | None = None,
                   adapter: EnvAdapter | None = None, normalize: bool = True) -> CanonicalEnv:
    """gymnasium.make(env_id, **kwargs) through an adapter: `adapter` (a saved one, checked against the environment's
    spaces: ValueError where they differ) or one resolved from `config`. `env_id` may be "module:Name-v0" or
    "namespace/Name-v0" (see `import_env_namespace`)."""
    import_env_namespace(env_id)
    env = make_env(env_id, kwargs)
    try:
        if adapter is None:
            adapter = EnvAdapter.for_env(env, config)
        else:
            adapter.check_fits(env)
    except Exception:
        env.close()
        raise
    return CanonicalEnv(env, adapter, normalize)


def parse_obs_keys(text: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """--obs-keys "observation,desired_goal,pixels/top" -> a tuple (None stays None)."""
    if text is None:
        return None
    keys = tuple(k.strip() for k in (text.split(",") if isinstance(text, str) else text) if k.strip())
    if not keys:
        raise ValueError("--obs-keys is empty")
    return keys
