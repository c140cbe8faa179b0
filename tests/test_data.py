"""Replay buffer, RLPD sampler, payload journal and delivery bookkeeping."""

import numpy as np
import pytest

from robot_rl.data.replay import MixedSampler, ReplayBuffer
from robot_rl.transport.journal import PayloadJournal
from robot_rl.transport.layout import transition_layout
from robot_rl.transport.outbox import Outbox
from robot_rl.transport.sequences import SequenceTracker


def _transitions(n, start=0, obs_dim=2):
    obs = (start + np.arange(n, dtype=np.float32))[:, None].repeat(obs_dim, 1)
    return {"obs": obs, "action": np.zeros((n, 1), np.float32), "reward": obs[:, 0].copy(),
            "next_obs": obs + 1, "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool),
            "intervention": np.zeros(n, bool)}


def test_ring_buffer_overwrites_oldest_and_keeps_order():
    buf = ReplayBuffer(5, transition_layout(2, 1))
    buf.add_batch(_transitions(3))
    buf.add_batch(_transitions(4, start=3))
    assert len(buf) == 5 and buf.total_added == 7
    np.testing.assert_array_equal(buf.ordered()["reward"], [2, 3, 4, 5, 6])


def test_batch_larger_than_capacity_keeps_newest():
    buf = ReplayBuffer(3, transition_layout(2, 1))
    buf.add_batch(_transitions(10))
    np.testing.assert_array_equal(buf.ordered()["reward"], [7, 8, 9])
    assert buf.total_added == 10


@pytest.mark.parametrize("corrupt", ["missing", "shape", "rows", "nan"])
def test_bad_batches_rejected_without_side_effects(corrupt):
    buf = ReplayBuffer(5, transition_layout(2, 1))
    batch = _transitions(3)
    if corrupt == "missing":
        del batch["reward"]
    elif corrupt == "shape":
        batch["obs"] = np.zeros((3, 4), np.float32)
    elif corrupt == "rows":
        batch["action"] = np.zeros((2, 1), np.float32)
    else:
        batch["next_obs"][1, 0] = np.nan
    with pytest.raises(ValueError):
        buf.add_batch(batch)
    assert len(buf) == 0


def test_mixed_sampler_half_and_half():
    online, demos = ReplayBuffer(100, transition_layout(2, 1)), ReplayBuffer(100, transition_layout(2, 1))
    online.add_batch(_transitions(50))
    demos.add_batch(_transitions(50, start=1000))
    batch = MixedSampler(online, demos, 0.5).sample(64, np.random.default_rng(0))
    assert (batch["reward"] >= 1000).sum() == 32
    only_demos = MixedSampler(ReplayBuffer(10, transition_layout(2, 1)), demos).sample(8, np.random.default_rng(0))
    assert (only_demos["reward"] >= 1000).all()


def test_journal_replays_and_survives_torn_tail(tmp_path):
    j = PayloadJournal(tmp_path, segment_records=2)
    for i in range(5):
        j.append(bytes([i]) * (i + 1), transitions=1)
    j.close()
    seg = sorted(tmp_path.glob("segment-*.log"))[-1]
    with open(seg, "ab") as f:  # a record cut off mid-write by SIGKILL
        f.write(b"\x10\x00\x00\x00abc")
    j2 = PayloadJournal(tmp_path, segment_records=2)
    payloads = [p for _, p in j2.replay()]
    assert payloads == [bytes([i]) * (i + 1) for i in range(5)]
    j2.append(b"new", transitions=1)
    assert [p for _, p in PayloadJournal(tmp_path).replay()][-1] == b"new"


def test_journal_prunes_unreachable_segments(tmp_path):
    j = PayloadJournal(tmp_path, segment_records=1)
    for i in range(6):
        j.append(b"x", transitions=10)
    j.prune(keep_transitions=25)
    assert len(list(tmp_path.glob("segment-*.log"))) == 3


def test_sequence_tracker_duplicates_and_gaps():
    t = SequenceTracker()
    assert t.add("a", 0) and t.add("a", 2) and t.add("a", 5)
    assert not t.add("a", 2) and not t.add("a", 0)
    assert t.missing("a") == [1, 3, 4]
    assert t.add("a", 1) and t.received("a") == 4
    assert t.add("b", 0) and t.actors() == ["a", "b"]


def test_outbox_resends_spills_and_reloads(tmp_path):
    box = Outbox(tmp_path, max_memory_bytes=250, resend_after_s=1.0)
    for _ in range(5):
        seq = box.allocate_seq()
        box.put(seq, bytes([seq]) * 100)
    assert box.memory_bytes <= 250 and box.spilled == 3
    first = box.due(now=10.0)
    assert [s for s, _ in first] == [0, 1, 2, 3, 4] and first[0][1] == bytes([0]) * 100
    assert box.due(now=10.5) == []  # not yet due again
    assert box.ack(0) and box.ack(3) and not box.ack(3)
    assert [s for s, _ in box.due(now=11.5)] == [1, 2, 4] and box.resends == 3
    # a restarted actor finds the spilled payloads and never reuses a sequence number
    again = Outbox(tmp_path)
    assert sorted(s for s, _ in again.due(now=0.0)) == [1, 2]
    assert again.allocate_seq() == 5


def test_outbox_resends_only_a_few_while_the_learner_answers_nothing(tmp_path):
    box = Outbox(tmp_path, resend_after_s=2.0, silent_resends=2)
    for _ in range(10):
        box.put(box.allocate_seq(), b"x" * 10)
    assert len(box.due(now=0.0)) == 10  # first sends
    assert len(box.due(now=2.0)) == 10  # the first resend round: the learner may have missed them all
    # no acknowledgement since: two of the oldest per resend period, however often it is asked
    assert [s for s, _ in box.due(now=4.0)] == [0, 1] and box.due(now=4.5) == []
    assert [s for s, _ in box.due(now=6.0)] == [2, 3]
    box.put(box.allocate_seq(), b"y")  # new data still goes at once
    assert [s for s, _ in box.due(now=6.1)] == [10]
    assert box.ack(0)  # the learner is back: everything due goes again
    assert sorted(s for s, _ in box.due(now=8.5)) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] and box.resends == 10 + 4 + 10
