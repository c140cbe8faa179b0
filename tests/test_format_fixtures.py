"""Data written by earlier versions still loads: run directories (checkpoint + journal),
transition and episode datasets made by the code of the commit each fixture folder is named after
(`tests/fixtures/formats/make_fixtures.py`, run once with that commit's package on the path), and
the policies and encoders shipped in `policies/`."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from robot_rl.agents.sac import SACConfig
from robot_rl.data.dataset import load_transitions
from robot_rl.data.episodes import EpisodeDataset
from robot_rl.tasks import get_task
from robot_rl.training.learner import LearnerConfig, LearnerCore

FIXTURES = Path(__file__).parent / "fixtures" / "formats"
WRITTEN_BY = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
REPO = Path(__file__).resolve().parents[1]


def test_there_are_fixtures_of_the_released_format():
    assert "2cb174d" in WRITTEN_BY  # 0.1 as it landed on 2026-11-24


@pytest.mark.parametrize("commit", WRITTEN_BY)
def test_run_directory_resumes_from_its_checkpoint_and_journal(commit, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / commit / "run", run)  # restoring writes (journal bookkeeping)
    task = get_task("arm_lift")
    config = LearnerConfig(task.obs_dim, task.action_dim, SACConfig(hidden_dims=(16, 16), batch_size=16),
                           warmup_transitions=50, seed=0)
    learner = LearnerCore(config, run)
    try:
        assert learner.restore()
        assert learner.agent.num_updates == 75 and learner.transitions_received == 150
        assert learner.policy_version > 0
        learner.train_step()  # and trains on from there
    finally:
        learner.close()


@pytest.mark.parametrize("commit", WRITTEN_BY)
def test_datasets_load(commit):
    arrays, attrs = load_transitions(FIXTURES / commit / "demos.zarr")
    assert attrs["task"] == "arm_lift" and attrs["episodes"] == 2
    assert len(arrays["reward"]) == arrays["obs"].shape[0] > 0 and np.isfinite(arrays["obs"]).all()
    episodes = EpisodeDataset(FIXTURES / commit / "episodes.zarr")
    assert len(episodes) == 1
    transitions = episodes.transitions(cameras=("front", "wrist"))
    assert transitions["obs_front"].shape[1:] == (16, 16, 3) and transitions["obs_front"].dtype == np.uint8


def test_shipped_policies_and_encoders_load():
    from robot_rl.agents.encoders import ImageEncoder, load_pretrained, pretrained_config
    from robot_rl.agents.frame_stack_policy import load_frame_stack_policy
    from robot_rl.agents.ppo import DeployedPolicy

    juggle = DeployedPolicy.load(REPO / "policies" / "quad_juggle")
    assert np.isfinite(juggle(np.zeros(juggle.obs_dim, np.float32))).all()
    car = load_frame_stack_policy(REPO / "policies" / "car_race_iql_64")
    assert car.frame_stack >= 1
    encoder_dir = REPO / "policies" / "encoders" / "arm_pick_cube_64"
    load_pretrained(ImageEncoder(pretrained_config(encoder_dir)), encoder_dir)
