"""Soft actor-critic with the RLPD/SERL recipe: critic ensemble with target subsampling,
LayerNorm MLPs, high update-to-data ratio, tanh-Gaussian policy, learned temperature.

Read top to bottom: config, networks, the three losses, the update.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping

import torch
import torch.nn.functional as F

from robot_rl.agents.networks import CriticEnsemble
from robot_rl.agents.policy import Policy, PolicySpec


@dataclass
class SACConfig:
    """Hyperparameters; defaults follow SERL/RLPD for state-based control."""

    hidden_dims: tuple[int, ...] = (256, 256)
    """Hidden widths of actor and critics."""
    layer_norm: bool = True
    """LayerNorm in every hidden block (RLPD: keeps high-UTD critics stable)."""
    num_critics: int = 2
    """Critic ensemble size (SERL 10, HIL-SERL 2)."""
    critic_subsample: int | None = None
    """Critics drawn at random for the min in the target (REDQ; SERL 2 of 10). None: min over all."""
    utd_ratio: int = 1
    """Critic updates per actor update (update-to-data ratio per sampled batch group)."""
    batch_size: int = 256
    """Transitions per critic update."""
    discount: float = 0.99
    """Discount factor gamma."""
    tau: float = 0.005
    """Polyak rate of the target critics."""
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    temperature_lr: float = 3e-4
    init_temperature: float = 1e-2
    """Initial entropy temperature alpha (SERL/HIL-SERL 1e-2)."""
    target_entropy: float | None = None
    """Entropy target; None means -|A|/2."""
    backup_entropy: bool = False
    """Subtract alpha * log pi(a'|s') in the critic target (off in SERL)."""
    max_grad_norm: float | None = None
    """Clip gradient norms of each network (None: no clipping)."""

    def __post_init__(self):
        self.hidden_dims = tuple(int(w) for w in self.hidden_dims)
        if self.num_critics < 1:
            raise ValueError("num_critics must be >= 1")
        if self.critic_subsample is not None and not 1 <= self.critic_subsample <= self.num_critics:
            raise ValueError(f"critic_subsample must be in [1, num_critics={self.num_critics}]")
        if self.utd_ratio < 1 or self.batch_size < 1:
            raise ValueError("utd_ratio and batch_size must be >= 1")
        if not 0.0 <= self.discount <= 1.0 or not 0.0 < self.tau <= 1.0:
            raise ValueError("discount must be in [0, 1] and tau in (0, 1]")
        if self.init_temperature <= 0:
            raise ValueError("init_temperature must be > 0")


class SAC:
    """Owns the networks and optimizers; `update` consumes one group of utd_ratio minibatches."""

    def __init__(self, obs_dim: int, action_dim: int, config: SACConfig | None = None,
                 device: str | torch.device = "cpu"):
        self.config = config or SACConfig()
        cfg = self.config
        self.device = torch.device(device)
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.policy = Policy(PolicySpec(obs_dim, action_dim, cfg.hidden_dims, cfg.layer_norm), device=self.device)
        self.actor = self.policy.network
        self.actor.train()
        self.critic = CriticEnsemble(obs_dim, action_dim, cfg.hidden_dims, cfg.num_critics, cfg.layer_norm).to(self.device)
        self.target_critic = CriticEnsemble(obs_dim, action_dim, cfg.hidden_dims, cfg.num_critics,
                                            cfg.layer_norm).to(self.device)
        self.target_critic.load_state_dict(self.critic.state_dict())
        self.target_critic.requires_grad_(False)
        self.log_alpha = torch.tensor(float(torch.log(torch.tensor(cfg.init_temperature))),
                                      device=self.device, requires_grad=True)
        self.target_entropy = cfg.target_entropy if cfg.target_entropy is not None else -action_dim / 2.0
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)
        self.temperature_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.temperature_lr)
        self.num_updates = 0

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    # ---- losses -------------------------------------------------------------------------------

    def critic_target(self, reward: torch.Tensor, terminated: torch.Tensor, next_q: torch.Tensor,
                      next_log_prob: torch.Tensor, critic_indices: torch.Tensor | None) -> torch.Tensor:
        """r + gamma * (1 - terminated) * (min over the chosen critics of Q'(s', a') [- alpha log pi]).

        next_q is (E, B); truncated transitions still bootstrap (only `terminated` stops it).
        """
        if critic_indices is not None:
            next_q = next_q.index_select(0, critic_indices)
        next_v = next_q.min(dim=0).values
        if self.config.backup_entropy:
            next_v = next_v - self.alpha.detach() * next_log_prob
        return reward + self.config.discount * (1.0 - terminated) * next_v

    def critic_loss(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        with torch.no_grad():
            next_action, next_log_prob = self.actor(batch["next_obs"])
            next_q = self.target_critic(batch["next_obs"], next_action)
            k = self.config.critic_subsample
            indices = None if k is None else torch.randperm(self.config.num_critics, device=self.device)[:k]
            target = self.critic_target(batch["reward"], batch["terminated"], next_q, next_log_prob, indices)
        q = self.critic(batch["obs"], batch["action"])
        # Each member regresses to the same target; summing keeps per-member gradients independent of E.
        loss = F.mse_loss(q, target.unsqueeze(0).expand_as(q), reduction="none").mean(dim=1).sum()
        return loss, {"critic_loss": loss.item(), "q_mean": q.mean().item()}

    def actor_loss(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """alpha * log pi(a|s) - mean_E Q(s, a); returns (loss, log_prob for the temperature)."""
        action, log_prob = self.actor(obs)
        q = self.critic(obs, action).mean(dim=0)
        return (self.alpha.detach() * log_prob - q).mean(), log_prob.detach()

    def temperature_loss(self, log_prob: torch.Tensor) -> torch.Tensor:
        """Drives the policy entropy (-log pi) toward target_entropy."""
        return (self.alpha * (-log_prob - self.target_entropy)).mean()

    # ---- update -------------------------------------------------------------------------------

    def update(self, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """One RLPD step on a batch of utd_ratio * batch_size transitions.

        The batch is split into utd_ratio minibatches; each trains the critics and moves
        the targets, the last one also trains actor and temperature.
        """
        cfg = self.config
        size = batch["reward"].shape[0]
        if size != cfg.utd_ratio * cfg.batch_size:
            raise ValueError(f"batch of {size} transitions, expected utd_ratio*batch_size="
                             f"{cfg.utd_ratio * cfg.batch_size}")
        metrics: dict[str, float] = {}
        for i in range(cfg.utd_ratio):
            minibatch = {k: v[i * cfg.batch_size:(i + 1) * cfg.batch_size] for k, v in batch.items()}
            loss, metrics = self.critic_loss(minibatch)
            self._step(self.critic_optimizer, loss, self.critic.parameters())
            self.soft_update_targets()

        actor_loss, log_prob = self.actor_loss(minibatch["obs"])
        self._step(self.actor_optimizer, actor_loss, self.actor.parameters())
        temperature_loss = self.temperature_loss(log_prob)
        self._step(self.temperature_optimizer, temperature_loss, [self.log_alpha])
        self.num_updates += 1
        metrics.update(actor_loss=actor_loss.item(), temperature=self.alpha.item(),
                       entropy=-log_prob.mean().item())
        return metrics

    def _step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, params) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(list(params), self.config.max_grad_norm)
        optimizer.step()

    @torch.no_grad()
    def soft_update_targets(self) -> None:
        target = list(self.target_critic.parameters())
        torch._foreach_lerp_(target, list(self.critic.parameters()), self.config.tau)

    # ---- checkpointing ------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Everything needed to continue training exactly: networks, optimizers, temperature, counters."""
        return {
            "config": asdict(self.config),
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "temperature_optimizer": self.temperature_optimizer.state_dict(),
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, state: Mapping) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.temperature_optimizer.load_state_dict(state["temperature_optimizer"])
        self.num_updates = int(state["num_updates"])
