"""Dataset integrity: a missing or damaged chunk of any array fails every load and `dataset verify`
naming the array, chunk and episodes; dataset outputs are refused unless --append or --overwrite."""

import hashlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import zarr

from robot_rl.cli import main
from robot_rl.arguments import replace_dataset
from robot_rl.data import dataset
from robot_rl.data.dataset import load_transitions, save_transitions
from robot_rl.data.episodes import EpisodeDataset, EpisodeSchema, EpisodeWriter
from robot_rl.data.integrity import MANIFEST_ATTR, DatasetCorruptError
from robot_rl.data.verify import verify_dataset
from robot_rl.outputs import OutputExistsError, UserError

SCHEMA = EpisodeSchema({"front": (2, 2, 3)}, state_dim=2, action_dim=1)
EPISODE_STEPS = (3, 4, 5)  # step rows 0-2, 3-6, 7-11; observation rows 0-3, 4-8, 9-14


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """16-byte chunks: one frame, two states, four actions or sixteen flags per chunk, so chunks hold
    parts of one or several episodes."""
    monkeypatch.setattr(dataset, "CHUNK_BYTES", 16)


def _obs(value: int) -> dict:
    return {"front": np.full((2, 2, 3), value, np.uint8), "state": np.array([value, -value], np.float32)}


def _episodes(path):
    writer = EpisodeWriter(path, SCHEMA, {"task": "toy"})
    for episode, steps in enumerate(EPISODE_STEPS):
        for t in range(steps):
            writer.add_step(_obs(10 * episode + t), np.array([t], np.float32), float(t), terminated=t == steps - 1,
                            truncated=False, intervention=False, success_label=t == steps - 1, stamp=0.1 * t)
        writer.end_episode(_obs(10 * episode + steps))
    return path


def _transitions(rows=12):
    done = np.isin(np.arange(rows), [2, 6, 11])  # the episodes of EPISODE_STEPS
    return {"obs": np.arange(2 * rows, dtype=np.float32).reshape(rows, 2), "action": np.ones((rows, 1), np.float32),
            "reward": np.arange(rows, dtype=np.float32), "terminated": done, "truncated": np.zeros(rows, bool),
            "obs_front": np.zeros((rows, 2, 2, 3), np.uint8)}


def _tree_digest(path):
    return {p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def _verify(path, capsys):
    code = main(["dataset", "verify", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def episodes(tmp_path):
    return _episodes(tmp_path / "episodes.zarr")


@pytest.mark.parametrize("array, chunk, episodes_named", [
    ("obs/front", "c/4/0/0/0", "episode 1"),  # observation row 4: episode 1's first
    ("obs/state", "c/7/0", "episode 2"),  # observation row 14: the last
    ("step/action", "c/1/0", "episodes 1-2"),  # step rows 4-7
    ("step/reward", "c/0", "episodes 0-1"),  # step rows 0-3
    ("step/terminated", "c/0", "episodes 0-2"),
    ("step/truncated", "c/0", "episodes 0-2"),
    ("step/intervention", "c/0", "episodes 0-2"),
    ("step/success_label", "c/0", "episodes 0-2"),
    ("step/stamp", "c/5", "episode 2"),  # step rows 10-11
    ("episode_ends", "c/1", "episode 2"),
])
def test_a_missing_chunk_of_any_array_fails_every_load_naming_array_chunk_and_episodes(
        episodes, tmp_path, capsys, array, chunk, episodes_named):
    damaged = tmp_path / "damaged.zarr"
    shutil.copytree(episodes, damaged)
    (damaged / array / chunk).unlink()
    expected = f"array '{array}' chunk {chunk} \\(rows [0-9-]+, {episodes_named}\\) is missing"
    with pytest.raises(DatasetCorruptError, match=expected):
        EpisodeDataset(damaged)
    with pytest.raises(DatasetCorruptError, match=expected):  # nor appended to
        EpisodeWriter(damaged, SCHEMA, {"task": "toy"})
    code, out, err = _verify(damaged, capsys)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert str(damaged) in err and f"'{array}' chunk {chunk}" in err and episodes_named in err


def test_verify_checks_every_chunk_of_an_intact_dataset(episodes, capsys):
    # 15 frame chunks, 8 state, 3 action, 3 reward, 1 for each flag and the labels, 6 stamp, 2 episode ends
    summary = f"{episodes}: OK (robot_rl.episodes, 3 episodes, 10 arrays, 41 chunks checked)\n"
    assert _verify(episodes, capsys)[:2] == (0, summary)


@pytest.mark.parametrize("damage", [lambda data: data[:-3], lambda data: bytes(len(data))],
                         ids=["truncated", "garbled"])
def test_a_damaged_chunk_names_array_and_chunk_instead_of_a_codec_traceback(episodes, tmp_path, capsys, damage):
    damaged = tmp_path / "damaged.zarr"
    shutil.copytree(episodes, damaged)
    chunk = damaged / "obs" / "front" / "c" / "5" / "0" / "0" / "0"
    chunk.write_bytes(damage(chunk.read_bytes()))
    data = EpisodeDataset(damaged)  # opening lists chunks without reading them
    expected = r"array 'obs/front' chunk c/5/0/0/0 \(rows 5, episode 1\) does not decode \(ValueError: Stored"
    np.testing.assert_array_equal(data.episode(0)["front"][:, 0, 0, 0], [0, 1, 2, 3])  # other chunks still read
    for load in (lambda: data.episode(1), lambda: data.transitions(cameras=["front"]),
                 lambda: data.observations("front"), lambda: data.labelled_frames("front")):
        with pytest.raises(DatasetCorruptError, match=expected):
            load()
    code, _, err = _verify(damaged, capsys)
    assert code == 2 and "'obs/front' chunk c/5/0/0/0" in err and "Traceback" not in err


def test_appending_refuses_a_damaged_chunk_it_would_rewrite(episodes, tmp_path):
    damaged = tmp_path / "damaged.zarr"
    shutil.copytree(episodes, damaged)
    chunk = damaged / "obs" / "state" / "c" / "7" / "0"  # row 14 of 15: the next observation goes beside it
    chunk.write_bytes(chunk.read_bytes()[:-1])
    with pytest.raises(DatasetCorruptError, match=r"'obs/state' chunk c/7/0 \(rows 14, episode 2\) does not decode"):
        EpisodeWriter(damaged, SCHEMA, {"task": "toy"})
    path = tmp_path / "t.zarr"
    save_transitions(path, _transitions(), {"task": "toy"})
    chunk = path / "terminated" / "c" / "0"  # rows 0-11 of 16: rewritten by an append
    chunk.write_bytes(b"")
    with pytest.raises(DatasetCorruptError, match=r"'terminated' chunk c/0 \(rows 0-11, episodes 0-2\)"):
        save_transitions(path, _transitions(2), {"task": "toy"}, append=True)


@pytest.mark.parametrize("array, chunk, episodes_named", [
    ("obs", "c/3/0", "episodes 1-2"),  # rows 6-7: episode 1's last, episode 2's first
    ("obs_front", "c/3/0/0/0", "episode 1"),  # row 3
    ("action", "c/0/0", "episodes 0-1"),  # rows 0-3
    ("reward", "c/2", "episode 2"),  # rows 8-11
    ("terminated", "c/0", "episodes 0-2"),
])
def test_a_missing_transition_chunk_fails_the_load_naming_array_and_episodes(tmp_path, capsys, array, chunk,
                                                                               episodes_named):
    path = tmp_path / "t.zarr"
    save_transitions(path, _transitions(), {"task": "toy"})
    (path / array / chunk).unlink()
    expected = f"array '{array}' chunk {chunk} \\(rows [0-9-]+, {episodes_named}\\) is missing"
    with pytest.raises(DatasetCorruptError, match=expected):
        load_transitions(path)
    code, _, err = _verify(path, capsys)
    assert code == 2 and f"'{array}' chunk {chunk}" in err


def test_datasets_without_a_manifest_still_load_and_verify_says_what_it_cannot_check(episodes, capsys):
    group = zarr.open_group(str(episodes), mode="r+")
    group.attrs.put({k: v for k, v in group.attrs.asdict().items() if k != MANIFEST_ATTR})
    (episodes / "step" / "reward" / "c" / "0").unlink()  # unnoticed: once, zarr did not write zero chunks
    assert EpisodeDataset(episodes).num_steps == 12
    code, out, _ = _verify(episodes, capsys)
    assert code == 0 and "missing chunks cannot be detected" in out
    writer = EpisodeWriter(episodes, SCHEMA, {"task": "toy"})  # appends keep it as it was
    writer.add_step(_obs(0), np.zeros(1, np.float32), 0.0, False, False, False, None, 0.0)
    writer.end_episode(_obs(1))
    assert MANIFEST_ATTR not in zarr.open_group(str(episodes), mode="r").attrs
    assert not verify_dataset(episodes).checksummed


def test_save_transitions_refuses_overwrites_atomically_or_appends_with_the_same_fields(tmp_path):
    path = tmp_path / "t.zarr"
    save_transitions(path, _transitions(), {"task": "toy", "episodes": 3})
    before = _tree_digest(path)
    with pytest.raises(OutputExistsError, match=f"{path} already exists; pass --append or --overwrite"):
        save_transitions(path, _transitions(4), {"task": "toy"})
    with pytest.raises(UserError, match="not 'other'"):
        save_transitions(path, _transitions(), {"task": "other"}, append=True)
    with pytest.raises(UserError, match="appending needs the same fields"):
        save_transitions(path, {"reward": np.zeros(2, np.float32)}, {"task": "toy"}, append=True)
    assert _tree_digest(path) == before

    save_transitions(path, _transitions(), {"task": "toy", "episodes": 3}, append=True)
    arrays, attrs = load_transitions(path)
    np.testing.assert_array_equal(arrays["reward"], np.tile(np.arange(12), 2))
    assert attrs["episodes"] == 6 and attrs[MANIFEST_ATTR]["episode_ends"] == [3, 7, 12, 15, 19, 24]
    save_transitions(path, _transitions(4), {"task": "toy"}, overwrite=True)
    assert len(load_transitions(path)[0]["reward"]) == 4
    assert [p.name for p in tmp_path.iterdir()] == ["t.zarr"]  # no temporary left behind


def test_demos_task_refuses_an_existing_dataset_unless_append_or_overwrite(tmp_path):
    out = tmp_path / "demos.zarr"

    def demos(*flags):
        return subprocess.run([sys.executable, "-m", "robot_rl.cli", "demos", "--task", "arm_lift", "--episodes", "1",
                               "--out", str(out), *flags], capture_output=True, text=True, timeout=120, check=False)

    assert demos().returncode == 0
    rows = len(load_transitions(out)[0]["reward"])
    before = _tree_digest(out)
    refused = demos()
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"robot-rl demos: dataset {out} already exists; pass --append or --overwrite" in refused.stderr
    assert _tree_digest(out) == before
    assert demos("--append").returncode == 0
    assert len(load_transitions(out)[0]["reward"]) == 2 * rows
    assert demos("--overwrite", "--seed", "1").returncode == 0
    arrays, attrs = load_transitions(out)
    assert len(arrays["reward"]) > 0 and attrs["seed"] == 1 and attrs["episodes"] == 1


def test_an_episode_writer_builds_a_dataset_in_an_empty_directory(tmp_path):
    (tmp_path / "new.zarr").mkdir()  # what atomic_path(directory=True) hands a replacement to fill
    assert len(EpisodeDataset(_episodes(tmp_path / "new.zarr"))) == 3


def test_record_overwrite_swaps_the_new_recording_in_only_when_there_is_one(tmp_path, episodes, capsys):
    recording = tmp_path / ".robot_rl-tmp-episodes.zarr-1"
    replace_dataset(episodes, recording)  # the session recorded nothing
    assert "nothing was recorded" in capsys.readouterr().out and len(EpisodeDataset(episodes)) == 3
    writer = EpisodeWriter(recording, SCHEMA, {"task": "toy"})
    writer.add_step(_obs(0), np.zeros(1, np.float32), 0.0, False, False, False, None, 0.0)
    writer.end_episode(_obs(1))
    replace_dataset(episodes, recording)
    assert len(EpisodeDataset(episodes)) == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["episodes.zarr"]
