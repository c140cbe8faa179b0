"""The vlac backend on the real model class: a tiny random `InternVLForConditionalGeneration` with a tokenizer and
image processor built locally (`robot_rl.rewards.vlm_checkpoints`), saved in the native layout, loaded through
`load_backend` and asked VLAC's questions about real frames. Its answers are noise; the tests pin the protocol
(prompts, frames, reference, batching, the probability-weighted reading of numbers, the value recursion, refusals
of broken checkpoints)."""

from __future__ import annotations

import json
import re
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("transformers")

from robot_rl.rewards.backends import BackendLoadError, load_backend  # noqa: E402
from robot_rl.rewards.online import RewardConfig, RewardStream  # noqa: E402
from robot_rl.rewards.progress import accumulate_value  # noqa: E402
from robot_rl.rewards.scorer_input import UnreadableScores  # noqa: E402
from robot_rl.rewards.vlac import (IMAGE_CONTEXT, PROMPTS_FILE, REFERENCE_FILE, VlacPrompts, pick_reference,  # noqa: E402
                                   read_number, reference_labels)
from robot_rl.rewards.vlm_checkpoints import INTERNVL_IMAGE_TOKENS, save_internvl_checkpoint  # noqa: E402
from robot_rl.ros.reward_io import feed_image  # noqa: E402

GOAL = "pick up the red cube"
IMAGE_TOKENS = INTERNVL_IMAGE_TOKENS["tiny"]  # 4 x 4 patches of 7 px, pixel-shuffled by 0.5: 4 tokens a frame
S = 1_000_000_000


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_internvl_checkpoint(tmp_path_factory.mktemp("vlac") / "native", GOAL)


@pytest.fixture(scope="module")
def scorer(checkpoint):
    return load_backend("vlac", str(checkpoint), "cpu").scorer


def _copy(checkpoint, tmp_path):
    return shutil.copytree(checkpoint, tmp_path / "ckpt")


def _frames(n, size=(24, 32), seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, *size, 3), dtype=np.uint8)


# ---- reading answers, labels, the value ----------------------------------------------------------

def test_read_number_weights_digit_tokens_by_probability():
    # "-35": digits kept above 0.1 x the step's best probability, weighted by probability
    steps = [[("-", 0.9), ("+", 0.1)],
             [("3", 0.6), ("4", 0.3), ("2", 0.05), ("a", 0.05)],  # 2: 0.05 < 0.06, out
             [("5", 0.5), ("0", 0.4), ("x", 0.1)]]  # x is no digit
    first, second = (3 * 0.6 + 4 * 0.3) / 0.9, (5 * 0.5 + 0 * 0.4) / 0.9
    assert read_number(steps) == pytest.approx(-(first * 10 + second))
    assert read_number([[("1", 0.8), ("0", 0.15), ("<|im_end|>", 0.05)]]) == pytest.approx(0.8 / 0.95)  # done
    assert read_number([[("1", 1.0)], [(".", 1.0)], [("5", 0.5), ("7", 0.5)]]) == pytest.approx(1.6)
    assert read_number([[("45", 1.0)], [("6", 1.0)]]) == pytest.approx(456.0)  # a two-digit token shifts by 2


def test_read_number_reads_malformed_answers_or_refuses():
    word = [("score", 1.0)]
    assert read_number([word, [(":", 1.0)], [("1", 1.0)], [("2", 1.0)], word]) == 12.0  # text around the number
    assert read_number([[("7", 1.0)], [(".", 1.0)], word]) == 7.0  # a point without decimals
    assert read_number([[("-", 1.0)], word, [("3", 1.0)]]) == 3.0  # a sign not next to the digits does not count
    with pytest.raises(ValueError, match="no number in the answer 'score:'"):
        read_number([word, [(":", 1.0)]])
    with pytest.raises(ValueError, match="no number in the answer ''"):
        read_number([])


def test_reference_labels_and_frame_choice():
    assert reference_labels(6) == [0, 20, 40, 60, 80, 100]
    assert reference_labels(7) == [0, 16, 33, 50, 66, 83, 100]  # rounded down, as VLAC labels them
    with pytest.raises(ValueError, match="at least 2"):
        reference_labels(1)
    frames = np.arange(10)
    assert pick_reference(frames, 6).tolist() == [0, 1, 3, 5, 7, 9]  # step 1.8, indices rounded down
    assert pick_reference(frames[:4], 6).tolist() == [0, 1, 2, 3]


def test_value_recursion_on_vlac_percentages():
    # VLAC: v <- v + (100 - v) c / 100 with c in percent of the remaining progress; our deltas are c / 100
    critic = np.array([50.0, -20.0, 30.0, -50.0])
    expected = [0.0, 50.0, 40.0, 58.0, 37.0]  # 0 + 100 * .5, 50 + 50 * -.2, 40 + 60 * .3, 58 + 42 * -.5
    assert np.allclose(100.0 * accumulate_value(critic / 100.0), expected)


# ---- prompt files and broken checkpoints ---------------------------------------------------------

def test_prompt_files(tmp_path):
    assert VlacPrompts.for_checkpoint(tmp_path) == VlacPrompts()
    own = {"pair": "A <image> B <image> {task}?", "done": "<image> {task} done?"}
    (tmp_path / PROMPTS_FILE).write_text(json.dumps(own))
    prompts = VlacPrompts.for_checkpoint(tmp_path)
    assert prompts.pair == own["pair"] and prompts.system == VlacPrompts().system
    for bad, message in (({"pair": "<image> {task}"}, "pair template needs 2 <image>"),
                         ({"critic": "x"}, "unknown prompt keys"), (["x"], "JSON object")):
        (tmp_path / PROMPTS_FILE).write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=message):
            VlacPrompts.for_checkpoint(tmp_path)
    (tmp_path / PROMPTS_FILE).write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        VlacPrompts.for_checkpoint(tmp_path)


def _refused(path, file):
    with pytest.raises(BackendLoadError) as caught:
        load_backend("vlac", str(path), "cpu")
    message = str(caught.value)
    assert "\n" not in message and file in message, message
    return message


def test_missing_or_malformed_checkpoints_are_refused_naming_the_file(checkpoint, tmp_path):
    assert "config.json: missing" in _refused(tmp_path, "config.json")
    ckpt = _copy(checkpoint, tmp_path)
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text("{not json")
    assert "not valid JSON" in _refused(ckpt, "config.json")
    (ckpt / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    assert "neither 'internvl'" in _refused(ckpt, "config.json")
    remote = {"model_type": "internvl_chat", "auto_map": {"AutoModel": "modeling_internvl_chat.InternVLChatModel"}}
    (ckpt / "config.json").write_text(json.dumps({**config, **remote}))
    _refused(ckpt, "modeling_internvl_chat.py")  # remote code that is not there
    (ckpt / "config.json").write_text(json.dumps(config))
    for name in ("preprocessor_config.json", "tokenizer.json", "tokenizer_config.json"):
        moved = shutil.move(ckpt / name, tmp_path / name)
        _refused(ckpt, name)
        shutil.move(moved, ckpt / name)
    weights = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(weights[:100])
    assert "cannot load the model" in _refused(ckpt, "model.safetensors")
    (ckpt / "model.safetensors").unlink()
    assert "no weights" in _refused(ckpt, "model.safetensors")
    (ckpt / "model.safetensors").write_bytes(weights)
    np.save(ckpt / REFERENCE_FILE, _frames(1))
    assert "N >= 2" in _refused(ckpt, REFERENCE_FILE)


# ---- the protocol on the real model ------------------------------------------------------------

def _context_tokens(scorer, text):
    ids = scorer.engine.tokenizer(text)["input_ids"]
    return ids.count(scorer.engine.context_id), ids.count(scorer.engine.tokenizer.unk_token_id)


def test_questions_carry_the_frames_and_the_goal(scorer):
    assert scorer.reference is None and scorer.done_threshold == 0.9
    first, previous, current = _frames(3)
    pair, done = scorer.questions(first[None], previous[None], current[None], [GOAL])
    assert [len(q.frames) for q in (pair, done)] == [2, 1]  # without a reference VLAC shows only the pair
    assert np.array_equal(pair.frames[0], previous) and np.array_equal(pair.frames[1], current)
    assert np.array_equal(done.frames[0], current)
    for question, images in ((pair, 2), (done, 1)):
        assert question.text.startswith(f"<|im_start|>system\n{VlacPrompts().system}<|im_end|>\n<|im_start|>user\n")
        assert question.text.endswith("<|im_end|>\n<|im_start|>assistant\n")
        assert f"<task> {GOAL} </task>" in question.text
        assert _context_tokens(scorer, question.text) == (images * IMAGE_TOKENS, 0)  # every word known
    assert "Image-1: <img>" in pair.text and pair.text.endswith("</task> <score><|im_end|>\n<|im_start|>assistant\n")
    assert re.search(r"user\n<img>(<IMG_CONTEXT>){4}</img>\nThe 1 means yes, the 0 means no", done.text)


def test_reference_frames_precede_the_pair_with_their_labels(checkpoint, tmp_path):
    ckpt = _copy(checkpoint, tmp_path)
    reference = _frames(8, seed=1)
    np.save(ckpt / REFERENCE_FILE, reference)
    scorer = load_backend("vlac", str(ckpt), "cpu").scorer
    assert np.array_equal(scorer.reference, reference[[0, 1, 2, 4, 5, 7]])  # 6 of 8, VLAC's spacing
    first, previous, current = _frames(3, seed=2)
    pair, _ = scorer.questions(first[None], previous[None], current[None], [GOAL])
    assert len(pair.frames) == 6 + 3 and np.array_equal(pair.frames[6], first)
    slot = f"<img>{IMAGE_CONTEXT * IMAGE_TOKENS}</img>\n"
    labels = "".join(f" {p}% {slot}\n" for p in (0, 20, 40, 60, 80, 100))
    assert f"<trajectory> <task> {GOAL} </task>:{labels}</trajectory>0% {slot}\nThis image is the trajectory " \
           f"beginning of the following two images\nImage-1: {slot}\nImage-2: {slot}\n" in pair.text
    assert _context_tokens(scorer, pair.text) == (9 * IMAGE_TOKENS, 0)
    delta, done = scorer.score({"front": first}, {"front": previous}, {"front": current}, GOAL)
    assert delta.shape == done.shape == (1,) and np.isfinite(delta).all()


def test_a_batch_is_one_generation(scorer, monkeypatch):
    model, calls = scorer.engine.model, []
    generate = model.generate

    def counted(**kwargs):  # the real generate, counted
        calls.append((kwargs["input_ids"].shape[0], kwargs["pixel_values"].shape[0]))
        return generate(**kwargs)

    monkeypatch.setattr(model, "generate", counted)
    first, previous, current = _frames(1, seed=3)[0], _frames(4, seed=4), _frames(4, seed=5)
    goals = [GOAL, "pick up the cube", GOAL, "red cube"]
    delta, done = scorer.score({"front": first}, {"front": previous}, {"front": current}, goals)
    assert calls == [(8, 4 * 2 + 4)]  # 4 pair + 4 done questions, 2 + 1 frames each
    assert delta.dtype == done.dtype == np.float32 and delta.shape == done.shape == (4,)
    assert np.all(np.abs(delta) <= 1) and np.all((done >= 0) & (done <= 1))
    assert len(scorer.answers) == 8
    again = scorer.score({"front": first}, {"front": previous}, {"front": current}, goals)
    assert np.array_equal(again[0], delta) and np.array_equal(again[1], done)  # greedy: the same answers
    single = scorer.score({"front": first}, {"front": previous[:1]}, {"front": current[:1]}, GOAL)
    assert single[0].shape == (1,) and len(calls) == 3
    with pytest.raises(ValueError, match="2 goals for 4 frames"):
        scorer.score({"front": first}, {"front": previous}, {"front": current}, goals[:2])


def test_scores_are_the_readings_of_the_answers(scorer, monkeypatch):
    first, previous, current = _frames(1, seed=6)[0], _frames(2, seed=7), _frames(2, seed=8)
    seen = []
    ask = scorer.ask
    monkeypatch.setattr(scorer, "ask", lambda questions: seen.append(ask(questions)) or seen[-1])
    delta, done = scorer.score({"front": first}, {"front": previous}, {"front": current}, GOAL)
    readings = [read_number(steps) for steps in seen[0]]
    assert np.allclose(delta, np.clip(np.array(readings[:2]) / 100.0, -1, 1))
    assert np.allclose(done, np.clip(readings[2:], 0, 1))
    assert all(len(step) == 10 and step[0][1] >= step[-1][1] for steps in seen[0] for step in steps)  # top 10



def test_an_unreadable_answer_spoils_only_its_row(scorer, monkeypatch):
    first, previous, current = _frames(1, seed=6)[0], _frames(3, seed=7), _frames(3, seed=8)
    ask = scorer.ask

    def second_pair_unreadable(questions):
        answers = ask(questions)
        answers[1] = [[("score:", 1.0)]]  # the pair question of row 1 answered without a number
        return answers

    monkeypatch.setattr(scorer, "ask", second_pair_unreadable)
    with pytest.raises(UnreadableScores, match="unreadable VLAC answers: pair 1: no number in the answer 'score:'") \
            as raised:
        scorer.score({"front": first}, {"front": previous}, {"front": current}, GOAL)
    delta, done = raised.value.delta, raised.value.done
    assert np.isnan(delta[1]) and np.isnan(done[1])  # a row needs both answers
    assert np.isfinite(delta[[0, 2]]).all() and np.isfinite(done[[0, 2]]).all()

# ---- through the reward stream (the reward node's logic) -----------------------------------------

def _image_msg(frame, stamp_ns):
    height, width, _ = frame.shape
    stamp = SimpleNamespace(sec=stamp_ns // S, nanosec=stamp_ns % S)
    return SimpleNamespace(header=SimpleNamespace(stamp=stamp), encoding="rgb8", height=height, width=width,
                           step=3 * width, data=frame.tobytes(), is_bigendian=0)


def test_reward_stream_scores_camera_frames_with_the_vlac_backend(checkpoint):
    now = [0]
    config = RewardConfig(backend="vlac", model_path=str(checkpoint), cameras=("front",), goal=GOAL,
                          max_latency_s=0.5, device="cpu")
    stream = RewardStream(config, now_ns=lambda: now[0],
                          backend=load_backend(config.backend, config.model_path, config.device, config.cameras))
    frames = _frames(5, size=(30, 40), seed=9)
    results = []
    for i, frame in enumerate(frames):
        stamp = S + i * S // 10
        now[0] = stamp + (S if i == 3 else S // 100)  # the fourth observation's reward comes a second late
        assert feed_image(stream, "front", _image_msg(frame, stamp)) == ("first" if i == 0 else "queued")
        results += stream.run_once(0)
    stats = stream.stats()
    assert stats["score_errors"] + len(results) == 4, stats["last_score_error"]
    assert results, f"every noise answer was unreadable: {stats['last_score_error']}"
    assert [r.late for r in results] == [r.stamp_ns == S + 3 * S // 10 for r in results]
    deltas = [r.progress_delta for r in results]
    assert np.allclose([r.value for r in results], accumulate_value(deltas)[1:], atol=1e-6)
    assert all(r.reward == pytest.approx(r.progress_delta) and 0 <= r.done_probability <= 1 for r in results)
    assert stats["frames_first"] == 1 and stats["frames_scored"] == len(results) and stats["done_threshold"] == 0.9
    assert stats["rewards_late"] == sum(r.late for r in results) and stats["score_ms_mean"] > 0
