"""FastRLAP's two stages on tiny sizes: IQL pretraining from recorded prior driving, then the
online run on its frozen encoder (features cached per frame, executed actions stored)."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from robot_rl.agents.frame_stack_policy import load_frame_stack_policy
from robot_rl.agents.iql import IQLConfig, encode_stack
from robot_rl.data.episodes import EpisodeDataset
from robot_rl.robots.car.sim import STATE_DIM
from robot_rl.robots.car.train import CarTrainConfig, CarTrainer, fastrlap_sac
from robot_rl.robots.car.pretrain import CarPretrainConfig, PriorData, pretrain_car


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    root = tmp_path_factory.mktemp("car")
    config = CarPretrainConfig(dataset=str(root / "prior.zarr"), tracks=2, steps_per_track=50, updates=3,
                               iql=IQLConfig(batch_size=16), log_every=1, device="cpu")
    rows = []
    card = pretrain_car(config, root / "policy", log=rows.append)
    return root, card, rows


def test_pretraining_records_prior_data_and_exports_a_policy(pretrained):
    root, card, rows = pretrained
    assert rows[0]["recorded"]["steps"] == 100 and [r["update"] for r in rows[1:]] == [1, 2, 3]
    assert card["dataset"]["steps"] == 100 and card["dataset"]["tracks"] == [1000, 1001]
    policy = load_frame_stack_policy(root / "policy")
    assert policy.frame_stack == 3 and policy.state_dim == STATE_DIM and policy.feature_dim == 3 * 50 + STATE_DIM


def test_prior_batches_stack_frames_inside_episodes(pretrained):
    root, _, _ = pretrained
    dataset = EpisodeDataset(root / "prior.zarr")
    data = PriorData(dataset, 3)
    batch = data.sample(32, np.random.default_rng(0))
    assert batch["obs"]["frames"].shape == (32, 3, 64, 64, 3) and batch["obs"]["state"].shape == (32, STATE_DIM)
    # The next observation's stack is the observation's shifted by one frame.
    np.testing.assert_array_equal(batch["next_obs"]["frames"][:, :2], batch["obs"]["frames"][:, 1:])
    first = dataset.episode(0)
    np.testing.assert_array_equal(data.frames[data.stacks[0]], np.stack([first["front"][0]] * 3))
    np.testing.assert_array_equal(data.action[:len(first["action"])], first["action"])


def test_online_run_caches_frame_features_and_learns_from_executed_actions(pretrained):
    root, _, _ = pretrained
    sac = replace(fastrlap_sac(), utd_ratio=2, batch_size=16, num_critics=4)
    trainer = CarTrainer(CarTrainConfig(policy=str(root / "policy"), total_steps=40, warmup_steps=20, sac=sac,
                                        log_every=20, device="cpu"))
    try:
        pretrained_actor = load_frame_stack_policy(root / "policy").actor
        for mine, shipped in zip(trainer.agent.actor.parameters(), pretrained_actor.parameters()):
            torch.testing.assert_close(mine, shipped)  # FastRLAP starts from the pretrained actor
        obs, _ = trainer.env.reset(seed=3)
        stored = trainer.observe(obs, first=True)
        for _ in range(2):
            obs, *_ = trainer.env.step(np.array([0.5, 0.1], np.float32))
            stored = trainer.observe(obs, first=False)
        with torch.no_grad():
            expected = encode_stack(trainer.policy.encoder, torch.from_numpy(obs["frames"])[None])[0].numpy()
        np.testing.assert_allclose(stored[:-STATE_DIM], expected, atol=1e-5)  # one frame encoded per step
        np.testing.assert_array_equal(stored[-STATE_DIM:], obs["state"])

        history = trainer.run()
        assert [row["steps"] for row in history] == [20, 40] and history[-1]["updates"] == 21
        saved = trainer.save_checkpoint(root / "car-run")
        assert torch.load(saved, weights_only=True)["agent"]["num_updates"] == 21
        stored = trainer.core.online.ordered()
        # Stored actions are the executed ones: within 0.2 of the previous action the state holds,
        # and that is the next state's previous action (inside an episode).
        assert np.abs(stored["action"] - stored["obs"][:, -2:]).max() <= 0.2 + 1e-6
        np.testing.assert_allclose(stored["next_obs"][:, -2:], stored["action"], atol=1e-6)
    finally:
        trainer.close()


def test_scratch_arm_has_the_same_architecture_and_rejects_mismatched_policies(pretrained):
    root, _, _ = pretrained
    scratch = CarTrainer(CarTrainConfig(policy=None, total_steps=1, device="cpu"))
    try:
        shipped = load_frame_stack_policy(root / "policy")
        assert scratch.policy.feature_dim == shipped.feature_dim
        assert not any(p.requires_grad for p in scratch.policy.encoder.parameters())
    finally:
        scratch.close()
    with pytest.raises(ValueError, match="frames"):
        CarTrainer(CarTrainConfig(policy=str(root / "policy"), frame_stack=2, device="cpu"))


def test_laps_are_timed_per_draw_the_same_way_for_any_driver():
    from robot_rl.robots.car.sim import CarRaceEnv
    from robot_rl.robots.car.train import lap_time_median, lap_time_ratio, timed_laps

    env = CarRaceEnv(track_seed=7, render=False, randomization_split="eval")
    try:
        expert = timed_laps(env, lambda obs, first: env.expert_action(), draws=(5001, 5002))
        assert all(t is not None and 5.0 < t < 90.0 for t in expert)
        assert timed_laps(env, lambda obs, first: env.expert_action(), draws=(5001, 5002)) == expert  # same draws
        into_the_wall = timed_laps(env, lambda obs, first: np.array([1.0, 1.0], np.float32), draws=(5001,))
    finally:
        env.close()
    assert into_the_wall == [None]
    assert lap_time_median([10.0, None, 12.0]) == 12.0 and lap_time_median([10.0, None]) == float("inf")
    assert lap_time_ratio([11.0, 12.0, None], [10.0, 10.0, None]) == 1.2  # failures count on both sides
    assert lap_time_ratio([11.0, None], [10.0, 10.0]) == float("inf")


def test_the_trained_policy_is_timed_on_its_own_env_and_frame_stack(pretrained):
    root, _, _ = pretrained
    trainer = CarTrainer(CarTrainConfig(policy=str(root / "policy"), total_steps=1, device="cpu"))
    try:
        obs, _ = trainer.env.reset(seed=3)
        trainer.observe(obs, first=True)
        before = trainer.stack.flat().copy()
        assert trainer.evaluate_laps(draws=(5001,), max_s=1.0) == [None]  # no lap within a second
        np.testing.assert_array_equal(trainer.stack.flat(), before)  # the training episode is untouched
    finally:
        trainer.close()
