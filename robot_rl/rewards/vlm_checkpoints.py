"""Random-weight checkpoints of the VLM reward backends' own model classes, built here with no download: the
native `InternVLForConditionalGeneration` (the vlac backend's native path) and `Qwen3VLForConditionalGeneration`
(vlm_critic, vlm_episode_score), each with a tokenizer and image processor built locally, saved in the layout
the backend loads (`robot_rl.rewards.vlac`, `robot_rl.rewards.vlm_critic`).

Two sizes (`SIZES`): ``tiny`` (a few layers of width 16-32, seconds on a CPU: the tests and
`benchmarks/reward_latency.py --quick`) and ``2b``, the published architectures' sizes, for latency:

* InternVL, as VLAC-2B (InternRobotics/VLAC, trained from OpenGVLab/InternVL2-2B): InternVL2-2B's config.json
  has the vision tower InternViT-300M-448px (24 layers, hidden 1024, 16 heads, MLP 4096, 448 x 448 images in
  14 px patches, pixel shuffle 0.5: 256 tokens a frame) and the language model internlm2-chat-1_8b (24 layers,
  hidden 2048, 16 heads, 8 key-value heads, MLP 8192, vocabulary 92553). transformers has no native InternLM2,
  so the native class gets a Qwen2 language model of those sizes: the same decoder (RMSNorm, rotary, grouped
  query attention, SwiGLU) but for Qwen2's biases on q/k/v, a negligible share of the compute.
* Qwen3-VL-2B-Instruct's config.json: text 28 layers, hidden 2048, 16 heads, 8 key-value heads, head_dim 128,
  MLP 6144, vocabulary 151936, tied embeddings, interleaved M-RoPE (sections 24/20/20, theta 5e6); vision 24
  layers, hidden 1024, 16 heads, MLP 4096, 16 px patches merged 2 x 2, 2304 position embeddings, DeepStack
  from layers 5, 11, 17, output width 2048; its preprocessor_config.json: at least 65536 pixels an image
  (a 64 x 64 frame is resized to 256 x 256: 64 tokens), mean and std 0.5.

The tokenizers are small (the words of the backends' prompts and a goal); the model's vocabulary stays the
published size, so embedding and output layers cost what they cost in the real model. The weights are noise;
the InternVL output layer is scaled so that the noise answers in digits (VLAC's answers are numbers), as a
trained checkpoint does, instead of running into words the reading refuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["INTERNVL_IMAGE_TOKENS", "QWEN_SPECIAL_TOKENS", "SIZES", "internvl_tokenizer", "qwen_tokenizer",
           "save_internvl_checkpoint", "save_qwen3vl_checkpoint"]

INTERNVL_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>",
                           "<video>"]
QWEN_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                       "<|image_pad|>", "<|video_pad|>"]
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")
"""Qwen's pre-tokenizer split: digits one by one, a space kept with the word after it."""
QWEN_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""ChatML as Qwen-VL's template renders it (one vision block per image)."""

SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "tiny": {
        "internvl": dict(
            vision=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                        image_size=28, patch_size=7),  # 4 x 4 patches pixel-shuffled by 0.5: 4 tokens a frame
            text=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=64, max_position_embeddings=2048),
            vocab_size=None),  # None: the tokenizer's
        "qwen3_vl": dict(
            text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=16,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2],
                                       "mrope_interleaved": True}),
            vision=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32, patch_size=16,
                        num_position_embeddings=16, deepstack_visual_indexes=[1]),
            processor=dict(min_pixels=32 * 32, max_pixels=64 * 64),
            vocab_size=None, tie_word_embeddings=False),
    },
    "2b": {
        "internvl": dict(
            vision=dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                        image_size=448, patch_size=14),
            text=dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=8,
                      intermediate_size=8192, max_position_embeddings=32768, rope_theta=1_000_000.0),
            vocab_size=92553),
        "qwen3_vl": dict(
            text=dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                      num_key_value_heads=8, head_dim=128, max_position_embeddings=262144,
                      rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                       "mrope_section": [24, 20, 20], "mrope_interleaved": True}),
            vision=dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, out_hidden_size=2048,
                        patch_size=16, num_position_embeddings=2304, deepstack_visual_indexes=[5, 11, 17]),
            processor=dict(min_pixels=65536, max_pixels=16777216),
            vocab_size=151936, tie_word_embeddings=True),
    },
}
"""Per size, per model family: the configuration values (module docstring for where the 2b ones come from)."""
INTERNVL_IMAGE_TOKENS = {size: (spec["internvl"]["vision"]["image_size"] // spec["internvl"]["vision"]["patch_size"])
                         ** 2 // 4 for size, spec in SIZES.items()}
"""Context tokens one frame takes in the InternVL checkpoint of each size (pixel shuffle 0.5: a quarter of the
patches)."""


def _size(size: str, family: str) -> dict[str, Any]:
    if size not in SIZES:
        raise ValueError(f"size {size!r} is not one of {sorted(SIZES)}")
    return SIZES[size][family]


# ---- InternVL (the vlac backend) -------------------------------------------------------------------------------

def _internvl_pre_tokenizer():
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(),
                                    pre_tokenizers.Digits(individual_digits=True)])


def internvl_tokenizer(goal: str):
    """A word-level tokenizer over the words of VLAC's prompts and `goal`, digits one token each, with
    InternVL's image tokens."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from robot_rl.rewards.vlac import VlacPrompts

    prompts = VlacPrompts()
    text = " ".join([prompts.system, prompts.pair, prompts.done, prompts.reference_intro, prompts.reference_frame,
                     prompts.reference_outro, prompts.first_frame, goal, "system user assistant 0123456789 -+."])
    words = sorted({w for w, _ in _internvl_pre_tokenizer().pre_tokenize_str(text.replace("<image>", " "))})
    vocab = {t: i for i, t in enumerate(INTERNVL_SPECIAL_TOKENS + ["[UNK]"] + words)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = _internvl_pre_tokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="[UNK]", extra_special_tokens=INTERNVL_SPECIAL_TOKENS[1:])


def save_internvl_checkpoint(path: str | Path, goal: str, size: str = "tiny", seed: int = 0) -> Path:
    """A random `InternVLForConditionalGeneration` of `size` in the native layout the vlac backend loads, with a
    tokenizer knowing `goal`'s words; returns `path`."""
    import torch
    from transformers import InternVLConfig, InternVLForConditionalGeneration
    from transformers.models.got_ocr2 import GotOcr2ImageProcessorPil

    from robot_rl.rewards.vlac import IMAGE_CONTEXT, IMAGENET_MEAN, IMAGENET_STD

    spec = _size(size, "internvl")
    tokenizer = internvl_tokenizer(goal)
    vocab = tokenizer.get_vocab()
    image_size = spec["vision"]["image_size"]
    config = InternVLConfig(
        vision_config=spec["vision"],
        text_config=dict(model_type="qwen2", vocab_size=spec["vocab_size"] or len(vocab), tie_word_embeddings=False,
                         **spec["text"]),
        image_token_id=vocab[IMAGE_CONTEXT], image_seq_length=INTERNVL_IMAGE_TOKENS[size], tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = InternVLForConditionalGeneration(config).eval()
    # noise, but noise that speaks in numbers: only digits, signs, the decimal point and the end token get
    # large output weights, so the greedy answers are mostly numbers of a few digits
    with torch.no_grad():
        head = model.lm_head.weight
        keep = torch.zeros(head.shape[0], 1)
        keep[[vocab[t] for t in "0123456789-."] + [vocab["<|im_end|>"]]] = 1.0
        head.mul_(0.05 + 20.0 * keep)
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    GotOcr2ImageProcessorPil(size={"height": image_size, "width": image_size}, crop_to_patches=False,
                             image_mean=list(IMAGENET_MEAN), image_std=list(IMAGENET_STD)).save_pretrained(path)
    return path


# ---- Qwen3-VL (the vlm_critic and vlm_episode_score backends) ----------------------------------------------------

def qwen_tokenizer(goal: str):
    """A byte-level BPE tokenizer trained here on the critics' questions about `goal` (their answers single
    tokens after the cue), Qwen's special tokens and a ChatML chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from robot_rl.rewards.vlm_critic import EPISODE_SCORE, TRUE_FALSE

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    corpus = [TRUE_FALSE.text.format(goal=goal) + TRUE_FALSE.answer_cue + " True False",
              EPISODE_SCORE.text.format(goal="open the drawer") + EPISODE_SCORE.answer_cue + "1 2 3 4 5",
              "Camera front, wrist at the start of the episode and now: user assistant"] * 4
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=QWEN_SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = QWEN_CHAT_TEMPLATE
    return fast


def save_qwen3vl_checkpoint(path: str | Path, goal: str, size: str = "tiny", seed: int = 0) -> Path:
    """A random `Qwen3VLForConditionalGeneration` of `size` in the layout of a Hugging Face snapshot (what
    vlm_critic and vlm_episode_score load), with a tokenizer trained on `goal`'s question; returns `path`."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    spec = _size(size, "qwen3_vl")
    tokenizer = qwen_tokenizer(goal)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    text = dict(vocab_size=spec["vocab_size"] or len(tokenizer), pad_token_id=ids["<|endoftext|>"], **spec["text"])
    config = Qwen3VLConfig(text_config=text, vision_config=spec["vision"], image_token_id=ids["<|image_pad|>"],
                           video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                           vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=spec["tie_word_embeddings"])
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config).eval()
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    patch = spec["vision"]["patch_size"]
    Qwen2VLImageProcessorPil(patch_size=patch, merge_size=2, temporal_patch_size=2, image_mean=[0.5, 0.5, 0.5],
                             image_std=[0.5, 0.5, 0.5], **spec["processor"]).save_pretrained(path)
    return path
