"""SAC updates of installed peer libraries and of ours, each sampling from its own replay memory.

Used by `learner_throughput.py`. Every contender's update, as its users run it: sample a batch of
256 from its own replay buffer (filled with the same random transitions), one critic step, one
actor and temperature step, the target update. Networks 256x256, each library's defaults
otherwise. A peer that cannot be imported (`pip install -e '.[bench]'`) is reported as missing, with why;
`peer_ratios` withholds the ratio against the best peer while one expected on the device is missing.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import math
import os
import re
import time
from collections import Counter
from typing import Callable, Mapping, NamedTuple

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.data.replay import ReplayBuffer
from robot_rl.training.off_policy import OffPolicyCore
from robot_rl.transport.layout import transition_layout

# JAX (sbx) and torch share one card in this process: JAX must not take 75 % of its memory when first imported.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

CAPACITY = 20_000
"""Transitions in every contender's replay memory."""

PEER_PACKAGES = {"stable_baselines3": ("stable-baselines3", "stable_baselines3"), "torchrl": ("torchrl", "torchrl"),
                 "sbx": ("sbx-rl", "sbx")}
"""Peer library contenders: (distribution, module imported)."""

REQUIRED_PEERS = {"cpu": ("stable_baselines3", "torchrl", "sbx", "redq_reference", "leanrl_reference"),
                  # TorchRL's wheels are built against one torch release (0.14.1: torch 2.13) and the GPU machine has
                  # another (2.11): measured there when it imports, not required. sbx runs on the card's own JAX.
                  "cuda": ("stable_baselines3", "sbx", "redq_reference", "leanrl_reference")}
"""The contenders that must all have run for `ratio_vs_best_peer` on each device type."""


def random_transitions(obs_dim: int, action_dim: int, count: int = CAPACITY, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((count, obs_dim), np.float32),
            "action": rng.uniform(-1, 1, (count, action_dim)).astype(np.float32),
            "reward": rng.standard_normal(count).astype(np.float32),
            "next_obs": rng.standard_normal((count, obs_dim), np.float32),
            "terminated": rng.random(count) < 0.01, "truncated": np.zeros(count, bool),
            "intervention": np.zeros(count, bool)}


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def first_line(exc: BaseException) -> str:
    """`Type: first non-empty line of the message`, what a report keeps of an exception."""
    line = next((line for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {line}"[:300]


def import_error(name: str) -> str | None:
    """Why peer `name` (a PEER_PACKAGES key) cannot be used here, None when it imports. Any failure counts: a wheel
    built for another torch fails in its C extension, not with ModuleNotFoundError."""
    try:
        importlib.import_module(PEER_PACKAGES[name][1])
    except Exception as exc:  # noqa: BLE001 - whatever the import raises, the peer is missing
        return first_line(exc)
    return None


def install_line(package: str) -> str:
    """The pip command that installs `package` at the version the bench extra pins (the package alone when this
    tree is not installed, so its metadata is absent)."""
    try:
        requirements = importlib.metadata.requires("robot_rl") or []
    except importlib.metadata.PackageNotFoundError:
        requirements = []
    pinned = next((r.split(";")[0].strip() for r in requirements
                   if re.match(rf"{re.escape(package)}\b", r) and "bench" in r), package)
    return f"pip install '{pinned}'"


def peer_ratios(ours_rate: float | None, peer_rates: Mapping[str, float], why_missing: Mapping[str, str],
                device_type: str) -> dict:
    """Ours against the peers that ran. `ratio_vs_best_peer` only when every contender REQUIRED_PEERS expects on
    this device type ran (a missing one may be the best: the ratio against the rest would flatter ours), else None;
    `ratio_vs_present_peers` against whichever ran; `missing_peers`: each contender without a figure, with why
    (`why_missing`) and the pip line that installs it."""
    required = REQUIRED_PEERS.get(device_type, REQUIRED_PEERS["cpu"])
    absent = sorted({*why_missing, *(name for name in required if name not in peer_rates)} - set(peer_rates))
    missing = {name: {"why": why_missing.get(name, "not measured"), "required": name in required,
                      **({"install": install_line(PEER_PACKAGES[name][0])} if name in PEER_PACKAGES else {})}
               for name in absent}
    best = max(peer_rates.values()) if peer_rates and ours_rate is not None else None
    complete = not any(missing[name]["required"] for name in missing)
    return {"ratio_vs_best_peer": round(ours_rate / best, 3) if best and complete else None,
            "ratio_vs_present_peers": round(ours_rate / best, 3) if best else None, "missing_peers": missing}


class DeviceReplay:
    """Transitions as tensors on the training device, sampled there: rows drawn by torch.randint on the device and
    gathered by indexing, so a batch costs a few kernel launches and no host sync or copy (the layout FastTD3 and
    LeanRL keep their replay memories in). `terminated` is stored as float32, as the losses use it."""

    FIELDS = ("obs", "action", "reward", "next_obs", "terminated")

    def __init__(self, transitions: Mapping[str, np.ndarray], device: torch.device):
        self.device = torch.device(device)
        self.storage = {k: torch.as_tensor(transitions[k]).to(self.device, torch.float32) for k in self.FIELDS}
        self.size = len(self.storage["reward"])

    def sample(self, count: int) -> dict[str, torch.Tensor]:
        rows = torch.randint(0, self.size, (count,), device=self.device)
        return {k: v[rows] for k, v in self.storage.items()}


def sbx_version(device: torch.device) -> str | None:
    """sbx-rl's version and the JAX device it runs on for a run on `device` (None when sbx is not installed)."""
    sbx_rl = version("sbx-rl")
    if sbx_rl is None:
        return None
    try:
        return f"{sbx_rl}, jax {version('jax')} on {_jax_device(device)}"
    except Exception as exc:  # noqa: BLE001 - JAX without a device of that kind: sbx's build says so again
        return f"{sbx_rl}, jax {version('jax')}: {first_line(exc)}"


def _jax_device(device: torch.device):
    """JAX's first device of the run's kind: its CPU for a CPU run, its GPU for a CUDA run (raises without one)."""
    import jax

    return jax.devices("cpu" if device.type == "cpu" else "gpu")[0]


def ours(obs_dim: int, action_dim: int, critics: int, subsample: int | None, device: torch.device,
         precision: str = "auto", compile: bool = True, batch: int = 256,
         device_memory: bool | None = None) -> tuple[Callable[[], object], SAC]:
    """Our learner's update. With `device_memory` (default: on CUDA) a DeviceReplay's batch and
    SAC.update_on_device: nothing in the loop waits for the GPU. Otherwise as the learner node runs it:
    OffPolicyCore.update (numpy sample, to tensors, SAC.update)."""
    config = SACConfig(num_critics=critics, critic_subsample=subsample, batch_size=batch, precision=precision,
                       compile=compile)
    agent = SAC(obs_dim, action_dim, config, device)
    if device_memory if device_memory is not None else agent.device.type == "cuda":
        memory = DeviceReplay(random_transitions(obs_dim, action_dim), agent.device)
        return lambda: agent.update_on_device(memory.sample(batch)), agent
    core = OffPolicyCore(agent, lambda: ReplayBuffer(CAPACITY, transition_layout(obs_dim, action_dim)),
                         np.random.default_rng(0), warmup=0)
    core.store(random_transitions(obs_dim, action_dim))
    return core.update, agent


def stable_baselines3(obs_dim: int, action_dim: int, critics: int, device: torch.device,
                      batch: int = 256) -> Callable[[], object]:
    """stable-baselines3 SAC: `model.train(gradient_steps=1)` on its own ReplayBuffer (min over all critics)."""
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3.common.logger import Logger

    model = SB3SAC("MlpPolicy", _box_env(obs_dim, action_dim), policy_kwargs={"net_arch": [256, 256],
                                                                              "n_critics": critics},
                   batch_size=batch, buffer_size=CAPACITY, learning_starts=0, device=device, seed=0)
    model.set_logger(Logger(None, []))  # no output (configure() would make a /tmp/SB3-<date> folder per model)
    _fill_sb3_buffer(model.replay_buffer, random_transitions(obs_dim, action_dim))
    return lambda: model.train(gradient_steps=1, batch_size=batch)


def _box_env(obs_dim: int, action_dim: int):
    """An environment with nothing but the spaces: what stable-baselines3-style models need to be built."""
    import gymnasium as gym

    class Box(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)
    return Box()


def _fill_sb3_buffer(buffer, data: dict[str, np.ndarray]) -> None:
    """Fills a stable-baselines3 ReplayBuffer (one environment) with `data`."""
    buffer.observations[:, 0] = data["obs"]
    buffer.next_observations[:, 0] = data["next_obs"]
    buffer.actions[:, 0] = data["action"]
    buffer.rewards[:, 0] = data["reward"]
    buffer.dones[:, 0] = data["terminated"]
    buffer.full = True


def sbx(obs_dim: int, action_dim: int, critics: int, device: torch.device, batch: int = 256) -> Callable[[], object]:
    """sbx-rl's SAC (JAX; stable-baselines3's API): `model.train(gradient_steps=1)` on its own ReplayBuffer,
    min over all critics, with JAX on `device`'s kind (raises when JAX has no GPU for a CUDA run)."""
    import jax
    from sbx import SAC as SbxSAC
    from stable_baselines3.common.logger import Logger

    jax.config.update("jax_default_device", _jax_device(device))

    model = SbxSAC("MlpPolicy", _box_env(obs_dim, action_dim), policy_kwargs={"net_arch": [256, 256],
                                                                              "n_critics": critics},
                   batch_size=batch, buffer_size=CAPACITY, learning_starts=0, seed=0)
    model.set_logger(Logger(None, []))  # no output (configure() would make a /tmp/SB3-<date> folder per model)
    _fill_sb3_buffer(model.replay_buffer, random_transitions(obs_dim, action_dim))
    return lambda: model.train(gradient_steps=1, batch_size=batch)


def torchrl(obs_dim: int, action_dim: int, critics: int, subsample: int | None, device: torch.device,
            batch: int = 256) -> Callable[[], object]:
    """TorchRL's loss as its sota-implementations/sac example runs it (SACLoss; REDQLoss for k of N),
    sampling its own TensorDictReplayBuffer; one backward, three Adam steps, SoftUpdate."""
    from tensordict import TensorDict
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torch import nn
    from torchrl.data import Bounded, LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import REDQLoss, SACLoss, SoftUpdate

    torch.manual_seed(0)
    actor_net = nn.Sequential(MLP(in_features=obs_dim, out_features=2 * action_dim, num_cells=[256, 256],
                                  activation_class=nn.ReLU), NormalParamExtractor())
    actor = ProbabilisticActor(TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
                               in_keys=["loc", "scale"], spec=Bounded(-1.0, 1.0, (action_dim,)),
                               distribution_class=TanhNormal, return_log_prob=False).to(device)
    qvalue = ValueOperator(MLP(in_features=obs_dim + action_dim, out_features=1, num_cells=[256, 256],
                               activation_class=nn.ReLU), in_keys=["observation", "action"]).to(device)
    if subsample:
        loss = REDQLoss(actor, qvalue, num_qvalue_nets=critics, sub_sample_len=subsample)
    else:
        loss = SACLoss(actor, qvalue, num_qvalue_nets=critics, loss_function="l2", delay_qvalue=True)
    loss.make_value_estimator(gamma=0.99)
    target = SoftUpdate(loss, eps=0.995)
    optimizers = [torch.optim.Adam(list(loss.actor_network_params.flatten_keys().values()), 3e-4),
                  torch.optim.Adam(list(loss.qvalue_network_params.flatten_keys().values()), 3e-4),
                  torch.optim.Adam([loss.log_alpha], 3e-4)]
    data = {k: torch.from_numpy(v) for k, v in random_transitions(obs_dim, action_dim).items()}
    done = data["terminated"][:, None]
    memory = TensorDictReplayBuffer(storage=LazyTensorStorage(CAPACITY, device=device), batch_size=batch)
    memory.extend(TensorDict({"observation": data["obs"], "action": data["action"],
                              "next": {"observation": data["next_obs"], "reward": data["reward"][:, None],
                                       "done": done, "terminated": done}}, batch_size=[CAPACITY]))

    def update():
        out = loss(memory.sample().to(device))
        total = sum(v for k, v in out.items() if k.startswith("loss_"))
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        total.backward()
        for optimizer in optimizers:
            optimizer.step()
        target.step()
    return update


def redq_reference(obs_dim: int, action_dim: int, critics: int, subsample: int | None, device: torch.device,
                   batch: int = 256) -> Callable[[], object]:
    """SAC written the way REDQ's and CleanRL's single files do it, without the handicaps of
    learner_throughput's common reference: a numpy replay buffer (REDQ's), a Python loop over 256x256 ReLU
    critics (their default), only the `subsample` target critics evaluated (all of them when None), the
    critics frozen (`requires_grad_(False)`) for the actor step, float32, eager, torch's default Adam."""
    from torch import nn

    torch.manual_seed(0)

    def mlp(i: int, o: int) -> nn.Sequential:
        return nn.Sequential(nn.Linear(i, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, o)).to(device)

    qs = [mlp(obs_dim + action_dim, 1) for _ in range(critics)]
    target_qs = [mlp(obs_dim + action_dim, 1) for _ in range(critics)]
    for q, target_q in zip(qs, target_qs):
        target_q.load_state_dict(q.state_dict())
        target_q.requires_grad_(False)
    actor = mlp(obs_dim, 2 * action_dim)
    log_alpha = torch.zeros((), device=device, requires_grad=True)
    q_params = [p for q in qs for p in q.parameters()]
    q_opt, a_opt = torch.optim.Adam(q_params, 3e-4), torch.optim.Adam(actor.parameters(), 3e-4)
    t_opt = torch.optim.Adam([log_alpha], 3e-4)
    memory = random_transitions(obs_dim, action_dim)
    rng = np.random.default_rng(0)

    def pi(obs):
        mean, log_std = actor(obs).chunk(2, -1)
        log_std = -5.0 + 3.5 * (torch.tanh(log_std) + 1)  # CleanRL's bounded log-std
        u = mean + log_std.exp() * torch.randn_like(mean)
        a = torch.tanh(u)
        log_prob = (-0.5 * ((u - mean) / log_std.exp()).pow(2) - log_std - 0.5 * np.log(2 * np.pi)
                    - torch.log(1 - a.pow(2) + 1e-6)).sum(-1)
        return a, log_prob

    def update():
        rows = rng.integers(0, CAPACITY, batch)
        b = {k: torch.as_tensor(memory[k][rows], device=device) for k in ("obs", "action", "reward", "next_obs")}
        terminated = torch.as_tensor(memory["terminated"][rows], dtype=torch.float32, device=device)
        with torch.no_grad():
            next_a, next_log_prob = pi(b["next_obs"])
            members = rng.choice(critics, subsample, replace=False) if subsample else range(critics)
            x = torch.cat([b["next_obs"], next_a], -1)
            next_q = torch.stack([target_qs[i](x).squeeze(-1) for i in members]).min(0).values
            target = b["reward"] + 0.99 * (1 - terminated) * (next_q - log_alpha.exp() * next_log_prob)
        x = torch.cat([b["obs"], b["action"]], -1)
        q_loss = sum(((q(x).squeeze(-1) - target) ** 2).mean() for q in qs)
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()
        for q in qs:
            q.requires_grad_(False)
        a, log_prob = pi(b["obs"])
        x = torch.cat([b["obs"], a], -1)
        q_pi = torch.stack([q(x).squeeze(-1) for q in qs]).mean(0)
        a_loss = (log_alpha.exp().detach() * log_prob - q_pi).mean()
        a_opt.zero_grad()
        a_loss.backward()
        a_opt.step()
        for q in qs:
            q.requires_grad_(True)
        t_loss = -(log_alpha.exp() * (log_prob.detach() - action_dim)).mean()
        t_opt.zero_grad()
        t_loss.backward()
        t_opt.step()
        with torch.no_grad():
            for q, target_q in zip(qs, target_qs):
                torch._foreach_lerp_(list(target_q.parameters()), list(q.parameters()), 0.005)
    return update


def leanrl_reference(obs_dim: int, action_dim: int, critics: int, subsample: int | None, device: torch.device,
                     compile: bool = True, batch: int = 256) -> Callable[[], object]:
    """SAC the way LeanRL speeds up CleanRL's file (written here in our words, no LeanRL code): the replay memory
    as device tensors sampled on the device (DeviceReplay), the critic ensemble as one stacked set of parameters
    evaluated by torch.vmap over torch.func.functional_call, 256x256 ReLU networks, CleanRL's bounded log-std,
    Adam (capturable on CUDA), and the critic step and the actor + temperature step each a function compiled by
    torch.compile: mode="reduce-overhead" (CUDA graphs) on CUDA, where LeanRL wraps them in tensordict's
    CudaGraphModule (tensordict is not on the GPU machine); plain torch.compile on CPU; eager with
    compile=False. Only the `subsample` target members are evaluated (all when None); the targets move by a
    polyak lerp inside the compiled critic step."""
    from torch import nn

    torch.manual_seed(0)

    def mlp(i: int, o: int) -> nn.Sequential:
        return nn.Sequential(nn.Linear(i, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, o)).to(device)

    members = [mlp(obs_dim + action_dim, 1) for _ in range(critics)]
    stacked, _ = torch.func.stack_module_state(members)
    # Parameters, not plain tensors: CUDA graphs treat them as static inputs, so mutating them in place (Adam,
    # the polyak lerp) keeps the graph instead of skipping it.
    q_params = {k: nn.Parameter(v.detach().clone()) for k, v in stacked.items()}
    target_params = {k: nn.Parameter(v.detach().clone(), requires_grad=False) for k, v in stacked.items()}
    shape = members[0].to("meta")  # the architecture alone; the weights come from the stacked parameters
    actor = mlp(obs_dim, 2 * action_dim)
    log_alpha = nn.Parameter(torch.zeros((), device=device))
    capturable = torch.device(device).type == "cuda"
    q_opt = torch.optim.Adam(list(q_params.values()), 3e-4, capturable=capturable)
    a_opt = torch.optim.Adam(actor.parameters(), 3e-4, capturable=capturable)
    t_opt = torch.optim.Adam([log_alpha], 3e-4, capturable=capturable)
    memory = DeviceReplay(random_transitions(obs_dim, action_dim), device)

    def q_values(params: Mapping[str, torch.Tensor], obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], -1)
        return torch.vmap(lambda p: torch.func.functional_call(shape, p, (x,)))(dict(params)).squeeze(-1)

    def pi(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = actor(obs).chunk(2, -1)
        log_std = -5.0 + 3.5 * (torch.tanh(log_std) + 1)
        u = mean + log_std.exp() * torch.randn_like(mean)
        a = torch.tanh(u)
        log_prob = (-0.5 * ((u - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)
                    - torch.log(1 - a.pow(2) + 1e-6)).sum(-1)
        return a, log_prob

    def critic_step(b: Mapping[str, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            next_a, next_log_prob = pi(b["next_obs"])
            chosen = target_params
            if subsample:
                rows = torch.randperm(critics, device=device)[:subsample]
                chosen = {k: v[rows] for k, v in target_params.items()}
            next_v = q_values(chosen, b["next_obs"], next_a).min(0).values - log_alpha.exp() * next_log_prob
            target = b["reward"] + 0.99 * (1 - b["terminated"]) * next_v
        q_loss = (q_values(q_params, b["obs"], b["action"]) - target).pow(2).mean(1).sum()
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(target_params.values()), list(q_params.values()), 0.005)
        return q_loss.detach()

    def actor_step(obs: torch.Tensor) -> torch.Tensor:
        a, log_prob = pi(obs)
        q = q_values({k: v.detach() for k, v in q_params.items()}, obs, a).mean(0)
        a_loss = (log_alpha.exp().detach() * log_prob - q).mean()
        t_loss = -(log_alpha.exp() * (log_prob.detach() - action_dim)).mean()
        a_opt.zero_grad()
        t_opt.zero_grad()
        (a_loss + t_loss).backward()
        a_opt.step()
        t_opt.step()
        return a_loss.detach()

    if compile:
        how = dict(mode="reduce-overhead") if capturable else {}
        critic_step, actor_step = torch.compile(critic_step, **how), torch.compile(actor_step, **how)

    def update() -> torch.Tensor:
        b = memory.sample(batch)
        critic_step(b)
        return actor_step(b["obs"])
    update.learned = [*q_params.values(), *actor.parameters(), log_alpha]  # what an update moves, for inspection
    return update


def update_flops(update: Callable[[], object]) -> int:
    """Floating-point operations of one call of `update` (torch's FlopCounterMode, eager code)."""
    with FlopCounterMode(display=False) as counter:
        update()
    return int(counter.get_total_flops())


class _CountedOps(TorchDispatchMode):
    """Records every call of an op FlopCounterMode counts (matmuls, convolutions), with its arguments."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket in flop_registry:
            self.calls.append((func, *_signature(args, kwargs)))
        return func(*args, **kwargs)


class _TensorSpec(NamedTuple):
    size: tuple
    stride: tuple
    dtype: torch.dtype
    device: torch.device


def _signature(args, kwargs) -> tuple:
    """Tensors -> their _TensorSpec, so a call can be replayed on fresh tensors of the same layout."""
    def spec(value):
        if isinstance(value, torch.Tensor):
            return _TensorSpec(tuple(value.shape), tuple(value.stride()), value.dtype, value.device)
        if isinstance(value, (list, tuple)):
            return type(value)(spec(v) for v in value)
        return value
    return spec(tuple(args)), tuple(sorted((k, spec(v)) for k, v in kwargs.items()))


def _materialize(value):
    if isinstance(value, _TensorSpec):
        # Filled through a flat tensor over the whole storage: an expanded (stride 0) layout cannot be written.
        numel = 1 + sum((n - 1) * s for n, s in zip(value.size, value.stride)) if all(value.size) else 0
        flat = torch.empty(numel, dtype=value.dtype, device=value.device)
        flat = flat.normal_() if value.dtype.is_floating_point else flat.zero_()
        return flat.as_strided(value.size, value.stride)
    if isinstance(value, (list, tuple)):
        return type(value)(_materialize(v) for v in value)
    return value


def matmul_seconds(update: Callable[[], object], device: torch.device, seconds_per_shape: float = 0.05) -> float:
    """Seconds the matmuls (and convolutions) of one call of `update` need on their own: every op
    FlopCounterMode counts is recorded (eager code; the backward's transposed operands included) and
    each distinct call (op, shapes, strides, dtype) is timed alone on fresh tensors of that layout, with
    this process's thread count. FLOPs of the update / this = the throughput the machine reaches for
    those shapes, the update's roofline."""
    with _CountedOps() as recorder:
        update()
    total = 0.0
    for (func, args, kwargs), count in Counter(recorder.calls).items():
        args, kwargs = _materialize(args), dict(_materialize(kwargs))
        total += count * _seconds_per_call(lambda: func(*args, **kwargs), device, seconds_per_shape)
    return total


def _seconds_per_call(call: Callable[[], object], device: torch.device, seconds: float) -> float:
    """Mean time of `call` run back to back for `seconds` after a few warm-up calls (CUDA synchronized)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(3):
        call()
    sync()
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        call()
        calls += 1
    sync()
    return (time.perf_counter() - started) / calls


def matmul_flops_per_s(dtype: torch.dtype, device: torch.device, members: int, seconds: float = 1.0) -> float:
    """Measured throughput of the update's dominant matmul shape (the first roofline rule, kept beside
    `matmul_seconds`'s): `members` stacked 256x256 layers on
    a batch of 256 (the ensemble's hidden layer), in `dtype`, with this process's thread count."""
    a = torch.randn(members, 256, 256, device=device, dtype=dtype)
    b = torch.randn(members, 256, 256, device=device, dtype=dtype)
    return 2 * members * 256 ** 3 / _seconds_per_call(lambda: torch.bmm(a, b), device, seconds)
