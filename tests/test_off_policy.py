"""The off-policy core every SAC trainer runs through: storage, schedule and checkpoints, with tiny sizes."""

import numpy as np
import pytest
import torch

from robot_rl.agents.encoders import EncoderConfig
from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.data.frames import FrameReplayBuffer
from robot_rl.data.replay import ReplayBuffer
from robot_rl.training.off_policy import OffPolicyCore
from robot_rl.transport.layout import transition_layout

OBS, ACT = 3, 2


def _core(warmup=4, max_update_ratio=0.0, updates_from="start", seed=0, feature_views=1) -> OffPolicyCore:
    torch.manual_seed(seed)
    agent = SAC(OBS, ACT, SACConfig(hidden_dims=(8,), batch_size=4, utd_ratio=2), torch.device("cpu"))
    return OffPolicyCore(agent, lambda: ReplayBuffer(100, transition_layout(OBS, ACT)), np.random.default_rng(seed),
                         warmup=warmup, max_update_ratio=max_update_ratio, updates_from=updates_from,
                         feature_views=feature_views)


def _rows(n: int, intervention=()) -> dict[str, np.ndarray]:
    flags = np.zeros(n, bool)
    flags[list(intervention)] = True
    return {"obs": np.arange(n * OBS, dtype=np.float32).reshape(n, OBS), "action": np.zeros((n, ACT), np.float32),
            "reward": np.arange(n, dtype=np.float32), "next_obs": np.ones((n, OBS), np.float32),
            "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool), "intervention": flags}


def test_a_persons_corrections_are_stored_as_demonstrations_too():
    core = _core()
    core.store(_rows(5, intervention=(1, 3)))
    assert len(core.online) == 5 and core.online_transitions == 5
    assert len(core.demos) == 2
    np.testing.assert_array_equal(core.demos.ordered()["reward"], [1.0, 3.0])
    core.add(np.zeros(OBS), np.zeros(ACT), 7.0, np.zeros(OBS), False, False, False, "ep", demonstration=True)
    assert len(core.demos) == 3 and len(core.online) == 5 and core.online_transitions == 5


def test_schedule_counts_updates_from_the_start_or_from_warmup():
    start, warm = _core(warmup=4), _core(warmup=4, updates_from="warmup")
    for core in (start, warm):
        core.store(_rows(3))
        assert core.catch_up(1.0) is None and core.agent.num_updates == 0  # still warming up
        core.store(_rows(3))  # 6 online transitions
        assert core.catch_up(1.0) is not None
    assert start.agent.num_updates == 6  # one per transition since the first
    assert warm.agent.num_updates == 6 - 4 + 1  # one per transition from the 4th (warm-up) on
    warm.store(_rows(2))
    warm.catch_up(0.5)  # a lower ratio never undoes updates already made
    assert warm.agent.num_updates == 3


def test_the_update_cap_and_offline_updates():
    core = _core(warmup=2, max_update_ratio=0.5)
    core.add(np.zeros(OBS), np.zeros(ACT), 1.0, np.zeros(OBS), False, False, False, "d", demonstration=True)
    core.train_offline(5)  # demonstrations only: not counted against the online cap
    assert core.agent.num_updates == 5 and core.offline_updates == 5
    core.store(_rows(4))
    updates = 0
    while core.ready():
        core.update()
        updates += 1
    assert updates == 2  # 0.5 per online transition
    assert core.catch_up(10.0) is None  # the cap holds whatever the caller asks


def test_checkpoint_round_trip_and_a_changed_network_is_refused(tmp_path):
    core = _core(warmup=1)
    core.store(_rows(8))
    core.catch_up(1.0)
    network = {"hidden_dims": [8]}
    last = core.save_checkpoint(tmp_path, network, keep=2, extra={"policy_version": 3})
    for _ in range(2):
        core.store(_rows(1))
        core.catch_up(1.0)
        core.save_checkpoint(tmp_path, network, keep=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["000000009.pt", "000000010.pt"]
    assert last == tmp_path / "checkpoint.pt" and last.stat().st_nlink == 2  # the newest numbered one
    fresh = _core(warmup=1, seed=1)
    state = fresh.load_checkpoint(last, network)
    assert fresh.agent.num_updates == 10 and "policy_version" not in state
    assert fresh.rng.integers(1 << 30) == core.rng.integers(1 << 30)  # sampling continues where it was saved
    for mine, saved in zip(fresh.agent.actor.parameters(), core.agent.actor.parameters()):
        torch.testing.assert_close(mine, saved)
    with pytest.raises(ValueError, match=r"hidden_dims=\[8\]; this run has hidden_dims=\[16\]"):
        _core().load_checkpoint(last, {"hidden_dims": [16]})


def test_frame_memories_keep_each_frame_once_and_corrections_in_their_own_stream():
    torch.manual_seed(0)
    agent = SAC(0, ACT, SACConfig(hidden_dims=(8,), batch_size=2), torch.device("cpu"),
                encoder=EncoderConfig(cameras=("cam",), image_size=16, state_dim=1))
    core = OffPolicyCore(agent, lambda: FrameReplayBuffer(20, {"cam": (16, 16, 3)}, 1, ACT), np.random.default_rng(0),
                         warmup=1)
    frames = [{"cam": np.full((16, 16, 3), i, np.uint8), "state": np.array([i], np.float32)} for i in range(4)]
    for i in range(3):
        core.add(frames[i], np.zeros(ACT), float(i), frames[i + 1], False, False, i == 1, "ep0")
    assert len(core.online) == 3 and len(core.demos) == 1 and core.online_transitions == 3
    assert core.online.slots_written == 4  # 4 observations for 3 transitions
    batch = core.batch()
    assert batch["obs"]["cam"].shape == (2, 16, 16, 3) and batch["next_obs"]["state"].shape == (2, 1)
    assert core.catch_up(1.0) is not None and agent.num_updates == 3


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="updates_from"):
        _core(updates_from="warm-up")
    with pytest.raises(ValueError, match="warmup >= 0"):
        _core(warmup=-1)


def _frozen_feature_core(views: int, jitter: float) -> OffPolicyCore:
    torch.manual_seed(0)
    encoder = EncoderConfig(cameras=("cam",), image_size=16, state_dim=1, latent_dim=4, freeze=True, augment_pad=2)
    agent = SAC(0, ACT, SACConfig(hidden_dims=(8,), batch_size=3, utd_ratio=1), torch.device("cpu"),
                policy_encoder=encoder)
    layout = transition_layout(views * agent.obs_dim, ACT)
    return OffPolicyCore(agent, lambda: ReplayBuffer(20, layout), np.random.default_rng(0), warmup=1,
                         feature_views=views, feature_jitter=jitter)


def test_frozen_features_keep_the_clean_view_first_and_batches_draw_one_view_per_row():
    core = _frozen_feature_core(views=3, jitter=0.3)
    d = core.agent.obs_dim  # 4 latent + 1 state
    frames = {"cam": np.random.default_rng(1).integers(0, 256, (5, 16, 16, 3), dtype=np.uint8),
              "state": np.arange(5, dtype=np.float32)[:, None]}
    stored = core.features(frames)
    assert stored.shape == (5, 3 * d)
    with torch.inference_mode():
        clean = core.agent.policy.network.encoder({"cam": torch.from_numpy(frames["cam"]),
                                                   "state": torch.from_numpy(frames["state"])}).numpy()
    np.testing.assert_allclose(stored[:, :d], clean, rtol=1e-6)
    views = stored.reshape(5, 3, d)
    assert not np.allclose(views[:, 1], views[:, 0]) and not np.allclose(views[:, 2], views[:, 1])
    np.testing.assert_array_equal(views[:, :, -1], np.repeat(frames["state"], 3, axis=1))  # state never jittered
    # each sampled row is exactly one of its stored views, and all views get drawn
    picked = core._one_view(np.repeat(stored[:1], 300, axis=0))
    matches = (np.abs(picked[:, None, :] - views[:1]).max(axis=-1) == 0)
    assert picked.shape == (300, d) and matches.sum(axis=1).min() == 1 and matches.any(axis=0).all()
    core.store({"obs": stored, "next_obs": stored, "action": np.zeros((5, ACT), np.float32),
                "reward": np.zeros(5, np.float32), "terminated": np.zeros(5, bool), "truncated": np.zeros(5, bool),
                "intervention": np.zeros(5, bool)})
    assert core.batch()["obs"].shape == (3, d) and core.update()


def test_one_view_stores_what_it_did_before():
    core = _frozen_feature_core(views=1, jitter=0.3)
    frames = {"cam": np.zeros((2, 16, 16, 3), np.uint8), "state": np.zeros((2, 1), np.float32)}
    assert core.features(frames).shape == (2, core.agent.obs_dim)
    with pytest.raises(ValueError, match="feature_views >= 1"):
        _frozen_feature_core(views=0, jitter=0.0)
    with pytest.raises(ValueError, match="learns from state vectors"):  # nothing to view twice
        _core(feature_views=2)


class BehaviourCloning:
    """Not SAC: regresses the policy's deterministic action onto the stored actions (MSE, Adam), implementing
    training/off_policy.py's OffPolicyAgent and nothing more."""

    def __init__(self, obs_dim: int, action_dim: int, batch_rows: int = 16):
        from robot_rl.agents.policy import Policy, PolicySpec

        self.device, self.obs_dim, self.num_updates, self.batch_rows = torch.device("cpu"), obs_dim, 0, batch_rows
        self.trains_encoder = False
        self.policy = Policy(PolicySpec(obs_dim, action_dim, (16,), False))
        self.policy.network.train()
        self.optimizer = torch.optim.Adam(self.policy.network.actor.parameters(), lr=1e-2)

    def update(self, batch):
        predicted = self.policy.network.act_on_features(batch["obs"], batch["obs"], deterministic=True)
        loss = torch.nn.functional.mse_loss(predicted, batch["action"])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.num_updates += 1
        return {"bc_loss": loss.item()}

    def state_dict(self):
        return {"policy": self.policy.network.state_dict(), "optimizer": self.optimizer.state_dict(),
                "num_updates": self.num_updates}

    def load_state_dict(self, state):
        self.policy.network.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_updates = state["num_updates"]


def test_any_agent_with_the_protocol_trains_through_the_core_and_checkpoints(tmp_path):
    """The core names no algorithm: a behaviour-cloning agent learns the demonstrated actions through its storage,
    schedule and checkpoints (a = tanh-range linear map of the observation, learnable exactly)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    agent = BehaviourCloning(OBS, ACT)
    core = OffPolicyCore(agent, lambda: ReplayBuffer(500, transition_layout(OBS, ACT)), rng, warmup=1,
                         demo_fraction=0.5)
    obs = rng.uniform(-1, 1, (400, OBS)).astype(np.float32)
    rows = {**_rows(400), "obs": obs, "action": (0.5 * obs[:, :ACT] - 0.2 * obs[:, 1:]).astype(np.float32)}
    core.store(rows, demonstration=True)
    core.store(rows)
    first = core.update()["bc_loss"]
    core.catch_up(1.0)  # one update per online transition: 399 more
    assert agent.num_updates == 400
    last = np.mean([core.update()["bc_loss"] for _ in range(10)])
    assert last < 0.05 * first, (first, last)

    core.save_checkpoint(tmp_path, {"hidden_dims": [16]}, keep=2)
    restored = BehaviourCloning(OBS, ACT)
    OffPolicyCore(restored, lambda: ReplayBuffer(500, transition_layout(OBS, ACT)), np.random.default_rng(1)) \
        .load_checkpoint(tmp_path / "checkpoint.pt", {"hidden_dims": [16]})
    assert restored.num_updates == agent.num_updates
    np.testing.assert_allclose(restored.policy.act(obs[:5], deterministic=True),
                               agent.policy.act(obs[:5], deterministic=True), atol=1e-6)
