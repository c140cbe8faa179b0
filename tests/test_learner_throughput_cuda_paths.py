"""benchmarks/learner_throughput.py's CUDA paths, what of them runs on CPU: the ratio withheld while a peer is
missing, the replay memory sampled on the device, the LeanRL-style reference's update, a contender's failure
recorded without ending the run, SAC.update_on_device and its static graph inputs, and a CPU dry run of the
GPU machine's script. The tests that need a GPU run where torch sees one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import learner_throughput  # noqa: E402
import sac_peers  # noqa: E402

from robot_rl.agents.sac import SAC, SACConfig  # noqa: E402

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
REFERENCES = {"redq_reference": 50.0, "leanrl_reference": 40.0}


def test_a_missing_required_peer_withholds_the_ratio_and_says_how_to_install_it():
    verdict = sac_peers.peer_ratios(100.0, REFERENCES, {"sbx": "ModuleNotFoundError: No module named 'sbx'"}, "cpu")
    assert verdict["ratio_vs_best_peer"] is None
    assert verdict["ratio_vs_present_peers"] == 2.0
    missing = verdict["missing_peers"]
    assert set(missing) == {"sbx", "stable_baselines3", "torchrl"}  # the two not even tried count as missing
    assert missing["sbx"]["why"].startswith("ModuleNotFoundError")
    assert missing["sbx"]["required"] and missing["sbx"]["install"].startswith("pip install 'sbx-rl")
    assert missing["torchrl"]["why"] == "not measured"


def test_the_ratio_is_against_the_best_peer_when_every_required_one_ran():
    peers = {**REFERENCES, "stable_baselines3": 20.0, "torchrl": 30.0, "sbx": 80.0}
    verdict = sac_peers.peer_ratios(100.0, peers, {}, "cpu")
    assert verdict == {"ratio_vs_best_peer": 1.25, "ratio_vs_present_peers": 1.25, "missing_peers": {}}


def test_on_cuda_torchrl_is_reported_missing_but_not_required():
    peers = {**REFERENCES, "stable_baselines3": 20.0, "sbx": 80.0}
    verdict = sac_peers.peer_ratios(100.0, peers, {"torchrl": "ImportError: undefined symbol"}, "cuda")
    assert verdict["ratio_vs_best_peer"] == 1.25
    assert verdict["missing_peers"]["torchrl"]["required"] is False


def test_a_failed_reference_or_a_failed_ours_leaves_no_ratio():
    peers = {"redq_reference": 50.0, "stable_baselines3": 20.0, "sbx": 80.0}
    failed = sac_peers.peer_ratios(100.0, peers, {"leanrl_reference": "RuntimeError: compile"}, "cuda")
    assert failed["ratio_vs_best_peer"] is None and failed["missing_peers"]["leanrl_reference"]["required"]
    assert "install" not in failed["missing_peers"]["leanrl_reference"]  # ours: nothing to install
    assert sac_peers.peer_ratios(None, {**peers, "leanrl_reference": 1.0}, {}, "cuda")["ratio_vs_best_peer"] is None


def test_an_import_failure_of_any_kind_counts_as_missing(monkeypatch):
    def broken(name: str):
        raise OSError("libtorchrl.so: undefined symbol: _ZN3c10\nmore lines")
    monkeypatch.setattr(sac_peers.importlib, "import_module", broken)
    assert sac_peers.import_error("torchrl") == "OSError: libtorchrl.so: undefined symbol: _ZN3c10"


class _NoNumpy:
    def __getattr__(self, name: str):
        raise AssertionError(f"numpy.{name} used while sampling on the device")


def test_the_device_replay_samples_tensors_on_its_device_without_numpy(monkeypatch):
    memory = sac_peers.DeviceReplay(sac_peers.random_transitions(33, 4, count=1000), CPU)
    monkeypatch.setattr(sac_peers, "np", _NoNumpy())
    batch = memory.sample(256)
    shapes = {"obs": (256, 33), "action": (256, 4), "reward": (256,), "next_obs": (256, 33), "terminated": (256,)}
    assert {k: tuple(v.shape) for k, v in batch.items()} == shapes
    assert all(v.dtype == torch.float32 and v.device == CPU for v in batch.values())
    assert set(batch["terminated"].unique().tolist()) <= {0.0, 1.0}
    rows = [memory.storage["obs"].eq(row).all(-1).nonzero().item() for row in batch["obs"][:4]]
    assert all(torch.equal(batch["next_obs"][i], memory.storage["next_obs"][r]) for i, r in enumerate(rows))


def test_ours_with_the_device_memory_trains_without_numpy_or_metrics_read_back(monkeypatch):
    update, agent = sac_peers.ours(33, 4, 2, None, CPU, "float32", compile=False, device_memory=True)
    before = [p.detach().clone() for p in agent.critic.parameters()]
    monkeypatch.setattr(sac_peers, "np", _NoNumpy())
    metrics = update()
    assert isinstance(metrics, torch.Tensor) and metrics.shape == (6,) and torch.isfinite(metrics).all()
    assert agent.num_updates == 1
    assert any(not torch.equal(b, p) for b, p in zip(before, agent.critic.parameters()))


def test_update_on_device_is_update_without_the_read_back():
    batch = sac_peers.DeviceReplay(sac_peers.random_transitions(8, 2, count=64), CPU).sample(32)
    torch.manual_seed(0)
    a = SAC(8, 2, SACConfig(batch_size=32, num_critics=2), CPU)
    torch.manual_seed(0)
    b = SAC(8, 2, SACConfig(batch_size=32, num_critics=2), CPU)
    torch.manual_seed(1)
    values = a.update(batch)
    torch.manual_seed(1)
    stacked = b.update_on_device(batch)
    assert list(values) == ["critic_loss", "q_mean", "actor_loss", "temperature", "entropy"]
    assert stacked[[0, 2, 3, 4, 5]].tolist() == pytest.approx(list(values.values()))


def test_what_the_training_step_mutates_besides_parameters_is_a_static_graph_input():
    """CUDA graphs skip a graph that mutates a non-static input (Adam's moments, log_alpha): marked, loaded too."""
    agent = SAC(8, 2, SACConfig(batch_size=32, num_critics=2), CPU)
    other = SAC(8, 2, SACConfig(batch_size=32, num_critics=2), CPU)
    other.load_state_dict(agent.state_dict())
    for sac in (agent, other):
        optimizers = (sac.actor_optimizer, sac.critic_optimizer, sac.temperature_optimizer)
        mutated = [sac.log_alpha] + [t for o in optimizers for s in o.state.values() for t in s.values()]
        assert all(getattr(t, "_dynamo_static_input_type", None) == "unguarded" for t in mutated)


def test_the_leanrl_reference_updates_its_parameters_and_stays_finite():
    update = sac_peers.leanrl_reference(33, 4, 10, 2, CPU, compile=False)
    before = [p.detach().clone() for p in update.learned]
    losses = torch.stack([update() for _ in range(3)])
    assert torch.isfinite(losses).all()
    assert all(torch.isfinite(p).all() for p in update.learned)
    assert all(not torch.equal(b, p) for b, p in zip(before, update.learned))  # critics, actor and temperature


def test_a_failing_contender_is_recorded_and_the_others_are_measured():
    def broken(batch):
        raise RuntimeError("compile failed\ntraceback")
    measured, errors = learner_throughput.rates({"fine": lambda batch: time.sleep(0.001), "broken": broken}, None,
                                                0.05, CPU)
    assert set(measured) == {"fine"} and measured["fine"] > 0
    assert errors == {"broken": "RuntimeError: compile failed"}


def test_the_gpu_runs_script_dry_on_cpu_runs_every_part_and_writes_its_json(tmp_path):
    """benchmarks/gpu_run.sh --dry-run: every step the GPU machine takes, with tiny sizes on CPU (the one place
    CI runs it)."""
    done = subprocess.run(["bash", str(BENCHMARKS / "gpu_run.sh"), str(tmp_path), "--dry-run"], capture_output=True,
                          text=True, timeout=900, cwd=BENCHMARKS.parent, env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    parts = [json.loads(line) for line in (tmp_path / "parts.jsonl").read_text().splitlines()]
    assert sorted((p["part"], p["exit"]) for p in parts) == [("juggle", 0), ("learner", 0), ("reward", 0),
                                                               ("train", 0)]
    result = json.loads((tmp_path / "learner_throughput.json").read_text())
    assert result["device_type"] == "cpu" and result["torch"] == torch.__version__ and result["compile"] is False
    assert result["ppo"] == "skipped (--no-ppo)"
    for critics in (2, 10):
        assert result[f"updates_per_s_{critics}"] > 0
        peers = result[f"peers_{critics}"]
        assert peers["leanrl_reference"]["updates_per_s"] > 0 and peers["redq_reference"]["updates_per_s"] > 0
        missing = result[f"missing_peers_{critics}"]
        assert (result[f"ratio_vs_best_peer_{critics}"] is None) == any(m["required"] for m in missing.values())
        assert all("error" in peers[name] for name in missing)
        assert result[f"ratio_vs_present_peers_{critics}"] > 0
    assert result["updates_per_s"] > 0 and result["pixel_updates_per_s"] > 0
    assert json.loads((tmp_path / "juggle_throughput.json").read_text())
    assert (tmp_path / "quad_juggle_gpu" / "card.json").exists() and (tmp_path / "machine.txt").exists()
    # issue 45's part ran without ROS (as on the GPU machine) and wrote its row into OUT_DIR
    reward = json.loads((tmp_path / "reward_latency.json").read_text())["cpu+tiny"][0]
    assert set(reward["score"]) == {"progress", "vlac", "vlm_critic"} and "actor" not in reward
    assert all(reward["score"][b]["1"]["calls"] == 2 for b in reward["score"])
    streams = [s for backend in reward["stream"].values() for s in backend["max_batch"].values()]
    assert len(streams) == 3 * 2 and all(s["score_errors"] == 0 and s["scored"] > 0 for s in streams)


def test_the_gpu_runs_script_refuses_parts_that_outlast_one_device_call_before_doing_anything(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(BENCHMARKS / "gpu_run.sh"), str(out)], capture_output=True, text=True,
                          timeout=60, cwd=BENCHMARKS.parent)
    assert done.returncode == 2 and "more than one device call (600 s)" in done.stderr
    assert "reward (issue 45)" in done.stderr and not out.exists()
    done = subprocess.run(["bash", str(BENCHMARKS / "gpu_run.sh"), str(out), "rewards"], capture_output=True,
                          text=True, timeout=60, cwd=BENCHMARKS.parent)
    assert done.returncode == 2 and "unknown option or part rewards" in done.stderr and not out.exists()


@needs_cuda
def test_on_cuda_ours_samples_and_trains_without_a_host_sync():
    cuda = torch.device("cuda")
    memory = sac_peers.DeviceReplay(sac_peers.random_transitions(33, 4), cuda)
    assert all(v.is_cuda for v in memory.sample(256).values())
    update, agent = sac_peers.ours(33, 4, 2, None, cuda, compile=True)
    skips = learner_throughput._cudagraph_skips()
    for _ in range(5):
        update()
    assert agent.compiled
    assert learner_throughput._cudagraph_skips() == skips, "the training step ran without CUDA graphs (log: why)"
    assert learner_throughput.host_syncs(update) == []


@needs_cuda
def test_on_cuda_the_leanrl_reference_runs_in_cuda_graphs():
    update = sac_peers.leanrl_reference(33, 4, 10, 2, torch.device("cuda"), compile=True)
    skips = learner_throughput._cudagraph_skips()
    losses = torch.stack([update() for _ in range(5)])
    assert torch.isfinite(losses).all()
    assert learner_throughput._cudagraph_skips() == skips, "a step ran without CUDA graphs (log: why)"


@needs_cuda
@pytest.mark.skipif(sac_peers.import_error("sbx") is not None, reason="sbx-rl is not installed")
def test_on_cuda_sbx_runs_on_the_gpu_through_jax():
    update = sac_peers.sbx(33, 4, 2, torch.device("cuda"))
    update()
    assert "cuda" in sac_peers.sbx_version(torch.device("cuda")).lower() or "gpu" in \
        sac_peers.sbx_version(torch.device("cuda")).lower()
