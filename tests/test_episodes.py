"""Episode datasets: layout, episode boundaries, crash safety, validation and loading into buffers."""

import shutil

import numpy as np
import pytest
import zarr

from robot_rl.data.dataset import load_transitions, save_transitions
from robot_rl.data.episodes import EpisodeDataset, EpisodeSchema, EpisodeWriter
from robot_rl.data.frames import FrameReplayBuffer
from robot_rl.data.replay import ReplayBuffer
from robot_rl.transport.layout import transition_layout

SCHEMA = EpisodeSchema({"front": (2, 2, 3)}, state_dim=2, action_dim=1)
CONFIG = {"task": "toy", "control_hz": 10}


def _obs(value: int) -> dict:
    """Observation number `value`: its frame is filled with it, its state is (value, -value)."""
    return {"front": np.full((2, 2, 3), value, np.uint8), "state": np.array([value, -value], np.float32)}


def _record(writer, start, steps, terminated=False, labels=None):
    """Episode of observations start .. start + steps; the last step terminates or is cut off."""
    labels = labels or [None] * steps
    for t in range(steps):
        writer.add_step(_obs(start + t), np.array([t], np.float32), float(start + t),
                        terminated=terminated and t == steps - 1, truncated=False, intervention=t == 1,
                        success_label=labels[t], stamp=0.5 * t)
    return writer.end_episode(_obs(start + steps))


def _two_episodes(path):
    writer = EpisodeWriter(path, SCHEMA, CONFIG)
    assert _record(writer, 0, 3, terminated=True) == 0
    assert _record(writer, 10, 2) == 1
    return writer


def test_layout_holds_t_plus_one_observations_and_a_committed_index(tmp_path):
    _two_episodes(tmp_path / "d.zarr")
    group = zarr.open_group(str(tmp_path / "d.zarr"), mode="r")
    assert group["obs/front"].shape == (7, 2, 2, 3) and group["step/action"].shape == (5, 1)
    np.testing.assert_array_equal(group["episode_ends"][:], [3, 5])
    attrs = dict(group.attrs)
    assert attrs["format"] == "robot_rl.episodes" and attrs["schema_version"] == 1
    assert attrs["schema"] == {"cameras": {"front": [2, 2, 3]}, "state_dim": 2, "action_dim": 1}
    assert attrs["task_config"] == CONFIG and attrs["num_episodes"] == 2 and attrs["num_steps"] == 5
    assert attrs["created"] <= attrs["updated"]

    data = EpisodeDataset(tmp_path / "d.zarr")
    assert len(data) == 2 and data.num_steps == 5 and data.schema == SCHEMA
    first, last = data.episode(0), data.episode(-1)
    np.testing.assert_array_equal(first["state"][:, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(first["front"][:, 0, 0, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(last["state"][:, 0], [10, 11, 12])
    np.testing.assert_array_equal(first["terminated"], [False, False, True])
    # the second episode's last step set neither flag: it was cut off by the recorder, so truncated
    np.testing.assert_array_equal(last["truncated"], [False, True])
    np.testing.assert_array_equal(last["intervention"], [False, True])
    np.testing.assert_array_equal(last["stamp"], [0.0, 0.5])
    with pytest.raises(IndexError):
        data.episode(2)


def test_transitions_never_reach_into_the_next_episode(tmp_path):
    data = EpisodeDataset(_two_episodes(tmp_path / "d.zarr").path)
    tr = data.transitions()
    np.testing.assert_array_equal(tr["obs"][:, 0], [0, 1, 2, 10, 11])
    np.testing.assert_array_equal(tr["next_obs"][:, 0], [1, 2, 3, 11, 12])  # 2 -> 3, never 2 -> 10
    np.testing.assert_array_equal(tr["terminated"], [False, False, True, False, False])
    np.testing.assert_array_equal(tr["truncated"], [False, False, False, False, True])
    buffer = ReplayBuffer(10, transition_layout(2, 1))
    assert data.load_into(buffer) == 5
    np.testing.assert_array_equal(buffer.ordered()["next_obs"], tr["next_obs"])


def _killed(*args, **kwargs):
    raise OSError("killed before the commit")


def test_crash_loses_only_the_episode_in_progress(tmp_path, monkeypatch):
    path = tmp_path / "d.zarr"
    writer = _two_episodes(path)
    for t in range(2):  # the session dies before end_episode
        writer.add_step(_obs(50 + t), np.zeros(1), 0.0, False, False, False, None, 0.0)
    del writer
    assert len(EpisodeDataset(path)) == 2

    # The session dies inside end_episode: data written, index not yet committed.
    writer = EpisodeWriter(path, SCHEMA, CONFIG)
    monkeypatch.setattr(zarr.Group, "update_attributes", _killed)
    with pytest.raises(OSError):
        _record(writer, 20, 4)
    monkeypatch.undo()
    assert zarr.open_group(str(path), mode="r")["obs/state"].shape[0] == 7 + 5  # the uncommitted tail
    data = EpisodeDataset(path)
    assert len(data) == 2 and data.num_steps == 5
    np.testing.assert_array_equal(data.transitions()["obs"][:, 0], [0, 1, 2, 10, 11])

    # Reopening for appending truncates the tail; new episodes follow the committed ones.
    writer = EpisodeWriter(path, SCHEMA, CONFIG)
    group = zarr.open_group(str(path), mode="r")
    assert group["obs/state"].shape[0] == 7 and group["step/reward"].shape[0] == 5
    assert group["episode_ends"].shape[0] == 2
    assert _record(writer, 30, 1) == 2
    data = EpisodeDataset(path)
    assert len(data) == 3 and data.num_steps == 6
    np.testing.assert_array_equal(data.episode(2)["state"][:, 0], [30, 31])
    np.testing.assert_array_equal(data.episode(1)["state"][:, 0], [10, 11, 12])


def test_reader_sees_only_what_was_committed_when_it_opened(tmp_path):
    writer = _two_episodes(tmp_path / "d.zarr")
    data = EpisodeDataset(writer.path)
    _record(writer, 40, 2)
    assert len(data) == 2 and len(EpisodeDataset(writer.path)) == 3


def _set_attr(path, **attrs):
    zarr.open_group(str(path), mode="r+").attrs.update(attrs)


@pytest.mark.parametrize("damage, message", [
    (lambda p: _set_attr(p, schema_version=2), "newer than the version 1"),
    (lambda p: _set_attr(p, schema_version=0), "reads only version 1"),
    (lambda p: _set_attr(p, format="robot_rl.transitions"), "not 'robot_rl.episodes'"),
    (lambda p: shutil.rmtree(p / "step" / "reward"), "'step/reward' is missing"),
    (lambda p: zarr.open_group(str(p), mode="r+")["obs/state"].resize((6, 2)), "6 rows, but 7 observations"),
    (lambda p: zarr.open_group(str(p), mode="r+")["episode_ends"].set_basic_selection(1, 4), "episode_ends must rise"),
    (lambda p: _set_attr(p, num_steps=4), "chunk manifest lists rows"),
    (lambda p: _set_attr(p, schema={"cameras": {}, "state_dim": 2}), "bad schema"),
])
def test_damaged_or_foreign_datasets_are_refused_with_the_reason(tmp_path, damage, message):
    path = tmp_path / "d.zarr"
    _two_episodes(path)
    damage(path)
    with pytest.raises(ValueError, match=message):
        EpisodeDataset(path)
    with pytest.raises(ValueError, match=message):  # nor appended to
        EpisodeWriter(path, SCHEMA, CONFIG)


def test_appending_needs_the_same_schema_and_task_config(tmp_path):
    _two_episodes(tmp_path / "d.zarr")
    with pytest.raises(ValueError, match="schema"):
        EpisodeWriter(tmp_path / "d.zarr", EpisodeSchema({"front": (2, 2, 3)}, 3, 1), CONFIG)
    with pytest.raises(ValueError, match="task_config"):
        EpisodeWriter(tmp_path / "d.zarr", SCHEMA, {**CONFIG, "control_hz": 20})


def _corrupt(kind):
    obs, kw = _obs(1), dict(action=np.zeros(1), reward=0.0, terminated=False, truncated=False, intervention=False,
                            success_label=None, stamp=0.0)
    if kind == "frame dtype":
        obs["front"] = obs["front"].astype(np.float32)
    elif kind == "frame shape":
        obs["front"] = np.zeros((2, 3, 3), np.uint8)
    elif kind == "missing camera":
        del obs["front"]
    elif kind == "unknown entry":
        obs["depth"] = np.zeros((2, 2), np.float32)
    elif kind == "nan state":
        obs["state"] = np.array([np.nan, 0], np.float32)
    elif kind == "action shape":
        kw["action"] = np.zeros(2)
    elif kind == "inf action":
        kw["action"] = np.array([np.inf])
    elif kind == "bool action":
        kw["action"] = np.array([True])
    elif kind == "nan reward":
        kw["reward"] = float("nan")
    elif kind == "int flag":
        kw["terminated"] = 1
    elif kind == "label":
        kw["success_label"] = "yes"
    elif kind == "stamp":
        kw["stamp"] = float("inf")
    return obs, kw


@pytest.mark.parametrize("kind", ["frame dtype", "frame shape", "missing camera", "unknown entry", "nan state",
                                  "action shape", "inf action", "bool action", "nan reward", "int flag", "label",
                                  "stamp"])
def test_bad_steps_are_refused_and_nothing_is_staged_or_written(tmp_path, kind):
    writer = EpisodeWriter(tmp_path / "d.zarr", SCHEMA, CONFIG)
    writer.add_step(_obs(0), np.zeros(1), 0.0, False, False, False, None, 0.0)
    obs, kw = _corrupt(kind)
    with pytest.raises(ValueError):
        writer.add_step(obs, **kw)
    assert writer.steps_in_episode == 1
    with pytest.raises(ValueError, match="final_obs\\['state'\\]"):  # nor does a bad final observation commit
        writer.end_episode({"front": _obs(1)["front"]})
    assert len(EpisodeDataset(writer.path)) == 0 and writer.steps_in_episode == 1
    writer.end_episode(_obs(1))
    np.testing.assert_array_equal(EpisodeDataset(writer.path).episode(0)["state"][:, 0], [0, 1])


def test_episode_structure_is_enforced(tmp_path):
    writer = EpisodeWriter(tmp_path / "d.zarr", SCHEMA, CONFIG)
    with pytest.raises(ValueError, match="no steps"):
        writer.end_episode(_obs(0))
    writer.add_step(_obs(0), np.zeros(1), 0.0, True, False, False, None, 0.0)
    with pytest.raises(ValueError, match="episode ended"):
        writer.add_step(_obs(1), np.zeros(1), 0.0, False, False, False, None, 0.1)
    writer.discard_episode()
    assert writer.steps_in_episode == 0 and len(EpisodeDataset(writer.path)) == 0


@pytest.mark.parametrize("cameras, state_dim, action_dim, message", [
    ({"state": (2, 2, 3)}, 2, 1, "camera name 'state'"),
    ({"next_front": (2, 2, 3)}, 2, 1, "next_"),
    ({"front": (2, 2, 4)}, 2, 1, r"\(H, W, 3\)"),
    ({"front": (2, 2, 3)}, -1, 1, "state_dim"),
    ({"front": (2, 2, 3)}, 2, 0, "action_dim"),
])
def test_bad_schemas_are_refused(cameras, state_dim, action_dim, message):
    with pytest.raises(ValueError, match=message):
        EpisodeSchema(cameras, state_dim, action_dim)


def test_task_config_must_be_json(tmp_path):
    with pytest.raises(ValueError, match="JSON"):
        EpisodeWriter(tmp_path / "d.zarr", SCHEMA, {"gain": np.float32(1.0)})
    assert not (tmp_path / "d.zarr").exists()


def test_labelled_frames_are_the_observations_the_labelled_steps_reached(tmp_path):
    writer = EpisodeWriter(tmp_path / "d.zarr", SCHEMA, CONFIG)
    _record(writer, 0, 3, labels=[None, False, True])
    _record(writer, 10, 2, labels=[False, None])
    frames, success = EpisodeDataset(writer.path).labelled_frames("front")
    np.testing.assert_array_equal(frames[:, 0, 0, 0], [2, 3, 11])
    np.testing.assert_array_equal(success, [False, True, False])
    with pytest.raises(ValueError, match="no camera 'wrist'"):
        EpisodeDataset(writer.path).labelled_frames("wrist")


def _random_episodes(path, rng, lengths):
    """Episodes of random frames; observation i (in dataset order) has state (i, -i)."""
    schema = EpisodeSchema({"front": (3, 4, 3), "wrist": (2, 2, 3)}, state_dim=2, action_dim=2)
    writer = EpisodeWriter(path, schema, CONFIG)
    source, number = {}, 0

    def observation():
        nonlocal number
        obs = {"front": rng.integers(0, 256, (3, 4, 3), np.uint8), "wrist": rng.integers(0, 256, (2, 2, 3), np.uint8),
               "state": np.array([number, -number], np.float32)}
        source[number] = obs
        number += 1
        return obs

    for length in lengths:
        for t in range(length):
            writer.add_step(observation(), rng.normal(size=2), float(t), t == length - 1, False, False, None, 0.0)
        writer.end_episode(observation())
    return EpisodeDataset(path), source


def test_dataset_into_frame_buffer_samples_the_source_frames_exactly(tmp_path):
    data, source = _random_episodes(tmp_path / "d.zarr", np.random.default_rng(0), [3, 1, 4])
    buffer = FrameReplayBuffer(20, {"front": (3, 4, 3), "wrist": (2, 2, 3)}, state_dim=2, action_dim=2)
    assert data.load_into(buffer) == 8
    assert buffer.slots_written == 8 + 3 and len(buffer) == 8  # every observation stored once
    batch = buffer.sample(300, np.random.default_rng(1))
    ids, next_ids = batch["state"][:, 0].astype(int), batch["next_state"][:, 0].astype(int)
    np.testing.assert_array_equal(next_ids, ids + 1)
    assert set(ids) == {0, 1, 2, 4, 6, 7, 8, 9}  # 3, 5 and 10 end episodes: no transition starts there
    for i, obs_id in enumerate(ids):
        for camera in ("front", "wrist"):
            np.testing.assert_array_equal(batch[camera][i], source[obs_id][camera])
            np.testing.assert_array_equal(batch[f"next_{camera}"][i], source[obs_id + 1][camera])
    np.testing.assert_array_equal(batch["terminated"], np.isin(ids, [2, 4, 9]))
    tr = data.transitions()
    np.testing.assert_array_equal(batch["action"], tr["action"][np.searchsorted(tr["obs"][:, 0], ids)])


def test_dataset_into_a_features_only_buffer_encodes_each_observation_once(tmp_path):
    data, source = _random_episodes(tmp_path / "d.zarr", np.random.default_rng(0), [2, 3])
    calls = []

    def encode(observations):
        calls.append(len(observations["front"]))
        return {"front_feat": observations["front"].reshape(len(observations["front"]), -1)[:, :4] / 255.0}

    buffer = FrameReplayBuffer(10, {}, state_dim=2, action_dim=2, features={"front_feat": 4})
    with pytest.raises(ValueError, match="encode"):
        data.load_into(buffer)
    data.load_into(buffer, encode)
    assert calls == [3, 4] and buffer.frames == {}
    batch = buffer.sample(50, np.random.default_rng(0))
    assert batch["front_feat"].dtype == np.float16 and "front" not in batch
    for i, obs_id in enumerate(batch["state"][:, 0].astype(int)):
        expected = source[obs_id + 1]["front"].reshape(-1)[:4] / 255.0
        np.testing.assert_allclose(batch["next_front_feat"][i], expected, rtol=1e-3)


def test_dataset_refuses_a_buffer_it_cannot_fill(tmp_path):
    data, _ = _random_episodes(tmp_path / "d.zarr", np.random.default_rng(0), [2])
    with pytest.raises(ValueError, match="cameras \\['side'\\]"):
        data.load_into(FrameReplayBuffer(10, {"side": (3, 4, 3)}, 2, 2))
    with pytest.raises(ValueError, match="state_dim"):
        data.load_into(FrameReplayBuffer(10, {"front": (3, 4, 3)}, 3, 2))


def test_transition_datasets_still_round_trip_and_are_not_episode_datasets(tmp_path):
    arrays = {"obs": np.zeros((3, 2), np.float32), "reward": np.arange(3, dtype=np.float32)}
    save_transitions(tmp_path / "t.zarr", arrays, {"task": "toy"})
    loaded, attrs = load_transitions(tmp_path / "t.zarr")
    np.testing.assert_array_equal(loaded["reward"], arrays["reward"])
    assert attrs["task"] == "toy" and attrs["format"] == "robot_rl.transitions"
    with pytest.raises(ValueError, match="holds 'robot_rl.transitions' data"):
        EpisodeDataset(tmp_path / "t.zarr")
    # files written before the format attribute existed still load
    group = zarr.open_group(str(tmp_path / "t.zarr"), mode="r+")
    group.attrs.put({"schema_version": 1, "task": "toy"})
    assert load_transitions(tmp_path / "t.zarr")[1]["task"] == "toy"


def test_each_episode_keeps_the_tasks_success_check_beside_its_label(tmp_path):
    path = tmp_path / "d.zarr"
    writer = _two_episodes(path)  # written without a check: unchecked
    group = zarr.open_group(str(path), mode="r+")
    del group.attrs["success_checks"]  # as a dataset written before the checks were kept
    assert EpisodeDataset(path).success_checks.tolist() == [-1, -1]
    writer = EpisodeWriter(path, SCHEMA, CONFIG)  # appending to it
    writer.add_step(_obs(20), np.array([0], np.float32), 0.0, False, False, True, True, 0.0)
    writer.end_episode(_obs(21), success_check=False)  # a person said success, the task's check disagrees
    data = EpisodeDataset(path)
    assert data.success_checks.tolist() == [-1, -1, 0] and data.episode(2)["success_label"].tolist() == [1]
    with pytest.raises(ValueError, match="success_check"):
        writer.end_episode(_obs(22), success_check="yes")
    group.attrs["success_checks"] = [1, "no", 0]
    with pytest.raises(ValueError, match="success_checks attribute"):
        EpisodeDataset(path)
