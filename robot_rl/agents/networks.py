"""Network building blocks: LayerNorm MLPs, a batched critic ensemble and a tanh-Gaussian actor.

The critic ensemble keeps every member's weights stacked in one tensor, so the whole
ensemble is a handful of batched matmuls (never a Python loop over critics).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn


class EnsembleLinear(nn.Module):
    """`num_members` independent linear layers applied as one batched matmul.

    Input (E, B, in) -> output (E, B, out).
    """

    def __init__(self, num_members: int, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_members, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_features))
        bound = 1.0 / math.sqrt(in_features)
        # Same distribution as nn.Linear's default init, per member.
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the feature axis with a separate affine transform per member."""

    def __init__(self, num_members: int, features: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_members, 1, features))
        self.bias = nn.Parameter(torch.zeros(num_members, 1, features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], eps=self.eps) * self.weight + self.bias


def mlp(in_dim: int, hidden_dims: Sequence[int], out_dim: int, layer_norm: bool = True) -> nn.Sequential:
    """Linear -> LayerNorm -> Tanh blocks (the SERL/RLPD critic and actor trunk), then a linear head."""
    layers: list[nn.Module] = []
    for width in hidden_dims:
        layers.append(nn.Linear(in_dim, width))
        if layer_norm:
            layers.append(nn.LayerNorm(width))
        layers.append(nn.Tanh() if layer_norm else nn.ReLU())
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class CriticEnsemble(nn.Module):
    """Q(s, a) for `num_critics` members at once: returns (E, B)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int], num_critics: int,
                 layer_norm: bool = True):
        super().__init__()
        self.num_critics = num_critics
        layers: list[nn.Module] = []
        in_dim = obs_dim + action_dim
        for width in hidden_dims:
            layers.append(EnsembleLinear(num_critics, in_dim, width))
            if layer_norm:
                layers.append(EnsembleLayerNorm(num_critics, width))
            layers.append(nn.Tanh() if layer_norm else nn.ReLU())
            in_dim = width
        layers.append(EnsembleLinear(num_critics, in_dim, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1)
        x = x.unsqueeze(0).expand(self.num_critics, *x.shape)
        return self.net(x).squeeze(-1)


class TanhGaussianActor(nn.Module):
    """Gaussian policy squashed by tanh; log-std bounded smoothly to [log_std_min, log_std_max]."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int],
                 log_std_min: float = -5.0, log_std_max: float = 2.0, layer_norm: bool = True):
        super().__init__()
        self.net = mlp(obs_dim, hidden_dims, 2 * action_dim, layer_norm)
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max

    def distribution_params(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, raw_log_std = self.net(obs).chunk(2, dim=-1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(raw_log_std) + 1)
        return mean, log_std

    def forward(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (action in [-1, 1], log-probability of that action)."""
        mean, log_std = self.distribution_params(obs)
        if deterministic:
            pre_tanh = mean
        else:
            pre_tanh = mean + log_std.exp() * torch.randn_like(mean)
        return torch.tanh(pre_tanh), squashed_gaussian_log_prob(pre_tanh, mean, log_std)


def squashed_gaussian_log_prob(pre_tanh: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """log pi(tanh(u)) for u ~ N(mean, std), summed over action dims, with the stable tanh Jacobian."""
    gaussian = -0.5 * ((pre_tanh - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)
    # log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)), exact and stable for large |u|.
    log_det = 2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh))
    return (gaussian - log_det).sum(-1)
