"""PPO: the math against hand-computed values, normalizers, export, checkpoints, and learning."""

from __future__ import annotations

import array

import numpy as np
import pytest
import torch

from robot_rl.agents.ppo import (
    PPO, ActorCritic, DeployedPolicy, EmpiricalNormalization, PPOConfig, ValueNormalizer, compute_gae, deployable,
    export_policy, surrogate_loss, value_loss,
)
from robot_rl.training.ppo_runner import OnPolicyRunner
from robot_rl.transport import codec
from robot_rl.transport.kinds import POLICY, PPO_POLICY
from robot_rl.transport.ppo_policy import decode_ppo_policy, encode_ppo_policy


def test_gae_by_hand_with_an_episode_end():
    rewards = torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    values = torch.tensor([[0.5, 1.0], [1.0, 1.0], [1.5, 1.0]])
    dones = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    adv, ret = compute_gae(rewards, values, dones, torch.tensor([2.0, 5.0]), gamma=0.9, lam=0.8)
    # env 0: deltas 1.4, 2.35, 3.3 -> A2 = 3.3, A1 = 2.35 + 0.72 * 3.3, A0 = 1.4 + 0.72 * A1
    # env 1: the episode ends at t = 1, so t = 1 neither bootstraps nor sees t = 2's advantage
    expected = torch.tensor([[4.80272, 0.9], [4.726, 0.0], [3.3, 4.5]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + values)


def test_clipped_surrogate_by_hand():
    ratio = torch.tensor([1.5, 0.5, 1.1, 0.5])
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    # -1.2 (clipped gain), -0.5 (a loss is never clipped away), 1.1, 0.8 (clipped at 0.8)
    assert float(surrogate_loss(ratio, adv, 0.2)) == pytest.approx(0.05)


def test_value_losses_by_hand():
    values, old, returns = torch.tensor([1.0, 3.0]), torch.tensor([0.0, 2.9]), torch.tensor([2.0, 0.0])
    assert float(value_loss(values, old, returns, 0.2, None, clipped=False)) == pytest.approx(2.5)
    # clipped values 0.2 and 3.0: max(0.5, 1.62) and max(4.5, 4.5)
    assert float(value_loss(values, old, returns, 0.2, None, clipped=True)) == pytest.approx(3.06)
    # Huber with delta 1: errors 1 and -3 -> 0.5 and 1 * (3 - 0.5)
    assert float(value_loss(values, old, returns, 0.2, 1.0, clipped=False)) == pytest.approx(1.5)


def test_normalizers():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 4)) for n in (5, 17, 64)]
    norm = EmpiricalNormalization(4)
    for b in batches:
        norm.update(torch.as_tensor(b, dtype=torch.float32))
    allx = np.concatenate(batches)
    np.testing.assert_allclose(norm.mean.numpy(), allx.mean(0), rtol=1e-5)
    np.testing.assert_allclose(norm.var.numpy(), allx.var(0), rtol=1e-4)
    assert norm(torch.full((1, 4), 1e6)).max() == 5.0  # clipped
    vn = ValueNormalizer(beta=0.99)
    vn.update(torch.tensor([10.0, 12.0]))
    mean, var = vn._stats()
    assert float(mean) == pytest.approx(11.0)  # debiased: not 0.11
    assert float(var) == pytest.approx(1.0)
    x = torch.tensor([3.0, -7.0])
    torch.testing.assert_close(vn.denormalize(vn.normalize(x)), x)


def test_time_out_bootstrap_only_on_truncated_steps():
    alg = PPO(3, 5, 2, num_envs=2, config=PPOConfig(num_steps_per_env=2, value_normalization=False))
    obs, critic = torch.randn(2, 3), torch.randn(2, 5)
    alg.act(obs, critic)
    v = alg.actor_critic.evaluate(critic).detach()
    alg.process_env_step(torch.tensor([1.0, 1.0]), torch.tensor([False, False]), torch.tensor([True, False]))
    stored = alg.storage.rewards[0]
    torch.testing.assert_close(stored, torch.tensor([1.0 + 0.99 * float(v[0]), 1.0]))
    assert alg.storage.dones[0].tolist() == [1.0, 0.0]


def test_export_round_trip_and_bad_inputs(tmp_path):
    cfg = PPOConfig(actor_hidden=(16, 16))
    ac = ActorCritic(6, 8, 3, cfg)
    ac.update_normalizers(torch.randn(50, 6) * 3 + 1, torch.randn(50, 8))
    ac.actor[-1].weight.data.normal_()  # a non-trivial output layer
    export_policy(ac, tmp_path / "p", {"task": "test"}, cfg)
    policy = DeployedPolicy.load(tmp_path / "p")
    obs = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
    expected = ac.act_inference(torch.as_tensor(obs)).clamp(-1, 1).detach().numpy()
    np.testing.assert_allclose(policy(obs), expected, atol=1e-6)
    assert policy(obs[0]).shape == (3,)
    assert isinstance(policy(torch.as_tensor(obs)), torch.Tensor)
    assert policy.card["task"] == "test"
    with pytest.raises(ValueError, match="shape"):
        policy(np.zeros(5))
    with pytest.raises(ValueError, match="finite"):
        policy(np.full(6, np.nan))
    with pytest.raises(FileNotFoundError, match="missing"):
        DeployedPolicy.load(tmp_path / "nothing")

    # the same policy as a message payload (what the learner node publishes): a codec payload signed with the run
    # secret, read from UInt8MultiArray.data (an array.array)
    key = b"k" * 32
    payload = encode_ppo_policy(ac, {"iteration": 3}, key=key)
    received = decode_ppo_policy(array.array("B", payload), key=key)
    np.testing.assert_allclose(received(obs), expected, atol=1e-6)
    assert received.card["iteration"] == 3 and codec.decode(payload).kind == PPO_POLICY
    np.testing.assert_allclose(decode_ppo_policy(encode_ppo_policy(ac, {}))(obs), expected, atol=1e-6)  # no run dir
    tensors, card = deployable(ac, {})
    arrays = codec.state_dict_to_arrays(tensors)
    refused = [("too_short", payload[:3]), ("bad_mac", payload[:-10]), ("unsigned", encode_ppo_policy(ac, {})),
               ("bad_mac", encode_ppo_policy(ac, {}, key=b"o" * 32)),  # another run's key
               ("wrong_kind", codec.encode(POLICY, arrays, card, key=key))]
    for reason, bad in refused:
        with pytest.raises(codec.PayloadError) as info:
            decode_ppo_policy(bad, key=key)
        assert info.value.reason == reason
    with pytest.raises(ValueError, match="do not match the card"):
        decode_ppo_policy(codec.encode(PPO_POLICY, arrays, {**card, "actor_hidden": [8]}, key=key), key=key)


class PointMassEnv:
    """64 point masses in the plane that must reach the origin (Isaac Lab convention, torch)."""

    num_actions = 2

    def __init__(self, num_envs: int = 64, seed: int = 0, horizon: int = 50) -> None:
        self.num_envs, self.horizon = num_envs, horizon
        self.gen = torch.Generator().manual_seed(seed)
        self.pos = torch.zeros(num_envs, 2)
        self.vel = torch.zeros(num_envs, 2)
        self.t = torch.zeros(num_envs, dtype=torch.long)

    def _obs(self):
        policy = torch.cat([self.pos, self.vel], 1)
        return {"policy": policy, "critic": torch.cat([policy, self.t[:, None] / self.horizon], 1)}

    def _reset(self, mask):
        n = int(mask.sum())
        self.pos[mask] = torch.rand(n, 2, generator=self.gen) * 2 - 1
        self.vel[mask] = 0.0
        self.t[mask] = 0

    def reset(self):
        self._reset(torch.ones(self.num_envs, dtype=torch.bool))
        return self._obs(), {}

    def step(self, actions):
        a = actions.clamp(-1, 1)
        self.vel = 0.9 * self.vel + 0.1 * a
        self.pos = self.pos + 0.1 * self.vel
        self.t += 1
        reward = -self.pos.norm(dim=1) - 0.01 * (a ** 2).sum(1)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool)
        truncated = self.t >= self.horizon
        self._reset(truncated)
        return self._obs(), reward, terminated, truncated, {"log": {"Episode/dist": float(self.pos.norm(dim=1).mean())}}


def _evaluate(actor_critic) -> float:
    env = PointMassEnv(num_envs=32, seed=123)
    obs, _ = env.reset()
    total = 0.0
    with torch.inference_mode():
        for _ in range(env.horizon):
            obs, reward, _, _, _ = env.step(actor_critic.act_inference(obs["policy"]))
            total += float(reward.mean())
    return total


def test_ppo_learns_to_reach_the_origin():
    torch.manual_seed(0)
    cfg = PPOConfig(num_steps_per_env=25, actor_hidden=(32, 32), critic_hidden=(32, 32), learning_rate=3e-3,
                    init_noise_std=0.5)
    runner = OnPolicyRunner(PointMassEnv(), cfg, seed=0)
    before = _evaluate(runner.alg.actor_critic)
    history = runner.learn(60)
    after = _evaluate(runner.alg.actor_critic)
    assert history[-1]["env_steps"] == 60 * 25 * 64
    assert "Episode/dist" in history[-1] and history[-1]["collection_s"] > 0
    # doing nothing from a uniform start costs about -38; reaching the origin and staying a fraction of it
    assert after > 0.6 * before, (before, after)


def test_checkpoint_resume_reproduces_the_next_update(tmp_path):
    cfg = PPOConfig(num_steps_per_env=8, actor_hidden=(16,), critic_hidden=(16,))
    runner = OnPolicyRunner(PointMassEnv(seed=1), cfg, seed=0)
    runner.learn(2)
    runner.save(str(tmp_path / "ckpt.pt"))
    env_state = (runner.env.pos.clone(), runner.env.vel.clone(), runner.env.t.clone(), runner.env.gen.get_state())
    obs = (runner.obs.clone(), runner.critic_obs.clone())
    rng = torch.get_rng_state()
    a = runner.learn(1)[0]
    resumed = OnPolicyRunner(PointMassEnv(seed=1), cfg, seed=5)
    resumed.load(str(tmp_path / "ckpt.pt"))
    e = resumed.env
    e.pos, e.vel, e.t = env_state[0], env_state[1], env_state[2]
    e.gen.set_state(env_state[3])
    resumed.obs, resumed.critic_obs = obs
    torch.set_rng_state(rng)
    b = resumed.learn(1)[0]
    for key in ("value_loss", "surrogate_loss", "kl", "learning_rate"):
        assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9), key
    assert resumed.total_env_steps == runner.total_env_steps


def _filled_ppo(cfg: PPOConfig, num_envs: int = 16, seed: int = 0) -> PPO:
    g = torch.Generator().manual_seed(seed)
    ppo = PPO(3, 5, 2, num_envs, cfg, seed=seed)
    with torch.no_grad():
        for _ in range(cfg.num_steps_per_env):
            ppo.act(torch.randn(num_envs, 3, generator=g), torch.randn(num_envs, 5, generator=g))
            ppo.process_env_step(torch.randn(num_envs, generator=g), torch.rand(num_envs, generator=g) < 0.1,
                                 torch.zeros(num_envs, dtype=torch.bool))
        ppo.compute_returns(torch.randn(num_envs, 5, generator=g))
    return ppo


def test_the_written_out_gaussian_is_torch_distributions_normal():
    ppo = _filled_ppo(PPOConfig(num_steps_per_env=4, actor_hidden=(8,), critic_hidden=(8,), entropy_coef=0.3))
    s, ac = ppo.storage, ppo.actor_critic
    obs, actions = s.obs.reshape(-1, 3), s.actions.reshape(-1, 2)
    dist = ac.distribution(obs)
    adv = s.advantages.reshape(-1)
    loss, parts = ppo.minibatch_losses(obs, s.critic_obs.reshape(-1, 5), actions, s.log_probs.reshape(-1),
                                       s.mean.reshape(-1, 2), s.std.reshape(-1, 2), adv, s.returns.reshape(-1),
                                       s.values.reshape(-1))
    ratio = torch.exp(dist.log_prob(actions).sum(-1) - s.log_probs.reshape(-1))
    expected = surrogate_loss(ratio, (adv - adv.mean()) / (adv.std() + 1e-8), 0.2)
    old = torch.distributions.Normal(s.mean.reshape(-1, 2), s.std.reshape(-1, 2))
    kl = torch.distributions.kl_divergence(old, dist).sum(-1).mean()
    for part, value in zip(parts, (expected, None, dist.entropy().sum(-1).mean(), kl)):
        if value is not None:
            assert float(part) == pytest.approx(float(value.detach()), rel=1e-5, abs=1e-8)


def test_the_compiled_update_compiles_and_matches_eager():
    cfg = dict(num_steps_per_env=4, num_mini_batches=2, num_learning_epochs=2, actor_hidden=(16, 16),
               critic_hidden=(16, 16))
    eager, compiled = _filled_ppo(PPOConfig(**cfg)), _filled_ppo(PPOConfig(**cfg, compile=True))
    a, b = eager.update(), compiled.update()
    assert compiled.compiled and not eager.compiled  # compiled, not fallen back to eager
    for key in ("value_loss", "surrogate_loss", "kl", "entropy", "learning_rate"):
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    for p, q in zip(eager.actor_critic.parameters(), compiled.actor_critic.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
