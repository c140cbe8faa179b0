"""SAC math pinned with tiny sizes against hand-computed values."""

import math

import numpy as np
import pytest
import torch

from robot_rl.agents.encoders import EncoderConfig
from robot_rl.agents.networks import CriticEnsemble, EnsembleLinear, fast_tanh, squashed_gaussian_log_prob
from robot_rl.agents.policy import Policy, PolicySpec
from robot_rl.agents.sac import SAC, SACConfig


def test_ensemble_linear_matches_separate_layers():
    torch.manual_seed(0)
    layer = EnsembleLinear(3, 4, 2)
    x = torch.randn(3, 5, 4)
    out = layer(x)
    for e in range(3):
        expected = x[e] @ layer.weight[e] + layer.bias[e]
        torch.testing.assert_close(out[e], expected)


def test_critic_members_are_independent():
    torch.manual_seed(0)
    critic = CriticEnsemble(3, 2, (8, 8), num_critics=4)
    obs, act = torch.randn(6, 3), torch.randn(6, 2)
    q = critic(obs, act)
    assert q.shape == (4, 6)
    # gradient of member 1's output touches only member 1's slice of the stacked weights
    q[1].sum().backward()
    grad = critic.net.linears[0].weight.grad
    assert grad[1].abs().sum() > 0
    assert grad[[0, 2, 3]].abs().sum() == 0


def test_critic_target_min_and_termination():
    sac = SAC(3, 2, SACConfig(num_critics=4, critic_subsample=2, discount=0.9, hidden_dims=(8,)))
    next_q = torch.tensor([[2.0, 3.0], [4.0, 4.0]])  # (k=2 subsampled members, B=2)
    reward = torch.tensor([1.0, 2.0])
    terminated = torch.tensor([0.0, 1.0])
    target = sac.critic_target(reward, terminated, next_q, torch.zeros(2))
    # min over members -> [2.0, 3.0]; second transition terminated -> no bootstrap
    torch.testing.assert_close(target, torch.tensor([1.0 + 0.9 * 2.0, 2.0]))


def test_subsampled_members_compute_exactly_their_rows():
    torch.manual_seed(0)
    critic = CriticEnsemble(3, 2, (8, 8), num_critics=5)
    obs, act = torch.randn(6, 3), torch.randn(6, 2)
    members = torch.tensor([3, 1])
    torch.testing.assert_close(critic(obs, act, members), critic(obs, act)[members])


def test_target_uses_only_the_subsampled_members():
    sac = SAC(3, 2, SACConfig(num_critics=10, critic_subsample=2, hidden_dims=(8,)))
    seen = []
    sac.target_critic.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    sac.update(_batch(256))
    assert seen == [torch.Size([2, 256])]
    assert sac.target_members().shape == (2,) and len(set(sac.target_members().tolist())) == 2


def test_fast_tanh_matches_tanh_and_its_gradient():
    x = torch.linspace(-12, 12, 2001, dtype=torch.float32, requires_grad=True)
    y = fast_tanh(x)
    torch.testing.assert_close(y, torch.tanh(x.detach()), atol=3e-7, rtol=0)
    y.sum().backward()
    torch.testing.assert_close(x.grad, 1 - torch.tanh(x.detach()) ** 2, atol=1e-6, rtol=0)


def test_backup_entropy_term():
    cfg = SACConfig(num_critics=2, discount=0.5, backup_entropy=True, init_temperature=0.2, hidden_dims=(8,))
    sac = SAC(3, 2, cfg)
    next_q = torch.tensor([[3.0], [2.0]])
    target = sac.critic_target(torch.tensor([1.0]), torch.tensor([0.0]), next_q, torch.tensor([-1.5]))
    torch.testing.assert_close(target, torch.tensor([1.0 + 0.5 * (2.0 - 0.2 * -1.5)]))


def test_temperature_loss_and_gradient_direction():
    sac = SAC(3, 4, SACConfig(init_temperature=0.5, hidden_dims=(8,)))
    assert sac.target_entropy == -2.0  # -|A|/2
    log_prob = torch.tensor([1.0, 3.0])  # entropy -1, -3 : below target -> alpha must grow
    loss = sac.temperature_loss(log_prob)
    torch.testing.assert_close(loss, torch.tensor(0.5 * ((-1.0 + 2.0) + (-3.0 + 2.0)) / 2))
    loss = sac.temperature_loss(torch.tensor([3.0, 3.0]))
    loss.backward()
    assert sac.log_alpha.grad < 0  # gradient descent raises alpha


def test_squashed_log_prob_matches_change_of_variables():
    mean, log_std = torch.tensor([[0.3, -0.2]]), torch.tensor([[-0.5, 0.1]])
    u = torch.tensor([[0.7, -1.9]])
    normal = torch.distributions.Normal(mean, log_std.exp())
    expected = (normal.log_prob(u) - torch.log(1 - torch.tanh(u) ** 2)).sum(-1)
    torch.testing.assert_close(squashed_gaussian_log_prob(u, mean, log_std), expected)


def test_soft_update_is_polyak():
    sac = SAC(2, 1, SACConfig(tau=0.25, hidden_dims=(4,)))
    for p in sac.critic.parameters():
        p.data.fill_(1.0)
    for p in sac.target_critic.parameters():
        p.data.fill_(0.0)
    sac.soft_update_targets()
    for p in sac.target_critic.parameters():
        torch.testing.assert_close(p, torch.full_like(p, 0.25))


def _batch(n, obs_dim=3, act_dim=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(n, obs_dim, generator=g), "action": torch.rand(n, act_dim, generator=g) * 2 - 1,
            "reward": torch.randn(n, generator=g), "next_obs": torch.randn(n, obs_dim, generator=g),
            "terminated": torch.zeros(n)}


def test_update_counts_and_rejects_wrong_batch_size():
    sac = SAC(3, 2, SACConfig(utd_ratio=3, batch_size=4, hidden_dims=(8,)))
    metrics = sac.update(_batch(12))
    assert sac.num_updates == 1 and math.isfinite(metrics["critic_loss"])
    with pytest.raises(ValueError, match="utd_ratio"):
        sac.update(_batch(8))


def test_checkpoint_resume_reproduces_next_update_exactly(tmp_path):
    torch.manual_seed(1)
    a = SAC(3, 2, SACConfig(num_critics=4, critic_subsample=2, batch_size=8, hidden_dims=(16, 16)))
    for i in range(3):
        a.update(_batch(8, seed=i))
    torch.save(a.state_dict(), tmp_path / "ckpt.pt")
    state = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    b = SAC(3, 2, SACConfig(num_critics=4, critic_subsample=2, batch_size=8, hidden_dims=(16, 16)))
    b.load_state_dict(state)
    rng_state = torch.get_rng_state()
    a.update(_batch(8, seed=9))
    torch.set_rng_state(rng_state)
    b.update(_batch(8, seed=9))
    for pa, pb in zip(a.critic.parameters(), b.critic.parameters()):
        torch.testing.assert_close(pa, pb)
    for pa, pb in zip(a.actor.parameters(), b.actor.parameters()):
        torch.testing.assert_close(pa, pb)
    assert b.num_updates == 4


def test_an_agent_loaded_from_a_live_agent_does_not_share_its_optimizer_moments():
    config = SACConfig(batch_size=8, hidden_dims=(8,))
    a = SAC(3, 2, config)
    a.update(_batch(8))
    b = SAC(3, 2, config)
    b.load_state_dict(a.state_dict())  # in memory: no file in between
    moments = [state["exp_avg"].clone() for state in a.critic_optimizer.state.values()]
    b.update(_batch(8, seed=1))
    b.update(_batch(8, seed=2))
    assert [float(state["step"]) for state in a.critic_optimizer.state.values()] == [1.0] * len(moments)
    assert [float(state["step"]) for state in b.critic_optimizer.state.values()] == [3.0] * len(moments)
    for before, state in zip(moments, a.critic_optimizer.state.values()):
        torch.testing.assert_close(state["exp_avg"], before, rtol=0, atol=0)


def test_a_checkpoint_saved_before_the_first_update_resumes():
    config = SACConfig(batch_size=8, hidden_dims=(8,))
    fresh = SAC(3, 2, config).state_dict()
    for name in ("actor_optimizer", "critic_optimizer", "temperature_optimizer"):
        fresh[name]["state"] = {}  # what torch's Adam saves before its first step (checkpoints of older versions)
    agent = SAC(3, 2, config)
    agent.load_state_dict(fresh)
    assert math.isfinite(agent.update(_batch(8))["critic_loss"])
    assert all(float(state["step"]) == 1.0 for state in agent.critic_optimizer.state.values())


def test_sac_solves_one_step_bandit():
    """Learning, not just running: reward -(a - 0.5)^2, one-step episodes."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    sac = SAC(1, 1, SACConfig(batch_size=64, hidden_dims=(32, 32), init_temperature=0.05))
    for _ in range(1500):
        a = torch.from_numpy(rng.uniform(-1, 1, (64, 1)).astype(np.float32))
        batch = {"obs": torch.zeros(64, 1), "action": a, "reward": -((a[:, 0] - 0.5) ** 2),
                 "next_obs": torch.zeros(64, 1), "terminated": torch.ones(64)}
        sac.update(batch)
    action = sac.policy.act(np.zeros(1, np.float32), deterministic=True)
    assert abs(float(action[0]) - 0.5) < 0.1


def test_policy_validates_inputs_and_weights():
    spec = PolicySpec(obs_dim=3, action_dim=2, hidden_dims=(8,))
    policy = Policy(spec)
    assert policy.act(np.zeros(3)).shape == (2,)
    assert policy.act(np.zeros((5, 3))).shape == (5, 2)
    with pytest.raises(ValueError, match="shape"):
        policy.act(np.zeros(4))
    with pytest.raises(ValueError, match="NaN"):
        policy.act(np.array([0.0, np.nan, 0.0]))
    with pytest.raises(ValueError, match="do not match"):
        policy.load_state_dict({"net.0.weight": torch.zeros(1)})
    assert PolicySpec.from_json(spec.to_json()) == spec


def test_action_rate_limit_clamps_around_the_previous_action_in_the_features():
    sac = SAC(obs_dim=4, action_dim=2, config=SACConfig(action_rate_limit=0.2))
    features = torch.tensor([[9.0, 9.0, 0.5, -1.0], [0.0, 0.0, 0.0, 0.0]])  # last two entries: previous action
    action = torch.tensor([[1.0, 1.0], [-0.1, 0.15]])
    assert torch.equal(sac.rate_limited(action, features), torch.tensor([[0.7, -0.8], [-0.1, 0.15]]))
    unlimited = SAC(obs_dim=4, action_dim=2)
    assert torch.equal(unlimited.rate_limited(action, features), action)
    with pytest.raises(ValueError, match="action_rate_limit"):
        SACConfig(action_rate_limit=0.0)
    with pytest.raises(ValueError, match="previous action"):
        SAC(0, 2, SACConfig(action_rate_limit=0.2), encoder=EncoderConfig(cameras=("front",), state_dim=0))


def test_bc_term_is_the_weighted_squared_error_of_the_mode_on_intervention_rows():
    torch.manual_seed(0)
    sac = SAC(3, 2, SACConfig(bc_weight=2.5, hidden_dims=(8,)))
    features = torch.randn(3, 3)
    executed = torch.tensor([[0.5, -0.5], [0.1, 0.2], [-0.3, 0.9]])
    intervention = torch.tensor([True, False, True])
    state = torch.get_rng_state()
    plain, _ = sac.actor_loss(features)
    torch.set_rng_state(state)  # same policy draw: the difference is the BC term alone
    with_bc, _ = sac.actor_loss(features, executed, intervention)
    mode, _ = sac.actor(features, deterministic=True)
    by_hand = ((mode[0] - executed[0]).pow(2).sum() + (mode[2] - executed[2]).pow(2).sum()) / 2
    torch.testing.assert_close(with_bc - plain, 2.5 * by_hand)
    torch.set_rng_state(state)
    no_interventions, _ = sac.actor_loss(features, executed, torch.zeros(3, dtype=torch.bool))
    torch.testing.assert_close(no_interventions, plain)
    with pytest.raises(ValueError, match="bc_weight"):
        SACConfig(bc_weight=-1.0)


def test_bc_pulls_the_policy_to_the_demonstrated_action():
    """With a flat critic the BC term alone moves the deterministic action onto the demonstration."""
    torch.manual_seed(0)
    sac = SAC(1, 1, SACConfig(batch_size=32, hidden_dims=(16,), bc_weight=1.0, init_temperature=1e-4,
                              actor_lr=3e-3))
    start = float(sac.policy.act(np.zeros(1, np.float32), deterministic=True)[0])
    for _ in range(300):
        batch = {"obs": torch.zeros(32, 1), "action": torch.full((32, 1), -0.6), "reward": torch.zeros(32),
                 "next_obs": torch.zeros(32, 1), "terminated": torch.ones(32),
                 "intervention": torch.arange(32) < 16}
        sac.update(batch)
    action = float(sac.policy.act(np.zeros(1, np.float32), deterministic=True)[0])
    assert abs(start + 0.6) > 0.4 and abs(action + 0.6) < 0.1, (start, action)


def test_bfloat16_precision_runs_the_critic_matmuls_in_bf16_and_tracks_float32(monkeypatch):
    from robot_rl.agents import sac as sac_module

    torch.manual_seed(0)
    sizes = dict(num_critics=4, critic_subsample=2, hidden_dims=(16, 16), batch_size=64)
    fp32 = SAC(3, 2, SACConfig(**sizes))
    bf16 = SAC(3, 2, SACConfig(**sizes, precision="bfloat16"))
    bf16.load_state_dict(fp32.state_dict())
    outputs = []
    bf16.critic.register_forward_hook(lambda module, args, out: outputs.append(out.dtype))
    batch = _batch(64)
    rng = torch.get_rng_state()
    exact = fp32.update(batch)
    torch.set_rng_state(rng)
    mixed = bf16.update(batch)
    assert torch.bfloat16 in outputs  # the critic really ran under bf16 autocast
    assert all(p.dtype == torch.float32 for p in bf16.critic.parameters())  # weights and optimizer stay fp32
    assert all(math.isfinite(v) for v in mixed.values())
    assert mixed["critic_loss"] == pytest.approx(exact["critic_loss"], rel=0.05)
    assert mixed["q_mean"] == pytest.approx(exact["q_mean"], abs=0.02)
    for native, expected in ((True, "bfloat16"), (False, "float32")):  # auto: bf16 exactly where it is native
        monkeypatch.setattr(sac_module, "native_bf16", lambda device, native=native: native)
        assert SAC(3, 2, SACConfig(**sizes, precision="auto")).precision == expected
