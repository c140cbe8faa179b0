"""The off-policy core: one agent (any `OffPolicyAgent`; SAC with RLPD is ours), its online and demonstration
memories, and how it trains.

Every SAC trainer runs through this class: the learner node's core (`training/learner.py`, which
`training/in_process.py` also drives in one process), the Gymnasium loop (`training/gym_loop.py`) and the
car trainer (`robots/car/train.py`). They differ only in how transitions reach it (payloads from
actors, environment steps) and in configuration:

* Storage: every transition goes to the online memory; a person's corrections (`intervention`
  rows) go to the demonstration memory too (HIL-SERL).
* Sampling: RLPD's mixed batches (`demo_fraction` from demonstrations), made into tensors on the
  training device, flat vectors or camera frames + state alike.
* Augmented features: a frozen encoder's features are computed once per stored observation, so
  the frames cannot be augmented at every update as DrQ does. With `feature_views` V > 1 each
  observation is stored as V views (the clean one, then V - 1 of randomly shifted and
  photometrically jittered frames) and every sampled row takes one of them: the heads learn
  values and actions that hold across camera offsets and lighting they did not see in training.
* Schedule: no online update before `warmup` online transitions. Updates per online transition
  are counted from the first transition (`updates_from="start"`: the learner node, which may
  catch up on the warm-up data at once; the lockstep actor's slack relies on that) or from the
  warm-up transition on (`"warmup"`: SERL's and FastRLAP's loops, r updates per step once training
  starts). `max_update_ratio` caps them (0: no cap); `catch_up(r)` trains up to r. Updates on
  demonstrations before online training (VLAC's offline replay) are not counted.
* Checkpoints: agent, sampling and torch random state, numbered and written atomically; a
  checkpoint loads only into the network shape that wrote it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

import numpy as np
import torch

from robot_rl.agents.policy import Policy
from robot_rl.artifacts import load_checkpoint
from robot_rl.data.frames import FrameReplayBuffer
from robot_rl.data.replay import MixedSampler
from robot_rl.outputs import TEMP_PREFIX, atomic_path

FEATURE_CHUNK = 256
"""Observations encoded per forward pass when caching a frozen encoder's features."""


class Memory(Protocol):
    """What the core needs of a replay memory (ReplayBuffer and FrameReplayBuffer fit)."""

    def __len__(self) -> int: ...
    def sample(self, count: int, rng: np.random.Generator) -> dict[str, np.ndarray]: ...


class OffPolicyAgent(Protocol):
    """What the core needs of an agent (`agents/sac.py: SAC` is one): updates from batches, a deployable policy,
    state for checkpoints. An agent that implements it trains through every loop built on the core."""

    device: torch.device
    obs_dim: int
    """Values per stored observation: the state vector, or a frozen encoder's features."""
    num_updates: int
    policy: Policy
    """The deployable policy (what actors run); its network's encoder is the frozen one whose features the
    memories store, if any."""

    @property
    def batch_rows(self) -> int:
        """Transitions one `update` consumes."""

    @property
    def trains_encoder(self) -> bool:
        """Whether the agent trains an image encoder on the frames themselves (memories then keep frames)."""

    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """One update on `batch_rows` transitions as tensors on `device`; increments `num_updates`."""

    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: Mapping) -> None: ...


class OffPolicyCore:
    def __init__(self, agent: OffPolicyAgent, make_memory: Callable[[], Memory], rng: np.random.Generator, *,
                 demo_fraction: float = 0.5, warmup: int = 256, max_update_ratio: float = 0.0,
                 updates_from: str = "start", feature_views: int = 1, feature_jitter: float = 0.0):
        """`make_memory` builds one empty replay memory (called twice: online and demonstrations);
        a flat memory of features holds `feature_views * agent.obs_dim` values per observation.
        `rng` draws the batches; a caller that also draws from it (resets, expert noise) shares it."""
        if warmup < 0 or max_update_ratio < 0:
            raise ValueError(f"need warmup >= 0 and max_update_ratio >= 0, got {warmup} and {max_update_ratio}")
        if feature_views < 1 or feature_jitter < 0:
            raise ValueError(f"need feature_views >= 1 and feature_jitter >= 0, got {feature_views} and "
                             f"{feature_jitter}")
        if feature_views > 1 and (agent.trains_encoder or agent.policy.network.encoder is None):
            learns = "trains its encoder" if agent.trains_encoder else "learns from state vectors"
            raise ValueError(f"feature_views={feature_views} needs a frozen image encoder's features (what the "
                             f"memories store); this agent {learns}")
        self.feature_views, self.feature_jitter = feature_views, feature_jitter
        if updates_from not in ("start", "warmup"):
            raise ValueError(f"updates_from must be 'start' or 'warmup', got {updates_from!r}")
        self.agent, self.rng, self.device = agent, rng, agent.device
        self.warmup, self.max_update_ratio, self.updates_from = warmup, max_update_ratio, updates_from
        self.online, self.demos = make_memory(), make_memory()
        self.sampler = MixedSampler(self.online, self.demos, demo_fraction)
        self.online_transitions = 0
        """Online transitions stored since the start (more than the memory holds once it wraps)."""
        self.offline_updates = 0
        """Updates made on demonstrations alone, before online training."""

    # ---- storage ------------------------------------------------------------------------------

    def store(self, batch: Mapping[str, Any], stream: str = "default", demonstration: bool = False) -> None:
        """Stores N transitions in the online memory, and the rows a person drove in the demonstration memory
        too; or (`demonstration`) all of them in the demonstration memory only. A flat memory takes a transport
        layout batch; a frame memory takes `obs` / `next_obs` as dicts of N frames per camera + `state`, and
        `stream` names whose consecutive observations they are (each frame is stored once)."""
        if isinstance(self.online, FrameReplayBuffer):
            obs, next_obs = batch["obs"], batch["next_obs"]
            for i in range(len(batch["reward"])):
                self.add({k: v[i] for k, v in obs.items()}, batch["action"][i], batch["reward"][i],
                         {k: v[i] for k, v in next_obs.items()}, batch["terminated"][i], batch["truncated"][i],
                         batch["intervention"][i], stream, demonstration)
            return
        if demonstration:
            self.demos.add_batch(batch)
            return
        self.online.add_batch(batch)
        self.online_transitions += len(batch["reward"])
        intervened = np.asarray(batch["intervention"], dtype=bool)
        if intervened.any():
            self.demos.add_batch({k: np.asarray(v)[intervened] for k, v in batch.items()})

    def add(self, obs, action, reward, next_obs, terminated, truncated, intervention, stream: str,
            demonstration: bool = False) -> None:
        """Stores one transition: online, or (`demonstration`) in the demonstration memory only.
        `obs`/`next_obs` are flat vectors, or for a frame memory camera frames + state (`stream`
        names the episode, so each frame is stored once)."""
        if isinstance(self.online, FrameReplayBuffer):
            # (memory, stream): a correction's frames form their own stream in the demonstration memory.
            targets = [(self.demos, stream)] if demonstration else \
                [(self.online, stream)] + [(self.demos, f"correction-{stream}")] * bool(intervention)
            for memory, name in targets:
                memory.add(obs, action, float(reward), next_obs, bool(terminated), bool(truncated), bool(intervention),
                           stream=name)
            self.online_transitions += not demonstration
            return
        row = {"obs": np.asarray(obs, np.float32)[None], "action": np.asarray(action, np.float32)[None],
               "reward": np.array([reward], np.float32), "next_obs": np.asarray(next_obs, np.float32)[None],
               "terminated": np.array([bool(terminated)]), "truncated": np.array([bool(truncated)]),
               "intervention": np.array([bool(intervention)])}
        if demonstration:
            self.demos.add_batch(row)
        else:
            self.store(row)

    @torch.inference_mode()
    def features(self, observations: Mapping[str, np.ndarray]) -> np.ndarray:
        """A frozen policy encoder's features of N observations (camera frames + `state`), encoded
        in chunks: what the memories keep instead of frames when the encoder does not train.
        (N, feature_views * D): the clean view's D values first, then the augmented views'."""
        encoder = self.agent.policy.network.encoder
        count = len(observations["state"])
        parts = []
        for start in range(0, count, FEATURE_CHUNK):
            part = slice(start, start + FEATURE_CHUNK)
            obs = {k: torch.from_numpy(np.ascontiguousarray(v[part], np.float32 if k == "state" else None))
                   .to(self.device) for k, v in observations.items()}
            views = [encoder(obs)] + [encoder(obs, augment=True, jitter=self.feature_jitter)
                                      for _ in range(self.feature_views - 1)]
            parts.append(torch.cat(views, dim=-1).float().cpu().numpy())
        return np.concatenate(parts) if parts else np.zeros((0, self.feature_views * self.agent.obs_dim), np.float32)

    # ---- training -----------------------------------------------------------------------------

    def batch(self) -> dict[str, Any]:
        """A mixed batch of the agent's `batch_rows` transitions as tensors on the training device."""
        raw = self.sampler.sample(self.agent.batch_rows, self.rng)
        to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(self.device, non_blocking=True)  # noqa: E731
        if isinstance(self.online, FrameReplayBuffer):
            keys = (*self.online.frame_shapes, "state")
            obs, next_obs = {k: to(raw[k]) for k in keys}, {k: to(raw[f"next_{k}"]) for k in keys}
        else:
            obs, next_obs = to(self._one_view(raw["obs"])), to(self._one_view(raw["next_obs"]))
        return {"obs": obs, "next_obs": next_obs, "action": to(raw["action"]), "reward": to(raw["reward"]),
                "terminated": to(raw["terminated"].astype(np.float32)), "intervention": to(raw["intervention"])}

    def _one_view(self, stored: np.ndarray) -> np.ndarray:
        """(B, V * D) stored views -> (B, D), a view drawn per row (DrQ draws obs and next_obs apart too)."""
        if self.feature_views == 1:
            return stored
        rows = stored.reshape(len(stored), self.feature_views, -1)
        return rows[np.arange(len(rows)), self.rng.integers(self.feature_views, size=len(rows))]

    def update(self) -> dict[str, float]:
        """One agent update (SAC: utd_ratio critic steps and one actor step) on a fresh batch."""
        return self.agent.update(self.batch())

    def _counted_transitions(self) -> int:
        """Online transitions that earn updates (see the module's schedule)."""
        return self.online_transitions - (self.warmup - 1 if self.updates_from == "warmup" else 0)

    def ready(self) -> bool:
        """Warm-up done and the update-to-data cap (if any) not reached."""
        if len(self.online) < self.warmup:
            return False
        if self.max_update_ratio > 0:
            online_updates = self.agent.num_updates - self.offline_updates
            return online_updates < self.max_update_ratio * self._counted_transitions()
        return True

    def train_offline(self, updates: int) -> None:
        """Updates on the demonstrations alone (the online memory still empty)."""
        for _ in range(updates):
            self.update()
        self.offline_updates += updates

    def catch_up(self, updates_per_transition: float) -> dict[str, float] | None:
        """Updates until there are `updates_per_transition` per online transition (within the
        schedule); returns the last update's metrics, None if it made none."""
        target = self.offline_updates + int(updates_per_transition * self._counted_transitions())
        metrics = None
        while self.agent.num_updates < target and self.ready():
            metrics = self.update()
        return metrics

    # ---- checkpoints --------------------------------------------------------------------------

    def save_checkpoint(self, run_dir: str | os.PathLike, network: Mapping[str, Any], keep: int,
                        extra: Mapping[str, Any] | None = None) -> Path:
        """Writes <run_dir>/checkpoints/<updates>.pt, makes it <run_dir>/checkpoint.pt (a hard link)
        and keeps the newest `keep` numbered ones. `network`: the settings that decide the weights'
        shapes, checked on load. Atomic: a process killed mid-save leaves the previous checkpoint."""
        run_dir = Path(run_dir)
        state = {"agent": self.agent.state_dict(), "rng": json.dumps(self.rng.bit_generator.state),
                 "torch_rng": torch.get_rng_state(), "network": dict(network), "saved_at": time.time(),
                 "offline_updates": self.offline_updates, **(extra or {})}
        numbered = run_dir / "checkpoints" / f"{self.agent.num_updates:09d}.pt"
        with atomic_path(numbered) as tmp:
            torch.save(state, tmp)
        link = run_dir / f"{TEMP_PREFIX}checkpoint.pt-{os.getpid()}"
        link.unlink(missing_ok=True)
        os.link(numbered, link)
        last = run_dir / "checkpoint.pt"
        os.replace(link, last)
        for old in sorted(numbered.parent.glob("*.pt"))[:-keep]:
            old.unlink()
        return last

    def load_checkpoint(self, path: str | os.PathLike, network: Mapping[str, Any]) -> dict[str, Any]:
        """Loads a checkpoint written by `save_checkpoint` (or a learner before it); returns its
        whole state for the caller's own entries.

        Raises:
            ValueError: it was written with other network shapes (naming the setting).
        """
        state = load_checkpoint(path, self.device)
        saved = state.get("network", {})
        for key, value in network.items():
            if key in saved and saved[key] != value:
                raise ValueError(f"{path} was made with {key}={saved[key]}; this run has {key}={value}: "
                                 "use the same setting, or another run directory")
        self.agent.load_state_dict(state["agent"])
        self.rng.bit_generator.state = json.loads(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        self.offline_updates = int(state.get("offline_updates", 0))
        return state
