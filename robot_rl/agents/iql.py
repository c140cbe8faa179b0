"""Implicit Q-Learning (Kostrikov et al. 2021) for FastRLAP's offline pretraining from pixels.

FastRLAP pretrains its image encoder (and an initial actor) with IQL on prior driving data, then
freezes the encoder for online RL. IQL never queries the actor for an action outside the dataset:

* V(s) is an upper expectile of Q_target(s, a) over the dataset's actions (expectile regression);
* Q(s, a) regresses to r + gamma * (1 - terminated) * V(s');
* the actor maximises the advantage-weighted log-likelihood of the dataset's actions,
  weights exp(temperature * (Q_target(s, a) - V(s))), clipped at max_weight.

Observations are {"frames": uint8 (B, K, H, W, 3), "state": float (B, S)}: K stacked frames of
one forward camera. Every frame goes through the same encoder (`encode_stack`) and the features
are [K frame embeddings, state]. The encoder is trained by the V and Q losses (with DrQ shifts);
the actor sees its features with gradients stopped.

Read top to bottom: config, the pure loss pieces, the learner, export for the online run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np
import torch
import torch.nn.functional as F

from robot_rl.agents.encoders import EncoderConfig, ImageEncoder, random_shift
from robot_rl.agents.frame_stack_policy import save_frame_stack_policy
from robot_rl.agents.networks import CriticEnsemble, TanhGaussianActor, mlp, squashed_gaussian_log_prob
from robot_rl.device import reuse_freed_cpu_memory

ACTION_EPS = 1e-5
"""Dataset actions are clipped to [-1 + eps, 1 - eps] before atanh (atanh(+-1) is infinite)."""


def _default_encoder() -> EncoderConfig:
    return EncoderConfig(cameras=("front",), image_size=64, latent_dim=50)


@dataclass
class IQLConfig:
    """Hyperparameters; defaults follow FastRLAP's IQL config for pixels."""

    expectile: float = 0.9
    """Expectile of Q over the dataset's actions that V estimates (0.5: the mean, -> 1: the max)."""
    temperature: float = 3.0
    """Advantage temperature beta of the actor's weights exp(beta * A) (0: behaviour cloning)."""
    max_weight: float = 100.0
    """Upper clip of the actor's weights (keeps one lucky transition from dominating a batch)."""
    discount: float = 0.99
    """Discount factor gamma."""
    tau: float = 0.005
    """Polyak rate of the target critics."""
    hidden_dims: tuple[int, ...] = (256, 256)
    """Hidden widths of the actor, value and critic MLPs."""
    layer_norm: bool = True
    """LayerNorm + tanh hidden blocks (as the SAC learner's networks, so the actor transfers)."""
    num_critics: int = 10
    """Critic ensemble size (FastRLAP: 10)."""
    critic_subsample: int = 2
    """Target critics drawn at random per update whose min is Q_target (FastRLAP: min over 2 of 10)."""
    lr: float = 3e-4
    """Adam learning rate of every network."""
    batch_size: int = 256
    """Transitions per update."""
    frame_stack: int = 3
    """Frames K per observation (FastRLAP: 3)."""
    encoder: EncoderConfig = field(default_factory=_default_encoder)
    """The per-frame image encoder: one camera, no state (IQL appends the state after the K frames).
    The default is a conv trunk with a 50-d latent, like the D4PG encoder FastRLAP uses."""

    def __post_init__(self):
        if isinstance(self.encoder, Mapping):  # a config read back from a card's JSON
            self.encoder = EncoderConfig(**self.encoder)
        self.hidden_dims = tuple(int(w) for w in self.hidden_dims)
        if not 0.0 < self.expectile < 1.0:
            raise ValueError(f"expectile must be in (0, 1), got {self.expectile}")
        if self.temperature < 0 or self.max_weight <= 0:
            raise ValueError("temperature must be >= 0 and max_weight > 0")
        if not 0.0 <= self.discount <= 1.0 or not 0.0 < self.tau <= 1.0:
            raise ValueError("discount must be in [0, 1] and tau in (0, 1]")
        if not 1 <= self.critic_subsample <= self.num_critics:
            raise ValueError(f"critic_subsample must be in [1, num_critics={self.num_critics}]")
        if self.lr <= 0 or self.batch_size < 1 or self.frame_stack < 1:
            raise ValueError("lr > 0, batch_size >= 1 and frame_stack >= 1 required")
        if len(self.encoder.cameras) != 1 or self.encoder.state_dim != 0:
            raise ValueError("the IQL encoder sees one camera's frames and no state (cameras=(name,), state_dim=0)")


# ---- pure pieces ----------------------------------------------------------------------------


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """mean(|expectile - 1(diff < 0)| * diff^2) with diff = target - prediction.

    Asymmetric least squares: with expectile > 0.5 underestimates cost more than overestimates,
    so the minimiser is an upper expectile of the targets.
    """
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.square()).mean()


def advantage_weights(advantage: torch.Tensor, temperature: float, max_weight: float) -> torch.Tensor:
    """exp(temperature * advantage), clipped at max_weight (AWR weights of IQL's actor)."""
    return torch.exp(temperature * advantage).clamp(max=max_weight)


def encode_stack(encoder: ImageEncoder, frames: torch.Tensor, augment: bool = False) -> torch.Tensor:
    """uint8 (B, K, H, W, 3) frames of the encoder's one camera -> (B, K * latent) features.

    Each frame runs through the same encoder (a frozen encoder's features can then be cached per
    frame). DrQ's shift is drawn once per observation, so the K frames stay aligned.
    """
    if frames.dim() != 5 or frames.dtype != torch.uint8 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be uint8 (B, K, H, W, 3), got {frames.dtype} {tuple(frames.shape)}")
    b, k, h, w, _ = frames.shape
    pad = encoder.config.augment_pad
    if augment and pad > 0:
        # Shift the K frames as one (B, K*3, H, W) uint8 image (the shift is an exact crop).
        stacked = frames.permute(0, 1, 4, 2, 3).reshape(b, k * 3, h, w)
        frames = random_shift(stacked, pad).reshape(b, k, 3, h, w).permute(0, 1, 3, 4, 2)
    embedding = encoder({encoder.config.cameras[0]: frames.reshape(b * k, h, w, 3)})
    return embedding.reshape(b, k * embedding.shape[-1])


# ---- the learner ----------------------------------------------------------------------------


class IQL:
    """Owns encoder, critics, value, actor and their optimizers; `update` takes one batch.

    A batch is a dict of tensors or numpy arrays: obs and next_obs ({"frames", "state"}),
    action (B, action_dim) in [-1, 1], reward (B,), terminated (B,) in {0, 1}.
    """

    def __init__(self, state_dim: int, action_dim: int, config: IQLConfig | None = None,
                 device: str | torch.device | None = None):
        self.config = cfg = config or IQLConfig()
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if self.device.type == "cpu":
            reuse_freed_cpu_memory()
        self.state_dim, self.action_dim = state_dim, action_dim
        self.encoder = ImageEncoder(cfg.encoder).to(self.device)
        self.feature_dim = cfg.frame_stack * self.encoder.output_dim + state_dim
        self.critic = CriticEnsemble(self.feature_dim, action_dim, cfg.hidden_dims, cfg.num_critics,
                                     cfg.layer_norm).to(self.device)
        self.target_critic = CriticEnsemble(self.feature_dim, action_dim, cfg.hidden_dims, cfg.num_critics,
                                            cfg.layer_norm).to(self.device)
        self.target_critic.load_state_dict(self.critic.state_dict())
        self.target_critic.requires_grad_(False)
        self.value = mlp(self.feature_dim, cfg.hidden_dims, 1, cfg.layer_norm).to(self.device)
        self.actor = TanhGaussianActor(self.feature_dim, action_dim, cfg.hidden_dims,
                                       layer_norm=cfg.layer_norm).to(self.device)
        fused = dict(fused=True) if self.device.type in ("cpu", "cuda") else {}
        # V and Q each train only their own weights, so one Adam over their summed losses is the
        # same as two; the shared encoder gets both gradients.
        self.critic_optimizer = torch.optim.Adam(self._critic_parameters(), lr=cfg.lr, **fused)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr, **fused)
        self.num_updates = 0

    def _critic_parameters(self) -> list[torch.nn.Parameter]:
        encoder = [p for p in self.encoder.parameters() if p.requires_grad]  # none if frozen
        return [*encoder, *self.value.parameters(), *self.critic.parameters()]

    def features(self, obs: Mapping[str, torch.Tensor], augment: bool = False) -> torch.Tensor:
        """[K frame embeddings, state] of validated observation tensors."""
        return torch.cat([encode_stack(self.encoder, obs["frames"], augment), obs["state"]], dim=-1)

    def target_q(self, features: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """min of a random critic_subsample of the target critics at (s, a): (B,)."""
        members = torch.randperm(self.config.num_critics, device=self.device)[:self.config.critic_subsample]
        return self.target_critic(features, action, members).min(dim=0).values

    def actor_loss(self, features: torch.Tensor, action: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """-mean(weight * log pi(dataset action | s))."""
        mean, log_std = self.actor.distribution_params(features)
        pre_tanh = torch.atanh(action.clamp(-1.0 + ACTION_EPS, 1.0 - ACTION_EPS))
        return -(weights * squashed_gaussian_log_prob(pre_tanh, mean, log_std)).mean()

    def update(self, batch: Mapping) -> dict[str, float]:
        """One gradient step of V, Q (and the encoder) and the actor; Polyak step of the targets."""
        cfg = self.config
        batch = self._batch(batch)
        action = batch["action"]
        features = self.features(batch["obs"], augment=True)
        with torch.no_grad():
            target_q = self.target_q(features, action)
            next_v = self.value(self.features(batch["next_obs"], augment=True)).squeeze(-1)
            q_target = batch["reward"] + cfg.discount * (1.0 - batch["terminated"]) * next_v
        v = self.value(features).squeeze(-1)
        value_loss = expectile_loss(target_q - v, cfg.expectile)
        q = self.critic(features, action)
        # Every member regresses to the same target; summing keeps each member's gradient independent of E.
        critic_loss = F.mse_loss(q, q_target.expand_as(q), reduction="none").mean(dim=1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        (value_loss + critic_loss).backward()
        self.critic_optimizer.step()

        advantage = target_q - v.detach()
        weights = advantage_weights(advantage, cfg.temperature, cfg.max_weight)
        actor_loss = self.actor_loss(features.detach(), action, weights)
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optimizer.step()

        with torch.no_grad():
            torch._foreach_lerp_(list(self.target_critic.parameters()), list(self.critic.parameters()), cfg.tau)
        self.num_updates += 1
        metrics = {"value_loss": value_loss.detach(), "critic_loss": critic_loss.detach(),
                   "actor_loss": actor_loss.detach(), "q_mean": q.detach().mean(), "v_mean": v.detach().mean(),
                   "advantage_mean": advantage.mean(), "weight_mean": weights.mean()}
        return dict(zip(metrics, torch.stack(list(metrics.values())).tolist()))  # one host sync

    @torch.inference_mode()
    def act(self, obs: Mapping, deterministic: bool = True) -> np.ndarray:
        """Action(s) for {"frames": (K, H, W, 3), "state": (S,)}, or the same with a batch axis."""
        batched = not isinstance(obs, Mapping) or np.ndim(obs.get("state")) == 2
        checks: dict[str, torch.Tensor] = {}
        obs = self._observation(obs if batched else {k: v[None] for k, v in obs.items()}, "obs", checks)
        _raise_failed(checks)
        action, _ = self.actor(self.features(obs), deterministic=deterministic)
        action = action.cpu().numpy()
        return action if batched else action[0]

    # ---- input validation -------------------------------------------------------------------

    def _observation(self, obs, name: str, checks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Shape and dtype checks now; the finiteness check goes into `checks` (tested with one sync)."""
        if not isinstance(obs, Mapping) or "frames" not in obs or "state" not in obs:
            raise ValueError(f"{name} must be a dict with 'frames' and 'state'")
        frames = torch.as_tensor(obs["frames"], device=self.device)
        size = self.config.encoder.image_size
        shape = (self.config.frame_stack, size, size, 3)
        if frames.dtype != torch.uint8 or frames.dim() != 5 or tuple(frames.shape[1:]) != shape:
            raise ValueError(f"{name}['frames'] must be uint8 (B, {', '.join(map(str, shape))}), "
                             f"got {frames.dtype} {tuple(frames.shape)}")
        state = torch.as_tensor(obs["state"], device=self.device).float()
        if tuple(state.shape) != (frames.shape[0], self.state_dim):
            raise ValueError(f"{name}['state'] must be ({frames.shape[0]}, {self.state_dim}), got {tuple(state.shape)}")
        checks[f"{name}['state'] must be finite"] = torch.isfinite(state).all()
        return {"frames": frames, "state": state}

    def _batch(self, batch: Mapping) -> dict:
        missing = [k for k in ("obs", "action", "reward", "next_obs", "terminated") if k not in batch]
        if missing:
            raise ValueError(f"batch lacks {missing}")
        checks: dict[str, torch.Tensor] = {}
        obs = self._observation(batch["obs"], "obs", checks)
        next_obs = self._observation(batch["next_obs"], "next_obs", checks)
        size = obs["frames"].shape[0]
        if size != self.config.batch_size or next_obs["frames"].shape[0] != size:
            raise ValueError(f"obs and next_obs must hold batch_size={self.config.batch_size} observations, "
                             f"got {size} and {next_obs['frames'].shape[0]}")
        action = torch.as_tensor(batch["action"], device=self.device).float()
        reward = torch.as_tensor(batch["reward"], device=self.device).float()
        terminated = torch.as_tensor(batch["terminated"], device=self.device).float()
        for name, value, shape in (("action", action, (size, self.action_dim)), ("reward", reward, (size,)),
                                   ("terminated", terminated, (size,))):
            if tuple(value.shape) != shape:
                raise ValueError(f"{name} must have shape {shape}, got {tuple(value.shape)}")
        checks["action must be finite and in [-1, 1]"] = (action.abs() <= 1.0).all()  # NaN fails too
        checks["reward must be finite"] = torch.isfinite(reward).all()
        checks["terminated must be 0 or 1"] = ((terminated == 0) | (terminated == 1)).all()
        _raise_failed(checks)
        return {"obs": obs, "next_obs": next_obs, "action": action, "reward": reward, "terminated": terminated}

    # ---- checkpoints and export -------------------------------------------------------------

    def state_dict(self) -> dict:
        """Everything needed to continue training exactly: networks, optimizers, update count."""
        return {
            "config": asdict(self.config),
            "encoder": self.encoder.state_dict(),
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "value": self.value.state_dict(),
            "actor": self.actor.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, state: Mapping) -> None:
        for name in ("encoder", "critic", "target_critic", "value", "actor", "critic_optimizer", "actor_optimizer"):
            getattr(self, name).load_state_dict(state[name])
        self.num_updates = int(state["num_updates"])

    def export(self, directory: str | Path, card: Mapping) -> None:
        """Writes encoder and actor as a frame-stack policy (`load_frame_stack_policy`; the encoder
        alone loads as EncoderConfig(kind="pretrained", weights=directory, ...), frozen). The card
        gets the IQL config and the update count."""
        save_frame_stack_policy(directory, self.encoder, self.actor, self.state_dim, self.config.frame_stack,
                                {**card, "iql": asdict(self.config), "num_updates": self.num_updates})


def _raise_failed(checks: dict[str, torch.Tensor]) -> None:
    """Raises ValueError naming every failed check; one host sync for all of them."""
    failed = [what for what, ok in zip(checks, torch.stack(list(checks.values())).tolist()) if not ok]
    if failed:
        raise ValueError("; ".join(failed))
