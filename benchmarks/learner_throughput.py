"""SAC learner updates per second: ours against the common single-file implementation, same run.

State-based: batch 256, 10 critics with 2 subsampled for the target, 256x256 LayerNorm MLPs.
Pixel-based: two 64x64 cameras + proprioception, batch 256, 10 critics, trainable conv
encoders with DrQ random shift.

The reference is written the way single-file SAC implementations usually are (CleanRL style):
a Python loop over nn.Sequential critics, every target critic evaluated then subsampled,
the actor's Q through critics that still collect weight gradients, nn.Tanh, eager, one conv
encoder call per camera. Ours is `robot_rl.agents.sac.SAC` as the learner runs it: the stacked
ensemble, only the subsampled target members, critics frozen for the actor step, a
sigmoid-form tanh, fused Adam, channels-last convolutions; plus the learner's
`precision: auto` (bfloat16 matmuls and convolutions where the CPU has AVX512-BF16/AMX, or on
a GPU) and `compile: true`. Eager float32 figures are printed as well, so each part's share
shows. Both run with glibc's malloc keeping freed memory (`reuse_freed_cpu_memory`, which our
SAC sets), and the contenders take turns in short windows (`rates`), so each sees the same
machine. One update = utd_ratio (1 here) critic steps + one actor and temperature step.

Against installed peers (`pip install -e '.[bench]'`; `sac_peers.py`), state-based at 2 critics
and at 10 (ours and TorchRL's REDQLoss 2 of 10, stable-baselines3 and sbx-rl min over all 10; sbx is JAX,
measured on CPU runs only, in this process, taking turns like the others): each update
samples 256 from the contender's own replay memory, then one critic, actor and temperature step
and the target update (`peers_<n>` in the JSON: each one's updates/s, version and what its update
includes; `ratio_vs_best_peer_<n>`). Among the peers, `redq_reference` is SAC written as REDQ's and
CleanRL's files write it, without the common reference's handicaps (only the subsampled target
critics evaluated, critics frozen for the actor step). PPO: one update round of our juggling PPO against rsl-rl-lib's
PPO on the same rollout and network sizes (`ppo_peers.py`; `ppo_ratio_vs_rsl_rl`).
`roofline_fraction_<n>`: the time our update's matmuls need on their own (every op FlopCounterMode counts in one eager update, same math, each distinct shape,
layout and dtype timed alone in the same run and thread count; `matmul_ms_per_update_<n>`) times our
updates/s: the share of the update's time the machine's matmul speed for those shapes accounts for.
`roofline_fraction_dominant_shape_<n>` keeps the first rule: FLOPs over the throughput of the largest
shape alone. CPUs differ (bf16 or not): ratios compare within one run.

    python benchmarks/learner_throughput.py [--quick] [--device cuda]

Last line: {"updates_per_s", "reference_updates_per_s", "ratio", "pixel_updates_per_s",
"pixel_reference_updates_per_s", "pixel_ratio", "device", ...}.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import ppo_peers
import sac_peers
import torch
import torch.nn.functional as F
from torch import nn

from robot_rl.agents.encoders import EncoderConfig
from robot_rl.agents.sac import SAC, SACConfig, native_bf16
from robot_rl.device import reuse_freed_cpu_memory

OBS_DIM, ACTION_DIM, BATCH, CRITICS, SUBSAMPLE = 33, 4, 256, 10, 2
IMAGE, PROPRIO = 64, 12


# ---- the reference: a common single-file SAC -----------------------------------------------------

def _mlp(i: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, 256), nn.LayerNorm(256), nn.Tanh(), nn.Linear(256, 256), nn.LayerNorm(256),
                         nn.Tanh(), nn.Linear(256, o))


class _ConvEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        layers, ch = [], 3
        for _ in range(4):
            layers += [nn.Conv2d(ch, 32, 3, 2, 1), nn.ReLU()]
            ch = 32
        self.net = nn.Sequential(*layers, nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.LayerNorm(64), nn.Tanh())

    def forward(self, x):
        return self.net(x)


def _random_shift(x: torch.Tensor, pad: int = 4) -> torch.Tensor:
    """DrQ-v2's RandomShiftsAug (grid_sample), the usual single-file version."""
    n, _, h, w = x.shape
    x = F.pad(x, (pad,) * 4, mode="replicate")
    eps = 1.0 / (h + 2 * pad)
    arange = torch.linspace(-1.0 + eps, 1.0 - eps, h + 2 * pad, device=x.device)[:h]
    arange = arange.unsqueeze(0).repeat(h, 1).unsqueeze(2)
    base = torch.cat([arange, arange.transpose(1, 0)], dim=2).unsqueeze(0).repeat(n, 1, 1, 1)
    shift = torch.randint(0, 2 * pad + 1, (n, 1, 1, 2), device=x.device, dtype=x.dtype) * 2.0 / (h + 2 * pad)
    return F.grid_sample(x, base + shift, padding_mode="zeros", align_corners=False)


class ReferenceSAC:
    def __init__(self, obs_dim: int, pixels: bool):
        self.pixels = pixels
        self.encoders = nn.ModuleList([_ConvEncoder(), _ConvEncoder()]) if pixels else None
        feat = 2 * 64 + PROPRIO if pixels else obs_dim
        self.qs = nn.ModuleList([_mlp(feat + ACTION_DIM, 1) for _ in range(CRITICS)])
        self.target_qs = nn.ModuleList([_mlp(feat + ACTION_DIM, 1) for _ in range(CRITICS)])
        self.target_qs.load_state_dict(self.qs.state_dict())
        self.actor = _mlp(feat, 2 * ACTION_DIM)
        self.log_alpha = torch.zeros((), requires_grad=True)
        critic_params = list(self.qs.parameters()) + (list(self.encoders.parameters()) if pixels else [])
        self.q_opt = torch.optim.Adam(critic_params, 3e-4)
        self.a_opt = torch.optim.Adam(self.actor.parameters(), 3e-4)
        self.t_opt = torch.optim.Adam([self.log_alpha], 3e-4)

    def features(self, obs):
        if not self.pixels:
            return obs
        feats = [enc(_random_shift(obs[k].permute(0, 3, 1, 2).float() / 255.0))
                 for enc, k in zip(self.encoders, ("front", "wrist"))]
        return torch.cat(feats + [obs["state"]], -1)

    def pi(self, feat):
        mean, log_std = self.actor(feat).chunk(2, -1)
        dist = torch.distributions.Normal(mean, torch.tanh(log_std).exp())
        u = dist.rsample()
        a = torch.tanh(u)
        return a, (dist.log_prob(u) - torch.log(1 - a.pow(2) + 1e-6)).sum(-1)

    def update(self, b):
        feat = self.features(b["obs"])
        with torch.no_grad():
            next_feat = self.features(b["next_obs"])
            next_a, _ = self.pi(next_feat)
            x = torch.cat([next_feat, next_a], -1)
            next_q = torch.stack([q(x).squeeze(-1) for q in self.target_qs])
            idx = torch.randperm(CRITICS)[:SUBSAMPLE]
            target = b["reward"] + 0.99 * (1 - b["terminated"]) * next_q[idx].min(0).values
        x = torch.cat([feat, b["action"]], -1)
        loss = sum(((q(x).squeeze(-1) - target) ** 2).mean() for q in self.qs)
        self.q_opt.zero_grad()
        loss.backward()
        self.q_opt.step()
        with torch.no_grad():
            for p, tp in zip(self.qs.parameters(), self.target_qs.parameters()):
                tp.mul_(0.995).add_(0.005 * p)
        feat = feat.detach()
        a, logp = self.pi(feat)
        q = torch.stack([q(torch.cat([feat, a], -1)).squeeze(-1) for q in self.qs]).mean(0)
        actor_loss = (self.log_alpha.exp().detach() * logp - q).mean()
        self.a_opt.zero_grad()
        actor_loss.backward()
        self.a_opt.step()
        t_loss = (self.log_alpha.exp() * (-logp.detach() + ACTION_DIM / 2)).mean()
        self.t_opt.zero_grad()
        t_loss.backward()
        self.t_opt.step()


# ---- measurement ---------------------------------------------------------------------------------

def make_batch(pixels: bool, device: torch.device, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)

    def obs():
        if not pixels:
            return torch.randn(BATCH, OBS_DIM, generator=g).to(device)
        return {"front": torch.randint(0, 256, (BATCH, IMAGE, IMAGE, 3), generator=g, dtype=torch.uint8).to(device),
                "wrist": torch.randint(0, 256, (BATCH, IMAGE, IMAGE, 3), generator=g, dtype=torch.uint8).to(device),
                "state": torch.randn(BATCH, PROPRIO, generator=g).to(device)}

    return {"obs": obs(), "next_obs": obs(), "action": (torch.rand(BATCH, ACTION_DIM, generator=g) * 2 - 1).to(device),
            "reward": torch.randn(BATCH, generator=g).to(device), "terminated": torch.zeros(BATCH, device=device)}


def rates(updates: dict, batch, seconds: float, device: torch.device) -> dict[str, float]:
    """Median updates per second of each contender over `seconds` each, in interleaved windows.

    Taking turns window by window (about 0.5 s each) exposes every contender to the same machine:
    back-to-back 15 s runs on this shared 2-core VM drifted 20 % between runs, which moved the
    ratio by as much. Compilation happens in the warm-up, not in a window.
    """
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    per_window = {}
    for name, update in updates.items():
        for _ in range(3):
            update(batch)
        sync()
        start = time.perf_counter()
        update(batch)
        sync()
        per_window[name] = max(1, round(0.5 / (time.perf_counter() - start)))
    measured: dict[str, list[float]] = {name: [] for name in updates}
    spent = 0.0
    while spent < seconds:
        for name, update in updates.items():
            start = time.perf_counter()
            for _ in range(per_window[name]):
                update(batch)
            sync()
            elapsed = time.perf_counter() - start
            measured[name].append(per_window[name] / elapsed)
            spent += elapsed / len(updates)
    return {name: statistics.median(values) for name, values in measured.items()}


def ours(pixels: bool, device: torch.device, precision: str, compile: bool) -> SAC:
    cfg = SACConfig(num_critics=CRITICS, critic_subsample=SUBSAMPLE, batch_size=BATCH, precision=precision,
                    compile=compile)
    encoder = EncoderConfig(cameras=("front", "wrist"), image_size=IMAGE, state_dim=PROPRIO) if pixels else None
    return SAC(OBS_DIM, ACTION_DIM, cfg, device, encoder=encoder)


PEER_INCLUDES = {
    "ours": "OffPolicyCore.update: sample 256 from ReplayBuffer, to tensors, SAC.update (critic, actor, temperature, "
            "target, their Adam steps); precision auto, torch.compile (one graph per training step)",
    "stable_baselines3": "SAC.train(gradient_steps=1): ReplayBuffer.sample(256), critic, actor, entropy coefficient, "
                         "polyak target; min over all critics",
    "torchrl": "TensorDictReplayBuffer.sample(256), SACLoss (REDQLoss 2 of 10), one backward, three Adam steps, "
               "SoftUpdate",
    "sbx": "SAC.train(gradient_steps=1) (JAX, jit): ReplayBuffer.sample(256), critic, actor, entropy coefficient, "
           "polyak target; min over all critics",
    "redq_reference": "sac_peers.redq_reference, written as REDQ/CleanRL do: numpy replay sample(256), Python loop "
                      "over ReLU critics, only the subsampled target critics evaluated, critics frozen for the actor "
                      "step, temperature step, polyak target; float32, eager",
}


def self_sampling_rates(updates: dict, seconds: float, device: torch.device) -> dict[str, float]:
    """`rates` for contenders that draw their own batches (each callable takes no argument)."""
    return rates({name: (lambda batch, f=f: f()) for name, f in updates.items()}, None, seconds, device)


def cpu_name() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


def peer_figures(device: torch.device, precision: str, seconds: float) -> dict:
    """Ours against the installed peer libraries at 2 and 10 critics, and our roofline fraction."""
    result: dict = {}
    for critics, subsample in ((2, None), (10, 2)):
        update, agent = sac_peers.ours(OBS_DIM, ACTION_DIM, critics, subsample, device, precision, True)
        contenders = {"ours": update}
        versions = {"ours": "this tree", "stable_baselines3": sac_peers.version("stable-baselines3"),
                    "torchrl": sac_peers.version("torchrl"), "sbx": sac_peers.version("sbx-rl"),
                    "redq_reference": f"torch {torch.__version__}"}
        contenders["redq_reference"] = sac_peers.redq_reference(OBS_DIM, ACTION_DIM, critics, subsample, device)
        if versions["stable_baselines3"]:
            contenders["stable_baselines3"] = sac_peers.stable_baselines3(OBS_DIM, ACTION_DIM, critics, device)
        if versions["torchrl"]:
            contenders["torchrl"] = sac_peers.torchrl(OBS_DIM, ACTION_DIM, critics, subsample, device)
        if versions["sbx"] and device.type == "cpu":  # JAX on its default device: comparable on CPU only
            contenders["sbx"] = sac_peers.sbx(OBS_DIM, ACTION_DIM, critics)
        measured = self_sampling_rates(contenders, seconds, device)
        eager, _ = sac_peers.ours(OBS_DIM, ACTION_DIM, critics, subsample, device, precision, False)
        flops = sac_peers.update_flops(eager)
        matmul_s = sac_peers.matmul_seconds(eager, device)
        dtype = torch.bfloat16 if agent.precision == "bfloat16" else torch.float32
        dominant = sac_peers.matmul_flops_per_s(dtype, device, critics)
        peers = {name: rate for name, rate in measured.items() if name != "ours"}
        result.update({
            f"peers_{critics}": {name: {"updates_per_s": round(measured[name], 2) if name in measured else None,
                                        "version": versions[name], "includes": PEER_INCLUDES[name]}
                                 for name in versions},
            f"ratio_vs_best_peer_{critics}": round(measured["ours"] / max(peers.values()), 3) if peers else None,
            f"compiled_{critics}": agent.compiled,
            f"update_gflop_{critics}": round(flops / 1e9, 4),
            f"matmul_ms_per_update_{critics}": round(matmul_s * 1e3, 3),
            f"matmul_gflop_per_s_{critics}": round(flops / matmul_s / 1e9, 1),
            f"roofline_fraction_{critics}": round(matmul_s * measured["ours"], 3),
            # The first rule (2026-11-25): every FLOP at the throughput of the largest shape alone.
            f"matmul_gflop_per_s_dominant_shape_{critics}": round(dominant / 1e9, 1),
            f"roofline_fraction_dominant_shape_{critics}": round(flops * measured["ours"] / dominant, 3)})
        print(f"{critics} critics: " + ", ".join(f"{name} {rate:.1f}/s" for name, rate in measured.items())
              + f"; ours {flops / 1e9:.3f} GFLOP/update, its matmuls alone {matmul_s * 1e3:.2f} ms "
              f"({flops / matmul_s / 1e9:.0f} GFLOP/s) -> roofline {result[f'roofline_fraction_{critics}']:.2f} "
              f"(dominant shape {dominant / 1e9:.0f} GFLOP/s: "
              f"{result[f'roofline_fraction_dominant_shape_{critics}']:.2f})", flush=True)
    return result


def ppo_figures(device: torch.device, seconds: float) -> dict:
    """Our juggling PPO's update round against rsl-rl-lib's PPO (`ppo_peers.py`), interleaved."""
    version = sac_peers.version("rsl-rl-lib")
    update, ppo = ppo_peers.ours(2048, device)
    contenders = {"ours": update}
    if version:
        contenders["rsl_rl"] = ppo_peers.rsl_rl(2048, device)
    measured = self_sampling_rates(contenders, seconds, device)
    print("PPO update rounds: " + ", ".join(f"{name} {rate:.2f}/s" for name, rate in measured.items()), flush=True)
    return {"ppo_rounds_per_s": round(measured["ours"], 3),
            "rsl_rl_ppo_rounds_per_s": round(measured["rsl_rl"], 3) if version else None,
            "ppo_ratio_vs_rsl_rl": round(measured["ours"] / measured["rsl_rl"], 3) if version else None,
            "ppo_compiled": ppo.compiled, "rsl_rl_version": version, "ppo_round": ppo_peers.describe()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short timing windows (same measurements)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(max(1, torch.get_num_threads()))
        # Our SAC sets this when it is built; set here first so the reference runs under the same allocator.
        reuse_freed_cpu_memory()
    seconds = 4.0 if args.quick else 15.0
    precision = "bfloat16" if native_bf16(device) else "float32"  # what precision: auto picks
    torch.manual_seed(0)
    result: dict = {"device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
                    "precision": precision}
    for pixels in (False, True):
        prefix = "pixel_" if pixels else ""
        window = seconds * (2 if pixels else 1)
        batch = make_batch(pixels, device)
        reference = ReferenceSAC(OBS_DIM, pixels)
        for module in (reference.qs, reference.target_qs, reference.actor, reference.encoders):
            if module is not None:
                module.to(device)
        reference.log_alpha = reference.log_alpha.detach().to(device).requires_grad_(True)
        reference.t_opt = torch.optim.Adam([reference.log_alpha], 3e-4)
        best = ours(pixels, device, precision, True)
        measured = rates({"reference": reference.update, "eager": ours(pixels, device, "float32", False).update,
                          "best": best.update}, batch, window, device)
        ref_rate, eager_rate, best_rate = measured["reference"], measured["eager"], measured["best"]
        result.update({f"{prefix}updates_per_s": round(best_rate, 2),
                       f"{prefix}reference_updates_per_s": round(ref_rate, 2),
                       f"{prefix}ratio": round(best_rate / ref_rate, 3),
                       f"{prefix}eager_float32_updates_per_s": round(eager_rate, 2),
                       # False: torch.compile failed and the figure is eager (the log says why)
                       f"{prefix}compiled": best.compiled})
        print(f"{'pixel' if pixels else 'state'}: reference {ref_rate:.1f}/s, ours eager fp32 {eager_rate:.1f}/s, "
              f"ours {precision}+{'compile' if best.compiled else 'EAGER (compile failed)'} {best_rate:.1f}/s -> "
              f"{best_rate / ref_rate:.2f}x", flush=True)
    result.update(peer_figures(device, precision, seconds))
    result.update(ppo_figures(device, 2 * seconds))
    result["cpu"] = cpu_name()
    assert all(math.isfinite(v) for v in result.values() if isinstance(v, float))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
