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

Against the peers (`sac_peers.py`), state-based at 2 critics and at 10 (ours, TorchRL's REDQLoss and the two
references 2 of 10, stable-baselines3 and sbx-rl min over all 10), in this process, taking turns: each update
samples 256 from the contender's own replay memory, then one critic, actor and temperature step and the target
update (`peers_<n>`: each one's updates/s, version, what its update includes, and `error` when it could not
run; `updates_per_s_<n>`: ours). On CUDA ours keeps its replay memory as device tensors sampled on the device
and never reads its metrics back (`ours_host_syncs_<n>` lists any host sync one update makes), sbx runs on
the card through JAX, and `leanrl_reference` is SAC as LeanRL compiles CleanRL's (CUDA graphs). Among the
peers, `redq_reference` is SAC written as REDQ's and CleanRL's files write it, without the common reference's
handicaps (only the subsampled target critics evaluated, critics frozen for the actor step).
`ratio_vs_best_peer_<n>` only when every peer expected on the device ran (sac_peers.REQUIRED_PEERS: on CPU
stable-baselines3, TorchRL, sbx-rl and both references; on CUDA the same but TorchRL), else null, with
`missing_peers_<n>` saying why each is missing and the pip line that installs it;
`ratio_vs_present_peers_<n>` is against whichever ran. PPO: one update round of our juggling PPO against
rsl-rl-lib's PPO on the same rollout and network sizes (`ppo_peers.py`; `ppo_ratio_vs_rsl_rl`).
`roofline_fraction_<n>`: the time our update's matmuls need on their own (every op FlopCounterMode counts in one
eager update, same math, each distinct shape, layout and dtype timed alone in the same run and thread count;
`matmul_ms_per_update_<n>`) times our updates/s: the share of the update's time the machine's matmul speed for
those shapes accounts for. `roofline_fraction_dominant_shape_<n>` keeps the first rule: FLOPs over the
throughput of the largest shape alone. CPUs differ (bf16 or not): ratios compare within one run.

A contender that fails (to build, compile or run) is reported with `{"error": ...}` and the rest go on;
every contender's figures are printed as they come and `--out` is rewritten after every part, so a run cut
short keeps what it measured. `cudagraph_skips`: graphs torch.compile ran without CUDA graphs (its log says why).

    python benchmarks/learner_throughput.py [--quick | --seconds S] [--device cuda] [--no-compile] [--no-ppo]
        [--out PATH]

`--no-compile` runs the same code paths eagerly (a CPU dry run: compiling is what takes the time there).
Last line: {"updates_per_s", "reference_updates_per_s", "ratio", "pixel_updates_per_s",
"pixel_reference_updates_per_s", "pixel_ratio", "updates_per_s_2", "ratio_vs_best_peer_2", "updates_per_s_10",
"ratio_vs_best_peer_10", "device", "torch", "wall_s", ...}.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import warnings
from pathlib import Path
from typing import Callable, TypeVar

import sac_peers  # first: it keeps JAX from preallocating the card, before anything imports JAX
import ppo_peers
import torch
import torch.nn.functional as F
from torch import nn
from torch._dynamo.utils import counters

from robot_rl.agents.encoders import EncoderConfig
from robot_rl.agents.sac import SAC, SACConfig, native_bf16
from robot_rl.device import cpu_model, reuse_freed_cpu_memory

OBS_DIM, ACTION_DIM, BATCH, CRITICS, SUBSAMPLE = 33, 4, 256, 10, 2
IMAGE, PROPRIO = 64, 12
T = TypeVar("T")


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
    def __init__(self, obs_dim: int, pixels: bool, device: torch.device):
        self.pixels = pixels
        self.encoders = nn.ModuleList([_ConvEncoder(), _ConvEncoder()]) if pixels else None
        feat = 2 * 64 + PROPRIO if pixels else obs_dim
        self.qs = nn.ModuleList([_mlp(feat + ACTION_DIM, 1) for _ in range(CRITICS)])
        self.target_qs = nn.ModuleList([_mlp(feat + ACTION_DIM, 1) for _ in range(CRITICS)])
        self.target_qs.load_state_dict(self.qs.state_dict())
        self.actor = _mlp(feat, 2 * ACTION_DIM)
        for module in (self.qs, self.target_qs, self.actor, self.encoders):
            if module is not None:
                module.to(device)
        self.log_alpha = torch.zeros((), device=device, requires_grad=True)
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


def _cudagraph_skips() -> int:
    """Graphs torch.compile ran without CUDA graphs so far in this process (inductor logs each one's reason)."""
    return int(counters["inductor"]["cudagraph_skips"])


def rates(updates: dict[str, Callable], batch, seconds: float, device: torch.device,
          label: str = "") -> tuple[dict[str, float], dict[str, str]]:
    """Median updates per second of each contender over `seconds` each, in interleaved windows, and the first line
    of the error of each contender that raised (dropped from then on; the others go on).

    Taking turns window by window (0.5 s each, shorter for a shorter `seconds`) exposes every contender to the
    same machine: back-to-back 15 s runs on this shared 2-core VM drifted 20 % between runs, which moved the
    ratio by as much. Compilation happens in the warm-up, not in a window. Each contender's progress is printed
    as it comes, so a run cut short still shows what it measured.
    """
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    window = min(0.5, seconds)
    per_window: dict[str, int] = {}
    errors: dict[str, str] = {}
    for name, update in updates.items():
        started, skips = time.perf_counter(), _cudagraph_skips()
        try:
            for _ in range(3):
                update(batch)
            sync()
            start = time.perf_counter()
            update(batch)
            sync()
        except Exception as exc:  # noqa: BLE001 - one contender's failure must not end the benchmark
            errors[name] = sac_peers.first_line(exc)
            print(f"{label}{name}: FAILED in its warm-up: {errors[name]}", flush=True)
            continue
        once = time.perf_counter() - start
        per_window[name] = max(1, round(window / once))
        graphs = f", {_cudagraph_skips() - skips} graphs without CUDA graphs" if device.type == "cuda" else ""
        print(f"{label}{name}: warm-up (compiling included) {time.perf_counter() - started:.1f} s, "
              f"~{1 / once:.3g}/s{graphs}", flush=True)
    measured: dict[str, list[float]] = {name: [] for name in per_window}
    spent = 0.0
    while spent < seconds and measured:
        for name in list(measured):
            start = time.perf_counter()
            try:
                for _ in range(per_window[name]):
                    updates[name](batch)
                sync()
            except Exception as exc:  # noqa: BLE001 - as in the warm-up
                errors[name] = sac_peers.first_line(exc)
                print(f"{label}{name}: FAILED while measured: {errors[name]}", flush=True)
                del measured[name]
                continue
            elapsed = time.perf_counter() - start
            measured[name].append(per_window[name] / elapsed)
            spent += elapsed / len(measured)
    result = {name: statistics.median(values) for name, values in measured.items()}
    for name, rate in result.items():
        print(f"{label}{name}: {rate:.1f} updates/s", flush=True)
    return result, errors


def attempt(errors: dict[str, str], name: str, make: Callable[[], T]) -> T | None:
    """`make()`, or None with its error's first line in `errors[name]` (a contender that cannot be built)."""
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - one contender's failure must not end the benchmark
        errors[name] = sac_peers.first_line(exc)
        print(f"{name}: FAILED to build: {errors[name]}", flush=True)
        return None


def ours(pixels: bool, device: torch.device, precision: str, compile: bool) -> SAC:
    cfg = SACConfig(num_critics=CRITICS, critic_subsample=SUBSAMPLE, batch_size=BATCH, precision=precision,
                    compile=compile)
    encoder = EncoderConfig(cameras=("front", "wrist"), image_size=IMAGE, state_dim=PROPRIO) if pixels else None
    return SAC(OBS_DIM, ACTION_DIM, cfg, device, encoder=encoder)


def versus_reference(pixels: bool, device: torch.device, precision: str, seconds: float, compile: bool) -> dict:
    """Ours (eager float32, and as the learner runs it) against the common reference on one fixed batch."""
    prefix = "pixel_" if pixels else ""
    batch = make_batch(pixels, device)
    errors: dict[str, str] = {}
    reference = attempt(errors, "reference", lambda: ReferenceSAC(OBS_DIM, pixels, device))
    eager = attempt(errors, "eager", lambda: ours(pixels, device, "float32", False))
    best = attempt(errors, "best", lambda: ours(pixels, device, precision, compile))
    # update_on_device: no metrics read back, so nothing in the loop waits for a GPU (the reference reads none).
    contenders = {name: update for name, update in (("reference", reference and reference.update),
                                                    ("eager", eager and eager.update_on_device),
                                                    ("best", best and best.update_on_device)) if update}
    measured, failed = rates(contenders, batch, seconds, device, f"{'pixel' if pixels else 'state'} vs reference: ")
    errors.update(failed)
    rate = {name: round(measured[name], 2) if name in measured else None for name in ("reference", "eager", "best")}
    ratio = measured["best"] / measured["reference"] if {"best", "reference"} <= set(measured) else None
    return {f"{prefix}updates_per_s": rate["best"], f"{prefix}reference_updates_per_s": rate["reference"],
            f"{prefix}ratio": round(ratio, 3) if ratio else None,
            f"{prefix}eager_float32_updates_per_s": rate["eager"],
            # False: torch.compile was off or failed and the figure is eager (the log says why)
            f"{prefix}compiled": best.compiled if best else None, f"{prefix}vs_reference_errors": errors}


PEER_INCLUDES = {
    "ours": "on CPU OffPolicyCore.update: sample 256 from ReplayBuffer (numpy), to tensors, SAC.update; on CUDA "
            "sac_peers.DeviceReplay.sample(256) (device tensors, torch.randint on the device), "
            "SAC.update_on_device (no host sync); both: critic, actor, temperature, target and their Adam steps, "
            "precision auto, torch.compile (one graph per training step; mode reduce-overhead = CUDA graphs on CUDA)",
    "stable_baselines3": "SAC.train(gradient_steps=1): ReplayBuffer.sample(256), critic, actor, entropy coefficient, "
                         "polyak target; min over all critics",
    "torchrl": "TensorDictReplayBuffer.sample(256), SACLoss (REDQLoss 2 of 10), one backward, three Adam steps, "
               "SoftUpdate",
    "sbx": "SAC.train(gradient_steps=1) (JAX, jit, on JAX's device of the run's kind): ReplayBuffer.sample(256), "
           "critic, actor, entropy coefficient, polyak target; min over all critics",
    "redq_reference": "sac_peers.redq_reference, written as REDQ/CleanRL do: numpy replay sample(256), Python loop "
                      "over ReLU critics, only the subsampled target critics evaluated, critics frozen for the actor "
                      "step, temperature step, polyak target; float32, eager",
    "leanrl_reference": "sac_peers.leanrl_reference, LeanRL's way with CleanRL's SAC (our own code): replay as device "
                        "tensors sampled on the device, critics stacked and run by vmap(functional_call), critic "
                        "step and actor+temperature step each torch.compile'd, mode reduce-overhead (CUDA graphs) "
                        "on CUDA where LeanRL uses tensordict's CudaGraphModule (no tensordict on the GPU machine); "
                        "capturable Adam; float32",
}


def peer_versions(device: torch.device, compile: bool) -> dict[str, str | None]:
    how = ("torch.compile reduce-overhead" if device.type == "cuda" else "torch.compile") if compile else "eager"
    return {"ours": "this tree", "stable_baselines3": sac_peers.version("stable-baselines3"),
            "torchrl": sac_peers.version("torchrl"), "sbx": sac_peers.sbx_version(device),
            "redq_reference": f"torch {torch.__version__}", "leanrl_reference": f"torch {torch.__version__}, {how}"}


def host_syncs(update: Callable[[], object]) -> list[str]:
    """What one call of `update` synchronizes the host with the GPU for (CUDA's sync debug mode warns at each)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            update()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [sac_peers.first_line(Exception(str(w.message))) for w in caught if "synchroniz" in str(w.message)]


def roofline(critics: int, subsample: int | None, device: torch.device, precision: str, seconds: float,
             ours_rate: float, dtype: torch.dtype) -> dict:
    """Our update's FLOPs, its matmuls' own time and the share of our update's time they account for."""
    eager, _ = sac_peers.ours(OBS_DIM, ACTION_DIM, critics, subsample, device, precision, False)
    flops = sac_peers.update_flops(eager)
    matmul_s = sac_peers.matmul_seconds(eager, device, seconds_per_shape=min(0.05, seconds / 20))
    dominant = sac_peers.matmul_flops_per_s(dtype, device, critics, seconds=min(1.0, seconds))
    print(f"{critics} critics: ours {flops / 1e9:.3f} GFLOP/update, its matmuls alone {matmul_s * 1e3:.2f} ms "
          f"({flops / matmul_s / 1e9:.0f} GFLOP/s) -> roofline {matmul_s * ours_rate:.2f} "
          f"(dominant shape {dominant / 1e9:.0f} GFLOP/s: {flops * ours_rate / dominant:.2f})", flush=True)
    return {f"update_gflop_{critics}": round(flops / 1e9, 4),
            f"matmul_ms_per_update_{critics}": round(matmul_s * 1e3, 3),
            f"matmul_gflop_per_s_{critics}": round(flops / matmul_s / 1e9, 1),
            f"roofline_fraction_{critics}": round(matmul_s * ours_rate, 3),
            # The first rule (2026-11-25): every FLOP at the throughput of the largest shape alone.
            f"matmul_gflop_per_s_dominant_shape_{critics}": round(dominant / 1e9, 1),
            f"roofline_fraction_dominant_shape_{critics}": round(flops * ours_rate / dominant, 3)}


def peer_figures(device: torch.device, precision: str, seconds: float, compile: bool) -> dict:
    """Ours against the peers at 2 and 10 critics, each sampling its own replay memory; our roofline fraction."""
    result: dict = {}
    why_missing = {name: why for name in sac_peers.PEER_PACKAGES if (why := sac_peers.import_error(name))}
    for name, why in why_missing.items():
        print(f"peer {name} missing ({why}): {sac_peers.install_line(sac_peers.PEER_PACKAGES[name][0])}", flush=True)
    versions = peer_versions(device, compile)
    for critics, subsample in ((2, None), (10, 2)):
        errors = dict(why_missing)
        built = attempt(errors, "ours", lambda: sac_peers.ours(OBS_DIM, ACTION_DIM, critics, subsample, device,
                                                                precision, compile))
        contenders = {"ours": built[0]} if built else {}
        makers = {"redq_reference": lambda: sac_peers.redq_reference(OBS_DIM, ACTION_DIM, critics, subsample, device),
                  "leanrl_reference": lambda: sac_peers.leanrl_reference(OBS_DIM, ACTION_DIM, critics, subsample,
                                                                         device, compile),
                  "stable_baselines3": lambda: sac_peers.stable_baselines3(OBS_DIM, ACTION_DIM, critics, device),
                  "torchrl": lambda: sac_peers.torchrl(OBS_DIM, ACTION_DIM, critics, subsample, device),
                  "sbx": lambda: sac_peers.sbx(OBS_DIM, ACTION_DIM, critics, device)}
        for name, make in makers.items():
            if name not in errors and (update := attempt(errors, name, make)) is not None:
                contenders[name] = update
        measured, failed = rates({name: (lambda batch, f=f: f()) for name, f in contenders.items()}, None, seconds,
                                 device, f"{critics} critics: ")
        errors.update(failed)
        verdict = sac_peers.peer_ratios(measured.get("ours"), {n: r for n, r in measured.items() if n != "ours"},
                                        {n: e for n, e in errors.items() if n != "ours"}, device.type)
        result.update({
            f"updates_per_s_{critics}": round(measured["ours"], 2) if "ours" in measured else None,
            f"peers_{critics}": {name: {"updates_per_s": round(measured[name], 2) if name in measured else None,
                                        "version": versions[name], "includes": PEER_INCLUDES[name],
                                        **({"error": errors[name]} if name in errors else {})}
                                 for name in ("ours", *makers)},
            f"ratio_vs_best_peer_{critics}": verdict["ratio_vs_best_peer"],
            f"ratio_vs_present_peers_{critics}": verdict["ratio_vs_present_peers"],
            f"missing_peers_{critics}": verdict["missing_peers"],
            f"compiled_{critics}": built[1].compiled if built else None})
        print(f"{critics} critics: ratio_vs_best_peer {verdict['ratio_vs_best_peer']}, ratio_vs_present_peers "
              f"{verdict['ratio_vs_present_peers']}, missing {sorted(verdict['missing_peers'])}", flush=True)
        if "ours" not in measured:
            continue
        if device.type == "cuda":
            result[f"ours_host_syncs_{critics}"] = host_syncs(contenders["ours"])
        dtype = torch.bfloat16 if built[1].precision == "bfloat16" else torch.float32
        roof_errors: dict[str, str] = {}
        result.update(attempt(roof_errors, "roofline", lambda: roofline(critics, subsample, device, precision, seconds,
                                                                        measured["ours"], dtype))
                      or {f"roofline_error_{critics}": roof_errors["roofline"]})
    return result


def ppo_figures(device: torch.device, seconds: float) -> dict:
    """Our juggling PPO's update round against rsl-rl-lib's PPO (`ppo_peers.py`), interleaved."""
    version = sac_peers.version("rsl-rl-lib")
    update, ppo = ppo_peers.ours(2048, device)
    contenders = {"ours": update}
    if version:
        contenders["rsl_rl"] = ppo_peers.rsl_rl(2048, device)
    measured, errors = rates({name: (lambda batch, f=f: f()) for name, f in contenders.items()}, None, seconds,
                             device, "PPO update rounds: ")
    pair = {"ours", "rsl_rl"} <= set(measured)
    return {"ppo_rounds_per_s": round(measured["ours"], 3) if "ours" in measured else None,
            "rsl_rl_ppo_rounds_per_s": round(measured["rsl_rl"], 3) if "rsl_rl" in measured else None,
            "ppo_ratio_vs_rsl_rl": round(measured["ours"] / measured["rsl_rl"], 3) if pair else None,
            "ppo_compiled": ppo.compiled, "rsl_rl_version": version, "ppo_round": ppo_peers.describe(),
            "ppo_errors": errors}


def finite(result: dict) -> dict:
    """`result` with every non-finite float (a diverged contender) as None, named under `non_finite`."""
    bad = [k for k, v in result.items() if isinstance(v, float) and not math.isfinite(v)]
    return {**{k: None if k in bad else v for k, v in result.items()}, **({"non_finite": bad} if bad else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 s timing windows instead of 15 (same measurements)")
    parser.add_argument("--seconds", type=float, help="timing per contender and comparison (overrides --quick)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--no-compile", action="store_true",
                        help="ours and leanrl_reference eager: the same code paths without compiling (CPU dry runs)")
    parser.add_argument("--no-ppo", action="store_true", help="skip the PPO comparison")
    parser.add_argument("--out", type=Path, help="also write the JSON here (rewritten after every part)")
    args = parser.parse_args()
    started = time.perf_counter()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(max(1, torch.get_num_threads()))
        # Our SAC sets this when it is built; set here first so the reference runs under the same allocator.
        reuse_freed_cpu_memory()
    seconds = args.seconds if args.seconds is not None else 4.0 if args.quick else 15.0
    compile = not args.no_compile
    precision = "bfloat16" if native_bf16(device) else "float32"  # what precision: auto picks
    torch.manual_seed(0)
    result: dict = {"device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
                    "device_type": device.type, "torch": torch.__version__, "cpu": cpu_model(), "precision": precision,
                    "compile": compile, "seconds": seconds}

    def emit() -> None:
        result.update(wall_s=round(time.perf_counter() - started, 1), cudagraph_skips=_cudagraph_skips())
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(finite(result), indent=1))

    for pixels in (False, True):
        result.update(versus_reference(pixels, device, precision, seconds * (2 if pixels else 1), compile))
        emit()
    result.update(peer_figures(device, precision, seconds, compile))
    emit()
    if args.no_ppo:
        result["ppo"] = "skipped (--no-ppo)"
    else:
        ppo_errors: dict[str, str] = {}
        result.update(attempt(ppo_errors, "ppo", lambda: ppo_figures(device, 2 * seconds))
                      or {"ppo_error": ppo_errors["ppo"]})
    emit()
    print(json.dumps(finite(result)))


if __name__ == "__main__":
    main()
