"""The learner node acknowledges each transition payload once, as it comes, while an update runs: a learner
whose updates take seconds (here big networks; on the wall clock a compiled step's first call, which compiles)
must not hold acknowledgements back until an actor resends (a resend is a duplicate transition)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

pytest.importorskip("rclpy")

from std_msgs.msg import UInt8MultiArray  # noqa: E402

from robot_rl.ros import qos  # noqa: E402
from robot_rl.ros.messages import bytes_to_uint8_multiarray, uint8_multiarray_view  # noqa: E402
from robot_rl.ros.probe import RosProbe, start_node, stop_node  # noqa: E402
from robot_rl.tasks import get_task  # noqa: E402
from robot_rl.transport import codec  # noqa: E402
from robot_rl.transport.kinds import ACK, TRANSITIONS  # noqa: E402
from robot_rl.transport.layout import transition_layout  # noqa: E402
from robot_rl.transport.secret import ensure_run_secret  # noqa: E402

PAYLOADS, ROWS, PERIOD_S = 40, 5, 0.1
WARMUP = 4 * ROWS
"""Training starts after the 4th payload; the rest arrive while the first (slow) update runs."""
SLOW = ("hidden_dims:=[1024, 1024]", "batch_size:=2048", "utd_ratio:=8")
"""About 3 s an update on this 2-core machine's one torch thread (8 critic steps of a 2048-row batch)."""
ACK_WITHIN_S = 1.0


def _payload(seq: int, key: bytes, obs_dim: int, action_dim: int) -> bytes:
    rng = np.random.default_rng(seq)
    batch = {name: (rng.uniform(-1, 1, (ROWS, *shape)) if dtype == np.float32 else np.zeros((ROWS, *shape)))
             .astype(dtype) for name, (shape, dtype) in transition_layout(obs_dim, action_dim).items()}
    return codec.encode(TRANSITIONS, batch, {"actor_id": "robot0", "seq": seq}, key=key)


def test_every_payload_is_acknowledged_once_and_promptly_while_a_slow_update_runs(tmp_path):
    task = get_task("arm_lift")
    run_dir = tmp_path / "run"
    key = ensure_run_secret(run_dir)  # the learner keeps the run's secret it finds
    log = tmp_path / "learner.log"
    proc, domain_id = start_node("robot_rl.nodes.learner", log, "task:=arm_lift", f"run_dir:={run_dir}",
                                 f"warmup_transitions:={WARMUP}", "max_update_ratio:=0.0", *SLOW)
    probe = RosProbe(domain_id, "actor_stand_in")
    acked: dict[int, list[float]] = {}

    def on_ack(msg) -> None:
        ack = codec.decode(bytes(uint8_multiarray_view(msg)), expect_kind=ACK, key=key)
        for seq in ack.arrays["seqs"].tolist():
            acked.setdefault(seq, []).append(time.monotonic())

    probe.node.create_subscription(UInt8MultiArray, "rl/acks", on_ack, qos.EVENTS)
    publisher = probe.node.create_publisher(UInt8MultiArray, "rl/transitions", qos.TRANSITIONS)
    try:
        probe.wait_for(lambda: publisher.get_subscription_count() and probe.value("updates", "learner") == 0, 60,
                       lambda: f"the learner up; its log:\n{log.read_text()[-2000:]}")
        sent = {}
        for seq in range(PAYLOADS):
            sent[seq] = time.monotonic()
            publisher.publish(bytes_to_uint8_multiarray(_payload(seq, key, task.obs_dim, task.action_dim)))
            probe.spin_until(sent[seq] + PERIOD_S)
        probe.wait_for(lambda: len(acked) == PAYLOADS, 30, lambda: f"every payload acknowledged, got {sorted(acked)}")
        probe.wait_for(lambda: probe.value("updates", "learner") >= 1, 60, "the first update")
        probe.spin(1.5)  # a diagnostics period, and time for any second acknowledgement
        updates = probe.value("updates", "learner")
        training_s = time.monotonic() - sent[WARMUP // ROWS - 1]
    finally:
        probe.close()
        stop_node(proc, log)
    # The premise: updates took over a second each ...
    assert updates <= training_s, (updates, training_s, log.read_text()[-2000:])
    # ... and each payload was acknowledged once, within a second of being sent.
    late = {seq: round(times[0] - sent[seq], 2) for seq, times in acked.items() if times[0] - sent[seq] > ACK_WITHIN_S}
    assert not late, f"acknowledged after over {ACK_WITHIN_S} s: {late}"
    assert all(len(times) == 1 for times in acked.values()), acked
    summary = json.loads((run_dir / "learner_summary.json").read_text())
    assert summary["transitions_received"] == PAYLOADS * ROWS and summary["duplicates"] == 0


def test_a_learner_stopped_with_payloads_waiting_stores_every_acknowledged_one_first(tmp_path, monkeypatch):
    """A run's end (the actors done, the learner stopped) can come while acknowledged payloads still wait for
    the ingest thread (a pixel learner featurizes each): the summary and the final checkpoint must count them."""
    import rclpy
    from rclpy.parameter import Parameter

    from robot_rl.training.learner import LearnerCore
    from robot_rl.nodes.learner import LearnerNode
    from robot_rl.ros.probe import fresh_domain_id

    real_store = LearnerCore.store

    def slow_store(core, result):  # a store as slow as a pixel payload's featurizing on this machine
        time.sleep(0.05)
        return real_store(core, result)

    monkeypatch.setattr(LearnerCore, "store", slow_store)
    task = get_task("arm_lift")
    run_dir = tmp_path / "run"
    key = ensure_run_secret(run_dir)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=fresh_domain_id())
    try:
        node = LearnerNode(context=context, parameter_overrides=[
            Parameter("task", value="arm_lift"), Parameter("run_dir", value=str(run_dir)),
            Parameter("warmup_transitions", value=10_000)])
        for seq in range(20):  # straight into the subscription's callback: accepted and acknowledged at once
            node._on_transitions(bytes_to_uint8_multiarray(_payload(seq, key, task.obs_dim, task.action_dim)))
        waiting = node.inbox.qsize()
        node.close()
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
    assert waiting > 10  # the premise: most were still waiting when the learner was stopped
    summary = json.loads((run_dir / "learner_summary.json").read_text())
    assert summary["transitions_received"] == 20 * ROWS and summary["duplicates"] == 0, summary
