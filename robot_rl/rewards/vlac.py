"""Large VLAC-style pair critic from a local checkpoint, through `transformers` on a GPU (optional).

VLAC checkpoints (InternRobotics/VLAC, InternVL2-based, weights CC BY-NC-SA 4.0: non-commercial)
answer two questions about images and a task sentence: the pair critic (the episode's first frame
as the 0 % reference, then two frames: how much closer to done is the second, as a signed
percentage of the remaining progress) and done (one frame: is the task finished). We load such a
checkpoint from a local directory (never a hub download) with `trust_remote_code`, ask both
questions with our prompt templates (a checkpoint may ship its own in `robot_rl_prompts.json`
beside its weights), and parse the numbers out of the answers.

Install with `pip install robot_rl[vlac]`; without it, or without the checkpoint, loading fails
with a message saying which. Batched calls run one generation per pair (VLM decoding dominates).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["VlacPrompts", "VlacScorer", "parse_percentage", "parse_done"]

PROMPTS_FILE = "robot_rl_prompts.json"
IMAGE_SIZE = 448  # InternVL2 tile size
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class VlacPrompts:
    """Question templates; `{task}` is replaced by the goal sentence, each `<image>` by one frame."""

    pair: str = ("Reference (0% progress): <image>\nBefore: <image>\nAfter: <image>\n"
                 "Task: {task}\nHow much of the progress that remained in Before was gained in After? "
                 "Answer with a signed percentage (negative if After is further from done).")
    done: str = "<image>\nTask: {task}\nIs the task finished in this image? Answer yes or no."

    @classmethod
    def for_checkpoint(cls, path: Path) -> VlacPrompts:
        """The checkpoint's own templates if it ships `robot_rl_prompts.json`, else ours."""
        file = path / PROMPTS_FILE
        if not file.is_file():
            return cls()
        data = json.loads(file.read_text())
        unknown = set(data) - {"pair", "done"}
        if unknown:
            raise ValueError(f"{file}: unknown prompt keys {sorted(unknown)} (known: pair, done)")
        prompts = cls(**data)
        for name, count in (("pair", 3), ("done", 1)):
            template = getattr(prompts, name)
            if template.count("<image>") != count or "{task}" not in template:
                raise ValueError(f"{file}: the {name} prompt needs {count} <image> and a {{task}} placeholder")
        return prompts


def parse_percentage(answer: str) -> float:
    """The first signed number in a critic answer, as a fraction clipped to [-1, 1] ("+25%" -> 0.25).

    Raises:
        ValueError: the answer holds no number.
    """
    match = re.search(r"[-+]?\d+(?:\.\d+)?", answer)
    if match is None:
        raise ValueError(f"no progress percentage in the critic's answer {answer!r}")
    return float(np.clip(float(match.group()) / 100.0, -1.0, 1.0))


def parse_done(answer: str) -> float:
    """1.0 for a yes/true/1 answer, 0.0 for no/false/0.

    Raises:
        ValueError: the answer is neither.
    """
    word = re.search(r"[a-z0-9]+", answer.lower())
    if word and word.group() in ("yes", "true", "1", "done", "finished"):
        return 1.0
    if word and word.group() in ("no", "false", "0", "not"):
        return 0.0
    raise ValueError(f"cannot read a done answer from {answer!r}")


class VlacScorer:
    """`ProgressScorer` backed by a VLAC-style InternVL checkpoint (`score` as in rewards.progress)."""

    def __init__(self, model: Any, tokenizer: Any, prompts: VlacPrompts, device: str, max_new_tokens: int = 16):
        self.model, self.tokenizer, self.prompts, self.device = model, tokenizer, prompts, device
        self.generation = {"max_new_tokens": max_new_tokens, "do_sample": False}

    @classmethod
    def load(cls, path: str | Path, device: str = "auto") -> VlacScorer:
        """Loads the checkpoint in `path` (bfloat16 on CUDA).

        Raises:
            ImportError: `transformers` is not installed (`pip install robot_rl[vlac]`).
            FileNotFoundError: `path` is not a checkpoint directory with a config.json.
        """
        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a local VLAC checkpoint (no config.json); download it once "
                                    "on a machine with internet access and pass its directory as model_path")
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError:
            raise ImportError("the vlac reward backend needs transformers: pip install 'robot_rl[vlac]' "
                              "(or use backend 'progress', the local model)") from None
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        model = AutoModel.from_pretrained(str(path), torch_dtype=dtype, trust_remote_code=True,
                                          local_files_only=True).to(device).eval()
        if not hasattr(model, "chat"):
            raise ValueError(f"{path}: the checkpoint's model class has no chat(); VLAC checkpoints are "
                             "InternVL2-based with remote code")
        tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=True, local_files_only=True)
        return cls(model, tokenizer, VlacPrompts.for_checkpoint(path), device)

    def _pixels(self, frames: Sequence[np.ndarray]):
        import torch
        import torch.nn.functional as F

        x = torch.as_tensor(np.stack(frames)).permute(0, 3, 1, 2).float().div(255.0)
        x = F.interpolate(x, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", antialias=True, align_corners=False)
        mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        return ((x - mean) / std).to(self.device, dtype=next(self.model.parameters()).dtype)

    def _ask(self, frames: Sequence[np.ndarray], question: str) -> str:
        return self.model.chat(self.tokenizer, self._pixels(frames), question, dict(self.generation),
                               num_patches_list=[1] * len(frames))

    def score(self, first: Mapping[str, Any], previous: Mapping[str, Any], current: Mapping[str, Any],
              goal: str | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Uses the first camera of each dict (VLAC critics take one view)."""
        camera = next(iter(current))
        cur = np.asarray(current[camera])
        cur = cur[None] if cur.ndim == 3 else cur
        prev = np.asarray(previous[camera]).reshape(cur.shape)
        ref = np.asarray(first[camera])
        ref = np.broadcast_to(ref if ref.ndim == 4 else ref[None], cur.shape)
        goals = [goal] * len(cur) if isinstance(goal, str) else list(goal)
        deltas = np.empty(len(cur), np.float32)
        done = np.empty(len(cur), np.float32)
        for i in range(len(cur)):
            deltas[i] = parse_percentage(self._ask([ref[i], prev[i], cur[i]], self.prompts.pair.format(task=goals[i])))
            done[i] = parse_done(self._ask([cur[i]], self.prompts.done.format(task=goals[i])))
        return deltas, done
