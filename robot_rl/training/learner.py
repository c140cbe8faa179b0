"""The learner's logic without ROS: ingest transition payloads, train SAC, publish policies,
checkpoint and resume.

Durability: every accepted payload is appended to the journal before it is acknowledged,
and the journal is the replay memory's persistent form. A restarted learner loads its last
checkpoint (networks, optimizers, temperature, counters) and replays the journal, so the
buffer and the duplicate tracker come back exactly; resends from actors are recognised as
duplicates and acknowledged again.

Learned rewards: an actor training on the reward node's rewards sends the rows whose reward had not
reached it in time flagged `reward_late` (with their observation `stamp`); the learner, which hears
the reward node too (`on_learned_reward`, `on_learned_done`), holds those rows until their reward
comes and stores them then, or drops them after `late_reward_timeout_s` (never trains on a row
without its reward).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.agents.encoders import EncoderConfig, pretrained_config
from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.config_fields import setting
from robot_rl.data.frames import FrameReplayBuffer
from robot_rl.data.replay import ReplayBuffer
from robot_rl.device import resolve_device
from robot_rl.training.off_policy import OffPolicyCore
from robot_rl.transport import codec
from robot_rl.transport.journal import PayloadJournal
from robot_rl.transport.kinds import ACK, POLICY, TRANSITIONS
from robot_rl.transport.layout import transition_layout, validate_transitions
from robot_rl.transport.sequences import SequenceTracker


@dataclass
class LearnerConfig:
    """Learner settings; the `setting` fields are the learner node's parameters of the same name."""

    obs_dim: int
    """Flat observation length (pixel tasks: the proprioception)."""
    action_dim: int
    sac: SACConfig = field(default_factory=SACConfig)
    cameras: tuple[str, ...] = ()
    """Pixel tasks: camera frames in each transition (obs_<camera>, next_obs_<camera>)."""
    image_size: int = 64
    """Height and width of those frames."""
    encoder: str | None = setting(None, "Pixel tasks: pretrained encoder directory, used frozen ('': a conv encoder "
                                  "trained from scratch through the critic; state tasks: unused).", unset="")
    """Frozen: features are computed once per received frame and the replay memory holds features, not pixels.
    From scratch (DrQ): the replay memory holds the frames (each once) and every update trains the encoder."""
    feature_views: int = setting(1, "Pixel tasks: views of each observation whose features are stored (the clean "
                                 "one, then shifted and photometrically jittered ones; 1: clean only).", low=1, high=16)
    """A frozen encoder's stand-in for augmenting frames at every update (`training/off_policy.py`)."""
    feature_jitter: float = setting(0.2, "Photometric jitter strength of the augmented views.", low=0.0, high=1.0)
    buffer_capacity: int = setting(200_000, "Online replay capacity (transitions).", low=1, high=50_000_000)
    demo_fraction: float = setting(0.5, "Share of each batch from demonstrations.", low=0.0, high=1.0)
    """Demonstrations and interventions (RLPD: 0.5)."""
    warmup_transitions: int = setting(256, "Online transitions before the first update.", low=0, high=10_000_000)
    max_update_ratio: float = setting(8.0, "Max updates per received transition (0: unbounded); in lockstep the graph "
                                      "holds it to the actor's sync_updates_per_step.", low=0.0, high=1000.0)
    """On the wall clock the learner trains on every spare cycle up to this cap: a robot's time is the expensive
    part, and RLPD's LayerNorm critic ensemble keeps high update-to-data ratios stable. 8 updates (each of
    `utd_ratio` critic steps) per transition lets a fast learner use a real robot's 10-30 Hz; a CPU learner is
    held by its compute first. 0 trains as fast as possible."""
    seed: int = setting(0, "Random seed.", low=0, high=2**31 - 1)
    device: str = setting("auto", "Training device.", choices=("auto", "cpu", "cuda"))
    """auto: CUDA when present."""
    initial_actor: str | None = setting(None, "Frame-stack policy directory (an IQL export) whose actor starts the "
                                        "actor; the critics start fresh (FastRLAP). '' for a fresh actor.", unset="")
    """A resumed run keeps its own weights."""
    late_reward_timeout_s: float = 30.0
    """Learned rewards: how long transitions sent with their reward flagged late wait for it on the
    reward topic before they are dropped (never trained on without their reward)."""
    keep_checkpoints: int = setting(3, "Numbered checkpoints (checkpoints/<updates>.pt) kept besides checkpoint.pt.",
                                    low=1, high=100_000)


@dataclass
class IngestResult:
    actor_id: str
    seq: int
    transitions: int
    duplicate: bool
    batch: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    """What `store` puts in the memories (empty for a duplicate)."""
    episodes: list[dict[str, Any]] = field(default_factory=list)
    """The actor's summaries of the episodes that ended in this payload."""


class LearnerCore:
    def __init__(self, config: LearnerConfig, run_dir: str | os.PathLike, key: bytes | None = None):
        """`key`: the run's secret (robot_rl/transport/secret.py). With it, only transition payloads
        signed with it are stored (others are counted in `forged`) and policies and acks are signed."""
        self.config = config
        self.key = key
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.device = torch.device(resolve_device(config.device))
        torch.manual_seed(config.seed)
        frame_shapes = {camera: (config.image_size, config.image_size, 3) for camera in config.cameras}
        # What arrives (frames for pixel tasks) and what is stored (features of the frozen encoder).
        self.wire_layout = transition_layout(config.obs_dim, config.action_dim, frame_shapes)
        frozen = trained = None
        if config.cameras and config.encoder:
            frozen = pretrained_config(config.encoder, state_dim=config.obs_dim)
            if set(frozen.cameras) != set(config.cameras) or frozen.image_size != config.image_size:
                raise ValueError(f"encoder {config.encoder} is for cameras {frozen.cameras} at {frozen.image_size} "
                                 f"px, the task has {config.cameras} at {config.image_size} px")
        elif config.cameras:
            trained = EncoderConfig(cameras=config.cameras, image_size=config.image_size, state_dim=config.obs_dim)
        self.agent = SAC(0 if trained else config.obs_dim, config.action_dim, config.sac, self.device,
                         encoder=trained, policy_encoder=frozen)
        if config.initial_actor:
            self._load_initial_actor(config.initial_actor)
        if trained:
            # The frames themselves; a state-less task keeps a 1-entry placeholder state (the encoder ignores it).
            make_memory = lambda: FrameReplayBuffer(config.buffer_capacity, frame_shapes,  # noqa: E731
                                                    max(config.obs_dim, 1), config.action_dim)
        else:
            layout = transition_layout(config.feature_views * self.agent.obs_dim, config.action_dim)
            make_memory = lambda: ReplayBuffer(config.buffer_capacity, layout)  # noqa: E731
        self.core = OffPolicyCore(self.agent, make_memory,
                                  np.random.default_rng(config.seed), demo_fraction=config.demo_fraction,
                                  warmup=config.warmup_transitions, max_update_ratio=config.max_update_ratio,
                                  feature_views=config.feature_views, feature_jitter=config.feature_jitter)
        self.online, self.demos = self.core.online, self.core.demos
        self.memory_lock = threading.Lock()
        """Held while the memories are written or sampled: the learner node stores on one thread while it trains on
        another."""
        self.tracker = SequenceTracker()
        # Sequence numbers of journal segments that pruning may delete: a replay of one stays a replay.
        self.sequences_path = self.run_dir / "sequences.json"
        self.journal = PayloadJournal(self.run_dir / "journal")
        self.policy_version = 0
        self.rejected: dict[str, int] = {}
        self.duplicates = 0
        """Payloads already stored: an actor's resend after a lost ack, or a replay of a captured one."""
        self.forged = 0
        """Payloads not signed with the run's key (also counted in `rejected`)."""
        self.resumed = False
        self.episode_stats: list[dict[str, Any]] = []
        # Learned rewards that came late: rows waiting for their reward, and recent rewards by stamp
        # (a reward may reach us before the batch that needs it).
        self.awaiting_reward: list[tuple[float, int, dict[str, np.ndarray]]] = []
        self.recent_rewards: dict[int, float] = {}
        self.recent_dones: set[int] = set()
        self.late_rewards_filled = 0
        self.late_rewards_dropped = 0

    def _load_initial_actor(self, directory: str) -> None:
        from robot_rl.agents.frame_stack_policy import load_frame_stack_policy

        try:
            actor = load_frame_stack_policy(directory).actor
            self.agent.actor.load_state_dict(actor.state_dict())
        except (FileNotFoundError, KeyError, RuntimeError) as exc:
            raise ValueError(f"initial_actor {directory} does not fit this learner's actor "
                             f"({self.agent.obs_dim} -> {self.agent.continuous_dim}): {exc}") from None

    # ---- data in ------------------------------------------------------------------------------

    def load_demonstrations(self, arrays: dict[str, np.ndarray]) -> int:
        count = validate_transitions(self.wire_layout, arrays)
        self._store_featurized(arrays, stream="demonstrations", demonstration=True)
        return count

    def _store_featurized(self, batch: dict[str, np.ndarray], stream: str, demonstration: bool = False) -> None:
        # Features outside the lock: a frozen encoder's pass runs beside an update.
        features = self._featurize(batch)
        with self.memory_lock:
            self.core.store(features, stream=stream, demonstration=demonstration)

    def _featurize(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        """Pixel tasks: frames + proprioception -> the frozen encoder's features, or (an encoder trained here)
        observations as the frame memory takes them."""
        if not self.config.cameras:
            return batch
        out = {k: v for k, v in batch.items() if k in ("action", "reward", "terminated", "truncated", "intervention")}
        for key in ("obs", "next_obs"):
            state = np.asarray(batch[key], np.float32)
            observation = {**{camera: batch[f"{key}_{camera}"] for camera in self.config.cameras},
                           "state": state if state.shape[1] else np.zeros((len(state), 1), np.float32)}
            out[key] = observation if isinstance(self.online, FrameReplayBuffer) else self.core.features(observation)
        return out

    def ingest(self, data: bytes | memoryview) -> IngestResult:
        """Accepts one transition payload and stores it (`accept`, then `store`). Raises as `accept` does."""
        result = self.accept(data)
        self.store(result)
        return result

    def accept(self, data: bytes | memoryview) -> IngestResult:
        """Validates and journals one transition payload, after which it may be acknowledged: a restarted learner
        replays its journal, so it is stored even if `store` never runs. Raises codec.PayloadError or ValueError
        (counted in `rejected`) and then leaves every structure unchanged. A resend is recognised (`duplicate`)."""
        try:
            return self._accept(data, journal=True)
        except (codec.PayloadError, ValueError) as exc:
            reason = getattr(exc, "reason", "bad_transitions")
            self.forged += reason in codec.FORGED_REASONS
            self.rejected[reason] = self.rejected.get(reason, 0) + 1
            raise

    def _accept(self, data: bytes | memoryview, journal: bool) -> IngestResult:
        # The journal holds only payloads verified before they were written.
        payload = codec.decode(data, expect_kind=TRANSITIONS, key=self.key if journal else None)
        actor_id, seq = payload.meta.get("actor_id"), payload.meta.get("seq")
        if not isinstance(actor_id, str) or not actor_id or not isinstance(seq, int) or seq < 0:
            raise codec.PayloadError("missing_field", "transition payload needs meta actor_id (str) and seq (int >= 0)")
        batch = payload.arrays
        n = validate_transitions(self.wire_layout, batch)
        late = np.asarray(batch.get("reward_late", np.zeros(n, bool)), bool)
        if late.shape != (n,) or (late.any() and np.asarray(batch.get("stamp", ())).shape != (n,)):
            raise ValueError("reward_late and stamp must have one entry per transition")
        if self.tracker.seen(actor_id, seq):
            self.duplicates += 1
            return IngestResult(actor_id, seq, n, duplicate=True)
        if journal:
            segments = len(self.journal.segment_transitions)
            self.journal.append(bytes(data) if not isinstance(data, bytes) else data, n)
            if len(self.journal.segment_transitions) > segments:  # a new segment: older ones may be pruned
                self.tracker.save(self.sequences_path)
            self.journal.prune(self.config.buffer_capacity)
        self.tracker.add(actor_id, seq)
        return IngestResult(actor_id, seq, n, duplicate=False, batch=batch,
                            episodes=list(payload.meta.get("episodes", [])))

    def store(self, result: IngestResult) -> None:
        """Puts an accepted payload's transitions in the memories; rows whose learned reward came late wait for it."""
        batch = result.batch
        if result.duplicate:
            return
        late = np.asarray(batch.get("reward_late", np.zeros(result.transitions, bool)), bool)
        if late.any():
            self._hold_late(batch, late)
            batch = {k: np.asarray(v)[~late] for k, v in batch.items()}
        self._store_featurized(batch, stream=result.actor_id)
        for episode in result.episodes:
            self.episode_stats.append({**episode, "robot": result.actor_id})  # a fleet's episodes told apart

    # ---- learned rewards that came late ---------------------------------------------------------

    def _hold_late(self, batch: dict[str, np.ndarray], late: np.ndarray) -> None:
        deadline = time.monotonic() + self.config.late_reward_timeout_s
        stamps = np.asarray(batch["stamp"], np.int64)
        for row in np.flatnonzero(late):
            self.awaiting_reward.append((deadline, int(stamps[row]), {k: np.asarray(v)[row:row + 1]
                                                                     for k, v in batch.items()}))
        self._fill_late()

    def on_learned_reward(self, stamp_ns: int, reward: float, done: bool = False) -> None:
        """A reward (and done) from the reward node, for rows sent before it reached their actor."""
        if not np.isfinite(reward):
            raise ValueError(f"learned reward must be finite, got {reward}")
        self.recent_rewards[int(stamp_ns)] = float(reward)
        if done:
            self.recent_dones.add(int(stamp_ns))
        while len(self.recent_rewards) > 10_000:  # oldest first (dicts keep insertion order)
            self.recent_rewards.pop(next(iter(self.recent_rewards)))
        if self.awaiting_reward:
            self._fill_late()

    def on_learned_done(self, stamp_ns: int) -> None:
        self.recent_dones.add(int(stamp_ns))
        if len(self.recent_dones) > 10_000:
            self.recent_dones.clear()
        if self.awaiting_reward:
            self._fill_late()

    def _fill_late(self) -> None:
        waiting = []
        now = time.monotonic()
        for deadline, stamp, row in self.awaiting_reward:
            if stamp in self.recent_rewards:
                row = {**row, "reward": np.array([self.recent_rewards[stamp]], np.float32)}
                if stamp in self.recent_dones:
                    row["terminated"], row["truncated"] = np.array([True]), np.array([False])
                self._store_featurized(row, stream="late rewards")
                self.late_rewards_filled += 1
            elif now > deadline:
                self.late_rewards_dropped += 1
            else:
                waiting.append((deadline, stamp, row))
        self.awaiting_reward = waiting

    def expire_late(self) -> None:
        """Drops late rows whose reward never came (call periodically)."""
        if self.awaiting_reward:
            self._fill_late()

    # ---- training -----------------------------------------------------------------------------

    @property
    def transitions_received(self) -> int:
        return self.core.online_transitions

    def ready(self) -> bool:
        """Enough online data to start, and under the update-to-data cap if one is set."""
        return self.core.ready()

    def updates_per_transition(self) -> float:
        """The achieved update-to-data ratio: online updates (not those on demonstrations before any
        transition) per transition received."""
        online_updates = self.agent.num_updates - self.core.offline_updates
        return round(online_updates / self.transitions_received, 3) if self.transitions_received else 0.0

    def train_step(self) -> dict[str, float]:
        """One update; payloads may be ingested meanwhile (on another thread) but not while its batch is drawn."""
        with self.memory_lock:
            batch = self.core.batch()
        return self.agent.update(batch)

    # ---- data out -----------------------------------------------------------------------------

    def policy_payload(self) -> bytes:
        self.policy_version += 1
        arrays = codec.state_dict_to_arrays(self.agent.policy.network.state_dict())
        return codec.encode(POLICY, arrays, {
            "version": self.policy_version, "spec": self.agent.policy.spec.to_json(),
            "num_updates": self.agent.num_updates, "transitions": self.transitions_received,
        }, key=self.key)

    def ack_payload(self, actor_id: str, seqs: list[int]) -> bytes:
        return codec.encode(ACK, {"seqs": np.asarray(seqs, dtype=np.int64)}, {"actor_id": actor_id}, key=self.key)

    # ---- checkpoints --------------------------------------------------------------------------

    @property
    def checkpoint_path(self) -> Path:
        """The last checkpoint (a hard link to the newest numbered one)."""
        return self.run_dir / "checkpoint.pt"

    def network_shape(self) -> dict[str, Any]:
        """The settings that decide the networks' weight shapes (named as the learner node's
        parameters, or the task's sizes): a checkpoint only loads into the same shape."""
        c = self.config
        return {"obs_dim": c.obs_dim, "action_dim": c.action_dim, "cameras": list(c.cameras),
                "image_size": c.image_size if c.cameras else None, "encoder": c.encoder,
                "hidden_dims": list(c.sac.hidden_dims), "num_critics": c.sac.num_critics,
                "grasp_critic": c.sac.grasp_critic}

    def save_checkpoint(self) -> None:
        """Writes checkpoints/<updates>.pt, makes it checkpoint.pt and keeps the newest
        `keep_checkpoints` numbered ones (atomic: see OffPolicyCore.save_checkpoint)."""
        self.core.save_checkpoint(self.run_dir, self.network_shape(), self.config.keep_checkpoints,
                                  {"policy_version": self.policy_version})

    def restore(self) -> bool:
        """Loads the last checkpoint and replays the journal; returns True if anything was restored.

        Raises:
            ValueError: the checkpoint was made with other network shapes (see `network_shape`).
        """
        restored = False
        if self.checkpoint_path.exists():
            state = self.core.load_checkpoint(self.checkpoint_path, self.network_shape())
            self.policy_version = int(state["policy_version"])
            restored = True
        for segment, data in self.journal.replay():
            try:
                result = self._accept(data, journal=False)
                self.store(result)
            except (codec.PayloadError, ValueError):
                continue  # written by an incompatible version: skip, never crash on old data
            if not result.duplicate:
                self.journal.note_replayed(segment, result.transitions)
                restored = True
        if self.sequences_path.exists():
            self.tracker.merge(SequenceTracker.load(self.sequences_path))
        self.episode_stats.clear()  # logged (episodes.jsonl, TensorBoard) when they first arrived
        self.resumed = restored
        return restored

    def close(self) -> None:
        self.journal.close()

    def summary(self) -> dict[str, Any]:
        return {
            "updates": self.agent.num_updates, "policy_version": self.policy_version,
            "online_size": len(self.online), "demo_size": len(self.demos),
            "transitions_received": self.transitions_received, "duplicates": self.duplicates, "forged": self.forged,
            "rejected": sum(self.rejected.values()), "resumed": self.resumed,
            "updates_per_transition": self.updates_per_transition(),
            "config": asdict(self.config),
        }
