"""Train, evaluate and export the quadrotor juggling policy (JuggleRL on our stack).

    robot-rl juggle train --out policies/quad_juggle     # PPO in the vectorized randomized sim
    robot-rl juggle eval --policy policies/quad_juggle   # the benchmark's trials

Training runs PPO (:mod:`robot_rl.agents.ppo`) through the generic on-policy runner on
:class:`~robot_rl.robots.quad.vec_env.QuadJuggleVecEnv`; every ``eval_every`` iterations the
current policy is evaluated on long trials and the best one is exported (weights + card with the
training config and the evaluation results), so a run stopped by its time budget leaves its best policy.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from robot_rl.config_fields import setting
from robot_rl.robots.quad.juggling import JuggleConfig
from robot_rl.robots.quad.physics import RolloutPhysics
from robot_rl.robots.quad.vec_env import DEFAULT_RANDOMIZATION, JuggleCore

__all__ = ["JuggleTrainConfig", "TrialResult", "check_split", "evaluate_policy", "train_juggling"]


def check_split(split: str, randomization: str | None = str(DEFAULT_RANDOMIZATION)) -> None:
    """ValueError naming the splits there are when `randomization` has no split (or shift) `split`."""
    from robot_rl.envs.randomization import Randomization

    if randomization is not None:
        Randomization.load(randomization).check_split(split)


def _juggle_ppo_defaults():
    from robot_rl.agents.ppo import PPOConfig

    # JuggleRL: gamma 0.995, lambda 0.95, clip 0.1, entropy 0, 4 epochs; smaller nets and batches
    # fit two CPU cores (3 x 128 LayerNorm MLPs; 2048 envs x 24 steps per update). Compiled losses:
    # 1.3x per update round on CPU (benchmarks/learner_throughput.py), ~10 s of compiling once.
    return PPOConfig(num_steps_per_env=24, num_learning_epochs=4, num_mini_batches=4, clip_param=0.2,
                     gamma=0.99, lam=0.95, learning_rate=5e-4, entropy_coef=0.0, init_noise_std=0.5, compile=True)


@dataclass
class JuggleTrainConfig:
    """A juggling training run."""

    num_envs: int = setting(2048, "Quadrotors simulated in parallel.", low=1, high=1_000_000)
    """Quadrotors simulated in parallel."""
    iterations: int = 1500
    """PPO iterations (each num_envs x ppo.num_steps_per_env environment steps)."""
    time_budget_s: float = 0.0
    """Stop after this much wall-clock time [s] (0: no limit)."""
    seed: int = setting(0, "Seed of the simulation and the networks.", low=0, high=2**31 - 1)
    device: str = setting("auto", "Torch device (auto: CUDA when present).")
    """Torch device of the learner (auto: CUDA when present)."""
    physics: str = "auto"
    """Simulation back end (robot_rl.robots.quad.vec_env.PHYSICS_BACKENDS; auto: on the learner's GPU
    MuJoCo MJX when installed (the whole env on the device), else MuJoCo Warp when installed, else
    mujoco.rollout on CPU threads)."""
    eval_every: int = 50
    """Evaluate (and export if best) every this many iterations."""
    eval_trials: int = 10
    eval_max_s: float = 60.0
    """Simulated length limit of the evaluation trials during training [s] (the benchmark uses 600)."""
    randomization: str = setting(str(DEFAULT_RANDOMIZATION), "Randomization file of the training simulation.")
    hard_fraction: float = 0.0
    """Share of training plants drawn from the randomization's ``train_hard`` split (every parameter
    at the hard end of its training range at once) instead of ``train``; 0: ``train`` only."""
    split: str = "train"
    """Randomization split training draws its plants from, and evaluates on while training. Another
    one (``heldout``) trains an oracle for it: the most a policy trained on ``train`` could reach there."""
    overrides: dict = field(default_factory=dict)
    """Plant parameters fixed in every training and evaluation draw (names as in the randomization)."""
    task: JuggleConfig = field(default_factory=JuggleConfig)
    ppo: Any = field(default_factory=_juggle_ppo_defaults)


@dataclass
class TrialResult:
    hits: int
    duration_s: float
    ended_by: str
    """ball_lost, crash, non_finite or time_limit."""
    mean_apex_height: float
    """Mean apex of the ball above the home racket surface [m]."""
    mean_apex_above_contact: float
    """Mean apex of the ball above the racket surface where it was hit [m] (JuggleRL's measure)."""
    mean_racket_speed_at_hit: float = 0.0
    """Mean speed of the racket along its normal at the counted hits [m/s] (0 without hits)."""


def evaluate_policy(policy: Callable[[np.ndarray], np.ndarray], trials: int = 10, max_s: float = 600.0,
                    split: str = "eval", overrides: Mapping[str, Any] | None = None, seed: int = 1000,
                    randomization: str | None = str(DEFAULT_RANDOMIZATION), config: JuggleConfig | None = None,
                    nthread: int | None = None) -> list[TrialResult]:
    """``trials`` juggling trials in parallel (each its own plant draw of ``split``), each until the
    ball drops, the quadrotor crashes or ``max_s`` of simulated time; ``policy`` maps (N, OBS_DIM)
    float32 observations to (N, 4) actions, or is a deployed policy whose ``stream(N)`` does (a policy
    with memory keeps each trial's history there)."""
    act = policy.stream(trials) if hasattr(policy, "stream") else policy
    cfg = dataclasses.replace(config if config is not None else JuggleConfig(), max_episode_s=max_s)
    core = JuggleCore(RolloutPhysics(trials, nthread=nthread, model_variants=trials), cfg, randomization, split,
                      overrides, seed, auto_reset=False)
    try:
        core.reset()
        active = np.ones(trials, dtype=bool)
        results: list[TrialResult | None] = [None] * trials
        while active.any():
            obs, _ = core.observations()
            actions = np.asarray(act(obs), dtype=np.float64)
            # finished trials keep hovering in place; their results are already recorded
            _, terminated, truncated, info = core.step(actions)
            for i in info["ended"]:
                if not active[i]:
                    continue
                active[i] = False
                t, ev = core.task, info["events"]
                reason = next((r for r in ("ball_lost", "crash", "non_finite") if ev[r][i]), "time_limit")
                results[i] = TrialResult(int(t.hits[i]), float(t.steps[i] / cfg.policy_hz), reason,
                                         float(t.apex_sum[i] / max(t.apexes[i], 1)),
                                         float(t.apex_above_contact_sum[i] / max(t.apexes[i], 1)),
                                         float(t.racket_speed_sum[i] / max(t.hits[i], 1)))
            if not active.all():
                # keep the finished ones from ending again: restart them (their results are kept)
                done = np.flatnonzero(~active & (terminated | truncated))
                core.reset(done)
                if hasattr(act, "reset"):
                    act.reset(done)
        return [r for r in results if r is not None]
    finally:
        core.physics.close()


def summarize(results: list[TrialResult]) -> dict[str, Any]:
    hits = [r.hits for r in results]
    durations = [r.duration_s for r in results]
    return {"trials": len(results), "mean_hits": float(np.mean(hits)), "max_hits": int(np.max(hits)),
            "min_hits": int(np.min(hits)), "hits": hits,
            "mean_duration_s": float(np.mean(durations)),
            "hits_per_min": float(60.0 * np.sum(hits) / max(np.sum(durations), 1e-9)),
            "ended_by": [r.ended_by for r in results],
            "mean_apex_height_m": float(np.mean([r.mean_apex_height for r in results])),
            "mean_apex_above_contact_m": float(np.mean([r.mean_apex_above_contact for r in results])),
            # weighted by hits: the racket speed the hits that happened needed
            "mean_racket_speed_at_hit_m_s": float(np.sum([r.mean_racket_speed_at_hit * r.hits for r in results])
                                                  / max(np.sum(hits), 1))}


def train_juggling(cfg: JuggleTrainConfig, out_dir: str | Path, run_dir: str | Path | None = None,
                   log: Callable[[str], None] = print, stop: threading.Event | None = None) -> dict[str, Any]:
    """Train from scratch; exports the best evaluated policy to ``out_dir``. Returns the card. Once ``stop`` is
    set, training ends at its next network call (``robot_rl.training.ppo_runner.Stopped``)."""
    import torch

    from robot_rl.agents.memory import HistoryVecEnv
    from robot_rl.agents.ppo import DeployedPolicy, deployable, export_policy
    from robot_rl.device import resolve_device
    from robot_rl.robots.quad.backends import make_vec_env
    from robot_rl.training.ppo_runner import OnPolicyRunner

    check_split(cfg.split, cfg.randomization)  # before anything is written
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    out_dir = Path(out_dir)
    run_dir = Path(run_dir) if run_dir is not None else out_dir.parent / f"{out_dir.name}-run"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = make_vec_env(cfg.num_envs, device=device, config=cfg.task, randomization=cfg.randomization,
                       seed=cfg.seed, physics=cfg.physics, hard_fraction=cfg.hard_fraction, split=cfg.split,
                       overrides=cfg.overrides)
    if cfg.ppo.history_steps > 1:
        env = HistoryVecEnv(env, cfg.ppo.history_steps)

    def progress(stats: dict[str, float]) -> None:
        if stats["iteration"] % 10 == 0:
            log(f"[juggle] iteration {stats['iteration']}  {json.dumps(_short(stats))}")

    runner = OnPolicyRunner(env, cfg.ppo, log_dir=str(run_dir / "tensorboard"), device=device, seed=cfg.seed,
                            log_fn=progress, stop=stop)
    started = time.monotonic()
    best: dict[str, Any] | None = None
    history = []
    try:
        for start in range(0, cfg.iterations, cfg.eval_every):
            stats = runner.learn(min(cfg.eval_every, cfg.iterations - start))
            history.extend(stats)
            last = stats[-1]
            actor_critic = runner.alg.actor_critic
            policy = DeployedPolicy.from_tensors(*deployable(actor_critic, {}), str(device), "the training policy")
            results = evaluate_policy(policy, cfg.eval_trials, cfg.eval_max_s, split=cfg.split, seed=cfg.seed + 1,
                                      randomization=cfg.randomization, config=cfg.task, overrides=cfg.overrides)
            summary = summarize(results)
            elapsed = time.monotonic() - started
            log(f"[juggle] iteration {start + len(stats)}  env steps {runner.total_env_steps}  "
                f"{elapsed / 60:.1f} min  eval mean hits {summary['mean_hits']:.1f} (max {summary['max_hits']}, "
                f"{cfg.eval_max_s:.0f} s trials)  train {json.dumps(_short(last))}")
            runner.save(str(run_dir / "checkpoint.pt"))
            if best is None or summary["mean_hits"] >= best["evaluation_during_training"]["mean_hits"]:
                best = {
                    "task": "quad_juggle",
                    "algorithm": "PPO (robot_rl.agents.ppo), asymmetric critic",
                    "observation": "robot_rl.robots.quad.juggling.OBS_DIM policy observation",
                    "action": "[-1, 1]^4 -> robot_rl.robots.quad.control.ctbr_from_action",
                    "policy_hz": cfg.task.policy_hz,
                    "iteration": start + len(stats),
                    "env_steps": runner.total_env_steps,
                    "wall_clock_s": round(elapsed, 1),
                    "device": str(device),
                    "train_config": _jsonable(dataclasses.asdict(cfg)),
                    "evaluation_during_training": summary,
                }
                export_policy(actor_critic, out_dir, best)
            if cfg.time_budget_s and elapsed > cfg.time_budget_s:
                log(f"[juggle] time budget {cfg.time_budget_s:.0f} s reached")
                break
    finally:
        env.close()
    (run_dir / "history.json").write_text(json.dumps(_jsonable(history)))
    return best or {}


def _short(stats: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("mean_return", "mean_length", "steps_per_s", "collection_s", "learning_s", "action_std", "kl",
            "Episode/hits", "Episode/length_s", "Episode/apex_height", "Episode/ball_lost", "Episode/crash")
    return {k: round(float(stats[k]), 3) for k in keys if k in stats}


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
