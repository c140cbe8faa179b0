"""Open vision-language critics on `transformers`' native Qwen-VL classes, read from token probabilities.

No text is generated: one forward pass per batch, and the critic's answer is read from the next-token
logits of a few answer tokens, renormalised over those tokens alone.

Two ways of asking (one backend name each in `robot_rl.rewards.backends`):

* ``true_false`` (TOPReward-style, arXiv 2602.19313; any Qwen3-VL / Qwen2.5-VL instruct checkpoint): the
  images and a statement "the robot has completed <goal>" continue the user's turn (no assistant turn:
  TOPReward found chat-formatted answers read worse), followed by an answer cue; the reading is
  ``p = P(" True") / (P(" True") + P(" False"))``. TOPReward reads log P("True") and min-max
  normalises it over a whole recorded trajectory; a live stream has no whole trajectory, so we use the
  True/False share, which lies in [0, 1] at every step.
* ``episode_score`` (RoboReward-style, arXiv 2601.00675; its 4B/8B Qwen3-VL checkpoints, weights
  CC BY 4.0): the model was tuned to answer a rubric question with a discrete end-of-episode score
  1..5 in its assistant turn. We open that turn with the answer cue and read the probabilities of the
  score tokens "1".."5"; `expected_score_reward` maps them to a terminal reward.

Output contract (`robot_rl.rewards.progress.ProgressScorer`, ``score(first, previous, current, goal)``):
each frame x in {previous, current} is judged as the clip (first, x) per camera (the episode's first
frame stands for the start of the prefix TOPReward shows the model) and gives a progress reading
``p(x)`` in [0, 1]: the True share, or the expected-score reward. Then

* ``progress_delta = share_of_remaining(p(previous), p(current))`` in [-1, 1]: the share of the progress
  remaining at `previous` gained at `current`, VLAC's unit; swapping the frames flips its sign, and the
  stream's accumulated value (``v <- v + (1 - v) c`` from 0) telescopes to
  ``share_of_remaining(p(first), p(current))``: 0 at the start, 1 once the reading reaches 1;
* ``done_probability`` in [0, 1]: the True share of `current` (``true_false``), or the probability of
  the top score "5" (``episode_score``).

For an episode-score model the accumulated value after the episode's last frame is therefore its terminal
reward (`expected_score_reward` of the final clip) counted from the start state's reading (equal to it when
the start reads 0). Both frames of all B steps go through the
model in one call (2B prompts, padded on the left by the tokenizer).

Checkpoint layout (a local directory, never downloaded): ``config.json`` (model_type ``qwen3_vl`` or
``qwen2_5_vl``), the weights (``model.safetensors`` or ``model.safetensors.index.json`` with its
shards), the image processor's ``preprocessor_config.json`` and the tokenizer (``tokenizer.json`` plus
``tokenizer_config.json``) with its chat template (``chat_template.jinja``, or inside
``tokenizer_config.json`` / ``chat_template.json``), i.e. the files of a Hugging Face snapshot.
We use the image processor and the tokenizer rather than transformers' combined processor class, which
cannot be built without torchvision (needed only for its video part); the image placeholders are
expanded exactly as that class does (one placeholder token per merged patch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from robot_rl.device import resolve_device
from robot_rl.rewards.progress import share_of_remaining
from robot_rl.rewards.scorer_input import processor_frames

__all__ = ["CriticQuestion", "EPISODE_SCORE", "QUESTIONS", "TRUE_FALSE", "VlmCritic", "expected_score_reward"]

MODEL_CLASSES = {"qwen3_vl": "Qwen3VLForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration"}
_MARK = "\u2063robot_rl_question\u2063"  # stands for the question while the chat template is rendered


@dataclass(frozen=True)
class CriticQuestion:
    """What the critic is asked about the images and how its answer is read."""

    text: str
    """The question; ``{goal}`` is replaced by the goal sentence."""
    answer_cue: str
    """Text right before the answer token (the answer is the next token after it)."""
    answers: tuple[str, ...]
    """Answer strings, each one token after `answer_cue`; their probabilities are renormalised over them."""
    assistant_turn: bool
    """True: the cue opens the model's (assistant) turn; False: it continues the user's turn."""


TRUE_FALSE = CriticQuestion(
    text="Statement: in the images above, the robot has completed the task \"{goal}\". Is the statement True "
         "or False?",
    answer_cue=" The answer is:", answers=(" True", " False"), assistant_turn=False)
EPISODE_SCORE = CriticQuestion(
    text="Rate how far the robot in the images above got with the task, judging only the final state, on a "
         "discrete scale of 1 to 5: 1 no progress toward the goal; 2 a small, insufficient change; 3 good "
         "progress that misses a major requirement or several; 4 correct except for one minor requirement; "
         "5 complete. Answer in the format ANSWER: <score>\nTask: {goal}",
    answer_cue="ANSWER: ", answers=("1", "2", "3", "4", "5"), assistant_turn=True)
QUESTIONS = {"true_false": TRUE_FALSE, "episode_score": EPISODE_SCORE}


def expected_score_reward(probabilities) -> np.ndarray:
    """Terminal reward of an episode-score model: the expected score over its K discrete scores,
    rescaled from [1, K] to [0, 1] (score 1 -> 0.0, score K -> 1.0).

    probabilities: (..., K) probabilities of the scores 1..K (each row sums to 1). Returns (...,) float64.
    Example with K = 5: P(4) = P(5) = 0.5 -> expected score 4.5 -> reward 0.875.
    """
    probabilities = np.asarray(probabilities, np.float64)
    k = probabilities.shape[-1]
    if k < 2:
        raise ValueError(f"an episode score needs at least 2 levels, got {k}")
    return probabilities @ (np.arange(k) / (k - 1))


def _batch(frames: Any) -> np.ndarray:
    frames = np.asarray(frames)
    return frames[None] if frames.ndim == 3 else frames


def _answer_token_ids(tokenizer: Any, question: CriticQuestion, file: Path) -> list[int]:
    cue = tokenizer(question.answer_cue, add_special_tokens=False)["input_ids"]
    ids = []
    for answer in question.answers:
        full = tokenizer(question.answer_cue + answer, add_special_tokens=False)["input_ids"]
        if len(full) != len(cue) + 1 or full[:len(cue)] != cue:
            raise ValueError(f"{file}: the answer {answer!r} is not a single token after {question.answer_cue!r}")
        ids.append(full[-1])
    return ids


def _check_checkpoint(path: Path) -> str:
    """The config's model_type; ValueError naming the first missing or malformed file."""
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{config_file} is missing: model_path must be a local Qwen-VL checkpoint directory")
    try:
        config = json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{config_file} is not valid JSON: {exc}") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in MODEL_CLASSES:
        raise ValueError(f"{config_file}: model_type {model_type!r} is not one of {sorted(MODEL_CLASSES)}")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, AttributeError, TypeError) as exc:
            raise ValueError(f"{index} is malformed: {type(exc).__name__}: {exc}") from None
        missing = sorted(s for s in shards if not (path / s).is_file())
        if missing:
            raise ValueError(f"{path / missing[0]} is missing (listed in {index.name})")
    elif not (path / "model.safetensors").is_file():
        raise ValueError(f"{path / 'model.safetensors'} is missing (nor is there a model.safetensors.index.json)")
    for name in ("preprocessor_config.json", "tokenizer.json", "tokenizer_config.json"):
        if not (path / name).is_file():
            raise ValueError(f"{path / name} is missing: the checkpoint needs its image processor and tokenizer")
    return model_type


class VlmCritic:
    """`ProgressScorer` reading a Qwen-VL model's answer-token probabilities (see the module docstring)."""

    def __init__(self, model: Any, image_processor: Any, tokenizer: Any, question: CriticQuestion,
                 answer_ids: Sequence[int], image_token: str = "<|image_pad|>"):
        self.model, self.image_processor, self.tokenizer = model, image_processor, tokenizer
        self.question = question
        self.answer_ids = list(answer_ids)
        self.image_token = image_token

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", question: str = "true_false") -> VlmCritic:
        """Loads a checkpoint directory (bfloat16 on CUDA, float32 elsewhere; no download).

        Raises:
            ValueError: a missing or malformed file (named), an unknown question, a tokenizer whose answers
                are not single tokens, or weights that do not load.
        """
        import torch
        import transformers
        from transformers import AutoImageProcessor, AutoTokenizer

        if question not in QUESTIONS:
            raise ValueError(f"question {question!r} is not one of {sorted(QUESTIONS)}")
        device = resolve_device(device)
        path = Path(path)
        model_class = getattr(transformers, MODEL_CLASSES[_check_checkpoint(path)])
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - any tokenizer failure names the file
            raise ValueError(f"{path / 'tokenizer.json'} cannot be loaded: {type(exc).__name__}: {exc}") from None
        if not tokenizer.chat_template:
            raise ValueError(f"{path / 'chat_template.jinja'} is missing: the tokenizer has no chat template")
        try:
            image_processor = AutoImageProcessor.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"{path / 'preprocessor_config.json'} cannot be loaded: {type(exc).__name__}: "
                             f"{exc}") from None
        chosen = QUESTIONS[question]
        answer_ids = _answer_token_ids(tokenizer, chosen, path / "tokenizer.json")
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        weights = path / ("model.safetensors.index.json" if (path / "model.safetensors.index.json").is_file()
                          else "model.safetensors")
        try:
            model = model_class.from_pretrained(str(path), dtype=dtype, local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - a corrupt or mismatched weights file
            raise ValueError(f"{weights} cannot be loaded: {type(exc).__name__}: {exc}") from None
        image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        critic = cls(model.to(device).eval(), image_processor, tokenizer, chosen, answer_ids, image_token)
        try:
            critic.prompt(["front"], "a goal")
        except Exception as exc:  # noqa: BLE001 - a template that fails or misplaces the images
            raise ValueError(f"{path / 'chat_template.jinja'}: {type(exc).__name__}: {exc}") from None
        return critic

    # -- prompts ---------------------------------------------------------------------------------

    def prompt(self, cameras: Sequence[str], goal: str) -> str:
        """The text of one question (before the image placeholders are expanded): per camera, its first
        and its current frame, then the question with the goal, then the answer cue."""
        content = []
        for camera in cameras:
            content += [{"type": "text", "text": f"Camera {camera}, at the start of the episode and now:"},
                        {"type": "image"}, {"type": "image"}]
        question = self.question.text.format(goal=goal)
        # in the user's turn the text goes on after the question: render a marker in its place and cut there
        shown = question if self.question.assistant_turn else _MARK
        content.append({"type": "text", "text": shown})
        rendered = self.tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                                      add_generation_prompt=self.question.assistant_turn)
        if rendered.count(self.image_token) != 2 * len(cameras) or shown not in rendered:
            raise ValueError(f"the checkpoint's chat template does not render one {self.image_token} per image and "
                             "the question text")
        if self.question.assistant_turn:
            return rendered + self.question.answer_cue
        return rendered.split(_MARK)[0] + question + self.question.answer_cue

    def inputs(self, first: Mapping[str, Any], frames: Mapping[str, Any], goals: Sequence[str]):
        """Model inputs (a dict of torch tensors on the model's device) asking the question about
        the clip (first[c][i], frames[c][i]) of every camera c, for each i (first may hold one frame)."""
        cameras = list(frames)
        current = {c: _batch(frames[c]) for c in cameras}
        n = len(next(iter(current.values())))
        if any(len(f) != n for f in current.values()) or len(goals) != n:
            raise ValueError(f"every camera and the goals must hold the same number of steps, got "
                             f"{ {c: len(f) for c, f in current.items()} } and {len(goals)} goals")
        starts = {}
        for c in cameras:
            if c not in first:
                raise ValueError(f"no first frame for camera {c!r}")
            start = _batch(first[c])
            if len(start) not in (1, n):
                raise ValueError(f"give one first frame or one per step ({n}) for camera {c!r}, got {len(start)}")
            starts[c] = np.broadcast_to(start, current[c].shape) if len(start) == 1 else start
        images = processor_frames([image for i in range(n) for c in cameras for image in (starts[c][i], current[c][i])])
        vision = self.image_processor(images=images, return_tensors="pt", input_data_format="channels_last")
        merge = int(self.image_processor.merge_size) ** 2
        counts = iter((vision["image_grid_thw"].prod(-1) // merge).tolist())
        texts = []
        for goal in goals:
            pieces = self.prompt(cameras, goal).split(self.image_token)
            texts.append(pieces[0] + "".join(self.image_token * next(counts) + p for p in pieces[1:]))
        text = self.tokenizer(texts, padding=True, padding_side="left", return_tensors="pt",
                              add_special_tokens=False)
        # modality of each token (0 text, 1 image), which the model's multimodal rotary positions need
        mm_types = (text["input_ids"] == self.model.config.image_token_id).long()
        batch = {**text, "mm_token_type_ids": mm_types, "pixel_values": vision["pixel_values"],
                 "image_grid_thw": vision["image_grid_thw"]}
        device, dtype = self.model.device, self.model.dtype
        return {k: v.to(device, dtype) if v.is_floating_point() else v.to(device) for k, v in batch.items()}

    # -- scoring ---------------------------------------------------------------------------------

    def answer_probabilities(self, first: Mapping[str, Any], frames: Mapping[str, Any],
                             goals: Sequence[str]) -> np.ndarray:
        """(N, K) probabilities of the K answers for N clips, renormalised over the answers; one forward pass."""
        import torch

        with torch.inference_mode():
            logits = self.model(**self.inputs(first, frames, goals), logits_to_keep=1).logits[:, -1]
            answers = logits[:, self.answer_ids].float()
        return torch.softmax(answers, dim=-1).cpu().numpy().astype(np.float64)

    def progress(self, probabilities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(progress reading in [0, 1], done probability) from (N, K) answer probabilities."""
        if self.question.assistant_turn:
            return expected_score_reward(probabilities), probabilities[:, -1]
        return probabilities[:, 0], probabilities[:, 0]

    def score(self, first: Mapping[str, Any], previous: Mapping[str, Any], current: Mapping[str, Any],
              goal: str | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(progress_delta in [-1, 1], done_probability in [0, 1]), each (B,) float32 (module docstring).
        Every camera of `current` is shown; `previous` and `first` need the same cameras."""
        cur = {c: _batch(f) for c, f in current.items()}
        b = len(next(iter(cur.values())))
        prev = {}
        for c in cur:
            if c not in previous or _batch(previous[c]).shape != cur[c].shape:
                raise ValueError(f"previous must hold camera {c!r} frames shaped like current's {cur[c].shape}")
            prev[c] = _batch(previous[c])
        goals = [goal] * b if isinstance(goal, str) else list(goal)
        frames = {c: np.concatenate([prev[c], cur[c]]) for c in cur}
        starts = {c: _batch(f) for c, f in first.items()}
        starts = {c: s if len(s) == 1 else np.concatenate([s, s]) for c, s in starts.items()}  # one per prompt
        reading, done = self.progress(self.answer_probabilities(starts, frames, goals + goals))
        delta = share_of_remaining(reading[:b], reading[b:])
        return delta.astype(np.float32), done[b:].astype(np.float32)
