"""The policy with memory (robot_rl/agents/memory.py): its window, its network, its export and its use."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from robot_rl.agents.memory import HistoryVecEnv, ObservationHistory, min_steps
from robot_rl.agents.ppo import ActorCritic, DeployedPolicy, PPOConfig, deployable, export_policy


def test_a_window_starts_filled_with_its_first_observation_and_slides_newest_last():
    history = ObservationHistory(2, 3, 1)
    first = history.push(torch.tensor([[1.0], [10.0]]))
    torch.testing.assert_close(first, torch.tensor([[1.0, 1.0, 1.0], [10.0, 10.0, 10.0]]))
    history.push(torch.tensor([[2.0], [20.0]]))
    # stream 1 starts an episode: its window refills; stream 0 slides on
    window = history.push(torch.tensor([[3.0], [30.0]]), first=torch.tensor([False, True]))
    torch.testing.assert_close(window, torch.tensor([[1.0, 2.0, 3.0], [30.0, 30.0, 30.0]]))
    history.reset([0])
    torch.testing.assert_close(history.push(torch.tensor([[4.0], [40.0]])),
                               torch.tensor([[4.0, 4.0, 4.0], [30.0, 30.0, 40.0]]))
    with pytest.raises(ValueError, match=r"observations must have shape \(2, 1\)"):
        history.push(torch.zeros(2, 2))


def test_the_history_actor_reads_old_observations_not_only_the_newest():
    config = PPOConfig(history_steps=min_steps())
    actor_critic = ActorCritic(min_steps() * 5, 7, 2, config)
    torch.nn.init.normal_(actor_critic.actor.head[-1].weight)  # the output layer starts near zero by design
    window = torch.randn(3, min_steps(), 5)
    older = window.clone()
    older[:, 0] += 1.0  # only the oldest observation differs
    a, b = (actor_critic.act_inference(w.reshape(3, -1)) for w in (window, older))
    assert a.shape == (3, 2) and not torch.allclose(a, b)


def test_a_window_too_short_for_the_convolution_is_refused():
    assert min_steps() == 40  # kernel 8 stride 4, then two kernels of 5: (((1 - 1) + 5 - 1) + 5 - 1) * 4 + 8
    with pytest.raises(ValueError, match=r"39 steps is too short for the temporal convolution \(at least 40 steps\)"):
        PPOConfig(history_steps=39)


def test_an_exported_memory_policy_acts_as_the_trained_one_and_its_stream_keeps_the_window(tmp_path):
    steps, frame = 40, 6
    actor_critic = ActorCritic(steps * frame, 9, 4, PPOConfig(history_steps=steps))
    torch.nn.init.normal_(actor_critic.actor.head[-1].weight, std=0.1)
    actor_critic.obs_norm.update(torch.randn(64, steps * frame) * 2.0 + 1.0)
    export_policy(actor_critic, tmp_path / "p", {"task": "test"})
    policy = DeployedPolicy.load(tmp_path / "p")
    assert (policy.history_steps, policy.frame_dim, policy.obs_dim) == (steps, frame, steps * frame)
    assert policy.card["history_steps"] == steps and policy.card["actor_hidden"] == [128, 128, 128]
    observations = np.random.default_rng(0).normal(size=(45, 2, frame)).astype(np.float32)
    stream = policy.stream(2)
    acted = np.stack([stream(obs) for obs in observations])
    # by hand: the window of the last 40 observations, the first repeated before there were 40
    for t in (0, 10, 44):
        idx = np.clip(np.arange(t - steps + 1, t + 1), 0, None)
        window = torch.as_tensor(observations[idx].transpose(1, 0, 2).reshape(2, -1))
        with torch.inference_mode():
            expected = actor_critic.act_inference(window).clamp(-1, 1).numpy()
        np.testing.assert_allclose(acted[t], expected, atol=1e-5)
    with pytest.raises(ValueError, match="observation must be finite"):
        stream(np.full((2, frame), np.nan, dtype=np.float32))


def test_weights_of_a_memory_policy_under_a_card_without_memory_are_refused(tmp_path):
    tensors, card = deployable(ActorCritic(40 * 3, 3, 2, PPOConfig(history_steps=40)), {})
    card.pop("history_steps")
    with pytest.raises(ValueError, match="weights do not match the card"):
        DeployedPolicy.from_tensors(tensors, card, "cpu", "a card that lost its history_steps")


def test_the_juggling_env_with_memory_refills_a_window_when_its_episode_restarts():
    from robot_rl.robots.quad.vec_env import QuadJuggleVecEnv

    env = HistoryVecEnv(QuadJuggleVecEnv(4, seed=3), 40)
    obs, _ = env.reset()
    assert obs["policy"].shape == (4, 40 * 32) and obs["critic"].shape[1] == QuadJuggleVecEnv.num_privileged_obs
    frames = obs["policy"].reshape(4, 40, 32)
    assert torch.equal(frames[:, 0], frames[:, -1])
    crash = torch.tensor([[-1.0, 0.0, 0.0, 0.0]] * 4)  # no thrust: every quadrotor falls and its episode ends
    for _ in range(200):
        obs, _, terminated, truncated, _ = env.step(crash)
        if (terminated | truncated).any():
            break
    ended = terminated | truncated
    assert ended.any()
    frames = obs["policy"].reshape(4, 40, 32)
    # an env that restarted sees only its new episode's first observation; the others their last 40
    assert torch.equal(frames[ended][:, 0], frames[ended][:, -1])
    env.close()


def test_juggle_training_with_memory_exports_a_policy_the_evaluation_and_the_actor_can_fly(tmp_path):
    import robot_rl.robots.quad.train as juggle

    base = juggle.JuggleTrainConfig()
    cfg = dataclasses.replace(base, num_envs=8, iterations=1, eval_every=1, eval_trials=2, eval_max_s=0.3,
                              device="cpu", physics="rollout", split="train_wide",
                              ppo=dataclasses.replace(base.ppo, compile=False, num_steps_per_env=4,
                                                      history_steps=40))
    card = juggle.train_juggling(cfg, tmp_path / "policy", log=lambda line: None)
    assert card["train_config"]["split"] == "train_wide"
    policy = DeployedPolicy.load(tmp_path / "policy")
    assert policy.history_steps == 40 and policy.frame_dim == 32
    results = juggle.evaluate_policy(policy, 2, 0.3, split="restitution_low", seed=1)
    assert [r.duration_s <= 0.3 for r in results] == [True, True]
    with pytest.raises(ValueError, match="no randomization split 'train_wid'"):
        juggle.train_juggling(dataclasses.replace(cfg, split="train_wid"), tmp_path / "other")
    assert not (tmp_path / "other").exists() and not (tmp_path / "other-run").exists()
