"""Progress rewards from camera frames and a language goal (VLAC-style), with a small local model.

Interface shared by every backend (`ProgressScorer`): ``score(first, previous, current, goal) ->
(progress_delta, done_probability)``, batched. ``progress_delta`` in [-1, 1] follows VLAC's
convention: the share of the *remaining* progress gained between ``previous`` and ``current``
(negative: progress lost), so ``accumulate_value`` (VLAC's ``v <- v + (1 - v) * c``, on a 0-1
scale instead of 0-100) turns a stream of deltas back into a value.

The local model (ReWiND-like, small enough to train on a CPU from a handful of demonstrations):

* Frozen image features: the pretrained encoder shipped in ``policies/encoders/`` (trained on our
  own randomized sim images, no external data); frames of any size are area-resized to its input.
* Goal text features: hashed word unigrams, bigrams and character trigrams (no weights to ship,
  deterministic, robust to small rewordings) through a learned projection. We hash rather than
  ship a sentence-embedding wheel: the PyPI wheels that bundle one do not state a licence.
* Head: MLP over (goal, first frame, frame, frame - first frame) -> progress in [0, 1] and a done
  logit. The delta of a (previous, current) pair is computed from the progress of both frames,
  which makes it antisymmetric (swapping the frames negates it) and makes the accumulated value
  equal the model's progress, properties VLAC's pair critic has to learn.
* Training: progress labels ``t / t_success`` on successful demonstrations (1 from the first
  success on), 0 on the frames of failed episodes (`failure_progress`); negatives from mismatched goals (other tasks' goals and distractor sentences,
  progress 0, never done) and still frames (the first frame as current, progress 0); rewound
  clips need no extra samples because progress is a function of the frame, so a clip played
  backwards scores negative deltas. Done positives: frames labelled successful, or the final
  frame of a successful demonstration when it carries no labels.

Files: a directory with ``progress.safetensors`` (head and goal projection; the encoder is loaded
from its own shipped directory named in the card) and ``card.json``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from robot_rl.agents.encoders import ImageEncoder, pretrained_config, random_shift
from robot_rl.artifacts import load_card, load_weights, model_directory, save_card, save_weights

__all__ = ["GOAL_FEATURE_DIM", "DEFAULT_ENCODER", "ProgressScorer", "ProgressModelConfig", "ProgressModel",
           "ProgressEpisode", "progress_episodes", "goal_features", "share_of_remaining", "accumulate_value", "train_progress_model"]

GOAL_FEATURE_DIM = 1024
DEFAULT_ENCODER = "policies/encoders/arm_pick_cube_64"
WEIGHTS_FILE = "progress.safetensors"
CARD_FILE = "card.json"
CARD_FORMAT = "robot_rl.progress_model"
DISTRACTOR_GOALS = ("open the drawer", "stack the red block on the blue block", "wipe the table",
                    "push the cube to the right", "put the cube back down", "move the arm away from the cube",
                    "turn on the light", "pour water into the cup")
"""Goals no training task has: mismatched-goal negatives even when the data hold a single task."""

Frames = Mapping[str, Any]
"""Camera name -> uint8 frames (B, H, W, 3) or one frame (H, W, 3); arrays or tensors."""


class ProgressScorer(Protocol):
    """What the reward node and the learner need of a progress backend."""

    def score(self, first: Frames, previous: Frames, current: Frames,
              goal: str | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(progress_delta in [-1, 1], done_probability in [0, 1]), each (B,) float32. How the Qwen-VL critics'
        token probabilities map onto this: `robot_rl.rewards.vlm_critic`'s module docstring.

        Raises:
            robot_rl.rewards.scorer_input.UnreadableScores: some rows could not be read (a generative
                critic's answer without a number); it carries the batch's readings, NaN in those rows, so
                the others are kept.
        """
        ...


# ---- goal text, progress arithmetic ---------------------------------------------------------

def _tokens(goal: str) -> list[str]:
    words = re.findall(r"[a-z0-9]+", goal.lower())
    grams = [f"w:{w}" for w in words] + [f"b:{a} {b}" for a, b in zip(words, words[1:])]
    for word in words:
        padded = f"#{word}#"
        grams += [f"c:{padded[i:i + 3]}" for i in range(len(padded) - 2)]
    return grams


def goal_features(goals: str | Sequence[str], dim: int = GOAL_FEATURE_DIM) -> np.ndarray:
    """Hashed n-gram features of goal sentences: (B, dim) float32, unit length.

    Each token hashes (CRC-32, stable across runs and machines) to a bucket and a sign; case and
    punctuation are ignored.

    Raises:
        ValueError: a goal is not a string or has no letters or digits.
    """
    goals = [goals] if isinstance(goals, str) else list(goals)
    out = np.zeros((len(goals), dim), np.float32)
    for row, goal in enumerate(goals):
        if not isinstance(goal, str):
            raise ValueError(f"a goal must be a string, got {type(goal).__name__}")
        tokens = _tokens(goal)
        if not tokens:
            raise ValueError(f"goal {goal!r} has no words")
        for token in tokens:
            h = zlib.crc32(token.encode())
            out[row, h % dim] += 1.0 if (h >> 31) & 1 else -1.0
        out[row] /= max(float(np.linalg.norm(out[row])), 1e-6)
    return out


def share_of_remaining(before, after):
    """VLAC's progress delta between two progress values in [0, 1]: the share of the progress that
    remained at `before` which `after` gained, clipped to [-1, 1] (numpy arrays or tensors)."""
    if isinstance(before, torch.Tensor):
        return ((after - before) / (1.0 - before).clamp_min(1e-6)).clamp(-1.0, 1.0)
    before, after = np.asarray(before, np.float64), np.asarray(after, np.float64)
    return np.clip((after - before) / np.maximum(1.0 - before, 1e-6), -1.0, 1.0)


def accumulate_value(deltas, initial: float = 0.0) -> np.ndarray:
    """VLAC's value accumulation along the last axis: v_0 = initial, v_{t+1} = v_t + (1 - v_t) c_t.

    deltas: (..., T) progress deltas in [-1, 1]. Returns (..., T + 1) float64 values, v_0 first
    (VLAC's `critic_to_value_simple` on a 0-1 scale; divide its 0-100 percentages by 100)."""
    deltas = np.asarray(deltas, np.float64)
    if not np.isfinite(deltas).all():
        raise ValueError("progress deltas must be finite")
    values = np.empty((*deltas.shape[:-1], deltas.shape[-1] + 1))
    values[..., 0] = initial
    for t in range(deltas.shape[-1]):
        values[..., t + 1] = values[..., t] + (1.0 - values[..., t]) * np.clip(deltas[..., t], -1.0, 1.0)
    return values


# ---- the local model ------------------------------------------------------------------------

@dataclass
class ProgressModelConfig:
    """Architecture and training of the local progress model."""

    encoder_weights: str = DEFAULT_ENCODER
    """Directory of a shipped pretrained encoder (frozen); its card gives cameras and input size."""
    goal_dim: int = 64
    """Width of the learned projection of the hashed goal features."""
    hidden_dim: int = 256
    """Width of the head's two hidden layers."""
    dropout: float = 0.1
    """Dropout of the head's hidden layers while training."""
    steps: int = 3000
    """Gradient steps."""
    batch_size: int = 256
    """Samples per gradient step."""
    lr: float = 1e-3
    """AdamW learning rate."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    mismatch_prob: float = 0.3
    """Share of samples whose goal is replaced by another task's goal or a distractor (progress 0)."""
    still_prob: float = 0.1
    """Share of samples whose frame is the episode's first frame (progress 0)."""
    failure_progress: float | None = 0.0
    """Progress target of the frames of failed episodes (e.g. random or aborted attempts). 0.0 is
    pessimistic on purpose: states no successful demonstration passed through count as no progress,
    so a policy exploring against this reward cannot farm it off the demonstrations' path (with
    successes only, random arm motion scored 0.77 of full progress on average). None: unlabelled."""
    distractor_goals: tuple[str, ...] = DISTRACTOR_GOALS
    """Extra mismatched goals besides the other tasks' own."""
    augment_copies: int = 4
    """Feature copies per frame computed under DrQ random shift (the first copy is unshifted)."""
    augment_pad: int = 4
    """DrQ random shift padding in pixels for the augmented copies."""
    done_threshold: float | None = None
    """Done probability at or above which a frame counts as done; None: the F1-best threshold on
    the validation episodes."""
    validation_fraction: float = 0.2
    """Share of the successful episodes held out to choose the done threshold and report metrics."""
    seed: int = 0
    """Seed of the split, initialisation, sampling and augmentation."""
    device: str = "cpu"
    """Torch device."""

    def __post_init__(self) -> None:
        self.distractor_goals = tuple(self.distractor_goals)
        if min(self.goal_dim, self.hidden_dim, self.steps, self.batch_size, self.augment_copies) < 1:
            raise ValueError("goal_dim, hidden_dim, steps, batch_size and augment_copies must be >= 1")
        for name in ("dropout", "mismatch_prob", "still_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.lr <= 0 or self.weight_decay < 0 or self.augment_pad < 0:
            raise ValueError("lr must be > 0, weight_decay and augment_pad >= 0")
        if self.failure_progress is not None and not 0.0 <= self.failure_progress <= 1.0:
            raise ValueError(f"failure_progress must be in [0, 1] or None, got {self.failure_progress}")
        if self.done_threshold is not None and not 0.0 < self.done_threshold < 1.0:
            raise ValueError(f"done_threshold must be in (0, 1), got {self.done_threshold}")
        if not 0.0 < self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in (0, 1), got {self.validation_fraction}")


class ProgressModel(nn.Module):
    """(goal, first frame, frame) -> (progress logit, done logit), on frozen image features."""

    def __init__(self, config: ProgressModelConfig):
        super().__init__()
        self.config = config
        self.encoder = ImageEncoder(pretrained_config(config.encoder_weights, augment_pad=config.augment_pad))
        feature_dim = self.encoder.output_dim
        self.goal_projection = nn.Sequential(nn.Linear(GOAL_FEATURE_DIM, config.goal_dim), nn.LayerNorm(config.goal_dim))
        h = config.hidden_dim
        self.head = nn.Sequential(
            nn.Linear(3 * feature_dim + config.goal_dim, h), nn.LayerNorm(h), nn.ReLU(), nn.Dropout(config.dropout),
            nn.Linear(h, h), nn.LayerNorm(h), nn.ReLU(), nn.Dropout(config.dropout),
            nn.Linear(h, 2))
        self.done_threshold = config.done_threshold if config.done_threshold is not None else 0.5
        self.metrics: dict[str, Any] = {}
        self.training_data: dict[str, Any] = {}

    @property
    def cameras(self) -> tuple[str, ...]:
        return self.encoder.config.cameras

    @property
    def device(self) -> torch.device:
        return self.head[0].weight.device

    def frame_tensors(self, frames: Frames) -> dict[str, torch.Tensor]:
        """Each camera as uint8 (B, S, S, 3) on the model's device at the encoder's size S (area
        resize of square frames of another size); one frame (H, W, 3) becomes a batch of one.

        Raises:
            ValueError: a camera is missing, not uint8, not (.., H, W, 3), not square, or the
                cameras' batch sizes differ.
        """
        if not isinstance(frames, Mapping):
            raise ValueError(f"frames must be a dict of camera -> uint8 (B, H, W, 3), got {type(frames).__name__}")
        size, out, batch = self.encoder.config.image_size, {}, None
        for camera in self.cameras:
            if camera not in frames:
                raise ValueError(f"frames lack camera {camera!r}; the model takes {list(self.cameras)}")
            frame = frames[camera]
            frame = frame if isinstance(frame, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(frame))
            if frame.dim() == 3:
                frame = frame[None]
            if frame.dtype != torch.uint8 or frame.dim() != 4 or frame.shape[-1] != 3 or frame.shape[1] != frame.shape[2]:
                raise ValueError(f"camera {camera!r} frames must be square uint8 (B, H, W, 3), got {frame.dtype} "
                                 f"{tuple(frame.shape)}")
            if batch is not None and frame.shape[0] != batch:
                raise ValueError(f"cameras hold different numbers of frames ({batch} and {frame.shape[0]})")
            batch = frame.shape[0]
            frame = frame.to(self.device)
            if frame.shape[1] != size:
                resized = F.interpolate(frame.permute(0, 3, 1, 2).float(), size=(size, size), mode="area")
                frame = resized.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
            out[camera] = frame
        return out

    def features(self, frames: Frames, augment: bool = False) -> torch.Tensor:
        """(B, feature_dim) frozen image features; `augment` applies one DrQ shift per frame."""
        tensors = self.frame_tensors(frames)
        if not augment:
            return self.encoder(tensors)
        images = random_shift(self.encoder.images(tensors), self.config.augment_pad)
        return self.encoder.pool(self.encoder.trunk(images)).flatten(1)

    def goal_embedding(self, goals: str | Sequence[str], batch: int) -> torch.Tensor:
        hashed = torch.from_numpy(goal_features(goals)).to(self.device)
        if hashed.shape[0] == 1:
            hashed = hashed.expand(batch, -1)
        elif hashed.shape[0] != batch:
            raise ValueError(f"give one goal or one per frame ({batch}), got {hashed.shape[0]}")
        return self.goal_projection(hashed)

    def logits(self, first: torch.Tensor, frame: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        """(B, 2) = (progress logit, done logit) from features of the first frame and the frame and
        the goal embedding."""
        return self.head(torch.cat([goal, first, frame, frame - first], dim=-1))

    @torch.inference_mode()
    def progress(self, first: Frames, frames: Frames, goal: str | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(progress in [0, 1], done probability), each (B,), of `frames` against the episode's `first`
        frame (one frame, or one per frame)."""
        self.eval()
        x = self.features(frames)
        f0 = self.features(first)
        if f0.shape[0] == 1:
            f0 = f0.expand_as(x)
        elif f0.shape[0] != x.shape[0]:
            raise ValueError(f"give one first frame or one per frame ({x.shape[0]}), got {f0.shape[0]}")
        out = torch.sigmoid(self.logits(f0, x, self.goal_embedding(goal, x.shape[0]))).float().cpu().numpy()
        return out[:, 0], out[:, 1]

    @torch.inference_mode()
    def score(self, first: Frames, previous: Frames, current: Frames,
              goal: str | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(progress_delta in [-1, 1], done_probability of `current`), each (B,) float32.

        first, previous, current: the episode's first frame, an earlier frame and the frame to score
        (camera -> uint8 (B, H, W, 3) or (H, W, 3); `first` may be a single frame for the batch).
        All frames go through the encoder in one call."""
        self.eval()
        prev_t, cur_t, first_t = (self.frame_tensors(f) for f in (previous, current, first))
        b = next(iter(cur_t.values())).shape[0]
        if next(iter(prev_t.values())).shape[0] != b:
            raise ValueError("previous and current must hold the same number of frames")
        nf = next(iter(first_t.values())).shape[0]
        if nf not in (1, b):
            raise ValueError(f"give one first frame or one per scored frame ({b}), got {nf}")
        stacked = self.encoder({c: torch.cat([prev_t[c], cur_t[c], first_t[c]]) for c in self.cameras})
        prev_f, cur_f, first_f = stacked[:b], stacked[b:2 * b], stacked[2 * b:].expand(b, -1)
        goal = self.goal_embedding(goal, b).repeat(2, 1)
        out = torch.sigmoid(self.logits(first_f.repeat(2, 1), torch.cat([prev_f, cur_f]), goal)).float()
        delta = share_of_remaining(out[:b, 0], out[b:, 0])
        return delta.cpu().numpy().astype(np.float32), out[b:, 1].cpu().numpy().astype(np.float32)

    def save(self, path: str | os.PathLike) -> None:
        """Writes `path/progress.safetensors` (goal projection and head) and `path/card.json`."""
        weights = {k: v for k, v in self.state_dict().items() if not k.startswith("encoder.")}
        config = dataclasses.asdict(dataclasses.replace(self.config, done_threshold=self.done_threshold))
        config["encoder_weights"] = str(self.config.encoder_weights)
        card = {"format": CARD_FORMAT, "cameras": list(self.cameras), "image_size": self.encoder.config.image_size,
                "done_threshold": self.done_threshold, "metrics": self.metrics, "training_data": self.training_data,
                "config": config}
        with model_directory(path) as tmp:
            save_weights(weights, tmp / WEIGHTS_FILE)
            save_card(card, tmp / CARD_FILE)

    @classmethod
    def load(cls, path: str | os.PathLike, device: str | torch.device = "cpu") -> ProgressModel:
        """A model saved by `save`, in eval mode on `device`; its encoder comes from the directory its
        card names (a path relative to the package, as shipped, or absolute).

        Raises:
            FileNotFoundError: the directory lacks the card or the weights.
            ValueError: the card is not a progress model card or the weights do not fit it.
        """
        path = Path(path)
        if not (path / CARD_FILE).is_file() or not (path / WEIGHTS_FILE).is_file():
            raise FileNotFoundError(f"{path} must hold {CARD_FILE} and {WEIGHTS_FILE} (train one with "
                                    "`robot-rl reward train --demos <dataset> --out <dir>`)")
        card = load_card(path / CARD_FILE)
        if card.get("format") != CARD_FORMAT:
            raise ValueError(f"{path / CARD_FILE} is not a progress model card")
        config = ProgressModelConfig(**{**card["config"], "device": str(device)})
        model = cls(config)
        try:
            missing, unexpected = model.load_state_dict(load_weights(path / WEIGHTS_FILE), strict=False)
        except RuntimeError as exc:
            raise ValueError(f"{path / WEIGHTS_FILE} does not fit the architecture of its card: {exc}") from None
        if unexpected or any(not k.startswith("encoder.") for k in missing):
            raise ValueError(f"{path / WEIGHTS_FILE} does not fit its card: missing "
                             f"{[k for k in missing if not k.startswith('encoder.')]}, unexpected {unexpected}")
        model.done_threshold = float(card["done_threshold"])
        model.metrics, model.training_data = card.get("metrics", {}), card.get("training_data", {})
        return model.to(device).eval()


# ---- training -------------------------------------------------------------------------------

@dataclass
class ProgressEpisode:
    """One recorded episode as the progress model sees it."""

    frames: dict[str, np.ndarray]
    """Camera -> uint8 (T + 1, H, W, 3), every observation of the episode."""
    goal: str
    """The task's goal sentence."""
    success: bool
    """Whether the episode reached the goal."""
    success_labels: np.ndarray | None = None
    """(T + 1,) int8 per observation: 1 shows success, 0 not, -1 unknown; None: none known."""
    done_frames: np.ndarray = field(init=False)
    """(T + 1,) bool done labels derived from the above (see the module docstring)."""
    progress_labels: np.ndarray = field(init=False)
    """(T + 1,) progress targets in [0, 1] (meaningful for successful episodes)."""

    def __post_init__(self) -> None:
        lengths = {c: np.asarray(f).shape[0] for c, f in self.frames.items()}
        if not lengths or len(set(lengths.values())) != 1 or min(lengths.values()) < 2:
            raise ValueError(f"an episode needs >= 2 frames, the same number per camera, got {lengths}")
        n = next(iter(lengths.values()))
        labels = None if self.success_labels is None else np.asarray(self.success_labels)
        if labels is not None and labels.shape != (n,):
            raise ValueError(f"success_labels must have one entry per frame ({n}), got {labels.shape}")
        done = np.zeros(n, bool)
        if labels is not None and (labels >= 0).any():
            done = labels == 1
        elif self.success:
            done[-1] = True
        first_success = int(np.argmax(done)) if done.any() else n - 1
        self.done_frames = done
        self.progress_labels = np.minimum(np.arange(n) / max(first_success, 1), 1.0).astype(np.float32)


def _select_threshold(probabilities: np.ndarray, labels: np.ndarray) -> float:
    from robot_rl.rewards.success import classification_metrics

    candidates = np.round(np.arange(0.05, 0.96, 0.05), 2)
    f1 = np.array([classification_metrics(probabilities >= t, labels)["f1"] for t in candidates])
    # The lowest threshold within 0.02 of the best F1: done probabilities of success frames drop under
    # appearance shift (measured on the evaluation ranges), while failures stay far below.
    return float(candidates[np.flatnonzero(f1 >= f1.max() - 0.02)[0]])


def train_progress_model(episodes: Sequence[ProgressEpisode], config: ProgressModelConfig | None = None,
                         data_description: str = "") -> tuple[ProgressModel, dict[str, Any]]:
    """Trains the local progress model on recorded episodes of one or more tasks.

    Successful episodes teach progress and done; failed ones teach "not done" only. A share of the
    successful episodes (`validation_fraction`, at least one) is held out to pick the done threshold
    and report validation metrics; then the model is used as trained (no refit).

    Returns the model (eval mode) and its metrics (done F1 and threshold on the validation episodes,
    final losses, sample counts).
    """
    from robot_rl.rewards.success import classification_metrics

    config = config or ProgressModelConfig()
    successes = [i for i, e in enumerate(episodes) if e.success]
    if len(successes) < 2:
        raise ValueError(f"the progress model needs at least 2 successful episodes, got {len(successes)}")
    rng = np.random.default_rng(config.seed)
    held = max(1, int(round(config.validation_fraction * len(successes))))
    validation = set(rng.permutation(successes)[:held].tolist())
    train = [i for i in range(len(episodes)) if i not in validation]
    device = torch.device(config.device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(config.seed)
        model = ProgressModel(config).to(device)
        # Frozen features once per frame and augmented copy: the head trains on cached features.
        with torch.no_grad():
            cached = torch.cat([torch.stack([model.features(e.frames, augment=k > 0)
                                             for k in range(config.augment_copies)]) for e in episodes], dim=1)
        offsets = np.cumsum([0] + [len(e.progress_labels) for e in episodes])
        goals = sorted({e.goal for e in episodes})
        goal_bank = torch.from_numpy(goal_features(goals + [g for g in config.distractor_goals if g not in goals]))
        goal_bank = goal_bank.to(device)
        goal_index = {g: i for i, g in enumerate(goals)}
        frames_of = [(i, t) for i in train for t in range(len(episodes[i].progress_labels))]
        index = np.array([offsets[i] + t for i, t in frames_of])
        first_index = np.array([offsets[i] for i, _ in frames_of])
        failed = -1.0 if config.failure_progress is None else config.failure_progress
        progress_target = np.array([episodes[i].progress_labels[t] if episodes[i].success else failed
                                    for i, t in frames_of], np.float32)
        done_target = np.array([episodes[i].done_frames[t] for i, t in frames_of], np.float32)
        own_goal = np.array([goal_index[episodes[i].goal] for i, _ in frames_of])
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        done_weight = torch.tensor(max((1 - done_target.mean()) / max(done_target.mean(), 1e-6), 1.0), device=device)
        model.train()
        losses = []
        for _ in range(config.steps):
            pick = rng.integers(0, len(index), config.batch_size)
            copies = torch.as_tensor(rng.integers(0, config.augment_copies, (2, config.batch_size)))
            still = rng.random(config.batch_size) < config.still_prob
            first = cached[copies[0], torch.as_tensor(first_index[pick])]
            frame = cached[copies[1], torch.as_tensor(np.where(still, first_index[pick], index[pick]))]
            goal_ids = own_goal[pick].copy()
            mismatch = rng.random(config.batch_size) < config.mismatch_prob
            if len(goal_bank) > 1:
                shift = rng.integers(1, len(goal_bank), config.batch_size)
                goal_ids = np.where(mismatch, (goal_ids + shift) % len(goal_bank), goal_ids)
            else:
                mismatch[:] = False
            y = np.where(mismatch | still, 0.0, progress_target[pick])
            d = np.where(mismatch | still, 0.0, done_target[pick])
            valid = torch.as_tensor(y >= 0, device=device)  # unlabelled failed episodes: -1
            logits = model.logits(first, frame, model.goal_projection(goal_bank[torch.as_tensor(goal_ids)]))
            y_t = torch.as_tensor(np.maximum(y, 0.0), device=device)
            progress_loss = (F.binary_cross_entropy_with_logits(logits[:, 0], y_t, reduction="none") * valid).sum() \
                / valid.sum().clamp_min(1)
            done_loss = F.binary_cross_entropy_with_logits(logits[:, 1], torch.as_tensor(d, device=device),
                                                           pos_weight=done_weight)
            loss = progress_loss + done_loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append((progress_loss.item(), done_loss.item()))
    model.eval()
    probabilities, labels = [], []
    for i in sorted(validation):
        _, done = model.progress({c: f[:1] for c, f in episodes[i].frames.items()}, episodes[i].frames,
                                 episodes[i].goal)
        probabilities.append(done)
        labels.append(episodes[i].done_frames)
    probabilities, labels = np.concatenate(probabilities), np.concatenate(labels)
    model.done_threshold = (config.done_threshold if config.done_threshold is not None
                            else _select_threshold(probabilities, labels))
    final = np.mean(losses[-50:], axis=0)
    metrics = {"validation_episodes": len(validation), "train_episodes": len(train),
               "done_threshold": model.done_threshold,
               "validation_done": classification_metrics(probabilities >= model.done_threshold, labels),
               "final_progress_loss": float(final[0]), "final_done_loss": float(final[1]), "steps": config.steps}
    model.metrics = metrics
    model.training_data = {"description": data_description, "goals": goals, "episodes": len(episodes),
                           "successful": len(successes), "frames": int(cached.shape[1])}
    return model, metrics


def progress_episodes(dataset_path: str | os.PathLike, goal: str | None = None,
                      cameras: Sequence[str] | None = None) -> list[ProgressEpisode]:
    """Every episode of an episode dataset (teleop recording or scripted) as a `ProgressEpisode`.

    The goal is `goal`, else the dataset's task config `goal`. An episode succeeded if any step is
    labelled success, or, without labels, if it ended terminated with a positive reward.

    Raises:
        ValueError: no goal is known, or the dataset lacks a camera.
    """
    from robot_rl.data.episodes import EpisodeDataset

    dataset = EpisodeDataset(dataset_path)
    goal = goal if goal is not None else dataset.task_config.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        raise ValueError(f"{dataset_path} names no goal in its task config: pass the goal sentence (--goal)")
    cameras = tuple(dataset.schema.cameras) if cameras is None else tuple(cameras)
    missing = sorted(set(cameras) - set(dataset.schema.cameras))
    if missing or not cameras:
        raise ValueError(f"{dataset_path} lacks cameras {missing or 'altogether'}; it has {sorted(dataset.schema.cameras)}")
    episodes = []
    for i in range(len(dataset)):
        episode = dataset.episode(i)
        step_labels = episode["success_label"].astype(np.int8)
        labelled = bool((step_labels >= 0).any())
        # Labels describe the observation a step reached; a labelled episode does not start in success.
        labels = np.concatenate([[0 if labelled else -1], step_labels]).astype(np.int8)
        success = bool((step_labels == 1).any()) if labelled else bool(episode["terminated"][-1]
                                                                            and episode["reward"][-1] > 0)
        episodes.append(ProgressEpisode({c: episode[c] for c in cameras}, goal, success, labels))
    return episodes
