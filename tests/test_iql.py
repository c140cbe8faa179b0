"""IQL: the loss pieces against hand-computed values, the expectile V, a pixel bandit, export."""

import json

import numpy as np
import pytest
import torch

from robot_rl.agents.encoders import EncoderConfig, ImageEncoder, pretrained_config
from robot_rl.agents.frame_stack_policy import FeatureStack, load_frame_stack_policy
from robot_rl.agents.iql import IQL, IQLConfig, advantage_weights, encode_stack, expectile_loss

SIZE = 16


def _config(**overrides) -> IQLConfig:
    encoder = EncoderConfig(cameras=("front",), image_size=SIZE, num_layers=2, channels=8, latent_dim=8, augment_pad=2)
    fields = dict(hidden_dims=(32, 32), num_critics=4, critic_subsample=2, batch_size=8, frame_stack=2,
                  encoder=encoder)
    return IQLConfig(**{**fields, **overrides})


def _batch(size=8, k=2, state_dim=3, action_dim=2, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    obs = lambda: {"frames": rng.integers(0, 256, (size, k, SIZE, SIZE, 3), dtype=np.uint8),  # noqa: E731
                   "state": rng.standard_normal((size, state_dim)).astype(np.float32)}
    return {"obs": obs(), "next_obs": obs(), "action": rng.uniform(-1, 1, (size, action_dim)).astype(np.float32),
            "reward": rng.standard_normal(size).astype(np.float32), "terminated": (rng.random(size) < 0.2) * 1.0}


def _solid(colours: np.ndarray, k: int) -> np.ndarray:
    """(B, 3) RGB colours -> (B, k, SIZE, SIZE, 3) uint8 frames of that colour."""
    return np.broadcast_to(colours[:, None, None, None, :], (len(colours), k, SIZE, SIZE, 3)).astype(np.uint8)


def test_expectile_loss_by_hand():
    # diff >= 0 weighs expectile, diff < 0 weighs 1 - expectile: (0.7 * 1 + 0.3 * 4) / 2
    loss = expectile_loss(torch.tensor([1.0, -2.0]), 0.7)
    torch.testing.assert_close(loss, torch.tensor(0.95))
    # expectile 0.5 is half the mean squared error
    torch.testing.assert_close(expectile_loss(torch.tensor([3.0, -1.0]), 0.5), torch.tensor(0.5 * (9 + 1) / 2))


def test_advantage_weights_by_hand_with_clip():
    weights = advantage_weights(torch.tensor([-1.0, 0.0, 0.5, 10.0]), temperature=2.0, max_weight=100.0)
    torch.testing.assert_close(weights, torch.tensor([np.exp(-2.0), 1.0, np.e, 100.0], dtype=torch.float32))


def test_encode_stack_runs_each_frame_through_the_same_encoder():
    torch.manual_seed(0)
    encoder = ImageEncoder(_config().encoder)
    frames = torch.from_numpy(_batch()["obs"]["frames"][:3])
    features = encode_stack(encoder, frames)
    assert features.shape == (3, 2 * 8)
    torch.testing.assert_close(features[:, 8:], encoder({"front": frames[:, 1]}))
    # DrQ: one shift per observation; a solid-colour stack is unchanged by any shift
    solid = torch.from_numpy(_solid(np.array([[200, 10, 30]] * 3), 2))
    torch.testing.assert_close(encode_stack(encoder, solid, augment=True), encode_stack(encoder, solid))


def test_target_q_is_the_min_over_the_subsampled_target_critics():
    iql = IQL(3, 2, _config(num_critics=5, critic_subsample=2), device="cpu")
    features, action = torch.randn(6, iql.feature_dim), torch.rand(6, 2) * 2 - 1
    seen = []
    iql.target_critic.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    torch.manual_seed(3)
    got = iql.target_q(features, action)
    torch.manual_seed(3)
    members = torch.randperm(5)[:2]
    torch.testing.assert_close(got, iql.target_critic(features, action)[members].min(dim=0).values)
    assert seen[0] == (2, 6)  # only the subsample is evaluated


def test_value_converges_to_the_expectile_of_the_min_target_q(monkeypatch):
    torch.manual_seed(0)
    iql = IQL(1, 1, _config(num_critics=2, critic_subsample=2, batch_size=64, lr=1e-2), device="cpu")
    # Fixed target critics: member 0 says 10 a, member 1 says 10 a + 1; their min is 10 a.
    monkeypatch.setattr(iql.target_critic, "forward",
                        lambda features, action, members=None: torch.stack([10 * action[:, 0], 10 * action[:, 0] + 1]))
    action = np.repeat([-0.5, 0.0, 0.1, 0.5], 16)[:, None].astype(np.float32)  # Q targets -5, 0, 1, 5
    obs = {"frames": _solid(np.full((64, 3), 128), 2), "state": np.zeros((64, 1), np.float32)}
    batch = {"obs": obs, "next_obs": obs, "action": action, "reward": np.zeros(64, np.float32),
             "terminated": np.ones(64, np.float32)}
    for _ in range(150):
        iql.update(batch)
    with torch.no_grad():
        v = iql.value(iql.features({k: torch.as_tensor(x[:1]) for k, x in obs.items()})).item()
    # The 0.9-expectile v solves 0.1 * sum_{x < v}(x - v) + 0.9 * sum_{x > v}(x - v) = 0; with
    # 1 < v < 5: v = (0.1 * (-5 + 0 + 1) + 0.9 * 5) / (3 * 0.1 + 0.9) = 4.1 / 1.2. (The targets'
    # mean is 0.25; averaging the two members instead of taking their min would add 0.5.)
    assert v == pytest.approx(4.1 / 1.2, abs=0.05)


def test_pixel_bandit_actor_follows_the_advantage_not_the_data():
    """One step, the image's colour decides the good action: red +0.8, blue -0.8 (reward 1). Three
    quarters of the data take the mirrored action (reward 0), so cloning the data picks the wrong sign."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    n = 512
    red = rng.random(n) < 0.5
    good = rng.random(n) < 0.25
    sign = np.where(red, 1.0, -1.0)
    action = np.where(good, 0.8 * sign, -0.5 * sign + rng.uniform(-0.2, 0.2, n)).astype(np.float32)[:, None]
    for colour in (red, ~red):
        assert np.sign(np.arctanh(action[colour]).mean()) != np.sign(sign[colour][0])  # cloning fails
    frames = _solid(np.where(red[:, None], [[255, 0, 0]], [[0, 0, 255]]), 2)
    data = {"frames": frames, "state": np.zeros((n, 1), np.float32), "action": action,
            "reward": good.astype(np.float32)}
    # Faster targets and sharper weights than the defaults, so that 300 updates suffice.
    iql = IQL(1, 1, _config(batch_size=64, lr=3e-3, tau=0.05, temperature=10.0), device="cpu")
    for _ in range(300):
        i = rng.integers(0, n, 64)
        obs = {"frames": data["frames"][i], "state": data["state"][i]}
        iql.update({"obs": obs, "next_obs": obs, "action": data["action"][i], "reward": data["reward"][i],
                    "terminated": np.ones(64, np.float32)})
    probe = {"frames": _solid(np.array([[255, 0, 0], [0, 0, 255]]), 2), "state": np.zeros((2, 1), np.float32)}
    chosen = iql.act(probe)[:, 0]
    assert chosen[0] > 0.5 and chosen[1] < -0.5, chosen


def test_export_round_trip_and_checkpoint(tmp_path):
    torch.manual_seed(0)
    cfg = _config()
    iql = IQL(3, 2, cfg, device="cpu")
    iql.update(_batch())
    iql.export(tmp_path / "iql", {"name": "test"})

    card = json.loads((tmp_path / "iql" / "card.json").read_text())
    assert card["name"] == "test" and card["iql"]["expectile"] == cfg.expectile and card["num_updates"] == 1
    assert IQLConfig(**card["iql"]) == cfg
    frames = torch.from_numpy(_batch(seed=1)["obs"]["frames"])
    state = torch.from_numpy(_batch(seed=1)["obs"]["state"])
    with torch.no_grad():
        expected = encode_stack(iql.encoder, frames)
    exported = EncoderConfig(**{**vars(cfg.encoder), "kind": "pretrained", "weights": str(tmp_path / "iql")})
    for encoder_config in (pretrained_config(tmp_path / "iql"), exported):
        encoder = ImageEncoder(encoder_config)
        assert encoder.config.frozen
        torch.testing.assert_close(encode_stack(encoder, frames), expected, rtol=0, atol=0)
    policy = load_frame_stack_policy(tmp_path / "iql")
    with torch.no_grad():
        action, _ = policy.actor(torch.cat([expected, state], dim=-1), deterministic=True)
    np.testing.assert_array_equal(action.numpy(), iql.act({"frames": frames, "state": state}))
    unbatched = iql.act({"frames": frames[0].numpy(), "state": state[0].numpy()})
    np.testing.assert_allclose(unbatched, action[0].numpy(), atol=1e-6)  # batch size changes the matmul's rounding

    # The deployed way: one frame encoded per step, the last K embeddings stacked.
    stack = FeatureStack(cfg.frame_stack)
    assert stack.empty
    for k in range(cfg.frame_stack):
        stack.push(policy.encode(frames[0, k].numpy()))
    np.testing.assert_allclose(stack.flat(), expected[0].numpy(), atol=1e-6)
    deployed = policy.act(policy.observation(stack.flat(), state[0].numpy()))
    np.testing.assert_allclose(deployed, action[0].numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="state must be finite"):
        policy.observation(stack.flat(), np.full(3, np.nan))
    with pytest.raises(ValueError, match="frames must be uint8"):
        policy.encode(np.zeros((5, 5, 3), np.uint8))

    # a checkpoint continues training exactly (networks, optimizers, counter)
    resumed = IQL(3, 2, cfg, device="cpu")
    resumed.load_state_dict(iql.state_dict())
    assert resumed.num_updates == 1
    torch.manual_seed(7)
    before = iql.update(_batch(seed=2))
    torch.manual_seed(7)
    assert resumed.update(_batch(seed=2)) == before


def test_bad_inputs_raise_value_errors_naming_the_key():
    iql = IQL(3, 2, _config(), device="cpu")

    def bad(key, value, match):
        batch = _batch()
        if "." in key:
            part, field = key.split(".")
            batch[part] = {**batch[part], field: value}
        else:
            batch[key] = value
        with pytest.raises(ValueError, match=match):
            iql.update(batch)

    frames = _batch()["obs"]["frames"]
    bad("obs.frames", frames.astype(np.float32), r"obs\['frames'\]")
    bad("next_obs.frames", frames[:, :1], r"next_obs\['frames'\]")
    bad("obs.frames", frames[..., :8, :], r"obs\['frames'\]")
    bad("obs.state", np.full((8, 3), np.nan, np.float32), r"obs\['state'\] must be finite")
    bad("reward", np.array([np.inf] + [0.0] * 7, np.float32), "reward must be finite")
    bad("action", np.full((8, 2), 1.5, np.float32), r"action must be finite and in \[-1, 1\]")
    bad("action", np.full((8, 2), np.nan, np.float32), "action")
    bad("action", np.zeros((8, 3), np.float32), "action must have shape")
    bad("terminated", np.full(8, 0.5), "terminated")
    with pytest.raises(ValueError, match="batch_size"):
        iql.update({k: (v[:4] if not isinstance(v, dict) else {f: x[:4] for f, x in v.items()})
                    for k, v in _batch().items()})
    with pytest.raises(ValueError, match="frames"):
        iql.act({"frames": frames[0].astype(np.float32), "state": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="one camera"):
        IQLConfig(encoder=EncoderConfig(cameras=("front", "wrist")))
