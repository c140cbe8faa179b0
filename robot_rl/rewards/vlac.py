"""VLAC's pair critic and done check, asked the way VLAC asks them, from a local InternVL checkpoint.

Checkpoints: InternRobotics/VLAC (2B) and InternRobotics/VLAC-8b (InternVL2 with its own remote code,
`trust_remote_code`), or any InternVL checkpoint saved in the native `transformers` layout
(`InternVLForConditionalGeneration`, config.json ``model_type: internvl``). The weights of VLAC are
licensed CC BY-NC-SA 4.0: non-commercial use only (VLAC's code is MIT). Nothing is downloaded: the
checkpoint is a local directory (download it once elsewhere and copy it) holding

* config.json (which load path: ``model_type`` ``internvl`` -> native, an ``auto_map`` with
  ``AutoModel`` -> remote code, whose .py files must sit beside it);
* the weights (model.safetensors, sharded with its index, or pytorch_model.bin);
* the tokenizer (tokenizer_config.json with tokenizer.json or tokenizer.model), which must know
  InternVL's image tokens ``<img>``, ``</img>``, ``<IMG_CONTEXT>``;
* native layout only: preprocessor_config.json (the image processor; its video half needs
  torchvision and is not used);
* optionally robot_rl_reference.npy: uint8 (N, H, W, 3), N >= 2, the frames of one successful
  demonstration from start to done, the in-context reference (VLAC samples up to `reference_count`
  of them evenly, labelled 0 % to 100 %);
* optionally robot_rl_prompts.json: other templates for checkpoints trained with other prompts.

The protocol (VLAC's paper, arXiv 2509.15937, and its public code): a ChatML conversation with VLAC's
system prompt; the pair question shows two frames (previous, current) and the task and is answered
with a signed percentage c: the share of the progress still *remaining* at the previous frame that
the current one gained (negative: lost). With reference frames, the question is preceded by the
reference trajectory (each frame with its percentage) and the episode's first frame labelled 0 %.
The done question shows one frame and the task and is answered 1 (done) or 0. Answers are decoded
greedily (VLAC: temperature 0.5, top_k 1) and each digit of the number is read as the
probability-weighted mean of the digit tokens among the 10 most likely at that step whose probability
(at temperature 0.5) exceeds 0.1 x the best one's (`read_number`). The prompt strings are VLAC's
checkpoints' input format (the model only answers well to what it was trained on), hence kept as
VLAC wrote them.

Mapping onto `ProgressScorer`: progress_delta = c / 100 (clipped to [-1, 1]), done_probability =
the read done digit (clipped to [0, 1]). VLAC's value v <- v + (100 - v) c / 100 needs the episode's
running value: the reward stream keeps it (`RewardStream`, ``v <- v + (1 - v) delta``, the same
recursion on a 0-1 scale; `robot_rl.rewards.progress.accumulate_value` offline), so the scorer holds no
per-episode state. All pair and done questions of a batch go through one batched `generate`.

Install with `pip install robot_rl[vlac]`; without it, or with a missing or malformed checkpoint,
loading fails in one line naming what is missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from robot_rl.rewards.scorer_input import UnreadableScores, processor_frames

__all__ = ["PROMPTS_FILE", "REFERENCE_FILE", "VlacPrompts", "VlacScorer", "checkpoint_kind", "read_number",
           "reference_labels", "pick_reference"]

PROMPTS_FILE = "robot_rl_prompts.json"
REFERENCE_FILE = "robot_rl_reference.npy"
IMAGE = "<image>"
IMAGE_START, IMAGE_END, IMAGE_CONTEXT = "<img>", "</img>", "<IMG_CONTEXT>"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
TEMPERATURE = 0.5
TOP_LOGPROBS = 10
DIGIT_SHARE = 0.1
"""A digit candidate counts when its probability exceeds this share of the step's best probability."""
MAX_NEW_TOKENS = 8
"""Room for a signed number with a decimal and the end token ("-100.0")."""
DONE_THRESHOLD = 0.9
"""VLAC's README threshold on the done reading."""
_SCORE_RULES = ("Compare two images and evaluate whether the second image is closer to achieving task objectives "
                "compared to the first image. + score means the second image is closer, - score means the first "
                "image is closer\nResponse the relative progressing of target task follow <score>. ")


@dataclass(frozen=True)
class VlacPrompts:
    """Templates of VLAC's questions; each `<image>` is one frame, `{task}` the goal sentence."""

    system: str = ("You are a visual-language assistant designed to interpret spatial and task-related information "
                   "from images and text. Provide precise, context-aware responses and actionable guidance to "
                   "assist in achieving task objectives.")
    """System message of every question."""
    pair: str = ("Image-1: <image>\nImage-2: <image>\n" + _SCORE_RULES
                 + "The target task is: <task> {task} </task> <score>")
    """The pair critic: previous frame, current frame -> signed percentage."""
    done: str = ("<image>The 1 means yes, the 0 means no. Check if the robot has completed its task: "
                 "<task> {task} </task> <done>")
    """The done check: one frame -> 1 or 0 (VLAC puts the image before the text)."""
    reference_intro: str = "<trajectory> <task> {task} </task>:"
    """Opens the in-context reference trajectory."""
    reference_frame: str = " {percent}% <image>\n"
    """One reference frame with its progress label."""
    reference_outro: str = "</trajectory>"
    """Closes the reference trajectory."""
    first_frame: str = "0% <image>\nThis image is the trajectory beginning of the following two images\n"
    """The episode's first frame as 0 %, between the reference and the pair (only with a reference)."""

    _NEEDS = {"system": (0, ()), "pair": (2, ("{task}",)), "done": (1, ("{task}",)), "reference_intro": (0, ()),
              "reference_frame": (1, ("{percent}",)), "reference_outro": (0, ()), "first_frame": (1, ())}

    @classmethod
    def for_checkpoint(cls, path: Path) -> VlacPrompts:
        """VLAC's templates, with those the checkpoint's `robot_rl_prompts.json` replaces.

        Raises:
            ValueError: the file is not a JSON object of known templates with the images and placeholders
                each needs.
        """
        file = path / PROMPTS_FILE
        if not file.is_file():
            return cls()
        try:
            data = json.loads(file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{file}: not valid JSON ({exc})") from None
        known = [f.name for f in fields(cls)]
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ValueError(f"{file}: must be a JSON object of template strings (keys: {', '.join(known)})")
        unknown = set(data) - set(known)
        if unknown:
            raise ValueError(f"{file}: unknown prompt keys {sorted(unknown)} (known: {', '.join(known)})")
        prompts = cls(**data)
        for name, (images, placeholders) in cls._NEEDS.items():
            template = getattr(prompts, name)
            if template.count(IMAGE) != images or not all(p in template for p in placeholders):
                raise ValueError(f"{file}: the {name} template needs {images} {IMAGE} and "
                                 f"{' '.join(placeholders) or 'no placeholder'}")
        return prompts

    def pair_question(self, task: str, reference_count: int) -> str:
        """The pair question; with a reference, preceded by it and the episode's first frame."""
        pair = self.pair.format(task=task)
        if reference_count == 0:
            return pair
        frames = "".join(self.reference_frame.format(percent=p) for p in reference_labels(reference_count))
        return self.reference_intro.format(task=task) + frames + self.reference_outro + self.first_frame + pair


def reference_labels(count: int) -> list[int]:
    """Progress labels of `count` evenly spaced reference frames: 0 % ... 100 %, rounded down."""
    if count < 2:
        raise ValueError(f"a reference needs at least 2 frames, got {count}")
    return [int(i / (count - 1) * 100) for i in range(count)]


def pick_reference(frames: np.ndarray, count: int) -> np.ndarray:
    """`count` frames of a demonstration as VLAC picks them: the first, then every (N-1)/(count-1)-th
    (index rounded down), so the last is the demonstration's last; all of them when N <= count."""
    if len(frames) <= count:
        return frames
    step = (len(frames) - 1) / (count - 1)
    return frames[[0] + [int(i * step) for i in range(1, count)]]


def _digit_mean(candidates: Sequence[tuple[str, float]]) -> float:
    best = candidates[0][1]
    kept = [(float(text), p) for text, p in candidates if text.isdigit() and p > DIGIT_SHARE * best]
    return sum(v * p for v, p in kept) / sum(p for _, p in kept)


def read_number(steps: Sequence[Sequence[tuple[str, float]]]) -> float:
    """The first number of a generated answer, each digit token read as the probability-weighted
    mean of the digit tokens among its step's candidates (VLAC's rich reading).

    steps: per generated token, its candidates (stripped token text, probability), most likely first;
    the first is the token that was generated (greedy decoding). A "-" or "+" token right before the
    digits signs the number; digit tokens after a "." token are its decimals. A token of several
    digits shifts the number by its length (positional reading, which equals VLAC's for the one-token
    numbers it reads).

    Raises:
        ValueError: the answer holds no digit token.
    """
    texts = [step[0][0] for step in steps]
    start = next((i for i, t in enumerate(texts) if t.isdigit()), None)
    if start is None:
        raise ValueError(f"no number in the answer {''.join(texts)!r}")
    sign = -1.0 if start > 0 and texts[start - 1] == "-" else 1.0
    value, i = 0.0, start
    while i < len(texts) and texts[i].isdigit():
        value = value * 10 ** len(texts[i]) + _digit_mean(steps[i])
        i += 1
    if i + 1 < len(texts) and texts[i] == "." and texts[i + 1].isdigit():
        scale, i = 1.0, i + 1
        while i < len(texts) and texts[i].isdigit():
            scale *= 10 ** len(texts[i])
            value += _digit_mean(steps[i]) / scale
            i += 1
    return sign * value


# ---- checkpoints ----------------------------------------------------------------------------

_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def _refuse(file: Path, why: str) -> FileNotFoundError:
    return FileNotFoundError(f"{file}: {why}")


def checkpoint_kind(path: Path) -> str:
    """"native" or "remote" from the checkpoint's config.json, after checking that the files that path
    needs are there.

    Raises:
        FileNotFoundError / ValueError: naming the missing or malformed file.
    """
    config_file = path / "config.json"
    if not config_file.is_file():
        raise _refuse(config_file, "missing: not a local VLAC/InternVL checkpoint (download the checkpoint once on "
                      "a machine with internet access and pass its directory as model_path)")
    try:
        config = json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{config_file}: not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{config_file}: not a JSON object")
    remote_files = config.get("auto_map", {}).get("AutoModel") if isinstance(config.get("auto_map"), dict) else None
    if config.get("model_type") == "internvl":
        kind, needed = "native", ["preprocessor_config.json"]
    elif isinstance(remote_files, str):
        kind, needed = "remote", [remote_files.split("--")[-1].rsplit(".", 1)[0] + ".py"]
    else:
        raise ValueError(f"{config_file}: model_type {config.get('model_type')!r} is neither 'internvl' (native "
                         "transformers layout) nor a remote-code InternVL chat model (auto_map.AutoModel)")
    if not any((path / name).is_file() for name in _WEIGHTS):
        raise _refuse(path / _WEIGHTS[0], f"missing: no weights ({', '.join(_WEIGHTS)})")
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer.model").is_file():
        raise _refuse(path / "tokenizer.json", "missing: no tokenizer (tokenizer.json or tokenizer.model)")
    for name in ["tokenizer_config.json", *needed]:
        if not (path / name).is_file():
            raise _refuse(path / name, "missing")
    return kind


def _load_reference(path: Path) -> np.ndarray | None:
    file = path / REFERENCE_FILE
    if not file.is_file():
        return None
    try:
        frames = np.load(file, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{file}: not a readable .npy array ({exc})") from None
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or len(frames) < 2:
        raise ValueError(f"{file}: must be uint8 (N >= 2, H, W, 3), got {frames.dtype} {frames.shape}")
    return frames


def _weights_file(path: Path) -> Path:
    return next((path / n for n in _WEIGHTS if (path / n).is_file()), path / _WEIGHTS[0])


class _InternVLEngine:
    """What the two load paths differ in: the model, how frames become pixels and how many context
    tokens stand for one frame. Both share the tokenizer checks and the batched generation."""

    def __init__(self, model: Any, tokenizer: Any, image_tokens: int, device: str):
        self.model, self.tokenizer, self.image_tokens, self.device = model, tokenizer, image_tokens, device
        tokenizer.padding_side = "left"  # generation continues every row from its last prompt token
        vocab = tokenizer.get_vocab()
        missing = [t for t in (IMAGE_START, IMAGE_END, IMAGE_CONTEXT, "<|im_end|>") if t not in vocab]
        if missing:
            raise ValueError(f"the tokenizer (tokenizer_config.json) lacks InternVL's tokens {missing}")
        self.context_id = vocab[IMAGE_CONTEXT]
        self.end_id = vocab["<|im_end|>"]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.end_id

    def image_slot(self) -> str:
        # VLAC's template (ms-swift internvl2) puts a line break after each image
        return IMAGE_START + IMAGE_CONTEXT * self.image_tokens + IMAGE_END + "\n"

    def pixels(self, frames: Sequence[np.ndarray]):
        raise NotImplementedError

    def generate(self, texts: Sequence[str], frames: Sequence[np.ndarray]):
        """One batched greedy generation; returns (new token ids (B, T), logits per step (T, B, V))."""
        import torch

        encoded = self.tokenizer(list(texts), return_tensors="pt", padding=True)
        pixel_values = self.pixels(frames).to(self.device, dtype=next(self.model.parameters()).dtype)
        with torch.inference_mode():
            out = self.model.generate(input_ids=encoded["input_ids"].to(self.device),
                                      attention_mask=encoded["attention_mask"].to(self.device),
                                      pixel_values=pixel_values, max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                                      output_logits=True, return_dict_in_generate=True,
                                      eos_token_id=self.end_id, pad_token_id=self.pad_id)
        steps = len(out.logits)
        return out.sequences[:, -steps:].cpu(), torch.stack(out.logits).float().cpu()


class _NativeEngine(_InternVLEngine):
    """`InternVLForConditionalGeneration` with the checkpoint's image processor."""

    def __init__(self, model: Any, tokenizer: Any, image_processor: Any, device: str):
        super().__init__(model, tokenizer, int(model.config.image_seq_length), device)
        if model.config.image_token_id != self.context_id:
            raise ValueError(f"config.json: image_token_id {model.config.image_token_id} is not the tokenizer's "
                             f"{IMAGE_CONTEXT} ({self.context_id})")
        self.image_processor = image_processor

    def pixels(self, frames: Sequence[np.ndarray]):
        # one tile per frame, as VLAC feeds its 448 x 448 frames
        return self.image_processor(images=processor_frames(frames), crop_to_patches=False,
                                    return_tensors="pt")["pixel_values"]


class _RemoteEngine(_InternVLEngine):
    """InternVL2's own `InternVLChatModel` (VLAC's checkpoints): square resize, ImageNet normalisation."""

    def __init__(self, model: Any, tokenizer: Any, device: str):
        super().__init__(model, tokenizer, int(model.num_image_token), device)
        model.img_context_token_id = self.context_id  # its generate() finds the frames' slots by this id
        self.size = int(getattr(model.config, "force_image_size", None) or model.config.vision_config.image_size)

    def pixels(self, frames: Sequence[np.ndarray]):
        import torch
        import torch.nn.functional as F

        x = torch.as_tensor(np.stack(frames)).permute(0, 3, 1, 2).float().div(255.0)
        x = F.interpolate(x, size=(self.size, self.size), mode="bicubic", antialias=True, align_corners=False)
        mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        return (x.clamp(0.0, 1.0) - mean) / std


def _load_engine(path: Path, kind: str, device: str) -> _InternVLEngine:
    import torch
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer, InternVLForConditionalGeneration

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    remote = kind == "remote"
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=remote, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any tokenizer failure names its files
        raise ValueError(f"{path / 'tokenizer_config.json'}: cannot load the tokenizer ({type(exc).__name__}: "
                         f"{exc})") from None
    try:
        if remote:
            model = AutoModel.from_pretrained(str(path), dtype=dtype, trust_remote_code=True, local_files_only=True)
        else:
            model = InternVLForConditionalGeneration.from_pretrained(str(path), dtype=dtype, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - corrupt or mismatched weights name the weights file
        raise ValueError(f"{_weights_file(path)}: cannot load the model ({type(exc).__name__}: {exc})") from None
    model = model.to(device).eval()
    if remote:
        return _RemoteEngine(model, tokenizer, device)
    try:
        image_processor = AutoImageProcessor.from_pretrained(str(path), backend="pil", local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{path / 'preprocessor_config.json'}: cannot load the image processor "
                         f"({type(exc).__name__}: {exc})") from None
    return _NativeEngine(model, tokenizer, image_processor, device)


# ---- the scorer -----------------------------------------------------------------------------

@dataclass
class Question:
    """One question of a batch: its ChatML text (frame slots expanded) and its frames in order."""

    text: str
    """The whole conversation up to the answer, each frame's slot expanded to its image tokens."""
    frames: list[np.ndarray]
    """uint8 (H, W, 3) frames in the order of their slots."""


class VlacScorer:
    """`ProgressScorer` asking a VLAC checkpoint VLAC's questions (`score` as in rewards.progress)."""

    done_threshold = DONE_THRESHOLD

    def __init__(self, engine: _InternVLEngine, prompts: VlacPrompts = VlacPrompts(),
                 reference: np.ndarray | None = None, reference_count: int = 6):
        self.engine, self.prompts = engine, prompts
        self.reference = None if reference is None else pick_reference(np.asarray(reference), reference_count)
        self.answers: list[str] = []
        """The last batch's answers as generated (pairs, then done checks), for diagnosis."""

    @classmethod
    def load(cls, path: str | Path, device: str = "auto") -> VlacScorer:
        """Loads the checkpoint in `path` (bfloat16 on CUDA, float32 elsewhere); see the module docstring.

        Raises:
            ImportError: `transformers` is not installed (`pip install robot_rl[vlac]`).
            FileNotFoundError / ValueError: a missing or malformed checkpoint file, named.
        """
        path = Path(path)
        kind = checkpoint_kind(path)
        prompts, reference = VlacPrompts.for_checkpoint(path), _load_reference(path)
        try:
            import torch
            import transformers  # noqa: F401
        except ImportError:
            raise ImportError("the vlac reward backend needs transformers: pip install 'robot_rl[vlac]' "
                              "(or use backend 'progress', the local model)") from None
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        return cls(_load_engine(path, kind, device), prompts, reference)

    def chat(self, user: str) -> str:
        """ChatML (InternVL2's template) around a question, its `<image>` marks expanded to frame slots."""
        user = user.replace(IMAGE, self.engine.image_slot())
        return (f"<|im_start|>system\n{self.prompts.system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
                "<|im_start|>assistant\n")

    def questions(self, first: np.ndarray, previous: np.ndarray, current: np.ndarray,
                  goals: Sequence[str]) -> list[Question]:
        """The batch's pair questions (one per row), then its done questions (one per row)."""
        reference = [] if self.reference is None else list(self.reference)
        pair = [Question(self.chat(self.prompts.pair_question(g, len(reference))),
                         reference + ([f] if reference else []) + [p, c])
                for f, p, c, g in zip(first, previous, current, goals)]
        done = [Question(self.chat(self.prompts.done.format(task=g)), [c]) for c, g in zip(current, goals)]
        return pair + done

    def ask(self, questions: Sequence[Question]) -> list[list[list[tuple[str, float]]]]:
        """All questions in one generation; per question, per generated token up to the end token, its
        `TOP_LOGPROBS` candidates (stripped text, probability at `TEMPERATURE`), the generated one first."""
        import torch

        tokens, logits = self.engine.generate([q.text for q in questions], [f for q in questions for f in q.frames])
        probs, ids = torch.softmax(logits / TEMPERATURE, -1).topk(min(TOP_LOGPROBS, logits.shape[-1]), -1)
        decode = self.engine.tokenizer.decode
        answers = []
        for row in range(len(questions)):
            steps = []
            for t in range(tokens.shape[1]):
                if int(tokens[row, t]) in (self.engine.end_id, self.engine.pad_id):
                    break
                steps.append([(decode([int(i)]).strip(), float(p)) for i, p in zip(ids[t, row], probs[t, row])])
            answers.append(steps)
        self.answers = ["".join(step[0][0] for step in steps) for steps in answers]
        return answers

    def score(self, first: Mapping[str, Any], previous: Mapping[str, Any], current: Mapping[str, Any],
              goal: str | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Scores the first camera of each dict (VLAC critics take one view).

        Raises:
            UnreadableScores: an answer holds no number (every unreadable answer named; the other rows'
                readings kept in it).
        """
        camera = next(iter(current))
        cur = np.asarray(current[camera])
        cur = cur[None] if cur.ndim == 3 else cur
        prev = np.asarray(previous[camera]).reshape(cur.shape)
        ref = np.asarray(first[camera])
        ref = np.broadcast_to(ref if ref.ndim == 4 else ref[None], (len(cur), *ref.shape[-3:]))
        goals = [goal] * len(cur) if isinstance(goal, str) else list(goal)
        if len(goals) != len(cur):
            raise ValueError(f"{len(goals)} goals for {len(cur)} frames")
        readings, unreadable = [], []
        for i, steps in enumerate(self.ask(self.questions(ref, prev, cur, goals))):
            try:
                readings.append(read_number(steps))
            except ValueError as exc:
                readings.append(float("nan"))
                unreadable.append(f"{'pair' if i < len(cur) else 'done'} {i % len(cur)}: {exc}")
        readings = np.asarray(readings, np.float64)
        delta = np.clip(readings[:len(cur)] / 100.0, -1.0, 1.0).astype(np.float32)
        done = np.clip(readings[len(cur):], 0.0, 1.0).astype(np.float32)
        if unreadable:  # a row needs both of its answers
            unread = np.isnan(delta) | np.isnan(done)
            delta[unread], done[unread] = np.nan, np.nan
            raise UnreadableScores(f"unreadable VLAC answers: {'; '.join(unreadable)}", delta, done)
        return delta, done
