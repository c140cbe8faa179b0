"""Soft actor-critic with the RLPD/SERL/HIL-SERL recipe: critic ensemble with target
subsampling, LayerNorm MLPs, high update-to-data ratio, tanh-Gaussian policy, learned
temperature, optional trainable image encoder (DrQ) and HIL-SERL's discrete gripper critic.

Read top to bottom: config, networks, the losses, the update, checkpointing.

Observations are flat feature vectors, or (with an encoder) dicts of uint8 frames + `state`.
With a grasp critic the last action dimension is the discrete gripper command (+1 close,
0 stay, -1 open); the actor learns the others.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Mapping

import torch
import torch.nn.functional as F
from torch.optim.adam import adam

from robot_rl.agents.compiled import CompiledMethods
from robot_rl.agents.encoders import EncoderConfig, ImageEncoder
from robot_rl.agents.networks import CriticEnsemble, mlp
from robot_rl.agents.policy import GRIPPER_COMMANDS, Policy, PolicySpec, gripper_index
from robot_rl.config_fields import setting
from robot_rl.device import cpu_has_native_bf16, reuse_freed_cpu_memory


@dataclass
class SACConfig:
    """Hyperparameters; defaults follow SERL/RLPD for state-based control."""

    hidden_dims: tuple[int, ...] = setting((256, 256), "Hidden layer widths of actor and critics.", low=1, high=65536)
    layer_norm: bool = True
    """LayerNorm in every hidden block (RLPD: keeps high-UTD critics stable)."""
    num_critics: int = setting(2, "Critic ensemble size.", low=1, high=32)
    """SERL 10, HIL-SERL 2."""
    critic_subsample: int | None = setting(None, "Critics sampled for the target min (0: all).", low=0, high=32,
                                           unset=0)
    """Critics drawn at random for the min in the target (REDQ; SERL 2 of 10). None: min over all."""
    utd_ratio: int = setting(1, "Critic updates per actor update.", low=1, high=64)
    """The update-to-data ratio per sampled batch group."""
    batch_size: int = setting(256, "Transitions per critic update.", low=1, high=8192)
    discount: float = setting(0.99, "Discount factor.", low=0.0, high=1.0)
    tau: float = setting(0.005, "Target network Polyak rate.", low=1e-6, high=1.0)
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    temperature_lr: float = 3e-4
    init_temperature: float = setting(1e-2, "Initial entropy temperature.", low=1e-6, high=10.0)
    """Alpha (SERL/HIL-SERL 1e-2)."""
    target_entropy: float | None = setting(None, "Entropy target of the temperature (0: automatic, -|A|/2; "
                                           "FastRLAP -2).", low=-100.0, high=100.0, unset=0.0)
    """None means -|A|/2 over the continuous actions."""
    backup_entropy: bool = setting(False, "Entropy term in the critic target.")
    """Subtract alpha * log pi(a'|s') in the critic target (off in SERL)."""
    action_rate_limit: float | None = setting(
        None, "FastRLAP: the actor's actions within this of the previous action (the last entries of the "
        "observation) in the critic target and actor loss, as the robot executes them (0: off).", low=0.0, high=2.0,
        unset=0.0)
    """Every action within this of the previous one, which the features' last entries (the
    observation's, or the state's after the camera features) hold. The robot clamps what it
    executes; the critic target and the actor loss clamp the actor's actions the same way, so
    the critic is never asked about actions the robot cannot take (None: off)."""
    bc_weight: float = setting(0.0, "Behaviour cloning weight on the intervention rows of each batch (the actor "
                               "imitates a person's corrections directly; 0: off, as in HIL-SERL).",
                               low=0.0, high=100.0)
    """On the batch's rows flagged `intervention` the actor loss adds bc_weight x the mean squared
    distance between the policy's deterministic continuous action and the one the person executed.
    Corrections made at the states the policy itself reaches then teach the actor directly
    (HG-DAgger), not only through the critic; without interventions the update is plain SAC + RLPD."""
    max_grad_norm: float | None = None
    """Clip gradient norms of each network (None: no clipping)."""
    grasp_critic: bool = setting(False, "HIL-SERL: learn the gripper command with a discrete double-DQN critic.")
    """The last action dim is then the gripper command."""
    grasp_hidden_dims: tuple[int, ...] = (128, 128)
    """Hidden widths of the grasp critic."""
    grasp_penalty: float = setting(-0.05, "Grasp critic reward for each gripper change.", low=-10.0, high=0.0)
    """Added to the grasp critic's reward when a command changes the gripper state (HIL-SERL -0.05)."""
    gripper_state_index: int = -1
    """Index, from the end of the state vector, of the current gripper command (> 0 closed)."""
    precision: str = setting("float32", "Critic matmul precision (auto: bfloat16 where native).",
                             choices=("auto", "float32", "bfloat16"))
    """Critics and actor train in "float32", "bfloat16" (autocast; LayerNorm, heads, log-probabilities
    and losses stay float32) or "auto" (bfloat16 where the hardware has native bf16 matmul, else
    float32). The deployed policy acts in float32."""
    compile: bool = setting(False, "torch.compile the training step as one graph (CUDA graphs on GPU), eager "
                            "fallback.")

    def __post_init__(self):
        self.hidden_dims = tuple(int(w) for w in self.hidden_dims)
        self.grasp_hidden_dims = tuple(int(w) for w in self.grasp_hidden_dims)
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
        if self.precision not in ("float32", "bfloat16", "auto"):
            raise ValueError(f"precision must be float32, bfloat16 or auto, got {self.precision!r}")
        if self.action_rate_limit is not None and not 0.0 < self.action_rate_limit <= 2.0:
            raise ValueError(f"action_rate_limit must be in (0, 2] or None, got {self.action_rate_limit}")
        if self.action_rate_limit is not None and self.grasp_critic:
            raise ValueError("action_rate_limit applies to continuous actions only; not with a grasp critic")
        if not 0.0 <= self.bc_weight < float("inf"):
            raise ValueError(f"bc_weight must be finite and >= 0, got {self.bc_weight}")
        if self.gripper_state_index >= 0:
            raise ValueError("gripper_state_index counts from the end of the state vector: use -1, -2, ...")


def native_bf16(device: torch.device) -> bool:
    """True where bfloat16 matmuls run natively: CUDA with bf16, or a CPU with AVX512-BF16 / AMX."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_has_native_bf16()


def _fused_adam(device: torch.device) -> bool:
    """Whether torch has a fused Adam kernel for `device` (CPU and CUDA)."""
    return device.type in ("cpu", "cuda")


def _adam(params, lr: float, device: torch.device) -> torch.optim.Adam:
    """An Adam optimizer with its moments allocated, in the layout `SAC._adam_step` updates."""
    # fused (or capturable): checkpoints keep the step count beside the parameters, where `_adam_step` needs it.
    kind = dict(fused=True) if _fused_adam(device) else dict(foreach=True, capturable=True)
    optimizer = torch.optim.Adam(params, lr=lr, **kind)
    _allocate_moments(optimizer)
    return optimizer


def _parameters(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    """The parameters `optimizer` steps, in its order (its single group's)."""
    return optimizer.param_groups[0]["params"]


def _allocate_moments(optimizer: torch.optim.Adam) -> None:
    """Zero moments at step 0 for every parameter without any (a fresh optimizer, or a checkpoint saved
    before its first step); every moment and step count, new or loaded, marked a static graph input."""
    for p in _parameters(optimizer):
        if not optimizer.state.get(p):
            optimizer.state[p] = {"step": torch.zeros((), dtype=torch.float32, device=p.device),
                                  "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                  "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
        _static_inputs(*optimizer.state[p].values())


def _static_inputs(*tensors: torch.Tensor) -> None:
    """Marks tensors the compiled training step updates in place, besides parameters (static already), as static
    inputs: CUDA graphs (torch.compile on CUDA) skip a graph that mutates any other input, and the whole step would
    run uncaptured. Unguarded: a tensor replaced (a checkpoint loaded) is re-recorded, not recompiled."""
    for tensor in tensors:
        torch._dynamo.mark_static_address(tensor, guard=False)


def _take(value, part: slice):
    return {k: v[part] for k, v in value.items()} if isinstance(value, Mapping) else value[part]


class SAC:
    """Owns the networks and optimizers; `update` consumes one group of utd_ratio minibatches.

    `obs_dim` is the flat observation length, or ignored when `encoder` is given (its
    output_dim is used). `action_dim` counts every action dim, the gripper command included.
    `policy_encoder`: a frozen encoder whose features the replay memory caches; the learner
    trains on features, the deployed policy includes it.
    """

    def __init__(self, obs_dim: int, action_dim: int, config: SACConfig | None = None,
                 device: str | torch.device = "cpu", encoder: EncoderConfig | None = None,
                 policy_encoder: EncoderConfig | None = None):
        self.config = cfg = config or SACConfig()
        self.device = torch.device(device)
        if self.device.type == "cpu":
            reuse_freed_cpu_memory()  # the update's activations would otherwise page-fault in afresh each time
        if encoder is not None and policy_encoder is not None:
            raise ValueError("give either a trained encoder or a frozen policy encoder, not both")
        shipped = encoder or policy_encoder
        # Built (and its pretrained weights loaded) once; it becomes the policy's encoder below.
        encoder_module = ImageEncoder(shipped).to(self.device) if shipped is not None else None
        self.obs_dim = encoder_module.output_dim if encoder_module is not None else obs_dim
        self.action_dim = action_dim
        self.continuous_dim = action_dim - 1 if cfg.grasp_critic else action_dim
        if self.continuous_dim < 1:
            raise ValueError("need at least one continuous action besides the gripper command")
        if cfg.action_rate_limit is not None and shipped is not None and shipped.state_dim < self.continuous_dim:
            raise ValueError("action_rate_limit needs the previous action at the end of the state vector")
        spec = PolicySpec(self.obs_dim, self.continuous_dim, cfg.hidden_dims, cfg.layer_norm,
                          encoder=asdict(shipped) if shipped is not None else None,
                          grasp_hidden_dims=cfg.grasp_hidden_dims if cfg.grasp_critic else None,
                          gripper_state_index=cfg.gripper_state_index)
        self.policy = Policy(spec, device=self.device)
        network = self.policy.network
        if encoder_module is not None:  # the trunk's weights (pretrained / resnet) come from the config
            network.encoder = encoder_module
        self.policy.network.train()
        self.actor = network.actor
        # A trainable encoder is part of the critic (DrQ): trained by the critic loss, used by the
        # actor with gradients stopped. A frozen one is only run before storage.
        self.encoder = network.encoder if encoder is not None else None
        self.critic = CriticEnsemble(self.obs_dim, self.continuous_dim, cfg.hidden_dims, cfg.num_critics,
                                     cfg.layer_norm).to(self.device)
        self.target_critic = CriticEnsemble(self.obs_dim, self.continuous_dim, cfg.hidden_dims, cfg.num_critics,
                                            cfg.layer_norm).to(self.device)
        self.target_critic.load_state_dict(self.critic.state_dict())
        self.target_critic.requires_grad_(False)
        self.grasp = network.grasp
        self.target_grasp = None
        if self.grasp is not None:
            self.target_grasp = mlp(self.obs_dim, cfg.grasp_hidden_dims, len(GRIPPER_COMMANDS)).to(self.device)
            self.target_grasp.load_state_dict(self.grasp.state_dict())
            self.target_grasp.requires_grad_(False)
        self.log_alpha = torch.tensor(float(torch.log(torch.tensor(cfg.init_temperature))),
                                      device=self.device, requires_grad=True)
        _static_inputs(self.log_alpha)
        self.target_entropy = cfg.target_entropy if cfg.target_entropy is not None else -self.continuous_dim / 2.0
        # The optimizers hold the hyperparameters and moments (and checkpoint them); `_adam_step` applies
        # their update inside the training step, so the moments exist from the start.
        self.actor_optimizer = _adam(self.actor.parameters(), cfg.actor_lr, self.device)
        self.critic_optimizer = _adam(self._critic_parameters(), cfg.critic_lr, self.device)
        self.temperature_optimizer = _adam([self.log_alpha], cfg.temperature_lr, self.device)
        self.num_updates = 0
        self.precision = cfg.precision
        if self.precision == "auto":
            self.precision = "bfloat16" if native_bf16(self.device) else "float32"
        self._compiled = CompiledMethods(self, ("train_step",), self.device, cfg.compile, differentiates=True)

    @property
    def batch_rows(self) -> int:
        """Transitions one `update` consumes: utd_ratio minibatches (training/off_policy.py: OffPolicyAgent)."""
        return self.config.utd_ratio * self.config.batch_size

    @property
    def trains_encoder(self) -> bool:
        return self.encoder is not None

    def _critic_parameters(self) -> list[torch.nn.Parameter]:
        params = list(self.critic.parameters())
        if self.encoder is not None:
            params += [p for p in self.encoder.parameters() if p.requires_grad]
        if self.grasp is not None:
            params += list(self.grasp.parameters())
        return params

    @property
    def compiled(self) -> bool:
        """True while the training step runs compiled: `compile` asked for and no compiler failure fell back to
        eager."""
        return self._compiled.active

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bfloat16")

    # ---- losses -------------------------------------------------------------------------------

    def critic_target(self, reward: torch.Tensor, terminated: torch.Tensor, next_q: torch.Tensor,
                      next_log_prob: torch.Tensor) -> torch.Tensor:
        """r + gamma * (1 - terminated) * (min over members of Q'(s', a') [- alpha log pi]).

        next_q is (k, B) from the subsampled target members; truncated transitions still
        bootstrap (only `terminated` stops it).
        """
        next_v = next_q.min(dim=0).values
        if self.config.backup_entropy:
            next_v = next_v - self.alpha.detach() * next_log_prob
        return reward + self.config.discount * (1.0 - terminated) * next_v

    def target_members(self) -> torch.Tensor | None:
        """The random subset of target critics for this update (None: all)."""
        k = self.config.critic_subsample
        return None if k is None else torch.randperm(self.config.num_critics, device=self.device)[:k]

    def critic_loss(self, features: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
                    terminated: torch.Tensor, next_features: torch.Tensor, next_action: torch.Tensor,
                    next_log_prob: torch.Tensor, members: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean squared TD error summed over members; returns (loss, Q values)."""
        with torch.no_grad(), self._autocast():
            # Only the subsampled target members are evaluated (REDQ needs their min, nothing else).
            next_q = self.target_critic(next_features, next_action, members).float()
        target = self.critic_target(reward, terminated, next_q, next_log_prob)
        with self._autocast():
            q = self.critic(features, action).float()
        # Each member regresses to the same target; summing keeps per-member gradients independent of E.
        loss = F.mse_loss(q, target.unsqueeze(0).expand_as(q), reduction="none").mean(dim=1).sum()
        return loss, q.detach()

    def grasp_target(self, reward: torch.Tensor, terminated: torch.Tensor, penalty: torch.Tensor,
                     next_q_online: torch.Tensor, next_q_target: torch.Tensor) -> torch.Tensor:
        """Double DQN: the online critic picks a' = argmax Q(s', .), the target critic scores it."""
        best = next_q_online.argmax(dim=-1, keepdim=True)
        next_v = next_q_target.gather(-1, best).squeeze(-1)
        return reward + penalty + self.config.discount * (1.0 - terminated) * next_v

    def grasp_commands(self, state: torch.Tensor, gripper_action: torch.Tensor) -> torch.Tensor:
        """Executed gripper actions -> command indices relative to the gripper's current command.

        Whoever acted (policy, expert, person), closing a closed gripper or opening an open one
        is "stay": the grasp critic learns changes, and only changes are penalised.
        """
        closed = state[:, self.config.gripper_state_index] > 0
        index = gripper_index(gripper_action)
        unchanged = ((index == 0) & closed) | ((index == 2) & ~closed)
        return torch.where(unchanged, torch.ones_like(index), index)

    def grasp_penalty(self, index: torch.Tensor) -> torch.Tensor:
        """config.grasp_penalty for every command that changes the gripper (close or open)."""
        return (index != 1).float() * self.config.grasp_penalty

    def grasp_loss(self, features: torch.Tensor, index: torch.Tensor, reward: torch.Tensor,
                   terminated: torch.Tensor, penalty: torch.Tensor, next_features: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            target = self.grasp_target(reward, terminated, penalty, self.grasp(next_features),
                                       self.target_grasp(next_features))
        q = self.grasp(features).gather(-1, index.unsqueeze(-1)).squeeze(-1)
        return F.mse_loss(q, target)

    def rate_limited(self, action: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """The actor's action clamped to previous action +- action_rate_limit (the previous action
        is the features' last continuous_dim entries); unchanged when the limit is off."""
        limit = self.config.action_rate_limit
        if limit is None:
            return action
        previous = features[:, -self.continuous_dim:]
        return torch.clamp(action, previous - limit, previous + limit)

    @torch.no_grad()
    def next_actions(self, next_features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """a' ~ pi(.|s') (rate-limited) and log pi(a'|s') for the critic target."""
        with self._autocast():
            next_action, next_log_prob = self.actor(next_features)
        return self.rate_limited(next_action, next_features), next_log_prob

    def actor_loss(self, features: torch.Tensor, executed: torch.Tensor | None = None,
                   intervention: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """alpha * log pi(a|s) - mean_E Q(s, a), plus bc_weight x the squared error of the mode
        against the `executed` action on the `intervention` rows; returns (loss, log_prob for the
        temperature)."""
        with self._autocast():
            mean, log_std = self.actor.distribution_params(features)
        action, log_prob = self.actor.sample(mean, log_std)
        action = self.rate_limited(action, features)
        # The critics are constants here: detached weights skip their gradients in the backward pass.
        constants = {name: p.detach() for name, p in self.critic.named_parameters()}
        with self._autocast():
            q = torch.func.functional_call(self.critic, constants, (features, action)).float().mean(dim=0)
        loss = (self.alpha.detach() * log_prob - q).mean()
        if executed is not None and intervention is not None:
            squared_error = (torch.tanh(mean) - executed).pow(2).sum(-1)
            weight = intervention.float()
            loss = loss + self.config.bc_weight * (squared_error * weight).sum() / weight.sum().clamp(min=1.0)
        return loss, log_prob.detach()

    def temperature_loss(self, log_prob: torch.Tensor) -> torch.Tensor:
        """Drives the policy entropy (-log pi) toward target_entropy."""
        return (self.alpha * (-log_prob - self.target_entropy)).mean()

    # ---- update -------------------------------------------------------------------------------

    def encode(self, obs, train: bool) -> torch.Tensor:
        """Features of a batch: the encoder (augmented while training) or the flat vector itself."""
        if self.encoder is None:
            return obs
        with self._autocast():
            return self.encoder(obs, augment=train).float()

    @torch.inference_mode()
    def value(self, obs, action: torch.Tensor) -> torch.Tensor:
        """The critic ensemble's pessimistic estimate (min over members) of Q(obs, action) for a batch, as a
        person watching the session sees it; obs as the replay memory stores it."""
        with self._autocast():
            q = self.critic(self.encode(obs, train=False), action[:, :self.continuous_dim]).float()
        return q.min(dim=0).values

    def _critic_losses(self, minibatch: Mapping, members: torch.Tensor | None):
        """The critic (+ grasp critic) loss of one minibatch and the features the actor step uses."""
        features = self.encode(minibatch["obs"], train=True)
        with torch.no_grad():
            next_features = self.encode(minibatch["next_obs"], train=True)
        next_action, next_log_prob = self.next_actions(next_features)
        action = minibatch["action"]
        loss, q = self.critic_loss(features, action[:, :self.continuous_dim], minibatch["reward"],
                                   minibatch["terminated"], next_features, next_action, next_log_prob, members)
        grasp_loss = torch.zeros((), device=self.device)
        if self.grasp is not None:
            obs = minibatch["obs"]
            index = self.grasp_commands(obs["state"] if isinstance(obs, Mapping) else obs, action[:, -1])
            grasp_loss = self.grasp_loss(features, index, minibatch["reward"], minibatch["terminated"],
                                         self.grasp_penalty(index), next_features)
        return loss + grasp_loss, features.detach(), loss.detach(), grasp_loss.detach(), q.mean()

    def train_step(self, minibatch: Mapping, train_actor: bool) -> torch.Tensor:
        """One critic step on `minibatch` (critics, encoder, grasp critic; then the targets) and, when
        `train_actor`, one actor and temperature step on the same states.

        Gradients come from `torch.autograd.grad` and the parameters move by `torch.optim.adam.adam`
        (torch's functional Adam, which its Adam class steps with), so under torch.compile the whole
        step, backward passes and optimizer updates included, is one graph: 1.4-1.6x the updates/s of
        compiling the losses alone, where the backward and the optimizers ran as hundreds of kernels.
        Returns the metrics stacked (critic loss, grasp loss, mean Q[, actor loss, temperature, entropy]).
        """
        loss, features, critic_loss, grasp_loss, q_mean = self._critic_losses(minibatch, self.target_members())
        self._adam_step(self.critic_optimizer, torch.autograd.grad(loss, _parameters(self.critic_optimizer)))
        self.soft_update_targets()
        if not train_actor:
            return torch.stack([critic_loss, grasp_loss, q_mean])
        imitation = ()
        if self.config.bc_weight > 0 and "intervention" in minibatch:
            imitation = (minibatch["action"][:, :self.continuous_dim], minibatch["intervention"])
        actor_loss, log_prob = self.actor_loss(features, *imitation)
        # One backward for both: the actor loss holds alpha constant, the temperature loss log pi.
        grads = torch.autograd.grad(actor_loss + self.temperature_loss(log_prob),
                                    [*_parameters(self.actor_optimizer), self.log_alpha])
        self._adam_step(self.actor_optimizer, grads[:-1])
        self._adam_step(self.temperature_optimizer, grads[-1:])
        return torch.stack([critic_loss, grasp_loss, q_mean, actor_loss.detach(), self.alpha.detach(),
                            -log_prob.mean()])

    def update(self, batch: Mapping) -> dict[str, float]:
        """One RLPD step on a batch of utd_ratio * batch_size transitions.

        The batch is split into utd_ratio minibatches; each trains the critics (and the encoder
        and grasp critic) and moves the targets, the last one also trains actor and temperature.
        """
        metrics = self.update_on_device(batch)
        names = ["critic_loss", "grasp_loss", "q_mean", "actor_loss", "temperature", "entropy"]
        # One host sync for all metrics instead of one per .item().
        values = dict(zip(names, metrics.tolist()))
        if self.grasp is None:
            del values["grasp_loss"]
        return values

    def update_on_device(self, batch: Mapping) -> torch.Tensor:
        """`update` without reading its metrics back: the last training step's metrics stacked on the training
        device (as `train_step` returns them; under CUDA graphs the next update overwrites them). No host sync, so a
        GPU's queue of launches never drains."""
        cfg = self.config
        size = batch["reward"].shape[0]
        if size != cfg.utd_ratio * cfg.batch_size:
            raise ValueError(f"batch of {size} transitions, expected utd_ratio*batch_size="
                             f"{cfg.utd_ratio * cfg.batch_size}")
        for i in range(cfg.utd_ratio):
            minibatch = {k: _take(v, slice(i * cfg.batch_size, (i + 1) * cfg.batch_size)) for k, v in batch.items()}
            metrics = self._compiled("train_step", minibatch, i == cfg.utd_ratio - 1)
        self.num_updates += 1
        return metrics

    @torch.no_grad()
    def _adam_step(self, optimizer: torch.optim.Adam, grads) -> None:
        """Clips `grads` (of `optimizer`'s parameters, in its order; max_grad_norm over this network, as
        clip_grad_norm_ does) and applies `optimizer`'s Adam step with its hyperparameters and state: torch's
        fused kernel in eager code on CPU and CUDA, its foreach form elsewhere and under torch.compile
        (capturable: no host sync), which traces it into the step's graph."""
        grads = list(grads)
        if self.config.max_grad_norm is not None:
            # Per-tensor norms, not get_total_norm's _foreach_norm: torch.compile's C++ wrapper (2.13) has no C
            # kernel for that op, so a clipped step would be generated with the slower Python wrapper.
            total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
            torch._foreach_mul_(grads, (self.config.max_grad_norm / (total + 1e-6)).clamp(max=1.0))
        group, params = optimizer.param_groups[0], _parameters(optimizer)
        states = [optimizer.state[p] for p in params]
        compiling = torch.compiler.is_compiling()
        fused = not compiling and _fused_adam(self.device)
        adam(params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [],
             [s["step"] for s in states], foreach=not fused, fused=fused, capturable=compiling,
             lr=group["lr"], beta1=group["betas"][0], beta2=group["betas"][1], weight_decay=group["weight_decay"],
             eps=group["eps"], amsgrad=False, maximize=False)

    @torch.no_grad()
    def soft_update_targets(self) -> None:
        target, online = list(self.target_critic.parameters()), list(self.critic.parameters())
        if self.grasp is not None:
            target += list(self.target_grasp.parameters())
            online += list(self.grasp.parameters())
        torch._foreach_lerp_(target, online, self.config.tau)

    # ---- checkpointing ------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Everything needed to continue training exactly: networks, optimizers, temperature, counters."""
        state = {
            "config": asdict(self.config),
            "policy": self.policy.network.state_dict(),
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "temperature_optimizer": self.temperature_optimizer.state_dict(),
            "num_updates": self.num_updates,
        }
        if self.target_grasp is not None:
            state["target_grasp"] = self.target_grasp.state_dict()
        return state

    def load_state_dict(self, state: Mapping) -> None:
        self.policy.network.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        if self.target_grasp is not None:
            self.target_grasp.load_state_dict(state["target_grasp"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        for name in ("actor_optimizer", "critic_optimizer", "temperature_optimizer"):
            optimizer = getattr(self, name)
            # A copy: torch's Optimizer.load_state_dict keeps the given tensors, and another live agent's
            # moments must not be stepped by both.
            optimizer.load_state_dict(copy.deepcopy(state[name]))
            _allocate_moments(optimizer)
        self.num_updates = int(state["num_updates"])
