"""Pixel replay memory: frames stored once, next observations rebuilt across episode boundaries."""

import numpy as np
import pytest
import zarr

from robot_rl.data.frames import FrameReplayBuffer

SHAPES = {"front": (4, 4, 3), "wrist": (4, 4, 3)}


def _obs(value: int) -> dict:
    return {"front": np.full((4, 4, 3), value, np.uint8), "wrist": np.full((4, 4, 3), 100 + value, np.uint8),
            "state": np.array([value, -value], np.float32)}


def _episode(buf, start, steps, stream="a", terminated=False):
    for t in range(steps):
        last = t == steps - 1
        buf.add(_obs(start + t), np.array([t], np.float32), float(start + t), _obs(start + t + 1),
                terminated=last and terminated, truncated=last and not terminated, stream=stream)


def test_consecutive_observations_share_a_slot_and_episode_ends_get_their_own():
    buf = FrameReplayBuffer(20, SHAPES, state_dim=2, action_dim=1)
    _episode(buf, 0, 3)   # obs 0,1,2 -> next 1,2,3 : 4 slots
    _episode(buf, 10, 2, terminated=True)  # obs 10,11 -> 11,12 : 3 slots
    assert buf.slots_written == 7 and len(buf) == 5
    batch = buf.sample(200, np.random.default_rng(0))
    # next observation is always obs + 1, including the final one of each episode
    np.testing.assert_array_equal(batch["next_state"][:, 0], batch["state"][:, 0] + 1)
    np.testing.assert_array_equal(batch["next_front"][:, 0, 0, 0], batch["front"][:, 0, 0, 0] + 1)
    np.testing.assert_array_equal(batch["next_wrist"][:, 0, 0, 0], batch["wrist"][:, 0, 0, 0] + 1)
    ends = batch["state"][:, 0] == 11
    assert batch["terminated"][ends].all() and not batch["terminated"][~ends].any()
    assert batch["truncated"][batch["state"][:, 0] == 2].all()


def test_interleaved_streams_keep_their_own_continuations():
    buf = FrameReplayBuffer(50, SHAPES, state_dim=2, action_dim=1)
    for t in range(4):
        for stream, base in (("a", 0), ("b", 20)):
            buf.add(_obs(base + t), np.zeros(1), 0.0, _obs(base + t + 1), False, t == 3, stream=stream)
    assert buf.slots_written == 10 and len(buf) == 8
    batch = buf.sample(100, np.random.default_rng(1))
    np.testing.assert_array_equal(batch["next_state"][:, 0], batch["state"][:, 0] + 1)


def test_wrapping_ring_never_returns_an_overwritten_next_observation():
    buf = FrameReplayBuffer(5, SHAPES, state_dim=2, action_dim=1)
    _episode(buf, 0, 6)  # 7 slots into a ring of 5
    batch = buf.sample(300, np.random.default_rng(2))
    np.testing.assert_array_equal(batch["next_state"][:, 0], batch["state"][:, 0] + 1)
    assert set(batch["state"][:, 0].astype(int)) == {2, 3, 4, 5}


def test_bad_inputs_are_refused_without_side_effects():
    buf = FrameReplayBuffer(10, SHAPES, state_dim=2, action_dim=1)
    bad = _obs(1)
    bad["front"] = bad["front"].astype(np.float32)
    with pytest.raises(ValueError, match="uint8"):
        buf.add(bad, np.zeros(1), 0.0, _obs(2), False, False)
    with pytest.raises(ValueError, match="finite"):
        buf.add(_obs(1), np.array([np.nan]), 0.0, _obs(2), False, False)
    assert buf.slots_written == 0 and len(buf) == 0


def test_bytes_per_transition_near_one_observation():
    shapes = {"front": (128, 128, 3), "wrist": (128, 128, 3)}
    buf = FrameReplayBuffer(1010, shapes, state_dim=33, action_dim=4)
    obs = lambda: {"front": np.zeros((128, 128, 3), np.uint8), "wrist": np.ones((128, 128, 3), np.uint8),
                   "state": np.zeros(33, np.float32)}
    raw = 2 * 128 * 128 * 3
    for t in range(10 * 100):  # 10 episodes of 100 steps: 1010 slots
        o, n = obs(), obs()
        n["state"][0] = t + 1
        o["state"][0] = t
        buf.add(o, np.zeros(4), 0.0, n, False, t % 100 == 99)
    assert len(buf) == 1000
    assert buf.nbytes() / len(buf) / raw <= 1.02


def _filled(capacity=12, features=None):
    """A wrapped ring with two interleaved streams, one of them mid-episode."""
    buf = FrameReplayBuffer(capacity, SHAPES, state_dim=2, action_dim=1, features=features)
    for t in range(5):
        for stream, base in (("a", 0), ("b", 50)):
            obs, nxt = _obs(base + t), _obs(base + t + 1)
            if features:
                obs["feat"], nxt["feat"] = np.full(3, base + t, np.float32), np.full(3, base + t + 1, np.float32)
            buf.add(obs, np.array([t], np.float32), float(t), nxt, False, stream == "a" and t == 4, stream=stream)
    return buf


def _assert_same_batches(a, b, seed):
    batch_a, batch_b = a.sample(64, np.random.default_rng(seed)), b.sample(64, np.random.default_rng(seed))
    assert batch_a.keys() == batch_b.keys()
    for key in batch_a:
        assert batch_a[key].dtype == batch_b[key].dtype
        np.testing.assert_array_equal(batch_a[key], batch_b[key], err_msg=key)


def test_save_load_resumes_with_the_same_contents_cursor_and_samples(tmp_path):
    original = _filled(features={"feat": 3})
    original.save(tmp_path / "buffer")
    restored = FrameReplayBuffer.load(tmp_path / "buffer")
    assert (restored.cursor, restored.slots_written, len(restored)) == (original.cursor, original.slots_written,
                                                                        len(original))
    np.testing.assert_array_equal(restored.generation, original.generation)
    _assert_same_batches(original, restored, seed=3)
    # stream b continues where it stopped: its next obs is recognised in both, in the same slots
    for buf in (original, restored):
        buf.add(_obs(55) | {"feat": np.full(3, 55, np.float32)}, np.zeros(1), 0.0,
                _obs(56) | {"feat": np.full(3, 56, np.float32)}, False, True, stream="b")
    assert restored.slots_written == original.slots_written
    _assert_same_batches(original, restored, seed=4)


def test_a_new_save_replaces_the_old_one_only_once_complete(tmp_path):
    buf = _filled()
    first = buf.save(tmp_path / "buffer")
    (tmp_path / "buffer" / ".tmp-snapshot-00000002").mkdir()  # a save that crashed half-way
    (tmp_path / "buffer" / ".tmp-snapshot-00000002" / "zarr.json").write_text("{")
    _assert_same_batches(buf, FrameReplayBuffer.load(tmp_path / "buffer"), seed=0)
    buf.add(_obs(90), np.zeros(1), 0.0, _obs(91), True, False, stream="c")
    second = buf.save(tmp_path / "buffer")
    assert sorted(p.name for p in (tmp_path / "buffer").iterdir()) == [second.name] and first != second
    assert FrameReplayBuffer.load(tmp_path / "buffer").slots_written == buf.slots_written


def test_load_refuses_missing_or_foreign_saves(tmp_path):
    with pytest.raises(FileNotFoundError):
        FrameReplayBuffer.load(tmp_path / "nothing")
    snapshot = _filled().save(tmp_path / "buffer")
    zarr.open_group(str(snapshot), mode="r+").attrs.update({"schema_version": 7})
    with pytest.raises(ValueError, match="newer"):
        FrameReplayBuffer.load(tmp_path / "buffer")
    zarr.open_group(str(snapshot), mode="r+").attrs.update({"schema_version": 1, "cursor": 3})
    with pytest.raises(ValueError, match="cursor"):
        FrameReplayBuffer.load(tmp_path / "buffer")


def test_cached_features_are_stored_per_slot_and_sampled_with_their_next():
    buf = FrameReplayBuffer(20, SHAPES, state_dim=2, action_dim=1, features={"front_feat": 2, "wrist_feat": 1},
                            feature_dtype="float32")
    feats = lambda v: {"front_feat": np.array([v, 2 * v], np.float64), "wrist_feat": np.array([-v])}
    for t in range(3):
        buf.add(_obs(t) | feats(t), np.zeros(1), 0.0, _obs(t + 1) | feats(t + 1), False, t == 2)
    assert buf.slots_written == 4
    batch = buf.sample(50, np.random.default_rng(0))
    assert batch["front_feat"].dtype == np.float32
    np.testing.assert_array_equal(batch["front_feat"][:, 1], 2 * batch["state"][:, 0])
    np.testing.assert_array_equal(batch["next_wrist_feat"][:, 0], -batch["next_state"][:, 0])
    with pytest.raises(ValueError, match="wrist_feat"):
        buf.add(_obs(9) | {"front_feat": np.zeros(2)}, np.zeros(1), 0.0, _obs(10) | feats(10), False, False)
    with pytest.raises(ValueError, match="finite"):  # 1e6 does not fit float16
        FrameReplayBuffer(4, {}, 2, 1, features={"f": 1}).add(
            {"state": np.zeros(2), "f": np.array([1e6])}, np.zeros(1), 0.0, {"state": np.zeros(2), "f": np.zeros(1)},
            False, False)
    assert buf.slots_written == 4


def test_features_only_buffer_costs_no_frame_memory():
    with_frames = FrameReplayBuffer(100, {"front": (64, 64, 3)}, 2, 1)
    features_only = FrameReplayBuffer(100, {}, 2, 1, features={"front_feat": 64})
    assert features_only.nbytes() < with_frames.nbytes() / 50


@pytest.mark.parametrize("names", [{"frames": {"state": (4, 4, 3)}}, {"frames": {"next_x": (4, 4, 3)}},
                                   {"features": {"front": 3}}, {"features": {"reward": 3}}])
def test_observation_names_that_would_clash_in_a_batch_are_refused(names):
    frames = names.get("frames", SHAPES)
    with pytest.raises(ValueError, match="name"):
        FrameReplayBuffer(4, frames, 2, 1, features=names.get("features"))


def test_add_episode_matches_adding_its_transitions_one_by_one():
    observations = {k: np.stack([_obs(v)[k] for v in range(8)]) for k in ("front", "wrist", "state")}
    steps = dict(action=np.arange(7, dtype=np.float32)[:, None], reward=np.arange(7, dtype=np.float32),
                 terminated=np.arange(7) == 6, truncated=np.zeros(7, bool), intervention=np.arange(7) == 3)
    for capacity in (20, 5):  # 5: the episode wraps the ring within one call
        whole, stepwise = (FrameReplayBuffer(capacity, SHAPES, 2, 1) for _ in range(2))
        whole.add(_obs(100), np.zeros(1), 0.0, _obs(101), False, True)
        stepwise.add(_obs(100), np.zeros(1), 0.0, _obs(101), False, True)
        whole.add_episode(observations, **steps)
        for t in range(7):
            stepwise.add(_obs(t), steps["action"][t], float(t), _obs(t + 1), bool(steps["terminated"][t]), False,
                         bool(steps["intervention"][t]))
        assert whole.cursor == stepwise.cursor and len(whole) == len(stepwise)
        np.testing.assert_array_equal(whole._valid_mask(), stepwise._valid_mask())
        _assert_same_batches(whole, stepwise, seed=capacity)
    with pytest.raises(ValueError, match="observations\\['state'\\]"):
        whole.add_episode({**observations, "state": observations["state"][:7]}, **steps)
    assert whole.cursor == stepwise.cursor
