"""FastRLAP online: SAC/RLPD on a frozen encoder's features while the car practises on its own.

One process, no ROS (the car nodes run the same policy format). Read top to bottom:

1. The encoder comes from an IQL-pretrained frame-stack policy (`robot-rl car pretrain`), frozen,
   and its actor starts the online actor (FastRLAP loads the pretrained actor, not the critic).
   Without pretraining, an encoder of the same architecture keeps its random initial weights.
2. Each step the newest camera frame is encoded once; the last K embeddings plus the state
   are the observation the actor sees and the replay memory stores (features, never frames).
3. SAC with FastRLAP's settings (`fastrlap_sac`): 10 critics, min over 2, UTD 8, batch 512,
   actions within +-0.2 of the previous one in the targets too, learning after 1024 steps.
4. Crashes terminate, being stuck truncates, and the env backs out and drives on from where it
   is (`CarRaceEnv`'s autonomous practice); lap times are read off the env's lap timer.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from robot_rl.agents.encoders import EncoderConfig, ImageEncoder
from robot_rl.agents.frame_stack_policy import (
    FeatureStack,
    FrameStackPolicy,
    load_frame_stack_policy,
    save_frame_stack_policy,
)
from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.data.replay import ReplayBuffer
from robot_rl.device import resolve_device
from robot_rl.robots.car.sim import STATE_DIM, CarRaceEnv
from robot_rl.training.off_policy import OffPolicyCore
from robot_rl.transport.layout import transition_layout

__all__ = ["CarTrainConfig", "CarTrainer", "fastrlap_sac", "timed_laps", "lap_time_median", "lap_time_ratio"]

DEFAULT_POLICY = "policies/car_race_iql_64"


def fastrlap_sac() -> SACConfig:
    """FastRLAP's online settings (fastrlap-release; target entropy -2 for 2 actions)."""
    return SACConfig(hidden_dims=(256, 256), num_critics=10, critic_subsample=2, utd_ratio=8, batch_size=512,
                     discount=0.99, tau=0.005, target_entropy=-2.0, action_rate_limit=0.2)


@dataclass
class CarTrainConfig:
    """One online run on the race track."""

    policy: str | None = DEFAULT_POLICY
    """Pretrained frame-stack policy directory (IQL export): its frozen encoder, and (load_actor)
    its actor. None: no pretraining, a randomly initialised frozen encoder of the same architecture."""
    load_actor: bool = True
    """Start from the pretrained actor (FastRLAP: yes); the critics always start fresh."""
    track_seed: int = 7
    """The target track (prior data uses seeds from 1000 on: this one is held out)."""
    boundary: str = "walls"
    randomization_split: str = "train"
    image_size: int = 64
    frame_stack: int = 3
    total_steps: int = 48_000
    """Environment (policy) steps; recovery manoeuvres are not counted."""
    seed: int = 0
    sac: SACConfig = field(default_factory=fastrlap_sac)
    warmup_steps: int = 1024
    """Transitions before the first update (FastRLAP: 1024)."""
    updates_per_step: float = 1.0
    """Agent updates (each sac.utd_ratio critic steps + one actor step) per environment step."""
    buffer_capacity: int = 50_000
    """Replay memory (FastRLAP: 50,000)."""
    stop_lap_time: float | None = None
    """End the run once a clean lap is at least this fast [s] (best lap time only improves)."""
    log_every: int = 1000
    """Steps between progress rows."""
    device: str = "auto"

    def __post_init__(self) -> None:
        if isinstance(self.sac, dict):
            self.sac = SACConfig(**self.sac)
        if self.total_steps < 1 or self.warmup_steps < 1 or self.updates_per_step < 0 or self.log_every < 1:
            raise ValueError("total_steps, warmup_steps, log_every >= 1 and updates_per_step >= 0 required")


def _random_encoder(image_size: int, seed: int) -> ImageEncoder:
    """The pretrained encoder's architecture (IQL's default) with random weights, frozen."""
    from robot_rl.agents.iql import IQLConfig  # the pretraining defines the architecture

    torch.manual_seed(seed)
    arch = IQLConfig().encoder
    return ImageEncoder(EncoderConfig(**{**asdict(arch), "image_size": image_size, "freeze": True}))


def timed_laps(env: CarRaceEnv, act: Callable[[dict[str, np.ndarray], bool], np.ndarray], draws: Sequence[int],
               max_s: float = 90.0) -> list[float | None]:
    """One timed lap per randomization draw: the car is put on the start line (`reset(seed=draw)`
    draws the plant), `act(obs, first)` drives, and the first clean lap's time is that draw's
    result; None when the car crashed, got stuck or ran out of `max_s` before one. Two drivers
    timed on the same env settings and draws meet the same cars and floors."""
    times: list[float | None] = []
    for draw in draws:
        obs, _ = env.reset(seed=int(draw), options={"teleport": True})
        first, lap = True, None
        for _ in range(int(max_s * env.config.control_hz)):
            obs, _, terminated, truncated, info = env.step(act(obs, first))
            first = False
            if info["lap_time"] is not None:
                lap = float(info["lap_time"])
                break
            if terminated or truncated:
                break
        times.append(lap)
    return times


def lap_time_median(times: Sequence[float | None]) -> float:
    """Median lap time with every failed lap counted as infinitely slow (inf when half or more failed)."""
    return float(np.median([t if t is not None else np.inf for t in times]))


def lap_time_ratio(times: Sequence[float | None], reference: Sequence[float | None]) -> float:
    """A driver's median lap over a reference driver's on the same draws (`lap_time_median` both): inf when
    half or more of the driver's laps failed."""
    return lap_time_median(times) / lap_time_median(reference)


class CarTrainer:
    """Owns env, frozen policy encoder, SAC and replay; `run()` returns the progress rows."""

    def __init__(self, config: CarTrainConfig, log: Callable[[dict], None] | None = None):
        self.config = cfg = config
        self.device = torch.device(resolve_device(cfg.device))
        self.log = log or (lambda row: None)
        self.rng = np.random.default_rng(cfg.seed)
        torch.manual_seed(cfg.seed)
        if cfg.policy is not None:
            pretrained = load_frame_stack_policy(cfg.policy, self.device)
            if pretrained.frame_stack != cfg.frame_stack or pretrained.image_size != cfg.image_size:
                raise ValueError(f"{cfg.policy} is for {pretrained.frame_stack} frames of {pretrained.image_size} px, "
                                 f"the run wants {cfg.frame_stack} of {cfg.image_size}")
            encoder = pretrained.encoder
        else:
            pretrained, encoder = None, _random_encoder(cfg.image_size, cfg.seed)
        self.env = self._make_env(cfg.randomization_split)
        obs_dim = cfg.frame_stack * encoder.output_dim + STATE_DIM
        self.agent = SAC(obs_dim, 2, cfg.sac, self.device)
        if pretrained is not None and cfg.load_actor:
            self.agent.actor.load_state_dict(pretrained.actor.state_dict())
        # The deployable policy shares the agent's actor: it always acts with the newest weights.
        self.policy = FrameStackPolicy(encoder, self.agent.actor, cfg.frame_stack, STATE_DIM, self.device)
        self.agent.actor.train()
        # FastRLAP trains on its own online data alone: no demonstrations.
        self.core = OffPolicyCore(self.agent, lambda: ReplayBuffer(cfg.buffer_capacity, transition_layout(obs_dim, 2)),
                                  self.rng, demo_fraction=0.0, warmup=cfg.warmup_steps, updates_from="warmup")
        self.stack = FeatureStack(cfg.frame_stack)
        self.steps = 0
        self.laps: list[tuple[int, float]] = []
        """(step, lap time [s]) of every clean lap, in order."""
        self.events = {"crash": 0, "stuck": 0, "time_limit": 0}

    def _make_env(self, split: str) -> CarRaceEnv:
        """This run's track, car, camera and frame stack, in randomization split `split`."""
        cfg = self.config
        return CarRaceEnv(track_seed=cfg.track_seed, boundary=cfg.boundary, image_size=cfg.image_size,
                          frame_stack=cfg.frame_stack, randomization_split=split,
                          action_rate_limit=cfg.sac.action_rate_limit)

    def observe(self, obs: dict[str, np.ndarray], first: bool, stack: FeatureStack | None = None) -> np.ndarray:
        """The stored observation: the newest frame encoded once, stacked with the last K-1 (in
        `stack`, default the training episode's)."""
        stack = stack or self.stack
        if first:
            stack.reset()
        stack.push(self.policy.encode(obs["frames"][-1]))
        return self.policy.observation(stack.flat(), obs["state"])

    @torch.inference_mode()
    def act(self, observation: np.ndarray, deterministic: bool = False) -> np.ndarray:
        action, _ = self.agent.actor(torch.from_numpy(observation).to(self.device)[None], deterministic=deterministic)
        return action[0].cpu().numpy()

    def evaluate_laps(self, draws: Sequence[int], split: str = "eval", max_s: float = 90.0) -> list[float | None]:
        """The current policy, deterministic, timed for one lap per draw (`timed_laps`) on this run's
        track in randomization split `split`; training state (frame stack, env) is left untouched."""
        cfg = self.config
        env = self._make_env(split)
        stack = FeatureStack(cfg.frame_stack)
        try:
            return timed_laps(env, lambda obs, first: self.act(self.observe(obs, first, stack), deterministic=True),
                              draws, max_s)
        finally:
            env.close()

    def run(self) -> list[dict[str, Any]]:
        cfg = self.config
        start = time.perf_counter()
        obs, _ = self.env.reset(seed=cfg.seed)
        stored = self.observe(obs, first=True)
        history: list[dict[str, Any]] = []
        best: float | None = None  # the fastest clean lap so far
        returns, episode_return = [], 0.0
        metrics: dict[str, float] = {}
        while self.steps < cfg.total_steps:
            obs, reward, terminated, truncated, info = self.env.step(self.act(stored))
            next_stored = self.observe(obs, first=False)
            # The executed (rate-limited) action is what the critic learns about.
            self.core.add(stored, info["executed_action"], reward, next_stored, terminated, truncated, False, "car")
            stored, episode_return = next_stored, episode_return + reward
            self.steps += 1
            if info["lap_time"] is not None:
                lap = float(info["lap_time"])
                self.laps.append((self.steps, lap))
                best = lap if best is None else min(best, lap)
            metrics = self.core.catch_up(cfg.updates_per_step) or metrics
            if terminated or truncated:
                self.events[info["event"]] += 1
                returns.append(episode_return)
                episode_return = 0.0
                obs, _ = self.env.reset()
                stored = self.observe(obs, first=True)
            done = cfg.stop_lap_time is not None and best is not None and best <= cfg.stop_lap_time
            if self.steps % cfg.log_every == 0 or done or self.steps == cfg.total_steps:
                row = {"steps": self.steps, "updates": self.agent.num_updates,
                       "wall_s": round(time.perf_counter() - start, 1), "laps": len(self.laps),
                       "best_lap_s": best, "first_lap_step": self.laps[0][0] if self.laps else None,
                       **self.events, "recovery_steps": self.env.recovery_steps,
                       "mean_return": float(np.mean(returns[-10:])) if returns else None}
                if self.agent.num_updates:
                    row.update({k: round(v, 4) for k, v in metrics.items()})
                history.append(row)
                self.log(row)
            if done:
                break
        return history

    def save_checkpoint(self, run_dir: str | Path) -> Path:
        """Agent, optimizers and sampling state in <run_dir>/checkpoint.pt (OffPolicyCore's format)."""
        sac = self.agent.config
        network = {"obs_dim": self.agent.obs_dim, "action_dim": 2, "hidden_dims": list(sac.hidden_dims),
                   "num_critics": sac.num_critics, "frame_stack": self.config.frame_stack}
        return self.core.save_checkpoint(run_dir, network, keep=1, extra={"steps": self.steps, "laps": self.laps})

    def export(self, directory: str | Path, card: dict | None = None) -> None:
        """The trained policy (frozen encoder + actor) for the car actor node."""
        save_frame_stack_policy(directory, self.policy.encoder, self.agent.actor, STATE_DIM, self.config.frame_stack,
                                {"task": "car_race", "trainer": "sac", "steps": self.steps,
                                 "laps": self.laps, "config": asdict(self.config), **(card or {})})

    def close(self) -> None:
        self.env.close()
