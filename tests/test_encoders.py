"""Pixel encoders, DrQ augmentation, the grasp critic's math and the pixel policy, with tiny sizes."""

import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from robot_rl.agents.encoders import (EncoderConfig, GroupedConvTrunk, ImageEncoder, ResNet18Trunk, load_pretrained,
                                      photometric_jitter, pretrained_config, random_shift, save_pretrained)
from robot_rl.agents.policy import Policy, gripper_action, gripper_index
from robot_rl.agents.sac import SAC, SACConfig


def _obs(batch=3, size=16, state_dim=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    frame = lambda: torch.randint(0, 256, (batch, size, size, 3), generator=g, dtype=torch.uint8)  # noqa: E731
    return {"front": frame(), "wrist": frame(), "state": torch.randn(batch, state_dim, generator=g)}


def test_random_shift_is_an_exact_crop_of_the_padded_image():
    torch.manual_seed(0)
    images = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).view(2, 3, 6, 6)
    g = torch.Generator().manual_seed(3)
    out = random_shift(images, pad=2, generator=g)
    assert out.shape == images.shape
    shift = torch.randint(0, 5, (2, 2), generator=torch.Generator().manual_seed(3))
    padded = F.pad(images, (2, 2, 2, 2), mode="replicate")
    for b in range(2):
        r, c = shift[b].tolist()
        torch.testing.assert_close(out[b], padded[b, :, r:r + 6, c:c + 6])
    assert torch.equal(random_shift(images, pad=0), images)


def test_trunk_per_camera_equals_its_grouped_convolutions():
    torch.manual_seed(0)
    trunk = GroupedConvTrunk(2, channels=4, num_layers=2)
    x = torch.randn(5, 6, 16, 16, requires_grad=True)
    out = trunk(x)
    assert out.shape == (5, 2, 4, 4, 4)
    grouped = trunk.net(x)  # the grouped layers as one call: camera k's channels are group k's
    torch.testing.assert_close(out, grouped.view(5, 2, 4, 4, 4))
    out.square().sum().backward()
    trunk_grad, x_grad = trunk.net[0].weight.grad.clone(), x.grad.clone()
    trunk.zero_grad()
    x.grad = None
    grouped.square().sum().backward()
    torch.testing.assert_close(trunk_grad, trunk.net[0].weight.grad)
    torch.testing.assert_close(x_grad, x.grad)


def test_encoder_shapes_state_and_bad_frames():
    enc = ImageEncoder(EncoderConfig(cameras=("front", "wrist"), image_size=16, num_layers=2, latent_dim=5,
                                     state_dim=2))
    obs = _obs()
    assert enc(obs).shape == (3, 2 * 5 + 2) == (3, enc.output_dim)
    assert enc(obs, augment=True).shape == (3, enc.output_dim)
    torch.testing.assert_close(enc(obs)[:, -2:], obs["state"])
    with pytest.raises(ValueError, match="front"):
        enc({**obs, "front": obs["front"][:, :8]})
    with pytest.raises(ValueError, match="state"):
        enc({**obs, "state": torch.zeros(3, 4)})


def test_pretrained_round_trip_and_architecture_check(tmp_path):
    cfg = EncoderConfig(cameras=("front", "wrist"), image_size=16, num_layers=2, latent_dim=5)
    enc = ImageEncoder(cfg)
    save_pretrained(enc, tmp_path / "enc", {"name": "test"})
    loaded = ImageEncoder(pretrained_config(tmp_path / "enc", state_dim=2))
    assert loaded.config.frozen and not any(p.requires_grad for p in loaded.parameters())
    obs = _obs()
    torch.testing.assert_close(loaded(obs)[:, :10], enc(obs))
    other = ImageEncoder(EncoderConfig(cameras=("front", "wrist"), image_size=16, num_layers=2, latent_dim=7))
    with pytest.raises(ValueError, match="latent_dim"):
        load_pretrained(other, tmp_path / "enc")


def test_resnet18_loads_torchvision_format_and_stays_frozen(tmp_path):
    source = ResNet18Trunk(1)
    state = {k: v for k, v in source.state_dict().items() if k not in ("mean", "std")}
    state["fc.weight"], state["fc.bias"] = torch.zeros(1000, 512), torch.zeros(1000)
    torch.save(state, tmp_path / "resnet18.pth")
    enc = ImageEncoder(EncoderConfig(cameras=("front",), image_size=32, kind="resnet18",
                                     weights=str(tmp_path / "resnet18.pth")))
    assert not enc.training and enc.trunk.layer1[0].conv1.weight.equal(source.layer1[0].conv1.weight)
    enc.train()
    assert not enc.training  # frozen BatchNorm statistics never drift
    assert enc({"front": torch.zeros(2, 32, 32, 3, dtype=torch.uint8)}).shape == (2, enc.output_dim)
    torch.save({"conv1.weight": torch.zeros(3)}, tmp_path / "bad.pth")
    with pytest.raises(ValueError, match="ResNet-18"):
        ImageEncoder(EncoderConfig(cameras=("front",), image_size=32, kind="resnet18", weights=str(tmp_path / "bad.pth")))
    with pytest.raises(FileNotFoundError, match="no downloads"):
        ImageEncoder(EncoderConfig(cameras=("front",), image_size=32, kind="resnet18", weights=str(tmp_path / "x.pth")))


def test_gripper_command_mapping():
    assert gripper_index(torch.tensor([1.0, 0.0, -1.0, 0.7, -0.2])).tolist() == [0, 1, 2, 0, 1]
    current = torch.tensor([1.0, -1.0, 1.0, -1.0])
    out = gripper_action(torch.tensor([0, 1, 1, 2]), current)
    assert out.tolist() == [1.0, -1.0, 1.0, -1.0]


def test_double_dqn_grasp_target_hand_computed():
    sac = SAC(4, 3, SACConfig(grasp_critic=True, discount=0.9, grasp_hidden_dims=(8,), hidden_dims=(8,)))
    online = torch.tensor([[1.0, 5.0, 2.0], [3.0, 0.0, 4.0]])   # argmax: 1, 2
    target = torch.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])  # scores of those: 20, 60
    y = sac.grasp_target(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 1.0]), torch.tensor([-0.05, 0.0]),
                         online, target)
    torch.testing.assert_close(y, torch.tensor([1.0 - 0.05 + 0.9 * 20.0, 2.0]))


def test_grasp_commands_are_relative_to_the_gripper_and_only_changes_pay():
    sac = SAC(4, 3, SACConfig(grasp_critic=True, grasp_penalty=-0.1, hidden_dims=(8,)))
    state = torch.tensor([[0, 0, 0, -1.0], [0, 0, 0, -1.0], [0, 0, 0, 1.0], [0, 0, 0, 1.0], [0, 0, 0, 1.0]])
    executed = torch.tensor([1.0, -1.0, 1.0, -1.0, 0.0])
    # close while open, open while open (= stay), close while closed (= stay), open while closed, stay
    index = sac.grasp_commands(state, executed)
    assert index.tolist() == [0, 1, 1, 2, 1]
    torch.testing.assert_close(sac.grasp_penalty(index), torch.tensor([-0.1, 0.0, 0.0, -0.1, 0.0]))


def _pixel_batch(n, seed=0):
    obs, next_obs = _obs(n, seed=seed), _obs(n, seed=seed + 1)
    action = torch.cat([torch.rand(n, 2) * 2 - 1, torch.randint(-1, 2, (n, 1)).float()], -1)
    return {"obs": obs, "next_obs": next_obs, "action": action, "reward": torch.rand(n), "terminated": torch.zeros(n)}


def test_pixel_sac_with_grasp_critic_trains_encoder_and_exports_a_policy():
    enc = EncoderConfig(cameras=("front", "wrist"), image_size=16, num_layers=2, latent_dim=5, state_dim=2)
    sac = SAC(0, 3, SACConfig(grasp_critic=True, batch_size=4, utd_ratio=2, hidden_dims=(8,),
                              grasp_hidden_dims=(8,)), encoder=enc)
    before = sac.encoder.trunk.net[0].weight.detach().clone()
    metrics = sac.update(_pixel_batch(8))
    assert {"grasp_loss", "critic_loss", "actor_loss"} <= set(metrics)
    assert not torch.equal(before, sac.encoder.trunk.net[0].weight)  # the critic loss trains the encoder
    policy = Policy(sac.policy.spec, sac.policy.network.state_dict())
    obs = {k: v[0].numpy() for k, v in _obs(1).items()}
    action = policy.act(obs, deterministic=True)
    assert action.shape == (3,) and action[2] in (-1.0, 1.0)
    np.testing.assert_allclose(action, sac.policy.act(obs, deterministic=True), atol=1e-6)
    with pytest.raises(ValueError, match="uint8"):
        policy.act({**obs, "front": obs["front"].astype(np.float32)})
    with pytest.raises(ValueError, match="lacks"):
        policy.act({"state": obs["state"]})


def _flat_case():
    g = torch.Generator().manual_seed(1)
    batch = {"obs": torch.randn(8, 3, generator=g), "next_obs": torch.randn(8, 3, generator=g),
             "action": torch.rand(8, 2, generator=g), "reward": torch.randn(8, generator=g),
             "terminated": torch.zeros(8)}
    return dict(obs_dim=3, action_dim=2, num_critics=3, critic_subsample=2, batch_size=8), {}, batch, 1


def _pixel_grasp_case():
    # Trainable encoder, grasp critic, two critic steps per actor step, imitation and gradient clipping.
    enc = EncoderConfig(cameras=("front", "wrist"), image_size=16, num_layers=2, latent_dim=5, state_dim=2)
    batch = {**_pixel_batch(8, seed=3), "intervention": torch.tensor([1, 0, 0, 1, 0, 0, 0, 1], dtype=torch.bool)}
    config = dict(obs_dim=0, action_dim=3, grasp_critic=True, grasp_hidden_dims=(8,), batch_size=4, utd_ratio=2,
                  bc_weight=1.0, max_grad_norm=0.5)
    return config, {"encoder": enc}, batch, 2


@pytest.mark.parametrize("case", [_flat_case, _pixel_grasp_case], ids=["flat", "pixels_grasp_utd2"])
def test_the_compiled_training_step_is_one_graph_with_the_eager_math(case, caplog):
    config, extra, batch, graphs = case()
    obs_dim, action_dim = config.pop("obs_dim"), config.pop("action_dim")
    torch.manual_seed(0)
    eager = SAC(obs_dim, action_dim, SACConfig(hidden_dims=(8,), **config), **extra)
    compiled = SAC(obs_dim, action_dim, SACConfig(hidden_dims=(8,), compile=True, **config), **extra)
    compiled.load_state_dict(eager.state_dict())
    rng = torch.get_rng_state()
    eager.update(batch)
    torch.set_rng_state(rng)
    torch._dynamo.utils.counters.clear()
    # Compiled afresh: inductor finds an op without a C kernel while generating code, which a cache hit skips.
    with caplog.at_level(logging.INFO, logger="robot_rl.agents.compiled"), \
            torch._inductor.config.patch(fx_graph_cache=False):
        compiled.update(batch)
    named = lambda agent: [*agent.critic.parameters(), *agent.policy.network.parameters(), agent.log_alpha]  # noqa: E731
    for a, b in zip(named(eager), named(compiled)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # Both ran the optimizers' Adam: same moments, one step each (two critic steps with utd 2).
    for opt_a, opt_b in ((eager.critic_optimizer, compiled.critic_optimizer),
                         (eager.actor_optimizer, compiled.actor_optimizer)):
        for state_a, state_b in zip(opt_a.state.values(), opt_b.state.values()):
            assert float(state_a["step"]) == float(state_b["step"]) >= 1.0
            torch.testing.assert_close(state_a["exp_avg"], state_b["exp_avg"], atol=1e-6, rtol=1e-4)
    # The compiled path ran compiled: one graph per kind of step (critics only; critics then actor), each
    # holding the losses, both backward passes, the optimizers and the target update; no graph break.
    assert compiled.compiled and not eager.compiled
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
    assert not torch._dynamo.utils.counters["graph_break"]
    # Every op has a C kernel, so the C++ wrapper runs the step (else it is generated with the Python wrapper).
    assert not [r.getMessage() for r in caplog.records if "Python wrapper" in r.getMessage()]


def test_pixel_grasp_checkpoint_resume_reproduces_the_next_update_exactly(tmp_path):
    enc = EncoderConfig(cameras=("front", "wrist"), image_size=16, num_layers=2, latent_dim=5, state_dim=2)
    cfg = SACConfig(grasp_critic=True, batch_size=4, hidden_dims=(8,), grasp_hidden_dims=(8,))
    torch.manual_seed(0)
    a = SAC(0, 3, cfg, encoder=enc)
    for seed in range(3):
        a.update(_pixel_batch(4, seed=seed))
    torch.save(a.state_dict(), tmp_path / "ckpt.pt")
    b = SAC(0, 3, cfg, encoder=enc)
    b.load_state_dict(torch.load(tmp_path / "ckpt.pt", weights_only=True))
    rng = torch.get_rng_state()
    a.update(_pixel_batch(4, seed=7))
    torch.set_rng_state(rng)
    b.update(_pixel_batch(4, seed=7))
    for net_a, net_b in ((a.policy.network, b.policy.network), (a.critic, b.critic), (a.target_grasp, b.target_grasp)):
        for pa, pb in zip(net_a.state_dict().values(), net_b.state_dict().values()):
            torch.testing.assert_close(pa, pb, rtol=0, atol=0)
    assert a.num_updates == b.num_updates == 4


def test_photometric_jitter_scales_each_camera_within_its_bounds():
    images = torch.full((64, 6, 4, 4), 0.5)
    assert torch.equal(photometric_jitter(images, 0.0, 2), images)
    out = photometric_jitter(images.clone(), 0.2, 2, generator=torch.Generator().manual_seed(0))
    # 0.5 * (1 +- 0.2) * (1 +- 0.1) +- 0.05, uniform over each image; the cameras of a sample drawn apart
    assert out.min() >= 0.5 * 0.8 * 0.9 - 0.05 - 1e-6 and out.max() <= 0.5 * 1.2 * 1.1 + 0.05 + 1e-6
    assert torch.equal(out, out[:, :, :1, :1].expand_as(out))
    assert out.std() > 0.03 and not torch.allclose(out[:, :3], out[:, 3:])
    assert photometric_jitter(torch.ones(8, 3, 2, 2), 0.5, 1).max() <= 1.0
