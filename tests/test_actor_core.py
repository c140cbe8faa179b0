"""Actor logic without ROS: episodes, transitions, batching, policy swaps, synchronisation."""

import threading

import numpy as np
import pytest
import torch

from robot_rl.agents.policy import Policy, PolicySpec
from robot_rl.agents.sac import SACConfig
from robot_rl.ros.sync import StampSynchronizer
from robot_rl.tasks import TaskSpec
from robot_rl.training import batch_packer
from robot_rl.training.actor import ActorConfig, ActorCore
from robot_rl.training.learner import LearnerConfig, LearnerCore
from robot_rl.transport import codec
from robot_rl.transport.outbox import Outbox


def _task(horizon=3, terminate=False):
    return TaskSpec(name="toy", obs_dim=2, action_dim=1, max_episode_steps=horizon, control_hz=10.0,
                    observation=lambda s: np.array([s["x"], 1.0], np.float32),
                    reward=lambda s: float(s["x"]), success=lambda s: s["x"] >= 2,
                    terminate_on_success=terminate, expert=None, env_id="none")


def _run_episode(core, xs):
    core.start_episode()
    results = [core.step({"x": x}) for x in xs]
    return results


def test_episode_truncates_at_horizon_and_records_transitions(tmp_path):
    core = ActorCore(_task(horizon=3), ActorConfig(batch_transitions=100, total_steps=0), Outbox(tmp_path))
    results = _run_episode(core, [0, 1, 2, 3])
    assert [r.action is None for r in results] == [False, False, False, True]
    episode = results[-1].episode
    assert episode.steps == 3 and episode.ret == 6.0 and episode.success  # success judged on the last state
    (seq, data), = core.outbox.due(now=0.0)
    batch = codec.decode(data).arrays
    np.testing.assert_array_equal(batch["reward"], [1, 2, 3])
    np.testing.assert_array_equal(batch["obs"][:, 0], [0, 1, 2])
    np.testing.assert_array_equal(batch["next_obs"][:, 0], [1, 2, 3])
    np.testing.assert_array_equal(batch["truncated"], [False, False, True])
    assert not batch["terminated"].any()


def test_termination_on_success(tmp_path):
    core = ActorCore(_task(horizon=10, terminate=True), ActorConfig(total_steps=0), Outbox(tmp_path))
    results = _run_episode(core, [0, 2])
    assert results[-1].action is None and results[-1].episode.success
    batch = codec.decode(core.outbox.due(now=0.0)[0][1]).arrays
    assert batch["terminated"].tolist() == [True] and batch["truncated"].tolist() == [False]


def test_batches_flush_by_size_and_sequence_numbers_increase(tmp_path):
    core = ActorCore(_task(horizon=100), ActorConfig(batch_transitions=2, total_steps=0), Outbox(tmp_path))
    _run_episode(core, [0, 0, 0, 0, 0])
    seqs = [codec.decode(d).meta["seq"] for _, d in core.outbox.due(now=0.0)]
    assert seqs == [0, 1]


def test_human_action_overrides_policy_and_is_flagged(tmp_path):
    core = ActorCore(_task(horizon=2), ActorConfig(total_steps=0), Outbox(tmp_path))
    core.start_episode()
    result = core.step({"x": 0}, human_action=np.array([0.7], np.float32))
    assert result.action.tolist() == pytest.approx([0.7])
    core.step({"x": 1})
    core.step({"x": 1})
    batch = codec.decode(core.outbox.due(now=0.0)[0][1]).arrays
    assert batch["intervention"].tolist() == [True, False]
    with pytest.raises(ValueError):
        core.start_episode()
        core.step({"x": 0}, human_action=np.array([np.nan], np.float32))


@pytest.mark.parametrize(("label", "terminate", "reward", "terminated", "success"), [
    ("success", True, 1.0, True, True),     # sparse task: HIL-SERL's success key, reward 1, terminal
    ("success", False, 0.0, False, True),   # dense task: the episode is cut there, labelled a success
    ("failure", True, 0.0, False, False),   # a failure is no terminal state: truncated
    ("reset", True, 0.0, False, False),
])
def test_person_labels_end_the_episode(tmp_path, label, terminate, reward, terminated, success):
    core = ActorCore(_task(horizon=10, terminate=terminate), ActorConfig(total_steps=0), Outbox(tmp_path))
    core.start_episode()
    core.step({"x": 0})
    core.label(label)
    result = core.step({"x": 0})
    assert result.action is None and result.episode.success is success and result.episode.steps == 1
    batch = codec.decode(core.outbox.due(now=0.0)[0][1]).arrays
    assert batch["reward"].tolist() == [reward]
    assert batch["terminated"].tolist() == [terminated] and batch["truncated"].tolist() == [not terminated]
    core.start_episode()  # a label never leaks into the next episode
    core.step({"x": 0})
    assert core.step({"x": 0}).action is not None
    with pytest.raises(ValueError, match="label"):
        core.label("takeover")


def test_evaluation_after_training_is_deterministic_and_not_recorded(tmp_path):
    core = ActorCore(_task(horizon=2), ActorConfig(total_steps=2, eval_episodes=2), Outbox(tmp_path))
    _run_episode(core, [0, 1, 2])
    assert core.evaluating and not core.finished
    sent = core.transitions_sent
    _run_episode(core, [0, 1, 2])
    _run_episode(core, [0, 1, 0])
    assert core.finished and core.transitions_sent == sent
    assert core.eval_summary()["success_rate"] == 0.5


def test_the_budgets_last_step_truncates_a_long_episode_so_the_run_sends_exactly_total_steps(tmp_path):
    core = ActorCore(_task(horizon=1000), ActorConfig(total_steps=3, eval_episodes=0, batch_transitions=100),
                     Outbox(tmp_path))
    results = _run_episode(core, [0, 1, 2, 3])
    assert [r.action is None for r in results] == [False, False, False, True]  # not the 1,000-step horizon
    assert core.train_steps == core.transitions_sent == 3 and core.finished
    batch = codec.decode(core.outbox.due(now=0.0)[0][1]).arrays
    assert batch["truncated"].tolist() == [False, False, True] and not batch["terminated"].any()


def test_a_restart_resumes_with_as_many_steps_counted_as_transitions_sent(tmp_path):
    config = ActorConfig(total_steps=0, batch_transitions=2)
    core = ActorCore(_task(horizon=100), config, Outbox(tmp_path / "outbox"), progress_path=tmp_path / "progress.json")
    _run_episode(core, [0, 0, 0, 0])  # 3 steps: the batch of 2 flushed from inside the second step
    restarted = ActorCore(_task(horizon=100), config, Outbox(tmp_path / "outbox"),
                          progress_path=tmp_path / "progress.json")
    assert restarted.transitions_sent == 2 and restarted.train_steps == 2  # the third was never sent: redone


def _spilling_core(tmp_path):
    """An actor as the nodes build it: every batch on disk, progress beside it."""
    return ActorCore(_task(horizon=100), ActorConfig(total_steps=0, batch_transitions=2),
                     Outbox(tmp_path / "outbox", max_memory_bytes=0), progress_path=tmp_path / "progress.json")


def test_a_kill_between_the_outbox_and_the_progress_file_neither_redoes_nor_loses_a_step(tmp_path, monkeypatch):
    # The batch reached the outbox (a restart sends it) but its progress was never written: the
    # restart must count those steps as done, or it takes them again (a car run: 509 stored for 500).
    core = _spilling_core(tmp_path)
    _run_episode(core, [0, 0, 0])  # the first batch of 2, progress written

    def kill(*_):
        raise RuntimeError("SIGKILL")
    monkeypatch.setattr(batch_packer, "save_progress", kill)
    core.step({"x": 0})
    with pytest.raises(RuntimeError, match="SIGKILL"):
        core.step({"x": 0})  # the second batch of 2 goes into the outbox, then the kill
    monkeypatch.undo()
    restarted = _spilling_core(tmp_path)
    assert (restarted.transitions_sent, restarted.train_steps, restarted.payloads_sent) == (4, 4, 2)
    assert sum(len(codec.decode(d).arrays["reward"]) for _, d in restarted.outbox.due(now=0.0)) == 4
    restarted.outbox.ack(1)  # the newest acknowledged, the progress file behind: the newer of the two wins
    assert _spilling_core(tmp_path).transitions_sent == 2


def test_a_corrupt_newest_outbox_payload_is_refused_naming_the_outbox(tmp_path):
    _run_episode(_spilling_core(tmp_path), [0, 0, 0])
    (path,) = (tmp_path / "outbox").glob("*.payload")
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(ValueError, match=r"outbox.*newest payload .*000000000000\.payload is unreadable.*aside"):
        _spilling_core(tmp_path)


def test_policy_swap_versions_and_learner_sync(tmp_path):
    learner = LearnerCore(LearnerConfig(obs_dim=2, action_dim=1, warmup_transitions=1), tmp_path / "learner")
    config = ActorConfig(total_steps=0, sync_updates_per_step=1.0, sync_slack_steps=2)
    core = ActorCore(_task(horizon=100), config, Outbox(tmp_path / "outbox"))
    assert core.load_policy(codec.decode(learner.policy_payload()))
    old = codec.decode(learner.policy_payload())
    assert core.load_policy(codec.decode(learner.policy_payload())) and not core.load_policy(old)
    assert core.policy_version == 3
    _run_episode(core, [0, 0, 0])
    assert not core.waiting_for_learner()  # 2 steps taken, slack 2
    core.step({"x": 0})
    assert core.waiting_for_learner()  # 3 steps, learner has 0 updates
    wrong = Policy(PolicySpec(obs_dim=5, action_dim=1, hidden_dims=(4,)))
    payload = codec.encode("policy", codec.state_dict_to_arrays(wrong.network.state_dict()),
                           {"version": 99, "spec": wrong.spec.to_json()})
    with pytest.raises(ValueError, match="does not fit"):
        core.load_policy(codec.decode(payload))


def test_the_learner_trains_up_to_its_cap_per_transition_and_reports_the_ratio_it_achieved(tmp_path):
    learner = LearnerCore(LearnerConfig(obs_dim=2, action_dim=1, warmup_transitions=4, max_update_ratio=3.0,
                                        sac=SACConfig(hidden_dims=(8,), batch_size=4)), tmp_path / "learner")
    core = ActorCore(_task(horizon=5), ActorConfig(total_steps=0, batch_transitions=5), Outbox(tmp_path / "outbox"))
    _run_episode(core, [0, 0, 1, 1, 1, 2])
    core.flush()
    assert learner.updates_per_transition() == 0.0  # nothing received: no ratio, not a division by zero
    assert sum(learner.ingest(data).transitions for _, data in core.outbox.due(now=0.0)) == 5
    while learner.ready():
        learner.train_step()
    assert learner.agent.num_updates == 15 and learner.summary()["updates_per_transition"] == 3.0


def test_a_background_packer_takes_batches_in_the_step_and_packs_them_as_the_inline_one_does(tmp_path):
    def run(name, background):
        core = ActorCore(_task(horizon=4), ActorConfig(total_steps=0, batch_transitions=3),
                         Outbox(tmp_path / name, max_memory_bytes=0), progress_path=tmp_path / f"{name}.json",
                         pack_in_background=background)
        for _ in range(3):
            _run_episode(core, [0, 1, 2, 3, 4])  # 4 steps: a full batch of 3 inside, the rest at the episode end
            if background:  # taken in the step, packed only once its owner says the command is out
                assert len(core.outbox) < core.unacknowledged == core.payloads_sent
                core.flush_if_due()
        assert core.transitions_sent == 12 and core.payloads_sent == 6  # counted when taken, before packing
        assert core.close() and core.unacknowledged == 6
        return [codec.decode(d) for _, d in core.outbox.due(now=0.0)], (tmp_path / f"{name}.json").read_text()

    (inline, inline_progress), (background, background_progress) = run("inline", False), run("background", True)
    assert [p.meta["seq"] for p in background] == list(range(6)) and background_progress == inline_progress
    for a, b in zip(inline, background):
        assert a.meta["progress"] == b.meta["progress"] and a.arrays.keys() == b.arrays.keys()
        for name in a.arrays:
            np.testing.assert_array_equal(a.arrays[name], b.arrays[name])


def test_the_packer_works_off_the_callers_thread_in_order_and_retries_a_failed_batch_before_later_ones(monkeypatch):
    monkeypatch.setattr(batch_packer, "RETRY_S", 0.01)
    release, packed, threads = threading.Event(), [], set()
    failures = iter([OSError("No space left on device")])

    def pack(job):
        threads.add(threading.current_thread().name)
        release.wait(5)
        if job == 1 and (failure := next(failures, None)) is not None:
            raise failure
        packed.append(job)

    packer = batch_packer.BatchPacker(pack, name="packer-under-test")
    sent = []
    packer.on_packed = lambda: sent.append(len(packed))
    for job in range(3):
        packer.submit(job)  # returns at once: the caller (a control loop) never waits for a pack
    assert packer.in_flight == 3 and not packer.wait(0.05) and packed == []
    release.set()
    assert packer.wait(5) and packer.close()
    assert packed == [0, 1, 2] and sent == [1, 2, 3] and threads == {"packer-under-test"}
    assert packer.failures == 1 and packer.error is None  # the failed batch went in on its second try


def test_an_outbox_persists_a_sequence_number_once_its_payload_is_in_and_forgets_one_never_put(tmp_path):
    outbox = Outbox(tmp_path, max_memory_bytes=0)
    assert [outbox.allocate_seq() for _ in range(3)] == [0, 1, 2]
    outbox.put(1, b"x" * 10)
    outbox.put(1, b"y" * 10)  # packed again after a failed try: one payload, counted once
    assert len(outbox) == 1 and outbox.memory_bytes == 0 and outbox.newest() == (1, b"y" * 10)
    outbox.ack(1)
    assert list(tmp_path.glob("*.payload")) == [] and Outbox(tmp_path).allocate_seq() == 2  # 2 never went out


def test_an_actor_that_waits_for_the_learner_sends_its_part_batch_first(tmp_path):
    # Held back, these could be the transitions the learner's warm-up still needs: both would wait forever.
    config = ActorConfig(total_steps=0, batch_transitions=50, sync_updates_per_step=1.0, sync_slack_steps=3)
    core = ActorCore(_task(horizon=100), config, Outbox(tmp_path / "outbox"))
    _run_episode(core, [0, 0, 0, 0])  # 4 steps into an episode of 100: 3 transitions, a part batch
    assert core.transitions_sent == 0
    assert not core.waiting_for_learner() and core.transitions_sent == 0  # within the slack: keeps batching
    core.step({"x": 0})
    assert core.waiting_for_learner() and core.transitions_sent == 4
    (_, data), = core.outbox.due(now=0.0)
    assert len(codec.decode(data).arrays["reward"]) == 4
    assert core.waiting_for_learner() and core.payloads_sent == 1  # waiting on: nothing more to send


def test_a_policy_prepared_aside_is_adopted_only_if_still_newest(tmp_path):
    """The node builds weights on its loader thread while the robot acts; the swap re-checks, so a
    slower older payload never replaces a newer policy and bad tensors are a ValueError (counted and
    logged by the node), not an exception that ends its loader thread."""
    learner = LearnerCore(LearnerConfig(obs_dim=2, action_dim=1, warmup_transitions=1), tmp_path / "learner")
    core = ActorCore(_task(horizon=100), ActorConfig(total_steps=0), Outbox(tmp_path / "outbox"))
    older = core.prepare_policy(codec.decode(learner.policy_payload()))
    newer = core.prepare_policy(codec.decode(learner.policy_payload()))
    assert core.policy is None  # preparing touches nothing
    assert core.adopt_policy(newer) and not core.adopt_policy(older)
    assert core.policy is newer.policy and core.policy_version == 2
    assert core.prepare_policy(codec.decode(learner.policy_payload(), key=None)) is not None
    arrays = codec.state_dict_to_arrays(core.policy.network.state_dict())
    first = next(iter(arrays))
    arrays[first] = np.zeros((3, 3), np.float32)  # the right name, the wrong shape
    bad = codec.encode("policy", arrays, {"version": 10, "spec": core.policy.spec.to_json()})
    with pytest.raises(ValueError, match="do not match the spec"):
        core.prepare_policy(codec.decode(bad))
    assert core.policy_version == 2


def test_stamp_synchronizer_pairs_by_stamp_and_counts_drops():
    sync = StampSynchronizer(["a", "b"], slop_ns=5)
    assert sync.add("a", 100, "a100") is None
    assert sync.add("a", 200, "a200") is None
    stamp, msgs = sync.add("b", 203, "b203")
    assert stamp == 203 and msgs == {"b": "b203", "a": "a200"}
    assert sync.dropped == 1  # the set at 100 never completed
    assert sync.add("b", 203, "again") is None and sync.dropped == 1  # a repeat is not a loss
    assert sync.add("a", 150, "late") is None and sync.dropped == 2


def test_recording_session_keeps_discards_and_commits_on_the_next_start(tmp_path):
    from robot_rl.data.episodes import EpisodeDataset, EpisodeSchema, EpisodeWriter

    task = TaskSpec(name="toy_arm", obs_dim=2, action_dim=2, max_episode_steps=3, control_hz=10.0,
                    observation=lambda s: np.array([s["x"], 1.0], np.float32), reward=lambda s: 0.0,
                    success=lambda s: False, terminate_on_success=True, expert=None, env_id="none")
    path = tmp_path / "rec.zarr"
    writer = EpisodeWriter(path, EpisodeSchema({}, 2, 2), {"task": "toy_arm"})
    core = ActorCore(task, ActorConfig(record_only=True, record_episodes=2, total_steps=0), Outbox(tmp_path / "o"),
                     recorder=writer)
    person = np.array([0.5, 1.0], np.float32)

    core.start_episode()  # the person drives, then holds still, says success, then throws it away
    assert core.step({"x": 0}, person).action.tolist() == [0.5, 1.0]
    assert core.step({"x": 1}).action.tolist() == [0.0, 1.0]  # nobody drives: hold, gripper as it was
    core.label("success")
    assert core.step({"x": 2}).action is None
    core.label("rerecord")  # during the reset: the finished episode is dropped
    core.start_episode()  # kept: a failure
    core.step({"x": 0}, person)
    core.step({"x": 5})
    core.label("failure")
    assert core.step({"x": 6}).action is None
    assert len(EpisodeDataset(path)) == 0  # held for review until the next episode starts
    core.start_episode()  # discarded while in progress
    assert len(EpisodeDataset(path)) == 1
    core.step({"x": 0}, person)
    core.label("rerecord")
    assert core.step({"x": 9}).action is None
    core.start_episode()  # kept at the horizon: the last one, held for review like the others
    for x in range(4):
        core.step({"x": x}, person if x == 0 else None)
    assert core.reviewing == "last" and not core.finished and len(EpisodeDataset(path)) == 1
    core.commit_recording()  # nobody threw it away: kept, and the session is over
    assert core.finished and core.episodes_recorded == 2 and core.episodes_discarded == 2
    assert core.record_summary()["person_steps"] == 2 and core.record_summary()["takeovers"] == 2
    with pytest.raises(RuntimeError, match="finished"):
        core.start_episode()
    data = EpisodeDataset(path)
    assert len(data) == 2 and data.num_steps == 5
    first = data.episode(0)
    assert first["state"][:, 0].tolist() == [0, 5, 6]
    assert first["intervention"].tolist() == [True, False]
    assert first["success_label"].tolist() == [-1, 0] and first["truncated"].tolist() == [False, True]
    second = data.episode(1)
    assert second["truncated"].tolist() == [False, False, True]
    assert second["intervention"].tolist() == [True, False, False]
    assert core.outbox.due(now=0.0) == []  # nothing for a learner
    with pytest.raises(ValueError, match="recorder"):
        ActorCore(task, ActorConfig(record_only=True), Outbox(tmp_path / "p"))


@pytest.mark.parametrize("keep_idle", [False, True])
def test_an_episode_nobody_drove_is_discarded_with_its_reason_unless_kept(tmp_path, keep_idle):
    from robot_rl.data.episodes import EpisodeDataset, EpisodeSchema, EpisodeWriter

    task = TaskSpec(name="toy_arm", obs_dim=2, action_dim=2, max_episode_steps=3, control_hz=10.0,
                    observation=lambda s: np.array([s["x"], 1.0], np.float32), reward=lambda s: 0.0,
                    success=lambda s: False, terminate_on_success=True, expert=None, env_id="none")
    path = tmp_path / "rec.zarr"
    core = ActorCore(task, ActorConfig(record_only=True, record_episodes=1, total_steps=0, keep_idle=keep_idle),
                     Outbox(tmp_path / "o"), recorder=EpisodeWriter(path, EpisodeSchema({}, 2, 2), {"task": "toy_arm"}))
    core.start_episode()  # the robot holds still to the horizon: nobody touched the device
    for x in range(4):
        result = core.step({"x": x})
    assert result.action is None
    if keep_idle:  # asked for: kept like any other episode
        core.commit_recording()
        assert core.finished and core.episodes_recorded == 1 and core.last_discard is None
        assert len(EpisodeDataset(path)) == 1
        return
    assert not core.finished and core.episodes_recorded == 0 and len(EpisodeDataset(path)) == 0
    assert core.episodes_discarded == core.episodes_idle == 1
    index, reason = core.last_discard
    assert index == 0 and "nobody drove it (3 steps" in reason and "--keep-idle" in reason
    assert core.record_summary()["episodes_discarded_idle"] == 1
    core.start_episode()  # the next one a person drives is kept
    for x in range(4):
        core.step({"x": x}, np.array([0.5, 1.0], np.float32) if x == 1 else None)
    core.commit_recording()
    assert core.finished and core.episodes_recorded == 1 and len(EpisodeDataset(path)) == 1


def test_a_label_the_task_contradicts_is_stored_with_the_check_and_the_last_episode_can_be_recorded_again(tmp_path):
    """A person's `s` with the cube on the table: stored as given, the task's own check (False) beside it, and
    said; after the last episode the person may still throw it away and record it again."""
    from robot_rl.data.episodes import EpisodeDataset, EpisodeSchema, EpisodeWriter

    task = TaskSpec(name="toy_arm", obs_dim=2, action_dim=2, max_episode_steps=10, control_hz=10.0,
                    observation=lambda s: np.array([s["x"], 1.0], np.float32), reward=lambda s: 0.0,
                    success=lambda s: s["x"] >= 2, terminate_on_success=False, expert=None, env_id="none")
    path = tmp_path / "rec.zarr"
    core = ActorCore(task, ActorConfig(record_only=True, record_episodes=2, total_steps=0), Outbox(tmp_path / "o"),
                     recorder=EpisodeWriter(path, EpisodeSchema({}, 2, 2), {"task": "toy_arm"}))
    person = np.array([0.5, 1.0], np.float32)

    def episode(xs, label):
        core.start_episode()
        for x in xs:
            core.step({"x": x}, person)
        core.label(label)
        return core.step({"x": xs[-1]})

    assert episode([0, 1], "success").episode.success  # wrong: the task's check says the cube is not up
    assert core.label_disagreement == (0, "success")
    assert episode([0, 3], "success").episode.success_check  # right: nothing to say
    assert core.label_disagreement == (0, "success") and core.reviewing == "last"
    core.label("rerecord")  # the last one, during its review: recorded again
    assert not core.reviewing and core.last_discard == (1, "re-recorded") and not core.finished
    result = episode([0, 1, 2], "failure")  # wrong the other way
    assert core.label_disagreement == (2, "failure") and result.episode.success_check and not result.episode.success
    core.commit_recording()
    assert core.finished
    data = EpisodeDataset(path)
    assert len(data) == 2 and data.success_checks.tolist() == [0, 1]
    assert [data.episode(i)["success_label"][-1] for i in range(2)] == [1, 0]  # the labels, as given
    assert data.episode(1)["state"][:, 0].tolist() == [0, 1, 2, 2]  # the episode recorded again, not the one before


# ---- learned rewards (the reward node) -----------------------------------------------------------

def _learned_core(tmp_path, **overrides):
    config = ActorConfig(batch_transitions=100, total_steps=0, learned_reward=True, **overrides)
    return ActorCore(_task(horizon=4, terminate=True), config, Outbox(tmp_path))


def test_learned_rewards_fill_in_by_stamp_and_hold_the_batch(tmp_path):
    core = _learned_core(tmp_path, reward_wait_s=60.0)
    core.start_episode()
    for stamp, x in enumerate([0, 2, 0, 0, 0]):  # x=2 would end a task-rewarded episode: ignored here
        result = core.step({"x": x}, stamp_ns=100 + stamp)
    assert result.action is None and result.episode.steps == 4  # truncated at the horizon
    assert core.outbox.due(now=0.0) == []  # held: rewards for stamps 101..104 are missing
    for stamp, reward in ((102, 0.25), (101, 0.5), (104, -0.1)):
        assert core.on_learned_reward(stamp, reward)
    assert core.outbox.due(now=0.0) == []
    assert core.on_learned_reward(103, 0.0)  # the last one: the batch goes
    batch = codec.decode(core.outbox.due(now=0.0)[0][1]).arrays
    np.testing.assert_allclose(batch["reward"], [0.5, 0.25, 0.0, -0.1])
    assert batch["stamp"].tolist() == [101, 102, 103, 104] and not batch["reward_late"].any()
    assert not batch["terminated"].any()
    assert not core.on_learned_reward(103, 1.0)  # already sent: nothing waits for it
    with pytest.raises(ValueError, match="finite"):
        core.on_learned_reward(105, float("nan"))
    with pytest.raises(ValueError, match="stamp_ns"):
        core.start_episode()
        core.step({"x": 0})


def test_missing_learned_rewards_go_late_after_the_wait(tmp_path):
    core = _learned_core(tmp_path, reward_wait_s=0.0)
    core.start_episode()
    for stamp in range(3):
        core.step({"x": 0}, stamp_ns=10 + stamp)
    core.on_learned_reward(11, 0.3)
    core.label("reset")
    core.step({"x": 0}, stamp_ns=13)
    batch = codec.decode(core.outbox.due(now=0.0)[0][1]).arrays
    assert batch["reward_late"].tolist() == [False, True, True] and batch["reward"][0] == pytest.approx(0.3)
    assert core.late_rewards_sent == 2


def test_learned_done_makes_the_transition_terminal_and_ends_the_episode(tmp_path):
    core = _learned_core(tmp_path, reward_wait_s=60.0)
    core.start_episode()
    core.step({"x": 0}, stamp_ns=1)
    core.step({"x": 2}, stamp_ns=2)
    core.on_learned_reward(2, 0.9)
    core.on_learned_done(2)
    result = core.step({"x": 2}, stamp_ns=3)  # this step's transition is not recorded
    assert result.action is None and result.episode.success and result.episode.steps == 1
    batch = codec.decode(core.outbox.due(now=0.0)[0][1]).arrays
    assert batch["terminated"].tolist() == [True] and batch["truncated"].tolist() == [False]


def test_learner_fills_in_late_rewards_or_drops_them(tmp_path):
    actor = _learned_core(tmp_path / "actor", reward_wait_s=0.0)
    actor.start_episode()
    for stamp in range(4):
        actor.step({"x": 0}, stamp_ns=stamp)
    actor.on_learned_reward(1, 0.5)
    actor.label("reset")
    actor.step({"x": 0}, stamp_ns=4)
    (_, data), = actor.outbox.due(now=0.0)
    learner = LearnerCore(LearnerConfig(obs_dim=2, action_dim=1, late_reward_timeout_s=60.0), tmp_path / "learner")
    learner.on_learned_reward(2, 0.7)  # arrived at the learner before the batch did
    learner.ingest(data)  # rows reaching stamps 1 (on time), 2 (filled at once), 3 and 4 (wait)
    assert len(learner.online) == 2 and [stamp for _, stamp, _ in learner.awaiting_reward] == [3, 4]
    learner.on_learned_done(3)
    learner.on_learned_reward(3, -0.2)
    assert len(learner.online) == 3 and learner.late_rewards_filled == 2
    stored = learner.online.storage
    np.testing.assert_allclose(stored["reward"][:3], [0.7, 0.5, -0.2])  # the filled row went in first
    assert stored["terminated"][:3].tolist() == [False, False, True]  # the reward node's done
    learner.config.late_reward_timeout_s = 0.0
    learner.awaiting_reward = [(0.0, stamp, row) for _, stamp, row in learner.awaiting_reward]  # deadline passed
    learner.expire_late()
    assert learner.late_rewards_dropped == 1 and len(learner.online) == 3  # never trained on without its reward


def test_sync_rewards_waits_for_the_previous_steps_reward(tmp_path):
    core = _learned_core(tmp_path, sync_rewards=True)
    core.start_episode()
    core.step({"x": 0}, stamp_ns=1)
    assert not core.waiting_for_rewards()  # nothing recorded yet
    core.step({"x": 0}, stamp_ns=2)
    assert core.waiting_for_rewards()
    core.on_learned_reward(2, 0.1)
    assert not core.waiting_for_rewards()


def test_failure_terminates_and_actions_are_rate_limited(tmp_path):
    from dataclasses import replace

    task = replace(_task(horizon=10), failure=lambda s: s["x"] < 0, action_rate_limit=0.2)
    core = ActorCore(task, ActorConfig(total_steps=0), Outbox(tmp_path))
    core.start_episode()
    # A person's full-throttle commands are executed (and recorded) within 0.2 of the previous action.
    executed = [core.step({"x": x}, human_action=np.array([1.0])).action[0] for x in (0, 1, 2)]
    np.testing.assert_allclose(executed, [0.2, 0.4, 0.6], atol=1e-6)
    result = core.step({"x": -1})  # a crash: terminal, no success even past the success threshold
    assert result.action is None and not result.episode.success
    batch = codec.decode(core.outbox.due(now=0.0)[0][1]).arrays
    np.testing.assert_allclose(batch["action"][:, 0], [0.2, 0.4, 0.6], atol=1e-6)
    assert batch["terminated"].tolist() == [False, False, True] and not batch["truncated"].any()


def test_learner_clones_interventions_when_bc_weight_is_set(tmp_path):
    """Corrections sent by the actor reach the demonstration buffer and the BC term: with a flat
    reward the actor's deterministic action moves to what the person commanded."""
    actor = ActorCore(_task(horizon=200), ActorConfig(total_steps=0, batch_transitions=200), Outbox(tmp_path / "actor"))
    actor.start_episode()
    for _ in range(201):  # a transition is recorded when the next observation arrives
        actor.step({"x": 0}, human_action=np.array([-0.6], np.float32))
    torch.manual_seed(0)
    sac = SACConfig(batch_size=32, hidden_dims=(16,), bc_weight=1.0, actor_lr=3e-3, init_temperature=1e-4)
    learner = LearnerCore(LearnerConfig(obs_dim=2, action_dim=1, sac=sac, warmup_transitions=1), tmp_path / "learner")
    for _, data in actor.outbox.due(now=0.0):
        learner.ingest(data)
    assert len(learner.demos) == len(learner.online) == 200
    for _ in range(300):
        learner.train_step()
    action = learner.agent.policy.act(np.array([0.0, 1.0], np.float32), deterministic=True)
    assert abs(float(action[0]) + 0.6) < 0.1


def test_episode_time_sets_the_horizon_in_training_too(tmp_path):
    """`train --teleop --episode-time-s`: a person's episode length at the task's rate, not only when recording."""
    core = ActorCore(_task(horizon=3), ActorConfig(total_steps=0, episode_time_s=0.5), Outbox(tmp_path))
    assert core.max_episode_steps == 5  # 0.5 s at 10 Hz
    results = _run_episode(core, range(6))
    assert [r.action is None for r in results] == [False] * 5 + [True] and results[5].episode.steps == 5


def test_a_pinned_policy_is_evaluated_alone_without_training(tmp_path):
    learner = LearnerCore(LearnerConfig(obs_dim=2, action_dim=1, warmup_transitions=1), tmp_path / "learner")
    pinned = codec.decode(learner.policy_payload())
    core = ActorCore(_task(horizon=2), ActorConfig(total_steps=1000, eval_episodes=2), Outbox(tmp_path / "outbox"))
    core.pin_policy(pinned)
    assert core.evaluating and core.policy_version == pinned.meta["version"]
    assert not core.load_policy(codec.decode(learner.policy_payload()))  # a newer one is not taken instead
    for _ in range(2):
        _run_episode(core, [0, 1, 2])
    summary = core.eval_summary()
    assert core.finished and core.train_steps == 0 and core.transitions_sent == 0 and len(core.outbox) == 0
    assert summary["episodes"] == 2 and summary["policy_version"] == pinned.meta["version"]
    assert [r["steps"] for r in summary["results"]] == [2, 2]


def test_a_recording_session_or_no_evaluation_refuses_a_policy_to_evaluate(tmp_path):
    from robot_rl.data.episodes import EpisodeSchema, EpisodeWriter

    learner = LearnerCore(LearnerConfig(obs_dim=2, action_dim=1, warmup_transitions=1), tmp_path / "learner")
    recorder = EpisodeWriter(tmp_path / "demos", EpisodeSchema({}, 2, 1), {"task": "toy"})
    core = ActorCore(_task(), ActorConfig(record_only=True), Outbox(tmp_path / "outbox"), recorder)
    with pytest.raises(ValueError, match="recording"):
        core.pin_policy(codec.decode(learner.policy_payload()))
    core = ActorCore(_task(), ActorConfig(eval_episodes=0), Outbox(tmp_path / "outbox2"))
    with pytest.raises(ValueError, match="eval_episodes is 0"):
        core.pin_policy(codec.decode(learner.policy_payload()))


def test_the_actions_sent_join_the_observation_newest_first_and_restart_each_episode(tmp_path):
    """A task with an action history (the arm's pick-cube: commands still in flight under latency) observes what
    the actor sent, a person's action included; each episode starts from the task's rest action."""
    task = TaskSpec(name="toy_history", obs_dim=3, action_dim=1, max_episode_steps=3, control_hz=10.0,
                    observation=lambda s: np.array([s["x"], *s["last_actions"][:, 0]], np.float32),
                    reward=lambda s: 0.0, success=lambda s: False, terminate_on_success=False, expert=None,
                    env_id="none", action_history=2, rest_action=(-1.0,))
    core = ActorCore(task, ActorConfig(batch_transitions=100, total_steps=0), Outbox(tmp_path))
    for _ in range(2):
        core.start_episode()
        sent = [core.step({"x": 0}).action, core.step({"x": 1}, human_action=np.array([0.5], np.float32)).action,
                core.step({"x": 2}).action]
        core.step({"x": 3})
    assert sent[1].tolist() == [0.5]
    batch = codec.decode(core.outbox.due(now=0.0)[-1][1]).arrays  # the second episode's, from the rest again
    np.testing.assert_array_equal(batch["obs"][:, 1:], [[-1, -1], [sent[0][0], -1], [0.5, sent[0][0]]])
    np.testing.assert_array_equal(batch["next_obs"][-1, 1:], [sent[2][0], 0.5])


def test_a_policy_from_before_the_action_history_is_refused_saying_so():
    from robot_rl.tasks import get_task
    from robot_rl.training.policy_payload import policy_from_payload

    task = get_task("arm_pick_cube")
    old = Policy(PolicySpec(obs_dim=task.obs_dim - 8, action_dim=4, hidden_dims=(4,)))
    payload = codec.encode("policy", codec.state_dict_to_arrays(old.network.state_dict()),
                           {"version": 1, "spec": old.spec.to_json()})
    with pytest.raises(ValueError, match="observes its last 2 actions .* a policy trained before observes 12"):
        policy_from_payload(codec.decode(payload), task)
