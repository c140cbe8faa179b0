"""SAC + RLPD on any Gymnasium environment, in one process, without ROS.

For algorithm benchmarking (`robot-rl train --env <id>`) and the pixel pick-cube benchmark.
The agent is the same `SAC` / `Policy` the learner and actor nodes run. Observations:

* `Box`: a flat vector, stored as it is.
* `Dict` of uint8 (H, W, 3) camera frames plus an optional `state` vector: with a frozen
  encoder (the shipped pretrained one, or ResNet weights) the frames are encoded once when
  the observation arrives, acting and storage share those features, and the replay memory
  holds feature vectors; with a trainable encoder the frames go to the frame replay memory
  (each frame stored once) and DrQ trains the encoder through the critic.

Demonstrations come from the task's scripted expert or from an episode dataset; transitions
where the scripted intervener took over go to the online and the demonstration buffers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from robot_rl.agents.encoders import EncoderConfig
from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.data.episodes import EpisodeDataset
from robot_rl.data.frames import FrameReplayBuffer
from robot_rl.data.replay import ReplayBuffer
from robot_rl.device import resolve_device
from robot_rl.rewards.env_reward import LearnedRewardConfig, learned_reward_env
from robot_rl.training.interventions import InterventionConfig, ScriptedIntervener
from robot_rl.training.off_policy import OffPolicyCore
from robot_rl.transport.layout import transition_layout

Expert = Callable[[dict, np.random.Generator, float], np.ndarray]


@dataclass
class GymTrainConfig:
    """One training run on a Gymnasium environment."""

    env_id: str
    """Registered Gymnasium id: Box action space; Box or Dict (camera frames + `state`) observations."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of gymnasium.make for training."""
    eval_env_kwargs: dict = field(default_factory=dict)
    """Overrides for the evaluation env (e.g. {"randomization_split": "eval"})."""
    total_steps: int = 20_000
    """Environment steps of training."""
    seed: int = 0
    sac: SACConfig = field(default_factory=SACConfig)
    encoder: EncoderConfig | None = None
    """Image encoder for Dict observations (None: a trainable conv encoder over every camera)."""
    demo_episodes: int = 20
    """Scripted demonstrations collected before training (needs an expert; 0: none)."""
    demo_noise: float = 0.1
    """Action noise of the scripted expert's demonstrations."""
    demo_dataset: str | None = None
    """Episode dataset (zarr) with demonstrations, loaded in addition to scripted ones."""
    demo_fraction: float = 0.5
    """Share of every batch from demonstrations and interventions (RLPD: 0.5)."""
    warmup_steps: int = 256
    """Online transitions before the first update."""
    updates_per_step: float = 1.0
    """Agent updates (each utd_ratio critic steps + one actor step) per environment step."""
    eval_every: int = 2_000
    """Environment steps between evaluations (0: only at the end)."""
    eval_episodes: int = 50
    """Deterministic evaluation episodes per evaluation."""
    interventions: bool = False
    """A scripted human (`ScriptedIntervener` with its defaults) takes over when the policy goes
    off track (needs an expert); a caller may pass its own intervener instead."""
    correction_transitions: int = 0
    """Scripted-expert transitions stored before training as if a person had made them (intervention
    rows: the corrections' losses, behaviour cloning included), in whole successful episodes cut at
    this count: HIL's fair control, the expert data of a human arm given up front instead."""
    offline_updates: int = 0
    """VLAC's offline demonstration replay: agent updates on the demonstrations alone before the
    first online step."""
    return_and_explore: float = 0.0
    """VLAC's return-and-explore: chance that a training episode starts from a state of a scripted
    demonstration instead of a fresh reset (the env must offer `snapshot()` and
    `reset(options={"snapshot": ...})`, as robot_rl/ArmPickCube-v0 does). Human-guided
    exploration, the third mode of VLAC's protocol, is `interventions`."""
    learned_reward: LearnedRewardConfig | None = None
    """Train on a progress model's reward and termination from the env's cameras instead of the
    env's own (`robot_rl.rewards.env_reward`); evaluation still measures the env's true success."""
    stop_success_rate: float | None = None
    """End training at the first evaluation with at least this success rate (None: run to total_steps)."""
    buffer_capacity: int = 200_000
    device: str = "auto"


def image_keys(space: spaces.Space) -> tuple[str, ...]:
    if not isinstance(space, spaces.Dict):
        return ()
    return tuple(k for k, s in space.spaces.items()
                 if isinstance(s, spaces.Box) and s.dtype == np.uint8 and len(s.shape) == 3 and s.shape[-1] == 3)


def check_spaces(env: gym.Env) -> None:
    if not isinstance(env.action_space, spaces.Box) or len(env.action_space.shape) != 1:
        raise ValueError(f"{env.spec.id if env.spec else env}: needs a 1-D Box action space, got {env.action_space}")
    obs_space = env.observation_space
    if isinstance(obs_space, spaces.Box):
        if len(obs_space.shape) != 1:
            raise ValueError(f"Box observations must be vectors, got shape {obs_space.shape}")
        return
    if not isinstance(obs_space, spaces.Dict) or not image_keys(obs_space):
        raise ValueError("observations must be a Box vector or a Dict of uint8 (H, W, 3) images plus 'state'")
    extra = set(obs_space.spaces) - set(image_keys(obs_space)) - {"state"}
    if extra:
        raise ValueError(f"Dict observation keys {sorted(extra)} are neither camera frames nor 'state'")


def make_env(env_id: str, kwargs: dict) -> gym.Env:
    """gymnasium.make, checked, with the action space rescaled to the agent's [-1, 1]."""
    env = gym.make(env_id, **kwargs)
    check_spaces(env)
    low, high = env.action_space.low, env.action_space.high
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError(f"{env_id}: the action space must be bounded, got {env.action_space}")
    if not (np.allclose(low, -1) and np.allclose(high, 1)):
        env = gym.wrappers.RescaleAction(env, -1.0, 1.0)
    return env


class Trainer:
    """Owns env, agent and buffers; `run()` trains and evaluates, returning the learning curve."""

    def __init__(self, config: GymTrainConfig, expert: Expert | None = None, intervener=None,
                 log: Callable[[dict], None] | None = None):
        self.config = cfg = config
        self.device = torch.device(resolve_device(cfg.device))
        self.rng = np.random.default_rng(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.env = make_env(cfg.env_id, cfg.env_kwargs)
        if cfg.learned_reward is not None:
            self.env = learned_reward_env(self.env, cfg.learned_reward, str(self.device))
        if (cfg.demo_episodes or cfg.interventions or cfg.correction_transitions) and expert is None:
            raise ValueError(f"{cfg.env_id} has no scripted expert: set demo_episodes=0 and interventions=False "
                             "or give demo_dataset")
        action_dim = self.env.action_space.shape[0]
        if cfg.interventions and intervener is None:
            # Every continuous entry is motion; with a grasp critic the last one is the gripper command.
            continuous = action_dim - 1 if cfg.sac.grasp_critic else action_dim
            intervener = ScriptedIntervener(expert, InterventionConfig(
                motion_dims=tuple(range(continuous)), gripper_index=continuous if cfg.sac.grasp_critic else None))
        self.expert, self.intervener, self.log = expert, intervener, log or (lambda row: None)
        obs_space = self.env.observation_space
        self.cameras = image_keys(obs_space)
        state_dim = obs_space["state"].shape[0] if self.cameras and "state" in obs_space.spaces else 0
        encoder = cfg.encoder
        if self.cameras:
            size = obs_space[self.cameras[0]].shape[0]
            encoder = encoder or EncoderConfig(cameras=self.cameras, image_size=size, state_dim=state_dim)
            if set(encoder.cameras) != set(self.cameras) or encoder.state_dim != state_dim:
                raise ValueError(f"encoder is for cameras {encoder.cameras} + state {encoder.state_dim}, env has "
                                 f"{self.cameras} + state {state_dim}")
        self.frozen = encoder is not None and encoder.frozen
        flat_dim = obs_space.shape[0] if not self.cameras else 0
        self.agent = SAC(flat_dim, action_dim, cfg.sac, self.device,
                         encoder=encoder if encoder is not None and not self.frozen else None,
                         policy_encoder=encoder if self.frozen else None)
        self.network = self.agent.policy.network
        if self.cameras and not self.frozen:
            shapes = {k: obs_space[k].shape for k in self.cameras}
            make = lambda: FrameReplayBuffer(cfg.buffer_capacity, shapes, max(state_dim, 1), action_dim)  # noqa: E731
        else:
            layout = transition_layout(self.agent.obs_dim, action_dim)
            make = lambda: ReplayBuffer(cfg.buffer_capacity, layout)  # noqa: E731
        self.core = OffPolicyCore(self.agent, make, self.rng, demo_fraction=cfg.demo_fraction, warmup=cfg.warmup_steps,
                                  updates_from="warmup")
        self.online, self.demos = self.core.online, self.core.demos
        if not 0.0 <= cfg.return_and_explore <= 1.0:
            raise ValueError(f"return_and_explore must be in [0, 1], got {cfg.return_and_explore}")
        if cfg.return_and_explore and not (cfg.demo_episodes and hasattr(self.env.unwrapped, "snapshot")):
            raise ValueError(f"return_and_explore needs scripted demonstrations in an env with snapshot(); "
                             f"{cfg.env_id} has {'no snapshot()' if cfg.demo_episodes else 'demo_episodes=0'}")
        self.demo_states: list[Any] = []
        """Snapshots of the states scripted demonstrations passed through (return-and-explore)."""
        self.state_dim = state_dim
        self.steps = 0
        self.history: list[dict[str, Any]] = []

    # ---- observations ------------------------------------------------------------------------

    def stored(self, obs) -> Any:
        """What the replay memory keeps of an observation: flat vector, features, or frames + state."""
        if not self.cameras:
            return np.asarray(obs, np.float32)
        if self.frozen:
            return self.core.features({k: np.asarray(obs[k])[None] for k in (*self.cameras, "state") if k in obs})[0]
        state = np.asarray(obs.get("state", np.zeros(1)), np.float32)
        return {**{k: obs[k] for k in self.cameras}, "state": state}

    def act(self, obs, stored, deterministic: bool) -> np.ndarray:
        with torch.inference_mode():
            if self.frozen:
                features = torch.from_numpy(stored)[None].to(self.device)
                state = torch.from_numpy(np.asarray(obs["state"], np.float32))[None].to(self.device)
                action = self.network.act_on_features(features, state, deterministic)
                return action[0].cpu().numpy()
        return self.agent.policy.act(obs if self.cameras else stored, deterministic=deterministic)

    # ---- data --------------------------------------------------------------------------------

    def collect_demos(self) -> dict[str, float]:
        cfg = self.config
        kept, attempted = self._expert_episodes(episodes=cfg.demo_episodes)
        stats = {"demo_episodes": kept, "demo_attempts": attempted}
        if cfg.correction_transitions:
            self._expert_episodes(transitions=cfg.correction_transitions)
            stats["expert_transitions_up_front"] = cfg.correction_transitions
        if cfg.demo_dataset:
            dataset = EpisodeDataset(cfg.demo_dataset)
            if isinstance(self.demos, FrameReplayBuffer):
                dataset.load_into(self.demos)
            else:
                self._load_encoded(dataset)
        return stats

    def _expert_episodes(self, episodes: int = 0, transitions: int = 0) -> tuple[int, int]:
        """Successful scripted-expert episodes into the demonstration memory: `episodes` of them as
        demonstrations, or (`transitions`) exactly that many transitions stored as corrections
        (intervention rows, so they get the corrections' losses). Returns (kept, attempted)."""
        cfg = self.config
        kept = attempted = stored_rows = 0
        while kept < episodes or stored_rows < transitions:
            attempted += 1
            if attempted > 5 * max(kept, episodes) + 10:  # demonstrations: 5 tries per episode asked for
                raise RuntimeError(f"scripted expert succeeded in only {kept} of {attempted} episodes")
            obs, info = self.env.reset(seed=int(self.rng.integers(2**31)))
            episode, states, success, done = [], [], False, False
            stored = self.stored(obs)
            while not done:
                if cfg.return_and_explore and not transitions:
                    states.append(self.env.unwrapped.snapshot())
                action = self.expert(info["state"], self.rng, cfg.demo_noise)
                obs, reward, terminated, truncated, info = self.env.step(action)
                next_stored = self.stored(obs)
                episode.append((stored, action, reward, next_stored, terminated, truncated))
                stored, done = next_stored, terminated or truncated
                success = success or bool(info.get("is_success", False))
            if success:
                kept += 1
                self.demo_states += states
                if transitions:
                    episode = episode[:transitions - stored_rows]
                stored_rows += len(episode)
                for transition in episode:
                    self.core.add(*transition, bool(transitions), stream=f"{'correction' if transitions else 'demo'}"
                                  f"{kept}", demonstration=True)
        return kept, attempted

    def _load_encoded(self, dataset) -> None:
        for i in range(len(dataset)):
            episode = dataset.episode(i)
            observations = [self.stored({k: episode[k][t] for k in (*self.cameras, "state") if k in episode}
                                        if self.cameras else episode["state"][t])
                            for t in range(len(episode["state"]))]
            for t in range(len(episode["action"])):
                self.core.add(observations[t], episode["action"][t], episode["reward"][t], observations[t + 1],
                              episode["terminated"][t], episode["truncated"][t], episode["intervention"][t], f"ds{i}",
                              demonstration=True)

    # ---- checkpoints -------------------------------------------------------------------------

    def network_shape(self) -> dict[str, Any]:
        """The settings that decide the weights' shapes (a checkpoint loads only into the same)."""
        sac = self.agent.config
        return {"env_id": self.config.env_id, "obs_dim": self.agent.obs_dim, "action_dim": self.agent.action_dim,
                "cameras": list(self.cameras), "hidden_dims": list(sac.hidden_dims), "num_critics": sac.num_critics,
                "grasp_critic": sac.grasp_critic}

    def save_checkpoint(self, run_dir) -> Path:
        """Agent, optimizers and sampling state in <run_dir>/checkpoint.pt (OffPolicyCore's format)."""
        return self.core.save_checkpoint(run_dir, self.network_shape(), keep=1, extra={"steps": self.steps})

    # ---- loops -------------------------------------------------------------------------------

    def evaluate(self, episodes: int) -> dict[str, float]:
        env = make_env(self.config.env_id, {**self.config.env_kwargs, **self.config.eval_env_kwargs})
        rng = np.random.default_rng(10_000 + self.config.seed)
        successes, returns = [], []
        try:
            for _ in range(episodes):
                obs, _ = env.reset(seed=int(rng.integers(2**31)))
                done, success, total = False, False, 0.0
                while not done:
                    obs, reward, terminated, truncated, info = env.step(self.act(obs, self.stored(obs), True))
                    total += float(reward)
                    success = success or bool(info.get("is_success", False))
                    done = terminated or truncated
                successes.append(success)
                returns.append(total)
        finally:
            env.close()
        return {"success_rate": float(np.mean(successes)), "mean_return": float(np.mean(returns))}

    def reset_training_episode(self, seed: int):
        """A fresh reset, or (return-and-explore) a reset into a demonstration's state."""
        if self.demo_states and self.rng.random() < self.config.return_and_explore:
            snapshot = self.demo_states[int(self.rng.integers(len(self.demo_states)))]
            return self.env.reset(seed=seed, options={"snapshot": snapshot})
        return self.env.reset(seed=seed)

    def run(self) -> list[dict[str, Any]]:
        cfg = self.config
        start = time.perf_counter()
        demo_stats = self.collect_demos() if (cfg.demo_episodes or cfg.demo_dataset or cfg.correction_transitions) \
            else {}
        if cfg.offline_updates and len(self.demos):
            self.core.train_offline(cfg.offline_updates)
        obs, info = self.reset_training_episode(cfg.seed)
        stored = self.stored(obs)
        episode = {"return": 0.0, "interventions": 0, "intervention_steps": 0, "index": 0}
        episodes, intervening = [], False
        next_eval = cfg.eval_every or cfg.total_steps
        while self.steps < cfg.total_steps:
            policy_action = self.act(obs, stored, deterministic=False)
            action, intervened = policy_action, False
            if self.intervener is not None:
                action, intervened = self.intervener(info["state"], policy_action, self.rng)
                episode["interventions"] += int(intervened and not intervening)
                episode["intervention_steps"] += int(intervened)
                intervening = intervened
            obs, reward, terminated, truncated, info = self.env.step(action)
            next_stored = self.stored(obs)
            self.core.add(stored, action, reward, next_stored, terminated, truncated, intervened, f"ep{episode['index']}")
            stored = next_stored
            episode["return"] += float(reward)
            self.steps += 1
            self.core.catch_up(cfg.updates_per_step)
            if terminated or truncated:
                episodes.append({**episode, "success": bool(info.get("is_success", False))})
                obs, info = self.reset_training_episode(int(self.rng.integers(2**31)))
                stored = self.stored(obs)
                episode = {"return": 0.0, "interventions": 0, "intervention_steps": 0, "index": episode["index"] + 1}
                intervening = False
            if self.steps >= next_eval or self.steps == cfg.total_steps:
                next_eval += cfg.eval_every or cfg.total_steps
                recent = episodes[-20:]
                # Expert transitions so far: given up front, then every step a person (the intervener) drove.
                corrected = cfg.correction_transitions + sum(e["intervention_steps"] for e in (*episodes, episode))
                row = {"steps": self.steps, "updates": self.agent.num_updates, "expert_transitions": corrected,
                       "wall_s": round(time.perf_counter() - start, 1), **demo_stats,
                       **self.evaluate(cfg.eval_episodes),
                       "train_success_rate": float(np.mean([e["success"] for e in recent])) if recent else 0.0,
                       "intervention_rate": (float(np.mean([e["intervention_steps"] > 0 for e in recent]))
                                             if recent else 0.0),
                       "episodes": len(episodes)}
                self.history.append(row)
                self.log(row)
                if cfg.stop_success_rate is not None and row["success_rate"] >= cfg.stop_success_rate:
                    break
        self.env.close()
        return self.history
