"""benchmarks/peer_lerobot/hf_encoder.py: our shipped gym-hil encoder as the Hugging Face model LeRobot's SAC loads,
pinned against our own encoder's conv stacks (both stacks' maps for any frame), and loaded back the way LeRobot
loads it (`AutoModel.from_pretrained(path, trust_remote_code=True)`, in a process of its own, offline)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT / "benchmarks" / "peer_lerobot"
sys.path.insert(0, str(PEER))

import hf_encoder  # noqa: E402

from robot_rl.agents.encoders import ImageEncoder, pretrained_config  # noqa: E402

SHIPPED = ROOT / "policies" / "encoders" / "gym_hil_pick_cube_128"


def test_every_frame_gets_both_cameras_conv_maps_of_our_encoder():
    ours = ImageEncoder(pretrained_config(SHIPPED))
    model = hf_encoder.convert(SHIPPED)
    frames = torch.rand(3, 3, 128, 128, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = model(frames).last_hidden_state
        both_stacks = ours.trunk(torch.cat([frames, frames], dim=1))  # (B, 2 cameras, 32, 8, 8)
    assert theirs.shape == (3, 64, 8, 8)
    assert model.config.hidden_sizes == [64]
    torch.testing.assert_close(theirs, both_stacks.flatten(1, 2), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(theirs[:, :32], both_stacks[:, 0], atol=1e-5, rtol=1e-5)  # the front camera's stack


def test_the_written_model_loads_as_lerobot_loads_it_offline(tmp_path):
    out = tmp_path / "encoder"
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, str(PEER / "hf_encoder.py"), str(SHIPPED), str(out)], env=env, check=True)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "hf_encoder.py", "model.safetensors"]
    frames = torch.rand(2, 3, 128, 128, generator=torch.Generator().manual_seed(1))
    torch.save(frames, tmp_path / "frames.pt")
    load = ("import sys, torch; from transformers import AutoModel; "
            "m = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True); "
            "torch.save(m(torch.load(sys.argv[2])).last_hidden_state, sys.argv[3]); print(m.config.hidden_sizes)")
    loaded = subprocess.run([sys.executable, "-c", load, str(out), str(tmp_path / "frames.pt"),
                             str(tmp_path / "maps.pt")], env=env, check=True, capture_output=True, text=True)
    assert json.loads(loaded.stdout.strip().splitlines()[-1]) == [64]
    with torch.no_grad():
        expected = hf_encoder.convert(SHIPPED)(frames).last_hidden_state
    torch.testing.assert_close(torch.load(tmp_path / "maps.pt"), expected)


def test_an_existing_directory_is_refused_and_kept(tmp_path):
    kept = tmp_path / "encoder"
    kept.mkdir()
    (kept / "mine.txt").write_text("a user's file")
    with pytest.raises(SystemExit, match="exists"):
        hf_encoder.write(SHIPPED, kept)
    assert [p.name for p in kept.iterdir()] == ["mine.txt"]
