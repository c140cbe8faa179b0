"""Network building blocks: LayerNorm MLPs, a batched critic ensemble and a tanh-Gaussian actor.

The critic ensemble keeps every member's weights stacked in one tensor, so the whole
ensemble is a handful of batched matmuls (never a Python loop over critics), and a subset
of members (the target's random subsample) costs only that subset's compute.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn


class _Tanh(torch.autograd.Function):
    """tanh computed as 2 sigmoid(2x) - 1.

    ATen's CPU tanh kernel is scalar and costs about half a 256x256 matmul of the same batch;
    sigmoid is vectorised and ~4x faster. Same function (abs. error < 2e-7), same backward.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def fast_tanh(x: torch.Tensor) -> torch.Tensor:
    # On GPU the native op is fast and fusable. On CPU inductor's fused tanh (Sleef) costs 3x
    # its sigmoid, so compiled CPU code gets the sigmoid form too (autograd differentiates it).
    if x.is_cuda:
        return torch.tanh(x)
    if torch.compiler.is_compiling():
        return torch.sigmoid(x * 2.0) * 2.0 - 1.0
    return _Tanh.apply(x)


class Tanh(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_tanh(x)


class EnsembleLinear(nn.Module):
    """`num_members` independent linear layers applied as one batched matmul.

    Input (E, B, in) -> output (E, B, out); with `members` (k,) only those members run: (k, B, in) -> (k, B, out).
    """

    def __init__(self, num_members: int, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_members, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_features))
        bound = 1.0 / math.sqrt(in_features)
        # Same distribution as nn.Linear's default init, per member.
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if members is not None:
            weight, bias = weight.index_select(0, members), bias.index_select(0, members)
        return torch.baddbmm(bias, x, weight)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the feature axis with a separate affine transform per member."""

    def __init__(self, num_members: int, features: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_members, 1, features))
        self.bias = nn.Parameter(torch.zeros(num_members, 1, features))
        self.eps = eps

    def forward(self, x: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if members is not None:
            weight, bias = weight.index_select(0, members), bias.index_select(0, members)
        return torch.addcmul(bias, F.layer_norm(x, x.shape[-1:], eps=self.eps), weight)


def mlp(in_dim: int, hidden_dims: Sequence[int], out_dim: int, layer_norm: bool = True) -> nn.Sequential:
    """Linear -> LayerNorm -> Tanh blocks (the SERL/RLPD critic and actor trunk), then a linear head."""
    layers: list[nn.Module] = []
    for width in hidden_dims:
        layers.append(nn.Linear(in_dim, width))
        if layer_norm:
            layers.append(nn.LayerNorm(width))
        layers.append(Tanh() if layer_norm else nn.ReLU())
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class EnsembleMLP(nn.Module):
    """`num_members` MLPs of the same shape, stacked: (B, in) or (E, B, in) -> (E, B, out)."""

    def __init__(self, num_members: int, in_dim: int, hidden_dims: Sequence[int], out_dim: int,
                 layer_norm: bool = True):
        super().__init__()
        self.num_members = num_members
        widths = [in_dim, *hidden_dims]
        self.linears = nn.ModuleList(EnsembleLinear(num_members, a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.norms = nn.ModuleList(EnsembleLayerNorm(num_members, w) for w in hidden_dims) if layer_norm else None
        self.head = EnsembleLinear(num_members, widths[-1], out_dim)

    def forward(self, x: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        count = self.num_members if members is None else members.shape[0]
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(count, *x.shape)
        for i, linear in enumerate(self.linears):
            x = linear(x, members)
            x = fast_tanh(self.norms[i](x, members)) if self.norms is not None else F.relu(x)
        return self.head(x, members)


class CriticEnsemble(nn.Module):
    """Q(s, a) for `num_critics` members at once: returns (E, B), or (k, B) for a subset `members`."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int], num_critics: int,
                 layer_norm: bool = True):
        super().__init__()
        self.num_critics = num_critics
        self.net = EnsembleMLP(num_critics, obs_dim + action_dim, hidden_dims, 1, layer_norm)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(torch.cat([obs, action], dim=-1), members).squeeze(-1)


class TanhGaussianActor(nn.Module):
    """Gaussian policy squashed by tanh; log-std bounded smoothly to [log_std_min, log_std_max]."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int],
                 log_std_min: float = -5.0, log_std_max: float = 2.0, layer_norm: bool = True):
        super().__init__()
        # Kept so an exported actor can be described and rebuilt from its card.
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.hidden_dims, self.layer_norm = tuple(hidden_dims), layer_norm
        self.net = mlp(obs_dim, hidden_dims, 2 * action_dim, layer_norm)
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max

    def distribution_params(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # float32 even when the trunk runs in bfloat16 (autocast): log-probabilities need the precision.
        mean, raw_log_std = self.net(obs).float().chunk(2, dim=-1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(raw_log_std) + 1)
        return mean, log_std

    def forward(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (action in [-1, 1], log-probability of that action)."""
        return self.sample(*self.distribution_params(obs), deterministic)

    @staticmethod
    def sample(mean: torch.Tensor, log_std: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(action, log-probability) from given distribution parameters: the mode or a draw."""
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
