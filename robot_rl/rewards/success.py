"""Image success classifier as a sparse reward (SERL / HIL-SERL / LeRobot reward classifiers).

A binary classifier looks at the camera frames of one observation and says whether the task is
done; thresholding its probability gives the sparse reward 1.0 / 0.0 that SERL and HIL-SERL
train on, and a predicted success ends the episode (HIL-SERL).

* Model (HIL-SERL's `networks/reward_classifier.py`): image encoder -> Linear 256 -> Dropout 0.1
  -> LayerNorm -> ReLU -> Linear 1, trained with BCE on balanced batches (as many positives as
  negatives), DrQ random shift pad 4, Adam lr 1e-4; LeRobot adds weight decay 0.01 and gradient
  clipping at 1.0. The encoder is a conv net trained from scratch or a frozen pretrained one.
* Data: frames labelled success / failure, e.g. the `success_label`s of an episode dataset
  (`labelled_frames_from_dataset`). A stratified held-out share measures precision and recall;
  frames of one episode are strongly correlated, so a held-out split of frames flatters the
  classifier compared with unseen episodes.
* Files: a directory with `classifier.safetensors` (all weights, the encoder's too) and
  `card.json` (config, cameras, image size, threshold, held-out metrics, training data).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from robot_rl.agents.encoders import EncoderConfig, ImageEncoder, pretrained_config
from robot_rl.artifacts import load_card, load_weights, model_directory, save_card, save_weights
from robot_rl.data.episodes import EpisodeDataset

WEIGHTS_FILE = "classifier.safetensors"
CARD_FILE = "card.json"
CARD_FORMAT = "robot_rl.success_classifier"


@dataclass
class SuccessClassifierConfig:
    """Architecture and training of a success classifier (defaults: HIL-SERL, LeRobot regularisation)."""

    encoder: EncoderConfig | None = None
    """Image encoder. None: a conv net trained from scratch over the training frames' cameras and
    image size, or the frozen pretrained encoder at `encoder_weights` when that is given.
    Its `state_dim` must be 0: the classifier sees pixels only."""
    encoder_weights: str | None = None
    """Directory (or safetensors file) of a pretrained encoder (`robot-rl pretrain-encoder`),
    used frozen when `encoder` is None."""
    hidden_dim: int = 256
    """Width of the head's hidden layer."""
    dropout: float = 0.1
    """Dropout probability of the head's hidden layer while training."""
    lr: float = 1e-4
    """AdamW learning rate."""
    weight_decay: float = 0.01
    """AdamW weight decay (LeRobot: 0.01)."""
    grad_clip_norm: float = 1.0
    """Gradient norm clipping (LeRobot: 1.0); 0: off."""
    steps: int = 150
    """Gradient steps (HIL-SERL: 150 on a frozen encoder; a conv trained from scratch needs more)."""
    batch_size: int = 256
    """Frames per gradient step (HIL-SERL: 128 positives + 128 negatives)."""
    balanced: bool = True
    """Draw half of every batch from the positives and half from the negatives (HIL-SERL), so rare
    successes weigh as much as the many failures; False: draw uniformly from all frames."""
    augment_pad: int = 4
    """DrQ random shift padding in pixels while training (0: off)."""
    threshold: float = 0.5
    """Success probability at or above which a frame counts as success (LeRobot docs: 0.7)."""
    holdout_fraction: float = 0.2
    """Share of the positives and of the negatives kept out of training to measure the classifier."""
    seed: int = 0
    """Seed of the held-out split, weight initialisation, batch sampling, augmentation and dropout."""
    device: str = "cpu"
    """Torch device to train on."""

    def __post_init__(self) -> None:
        if isinstance(self.encoder, Mapping):  # read back from a card
            self.encoder = EncoderConfig(**self.encoder)
        if self.encoder is not None:
            if not isinstance(self.encoder, EncoderConfig):
                raise ValueError(f"encoder must be an EncoderConfig or None, got {type(self.encoder).__name__}")
            if self.encoder.state_dim != 0:
                raise ValueError(f"the success classifier sees pixels only: encoder state_dim must be 0, "
                                 f"got {self.encoder.state_dim}")
            if self.encoder_weights is not None:
                raise ValueError("give either an encoder config or encoder_weights, not both")
        if self.hidden_dim < 1 or self.steps < 1 or self.batch_size < 1:
            raise ValueError("hidden_dim, steps and batch_size must be >= 1")
        if self.balanced and self.batch_size % 2:
            raise ValueError(f"balanced batches hold as many positives as negatives: batch_size must be even, "
                             f"got {self.batch_size}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.lr <= 0 or self.weight_decay < 0 or self.grad_clip_norm < 0 or self.augment_pad < 0:
            raise ValueError("lr must be > 0; weight_decay, grad_clip_norm and augment_pad >= 0")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        if not 0.0 < self.holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction must be in (0, 1), got {self.holdout_fraction}")

    def resolved_encoder(self, cameras: Sequence[str], image_size: int) -> EncoderConfig:
        """The encoder config for frames of these cameras and size (see `encoder`)."""
        cameras = tuple(cameras)
        if self.encoder is not None:
            if set(self.encoder.cameras) != set(cameras) or self.encoder.image_size != image_size:
                raise ValueError(f"the encoder takes cameras {list(self.encoder.cameras)} at "
                                 f"{self.encoder.image_size} px; the frames are {list(cameras)} at {image_size} px")
            return dataclasses.replace(self.encoder, augment_pad=self.augment_pad)
        if self.encoder_weights is not None:
            return pretrained_config(self.encoder_weights, cameras=cameras, image_size=image_size,
                                     augment_pad=self.augment_pad)
        return EncoderConfig(cameras=cameras, image_size=image_size, kind="conv", augment_pad=self.augment_pad)


class SuccessClassifier(nn.Module):
    """Camera frames -> success logit: encoder -> Linear -> Dropout -> LayerNorm -> ReLU -> Linear 1."""

    def __init__(self, config: SuccessClassifierConfig, load_encoder_weights: bool = True):
        """`config.encoder` must be set (`SuccessClassifierConfig.resolved_encoder`).
        `load_encoder_weights=False` builds the architecture only (the weights come from a file)."""
        super().__init__()
        if config.encoder is None:
            raise ValueError("SuccessClassifier needs config.encoder; use config.resolved_encoder(cameras, size)")
        self.config = config
        self.threshold = config.threshold
        self.encoder = ImageEncoder(config.encoder, load_weights=load_encoder_weights)
        self.head = nn.Sequential(
            nn.Linear(self.encoder.output_dim, config.hidden_dim),
            nn.Dropout(config.dropout),
            nn.LayerNorm(config.hidden_dim),
            nn.ReLU(),
            nn.Linear(config.hidden_dim, 1),
        )
        self.metrics: dict[str, Any] = {}  # held-out metrics of training, for the card
        self.training_data: dict[str, Any] = {}  # what it was trained on, for the card

    @property
    def cameras(self) -> tuple[str, ...]:
        return self.encoder.config.cameras

    @property
    def image_size(self) -> int:
        return self.encoder.config.image_size

    @property
    def device(self) -> torch.device:
        return self.head[0].weight.device

    def forward(self, frames: Mapping[str, torch.Tensor], augment: bool = False) -> torch.Tensor:
        """uint8 (B, H, W, 3) per camera -> (B,) logits."""
        return self.head(self.encoder(frames, augment=augment)).squeeze(-1)

    def frame_tensors(self, frames: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The classifier's cameras as uint8 tensors on its device; refuses other dtypes and missing cameras."""
        if not isinstance(frames, Mapping):
            raise ValueError(f"frames must be a dict of camera -> uint8 (B, H, W, 3), got {type(frames).__name__}")
        tensors = {}
        for camera in self.cameras:
            if camera not in frames:
                raise ValueError(f"frames lack camera {camera!r}; the classifier takes {list(self.cameras)}")
            frame = torch.as_tensor(frames[camera])
            if frame.dtype != torch.uint8:
                raise ValueError(f"camera {camera!r} frames must be uint8, got {frame.dtype}")
            tensors[camera] = frame.to(self.device)
        return tensors

    @torch.inference_mode()
    def probability(self, frames: Mapping[str, Any]) -> np.ndarray:
        """Success probability (B,) float32 in [0, 1] of uint8 (B, H, W, 3) frames per camera (arrays or
        tensors); always in eval mode (no dropout, no augmentation)."""
        was_training = self.training
        self.eval()
        try:
            return torch.sigmoid(self(self.frame_tensors(frames))).float().cpu().numpy()
        finally:
            self.train(was_training)

    def save(self, path: str | os.PathLike) -> None:
        """Writes `path/classifier.safetensors` (all weights) and `path/card.json`."""
        config = dataclasses.asdict(dataclasses.replace(self.config, threshold=self.threshold))
        card = {"format": CARD_FORMAT, "cameras": list(self.cameras), "image_size": self.image_size,
                "threshold": self.threshold, "metrics": self.metrics, "training_data": self.training_data,
                "config": config}
        with model_directory(path) as tmp:
            save_weights(self.state_dict(), tmp / WEIGHTS_FILE)
            save_card(card, tmp / CARD_FILE)

    @classmethod
    def load(cls, path: str | os.PathLike, device: str | torch.device = "cpu") -> SuccessClassifier:
        """A classifier saved by `save`, in eval mode on `device`."""
        path = Path(path)
        if not (path / CARD_FILE).is_file() or not (path / WEIGHTS_FILE).is_file():
            raise FileNotFoundError(f"{path} must hold {CARD_FILE} and {WEIGHTS_FILE}")
        card = load_card(path / CARD_FILE)
        if card.get("format") != CARD_FORMAT:
            raise ValueError(f"{path / CARD_FILE} is not a success classifier card")
        config = SuccessClassifierConfig(**{**card["config"], "threshold": card["threshold"], "device": str(device)})
        classifier = cls(config, load_encoder_weights=False)
        try:
            classifier.load_state_dict(load_weights(path / WEIGHTS_FILE), strict=True)
        except RuntimeError as exc:
            raise ValueError(f"{path / WEIGHTS_FILE} does not fit the architecture of its card: {exc}") from None
        classifier.metrics = card.get("metrics", {})
        classifier.training_data = card.get("training_data", {})
        return classifier.to(device).eval()


# ---- training ------------------------------------------------------------------------------

def classification_metrics(predicted: np.ndarray, labels: np.ndarray) -> dict[str, float | int]:
    """Confusion counts, precision, recall, F1 and accuracy of bool predictions against bool labels.
    A ratio whose denominator is 0 (no predicted or no actual positives) is 0.0."""
    predicted, labels = np.asarray(predicted, bool), np.asarray(labels, bool)
    if predicted.shape != labels.shape or predicted.ndim != 1:
        raise ValueError(f"predicted and labels must be equal-length vectors, got {predicted.shape} and {labels.shape}")
    tp = int(np.sum(predicted & labels))
    fp = int(np.sum(predicted & ~labels))
    fn = int(np.sum(~predicted & labels))
    tn = int(np.sum(~predicted & ~labels))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    accuracy = (tp + tn) / labels.size if labels.size else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "accuracy": accuracy, "true_positives": tp,
            "false_positives": fp, "false_negatives": fn, "true_negatives": tn}


def balanced_batch_indices(labels: np.ndarray, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of `batch_size / 2` positives and as many negatives, drawn with replacement (HIL-SERL)."""
    if batch_size < 2 or batch_size % 2:
        raise ValueError(f"a balanced batch needs an even batch_size >= 2, got {batch_size}")
    positives, negatives = np.flatnonzero(labels), np.flatnonzero(~labels)
    if positives.size == 0 or negatives.size == 0:
        raise ValueError("a balanced batch needs at least one positive and one negative frame")
    half = batch_size // 2
    return np.concatenate([rng.choice(positives, half), rng.choice(negatives, half)])


def stratified_split(labels: np.ndarray, holdout_fraction: float,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) indices holding `holdout_fraction` (rounded) of the positives and of the
    negatives out; refuses a split that leaves either class without held-out or training frames."""
    train, held_out = [], []
    for name, members in (("positive", np.flatnonzero(labels)), ("negative", np.flatnonzero(~labels))):
        count = int(round(holdout_fraction * members.size))
        if count == 0 or count == members.size:
            side = "held-out" if count == 0 else "training"
            raise ValueError(f"the {side} split would hold no {name} frames ({members.size} {name}s, "
                             f"holdout_fraction {holdout_fraction}); record more {name} frames or change "
                             "holdout_fraction")
        shuffled = rng.permutation(members)
        held_out.append(shuffled[:count])
        train.append(shuffled[count:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(held_out))


def _checked_training_data(frames: Mapping[str, Any], labels: Any) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    if not isinstance(frames, Mapping) or not frames:
        raise ValueError("frames must be a non-empty dict of camera -> uint8 (N, H, W, 3)")
    tensors = {}
    for camera, value in frames.items():
        if not isinstance(value, (np.ndarray, torch.Tensor)):
            raise ValueError(f"camera {camera!r} frames must be an array, got {type(value).__name__}")
        frame = torch.as_tensor(value)
        if frame.dtype != torch.uint8 or frame.dim() != 4 or frame.shape[-1] != 3:
            raise ValueError(f"camera {camera!r} frames must be uint8 (N, H, W, 3), got {frame.dtype} "
                             f"{tuple(frame.shape)}")
        if frame.shape[1] != frame.shape[2]:
            raise ValueError(f"camera {camera!r} frames must be square (crop or resize), got {tuple(frame.shape)}")
        tensors[camera] = frame.cpu()
    shapes = {camera: tuple(t.shape) for camera, t in tensors.items()}
    if len({s[:3] for s in shapes.values()}) > 1:
        raise ValueError(f"all cameras need the same number of frames of the same size, got {shapes}")
    labels = np.asarray(labels)
    count = next(iter(shapes.values()))[0]
    if labels.dtype != np.bool_ or labels.shape != (count,):
        raise ValueError(f"labels must be bool of shape ({count},) like the frames, got {labels.dtype} {labels.shape}")
    positives = int(labels.sum())
    if positives == 0 or positives == count:
        raise ValueError(f"a success classifier needs positive and negative frames; got {positives} positives "
                         f"and {count - positives} negatives")
    return tensors, labels


def train_success_classifier(frames: Mapping[str, Any], labels: Any,
                             config: SuccessClassifierConfig | None = None,
                             data_description: str = "") -> tuple[SuccessClassifier, dict[str, Any]]:
    """Trains a classifier on labelled frames and measures it on a stratified held-out share.

    frames: camera -> uint8 (N, S, S, 3), the cameras' frames of the same N moments.
    labels: (N,) bool, True where the frames show success.
    data_description: what the frames are (a dataset path, a task), kept on the classifier's card.
    Returns the classifier (eval mode) and the held-out metrics: precision, recall, f1, accuracy,
    confusion counts, threshold, frame counts and the final training loss.
    """
    config = config or SuccessClassifierConfig()
    tensors, labels = _checked_training_data(frames, labels)
    encoder = config.resolved_encoder(tuple(tensors), next(iter(tensors.values())).shape[1])
    config = dataclasses.replace(config, encoder=encoder, encoder_weights=None)
    cameras = encoder.cameras
    rng = np.random.default_rng(config.seed)
    train_index, held_out_index = stratified_split(labels, config.holdout_fraction, rng)
    train_labels = labels[train_index]
    device = torch.device(config.device)

    # Own RNG streams: seeded runs repeat without touching the caller's global torch state.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(config.seed)
        classifier = SuccessClassifier(config).to(device)
        parameters = [p for p in classifier.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(parameters, lr=config.lr, weight_decay=config.weight_decay)
        classifier.train()
        losses = []
        for _ in range(config.steps):
            if config.balanced:
                batch = train_index[balanced_batch_indices(train_labels, config.batch_size, rng)]
            else:
                batch = rng.choice(train_index, config.batch_size)
            inputs = {camera: tensors[camera][batch].to(device) for camera in cameras}
            targets = torch.as_tensor(labels[batch], dtype=torch.float32, device=device)
            loss = F.binary_cross_entropy_with_logits(classifier(inputs, augment=config.augment_pad > 0), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip_norm > 0:
                nn.utils.clip_grad_norm_(parameters, config.grad_clip_norm)
            optimizer.step()
            losses.append(loss.item())
    classifier.eval()

    probabilities = np.concatenate([
        classifier.probability({camera: tensors[camera][chunk] for camera in cameras})
        for chunk in np.array_split(held_out_index, -(-held_out_index.size // config.batch_size))])
    metrics: dict[str, Any] = classification_metrics(probabilities >= classifier.threshold, labels[held_out_index])
    metrics.update({"threshold": classifier.threshold, "held_out_frames": int(held_out_index.size),
                    "held_out_positives": int(labels[held_out_index].sum()), "train_frames": int(train_index.size),
                    "train_positives": int(train_labels.sum()), "steps": config.steps,
                    "final_loss": float(np.mean(losses[-10:]))})
    classifier.metrics = metrics
    classifier.training_data = {"description": data_description, "frames": int(labels.size),
                                "positives": int(labels.sum()), "cameras": list(cameras)}
    return classifier, metrics


def labelled_frames_from_dataset(dataset_path: str | os.PathLike,
                                 cameras: Sequence[str] | None = None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(camera -> frames, labels) of every labelled step of an episode dataset: each camera's frame of
    the observation the step reached, all cameras at the same steps. `cameras` None: all of them."""
    dataset = EpisodeDataset(dataset_path)
    cameras = tuple(dataset.schema.cameras) if cameras is None else tuple(cameras)
    if not cameras:
        raise ValueError(f"{dataset_path} has no cameras to train a success classifier on")
    frames, labels = {}, None
    for camera in cameras:
        frames[camera], labels = dataset.labelled_frames(camera)  # same labelled steps for every camera
    if labels.size == 0:
        raise ValueError(f"{dataset_path} has no labelled steps (every success_label is -1)")
    return frames, labels


# ---- use as a reward -----------------------------------------------------------------------

class SuccessReward:
    """Observation (dict with the classifier's cameras) -> (sparse reward 1.0 / 0.0, success probability).

    One observation (frames (H, W, 3)) gives two floats; a batch (frames (B, H, W, 3)) two (B,) arrays.
    """

    def __init__(self, classifier: SuccessClassifier, threshold: float | None = None):
        """`threshold` None: the classifier's own."""
        self.classifier = classifier.eval()
        self.threshold = classifier.threshold if threshold is None else float(threshold)
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")

    def __call__(self, observation: Mapping[str, Any]) -> tuple[float, float] | tuple[np.ndarray, np.ndarray]:
        if not isinstance(observation, Mapping):
            raise ValueError(f"observation must be a dict with cameras {list(self.classifier.cameras)}")
        first = self.classifier.cameras[0]
        single = first in observation and np.ndim(observation[first]) == 3
        frames = {camera: observation[camera] for camera in self.classifier.cameras if camera in observation}
        if single:
            frames = {camera: torch.as_tensor(frame)[None] for camera, frame in frames.items()}
        probability = self.classifier.probability(frames)
        reward = (probability >= self.threshold).astype(np.float32)
        if single:
            return float(reward[0]), float(probability[0])
        return reward, probability


class SuccessClassifierReward(gym.Wrapper):
    """Replaces the env reward with the classifier's sparse reward computed from the observation's frames.

    `info` keeps the env's own entries and adds `env_reward` (the replaced reward), `env_success` (the
    env's `is_success` / `success`, None if it reports neither), `success_probability` and
    `predicted_success`, so benchmarks can measure classifier-vs-truth agreement. With
    `terminate_on_success` a predicted success ends the episode (HIL-SERL).
    """

    def __init__(self, env: gym.Env, classifier: SuccessClassifier | SuccessReward,
                 terminate_on_success: bool = True):
        super().__init__(env)
        self.success_reward = classifier if isinstance(classifier, SuccessReward) else SuccessReward(classifier)
        self.terminate_on_success = terminate_on_success
        model = self.success_reward.classifier
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict):
            raise ValueError(f"the env must observe a dict with cameras {list(model.cameras)}, got {space}")
        expected = (model.image_size, model.image_size, 3)
        for camera in model.cameras:
            frame_space = space.spaces.get(camera)
            if frame_space is None or frame_space.shape != expected or frame_space.dtype != np.uint8:
                got = None if frame_space is None else (frame_space.shape, frame_space.dtype)
                raise ValueError(f"the env's observation {camera!r} must be uint8 {expected} for this "
                                 f"classifier, got {got}")

    def step(self, action):
        observation, env_reward, terminated, truncated, info = self.env.step(action)
        reward, probability = self.success_reward(observation)
        predicted = reward > 0
        env_success = info.get("is_success", info.get("success"))
        info = {**info, "env_reward": float(env_reward),
                "env_success": None if env_success is None else bool(env_success),
                "success_probability": probability, "predicted_success": predicted}
        terminated = bool(terminated or (self.terminate_on_success and predicted))
        return observation, reward, terminated, truncated, info
