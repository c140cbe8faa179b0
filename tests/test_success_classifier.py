"""Success classifier (robot_rl.rewards.success): head, metrics, sampling, validation, files, reward
wrapper, and learning "cube lifted" from frames rendered by the simulated arm."""

import os

os.environ.setdefault("MUJOCO_GL", "osmesa")

import json  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from robot_rl.agents.encoders import EncoderConfig, ImageEncoder, save_pretrained  # noqa: E402
from robot_rl.data.episodes import EpisodeSchema, EpisodeWriter  # noqa: E402
from robot_rl.robots.arm.lift import ArmLiftEnv  # noqa: E402
from robot_rl.robots.arm.sim import ArmSim, ArmSimConfig, lift_success, scripted_lift_action  # noqa: E402
from robot_rl.rewards.success import (  # noqa: E402
    SuccessClassifier,
    SuccessClassifierConfig,
    SuccessClassifierReward,
    SuccessReward,
    balanced_batch_indices,
    classification_metrics,
    labelled_frames_from_dataset,
    stratified_split,
    train_success_classifier,
)

CAMERAS = ("front", "wrist")
SMALL_ENCODER = EncoderConfig(cameras=CAMERAS, image_size=16, channels=4, num_layers=2, latent_dim=8)


def _random_data(n=20, size=16, positives=8, seed=0):
    rng = np.random.default_rng(seed)
    frames = {c: rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8) for c in CAMERAS}
    return frames, np.arange(n) < positives


def _tiny_config(**overrides):
    return SuccessClassifierConfig(**{"encoder": SMALL_ENCODER, "steps": 2, "batch_size": 8, **overrides})


def test_head_is_hil_serl_and_outputs_one_probability_per_frame():
    classifier = SuccessClassifier(SuccessClassifierConfig(encoder=SMALL_ENCODER))
    head = classifier.head
    assert [type(m) for m in head] == [nn.Linear, nn.Dropout, nn.LayerNorm, nn.ReLU, nn.Linear]
    assert (head[0].in_features, head[0].out_features) == (2 * 8, 256)
    assert head[1].p == 0.1 and head[2].normalized_shape == (256,)
    assert (head[4].in_features, head[4].out_features) == (256, 1)
    frames, _ = _random_data(n=5)
    assert classifier({c: torch.from_numpy(f) for c, f in frames.items()}).shape == (5,)
    probability = classifier.probability(frames)
    assert probability.shape == (5,) and probability.dtype == np.float32
    assert ((probability >= 0) & (probability <= 1)).all()
    assert classifier.training  # probability() restores the mode it found


def test_metrics_on_a_hand_made_confusion():
    # 3 true positives, 1 false positive, 2 false negatives, 4 true negatives
    predicted = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0, 0], bool)
    labels = np.array([1, 1, 1, 0, 1, 1, 0, 0, 0, 0], bool)
    m = classification_metrics(predicted, labels)
    assert (m["true_positives"], m["false_positives"], m["false_negatives"], m["true_negatives"]) == (3, 1, 2, 4)
    assert m["precision"] == pytest.approx(0.75) and m["recall"] == pytest.approx(0.6)
    assert m["f1"] == pytest.approx(2 * 0.75 * 0.6 / 1.35) and m["accuracy"] == pytest.approx(0.7)
    # Nothing predicted positive: precision (0/0) and F1 are 0, recall 0 of 2.
    none = classification_metrics(np.zeros(4, bool), np.array([1, 1, 0, 0], bool))
    assert (none["precision"], none["recall"], none["f1"], none["accuracy"]) == (0.0, 0.0, 0.0, 0.5)
    # No actual positives: recall (0/0) is 0.
    no_positives = classification_metrics(np.array([1, 0], bool), np.zeros(2, bool))
    assert (no_positives["precision"], no_positives["recall"], no_positives["f1"]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="equal-length"):
        classification_metrics(np.zeros(3, bool), np.zeros(4, bool))


def test_balanced_batches_hold_as_many_positives_as_negatives():
    labels = np.arange(100) < 5  # 5 positives among 95 negatives
    rng = np.random.default_rng(0)
    for _ in range(20):
        batch = balanced_batch_indices(labels, 64, rng)
        assert batch.shape == (64,) and labels[batch].sum() == 32
    with pytest.raises(ValueError, match="even"):
        balanced_batch_indices(labels, 7, rng)
    with pytest.raises(ValueError, match="one positive and one negative"):
        balanced_batch_indices(np.zeros(10, bool), 8, rng)


def test_stratified_split_holds_out_each_class_and_refuses_an_empty_split():
    labels = np.arange(50) < 10
    train, held_out = stratified_split(labels, 0.2, np.random.default_rng(0))
    assert not set(train) & set(held_out) and len(train) + len(held_out) == 50
    assert labels[held_out].sum() == 2 and (~labels[held_out]).sum() == 8
    with pytest.raises(ValueError, match="held-out split would hold no positive"):
        stratified_split(np.arange(50) < 2, 0.2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="training split would hold no positive"):
        stratified_split(np.arange(50) < 1, 0.9, np.random.default_rng(0))


def test_bad_training_data_and_configs_are_refused():
    frames, labels = _random_data()
    config = _tiny_config()
    bad_inputs = {
        "no positives": (frames, np.zeros(20, bool)),
        "no negatives": (frames, np.ones(20, bool)),
        "mismatched lengths": (frames, labels[:-1]),
        "integer labels": (frames, labels.astype(int)),
        "float frames": ({**frames, "front": frames["front"].astype(np.float32)}, labels),
        "grey frames": ({**frames, "front": frames["front"][..., 0]}, labels),
        "non-square frames": ({c: f[:, :, :8] for c, f in frames.items()}, labels),
        "cameras of different lengths": ({**frames, "wrist": frames["wrist"][:-1]}, labels),
        "no cameras": ({}, labels),
        "a list": ({**frames, "front": frames["front"].tolist()}, labels),
    }
    for what, (bad_frames, bad_labels) in bad_inputs.items():
        with pytest.raises(ValueError):
            train_success_classifier(bad_frames, bad_labels, config)
            pytest.fail(f"accepted {what}")
    with pytest.raises(ValueError, match="held-out split would hold no positive"):
        train_success_classifier(frames, np.arange(20) < 2, config)
    with pytest.raises(ValueError, match="the encoder takes cameras"):
        train_success_classifier({"front": frames["front"]}, labels, config)
    for bad in ({"batch_size": 7}, {"threshold": 1.0}, {"holdout_fraction": 0.0}, {"dropout": 1.0},
                {"encoder": EncoderConfig(cameras=CAMERAS, image_size=16, state_dim=3)},
                {"encoder_weights": "somewhere"}):
        with pytest.raises(ValueError):
            _tiny_config(**bad)
    classifier = SuccessClassifier(_tiny_config())
    with pytest.raises(ValueError, match="lack camera 'wrist'"):
        classifier.probability({"front": frames["front"]})
    with pytest.raises(ValueError, match="must be uint8"):
        classifier.probability({c: f.astype(np.float32) for c, f in frames.items()})


def test_save_load_round_trip_gives_identical_probabilities(tmp_path):
    frames, labels = _random_data()
    classifier, metrics = train_success_classifier(frames, labels, _tiny_config(threshold=0.6),
                                                   data_description="random frames")
    classifier.save(tmp_path / "clf")
    assert sorted(p.name for p in (tmp_path / "clf").iterdir()) == ["card.json", "classifier.safetensors"]
    card = json.loads((tmp_path / "clf" / "card.json").read_text())
    assert card["cameras"] == list(CAMERAS) and card["image_size"] == 16 and card["threshold"] == 0.6
    assert card["metrics"] == metrics and card["training_data"]["description"] == "random frames"
    loaded = SuccessClassifier.load(tmp_path / "clf")
    assert not loaded.training and loaded.threshold == 0.6 and loaded.config == classifier.config
    np.testing.assert_array_equal(loaded.probability(frames), classifier.probability(frames))
    with pytest.raises(FileNotFoundError):
        SuccessClassifier.load(tmp_path / "missing")


def test_pretrained_encoder_stays_frozen(tmp_path):
    encoder = ImageEncoder(SMALL_ENCODER)
    save_pretrained(encoder, tmp_path / "encoder", {"note": "test"})
    frames, labels = _random_data()
    config = SuccessClassifierConfig(encoder_weights=str(tmp_path / "encoder"), steps=3, batch_size=8, lr=1e-2)
    classifier, _ = train_success_classifier(frames, labels, config)
    assert classifier.config.encoder.kind == "pretrained" and classifier.config.encoder.frozen
    for name, value in encoder.state_dict().items():
        torch.testing.assert_close(classifier.encoder.state_dict()[name], value, rtol=0, atol=0)


def test_labelled_frames_from_dataset_aligns_cameras(tmp_path):
    schema = EpisodeSchema({"front": (4, 4, 3), "wrist": (4, 4, 3)}, state_dim=1, action_dim=1)
    writer = EpisodeWriter(tmp_path / "data", schema, {"task": "toy"})

    def obs(value):  # frames of both cameras filled with the observation's number (wrist: + 100)
        return {"front": np.full((4, 4, 3), value, np.uint8), "wrist": np.full((4, 4, 3), value + 100, np.uint8),
                "state": np.zeros(1, np.float32)}

    for t, label in enumerate([False, None, True]):
        writer.add_step(obs(t), np.zeros(1, np.float32), 0.0, False, False, False, label, float(t))
    writer.end_episode(obs(3))
    frames, labels = labelled_frames_from_dataset(tmp_path / "data")
    assert labels.tolist() == [False, True]
    assert frames["front"][:, 0, 0, 0].tolist() == [1, 3]  # the observations steps 0 and 2 reached
    assert frames["wrist"][:, 0, 0, 0].tolist() == [101, 103]
    assert list(labelled_frames_from_dataset(tmp_path / "data", ["wrist"])[0]) == ["wrist"]
    with pytest.raises(ValueError, match="no camera 'side'"):
        labelled_frames_from_dataset(tmp_path / "data", ["side"])

    unlabelled = EpisodeWriter(tmp_path / "unlabelled", schema, {"task": "toy"})
    unlabelled.add_step(obs(0), np.zeros(1, np.float32), 0.0, False, False, False, None, 0.0)
    unlabelled.end_episode(obs(1))
    with pytest.raises(ValueError, match="no labelled steps"):
        labelled_frames_from_dataset(tmp_path / "unlabelled")


# ---- learning on rendered frames of the arm -----------------------------------------------------

ARM_CONFIG = ArmSimConfig(image_size=64, cameras=CAMERAS)


def _rendered_lift_frames(episodes=8, seed=0):
    """Per episode 30 labelled moments: the scripted expert reaches, grasps and lifts the cube (12 steps),
    carries it around (8), then drops it and wanders with the gripper open (10). Labels: lift_success."""
    sim = ArmSim(ARM_CONFIG)
    rng = np.random.default_rng(seed)
    frames = {camera: [] for camera in CAMERAS}
    labels = []

    def act(action):
        sim.step(action)
        for camera, frame in sim.render_all().items():
            frames[camera].append(frame)
        labels.append(lift_success(sim.state()))

    try:
        for _ in range(episodes):
            sim.reset(rng)
            for _ in range(12):
                act(scripted_lift_action(sim.state()))
            for _ in range(8):
                act(np.r_[rng.uniform(-1, 1, 2), rng.uniform(-0.5, 0.5), 1.0])
            for _ in range(10):
                act(np.r_[rng.uniform(-1, 1, 3), -1.0])
    finally:
        sim.close()
    return {camera: np.stack(f) for camera, f in frames.items()}, np.array(labels)


@pytest.fixture(scope="module")
def lift_classifier():
    frames, labels = _rendered_lift_frames()
    assert 60 <= labels.sum() <= 180, "the scripted episodes should give both lifted and unlifted frames"
    config = SuccessClassifierConfig(
        encoder=EncoderConfig(cameras=CAMERAS, image_size=64, channels=16, latent_dim=32),
        steps=200, batch_size=32, lr=1e-3, holdout_fraction=0.25, seed=0)
    return train_success_classifier(frames, labels, config, data_description="scripted ArmSim lift, 64 px")


def test_classifier_learns_cube_lifted_from_rendered_frames(lift_classifier):
    _, metrics = lift_classifier
    assert metrics["held_out_frames"] == 60 and metrics["held_out_positives"] >= 15
    assert metrics["precision"] >= 0.9 and metrics["recall"] >= 0.9, metrics


def test_reward_wrapper_replaces_the_reward_and_ends_on_predicted_success(lift_classifier):
    classifier, _ = lift_classifier
    reward_fn = SuccessReward(classifier)
    env = SuccessClassifierReward(ArmLiftEnv(ARM_CONFIG, image_obs=True, max_episode_steps=30), classifier)
    try:
        observation, _ = env.reset(seed=123)  # a cube pose the classifier has not seen
        reward, probability = reward_fn(observation)
        assert (reward, probability < 0.5) == (0.0, True)
        batch = reward_fn({c: observation[c][None].repeat(3, 0) for c in CAMERAS})
        # A batch of 3 and a single frame take different conv kernels: equal to float32 rounding.
        assert batch[0].shape == batch[1].shape == (3,) and batch[1][0] == pytest.approx(probability, rel=1e-4)
        agree = steps = 0
        terminated = truncated = False
        while not (terminated or truncated):
            observation, reward, terminated, truncated, info = env.step(scripted_lift_action(env.unwrapped.state))
            steps += 1
            assert reward == float(info["predicted_success"]) and info["success_probability"] >= 0
            assert 0.0 <= info["env_reward"] <= 1.0 and info["env_success"] == info["success"]
            agree += info["predicted_success"] == info["env_success"]
        assert terminated and info["predicted_success"] and info["env_success"], "ends on a true, predicted lift"
        assert agree == steps
    finally:
        env.close()
    with pytest.raises(ValueError, match="must observe a dict"):
        SuccessClassifierReward(ArmLiftEnv(ARM_CONFIG, image_obs=False), classifier)
