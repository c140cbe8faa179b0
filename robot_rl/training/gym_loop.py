"""SAC + RLPD on any Gymnasium environment, in one process, without ROS.

For algorithm benchmarking (`robot-rl train --env <id>`) and the pixel pick-cube benchmark.
The agent is the same `SAC` / `Policy` the learner and actor nodes run. The environment is seen
through its `EnvAdapter` (`robot_rl.envs.adapter`: any (nested) Dict of state vectors and
camera images, actions in the environment's own ranges, success under the usual info keys), so
the agent gets either

* a flat, normalised state vector, stored as it is, or
* camera frames (uint8 (H, W, 3)) plus the normalised `state`: with a frozen encoder (the shipped
  pretrained one, or ResNet weights) the frames are encoded once when the observation arrives,
  acting and storage share those features, and the replay memory holds feature vectors; with a
  trainable encoder the frames go to the frame replay memory (each frame stored once) and DrQ
  trains the encoder through the critic.

State features without usable bounds are normalised by statistics of the first observations
(demonstrations and the warm-up steps): until the warm-up ends transitions are held back and
stored once the statistics exist, so the replay memory never mixes two normalisations.

Demonstrations come from the task's scripted expert or from an episode dataset (ours or a
LeRobot dataset); transitions where the scripted intervener took over, or where the environment
reports a person's takeover in its info, go to the online and the demonstration buffers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from robot_rl.agents.encoders import EncoderConfig
from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.data.frames import FrameReplayBuffer
from robot_rl.data.replay import ReplayBuffer
from robot_rl.device import resolve_device
from robot_rl.envs.adapter import AdapterConfig, CanonicalEnv, EnvAdapter, make_canonical, resize_frame
from robot_rl.rewards.env_reward import LearnedRewardConfig, learned_reward_env
from robot_rl.training.env_session import Pacer
from robot_rl.training.evaluate import evaluate_policy
from robot_rl.teleop.scripted_human import InterventionConfig, ScriptedIntervener
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
    feature_views: int = 1
    """A frozen encoder's features are stored for this many views of each observation: the clean
    one and the rest of shifted, photometrically jittered frames (`training/off_policy.py`); 1: clean only."""
    feature_jitter: float = 0.2
    """Strength of those views' photometric jitter (`agents/encoders.py: photometric_jitter`)."""
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
    control_hz: float = 0.0
    """Steps per second on the wall clock (a person in the loop needs one); 0: as fast as the machine goes."""
    torch_threads: int = 0
    """CPU threads for torch (1-256); 0: one when `control_hz` paces the loop, else torch's default. A
    paced loop shares the cores with a person's view and whatever else runs, and OpenMP teams that
    compete for cores stall each other: with 2 threads a paced run on a loaded 2-core machine ran
    ten times slower than with 1 (the actor nodes' `torch_threads` is 1 for the same reason)."""
    adapter: AdapterConfig = field(default_factory=AdapterConfig)
    """How the environment's observations, actions and success map to the agent's (robot_rl.envs.adapter)."""


def make_env(config: GymTrainConfig, adapter: EnvAdapter | None = None, evaluation: bool = False) -> CanonicalEnv:
    """The training (or evaluation) environment seen through its adapter, states left raw (the trainer normalises)."""
    kwargs = {**config.env_kwargs, **(config.eval_env_kwargs if evaluation else {})}
    return make_canonical(config.env_id, kwargs, config.adapter, adapter=adapter, normalize=False)


class Trainer:
    """Owns env, agent and buffers; `run()` trains and evaluates, returning the learning curve.

    With `run_dir` it also writes what graph runs write: TensorBoard scalars, `episodes.jsonl` (one
    line per training episode) and, at the end, `eval.json`. `observer` (e.g. a Rerun session) sees
    every step: `observer.step(...)` and `observer.episode_end(...)`. `person` (a `LocalTeleop`) takes
    over whenever they engage their device: their action is executed and stored as a correction."""

    def __init__(self, config: GymTrainConfig, expert: Expert | None = None, intervener=None,
                 log: Callable[[dict], None] | None = None, run_dir: str | Path | None = None, observer=None,
                 person=None):
        self.config = cfg = config
        self.device = torch.device(resolve_device(cfg.device))
        if not 0 <= cfg.torch_threads <= 256:
            raise ValueError(f"torch_threads must be in [0, 256], got {cfg.torch_threads}")
        threads = cfg.torch_threads or (1 if cfg.control_hz else 0)
        if threads:
            torch.set_num_threads(threads)
        self.rng = np.random.default_rng(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.env = make_env(cfg)
        self.adapter = self.env.adapter
        self.normalize = self.adapter.normalizer
        if cfg.sac.grasp_critic and self.adapter.state_dim:  # the grasp critic's "stay" reads the gripper's sign
            self.normalize.keep_raw(self.adapter.state_dim + cfg.sac.gripper_state_index)
        if cfg.learned_reward is not None:
            self.env = learned_reward_env(self.env, cfg.learned_reward, str(self.device))
        if (cfg.demo_episodes or cfg.interventions or cfg.correction_transitions) and expert is None:
            raise ValueError(f"{cfg.env_id} has no scripted expert: set demo_episodes=0 and interventions=False "
                             "or give demo_dataset")
        action_dim = self.adapter.action_dim
        if cfg.interventions and intervener is None:
            # Every continuous entry is motion; with a grasp critic the last one is the gripper command.
            continuous = action_dim - 1 if cfg.sac.grasp_critic else action_dim
            intervener = ScriptedIntervener(expert, InterventionConfig(
                motion_dims=tuple(range(continuous)), gripper_index=continuous if cfg.sac.grasp_critic else None))
        self.expert, self.intervener, self.log, self.observer = expert, intervener, log or (lambda row: None), observer
        self.person = person
        if person is not None:
            self.adapter.person_action(np.zeros(6), -1.0)  # refuses an action the device cannot drive, up front
        self.cameras = self.adapter.cameras
        state_dim = self.adapter.state_dim
        encoder = cfg.encoder
        if self.cameras:
            encoder = encoder or EncoderConfig(cameras=self.cameras, image_size=self.adapter.image_size,
                                               state_dim=state_dim)
            if set(encoder.cameras) != set(self.cameras) or encoder.state_dim != state_dim:
                raise ValueError(f"encoder is for cameras {encoder.cameras} + state {encoder.state_dim}, env has "
                                 f"{self.cameras} + state {state_dim}")
        self.frozen = encoder is not None and encoder.frozen
        flat_dim = state_dim if not self.cameras else 0
        self.agent = SAC(flat_dim, action_dim, cfg.sac, self.device,
                         encoder=encoder if encoder is not None and not self.frozen else None,
                         policy_encoder=encoder if self.frozen else None)
        self.network = self.agent.policy.network
        if self.cameras and not self.frozen:
            shapes = {k: (self.adapter.image_size, self.adapter.image_size, 3) for k in self.cameras}
            make = lambda: FrameReplayBuffer(cfg.buffer_capacity, shapes, max(state_dim, 1), action_dim)  # noqa: E731
        else:
            layout = transition_layout(cfg.feature_views * self.agent.obs_dim, action_dim)
            make = lambda: ReplayBuffer(cfg.buffer_capacity, layout)  # noqa: E731
        self.core = OffPolicyCore(self.agent, make, self.rng, demo_fraction=cfg.demo_fraction, warmup=cfg.warmup_steps,
                                  updates_from="warmup", feature_views=cfg.feature_views,
                                  feature_jitter=cfg.feature_jitter)
        self.online, self.demos = self.core.online, self.core.demos
        if not 0.0 <= cfg.return_and_explore <= 1.0:
            raise ValueError(f"return_and_explore must be in [0, 1], got {cfg.return_and_explore}")
        if cfg.return_and_explore and not (cfg.demo_episodes and hasattr(self.env.unwrapped, "snapshot")):
            raise ValueError(f"return_and_explore needs scripted demonstrations in an env with snapshot(); "
                             f"{cfg.env_id} has {'no snapshot()' if cfg.demo_episodes else 'demo_episodes=0'}")
        self.demo_states: list[Any] = []
        """Snapshots of the states scripted demonstrations passed through (return-and-explore)."""
        self.state_dim = state_dim
        # Opened and checked here, so a dataset that cannot be trained on is refused before anything runs.
        self.demo_dataset = self._demo_episodes(cfg.demo_dataset) if cfg.demo_dataset else None
        self.steps = 0
        self.history: list[dict[str, Any]] = []
        self.last_evaluation: dict[str, Any] = {}
        """The newest evaluation, each episode's result included (`evaluate_policy`)."""
        self.held: list[tuple] = []
        """Transitions (raw observations) waiting for the state statistics before they are stored."""
        self._last: tuple[Any, Any, Any] = (None, None, None)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.writer = None
        if self.run_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.writer = SummaryWriter(str(self.run_dir / "tensorboard"))

    # ---- observations ------------------------------------------------------------------------

    def agent_view(self, raw) -> tuple[Any, Any]:
        """(observation the policy sees, what the replay memory keeps of it) for a raw canonical
        observation: state normalised; a flat vector, features, or frames + state. The last one is
        cached: a step's next observation is the following step's observation."""
        if raw is self._last[0]:
            return self._last[1], self._last[2]
        if self.cameras:
            obs = {**{k: raw[k] for k in self.cameras}, "state": self.normalize(raw["state"])}
            state = obs["state"] if self.state_dim else np.zeros(1, np.float32)
            if self.frozen:
                stored = self.core.features({**{k: np.asarray(obs[k])[None] for k in self.cameras},
                                             "state": state[None]})[0]
            else:
                stored = {**{k: obs[k] for k in self.cameras}, "state": state}
        else:
            obs = stored = self.normalize(raw)
        self._last = (raw, obs, stored)
        return obs, stored

    def act(self, raw, deterministic: bool) -> np.ndarray:
        obs, stored = self.agent_view(raw)
        with torch.inference_mode():
            if self.frozen:
                features = torch.from_numpy(stored[:self.agent.obs_dim])[None].to(self.device)  # the clean view
                state = torch.from_numpy(np.asarray(obs["state"], np.float32))[None].to(self.device)
                action = self.network.act_on_features(features, state, deterministic)
                return action[0].cpu().numpy()
        return self.agent.policy.act(obs, deterministic=deterministic)

    # ---- data --------------------------------------------------------------------------------

    def add(self, raw_obs, action, reward, raw_next_obs, terminated, truncated, intervention: bool, stream: str,
            demonstration: bool = False) -> None:
        """One transition on raw observations: held back while state statistics are pending, else stored."""
        transition = (raw_obs, np.asarray(action, np.float32), reward, raw_next_obs, terminated, truncated,
                      intervention, stream, demonstration)
        if self.normalize.needs_statistics:
            self.held.append(transition)
            return
        self._store(*transition)

    def _store(self, raw_obs, action, reward, raw_next_obs, terminated, truncated, intervention, stream,
               demonstration) -> None:
        stored = self.agent_view(raw_obs)[1]
        next_stored = self.agent_view(raw_next_obs)[1]
        self.core.add(stored, action, reward, next_stored, terminated, truncated, intervention, stream,
                      demonstration=demonstration)

    def fit_normalizer(self) -> None:
        """State statistics from every held transition's observations, then the held transitions stored."""
        if not self.normalize.needs_statistics or not self.held:
            return
        state = (lambda raw: raw["state"]) if self.cameras else (lambda raw: raw)
        self.normalize.fit(np.stack([state(raw) for t in self.held for raw in (t[0], t[3])]))
        self._last = (None, None, None)
        held, self.held = self.held, []
        for transition in held:
            self._store(*transition)

    def collect_demos(self) -> dict[str, float]:
        cfg = self.config
        kept, attempted = self._expert_episodes(episodes=cfg.demo_episodes)
        stats = {"demo_episodes": kept, "demo_attempts": attempted}
        if cfg.correction_transitions:
            self._expert_episodes(transitions=cfg.correction_transitions)
            stats["expert_transitions_up_front"] = cfg.correction_transitions
        if self.demo_dataset is not None:
            stats["dataset_transitions"] = self._add_episodes(self.demo_dataset)
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
            while not done:
                if cfg.return_and_explore and not transitions:
                    states.append(self.env.unwrapped.snapshot())
                action = self.expert(info["state"], self.rng, cfg.demo_noise)
                next_obs, reward, terminated, truncated, info = self.env.step(action)
                episode.append((obs, action, reward, next_obs, terminated, truncated))
                obs, done = next_obs, terminated or truncated
                success = success or bool(info["is_success"])
            if success:
                kept += 1
                self.demo_states += states
                if transitions:
                    episode = episode[:transitions - stored_rows]
                stored_rows += len(episode)
                for transition in episode:
                    self.add(*transition, bool(transitions), stream=f"{'correction' if transitions else 'demo'}"
                             f"{kept}", demonstration=True)
        return kept, attempted

    def load_dataset(self, path: str) -> int:
        """Every episode of a dataset (ours or LeRobot v3) into the demonstration memory, its actions
        mapped from the environment's units to the agent's and its frames to the adapter's size;
        returns the transitions added."""
        return self._add_episodes(self._demo_episodes(path))

    def _demo_episodes(self, path: str):
        """The episodes of the dataset at `path` (ours or LeRobot v3), refused (ValueError) when there are
        none or they do not fit the environment as adapted."""
        from robot_rl.data.lerobot_format import open_episodes

        dataset = open_episodes(path)
        if not len(dataset):
            raise ValueError(f"demo dataset {path} holds no episodes: record some into it or train without it")
        schema = dataset.schema
        if schema.state_dim != self.state_dim or set(schema.cameras) != set(self.cameras) \
                or schema.action_dim != self.adapter.action_dim:
            raise ValueError(f"{path}: episodes of cameras {sorted(schema.cameras)}, state {schema.state_dim}, action "
                             f"{schema.action_dim}; {self.config.env_id} as adapted has cameras {sorted(self.cameras)}, "
                             f"state {self.state_dim}, action {self.adapter.action_dim}")
        return dataset

    def _add_episodes(self, dataset) -> int:
        added = 0
        for i in range(len(dataset)):
            episode = dataset.episode(i)
            states = episode["state"]
            if self.cameras:
                frames = {k: [resize_frame(f, self.adapter.image_size) for f in episode[k]] for k in self.cameras}
                observations = [{**{k: frames[k][t] for k in self.cameras}, "state": states[t]}
                                for t in range(len(states))]
            else:
                observations = list(states)
            for t in range(len(episode["action"])):
                self.add(observations[t], self.adapter.agent_action(episode["action"][t]), episode["reward"][t],
                         observations[t + 1], episode["terminated"][t], episode["truncated"][t],
                         bool(episode["intervention"][t]), f"ds{i}", demonstration=True)
                added += 1
        return added

    # ---- checkpoints and the saved policy ----------------------------------------------------

    def network_shape(self) -> dict[str, Any]:
        """The settings that decide the weights' shapes (a checkpoint loads only into the same)."""
        sac = self.agent.config
        return {"env_id": self.config.env_id, "obs_dim": self.agent.obs_dim, "action_dim": self.agent.action_dim,
                "cameras": list(self.cameras), "hidden_dims": list(sac.hidden_dims), "num_critics": sac.num_critics,
                "grasp_critic": sac.grasp_critic}

    def save_checkpoint(self, run_dir) -> Path:
        """Agent, optimizers and sampling state in <run_dir>/checkpoint.pt (OffPolicyCore's format)."""
        return self.core.save_checkpoint(run_dir, self.network_shape(), keep=1,
                                         extra={"steps": self.steps, "adapter": self.adapter.to_json()})

    def save_policy(self, path: Path) -> None:
        """The deployable policy with the environment's adapter (its state normalisation included), so
        `robot-rl eval` runs it on the environment as it was trained."""
        save_env_policy(path, self.agent.policy, self.adapter, self.config.env_id, self.config.env_kwargs)

    # ---- loops -------------------------------------------------------------------------------

    def evaluate(self, episodes: int) -> dict[str, float]:
        return evaluate_policy(lambda raw, info: self.act(raw, True),
                               make_env(self.config, self.adapter, evaluation=True), episodes, seed=10_000 + self.config.seed)

    def reset_training_episode(self, seed: int):
        """A fresh reset, or (return-and-explore) a reset into a demonstration's state."""
        if self.demo_states and self.rng.random() < self.config.return_and_explore:
            snapshot = self.demo_states[int(self.rng.integers(len(self.demo_states)))]
            return self.env.reset(seed=seed, options={"snapshot": snapshot})
        return self.env.reset(seed=seed)

    def _end_episode(self, episode: dict, success: bool) -> dict:
        row = {**episode, "success": success}
        if self.run_dir is not None:
            self.writer.add_scalar("episode/return", row["return"], self.steps)
            self.writer.add_scalar("episode/success", float(success), self.steps)
            self.writer.add_scalar("episode/intervention_steps", row["intervention_steps"], self.steps)
            with open(self.run_dir / "episodes.jsonl", "a") as f:
                f.write(json.dumps({**row, "env_steps": self.steps, "time": round(time.time(), 3),
                                    "learner_updates": self.agent.num_updates}) + "\n")
        if self.observer is not None:
            self.observer.episode_end(episode["index"], success, "success" if success else "done")
        return row

    def _observe(self, raw, action, policy_action, intervened: bool, reward: float, episode: int) -> None:
        """The step from `raw` for the observer, with the critic's estimate of the action taken."""
        obs, stored = self.agent_view(raw)
        batch = {k: torch.from_numpy(np.asarray(v)[None]).to(self.device) for k, v in stored.items()} \
            if isinstance(stored, dict) else torch.from_numpy(np.asarray(stored)[None, :self.agent.obs_dim]).to(self.device)
        value = self.agent.value(batch, torch.from_numpy(np.asarray(action, np.float32)[None]).to(self.device))
        self.observer.step(step=self.steps, cameras={k: obs[k] for k in self.cameras} if self.cameras else {},
                           state=obs["state"] if self.cameras else obs, action=action,
                           policy_action=policy_action, driver="person" if intervened else "policy",
                           reward=reward, value=float(value[0]), done_probability=None, episode=episode,
                           wall_time=time.time())

    def run(self) -> list[dict[str, Any]]:
        cfg = self.config
        start = time.perf_counter()
        demo_stats = self.collect_demos() if (cfg.demo_episodes or cfg.demo_dataset or cfg.correction_transitions) \
            else {}
        if cfg.warmup_steps == 0:
            self.fit_normalizer()
        if cfg.offline_updates and (len(self.demos) or self.held):
            self.fit_normalizer()  # offline updates need the demonstrations stored
            self.core.train_offline(cfg.offline_updates)
        obs, info = self.reset_training_episode(cfg.seed)
        episode = {"return": 0.0, "interventions": 0, "intervention_steps": 0, "index": 0}
        episodes, intervening = [], False
        next_eval = cfg.eval_every or cfg.total_steps
        pacer = Pacer(cfg.control_hz) if cfg.control_hz else None
        while self.steps < cfg.total_steps:
            if pacer is not None:
                pacer.wait()
            policy_action = self.act(obs, deterministic=False)
            action, intervened = policy_action, False
            if self.intervener is not None:
                action, intervened = self.intervener(info.get("state"), policy_action, self.rng)
            if self.person is not None:
                person = self.person.poll()
                if person.engaged:
                    action, intervened = self.adapter.person_action(person.twist, person.gripper), True
            next_obs, reward, terminated, truncated, info = self.env.step(action)
            if info["intervention"]:  # the environment reports that a person drove this step
                action, intervened = info["intervention_action"], True
            episode["interventions"] += int(intervened and not intervening)
            episode["intervention_steps"] += int(intervened)
            intervening = intervened
            self.add(obs, action, reward, next_obs, terminated, truncated, intervened, f"ep{episode['index']}")
            if self.observer is not None:
                self._observe(obs, action, policy_action, intervened, reward, episode["index"])
            obs = next_obs
            episode["return"] += float(reward)
            self.steps += 1
            if self.steps >= cfg.warmup_steps:
                self.fit_normalizer()
            self.core.catch_up(cfg.updates_per_step)
            if terminated or truncated:
                episodes.append(self._end_episode(episode, bool(info["is_success"])))
                obs, info = self.reset_training_episode(int(self.rng.integers(2**31)))
                episode = {"return": 0.0, "interventions": 0, "intervention_steps": 0, "index": episode["index"] + 1}
                intervening = False
            if self.steps >= next_eval or self.steps == cfg.total_steps:
                next_eval += cfg.eval_every or cfg.total_steps
                recent = episodes[-20:]
                # Expert transitions so far: given up front, then every step a person (the intervener) drove.
                corrected = cfg.correction_transitions + sum(e["intervention_steps"] for e in (*episodes, episode))
                self.last_evaluation = self.evaluate(cfg.eval_episodes)
                row = {"steps": self.steps, "updates": self.agent.num_updates, "expert_transitions": corrected,
                       "wall_s": round(time.perf_counter() - start, 1), **demo_stats,
                       **{k: v for k, v in self.last_evaluation.items() if k != "results"},
                       "train_success_rate": float(np.mean([e["success"] for e in recent])) if recent else 0.0,
                       "intervention_rate": (float(np.mean([e["intervention_steps"] > 0 for e in recent]))
                                             if recent else 0.0),
                       "episodes": len(episodes)}
                self.history.append(row)
                if self.writer is not None:
                    for key in ("success_rate", "mean_return", "train_success_rate", "intervention_rate"):
                        self.writer.add_scalar(f"eval/{key}" if key in ("success_rate", "mean_return")
                                               else f"train/{key}", row[key], self.steps)
                self.log(row)
                if cfg.stop_success_rate is not None and row["success_rate"] >= cfg.stop_success_rate:
                    break
        self.env.close()
        if self.writer is not None:
            self.writer.close()
        return self.history


def save_env_policy(path: Path, policy, adapter: EnvAdapter, env_id: str, env_kwargs: dict) -> None:
    network = policy.network
    device = next(network.parameters()).device
    network.cpu()
    try:
        torch.save({"spec": policy.spec.to_json(), "weights": network.state_dict(), "adapter": adapter.to_json(),
                    "env_id": env_id, "env_kwargs": env_kwargs}, path)
    finally:
        network.to(device)
