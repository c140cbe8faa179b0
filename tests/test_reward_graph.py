"""Learned rewards end to end: sim (pixel pick-cube, lockstep), reward node, actor and learner as four
processes over loopback DDS. The actor trains on the reward node's rewards (keyed by observation
stamp), the learner stores them and relabels its demonstrations with the same model; nothing comes
from the task's own reward."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("rclpy")

from robot_rl.ros.probe import RosProbe, fresh_domain_id, start_graph  # noqa: E402

GOAL = "pick up the cube"


@pytest.fixture(scope="module")
def progress_model(tmp_path_factory):
    from robot_rl.data.scripted import record_scripted_episodes
    from robot_rl.robots.arm.sim import scripted_lift_action
    from robot_rl.rewards.progress import ProgressModelConfig, progress_episodes, train_progress_model

    root = tmp_path_factory.mktemp("reward_graph")
    record_scripted_episodes(str(root / "demos.zarr"), "robot_rl/ArmPickCube-v0", scripted_lift_action, 4, goal=GOAL,
                             env_kwargs={"image_size": 64})
    model, _ = train_progress_model(progress_episodes(root / "demos.zarr"), ProgressModelConfig(steps=200))
    model.save(root / "model")
    return root


def test_actor_trains_on_the_reward_nodes_rewards(tmp_path, progress_model):
    model = progress_model / "model"
    domain_id = fresh_domain_id()
    overrides = {
        "robot_rl.nodes": ["arm_sim", "arm_actor", "learner", "reward"],
        "robot_rl.demos": {"episodes": 0},
        "arm_actor.reward_source": "reward_node",
        "arm_actor.sync_rewards": True,
        "arm_actor.total_steps": 300,  # episodes are short (an untrained done head ends many early)
        "arm_actor.eval_episodes": 1,
        "arm_actor.batch_transitions": 25,
        "arm_actor.sync_updates_per_step": 0.0,
        "learner.warmup_transitions": 50,
        "learner.batch_size": 32,
        "learner.publish_period_s": 0.5,
        "learner.compile": False,  # the same math (tests/test_sac.py), without 10-50 s of compiling
        "learner.demos": str(progress_model / "demos.zarr"),  # relabelled with the same model
        "learner.reward_model": str(model),
        "learner.reward_goal": GOAL,
        "reward.model_path": str(model),
        "reward.goal": GOAL,
        "reward.use_sim_time": True,
        "reward.diagnostics_period_s": 0.5,
    }
    probe = RosProbe(domain_id, "reward_probe")
    published: dict[int, float] = {}  # observation stamp -> the reward the reward node published for it
    from geometry_msgs.msg import Vector3Stamped

    from robot_rl.ros import qos
    from robot_rl.ros.messages import stamp_to_ns

    probe.node.create_subscription(
        Vector3Stamped, "reward", lambda msg: published.__setitem__(stamp_to_ns(msg.header.stamp), msg.vector.x),
        qos.EVENTS)
    supervisor = start_graph("arm_pick_cube", overrides, tmp_path, domain_id)
    try:
        probe.wait_for(lambda: probe.value("learned_rewards_received", "arm_actor") >= 100
                       and probe.value("transitions_received", "learner") >= 100, 240,
                       "the reward node's rewards reaching the actor and, with the transitions, the learner")
        assert probe.value("frames_scored", "reward") >= 100
        assert probe.value("invalid_rewards", "arm_actor") == 0
        assert probe.value("rejected", "learner") == 0
        for name in ("arm_sim", "arm_actor", "learner", "reward"):
            assert name not in {n.spec.name for n, _ in supervisor.exited()}
    finally:
        codes = supervisor.stop()
        probe.close()
    assert all(code == 0 for code in codes.values()), codes
    summary = json.loads((tmp_path / "learner_summary.json").read_text())
    assert summary["transitions_received"] >= 100
    assert summary["demo_size"] >= 20  # the 4 demonstrations, cut at the model's done
    _assert_stored_rewards_are_the_reward_nodes(tmp_path / "journal", published)


def _assert_stored_rewards_are_the_reward_nodes(journal_dir, published: dict[int, float]) -> None:
    """Every transition the learner journaled with its reward carries the reward the reward node
    published for that observation's stamp (not the task's own sparse 0/1 reward)."""
    import numpy as np

    from robot_rl.transport import codec
    from robot_rl.transport.journal import PayloadJournal
    from robot_rl.transport.kinds import TRANSITIONS

    journal = PayloadJournal(journal_dir)
    stamps, rewards = [], []
    for _, data in journal.replay():
        arrays = codec.decode(data, expect_kind=TRANSITIONS).arrays
        if len(arrays["reward"]) == 0:
            continue  # a payload that only reports finished episodes
        assert "stamp" in arrays, "transitions without observation stamps: no learned reward can be theirs"
        on_time = ~np.asarray(arrays["reward_late"], bool)  # late rows wait for their reward at the learner
        stamps += arrays["stamp"][on_time].tolist()
        rewards += arrays["reward"][on_time].tolist()
    journal.close()
    matched = [(reward, published[stamp]) for stamp, reward in zip(stamps, rewards) if stamp in published]
    assert len(matched) >= 50, f"{len(matched)} of {len(stamps)} stored rows have a reward the probe heard"
    stored, sent = np.array(matched, np.float32).T
    np.testing.assert_allclose(stored, sent, rtol=0, atol=1e-6)
    assert not np.isin(stored, (0.0, 1.0)).all()  # progress deltas, not the sparse task reward
