"""PPO with an asymmetric critic, readable top to bottom (JuggleRL's learner, on GPU or CPU).

* :func:`compute_gae`, :func:`surrogate_loss`, :func:`value_loss` -- the math, pinned by tests.
* :class:`EmpiricalNormalization` (observations) and :class:`ValueNormalizer` (returns, MAPPO's
  debiased running statistics) -- both live inside the networks, so a checkpoint carries them.
* :class:`ActorCritic` -- LayerNorm MLPs; the critic may see privileged state the actor does not.
* :class:`RolloutStorage` and :class:`PPO` -- collection buffers and the clipped update with
  rsl_rl's time-out bootstrapping and KL-adaptive learning rate.
* :func:`export_policy` / :class:`DeployedPolicy` -- what runs on the robot: the actor and its
  observation normalizer only (safetensors + a JSON card), nothing of the training. The same
  tensors and card travel on ``rl/policy`` as a codec payload (robot_rl/transport/ppo_policy.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch import nn

from robot_rl.agents.compiled import CompiledMethods
from robot_rl.agents.memory import HistoryActor, PolicyStream, conv_length
from robot_rl.artifacts import load_card, load_weights, model_directory, save_card, save_weights
from robot_rl.config_fields import setting

__all__ = ["ActorCritic", "DeployedPolicy", "EmpiricalNormalization", "PPO", "PPOConfig", "RolloutStorage",
           "ValueNormalizer", "compute_gae", "deployable", "export_policy", "surrogate_loss", "value_loss"]

POLICY_FILE = "policy.safetensors"
CARD_FILE = "card.json"
FORMAT_VERSION = 1


@dataclass
class PPOConfig:
    """PPO hyperparameters (defaults: rsl_rl / JuggleRL-like, sized for a CPU)."""

    num_steps_per_env: int = setting(24, "Steps collected per environment between updates.", low=1, high=100_000)
    """Steps collected per environment between updates."""
    num_learning_epochs: int = setting(4, "Passes over each batch.", low=1, high=1000)
    """Passes over each batch."""
    num_mini_batches: int = setting(4, "Minibatches per pass.", low=1, high=100_000)
    """Minibatches per pass."""
    clip_param: float = setting(0.2, "PPO ratio clip (and value clip).", low=1e-6, high=10.0)
    """PPO ratio clip (and value clip)."""
    gamma: float = setting(0.99, "Discount.", low=0.0, high=1.0)
    """Discount."""
    lam: float = setting(0.95, "GAE lambda.", low=0.0, high=1.0)
    """GAE lambda."""
    learning_rate: float = setting(5e-4, "Adam learning rate (initial, with the adaptive schedule).", low=1e-8,
                                   high=1.0)
    """Adam learning rate (initial, with the adaptive schedule)."""
    schedule: str = setting("adaptive", "Learning-rate schedule: adaptive (KL-driven, rsl_rl) or fixed.",
                            choices=("adaptive", "fixed"))
    """"adaptive": scale the learning rate to keep the KL near desired_kl (rsl_rl); "fixed"."""
    desired_kl: float = setting(0.01, "Target KL divergence per update (adaptive schedule).", low=1e-8, high=10.0)
    """Target KL divergence per update for the adaptive schedule."""
    max_grad_norm: float = setting(1.0, "Gradient clipping norm.", low=1e-8, high=1e6)
    """Gradient clipping norm."""
    value_loss_coef: float = setting(1.0, "Weight of the value loss.", low=0.0, high=1000.0)
    """Weight of the value loss."""
    entropy_coef: float = setting(0.0, "Weight of the entropy bonus.", low=0.0, high=10.0)
    """Weight of the entropy bonus (JuggleRL: 0)."""
    use_clipped_value_loss: bool = setting(True, "Clip the value change around the collected values.")
    """Clip the value change around the collected values."""
    huber_delta: float | None = setting(10.0, "Huber loss delta of the value (0: squared error).", low=0.0, high=1e6,
                                        unset=0.0)
    """Huber loss for the value (MAPPO); None: squared error."""
    actor_hidden: tuple[int, ...] = setting((128, 128, 128), "Hidden widths of the actor MLP.", low=1, high=65536)
    """Hidden widths of the actor MLP."""
    critic_hidden: tuple[int, ...] = setting((128, 128, 128), "Hidden widths of the critic MLP.", low=1, high=65536)
    """Hidden widths of the critic MLP."""
    activation: str = setting("elu", "Hidden activation.", choices=("elu", "relu", "tanh"))
    """Hidden activation: elu, relu or tanh."""
    init_noise_std: float = setting(0.5, "Initial action standard deviation.", low=1e-6, high=10.0)
    """Initial action standard deviation."""
    value_normalization: bool = setting(True, "Critic predicts normalized returns (MAPPO ValueNorm).")
    """Critic predicts normalized returns (MAPPO ValueNorm)."""
    value_norm_beta: float = setting(0.995, "Decay of the ValueNorm running statistics.", low=1e-6,
                                     high=0.999999)
    """Decay of the ValueNorm running statistics."""
    observation_normalization: bool = setting(True, "Normalize actor and critic inputs with running "
                                              "statistics.")
    """Normalize actor and critic inputs with running statistics."""
    history_steps: int = setting(1, "Observations the actor reads, newest last (1: the current one alone, an MLP; "
                                 "more: a temporal convolution over them beside it, robot_rl.agents.memory).",
                                 low=1, high=10_000)
    """Observations the actor reads (1: the current one, an MLP; more: robot_rl.agents.memory's HistoryActor,
    with the env wrapped in its HistoryVecEnv so the policy observation is that window)."""
    history_latent_dim: int = setting(16, "Size of the history's latent that the actor's MLP reads.", low=1,
                                      high=4096)
    """Size of the latent the temporal convolution makes of the history (with history_steps > 1)."""
    compile: bool = setting(False, "torch.compile the PPO losses (false: eager, same math; no compile time).")
    """torch.compile the minibatch losses (eager fallback on a compiler failure, logged)."""

    def __post_init__(self) -> None:
        for name in ("num_steps_per_env", "num_learning_epochs", "num_mini_batches"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"PPOConfig.{name} must be >= 1, got {getattr(self, name)}")
        checks = {"clip_param": self.clip_param > 0, "gamma": 0 < self.gamma <= 1, "lam": 0 <= self.lam <= 1,
                  "learning_rate": self.learning_rate > 0, "desired_kl": self.desired_kl > 0,
                  "max_grad_norm": self.max_grad_norm > 0, "init_noise_std": self.init_noise_std > 0,
                  "value_norm_beta": 0 < self.value_norm_beta < 1, "value_loss_coef": self.value_loss_coef >= 0,
                  "entropy_coef": self.entropy_coef >= 0}
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"PPOConfig.{name} is out of range: {getattr(self, name)}")
        if self.schedule not in ("adaptive", "fixed"):
            raise ValueError(f"PPOConfig.schedule must be adaptive or fixed, got {self.schedule!r}")
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"PPOConfig.activation must be one of {sorted(_ACTIVATIONS)}, got {self.activation!r}")
        if self.huber_delta is not None and self.huber_delta <= 0:
            raise ValueError("PPOConfig.huber_delta must be positive or None")
        self.actor_hidden, self.critic_hidden = tuple(self.actor_hidden), tuple(self.critic_hidden)
        if self.history_steps > 1:
            conv_length(self.history_steps)  # refuses a window too short for the convolution


_ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_LOSS_INPUTS = ("obs", "critic_obs", "actions", "log_probs", "mean", "std", "advantages", "returns", "values")
"""The storage fields `PPO.minibatch_losses` takes, in its argument order."""


# --------------------------------------------------------------------------- the math


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_values: torch.Tensor,
                gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over (T, N) tensors; ``dones[t]`` ends the episode at step t
    (no bootstrap from t + 1). Returns (advantages, returns = advantages + values)."""
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(last_values)
    next_values = last_values
    for t in reversed(range(rewards.shape[0])):
        alive = 1.0 - dones[t].float()
        delta = rewards[t] + gamma * next_values * alive - values[t]
        running = delta + gamma * lam * alive * running
        advantages[t] = running
        next_values = values[t]
    return advantages, advantages + values


def surrogate_loss(ratio: torch.Tensor, advantages: torch.Tensor, clip: float) -> torch.Tensor:
    """The clipped PPO objective as a loss: mean of max(-r A, -clip(r, 1 - e, 1 + e) A)."""
    return torch.max(-advantages * ratio, -advantages * ratio.clamp(1.0 - clip, 1.0 + clip)).mean()


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float,
               huber_delta: float | None, clipped: bool) -> torch.Tensor:
    """Value loss (Huber or squared); with ``clipped``, the max of the losses of the new value and of
    the value clipped to within ``clip`` of the collected one."""
    def err(v: torch.Tensor) -> torch.Tensor:
        e = returns - v
        if huber_delta is None:
            return 0.5 * e ** 2
        a = e.abs()
        return torch.where(a <= huber_delta, 0.5 * e ** 2, huber_delta * (a - 0.5 * huber_delta))
    if not clipped:
        return err(values).mean()
    v_clipped = old_values + (values - old_values).clamp(-clip, clip)
    return torch.max(err(values), err(v_clipped)).mean()


# --------------------------------------------------------------------------- normalizers


class EmpiricalNormalization(nn.Module):
    """Running mean / variance of inputs (Chan's parallel merge, float64); normalizes and clips."""

    def __init__(self, dim: int, clip: float = 5.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, x.shape[-1]).to(torch.float64)
        n = x.shape[0]
        if n == 0:
            return
        batch_mean, batch_var = x.mean(0), x.var(0, unbiased=False)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * n / total
        self.var.copy_((self.var * self.count + batch_var * n + delta ** 2 * self.count * n / total) / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        std = torch.sqrt(self.var + self.eps).to(x.dtype)
        return ((x - self.mean.to(x.dtype)) / std).clamp(-self.clip, self.clip)


class ValueNormalizer(nn.Module):
    """MAPPO's ValueNorm: exponentially weighted mean and mean square of the returns, debiased
    (divided by 1 - beta^k) so the first updates are not pulled toward zero."""

    def __init__(self, beta: float = 0.995, eps: float = 1e-5) -> None:
        super().__init__()
        self.beta, self.eps = beta, eps
        self.register_buffer("running_mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("running_mean_sq", torch.zeros((), dtype=torch.float64))
        self.register_buffer("debiasing", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.to(torch.float64)
        b = self.beta
        self.running_mean.mul_(b).add_(x.mean() * (1 - b))
        self.running_mean_sq.mul_(b).add_((x ** 2).mean() * (1 - b))
        self.debiasing.mul_(b).add_(1 - b)

    def _stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.debiasing.clamp(min=self.eps)
        mean, mean_sq = self.running_mean / d, self.running_mean_sq / d
        return mean, (mean_sq - mean ** 2).clamp(min=1e-2)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self._stats()
        return ((x - mean) / var.sqrt()).to(x.dtype)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self._stats()
        return (x * var.sqrt() + mean).to(x.dtype)


# --------------------------------------------------------------------------- networks


def layer_norm_mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, activation: str, out_gain: float) -> nn.Sequential:
    """Linear -> LayerNorm -> activation per hidden layer; orthogonal init (sqrt 2 hidden)."""
    layers: list[nn.Module] = []
    for width in hidden:
        linear = nn.Linear(in_dim, width)
        nn.init.orthogonal_(linear.weight, math.sqrt(2.0))
        nn.init.zeros_(linear.bias)
        layers += [linear, nn.LayerNorm(width), _ACTIVATIONS[activation]()]
        in_dim = width
    out = nn.Linear(in_dim, out_dim)
    nn.init.orthogonal_(out.weight, out_gain)
    nn.init.zeros_(out.bias)
    return nn.Sequential(*layers, out)


def build_actor(obs_dim: int, action_dim: int, hidden: tuple[int, ...], activation: str, history_steps: int,
                latent_dim: int) -> nn.Module:
    """The actor's network: an MLP of the observation, or with `history_steps` > 1 a HistoryActor of the window
    of that many observations (obs_dim = history_steps x one observation's size)."""
    if history_steps <= 1:
        return layer_norm_mlp(obs_dim, hidden, action_dim, activation, 0.01)
    if obs_dim % history_steps:
        raise ValueError(f"a window of {history_steps} observations cannot be {obs_dim} numbers long")
    frame_dim = obs_dim // history_steps
    head = layer_norm_mlp(frame_dim + latent_dim, hidden, action_dim, activation, 0.01)
    return HistoryActor(frame_dim, history_steps, latent_dim, _ACTIVATIONS[activation], head)


class ActorCritic(nn.Module):
    """Gaussian actor (state-independent log std) and a critic that may see privileged state."""

    def __init__(self, obs_dim: int, critic_obs_dim: int, action_dim: int, config: PPOConfig) -> None:
        super().__init__()
        self.obs_dim, self.critic_obs_dim, self.action_dim = obs_dim, critic_obs_dim, action_dim
        self.actor = build_actor(obs_dim, action_dim, config.actor_hidden, config.activation, config.history_steps,
                                 config.history_latent_dim)
        self.critic = layer_norm_mlp(critic_obs_dim, config.critic_hidden, 1, config.activation, 1.0)
        self.log_std = nn.Parameter(torch.full((action_dim,), math.log(config.init_noise_std)))
        self.normalize_obs = config.observation_normalization
        self.obs_norm = EmpiricalNormalization(obs_dim)
        self.critic_obs_norm = EmpiricalNormalization(critic_obs_dim)

    def _actor_in(self, obs: torch.Tensor) -> torch.Tensor:
        return self.obs_norm(obs) if self.normalize_obs else obs

    def distribution(self, obs: torch.Tensor) -> torch.distributions.Normal:
        mean = self.actor(self._actor_in(obs))
        return torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean))

    def act_inference(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(self._actor_in(obs))

    def evaluate(self, critic_obs: torch.Tensor) -> torch.Tensor:
        """The critic's (normalized, with value normalization) value, shape (B,)."""
        x = self.critic_obs_norm(critic_obs) if self.normalize_obs else critic_obs
        return self.critic(x).squeeze(-1)

    def update_normalizers(self, obs: torch.Tensor, critic_obs: torch.Tensor) -> None:
        if self.normalize_obs:
            self.obs_norm.update(obs)
            self.critic_obs_norm.update(critic_obs)


# --------------------------------------------------------------------------- storage and algorithm


class RolloutStorage:
    """(T, N, ...) buffers of one collection round, preallocated on the learner's device."""

    FIELDS = ("obs", "critic_obs", "actions", "rewards", "dones", "values", "log_probs", "mean", "std")

    def __init__(self, steps: int, num_envs: int, obs_dim: int, critic_obs_dim: int, action_dim: int,
                 device: torch.device) -> None:
        shapes = {"obs": (obs_dim,), "critic_obs": (critic_obs_dim,), "actions": (action_dim,), "rewards": (),
                  "dones": (), "values": (), "log_probs": (), "mean": (action_dim,), "std": (action_dim,)}
        for name, shape in shapes.items():
            setattr(self, name, torch.zeros((steps, num_envs, *shape), device=device))
        self.steps, self.step = steps, 0
        self.advantages = torch.zeros((steps, num_envs), device=device)
        self.returns = torch.zeros((steps, num_envs), device=device)

    def add(self, **values: torch.Tensor) -> None:
        if self.step >= self.steps:
            raise RuntimeError("rollout storage is full; call clear() after the update")
        for name, value in values.items():
            getattr(self, name)[self.step].copy_(value)

    def minibatches(self, num_mini_batches: int, epochs: int, generator: torch.Generator) -> Iterator[dict]:
        total = self.steps * self.rewards.shape[1]
        size = total // num_mini_batches
        flat = {name: getattr(self, name).reshape(total, *getattr(self, name).shape[2:])
                for name in (*self.FIELDS, "advantages", "returns")}
        for _ in range(epochs):
            order = torch.randperm(total, generator=generator).to(self.rewards.device)
            for k in range(num_mini_batches):
                idx = order[k * size:(k + 1) * size]
                yield {name: value[idx] for name, value in flat.items()}


class PPO:
    """Clipped PPO with GAE, value normalization and an asymmetric critic.

    Usage per round: ``act`` then ``process_env_step`` for each of ``num_steps_per_env`` steps,
    ``compute_returns(last_critic_obs)``, ``update()``.
    """

    def __init__(self, obs_dim: int, critic_obs_dim: int, action_dim: int, num_envs: int, config: PPOConfig,
                 device: str | torch.device = "cpu", seed: int = 0) -> None:
        self.config, self.device = config, torch.device(device)
        torch.manual_seed(seed)
        self.actor_critic = ActorCritic(obs_dim, critic_obs_dim, action_dim, config).to(self.device)
        self.value_norm = ValueNormalizer(config.value_norm_beta).to(self.device) if config.value_normalization else None
        fused = dict(fused=True) if self.device.type in ("cpu", "cuda") else {}
        self.optimizer = torch.optim.Adam(self.actor_critic.parameters(), lr=config.learning_rate, **fused)
        self.learning_rate = config.learning_rate
        self.storage = RolloutStorage(config.num_steps_per_env, num_envs, obs_dim, critic_obs_dim, action_dim,
                                      self.device)
        self.generator = torch.Generator().manual_seed(seed)
        self._values_raw: torch.Tensor | None = None
        self._compiled = CompiledMethods(self, ("minibatch_losses",), self.device, config.compile)

    def _denormalized(self, values: torch.Tensor) -> torch.Tensor:
        return self.value_norm.denormalize(values) if self.value_norm is not None else values

    @torch.no_grad()
    def act(self, obs: torch.Tensor, critic_obs: torch.Tensor) -> torch.Tensor:
        ac = self.actor_critic
        if ac.training:
            ac.update_normalizers(obs, critic_obs)
        dist = ac.distribution(obs)
        actions = dist.sample()
        values = self._denormalized(ac.evaluate(critic_obs))
        self._values_raw = values
        self.storage.add(obs=obs, critic_obs=critic_obs, actions=actions, values=values,
                         log_probs=dist.log_prob(actions).sum(-1), mean=dist.mean, std=dist.stddev)
        return actions

    @torch.no_grad()
    def process_env_step(self, rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor) -> None:
        """Stores the step's outcome. A truncated (timed-out) step is not an end of the task: its
        reward gets gamma * V(s_t) as a stand-in for the unseen future (rsl_rl's bootstrapping)."""
        rewards = rewards.to(self.device, torch.float32) + self.config.gamma * self._values_raw * truncated.to(
            self.device, torch.float32)
        self.storage.add(rewards=rewards, dones=(terminated | truncated).to(self.device, torch.float32))
        self.storage.step += 1

    @torch.no_grad()
    def compute_returns(self, last_critic_obs: torch.Tensor) -> None:
        s = self.storage
        last_values = self._denormalized(self.actor_critic.evaluate(last_critic_obs))
        s.advantages, s.returns = compute_gae(s.rewards, s.values, s.dones, last_values, self.config.gamma,
                                              self.config.lam)

    @property
    def compiled(self) -> bool:
        """True while the losses run compiled: `compile` asked for and no compiler failure fell back to eager."""
        return self._compiled.active

    def minibatch_losses(self, obs: torch.Tensor, critic_obs: torch.Tensor, actions: torch.Tensor,
                         old_log_probs: torch.Tensor, old_mean: torch.Tensor, old_std: torch.Tensor,
                         advantages: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """The minibatch's loss and its detached parts (surrogate, value loss, entropy, KL(old || new),
        clip fraction) as one tensor. The Gaussian's log-probability and entropy are written out (as
        torch.distributions computes them) so the whole loss compiles into one graph."""
        cfg, ac = self.config, self.actor_critic
        mean = ac.actor(ac._actor_in(obs))
        log_std = ac.log_std.expand_as(mean)
        std = log_std.exp()
        log_prob = (-((actions - mean) ** 2) / (2 * std ** 2) - log_std - _HALF_LOG_2PI).sum(-1)
        entropy = (0.5 + _HALF_LOG_2PI + log_std).sum(-1).mean()
        with torch.no_grad():  # KL(old || new) of the diagonal Gaussians
            kl = (torch.log(std / old_std) + (old_std ** 2 + (old_mean - mean) ** 2) / (2 * std ** 2) - 0.5
                  ).sum(-1).mean()
        adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        ratio = torch.exp(log_prob - old_log_probs)
        surrogate = surrogate_loss(ratio, adv, cfg.clip_param)
        values = ac.evaluate(critic_obs)
        if self.value_norm is not None:
            returns, old_values = self.value_norm.normalize(returns), self.value_norm.normalize(old_values)
        v_loss = value_loss(values, old_values, returns, cfg.clip_param, cfg.huber_delta, cfg.use_clipped_value_loss)
        loss = surrogate + cfg.value_loss_coef * v_loss - cfg.entropy_coef * entropy
        clip_fraction = ((ratio.detach() - 1.0).abs() > cfg.clip_param).float().mean()
        return loss, torch.stack([surrogate.detach(), v_loss.detach(), entropy.detach(), kl, clip_fraction])

    def update(self) -> dict[str, float]:
        """PPO epochs over the stored round; advantages are normalized per minibatch."""
        cfg, ac, s = self.config, self.actor_critic, self.storage
        if self.value_norm is not None:
            self.value_norm.update(s.returns)
        totals = torch.zeros(5, device=self.device)
        n = 0
        for batch in s.minibatches(cfg.num_mini_batches, cfg.num_learning_epochs, self.generator):
            loss, parts = self._compiled("minibatch_losses", *(batch[name] for name in _LOSS_INPUTS))
            if cfg.schedule == "adaptive":  # the step's learning rate follows this minibatch's KL (rsl_rl)
                kl = float(parts[3])
                if kl > 2.0 * cfg.desired_kl:
                    self.learning_rate = max(1e-5, self.learning_rate / 1.5)
                elif 0.0 < kl < 0.5 * cfg.desired_kl:
                    self.learning_rate = min(1e-2, self.learning_rate * 1.5)
                for group in self.optimizer.param_groups:
                    group["lr"] = self.learning_rate
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(ac.parameters(), cfg.max_grad_norm)
            self.optimizer.step()
            totals += parts
            n += 1
        s.step = 0
        out = dict(zip(("surrogate_loss", "value_loss", "entropy", "kl", "clip_fraction"),
                       (totals / max(n, 1)).tolist()))
        out["learning_rate"] = self.learning_rate
        out["action_std"] = float(ac.log_std.detach().exp().mean())
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"actor_critic": self.actor_critic.state_dict(), "optimizer": self.optimizer.state_dict(),
                "value_norm": self.value_norm.state_dict() if self.value_norm is not None else None,
                "learning_rate": self.learning_rate, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor_critic.load_state_dict(state["actor_critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.value_norm is not None and state["value_norm"] is not None:
            self.value_norm.load_state_dict(state["value_norm"])
        self.learning_rate = float(state["learning_rate"])
        self.generator.set_state(state["generator"])


# --------------------------------------------------------------------------- deployment


def deployable(actor_critic: ActorCritic, card: dict[str, Any],
               config: PPOConfig | None = None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The actor's tensors (weights + observation normalizer) and the card that rebuilds it."""
    tensors = {f"actor.{k}": v.detach().cpu().contiguous() for k, v in actor_critic.actor.state_dict().items()}
    if actor_critic.normalize_obs:
        tensors["obs_norm.mean"] = actor_critic.obs_norm.mean.detach().cpu()
        tensors["obs_norm.var"] = actor_critic.obs_norm.var.detach().cpu()
    mlp = getattr(actor_critic.actor, "head", actor_critic.actor)  # a HistoryActor's MLP is its head
    hidden = [m.out_features for m in mlp if isinstance(m, nn.Linear)][:-1]
    activation = next((name for name, cls in _ACTIVATIONS.items() if any(isinstance(m, cls) for m in mlp)), "elu")
    full_card = {**card, "format_version": FORMAT_VERSION, "obs_dim": actor_critic.obs_dim,
                 "action_dim": actor_critic.action_dim, "actor_hidden": hidden, "activation": activation,
                 "observation_normalization": actor_critic.normalize_obs, "obs_clip": actor_critic.obs_norm.clip}
    if hasattr(actor_critic.actor, "steps"):
        full_card.update(history_steps=actor_critic.actor.steps, history_latent_dim=actor_critic.actor.latent_dim)
    if config is not None:
        full_card["ppo_config"] = asdict(config)
    return tensors, full_card


def export_policy(actor_critic: ActorCritic, directory: str | Path, card: dict[str, Any],
                  config: PPOConfig | None = None) -> Path:
    """Writes the deployable policy: ``policy.safetensors`` (actor + observation normalizer) and
    ``card.json`` (``card`` plus what is needed to rebuild the network)."""
    tensors, full_card = deployable(actor_critic, card, config)
    with model_directory(directory) as tmp:
        save_weights(tensors, tmp / POLICY_FILE)
        save_card(full_card, tmp / CARD_FILE, indent=1)
    return Path(directory)


class DeployedPolicy:
    """The exported actor: observation (obs_dim,) or (B, obs_dim) -> deterministic action in [-1, 1]
    (numpy in, numpy out; a tensor in, a tensor out)."""

    def __init__(self, actor: nn.Sequential, card: dict[str, Any], norm: tuple[torch.Tensor, torch.Tensor] | None,
                 device: torch.device) -> None:
        self.actor, self.card, self.norm, self.device = actor.eval(), card, norm, device
        self.obs_dim, self.action_dim = int(card["obs_dim"]), int(card["action_dim"])
        self.history_steps = int(card.get("history_steps", 1))
        self.frame_dim = self.obs_dim // self.history_steps
        """Size of one observation (obs_dim is the window's: history_steps of them)."""
        self.clip = float(card.get("obs_clip", 5.0))

    def stream(self, n: int):
        """This policy acting on `n` streams of single (frame_dim,) observations, keeping each stream's window
        (robot_rl.agents.memory.PolicyStream; reset(ids) when a stream starts an episode)."""
        return PolicyStream(self, n, self.history_steps, self.frame_dim, self.device)

    @classmethod
    def load(cls, directory: str | Path, device: str = "cpu") -> DeployedPolicy:
        directory = Path(directory)
        card_path, weights_path = directory / CARD_FILE, directory / POLICY_FILE
        for path in (card_path, weights_path):
            if not path.is_file():
                raise FileNotFoundError(f"policy directory {directory}: missing {path.name} "
                                        f"(export one with robot-rl juggle train --out DIR)")
        return cls.from_tensors(load_weights(weights_path), load_card(card_path), device, str(directory))

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], card: dict[str, Any], device: str,
                     source: str) -> DeployedPolicy:
        """From the tensors and card of :func:`deployable`; ValueError (naming `source`) when they do not fit."""
        if card.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{source}: format_version {card.get('format_version')} != {FORMAT_VERSION}")
        try:
            actor = build_actor(int(card["obs_dim"]), int(card["action_dim"]), tuple(card["actor_hidden"]),
                                card["activation"], int(card.get("history_steps", 1)),
                                int(card.get("history_latent_dim", 1)))
            actor.load_state_dict({k[len("actor."):]: v for k, v in tensors.items() if k.startswith("actor.")})
            dev = torch.device(device)
            norm = (tensors["obs_norm.mean"].to(dev), tensors["obs_norm.var"].to(dev)) \
                if card.get("observation_normalization") else None
        except (KeyError, RuntimeError, TypeError) as exc:
            raise ValueError(f"{source}: weights do not match the card: {exc}") from None
        return cls(actor.to(dev), card, norm, dev)

    @torch.inference_mode()
    def __call__(self, obs: Any) -> Any:
        is_numpy = not isinstance(obs, torch.Tensor)
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32) if is_numpy else obs, device=self.device,
                            dtype=torch.float32)
        if x.shape[-1:] != (self.obs_dim,) or x.ndim > 2:
            raise ValueError(f"observation must have shape ({self.obs_dim},) or (B, {self.obs_dim}), got {tuple(x.shape)}")
        if not torch.isfinite(x).all():
            raise ValueError("observation must be finite")
        if self.norm is not None:
            mean, var = self.norm
            x = ((x - mean.float()) / torch.sqrt(var.float() + 1e-8)).clamp(-self.clip, self.clip)
        action = self.actor(x).clamp(-1.0, 1.0)
        if is_numpy:
            return action.cpu().numpy()
        return action.to(obs.device)
