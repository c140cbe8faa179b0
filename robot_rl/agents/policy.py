"""The deployable policy: what the actor runs, on the simulator and on hardware alike.

It is separate from the algorithm that trains it (SAC): the learner ships the policy
network's weights plus a `PolicySpec`, and anything that holds those can act.

A policy is an optional image encoder (pixels + proprioception -> features), the
tanh-Gaussian actor over those features, and optionally HIL-SERL's discrete gripper critic,
whose greedy choice in {close, stay, open} is appended to the actor's continuous action.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import torch
from torch import nn

from robot_rl.agents.encoders import EncoderConfig, ImageEncoder
from robot_rl.agents.networks import TanhGaussianActor, mlp

# Discrete gripper commands of the grasp critic, by index, and the gripper action each executes
# (the arm interfaces close the gripper for values > 0). "stay" repeats the current command.
GRIPPER_COMMANDS = ("close", "stay", "open")
_GRIPPER_VALUES = (1.0, None, -1.0)


def gripper_index(gripper_action: torch.Tensor) -> torch.Tensor:
    """Stored gripper action (+1 close, 0 stay, -1 open; any value rounds to the nearest) -> index."""
    return (1 - torch.round(gripper_action.clamp(-1, 1))).long()


def gripper_action(index: torch.Tensor, current_command: torch.Tensor) -> torch.Tensor:
    """Index -> executed gripper action; "stay" keeps `current_command` (> 0 closed)."""
    closed = torch.where(current_command > 0, 1.0, -1.0)
    return torch.where(index == 0, 1.0, torch.where(index == 2, -1.0, closed))


@dataclass(frozen=True)
class PolicySpec:
    """Everything needed to rebuild the policy network from its weights."""

    obs_dim: int
    """Length of the feature vector the actor sees (the flat observation without an encoder)."""
    action_dim: int
    """Continuous actions of the actor, in [-1, 1]."""
    hidden_dims: tuple[int, ...] = (256, 256)
    """Widths of the actor's hidden layers."""
    layer_norm: bool = True
    """LayerNorm + tanh blocks (SERL) instead of plain ReLU."""
    encoder: dict | None = None
    """EncoderConfig fields when observations are camera dicts; None for flat vectors."""
    grasp_hidden_dims: tuple[int, ...] | None = None
    """Hidden widths of the discrete gripper critic; None: no grasp critic."""
    gripper_state_index: int = -1
    """Index (from the end) of the current gripper command in the state vector, for "stay"."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "PolicySpec":
        fields = json.loads(text)
        if not isinstance(fields, dict):
            raise ValueError("policy spec must be a JSON object")
        fields["hidden_dims"] = tuple(int(w) for w in fields.get("hidden_dims", ()))
        if fields.get("grasp_hidden_dims") is not None:
            fields["grasp_hidden_dims"] = tuple(int(w) for w in fields["grasp_hidden_dims"])
        try:
            return cls(**fields)
        except TypeError as exc:
            raise ValueError(f"bad policy spec: {exc}") from None

    @property
    def encoder_config(self) -> EncoderConfig | None:
        if self.encoder is None:
            return None
        return EncoderConfig(**{**self.encoder, "freeze": True})

    @property
    def full_action_dim(self) -> int:
        return self.action_dim + (1 if self.grasp_hidden_dims is not None else 0)


class PolicyNetwork(nn.Module):
    """encoder (optional) -> actor, plus the grasp critic (optional)."""

    def __init__(self, spec: PolicySpec):
        super().__init__()
        encoder_config = spec.encoder_config
        # The weights travel inside the policy: the trunk is built empty and loaded with them.
        self.encoder = ImageEncoder(encoder_config, load_weights=False) if encoder_config is not None else None
        self.actor = TanhGaussianActor(spec.obs_dim, spec.action_dim, spec.hidden_dims, layer_norm=spec.layer_norm)
        self.grasp = mlp(spec.obs_dim, spec.grasp_hidden_dims, len(GRIPPER_COMMANDS)) \
            if spec.grasp_hidden_dims is not None else None
        self.gripper_state_index = spec.gripper_state_index

    def features(self, obs) -> torch.Tensor:
        return self.encoder(obs) if self.encoder is not None else obs

    def act(self, obs, deterministic: bool) -> torch.Tensor:
        state = obs["state"] if isinstance(obs, Mapping) else obs
        return self.act_on_features(self.features(obs), state, deterministic)

    def act_on_features(self, features: torch.Tensor, state: torch.Tensor, deterministic: bool) -> torch.Tensor:
        """Action from already-encoded observations (the learner caches a frozen encoder's features)."""
        action, _ = self.actor(features, deterministic=deterministic)
        if self.grasp is None:
            return action
        index = self.grasp(features).argmax(dim=-1)
        gripper = gripper_action(index, state[:, self.gripper_state_index])
        return torch.cat([action, gripper.unsqueeze(-1).to(action.dtype)], dim=-1)


class Policy:
    """Maps observations (numpy: a flat vector, or a dict of uint8 frames + `state`) to actions."""

    def __init__(self, spec: PolicySpec, state_dict: Mapping[str, torch.Tensor] | None = None,
                 device: str | torch.device = "cpu"):
        self.spec = spec
        self.device = torch.device(device)
        self.network = PolicyNetwork(spec).to(self.device)
        if state_dict is not None:
            self.load_state_dict(state_dict)
        self.network.eval()

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Loads weights; raises ValueError (not a torch error) on missing keys or wrong shapes."""
        try:
            self.network.load_state_dict(dict(state_dict), strict=True)
        except RuntimeError as exc:
            raise ValueError(f"policy weights do not match the spec {self.spec}: {exc}") from None

    def _tensor(self, value, what: str, dtype) -> torch.Tensor:
        array = np.asarray(value)
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ValueError(f"{what} contains NaN or Inf")
        return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)).to(self.device)

    @torch.inference_mode()
    def act(self, obs, deterministic: bool = False) -> np.ndarray:
        """One action per observation; unbatched (obs_dim,) or dict of unbatched arrays -> (action_dim,)."""
        if self.spec.encoder is None:
            flat = np.asarray(obs, dtype=np.float32)
            if flat.shape[-1:] != (self.spec.obs_dim,) or flat.ndim not in (1, 2):
                raise ValueError(f"observation shape {flat.shape} does not match obs_dim={self.spec.obs_dim}")
            batched = flat.ndim == 2
            inputs = self._tensor(flat if batched else flat[None], "observation", np.float32)
        else:
            if not isinstance(obs, Mapping):
                raise ValueError("this policy takes a dict of camera frames and 'state'")
            cameras = self.spec.encoder["cameras"]
            missing = [k for k in (*cameras, "state") if k not in obs]
            if missing:
                raise ValueError(f"observation lacks {missing}")
            bad = [k for k in cameras if np.asarray(obs[k]).dtype != np.uint8]
            if bad:
                raise ValueError(f"camera frames {bad} must be uint8 (rgb8)")
            batched = np.asarray(obs["state"]).ndim == 2
            inputs = {k: self._tensor(obs[k] if batched else np.asarray(obs[k])[None], f"observation[{k!r}]",
                                      np.uint8 if k in cameras else np.float32) for k in (*cameras, "state")}
        action = self.network.act(inputs, deterministic).cpu().numpy()
        return action if batched else action[0]
