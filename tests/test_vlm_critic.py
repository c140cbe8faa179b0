"""The open-VLM critic (robot_rl.rewards.vlm_critic) on the real `Qwen3VLForConditionalGeneration` class: a tiny
random configuration, a tokenizer trained with the `tokenizers` library, Qwen's image processor and a ChatML chat
template (`robot_rl.rewards.vlm_checkpoints`), saved in a checkpoint directory and loaded through `load_backend`.
The answers are noise; the tests pin the protocol (prompt, batching, True/False normalisation, progress/done
mapping, episode score, refusals) and one run through the reward stream's scoring thread."""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from robot_rl.rewards.backends import BACKENDS, BackendLoadError, load_backend  # noqa: E402
from robot_rl.rewards.online import RewardConfig, RewardStream, ScoringWorker  # noqa: E402
from robot_rl.rewards.progress import share_of_remaining  # noqa: E402
from robot_rl.rewards.vlm_checkpoints import save_qwen3vl_checkpoint  # noqa: E402
from robot_rl.rewards.vlm_critic import EPISODE_SCORE, TRUE_FALSE, expected_score_reward  # noqa: E402

GOAL = "pick up the cube"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny random Qwen3-VL checkpoint directory in the layout of a Hugging Face snapshot."""
    return save_qwen3vl_checkpoint(tmp_path_factory.mktemp("qwen3vl") / "tiny", GOAL)


@pytest.fixture(scope="module")
def critic(checkpoint):
    return load_backend("vlm_critic", str(checkpoint), "cpu").scorer


def frames(seed: int, n: int, size=(40, 48)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *size, 3), dtype=np.uint8)


def test_loads_through_the_backend_registry(checkpoint, critic):
    loaded = load_backend("vlm_critic", str(checkpoint), "cpu", ["front", "wrist"])
    assert loaded.cameras is None and loaded.needs_goal and loaded.done_threshold == 0.5
    assert type(critic.model).__name__ == "Qwen3VLForConditionalGeneration"
    assert critic.model.dtype == torch.float32 and critic.question == TRUE_FALSE
    assert [critic.tokenizer.convert_ids_to_tokens(i) for i in critic.answer_ids] == ["ĠTrue", "ĠFalse"]
    assert {"vlm_critic", "vlm_episode_score"} <= set(BACKENDS)
    assert "config.json" in BACKENDS["vlm_critic"].how_to_make


def test_prompt_carries_the_images_and_the_goal(critic):
    first, now = {"front": frames(0, 1)}, {"front": frames(1, 2)}
    inputs = critic.inputs(first, now, [GOAL, "open the drawer"])
    grid = inputs["image_grid_thw"]
    assert grid.shape == (4, 3)  # (first, now) for each of the 2 steps
    per_image = int(grid[0].prod()) // 4
    text = critic.tokenizer.decode(inputs["input_ids"][0], skip_special_tokens=False)
    assert (inputs["input_ids"][0] == critic.model.config.image_token_id).sum() == 2 * per_image
    assert text.count("<|vision_start|>") == 2 and "Camera front" in text and f'"{GOAL}"' in text
    assert text.endswith(TRUE_FALSE.answer_cue) and "<|im_start|>user" in text and "assistant" not in text
    assert '"open the drawer"' in critic.tokenizer.decode(inputs["input_ids"][1])
    # two cameras: four images per prompt, in camera order
    two = critic.inputs({"front": frames(0, 1), "wrist": frames(2, 1)}, {"front": frames(1, 1), "wrist": frames(3, 1)},
                        [GOAL])
    decoded = critic.tokenizer.decode(two["input_ids"][0])
    assert decoded.count("<|vision_start|>") == 4 and decoded.index("Camera front") < decoded.index("Camera wrist")


def test_true_false_normalisation_matches_the_models_own_logits(critic):
    first, now = {"front": frames(0, 1)}, {"front": frames(1, 1)}
    inputs = critic.inputs(first, now, [GOAL])
    with torch.no_grad():
        logits = critic.model(**inputs).logits[0, -1].double()
    true_id, false_id = critic.answer_ids
    expected = 1.0 / (1.0 + torch.exp(logits[false_id] - logits[true_id])).item()
    probabilities = critic.answer_probabilities(first, now, [GOAL])
    assert probabilities.shape == (1, 2) and probabilities[0].sum() == pytest.approx(1.0)
    assert probabilities[0, 0] == pytest.approx(expected, abs=1e-5)


def test_a_batch_scores_like_single_calls(critic):
    first = {"front": frames(0, 1)}
    previous, current = {"front": frames(1, 3)}, {"front": frames(2, 3)}
    goals = [GOAL, "open the drawer", "pick up the cube and open the drawer now"]  # unequal lengths: padding
    delta, done = critic.score(first, previous, current, goals)
    assert delta.shape == done.shape == (3,) and delta.dtype == done.dtype == np.float32
    for i in range(3):
        d1, p1 = critic.score(first, {"front": previous["front"][i]}, {"front": current["front"][i]}, goals[i])
        assert d1[0] == pytest.approx(delta[i], abs=1e-4) and p1[0] == pytest.approx(done[i], abs=1e-4)


def test_progress_and_done_mapping(critic):
    first = {"front": frames(0, 1)}
    previous, current = {"front": frames(1, 2)}, {"front": frames(2, 2)}
    p_prev = critic.answer_probabilities(first, previous, [GOAL] * 2)[:, 0]
    p_cur = critic.answer_probabilities(first, current, [GOAL] * 2)[:, 0]
    delta, done = critic.score(first, previous, current, GOAL)
    np.testing.assert_allclose(done, p_cur, atol=1e-5)
    np.testing.assert_allclose(delta, share_of_remaining(p_prev, p_cur), atol=1e-5)
    swapped, _ = critic.score(first, current, previous, GOAL)
    np.testing.assert_allclose(swapped, share_of_remaining(p_cur, p_prev), atol=1e-5)
    # by hand: the True share 0.2 -> 0.6 gains half of the remaining 0.8
    reading, done_by_hand = critic.progress(np.array([[0.2, 0.8], [0.6, 0.4]]))
    np.testing.assert_allclose(reading, [0.2, 0.6])
    np.testing.assert_allclose(done_by_hand, [0.2, 0.6])
    assert share_of_remaining(reading[0], reading[1]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="previous must hold camera 'front'"):
        critic.score(first, {"wrist": frames(1, 2)}, current, GOAL)


def test_episode_score_mapping(checkpoint):
    assert expected_score_reward([0, 0, 0, 0.5, 0.5]) == pytest.approx(0.875)
    np.testing.assert_allclose(expected_score_reward(np.eye(5)), [0.0, 0.25, 0.5, 0.75, 1.0])
    assert expected_score_reward([0.5, 0.5]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="at least 2 levels"):
        expected_score_reward([1.0])
    scorer = load_backend("vlm_episode_score", str(checkpoint), "cpu").scorer
    assert scorer.question == EPISODE_SCORE and len(scorer.answer_ids) == 5
    first, previous, current = {"front": frames(0, 1)}, {"front": frames(1, 1)}, {"front": frames(2, 1)}
    text = scorer.tokenizer.decode(scorer.inputs(first, current, [GOAL])["input_ids"][0])
    assert text.endswith("<|im_start|>assistant\nANSWER: ") and f"Task: {GOAL}" in text
    probabilities = scorer.answer_probabilities(first, current, [GOAL])
    reading, done = scorer.progress(probabilities)
    assert reading[0] == pytest.approx(float(probabilities[0] @ [0, 0.25, 0.5, 0.75, 1.0]))
    assert done[0] == pytest.approx(probabilities[0, 4])
    before = expected_score_reward(scorer.answer_probabilities(first, previous, [GOAL]))
    delta, done_probability = scorer.score(first, previous, current, GOAL)
    assert delta[0] == pytest.approx(share_of_remaining(before[0], reading[0]), abs=1e-5)
    assert done_probability[0] == pytest.approx(done[0], abs=1e-5)


def test_missing_or_malformed_checkpoint_is_refused_naming_the_file(checkpoint, tmp_path):
    def broken(case: int, name: str, content: str | None):
        path = tmp_path / f"case{case}"
        shutil.copytree(checkpoint, path)
        target = path / name
        if content is None:
            target.unlink()
        else:
            target.write_text(content)
        return path

    cases = [("config.json", None, r"config\.json is missing"),
             ("config.json", "{not json", r"config\.json is not valid JSON"),
             ("config.json", json.dumps({"model_type": "llava"}), r"config\.json: model_type 'llava'"),
             ("model.safetensors", None, r"model\.safetensors is missing"),
             ("model.safetensors", "garbage", r"model\.safetensors cannot be loaded"),
             ("preprocessor_config.json", None, r"preprocessor_config\.json is missing"),
             ("tokenizer.json", None, r"tokenizer\.json is missing"),
             ("chat_template.jinja", None, r"chat_template\.jinja is missing"),
             ("chat_template.jinja", "{{ messages[0]['role'] }}", r"chat_template\.jinja: .*per image"),
             ("tokenizer.json", "{}", r"tokenizer\.json cannot be loaded")]
    for case, (name, content, message) in enumerate(cases):
        path = broken(case, name, content)
        with pytest.raises(BackendLoadError, match=message) as caught:
            load_backend("vlm_critic", str(path), "cpu")
        assert str(path / name) in str(caught.value) and "\n" not in str(caught.value)


def test_reward_stream_scores_frames_end_to_end(checkpoint):
    """The node's path without ROS: the scoring thread loads the backend, frames are fed, rewards come out."""
    from types import SimpleNamespace

    from robot_rl.ros.reward_io import feed_image

    def image(pixels, stamp_ns):
        stamp = SimpleNamespace(sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9)
        h, w, _ = pixels.shape
        return SimpleNamespace(header=SimpleNamespace(stamp=stamp), encoding="rgb8", height=h, width=w, step=3 * w,
                               data=pixels.tobytes(), is_bigendian=0)

    config = RewardConfig(backend="vlm_critic", model_path=str(checkpoint), cameras=("front",), goal=GOAL,
                          device="cpu", max_latency_s=3600.0)
    stream, published, errors = RewardStream(config), [], []
    worker = ScoringWorker(stream, lambda: load_backend(config.backend, config.model_path, "cpu", config.cameras),
                           published.append, errors.append, poll_s=0.01).start()
    try:
        deadline = time.monotonic() + 20
        while stream.backend is None and not errors and time.monotonic() < deadline:
            time.sleep(0.01)
        shots = frames(7, 3, size=(32, 32))
        for i in range(3):
            feed_image(stream, "front", image(shots[i], (i + 1) * 10**9))
            while len(published) < i and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        worker.stop()
    assert not errors and [r.stamp_ns for r in published] == [2 * 10**9, 3 * 10**9]
    direct = stream.backend.scorer.score({"front": shots[0]}, {"front": shots[0]}, {"front": shots[1]}, GOAL)
    assert published[0].progress_delta == pytest.approx(float(direct[0][0]), abs=1e-5)
    assert published[0].done_probability == pytest.approx(float(direct[1][0]), abs=1e-5)
    # the accumulated value is the progress since the start: share_of_remaining(p(first), p(latest))
    start, latest = stream.backend.scorer.answer_probabilities(
        {"front": shots[0]}, {"front": shots[[0, 2]]}, [GOAL, GOAL])[:, 0]
    assert published[1].value == pytest.approx(float(share_of_remaining(start, latest)), abs=1e-4)
    assert stream.stats()["frames_scored"] == 2
