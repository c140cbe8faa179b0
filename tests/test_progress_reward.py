"""The local progress reward model (VLAC-style interface): arithmetic, labels, model contract, learning."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robot_rl.rewards.progress import (GOAL_FEATURE_DIM, ProgressEpisode, ProgressModel, ProgressModelConfig,
                                       accumulate_value, goal_features, progress_episodes, share_of_remaining,
                                       train_progress_model)
from robot_rl.rewards.quality import evaluate_progress, value_order_correlation

PICK_GOAL = "pick up the cube"


# ---- arithmetic ------------------------------------------------------------------------------

def test_share_of_remaining_hand_values():
    np.testing.assert_allclose(share_of_remaining([0.5, 0.5, 0.0, 0.9], [0.75, 0.25, 0.3, 0.0]),
                               [0.5, -0.5, 0.3, -1.0])  # -0.9 / 0.1 = -9 clipped to -1
    t = share_of_remaining(torch.tensor([0.5]), torch.tensor([0.75]))
    assert isinstance(t, torch.Tensor) and t.item() == pytest.approx(0.5)


def test_accumulate_value_hand_values():
    # v1 = 0 + 1 * 0.5; v2 = 0.5 + 0.5 * 0.5; v3 = 0.75 + 0.25 * -0.5
    np.testing.assert_allclose(accumulate_value([0.5, 0.5, -0.5]), [0.0, 0.5, 0.75, 0.625])
    np.testing.assert_allclose(accumulate_value([[1.0], [0.2]], initial=0.5), [[0.5, 1.0], [0.5, 0.6]])
    with pytest.raises(ValueError, match="finite"):
        accumulate_value([0.1, float("nan")])


def test_accumulated_deltas_give_back_the_progress():
    p = np.array([0.1, 0.3, 0.2, 0.6, 0.55, 0.9])
    np.testing.assert_allclose(accumulate_value(share_of_remaining(p[:-1], p[1:]), initial=p[0]), p)


def test_goal_features_are_stable_unit_vectors():
    a = goal_features(["Pick up the cube!", "pick up the cube", "push the cube to the left"])
    assert a.shape == (3, GOAL_FEATURE_DIM) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(a[0], a[1])  # case and punctuation ignored
    assert a[0] @ a[2] < 0.9
    np.testing.assert_array_equal(goal_features("pick up the cube")[0], a[1])  # deterministic (CRC-32)
    for bad in ("", "  !! ", 3):
        with pytest.raises(ValueError):
            goal_features([bad])


def test_value_order_correlation():
    assert value_order_correlation([0, 1, 2, 3]) == pytest.approx(1.0)
    assert value_order_correlation([3, 2, 1, 0]) == pytest.approx(-1.0)
    assert value_order_correlation([1, 1, 1]) == 0.0


# ---- labels ----------------------------------------------------------------------------------

def _frames(n: int, size: int = 64) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    return {c: rng.integers(0, 255, (n, size, size, 3), dtype=np.uint8) for c in ("front", "wrist")}


def test_episode_labels():
    labelled = ProgressEpisode(_frames(5), PICK_GOAL, True, np.array([0, 0, 0, 1, 1], np.int8))
    np.testing.assert_array_equal(labelled.done_frames, [False, False, False, True, True])
    np.testing.assert_allclose(labelled.progress_labels, [0, 1 / 3, 2 / 3, 1, 1])
    unlabelled = ProgressEpisode(_frames(4), PICK_GOAL, True)
    np.testing.assert_array_equal(unlabelled.done_frames, [False, False, False, True])
    np.testing.assert_allclose(unlabelled.progress_labels, [0, 1 / 3, 2 / 3, 1])
    failed = ProgressEpisode(_frames(4), PICK_GOAL, False)
    assert not failed.done_frames.any()
    with pytest.raises(ValueError, match="one entry per frame"):
        ProgressEpisode(_frames(4), PICK_GOAL, True, np.zeros(3, np.int8))
    with pytest.raises(ValueError, match=">= 2 frames"):
        ProgressEpisode({"front": _frames(4)["front"], "wrist": _frames(3)["wrist"]}, PICK_GOAL, True)


# ---- the model's contract --------------------------------------------------------------------

@pytest.fixture(scope="module")
def untrained() -> ProgressModel:
    torch.manual_seed(0)
    return ProgressModel(ProgressModelConfig()).eval()


def test_score_shapes_sizes_and_consistency(untrained):
    frames = _frames(6, 128)  # 128x128 frames are area-resized to the encoder's 64
    first = {c: f[0] for c, f in frames.items()}
    deltas, done = untrained.score(first, {c: f[:-1] for c, f in frames.items()},
                                   {c: f[1:] for c, f in frames.items()}, PICK_GOAL)
    assert deltas.shape == done.shape == (5,) and deltas.dtype == np.float32
    assert np.all(np.abs(deltas) <= 1) and np.all((done >= 0) & (done <= 1))
    progress, done_all = untrained.progress(first, frames, PICK_GOAL)
    np.testing.assert_allclose(done_all[1:], done, atol=1e-5)
    # The accumulated deltas are the model's own progress (VLAC's value, exactly).
    np.testing.assert_allclose(accumulate_value(deltas, progress[0]), progress, atol=1e-4)
    back, _ = untrained.score(first, {c: f[1:] for c, f in frames.items()}, {c: f[:-1] for c, f in frames.items()},
                              PICK_GOAL)
    assert np.all(np.sign(back) == -np.sign(deltas))  # antisymmetric in sign by construction


def test_score_refuses_bad_frames(untrained):
    frames = _frames(2)
    good = {c: f[:1] for c, f in frames.items()}
    cases = [({"front": frames["front"][:1]}, "lack camera 'wrist'"),
             ({c: f[:1].astype(np.float32) for c, f in frames.items()}, "uint8"),
             ({c: f[:1, :, :32] for c, f in frames.items()}, "square"),
             ({"front": frames["front"][:1], "wrist": frames["wrist"]}, "different numbers"),
             ([1, 2], "dict")]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            untrained.score(good, good, bad, PICK_GOAL)
    with pytest.raises(ValueError, match="same number"):
        untrained.score(good, frames, good, PICK_GOAL)
    with pytest.raises(ValueError, match="one goal or one per frame"):
        untrained.score(good, good, good, [PICK_GOAL, PICK_GOAL])


# ---- data and learning -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def pick_data(tmp_path_factory):
    from robot_rl.data.scripted import record_scripted_episodes
    from robot_rl.robots.arm.sim import scripted_lift_action

    root = tmp_path_factory.mktemp("progress")
    out = {}
    for split, count, seed in (("train", 6, 0), ("eval", 3, 1)):
        path = root / f"{split}.zarr"
        stats = record_scripted_episodes(str(path), "robot_rl/ArmPickCube-v0", scripted_lift_action, count,
                                         goal=PICK_GOAL, seed=seed,
                                         env_kwargs={"image_size": 64, "randomization_split": split})
        assert stats["episodes"] == count
        out[split] = path
    return out


def test_recorded_episodes_carry_goal_labels_and_frames_past_success(pick_data):
    from robot_rl.data.episodes import EpisodeDataset

    dataset = EpisodeDataset(pick_data["train"])
    assert dataset.task_config["goal"] == PICK_GOAL and len(dataset) == 6
    episode = dataset.episode(0)
    labels = episode["success_label"]
    assert labels[-1] == 1 and labels[0] == 0
    assert int((labels == 1).sum()) == 6  # the first success and 5 steps held past it
    assert episode["terminated"][-1] and not episode["terminated"][:-1].any()
    episodes = progress_episodes(pick_data["train"])
    assert all(e.success and e.done_frames.sum() == 6 for e in episodes)
    assert progress_episodes(pick_data["train"], goal="lift it")[0].goal == "lift it"


def test_dataset_without_goal_is_refused(tmp_path):
    from robot_rl.data.episodes import EpisodeSchema, EpisodeWriter

    writer = EpisodeWriter(tmp_path / "d.zarr", EpisodeSchema({"front": (8, 8, 3)}, 1, 1), {"task": "x"})
    obs = {"front": np.zeros((8, 8, 3), np.uint8), "state": np.zeros(1, np.float32)}
    writer.add_step(obs, [0.0], 0.0, False, True, False, None, 0.0)
    writer.end_episode(obs)
    with pytest.raises(ValueError, match="no goal"):
        progress_episodes(tmp_path / "d.zarr")
    with pytest.raises(ValueError, match="lacks cameras"):
        progress_episodes(tmp_path / "d.zarr", goal="g", cameras=("wrist",))


def test_learns_progress_from_a_few_demonstrations(pick_data, tmp_path):
    train = progress_episodes(pick_data["train"])
    test = progress_episodes(pick_data["eval"])
    model, metrics = train_progress_model(train, ProgressModelConfig(steps=400, seed=0))
    assert 0 < model.done_threshold < 1 and metrics["validation_episodes"] == 1
    result = evaluate_progress(model, test, model.done_threshold, {PICK_GOAL: "open the drawer"})
    # Untrained, VOC is ~0 and rewound clips are negative about half the time.
    assert result["voc_median"] >= 0.8
    assert result["negative_share_rewound"] >= 0.65
    assert abs(result["wrong_goal_mean"]) <= 0.05
    assert result["done_f1"] >= 0.7
    model.save(tmp_path / "model")
    loaded = ProgressModel.load(tmp_path / "model")
    frames = test[0].frames
    first = {c: f[0] for c, f in frames.items()}
    np.testing.assert_allclose(loaded.progress(first, frames, PICK_GOAL)[0], model.progress(first, frames, PICK_GOAL)[0],
                               atol=1e-6)
    assert loaded.done_threshold == model.done_threshold and loaded.metrics["steps"] == 400


def test_load_refuses_missing_or_foreign_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="reward train"):
        ProgressModel.load(tmp_path)
    (tmp_path / "card.json").write_text('{"format": "something else"}')
    (tmp_path / "progress.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="not a progress model card"):
        ProgressModel.load(tmp_path)


def test_cli_reward_train_and_eval(pick_data, tmp_path, capsys):
    import json

    from robot_rl.cli import main

    out = tmp_path / "model"
    assert main(["reward", "train", "--demos", str(pick_data["train"]), "--steps", "200", "--out", str(out)]) == 0
    trained = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert trained["steps"] == 200 and (out / "card.json").is_file()
    assert main(["reward", "eval", "--demos", str(pick_data["eval"]), "--model", str(out)]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"voc_median", "negative_share", "wrong_goal_mean", "done_f1"} <= set(metrics)
    assert metrics["goals"] == [PICK_GOAL] and metrics["episodes"] == 3
    assert main(["reward", "eval", "--demos", str(pick_data["eval"]), "--model", str(tmp_path / "none")]) == 2
    assert "reward train" in capsys.readouterr().err


def test_progress_reward_wrapper_replaces_reward_and_termination(pick_data, tmp_path):
    import gymnasium as gym

    from robot_rl.robots.arm.sim import scripted_lift_action
    from robot_rl.rewards.env_reward import LearnedRewardConfig, ProgressReward, learned_reward_env

    model, _ = train_progress_model(progress_episodes(pick_data["train"]), ProgressModelConfig(steps=300))
    model.save(tmp_path / "m")
    env = learned_reward_env(gym.make("robot_rl/ArmPickCube-v0", image_size=64, observation="state"),
                             LearnedRewardConfig(str(tmp_path / "m"), PICK_GOAL, progress_weight=2.0, done_reward=0.5,
                                                 done_consecutive=2))
    obs, info = env.reset(seed=3)
    assert obs.shape == env.observation_space.shape  # the policy still sees the state
    rng = np.random.default_rng(0)
    values, total, env_done_seen = [0.0], 0.0, False
    for _ in range(60):
        obs, reward, terminated, truncated, info = env.step(scripted_lift_action(info["state"], rng))
        assert {"env_reward", "env_terminated", "progress_value", "done_probability", "predicted_done"} <= set(info)
        env_done_seen |= info["env_terminated"]
        expected = 2.0 * (info["progress_value"] - values[-1]) + 0.5 * info["predicted_done"]
        assert reward == pytest.approx(expected, abs=1e-6)
        assert terminated == info["predicted_done"]  # only the model ends the episode
        values.append(info["progress_value"])
        total += reward
        if terminated or truncated:
            break
    assert env_done_seen and terminated  # the expert lifted the cube; the model noticed (2 steps in a row)
    assert values[-1] > 0.8 and total == pytest.approx(2.0 * values[-1] + 0.5, abs=1e-5)
    env.close()
    with pytest.raises(ValueError, match="camera_frames"):
        ProgressReward(gym.make("CartPole-v1"), model, LearnedRewardConfig("x", PICK_GOAL))
    with pytest.raises(ValueError, match="done_consecutive"):
        LearnedRewardConfig("x", PICK_GOAL, done_consecutive=0)


def test_relabel_episodes_with_the_learned_reward(pick_data, tmp_path):
    from robot_rl.data.episodes import EpisodeDataset
    from robot_rl.rewards.env_reward import LearnedRewardConfig, relabel_episodes

    model, _ = train_progress_model(progress_episodes(pick_data["train"]), ProgressModelConfig(steps=300))
    config = LearnedRewardConfig("unused", PICK_GOAL, done_reward=1.0)
    out = relabel_episodes(str(pick_data["eval"]), model, config)
    dataset = EpisodeDataset(pick_data["eval"])
    assert set(out) == set(dataset.transitions(("front", "wrist")))
    ends = np.flatnonzero(out["terminated"] | out["truncated"])
    assert len(ends) == len(dataset) and ends[-1] == len(out["reward"]) - 1  # one end per episode
    assert out["terminated"].sum() >= 2  # the model calls most held-out demonstrations done
    assert len(out["reward"]) <= dataset.num_steps  # cut at the first done
    episode_returns = np.split(out["reward"], ends[:-1] + 1)
    assert all(r.sum() > 0.5 for r in episode_returns)  # progress gained along every demonstration
    wrong = relabel_episodes(str(pick_data["eval"]), model, LearnedRewardConfig("unused", "open the drawer"))
    assert abs(wrong["reward"].sum()) < 0.1 and not wrong["terminated"].any()
