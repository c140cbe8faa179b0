"""Only this run's actors can feed the learner (signed payloads; forgeries and replays dropped and
counted), and `robot-rl security init` writes SROS2 enclaves whose files verify with openssl and
whose permissions are the graph's topics."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from robot_rl.cli import main as cli_main
from robot_rl.training.learner import LearnerConfig, LearnerCore
from robot_rl.transport import codec
from robot_rl.transport.secret import SECRET_FILE, ensure_run_secret
from robot_rl.transport.sequences import SequenceTracker

KEY = bytes(range(32))


def _batch(n: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    return {"obs": rng.normal(size=(n, 2)).astype(np.float32), "action": rng.uniform(-1, 1, (n, 1)).astype(np.float32),
            "reward": np.zeros(n, np.float32), "next_obs": rng.normal(size=(n, 2)).astype(np.float32),
            "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool), "intervention": np.zeros(n, bool)}


def _payload(seq: int, key: bytes | None = KEY) -> bytes:
    return codec.encode("transitions", _batch(), {"actor_id": "a", "seq": seq}, key=key)


def _reason(data: bytes, key: bytes) -> str:
    with pytest.raises(codec.PayloadError) as info:
        codec.decode(data, key=key)
    return info.value.reason


def test_mac_rejects_tampered_unsigned_and_other_keys():
    signed = _payload(0)
    assert codec.decode(signed, key=KEY).meta["seq"] == 0
    tampered = bytearray(signed)
    tampered[len(tampered) // 2] ^= 1
    assert _reason(bytes(tampered), KEY) == "bad_mac"
    assert _reason(signed, bytes(32)) == "bad_mac"
    assert _reason(signed[:-1], KEY) == "bad_mac"
    assert _reason(_payload(0, key=None), KEY) == "unsigned"
    assert codec.decode(signed).meta["seq"] == 0  # tools without the key still read it


def _learner(run_dir: Path) -> LearnerCore:
    return LearnerCore(LearnerConfig(obs_dim=2, action_dim=1), run_dir, key=KEY)


def test_learner_drops_forged_and_replayed_payloads_and_resumes_from_its_journal(tmp_path):
    learner = _learner(tmp_path)
    learner.ingest(_payload(0))
    for forged in (_payload(1, key=None), _payload(1, key=bytes(32))):
        with pytest.raises(codec.PayloadError):
            learner.ingest(forged)
    assert learner.ingest(_payload(0)).duplicate
    assert (learner.forged, learner.duplicates, len(learner.online)) == (2, 1, 4)
    learner.close()

    again = _learner(tmp_path)
    assert again.restore() and len(again.online) == 4  # the journal replays
    assert again.ingest(_payload(0)).duplicate
    assert len(again.online) == 4


def test_an_accepted_payload_is_journaled_before_its_acknowledgement_and_stored_after_a_crash(tmp_path):
    """The learner node acknowledges a payload once `accept` has journaled it and stores it on another thread; a
    learner that died in between stores it from its journal. A payload refused leaves no trace to replay."""
    learner = _learner(tmp_path)
    accepted = learner.accept(_payload(0))
    assert not accepted.duplicate and accepted.transitions == 4 and len(learner.online) == 0
    late_without_stamps = codec.encode("transitions", {**_batch(), "reward_late": np.ones(4, bool)},
                                       {"actor_id": "a", "seq": 1}, key=KEY)
    with pytest.raises(ValueError, match="stamp"):
        learner.accept(late_without_stamps)
    assert learner.accept(_payload(0)).duplicate  # a resend before it was stored: recognised, nothing to store
    learner.close()  # killed before `store` ran

    again = _learner(tmp_path)
    assert again.restore() and len(again.online) == 4  # seq 0 from the journal; the refused seq 1 is not there
    assert again.accept(_payload(0)).duplicate and not again.accept(_payload(1)).duplicate


def test_sequences_survive_journal_pruning(tmp_path):
    learner = LearnerCore(LearnerConfig(obs_dim=2, action_dim=1, buffer_capacity=8), tmp_path, key=KEY)
    learner.journal.segment_records = 1  # a segment per payload: the oldest are pruned at once
    for seq in range(5):
        learner.ingest(_payload(seq))
    learner.close()
    assert len(list((tmp_path / "journal").glob("segment-*.log"))) < 5
    again = LearnerCore(LearnerConfig(obs_dim=2, action_dim=1, buffer_capacity=8), tmp_path, key=KEY)
    again.restore()
    assert again.ingest(_payload(0)).duplicate  # its segment is gone, its sequence number is not


def test_tracker_merge_is_a_union(tmp_path):
    a, b = SequenceTracker(), SequenceTracker()
    for seq in (0, 1, 5):
        a.add("x", seq)
    for seq in (2, 3, 7):
        b.add("x", seq)
    b.add("y", 1)
    b.save(tmp_path / "s.json")
    a.merge(SequenceTracker.load(tmp_path / "s.json"))
    assert [s for s in range(9) if a.seen("x", s)] == [0, 1, 2, 3, 5, 7]
    assert a.seen("y", 1) and not a.seen("y", 0)


def test_run_secret_is_private_and_kept(tmp_path):
    key = ensure_run_secret(tmp_path)
    assert len(key) == 32 and ensure_run_secret(tmp_path) == key
    assert (tmp_path / SECRET_FILE).stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [SECRET_FILE]


# ---- the keystore ---------------------------------------------------------------------------------

LEARNER_PUBLISHES = {"rt/rl/acks", "rt/rl/policy", "rt/diagnostics", "rt/rosout", "rt/parameter_events"}
LEARNER_SUBSCRIBES = {"rt/rl/transitions", "rt/reward", "rt/reward/done", "rt/clock", "rt/parameter_events"}


def _openssl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["openssl", *args], capture_output=True, text=True)


def _topics(permissions: Path, tag: str) -> set[str]:
    return {t.text for t in ET.parse(permissions).getroot().iter(tag) for t in t.iter("topic")}


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_security_init_writes_verifiable_least_privilege_enclaves(tmp_path, capsys):
    keystore = tmp_path / "keystore"
    assert cli_main(["security", "init", "--task", "arm_lift", "--keystore", str(keystore)]) == 0
    assert "built without DDS Security" in capsys.readouterr().out
    assert cli_main(["security", "init", "--task", "arm_lift", "--keystore", str(keystore)]) == 2  # no overwrite
    enclaves = keystore / "enclaves"
    assert sorted(p.name for p in enclaves.iterdir() if p.is_dir()) == ["arm_actor", "arm_sim", "learner"]
    for node in ("arm_actor", "arm_sim", "learner"):
        d = enclaves / node
        assert _openssl("verify", "-CAfile", str(d / "identity_ca.cert.pem"), str(d / "cert.pem")).returncode == 0
        assert f"CN = /{node}" in _openssl("x509", "-noout", "-subject", "-in", str(d / "cert.pem")).stdout
        for document, xml in (("permissions", d / "permissions.xml"), ("governance", enclaves / "governance.xml")):
            out = tmp_path / f"{node}-{document}.out"
            result = _openssl("smime", "-verify", "-text", "-in", str(d / f"{document}.p7s"),
                              "-CAfile", str(d / "permissions_ca.cert.pem"), "-out", str(out))
            assert result.returncode == 0, result.stderr
            assert out.read_text().replace("\r\n", "\n") == xml.read_text()
        assert (d / "key.pem").stat().st_mode & 0o777 == 0o600
    learner = enclaves / "learner" / "permissions.xml"
    publishes, subscribes = _topics(learner, "publish"), _topics(learner, "subscribe")
    assert {t for t in publishes if not t.startswith("rr/")} == LEARNER_PUBLISHES
    assert {t for t in subscribes if not t.startswith("rq/")} == LEARNER_SUBSCRIBES
    assert "rr/learner/get_parametersReply" in publishes and "rq/learner/get_parametersRequest" in subscribes
    actor = enclaves / "arm_actor" / "permissions.xml"
    assert "rt/rl/transitions" in _topics(actor, "publish") and "rt/rl/transitions" not in _topics(actor, "subscribe")
    assert "rq/arm_sim/resetRequest" in _topics(actor, "publish")
    assert "rq/arm_sim/resetRequest" in _topics(enclaves / "arm_sim" / "permissions.xml", "subscribe")
    tampered = tmp_path / "tampered.p7s"
    tampered.write_text((enclaves / "learner" / "permissions.p7s").read_text().replace("rt/rl/acks", "rt/rl/ackz"))
    assert _openssl("smime", "-verify", "-in", str(tampered), "-CAfile", str(keystore / "public" / "ca.cert.pem"),
                    "-out", os.devnull).returncode != 0


def test_a_namespaced_fleets_permissions_name_the_topics_its_remaps_make():
    from robot_rl.ros.graph import build_graph, config_path, load_config
    from robot_rl.ros.security import node_dds_topics

    config = load_config(config_path("arm_lift"))
    config["robot_rl"]["actors"] = 2
    specs = {spec.key: spec for spec in build_graph(config, "sim", "/tmp/run", namespace="lab")}
    sim = node_dds_topics(specs["lab/robot0/arm_sim"], ["front"])
    assert "rt/lab/robot0/clock" in sim.publish and "rt/clock" not in sim.publish
    actor = node_dds_topics(specs["lab/robot1/arm_actor"], ["front"])
    assert "rt/lab/rl/transitions" in actor.publish and "rt/lab/robot1/rl/transitions" not in actor.publish
    assert "rt/lab/robot1/clock" in actor.subscribe
    assert "rt/lab/rl/transitions" in node_dds_topics(specs["lab/learner"], ["front"]).subscribe


def test_every_node_kind_declares_its_endpoints_and_every_node_that_obeys_the_estop_may_hear_it():
    import importlib.util

    from robot_rl.ros.node_kinds import NODE_KINDS
    from robot_rl.ros.security import NODE_ENDPOINTS

    for name, kind in NODE_KINDS.items():
        endpoints = NODE_ENDPOINTS.get(name) or kind.endpoints
        assert endpoints is not None, f"{name} has no SROS2 endpoints"
        source = Path(importlib.util.find_spec(kind.module).origin).read_text()
        if "SimEstop(" in source or "HardwareNode" in source:
            assert "/estop" in endpoints.subscribe and "~/reset_estop" in endpoints.serves, name


# ---- a running graph ------------------------------------------------------------------------------


def test_forged_and_replayed_payloads_never_reach_the_replay_buffer(tmp_path):
    pytest.importorskip("rclpy")
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.ros import qos
    from robot_rl.ros.messages import bytes_to_uint8_multiarray, uint8_multiarray_view
    from robot_rl.ros.probe import RosProbe, fresh_domain_id, start_graph

    domain_id = fresh_domain_id()
    overrides = {"robot_rl.demos": {"episodes": 0}, "arm_actor.total_steps": 150, "arm_actor.eval_episodes": 1,
                 "arm_actor.batch_transitions": 25, "arm_actor.sync_updates_per_step": 0.0,
                 "learner.warmup_transitions": 100, "learner.batch_size": 32, "learner.hidden_dims": [32, 32]}
    probe = RosProbe(domain_id, "intruder")  # a separate process from every node of the graph
    captured: list[bytes] = []
    # subscribed before the graph starts: the whole run can take 2 s, and a subscription matched after the actor's
    # last batch captures nothing (CI, 2026-12-01)
    probe.node.create_subscription(UInt8MultiArray, "rl/transitions",
                                   lambda m: captured.append(bytes(uint8_multiarray_view(m))), qos.TRANSITIONS)
    intruder = probe.node.create_publisher(UInt8MultiArray, "rl/transitions", qos.TRANSITIONS)
    supervisor = start_graph("arm_lift", overrides, tmp_path, domain_id)
    try:
        probe.wait_for(lambda: probe.value("transitions_received", "learner") >= 150 and captured, 120,
                       "the actor's transitions stored")
        stored = probe.value("online_size", "learner")
        replayed_before = probe.value("payloads_replayed", "learner")
        real = codec.decode(captured[0])
        forged = [codec.encode("transitions", real.arrays, {**real.meta, "seq": 10_000 + i}, key=key)
                  for i, key in enumerate((None, bytes(32), os.urandom(32)))]
        for data in [*forged, *captured[:3]]:
            intruder.publish(bytes_to_uint8_multiarray(data))
        probe.wait_for(lambda: probe.value("payloads_forged", "learner") >= 3
                       and probe.value("payloads_replayed", "learner") >= replayed_before + 3, 30,
                       "forgeries and replays counted")
        probe.spin(1.5)  # a diagnostics period: the buffer size after all of them
        assert probe.value("online_size", "learner") == stored == 150
        assert probe.value("payloads_forged", "learner") == 3
    finally:
        supervisor.stop()
        probe.close()
    summary = json.loads((tmp_path / "learner_summary.json").read_text())
    assert summary["transitions_received"] == 150 and summary["forged"] == 3
    assert (tmp_path / SECRET_FILE).exists()
