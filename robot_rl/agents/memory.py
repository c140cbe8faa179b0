"""A policy with memory: the actor reads its last `steps` observations, not only the current one.

A juggling ball's restitution, a motor's lag or an action's latency cannot be seen in one observation; they
show over a few bounces, in how the ball answered the racket. The actor here is the current observation's
MLP plus a temporal convolution over the recent window (the shape of rapid motor adaptation's adaptation
module: each observation embedded on its own, then kernel 8 stride 4 and two kernels of 5 over time), whose
small latent the MLP reads beside the observation.
PPO stays feed-forward: the window is the policy observation (flattened, oldest first, newest last), kept by
:class:`HistoryVecEnv` in training and by :class:`PolicyStream` wherever the deployed policy acts (the
benchmarks' evaluation loop, the ROS juggle actor). The critic keeps its privileged view of the plant.

A stream's first observation of an episode fills its whole window, so the actor never sees zeros that
training never showed it.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from torch import nn

__all__ = ["HistoryActor", "HistoryVecEnv", "ObservationHistory", "PolicyStream"]

# Temporal convolution layers (kernel, stride): the adaptation module of rapid motor adaptation (Kumar et al.
# 2021) reads its 50-step history the same way. Its 32-wide embedding and channels are narrowed to 8 and 16:
# PPO updates 12,288-sample minibatches of 50-step windows on two CPU cores, where the wide first layer alone
# took 0.25 s a minibatch (the narrow encoder, forward and backward, 0.23 s in all).
CONV_LAYERS = ((8, 4), (5, 1), (5, 1))
FRAME_EMBEDDING = 8
CONV_CHANNELS = 16


def conv_length(steps: int) -> int:
    """The time length left after the convolutions (ValueError when `steps` is too short for them)."""
    length = steps
    for kernel, stride in CONV_LAYERS:
        length = (length - kernel) // stride + 1
    if length < 1:
        raise ValueError(f"a history of {steps} steps is too short for the temporal convolution "
                         f"(at least {min_steps()} steps)")
    return length


def min_steps() -> int:
    """The shortest history the convolutions accept."""
    steps = 1
    for kernel, stride in reversed(CONV_LAYERS):
        steps = (steps - 1) * stride + kernel
    return steps


class HistoryActor(nn.Module):
    """(B, steps * frame_dim) windows, newest frame last -> the head's output for (newest frame, latent).

    Args:
        frame_dim: size of one observation.
        steps: observations in the window.
        latent_dim: size of the history's latent.
        activation: the hidden activation's class.
        head: the network that reads the newest observation and the latent, (B, frame_dim + latent_dim) ->
            (B, action_dim) (PPO's LayerNorm MLP: robot_rl.agents.ppo.build_actor).
    """

    def __init__(self, frame_dim: int, steps: int, latent_dim: int, activation: type[nn.Module],
                 head: nn.Module) -> None:
        super().__init__()
        self.frame_dim, self.steps, self.latent_dim = int(frame_dim), int(steps), int(latent_dim)
        self.embed = nn.Sequential(nn.Linear(self.frame_dim, FRAME_EMBEDDING), activation())
        layers: list[nn.Module] = []
        channels = FRAME_EMBEDDING
        for kernel, stride in CONV_LAYERS:
            layers += [nn.Conv1d(channels, CONV_CHANNELS, kernel, stride), activation()]
            channels = CONV_CHANNELS
        self.encoder = nn.Sequential(*layers, nn.Flatten(), nn.Linear(CONV_CHANNELS * conv_length(self.steps),
                                                                      self.latent_dim), activation())
        self.head = head

    def forward(self, window: torch.Tensor) -> torch.Tensor:
        frames = window.reshape(*window.shape[:-1], self.steps, self.frame_dim)
        flat = frames.reshape(-1, self.steps, self.frame_dim)
        latent = self.encoder(self.embed(flat).transpose(1, 2)).reshape(*window.shape[:-1], self.latent_dim)
        return self.head(torch.cat([frames[..., -1, :], latent], dim=-1))


class ObservationHistory:
    """The last `steps` observations of `n` streams, (n, steps * dim) flattened, oldest first."""

    def __init__(self, n: int, steps: int, dim: int, device: str | torch.device = "cpu") -> None:
        self.steps, self.dim = int(steps), int(dim)
        self.window = torch.zeros(n, self.steps, self.dim, device=device)
        self.fresh = torch.ones(n, dtype=torch.bool, device=device)
        """Streams whose next observation starts an episode (and fills their window)."""

    def reset(self, ids: Any) -> None:
        """The streams `ids` (indices or a boolean mask) start an episode at their next observation."""
        self.fresh[torch.as_tensor(ids, device=self.fresh.device)] = True

    def push(self, obs: torch.Tensor, first: torch.Tensor | None = None) -> torch.Tensor:
        """Appends (n, dim) observations; `first` (n,) marks those that start an episode. Returns the windows."""
        obs = obs.to(self.window.device, self.window.dtype)
        if obs.shape != (self.window.shape[0], self.dim):
            raise ValueError(f"observations must have shape {(self.window.shape[0], self.dim)}, got {tuple(obs.shape)}")
        fresh = self.fresh if first is None else self.fresh | first.to(self.fresh.device, torch.bool)
        self.window = torch.cat([self.window[:, 1:], obs[:, None]], dim=1)
        self.window[fresh] = obs[fresh, None].expand(-1, self.steps, -1)
        self.fresh = torch.zeros_like(self.fresh)
        return self.window.reshape(self.window.shape[0], -1)


class PolicyStream:
    """A window policy acting on `n` streams of single observations: (n, frame_dim) -> (n, action_dim),
    numpy in, numpy out (a tensor in, a tensor out); it keeps each stream's history itself.

    Args:
        policy: maps (n, steps * frame_dim) windows to actions (tensors).
        n: number of streams.
        steps: observations in a window (1: the observation alone).
        frame_dim: size of one observation.
    """

    def __init__(self, policy: Callable[[torch.Tensor], torch.Tensor], n: int, steps: int, frame_dim: int,
                 device: str | torch.device = "cpu") -> None:
        self.policy = policy
        self.history = ObservationHistory(n, steps, frame_dim, device)

    def reset(self, ids: Any) -> None:
        """The streams `ids` start an episode: their next observation fills their window."""
        self.history.reset(ids)

    def __call__(self, obs: Any) -> Any:
        is_numpy = not isinstance(obs, torch.Tensor)
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32) if is_numpy else obs, dtype=torch.float32)
        if not torch.isfinite(x).all():
            raise ValueError("observation must be finite")  # before it enters the window
        action = self.policy(self.history.push(x.reshape(-1, self.history.dim)))
        return action.cpu().numpy() if is_numpy else action.to(obs.device)


class HistoryVecEnv:
    """A vectorized env (rsl_rl's convention: :mod:`robot_rl.training.ppo_runner`) whose policy observation is
    the window of its last `steps` policy observations; the critic's observation is the env's own."""

    def __init__(self, env: Any, steps: int) -> None:
        self.env, self.steps = env, int(steps)
        self.num_envs, self.num_actions = env.num_envs, env.num_actions
        self.history: ObservationHistory | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def _with_window(self, obs: dict[str, torch.Tensor], first: torch.Tensor | None) -> dict[str, torch.Tensor]:
        policy = obs["policy"]
        if self.history is None:
            self.history = ObservationHistory(policy.shape[0], self.steps, policy.shape[1], policy.device)
        return {**obs, "policy": self.history.push(policy, first), "critic": obs.get("critic", policy)}

    def reset(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        obs, extras = self.env.reset()
        if self.history is not None:
            self.history.reset(torch.ones(self.num_envs, dtype=torch.bool))
        return self._with_window(obs, None), extras

    def step(self, actions: torch.Tensor):
        obs, reward, terminated, truncated, extras = self.env.step(actions)
        # finished envs reset inside step: the observation they return starts their next episode
        return self._with_window(obs, terminated | truncated), reward, terminated, truncated, extras

    def close(self) -> None:
        self.env.close()
