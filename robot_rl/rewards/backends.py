"""Reward backends: a loader per name that turns a model directory into a scorer the reward stream
can use, with what the stream must know about it (cameras, done threshold, frame size).

`BACKENDS` (extensible with `register_backend`): ``loader(model_path, device) -> LoadedBackend``.
``progress``: the local `ProgressModel`; ``success``: a `SuccessClassifier` as a sparse scorer
(`SuccessScorer`); ``vlac``: the large model from ``robot_rl.rewards.vlac.VlacScorer`` (imported only
when chosen); ``vlm_critic``, ``vlm_episode_score``: Qwen-VL token-probability critics (`rewards.vlm_critic`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["BACKENDS", "BackendEntry", "BackendLoadError", "LoadedBackend", "SuccessScorer", "backend_names",
           "check_model_path", "load_backend", "register_backend"]


class BackendLoadError(RuntimeError):
    """The backend's model could not be loaded or does not fit the node's configuration."""


@dataclass(frozen=True)
class LoadedBackend:
    """A loaded scorer and what the stream must know about it."""

    scorer: Any
    """Implements `robot_rl.rewards.progress.ProgressScorer` (``score(first, previous, current, goal)``)."""
    cameras: tuple[str, ...] | None
    """Cameras the model reads (each must be among the node's cameras); None: any."""
    done_threshold: float
    """The model's own done threshold (used when the node's done_threshold is 0)."""
    image_size: int | None = None
    """Frames must be square of exactly this size; None: any size."""
    square: bool = False
    """Frames must be square (any size when image_size is None)."""
    needs_goal: bool = True
    """Scoring needs a goal sentence (a success classifier does not)."""
    description: str = ""


@dataclass(frozen=True)
class BackendEntry:
    loader: Callable[[str, str], LoadedBackend]
    """(model_path, device) -> LoadedBackend."""
    how_to_make: str
    """How a user gets a model directory for this backend (shown when model_path is missing)."""


class SuccessScorer:
    """A `SuccessClassifier` as a (sparse) progress scorer: progress_delta = 1.0 where the success
    probability of `current` is >= the classifier's threshold, else 0.0; done_probability = that
    probability. `first`, `previous` and the goal are ignored (the classifier judges one frame)."""

    def __init__(self, classifier: Any, threshold: float | None = None):
        self.classifier = classifier
        self.threshold = float(classifier.threshold if threshold is None else threshold)
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")

    @property
    def cameras(self) -> tuple[str, ...]:
        return tuple(self.classifier.cameras)

    def score(self, first, previous, current, goal) -> tuple[np.ndarray, np.ndarray]:
        frames = {c: (f[None] if np.ndim(f) == 3 else f) for c, f in current.items()}
        probability = np.asarray(self.classifier.probability(frames), np.float32)
        return (probability >= self.threshold).astype(np.float32), probability


def _load_progress(model_path: str, device: str) -> LoadedBackend:
    from robot_rl.rewards.progress import ProgressModel

    model = ProgressModel.load(model_path, device)
    return LoadedBackend(model, tuple(model.cameras), float(model.done_threshold), None, True, True,
                         f"progress model {model_path}")


def _load_success(model_path: str, device: str) -> LoadedBackend:
    from robot_rl.rewards.success import SuccessClassifier

    classifier = SuccessClassifier.load(model_path, device)
    return LoadedBackend(SuccessScorer(classifier), tuple(classifier.cameras), float(classifier.threshold),
                         int(classifier.image_size), True, False, f"success classifier {model_path}")


def _load_vlac(model_path: str, device: str) -> LoadedBackend:
    from robot_rl.rewards.vlac import VlacScorer

    scorer = VlacScorer.load(model_path, device)
    # one view (the first camera scored), any frame size: the checkpoint's processor resizes
    return LoadedBackend(scorer, None, float(scorer.done_threshold), None, False, True, f"VLAC model {model_path}")


def _vlm_loader(question: str) -> Callable[[str, str], LoadedBackend]:
    def load(model_path: str, device: str) -> LoadedBackend:
        from robot_rl.rewards.vlm_critic import VlmCritic

        return LoadedBackend(VlmCritic.load(model_path, device, question), None, 0.5, None, False, True,
                             f"Qwen-VL {question} critic {model_path}")
    return load


_VLM_LAYOUT = ("a local Hugging Face snapshot directory (no download): config.json (model_type qwen3_vl or "
               "qwen2_5_vl), model.safetensors (or model.safetensors.index.json and its shards), "
               "preprocessor_config.json, tokenizer.json, tokenizer_config.json and the chat template")


BACKENDS: dict[str, BackendEntry] = {
    "progress": BackendEntry(_load_progress, "train one from demonstrations with "
                             "`robot-rl reward train --demos <dataset> --out <dir>`"),
    "success": BackendEntry(_load_success, "train one on labelled frames with "
                            "robot_rl.rewards.success.train_success_classifier and save it with "
                            "SuccessClassifier.save(<dir>)"),
    "vlac": BackendEntry(_load_vlac, "copy a VLAC checkpoint (InternRobotics/VLAC or VLAC-8b, weights CC BY-NC-SA "
                         "4.0, non-commercial) or an InternVL checkpoint in the native transformers layout to a local "
                         "directory (see robot_rl.rewards.vlac for its files)"),
    "vlm_critic": BackendEntry(_vlm_loader("true_false"), "copy a Qwen3-VL or Qwen2.5-VL instruct checkpoint "
                               f"(e.g. Qwen/Qwen3-VL-2B-Instruct, Apache-2.0) as {_VLM_LAYOUT}"),
    "vlm_episode_score": BackendEntry(_vlm_loader("episode_score"), "copy a RoboReward checkpoint "
                                      f"(teetone/RoboReward-4B or -8B, CC BY 4.0) as {_VLM_LAYOUT}"),
}


def register_backend(name: str, loader: Callable[[str, str], LoadedBackend], how_to_make: str) -> None:
    """Adds (or replaces) a backend: `loader(model_path, device) -> LoadedBackend`."""
    if not name or not isinstance(name, str):
        raise ValueError("a backend needs a non-empty name")
    BACKENDS[name] = BackendEntry(loader, how_to_make)


def backend_names() -> list[str]:
    return list(BACKENDS)


def check_model_path(backend: str, model_path: str) -> Path:
    """The model directory as a Path; ValueError naming the path and how to make one when it is
    missing."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not one of {backend_names()}")
    hint = BACKENDS[backend].how_to_make
    if not model_path:
        raise ValueError(f"model_path is required (the {backend} backend has no built-in model): {hint}, "
                         "then pass model_path:=<dir>")
    path = Path(model_path).expanduser()
    if not path.exists():
        raise ValueError(f"model_path {str(path)!r} does not exist: {hint}, then pass model_path:=<dir>")
    return path


def load_backend(backend: str, model_path: str, device: str,
                 cameras: Sequence[str] | None = None) -> LoadedBackend:
    """Loads a backend's model and checks that the given cameras include the model's.

    Raises:
        ValueError: unknown backend, missing model_path.
        BackendLoadError: the model could not be loaded, or reads a camera not among `cameras`.
    """
    path = check_model_path(backend, model_path)
    try:
        loaded = BACKENDS[backend].loader(str(path), device)
    except Exception as exc:  # noqa: BLE001 - any loader failure becomes one clear error
        raise BackendLoadError(f"cannot load the {backend} model from {str(path)!r}: {type(exc).__name__}: {exc}") \
            from exc
    if not isinstance(loaded, LoadedBackend) or not callable(getattr(loaded.scorer, "score", None)):
        raise BackendLoadError(f"the {backend} loader returned {type(loaded).__name__}, not a LoadedBackend "
                               "with a scorer")
    if cameras is not None and loaded.cameras is not None:
        missing = [c for c in loaded.cameras if c not in cameras]
        if missing:
            raise BackendLoadError(f"the {backend} model at {str(path)!r} reads cameras {list(loaded.cameras)}, "
                                   f"but `cameras` is {list(cameras)} (missing {missing})")
    if not 0.0 < loaded.done_threshold < 1.0:
        raise BackendLoadError(f"the {backend} model's done threshold {loaded.done_threshold} is not in (0, 1)")
    return loaded
