"""The reward node: its logic (robot_rl.rewards, fed image messages by robot_rl.ros.reward_io) without a node, then
the node as a separate process over loopback DDS scoring a recorded demonstration with a small progress model
trained here."""

from __future__ import annotations

import array
import math
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from robot_rl.device import resolve_device
from robot_rl.rewards.backends import (BACKENDS, BackendLoadError, LoadedBackend, SuccessScorer, check_model_path,
                                       load_backend)
from robot_rl.rewards.scorer_input import (FrameRejected, StampPairer, UnreadableScores, check_frame_shape,
                                           processor_frames)
from robot_rl.rewards.online import PendingSteps, RewardConfig, RewardStream, ScoringWorker
from robot_rl.rewards.progress import accumulate_value, share_of_remaining
from robot_rl.ros.reward_io import decode_image, feed_image

GOAL = "pick up the cube"
S = 1_000_000_000


# ---- helpers -------------------------------------------------------------------------------

class FakeScorer:
    """Deterministic stand-in for a model, for the bookkeeping tests only: a frame's progress is its
    mean brightness / 255 (delta = share of the remaining progress) and its done probability too."""

    def __init__(self):
        self.calls: list[tuple[float, float, float, str]] = []  # per step: (first, previous, current) levels, goal
        self.batches: list[int] = []  # steps per call

    @staticmethod
    def levels(frames) -> np.ndarray:
        return frames["front"].mean(axis=(1, 2, 3)) / 255.0

    def score(self, first, previous, current, goal):
        batch = len(current["front"])
        for frames, rows in ((first, 1), (previous, batch), (current, batch)):
            assert all(f.ndim == 4 and f.shape[0] == rows and f.dtype == np.uint8 for f in frames.values())
        p0, p1, p2 = self.levels(first)[0], self.levels(previous), self.levels(current)
        self.calls += [(float(p0), float(a), float(b), goal) for a, b in zip(p1, p2)]
        self.batches.append(batch)
        return share_of_remaining(p1, p2).astype(np.float32), p2.astype(np.float32)


def backend(scorer=None, needs_goal=True, done_threshold=0.9, **kw) -> LoadedBackend:
    return LoadedBackend(scorer or FakeScorer(), ("front", "wrist"), done_threshold, needs_goal=needs_goal, **kw)


def config(**kw) -> RewardConfig:
    return RewardConfig(**{"model_path": "unused", "goal": GOAL, **kw})


def image_msg(level: float, stamp_ns: int, size: int = 8, encoding: str = "rgb8", height=None, width=None,
              step=None, data=None):
    """A duck-typed sensor_msgs/Image (what the stream reads of one)."""
    height = size if height is None else height
    width = size if width is None else width
    pixels = np.full((height, width, 3), int(round(level * 255)), np.uint8)
    buf = array.array("B")
    buf.frombytes(pixels.tobytes() if data is None else data)
    stamp = SimpleNamespace(sec=stamp_ns // S, nanosec=stamp_ns % S)
    return SimpleNamespace(header=SimpleNamespace(stamp=stamp), encoding=encoding, height=height, width=width,
                           step=3 * width if step is None else step, data=buf, is_bigendian=0)


def feed(stream: RewardStream, level: float, stamp_ns: int) -> str:
    """Both cameras' frames of one observation; returns what became of the set."""
    feed_image(stream, "wrist", image_msg(0.5, stamp_ns))
    return feed_image(stream, "front", image_msg(level, stamp_ns))


def run_episode(stream: RewardStream, levels, start_ns: int = S) -> list:
    """Feeds observations one by one, scoring each handed-over one at once (a fast worker)."""
    results = []
    for i, level in enumerate(levels):
        feed(stream, level, start_ns + i * S // 10)
        results += stream.run_once(0)
    return results


# ---- configuration -------------------------------------------------------------------------

def test_config_refuses_bad_values(tmp_path):
    RewardConfig(model_path=str(tmp_path), cameras=["front"], done_threshold=0.7, stamp_tolerance_s=0.0)
    bad = [({"backend": "magic"}, "backend 'magic'"), ({"cameras": []}, "at least one camera"),
           ({"cameras": ["front", "front"]}, "twice"), ({"cameras": ["front cam"]}, "not a valid topic"),
           ({"frame_skip": 0}, "frame_skip"), ({"frame_skip": 1.5}, "frame_skip"),
           ({"max_batch": 0}, "max_batch"), ({"max_batch": 257}, "max_batch"), ({"max_batch": True}, "max_batch"),
           ({"reward_scale": 0.0}, "reward_scale"), ({"reward_scale": math.inf}, "reward_scale"),
           ({"done_threshold": 1.0}, "done_threshold"), ({"done_threshold": -0.1}, "done_threshold"),
           ({"done_consecutive": 0}, "done_consecutive"), ({"max_latency_s": 0.0}, "max_latency_s"),
           ({"stamp_tolerance_s": -1e-3}, "stamp_tolerance_s"), ({"device": "gpu"}, "device"),
           ({"goal": "?!"}, "no words")]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=message):
            RewardConfig(**{"model_path": str(tmp_path), **kwargs})


def test_model_path_is_required_with_a_hint(tmp_path):
    with pytest.raises(ValueError, match=r"model_path is required.*robot-rl reward train --demos <dataset> --out"):
        check_model_path("progress", "")
    missing = tmp_path / "nowhere"
    with pytest.raises(ValueError, match=f"{missing}.*does not exist.*robot-rl reward train"):
        check_model_path("progress", str(missing))
    with pytest.raises(ValueError, match="SuccessClassifier.save"):
        check_model_path("success", "")
    assert check_model_path("vlac", str(tmp_path)) == tmp_path


def test_resolve_device():
    import torch

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="must be auto"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            resolve_device("cuda:0")


# ---- frames --------------------------------------------------------------------------------

def test_decode_image_and_rejections():
    stamp, frame = decode_image(image_msg(0.2, 5 * S + 7))
    assert stamp == 5 * S + 7 and frame.shape == (8, 8, 3) and frame.dtype == np.uint8 and frame[0, 0, 0] == 51
    padded = np.arange(8 * 28, dtype=np.uint8).reshape(8, 28)  # rows of 24 bytes padded to 28
    _, frame = decode_image(image_msg(0, S, step=28, data=padded.tobytes()))
    np.testing.assert_array_equal(frame.reshape(8, 24), padded[:, :24])
    assert frame.flags.c_contiguous
    cases = [(image_msg(0.2, 0), "stamp"),
             (image_msg(0.2, S, encoding="bgr8"), "encoding"),
             (image_msg(0.2, S, encoding="16UC1"), "encoding"),
             (image_msg(0.2, S, data=b"\x00" * 10), "layout"),
             (image_msg(0.2, S, step=5), "layout"),
             (image_msg(0.2, S, height=0), "layout")]
    for msg, reason in cases:
        with pytest.raises(FrameRejected) as info:
            decode_image(msg)
        assert info.value.reason == reason, info.value.detail


def test_frame_shape_rejections():
    for frame, kwargs, reason in [(np.zeros((8, 6, 3), np.uint8), {"square": True}, "shape"),
                                  (np.zeros((6, 8, 3), np.uint8), {"size": 6}, "shape"),
                                  (np.zeros((8, 8, 3), np.uint8), {"size": 16}, "size")]:
        with pytest.raises(FrameRejected) as info:
            check_frame_shape(frame, **kwargs)
        assert info.value.reason == reason, info.value.detail
    check_frame_shape(np.zeros((8, 6, 3), np.uint8))  # any shape when the model resizes freely
    check_frame_shape(np.zeros((16, 16, 3), np.uint8), square=True, size=16)


def test_frames_reach_an_image_processor_writable_and_copied_only_where_needed():
    decoded = np.frombuffer(bytes(8 * 8 * 3), np.uint8).reshape(8, 8, 3)  # a view of read-only bytes
    first = np.broadcast_to(np.zeros((1, 8, 8, 3), np.uint8), (3, 8, 8, 3))  # the first frame over a batch
    own = np.zeros((8, 8, 3), np.uint8)
    assert not decoded.flags.writeable and not first[0].flags.writeable
    out = processor_frames([decoded, first[0], own])
    assert all(f.flags.writeable and f.flags.c_contiguous for f in out)
    assert out[2] is own and np.array_equal(out[0], decoded)


def test_stream_counts_rejected_images_and_goes_on():
    stream = RewardStream(config(), backend=backend(image_size=8, square=True))
    assert feed_image(stream, "front", image_msg(0.1, S, encoding="bgr8")) == "rejected:encoding"
    assert feed_image(stream, "front", image_msg(0.1, S, size=16)) == "rejected:size"
    assert feed_image(stream, "wrist", image_msg(0.1, S, data=b"x")) == "rejected:layout"
    stats = stream.stats()
    assert stats["frames_rejected"] == 3 and stats["frames_received"] == 3
    assert stats["frames_rejected_encoding"] == stats["frames_rejected_size"] == stats["frames_rejected_layout"] == 1
    assert "wrist" in stats["last_rejection"] and "layout" in stats["last_rejection"]
    assert run_episode(stream, [0.0, 0.5])[0].progress_delta == pytest.approx(0.5, abs=0.01)


def test_stamp_pairing_and_drop_counting():
    pairer = StampPairer(["front", "wrist"], tolerance_ns=1000)
    assert pairer.add("front", 10_000, "f1") is None
    assert pairer.add("wrist", 10_500, "w1") == (10_000, {"front": "f1", "wrist": "w1"})  # the first camera's stamp
    assert pairer.dropped == 0
    # a front frame that never gets its wrist partner is dropped once a later set completes
    assert pairer.add("front", 20_000, "f2") is None
    assert pairer.add("front", 30_000, "f3") is None
    assert pairer.add("wrist", 31_000, "w3") == (30_000, {"front": "f3", "wrist": "w3"})
    assert pairer.dropped == 1
    # outside the tolerance: no pair
    assert pairer.add("wrist", 40_000, "w4") is None
    assert pairer.add("front", 41_001, "f4") is None
    # late (older than a used set) and repeated frames are dropped
    assert pairer.add("front", 30_000, "f3 again") is None
    assert pairer.add("wrist", 25_000, "w old") is None
    assert pairer.dropped == 3
    # out-of-order arrival still pairs
    assert pairer.add("wrist", 60_000, "w6") is None
    assert pairer.add("wrist", 50_000, "w5") is None
    assert pairer.add("front", 50_000, "f5") == (50_000, {"front": "f5", "wrist": "w5"})
    assert pairer.dropped == 5  # w4 and f4 were older than that set
    assert pairer.add("front", 60_000, "f6")[1] == {"front": "f6", "wrist": "w6"}
    # a camera that never pairs overflows its queue: counted
    small = StampPairer(["front", "wrist"], queue_size=2)
    for i in range(5):
        small.add("front", i + 1, i)
    assert small.dropped == 3
    # one camera: every frame is a set
    single = StampPairer(["front"])
    assert single.add("front", 5, "a") == (5, {"front": "a"})
    with pytest.raises(KeyError, match="unknown camera"):
        single.add("rear", 6, "b")


def test_exact_stamps_required_without_tolerance():
    stream = RewardStream(config(stamp_tolerance_s=0.0), backend=backend())
    feed_image(stream, "front", image_msg(0.1, S))
    assert feed_image(stream, "wrist", image_msg(0.1, S + 1)) == "waiting"
    assert stream.stats()["frames_paired"] == 0
    assert feed(stream, 0.1, 2 * S) == "first"
    assert stream.stats()["frames_unmatched"] == 2


# ---- episodes, skipping, value, done, latency ----------------------------------------------

def test_first_frame_value_accumulation_and_episode_reset():
    scorer = FakeScorer()
    stream = RewardStream(config(reward_scale=2.0), backend=backend(scorer))
    levels = [0.0, 0.2, 0.5, 0.4, 0.8]
    results = run_episode(stream, levels)
    assert len(results) == 4  # the first frame is the reference, not scored
    assert [r.stamp_ns for r in results] == [S + i * S // 10 for i in range(1, 5)]
    q = np.round(np.array(levels) * 255) / 255  # what the 8-bit frames hold
    deltas = share_of_remaining(q[:-1], q[1:])
    np.testing.assert_allclose([r.progress_delta for r in results], deltas, atol=1e-6)
    np.testing.assert_allclose([r.reward for r in results], 2.0 * deltas, atol=1e-6)
    np.testing.assert_allclose([r.value for r in results], accumulate_value(deltas)[1:], atol=1e-6)
    assert all(call[0] == 0.0 and call[3] == GOAL for call in scorer.calls)  # first frame, goal
    assert stream.stats()["value"] == pytest.approx(results[-1].value, abs=1e-4)

    # a new episode forgets the first frame, the previous frame and the value
    stream.new_episode()
    assert stream.stats()["value"] == 0.0
    results = run_episode(stream, [0.6, 0.8], start_ns=10 * S)
    assert scorer.calls[-1][:3] == pytest.approx((0.6, 0.6, 0.8), abs=0.003)  # first = previous = 0.6
    assert results[0].value == pytest.approx(results[0].progress_delta) and results[0].episode == 1

    # a new goal starts a new episode too; the same goal again does not
    assert stream.set_goal("push the cube") and not stream.set_goal("push the cube")
    assert feed(stream, 0.3, 20 * S) == "first"
    run_episode(stream, [0.5], start_ns=21 * S)
    assert scorer.calls[-1][:3] == pytest.approx((0.3, 0.3, 0.5), abs=0.003)
    assert scorer.calls[-1][3] == "push the cube"
    with pytest.raises(ValueError, match="no words"):
        stream.set_goal("  ")
    assert stream.stats()["frames_first"] == 3

    # a stamped start: a late frame of the old episode is still scored in it, the new episode
    # begins with the first frame stamped at or after the start
    assert stream.new_episode(30 * S) is None
    assert feed(stream, 0.7, 29 * S) == "queued"
    stream.run_once()
    assert scorer.calls[-1][:3] == pytest.approx((0.3, 0.5, 0.7), abs=0.003)
    assert feed(stream, 0.1, 30 * S) == "first"
    assert stream.stats()["frames_first"] == 4
    # the same start announced again once the reset is done: the episode already began there
    assert stream.new_episode(30 * S) is None
    assert feed(stream, 0.2, 31 * S) == "queued"
    stream.run_once()
    assert scorer.calls[-1][:3] == pytest.approx((0.1, 0.1, 0.2), abs=0.003)


def test_frame_skip_scores_every_nth_against_the_last_scored():
    scorer = FakeScorer()
    stream = RewardStream(config(frame_skip=3), backend=backend(scorer))
    levels = np.round(np.linspace(0, 0.9, 10) * 255) / 255
    results = run_episode(stream, levels)
    assert len(results) == 3  # frames 3, 6 and 9 after the first
    assert [(round(c[1] * 255), round(c[2] * 255)) for c in scorer.calls] == \
        [(round(levels[a] * 255), round(levels[b] * 255)) for a, b in ((0, 3), (3, 6), (6, 9))]
    assert stream.stats()["frames_skipped_frame_skip"] == 6
    np.testing.assert_allclose(results[-1].value, accumulate_value([r.progress_delta for r in results])[-1])


def test_busy_worker_skips_older_frames_and_scores_the_newest():
    scorer = FakeScorer()
    stream = RewardStream(config(), backend=backend(scorer))
    assert feed(stream, 0.0, S) == "first"
    assert feed(stream, 0.2, 2 * S) == "queued"
    assert feed(stream, 0.4, 3 * S) == "replaced"  # the worker never took the 0.2 frame
    [result] = stream.run_once(0)
    assert result.stamp_ns == 3 * S and stream.run_once(0) == []
    assert stream.stats()["frames_skipped"] == 1 and stream.stats()["frames_scored"] == 1
    feed(stream, 0.6, 4 * S)
    stream.run_once(0)
    assert scorer.calls[-1][1] == pytest.approx(0.4, abs=0.003)  # previous: the frame scored last


def test_frames_without_goal_are_not_scored():
    stream = RewardStream(config(goal=""), backend=backend())
    assert feed(stream, 0.1, S) == "no_goal" and feed(stream, 0.2, 2 * S) == "no_goal"
    assert stream.stats()["frames_without_goal"] == 2 and stream.run_once(0) == []
    stream.set_goal(GOAL)
    assert feed(stream, 0.3, 3 * S) == "first"
    # a goal-free backend (the success classifier) scores without one
    free = RewardStream(config(goal=""), backend=backend(needs_goal=False))
    assert feed(free, 0.1, S) == "first" and feed(free, 0.2, 2 * S) == "queued"
    # before the model is loaded nothing is scored either
    early = RewardStream(config())
    assert feed(early, 0.1, S) == "before_model" and early.stats()["frames_before_model"] == 1


def test_done_after_consecutive_frames_once_per_episode():
    stream = RewardStream(config(done_consecutive=2), backend=backend(done_threshold=0.5))
    results = run_episode(stream, [0.0, 0.6, 0.2, 0.6, 0.7, 0.8, 0.9])
    assert [r.done for r in results] == [False, False, False, True, False, False]
    assert stream.stats()["dones"] == 1
    stream.new_episode()
    results = run_episode(stream, [0.0, 0.9, 0.9], start_ns=10 * S)
    assert [r.done for r in results] == [False, True]
    # the node's done_threshold overrides the model's
    strict = RewardStream(config(done_threshold=0.95), backend=backend(done_threshold=0.5))
    assert not any(r.done for r in run_episode(strict, [0.0, 0.9, 0.9, 0.9]))
    assert strict.stats()["done_threshold"] == 0.95


def test_late_rewards_are_flagged_by_the_clock_given():
    now = [0]
    stream = RewardStream(config(max_latency_s=0.5), now_ns=lambda: now[0], backend=backend())
    feed(stream, 0.0, 10 * S)
    feed(stream, 0.5, 11 * S)
    now[0] = 11 * S + 400_000_000
    [on_time] = stream.run_once(0)
    feed(stream, 0.6, 12 * S)
    now[0] = 12 * S + 600_000_000
    [late] = stream.run_once(0)
    assert not on_time.late and on_time.latency_s == pytest.approx(0.4)
    assert late.late and late.latency_s == pytest.approx(0.6)
    stats = stream.stats()
    assert stats["rewards_late"] == 1 and stats["latency_ms_mean"] == pytest.approx(500.0)
    assert stats["latency_ms_p99"] == pytest.approx(598.0) and stats["score_ms_p99"] >= stats["score_ms_mean"] > 0


def test_scoring_errors_are_counted_not_raised():
    class Broken(FakeScorer):
        def score(self, *args):
            raise RuntimeError("out of memory")

    class Nan(FakeScorer):
        def score(self, *args):
            return np.array([np.nan], np.float32), np.array([0.5], np.float32)

    for scorer, message in ((Broken(), "out of memory"), (Nan(), "non-finite")):
        stream = RewardStream(config(), backend=backend(scorer))
        assert run_episode(stream, [0.1, 0.2]) == []
        assert stream.stats()["score_errors"] == 1 and message in stream.stats()["last_score_error"]


def test_pending_steps_hand_over_between_threads():
    slot = PendingSteps()  # capacity 1: only the newest
    assert slot.take(0) == []
    assert not slot.put(1) and slot.put(2) and slot.take(0) == [2]
    got = []
    taker = threading.Thread(target=lambda: got.append(slot.take(5)))
    taker.start()
    time.sleep(0.05)
    slot.put(3)
    taker.join(5)
    assert got == [[3]]
    slot.close()
    assert slot.take(5) == []  # closed: returns at once
    three = PendingSteps(3)
    assert [three.put(i) for i in range(5)] == [False, False, False, True, True]
    assert three.take(0) == [2, 3, 4] and three.take(0) == []
    with pytest.raises(ValueError, match="capacity"):
        PendingSteps(0)


def test_max_batch_scores_every_waiting_step_in_one_call_as_one_by_one_would():
    levels = [0.0, 0.2, 0.3, 0.5, 0.6, 0.8, 0.9]
    one_by_one = run_episode(RewardStream(config(done_consecutive=2), backend=backend(done_threshold=0.7)), levels)
    scorer = FakeScorer()
    stream = RewardStream(config(max_batch=4, done_consecutive=2), backend=backend(scorer, done_threshold=0.7))
    stamps = [S + i * S // 10 for i in range(len(levels))]
    assert [feed(stream, level, stamp) for level, stamp in zip(levels[:5], stamps)] == ["first"] + ["queued"] * 4
    batched = stream.run_once(0)
    assert [feed(stream, level, stamp) for level, stamp in zip(levels[5:], stamps[5:])] == ["queued"] * 2
    batched += stream.run_once(0)
    assert scorer.batches == [4, 2]
    # each step against the step before it, the first of a batch against the frame scored last
    assert [(round(c[1], 2), round(c[2], 2)) for c in scorer.calls] == list(zip(levels[:-1], levels[1:]))
    for got, want in zip(batched, one_by_one, strict=True):
        assert got.stamp_ns == want.stamp_ns and got.done == want.done and got.episode == want.episode
        assert (got.progress_delta, got.value) == pytest.approx((want.progress_delta, want.value), abs=1e-6)
    assert sum(r.done for r in batched) == 1 and stream.stats()["score_batch_mean"] == 3.0

    # more steps waiting than max_batch: the oldest are pushed out, the newest scored against the last scored
    later = [S * 2 + i * S // 10 for i in range(6)]
    assert [feed(stream, 0.1 * i, stamp) for i, stamp in enumerate(later)] == ["queued"] * 4 + ["replaced"] * 2
    assert [r.stamp_ns for r in stream.run_once(0)] == later[2:]
    assert scorer.calls[-4][1] == pytest.approx(0.9, abs=0.003) and stream.stats()["frames_skipped"] == 2

    # a batch never spans two episodes: the new episode's steps are scored against its own first frame
    feed(stream, 0.5, 3 * S)
    stream.new_episode()
    assert feed(stream, 0.1, 4 * S) == "first" and feed(stream, 0.4, 5 * S) == "queued"
    results = stream.run_once(0)
    assert [(r.stamp_ns, r.episode) for r in results] == [(3 * S, 0), (5 * S, 1)] and scorer.batches[-2:] == [1, 1]
    assert scorer.calls[-1][:3] == pytest.approx((0.1, 0.1, 0.4), abs=0.003)
    assert results[1].value == pytest.approx(results[1].progress_delta)


def test_a_failed_batch_counts_every_step_and_the_next_pairs_with_the_last_scored():
    class FailsOnce(FakeScorer):
        def score(self, first, previous, current, goal):
            if not self.batches:
                self.batches.append(0)
                raise RuntimeError("CUDA out of memory")
            return super().score(first, previous, current, goal)

    class Short(FakeScorer):
        def score(self, *args):
            delta, done = super().score(*args)
            return delta[:1], done[:1]

    scorer = FailsOnce()
    stream = RewardStream(config(max_batch=8), backend=backend(scorer))
    for i, level in enumerate([0.0, 0.2, 0.4, 0.6]):
        feed(stream, level, S + i)
    assert stream.run_once(0) == [] and stream.stats()["score_errors"] == 3
    feed(stream, 0.8, 2 * S)
    [result] = stream.run_once(0)
    assert scorer.calls[-1][:3] == pytest.approx((0.0, 0.0, 0.8), abs=0.003)  # nothing was scored before it
    assert result.value == pytest.approx(0.8, abs=0.003)
    short = RewardStream(config(max_batch=8), backend=backend(Short()))
    for i, level in enumerate([0.0, 0.2, 0.4]):
        feed(short, level, S + i)
    assert short.run_once(0) == [] and "1 deltas and 1 done readings for 2 steps" in short.stats()["last_score_error"]


def test_an_unreadable_row_is_an_error_and_the_next_is_scored_again_alone_against_the_last_read():
    class UnreadableAt(FakeScorer):
        """Reads every row but those whose current level is `bad` (as VLAC's scorer: UnreadableScores)."""

        def score(self, first, previous, current, goal):
            delta, done = super().score(first, previous, current, goal)
            bad = np.isclose(self.levels(current), 0.4, atol=0.003)
            if bad.any():
                delta[bad], done[bad] = np.nan, np.nan
                raise UnreadableScores("unreadable VLAC answers: pair 1: no number", delta, done)
            return delta, done

    scorer = UnreadableAt()
    stream = RewardStream(config(max_batch=8), backend=backend(scorer))
    for i, level in enumerate([0.0, 0.2, 0.4, 0.6, 0.8, 0.9]):
        feed(stream, level, S + i)
    results = stream.run_once(0)
    assert [r.stamp_ns for r in results] == [S + 1, S + 3, S + 4, S + 5] and scorer.batches == [5, 1]
    assert scorer.calls[-1][1:3] == pytest.approx((0.2, 0.6), abs=0.003)  # again, alone, against the last read
    assert stream.stats()["score_errors"] == 1 and "pair 1: no number" in stream.stats()["last_score_error"]
    # the chain as if the unread step had not been fed
    np.testing.assert_allclose([r.value for r in results], [0.2, 0.6, 0.8, 0.9], atol=0.003)
    assert stream.stats()["score_batch_mean"] == 2.0  # 4 steps read in 2 calls

    # the step scored again alone fails as a whole: it is lost too, and the one after it is scored again
    class UnreadableThenBroken(UnreadableAt):
        def score(self, first, previous, current, goal):
            if self.batches == [4]:
                self.batches.append(1)
                raise RuntimeError("CUDA error: an illegal memory access")
            return super().score(first, previous, current, goal)

    scorer = UnreadableThenBroken()
    stream = RewardStream(config(max_batch=8), backend=backend(scorer))
    for i, level in enumerate([0.0, 0.2, 0.4, 0.6, 0.8]):
        feed(stream, level, S + i)
    results = stream.run_once(0)
    assert [r.stamp_ns for r in results] == [S + 1, S + 4] and scorer.batches == [4, 1, 1]
    assert scorer.calls[-1][1:3] == pytest.approx((0.2, 0.8), abs=0.003)
    assert stream.stats()["score_errors"] == 2 and "illegal memory" in stream.stats()["last_score_error"]


def test_worker_thread_scores_and_reports_load_failures():
    published, errors = [], []
    stream = RewardStream(config())
    worker = ScoringWorker(stream, backend, published.append, errors.append, poll_s=0.01).start()
    deadline = time.monotonic() + 5
    while stream.backend is None and time.monotonic() < deadline:
        time.sleep(0.01)
    for i, level in enumerate([0.0, 0.3, 0.6]):
        feed(stream, level, S + i)
        deadline = time.monotonic() + 5
        while len(published) < i and time.monotonic() < deadline:
            time.sleep(0.01)
    worker.stop()
    assert not worker.thread.is_alive()
    assert [r.stamp_ns for r in published] == [S + 1, S + 2] and not errors

    def fail():
        raise BackendLoadError("cannot load the progress model from '/x': broken")

    failed = RewardStream(config())
    worker = ScoringWorker(failed, fail, published.append, errors.append).start()
    worker.thread.join(5)
    assert errors == ["cannot load the progress model from '/x': broken"] and "broken" in failed.load_error


# ---- backends ------------------------------------------------------------------------------

def _tiny_classifier():
    import torch

    from robot_rl.agents.encoders import EncoderConfig
    from robot_rl.rewards.success import SuccessClassifier, SuccessClassifierConfig

    torch.manual_seed(0)
    encoder = EncoderConfig(cameras=("front",), image_size=16, channels=4, num_layers=2, latent_dim=8)
    return SuccessClassifier(SuccessClassifierConfig(encoder=encoder, threshold=0.5)).eval()


def test_success_classifier_as_a_sparse_backend(tmp_path):
    classifier = _tiny_classifier()
    classifier.save(tmp_path / "clf")
    loaded = load_backend("success", str(tmp_path / "clf"), "cpu", ["front", "wrist"])
    assert loaded.cameras == ("front",) and loaded.image_size == 16 and not loaded.needs_goal
    assert loaded.done_threshold == 0.5 and isinstance(loaded.scorer, SuccessScorer)
    rng = np.random.default_rng(0)
    frames = {"front": rng.integers(0, 255, (6, 16, 16, 3), dtype=np.uint8)}
    probability = classifier.probability(frames)
    scorer = SuccessScorer(classifier, threshold=float(np.median(probability)))
    delta, done = scorer.score(frames, frames, frames, "ignored")
    np.testing.assert_allclose(done, probability, atol=1e-6)
    np.testing.assert_array_equal(delta, (probability >= scorer.threshold).astype(np.float32))
    assert set(delta.tolist()) == {0.0, 1.0}
    # one frame (H, W, 3) is a batch of one
    delta1, done1 = scorer.score({}, {}, {"front": frames["front"][0]}, "")
    assert delta1.shape == (1,) and done1[0] == pytest.approx(probability[0], abs=1e-6)
    with pytest.raises(ValueError, match="threshold"):
        SuccessScorer(classifier, threshold=1.0)
    # the stream refuses frames of another size for it
    stream = RewardStream(config(cameras=("front",), goal=""), backend=loaded)
    assert feed_image(stream, "front", image_msg(0.5, S, size=8)) == "rejected:size"
    assert feed_image(stream, "front", image_msg(0.5, S, size=16)) == "first"
    both = RewardStream(config(goal=""), backend=loaded)  # a camera the model does not read: any size
    assert feed_image(both, "wrist", image_msg(0.5, S, height=8, width=6)) == "waiting"
    assert feed_image(both, "front", image_msg(0.5, S, size=16)) == "first"
    feed_image(stream, "front", image_msg(0.5, 2 * S, size=16))
    [result] = stream.run_once(0)
    assert result.progress_delta in (0.0, 1.0) and 0 <= result.done_probability <= 1


def test_backend_loading_errors(tmp_path):
    with pytest.raises(ValueError, match="model_path is required"):
        load_backend("progress", "", "cpu")
    with pytest.raises(BackendLoadError, match=r"cannot load the progress model .*card\.json"):
        load_backend("progress", str(tmp_path), "cpu")  # exists, but holds no model
    _tiny_classifier().save(tmp_path / "clf")
    with pytest.raises(BackendLoadError, match=r"reads cameras \['front'\].*missing \['front'\]"):
        load_backend("success", str(tmp_path / "clf"), "cpu", ["wrist"])
    # vlac: loaded from a real (tiny) InternVL checkpoint in tests/test_vlac_backend.py
    assert set(BACKENDS) >= {"progress", "success", "vlac"}


# ---- the node as a separate process --------------------------------------------------------

@pytest.fixture(scope="module")
def progress_setup(tmp_path_factory):
    """A small progress model trained on 4 scripted pick-cube demonstrations, and a held-out one."""
    from robot_rl.data.scripted import record_scripted_episodes
    from robot_rl.robots.arm.sim import scripted_lift_action
    from robot_rl.rewards.progress import ProgressModelConfig, progress_episodes, train_progress_model

    root = tmp_path_factory.mktemp("reward_node")
    for split, count, seed in (("train", 4, 0), ("eval", 1, 1)):
        record_scripted_episodes(str(root / f"{split}.zarr"), "robot_rl/ArmPickCube-v0", scripted_lift_action, count,
                                 goal=GOAL, seed=seed, env_kwargs={"image_size": 64, "randomization_split": split})
    model, _ = train_progress_model(progress_episodes(root / "train.zarr"), ProgressModelConfig(steps=200, seed=0))
    model.save(root / "model")
    return root / "model", progress_episodes(root / "eval.zarr")[0]


def _node_args(*params: str) -> list[str]:
    args = [sys.executable, "-m", "robot_rl.nodes.reward", "--ros-args"]
    for p in params:
        args += ["-p", p]
    return args


def test_bad_parameters_exit_with_a_clear_message(tmp_path):
    pytest.importorskip("rclpy")
    from robot_rl.ros.graph import loopback_environment

    for params, expected in (([], "robot-rl reward train --demos <dataset> --out <dir>"),
                             ([f"model_path:={tmp_path}/none"], f"{tmp_path}/none"),
                             ([f"model_path:={tmp_path}", "frame_skip:=0"], "frame_skip"),
                             ([f"model_path:={tmp_path}", "done_threshold:=1.0"], "done_threshold"),
                             ([f"model_path:={tmp_path}", "cameras:=[front, front]"], "twice")):
        result = subprocess.run(_node_args(*params), env=loopback_environment(232), capture_output=True, text=True,
                                timeout=60, stdin=subprocess.DEVNULL)
        assert result.returncode == 2, result.stderr[-2000:]
        assert expected in result.stderr


def test_reward_node_scores_a_demonstration(progress_setup, tmp_path):
    pytest.importorskip("rclpy")
    from geometry_msgs.msg import Vector3Stamped
    from sensor_msgs.msg import Image
    from std_msgs.msg import Header, String

    from robot_rl.ros import qos
    from robot_rl.ros.messages import image_to_msg, ns_to_stamp, stamp_to_ns
    from robot_rl.ros.probe import RosProbe, start_node, stop_node

    model_path, episode = progress_setup
    log = tmp_path / "reward.log"
    proc, domain_id = start_node("robot_rl.nodes.reward", log, f"model_path:={model_path}", "device:=cpu",
                                 "torch_threads:=1", "diagnostics_period_s:=0.2", "max_latency_s:=0.5")
    probe = RosProbe(domain_id, "reward_test_probe")
    probe.watched = "reward"
    node = probe.node
    rewards: list[Vector3Stamped] = []
    dones: list[bool] = []
    node.create_subscription(Vector3Stamped, "reward", rewards.append, qos.EVENTS)
    node.create_subscription(Header, "reward/done", lambda m: dones.append(m.frame_id), qos.EVENTS)
    images = {c: node.create_publisher(Image, f"{c}/color/image_raw", qos.SENSOR) for c in ("front", "wrist")}
    goal_pub = node.create_publisher(String, "task/goal", qos.LATCHED)
    event_pub = node.create_publisher(Header, "episode/event", qos.EVENTS)

    def publish(t: int, stamp_ns: int | None = None) -> int:
        stamp_ns = node.get_clock().now().nanoseconds if stamp_ns is None else stamp_ns
        for camera, pub in images.items():
            pub.publish(image_to_msg(episode.frames[camera][t], ns_to_stamp(stamp_ns), camera))
        return stamp_ns

    def alive():
        assert proc.poll() is None, log.read_text()[-3000:]
        return True

    try:
        probe.wait_for(lambda: alive() and probe.diag.get("model_loaded") == "True", 40, "the model loaded")
        probe.wait_for(lambda: all(p.get_subscription_count() for p in images.values()), 10, "the image subscriptions")
        # no goal yet: frames are counted, not scored, and a WARN says so
        publish(0)
        probe.wait_for(lambda: probe.value("frames_without_goal") >= 1, 5, "a frame counted without a goal")
        assert "no goal" in probe.diag["_message"] and rewards == []

        goal_pub.publish(String(data=GOAL))
        probe.wait_for(lambda: probe.diag.get("goal") == GOAL, 5, "the goal")
        event_pub.publish(Header(frame_id="start"))  # stamp 0: the next frame starts the episode
        probe.wait_for(lambda: probe.value("event_episode_event_start") == 1, 5, "the episode start")
        stamps = []
        for t in range(len(episode.progress_labels)):
            stamps.append(publish(t))
            # one frame at a time: the worker is never busy, so nothing is skipped
            probe.wait_for(lambda: len(rewards) >= t, 5, f"the reward of frame {t}")
        assert [stamp_to_ns(r.header.stamp) for r in rewards] == stamps[1:]  # the first frame is the reference
        values = np.array([r.vector.y for r in rewards])
        assert values[-1] >= 0.7 and values[-1] - values[0] >= 0.5, values  # rises along a successful demo
        assert np.mean(np.diff(np.concatenate([[0.0], values])) >= -0.05) >= 0.8, values
        np.testing.assert_allclose(values, accumulate_value([r.vector.x for r in rewards])[1:], atol=1e-5)
        assert all(r.header.frame_id == "" for r in rewards)
        assert 0.0 <= min(r.vector.z for r in rewards) and max(r.vector.z for r in rewards) >= 0.5
        probe.wait_for(lambda: dones == ["done"], 5, "reward/done")

        # malformed images are rejected with a reason; the node keeps scoring
        bad = image_to_msg(episode.frames["front"][0], ns_to_stamp(node.get_clock().now().nanoseconds), "front")
        bad.encoding = "bgr8"
        images["front"].publish(bad)
        short = image_to_msg(episode.frames["wrist"][0], ns_to_stamp(node.get_clock().now().nanoseconds), "wrist")
        short.height = 63
        images["wrist"].publish(short)
        probe.wait_for(lambda: probe.value("frames_rejected_encoding") == 1 and
                       probe.value("frames_rejected_layout") == 1, 5, "the rejections")
        assert alive()
        # a frame published well after its stamp is flagged late
        time.sleep(1.0)
        late_stamp = publish(len(stamps) - 1, node.get_clock().now().nanoseconds - 800_000_000)
        probe.wait_for(lambda: stamp_to_ns(rewards[-1].header.stamp) == late_stamp, 5, "the late reward")
        assert rewards[-1].header.frame_id == "late"
        probe.wait_for(lambda: probe.value("rewards_late") == 1, 5, "the late count")
        diag = probe.diag
        for key in ("backend", "frames_received", "frames_paired", "frames_scored", "frames_skipped",
                    "frames_rejected", "rewards_late", "latency_ms_mean", "latency_ms_p99", "score_ms_mean",
                    "score_ms_p99", "value"):
            assert key in diag, key
        assert diag["backend"] == "progress" and float(diag["frames_scored"]) == len(stamps)
        assert float(diag["latency_ms_p99"]) > 0 and 0 < float(diag["value"]) <= 1
        assert len(dones) == 1  # once per episode
    finally:
        probe.close()
        stop_node(proc, log)


def test_model_that_fails_to_load_ends_the_node_with_an_error(tmp_path):
    pytest.importorskip("rclpy")
    from robot_rl.ros.probe import RosProbe, start_node

    (tmp_path / "broken").mkdir()
    log = tmp_path / "reward.log"
    proc, domain_id = start_node("robot_rl.nodes.reward", log, f"model_path:={tmp_path / 'broken'}",
                                 "device:=cpu", "diagnostics_period_s:=0.2")
    probe = RosProbe(domain_id, "reward_fail_probe")
    probe.watched = "reward"
    try:
        probe.wait_for(lambda: "model failed to load" in probe.diag.get("_message", ""), 40, "the ERROR diagnostic")
        assert "card.json" in probe.diag["_message"] and probe.diag["model_loaded"] == "False"
        code = proc.wait(timeout=20)
    finally:
        probe.close()
        if proc.poll() is None:
            proc.kill()
    output = log.read_text()
    assert code == 1, output[-3000:]
    assert "[robot_rl] reward: cannot load the progress model" in output and "card.json" in output
