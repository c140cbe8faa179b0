"""The deployable policy: what the actor runs, on the simulator and on hardware alike.

It is separate from the algorithm that trains it (SAC): the learner ships the actor
network's weights plus a `PolicySpec`, and anything that holds those can act.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import torch

from robot_rl.agents.networks import TanhGaussianActor


@dataclass(frozen=True)
class PolicySpec:
    """Everything needed to rebuild the actor network from its weights."""

    obs_dim: int
    """Length of the flat observation vector."""
    action_dim: int
    """Length of the action vector; actions are in [-1, 1]."""
    hidden_dims: tuple[int, ...] = (256, 256)
    """Widths of the actor's hidden layers."""
    layer_norm: bool = True
    """LayerNorm + tanh blocks (SERL) instead of plain ReLU."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "PolicySpec":
        fields = json.loads(text)
        if not isinstance(fields, dict):
            raise ValueError("policy spec must be a JSON object")
        fields["hidden_dims"] = tuple(int(w) for w in fields.get("hidden_dims", ()))
        return cls(**fields)


class Policy:
    """A tanh-Gaussian policy that maps observations (numpy) to actions (numpy)."""

    def __init__(self, spec: PolicySpec, state_dict: Mapping[str, torch.Tensor] | None = None,
                 device: str | torch.device = "cpu"):
        self.spec = spec
        self.device = torch.device(device)
        self.network = TanhGaussianActor(spec.obs_dim, spec.action_dim, spec.hidden_dims,
                                         layer_norm=spec.layer_norm).to(self.device)
        if state_dict is not None:
            self.load_state_dict(state_dict)
        self.network.eval()

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Loads weights; raises ValueError (not a torch error) on missing keys or wrong shapes."""
        try:
            self.network.load_state_dict(dict(state_dict), strict=True)
        except RuntimeError as exc:
            raise ValueError(f"policy weights do not match the spec {self.spec}: {exc}") from None

    @torch.inference_mode()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """One action per observation row; (obs_dim,) -> (action_dim,), (B, obs_dim) -> (B, action_dim)."""
        obs = np.asarray(obs, dtype=np.float32)
        if obs.shape[-1:] != (self.spec.obs_dim,) or obs.ndim not in (1, 2):
            raise ValueError(f"observation shape {obs.shape} does not match obs_dim={self.spec.obs_dim}")
        if not np.isfinite(obs).all():
            raise ValueError("observation contains NaN or Inf")
        action, _ = self.network(torch.from_numpy(obs).to(self.device), deterministic=deterministic)
        return action.cpu().numpy()
