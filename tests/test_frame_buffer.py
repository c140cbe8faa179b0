"""Pixel replay memory: frames stored once, next observations rebuilt across episode boundaries."""

import numpy as np
import pytest

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
