"""LeRobotDataset v3 export and import (issue 24): export -> import gives identical arrays (frames at
PSNR >= 35 dB), the exported layout is LeRobot v3's, a dataset laid out as LeRobot records it imports,
damaged files are refused naming them, and the CLI never overwrites without --overwrite."""

from __future__ import annotations

import json
import shutil
from fractions import Fraction

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robot_rl.cli import main
from robot_rl.data.episodes import EpisodeDataset, EpisodeSchema, EpisodeWriter
from robot_rl.data.lerobot_export import VideoSettings, export_lerobot
from robot_rl.data.lerobot_format import LeRobotEpisodes, import_lerobot, open_episodes

CAMERAS = {"front": (48, 64, 3), "wrist": (32, 32, 3)}
LENGTHS = (7, 12, 4)
TASK_CONFIG = {"task": "pick_cube", "goal": "put the red cube in the bowl", "control_hz": 20}


def scene(t: int, shape: tuple[int, int, int], seed: int) -> np.ndarray:
    """A rendered-looking frame: shaded background, a moving disc, a little sensor noise."""
    h, w, _ = shape
    yy, xx = np.mgrid[0:h, 0:w]
    frame = np.stack([40 + 150 * xx / w, 60 + 120 * yy / h, np.full((h, w), 90.0 + 10 * seed)], axis=-1)
    cx, cy = w / 2 + w / 4 * np.cos(t / 3 + seed), h / 2 + h / 4 * np.sin(t / 3 + seed)
    frame[(xx - cx) ** 2 + (yy - cy) ** 2 < (min(h, w) / 5) ** 2] = (200, 50, 40)
    noise = np.random.default_rng(1000 * seed + t).normal(0, 2, frame.shape)
    return np.clip(frame + noise, 0, 255).astype(np.uint8)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """Three episodes of different lengths: two cameras, state, actions, rewards, interventions, every
    kind of success label, and each way an episode ends (terminated, truncated, both)."""
    path = tmp_path_factory.mktemp("ours") / "episodes.zarr"
    writer = EpisodeWriter(path, EpisodeSchema(CAMERAS, 5, 4), TASK_CONFIG)
    rng = np.random.default_rng(0)
    endings = [(True, False), (False, True), (True, True)]
    for e, steps in enumerate(LENGTHS):
        def obs(t):
            return {**{n: scene(t, s, e + i) for i, (n, s) in enumerate(CAMERAS.items())},
                    "state": rng.normal(size=5).astype(np.float32)}
        for t in range(steps):
            last = t == steps - 1
            writer.add_step(obs(t), rng.uniform(-1, 1, 4), float(rng.normal()), last and endings[e][0],
                            last and endings[e][1], bool(rng.random() < 0.3), [None, False, True][t % 3],
                            1.7e9 + 0.05 * t + 1e-7 * rng.random() + 100 * e)
        writer.end_episode(obs(steps))
    return path


@pytest.fixture(scope="module")
def exported(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("lerobot") / "ds"
    summary = export_lerobot(source, out, fps=20)
    assert (summary.episodes, summary.frames, summary.fps) == (3, sum(LENGTHS), 20)
    return out


def test_round_trip_gives_identical_arrays_and_frames_at_35_db(source, exported, tmp_path):
    imported = import_lerobot(exported, tmp_path / "back.zarr")
    original = EpisodeDataset(source)
    assert imported.schema == original.schema and imported.task_config == original.task_config
    assert len(imported) == 3 and imported.num_steps == original.num_steps
    worst = np.inf
    for i in range(3):
        a, b = original.episode(i), imported.episode(i)
        assert a.keys() == b.keys()
        for key in a:
            assert b[key].dtype == a[key].dtype and b[key].shape == a[key].shape, key
            if key in CAMERAS:
                worst = min(worst, *(psnr(x, y) for x, y in zip(a[key], b[key])))
            else:
                np.testing.assert_array_equal(b[key], a[key], err_msg=f"episode {i} {key}")
    assert worst >= 35.0, f"worst frame PSNR {worst:.1f} dB"


def test_lossy_settings_are_measured_not_assumed(source, tmp_path):
    """The 35 dB floor is a real check: AV1 at LeRobot's recording quality (4:2:0, crf 30) misses it on the
    same frames, so the round trip test above would fail with it."""
    out = tmp_path / "av1"
    export_lerobot(source, out, fps=20, video=VideoSettings(codec="libsvtav1", pix_fmt="yuv420p", crf=30))
    original, view = EpisodeDataset(source), LeRobotEpisodes(out)
    worst = min(psnr(x, y) for x, y in zip(original.episode(1)["front"], view.episode(1)["front"]))
    assert 20.0 < worst < 35.0, worst


def test_exported_layout_is_lerobot_v3(exported):
    info = json.loads((exported / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 20
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, sum(LENGTHS), 1)
    assert info["splits"] == {"train": "0:3"} and info["chunks_size"] == 1000
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    features = info["features"]
    expected = {"observation.images.front": ("video", [48, 64, 3]), "observation.images.wrist": ("video", [32, 32, 3]),
                "observation.state": ("float32", [5]), "action": ("float32", [4]),
                "next.reward": ("float32", [1]), "next.done": ("bool", [1]), "next.truncated": ("bool", [1]),
                "next.success": ("bool", [1]), "complementary_info.is_intervention": ("bool", [1]),
                "complementary_info.terminated": ("bool", [1]), "complementary_info.success_label": ("int8", [1]),
                "complementary_info.stamp": ("float64", [1]), "timestamp": ("float32", [1]),
                "frame_index": ("int64", [1]), "episode_index": ("int64", [1]), "index": ("int64", [1]),
                "task_index": ("int64", [1])}
    assert {k: (f["dtype"], f["shape"]) for k, f in features.items()} == expected
    front = features["observation.images.front"]
    assert front["names"] == ["height", "width", "channels"]
    assert front["info"]["video.codec"] == "h264" and front["info"]["video.pix_fmt"] == "yuv444p"
    assert (front["info"]["video.height"], front["info"]["video.width"], front["info"]["video.fps"]) == (48, 64, 20)

    # Frame rows: every non-video feature a column of the type LeRobot's `datasets` features give it.
    data = pq.read_table(exported / "data/chunk-000/file-000.parquet")
    assert set(data.column_names) == {k for k, f in features.items() if f["dtype"] != "video"}
    assert data.schema.field("action").type == pa.list_(pa.float32(), 4)
    assert data.schema.field("observation.state").type == pa.list_(pa.float32(), 5)
    assert data.schema.field("next.reward").type == pa.float32() and data.schema.field("next.done").type == pa.bool_()
    assert data["index"].to_pylist() == list(range(sum(LENGTHS)))
    assert data["timestamp"].to_pylist()[:3] == pytest.approx([0.0, 0.05, 0.1])
    assert data["next.done"].to_pylist().count(True) == 3  # each episode's last frame

    episodes = pq.read_table(exported / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert episodes["episode_index"] == [0, 1, 2] and episodes["length"] == list(LENGTHS)
    assert episodes["dataset_from_index"] == [0, 7, 19] and episodes["dataset_to_index"] == [7, 19, 23]
    assert episodes["tasks"] == [[TASK_CONFIG["goal"]]] * 3
    for key, (height, width) in (("front", (48, 64)), ("wrist", (32, 32))):
        prefix = f"videos/observation.images.{key}/"
        starts, stops = episodes[prefix + "from_timestamp"], episodes[prefix + "to_timestamp"]
        assert starts[0] == 0 and starts[1:] == stops[:-1]  # episodes one after another in one file
        # Each span holds the episode's frames and its final observation.
        assert [round((b - a) * 20) for a, b in zip(starts, stops)] == [n + 1 for n in LENGTHS]
        with av.open(str(exported / f"videos/observation.images.{key}/chunk-000/file-000.mp4")) as video:
            stream = video.streams.video[0]
            times = [float(f.pts * stream.time_base) for f in video.decode(stream)]
            assert (stream.height, stream.width) == (height, width)
        assert times == pytest.approx([k / 20 for k in range(sum(LENGTHS) + 3)], abs=1e-6)

    tasks = pq.read_table(exported / "meta/tasks.parquet")
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]  # pandas reads it as the index
    assert tasks.to_pydict() == {"task_index": [0], "task": [TASK_CONFIG["goal"]]}

    stats = json.loads((exported / "meta/stats.json").read_text())
    for key, feature in features.items():
        assert {"min", "max", "mean", "std", "count", "q01", "q50", "q99"} <= set(stats[key]), key
        if feature["dtype"] == "video":
            assert np.shape(stats[key]["mean"]) == (3, 1, 1) and 0 <= np.min(stats[key]["min"]) <= 1
    assert stats["index"]["max"] == [sum(LENGTHS) - 1] and stats["action"]["count"] == [sum(LENGTHS)]


def write_lerobot_recording(root, broken_mp4: bool = False):
    """A dataset laid out as LeRobot's recorder writes it: T frames per episode (no final observation),
    AV1 4:2:0 video, next.reward/next.done/next.success, a second state feature, tasks as the pandas index
    (checked against a dataset lerobot 0.4.4's own LeRobotDataset.save_episode wrote)."""
    fps, lengths, shape = 10, (5, 3), (32, 48, 3)
    meta = root / "meta"
    (meta / "episodes/chunk-000").mkdir(parents=True)
    (root / "data/chunk-000").mkdir(parents=True)
    video_dir = root / "videos/observation.images.top/chunk-000"
    video_dir.mkdir(parents=True)
    features = {"observation.environment_state": {"dtype": "float32", "shape": [2], "names": None},
                "observation.state": {"dtype": "float32", "shape": [3], "names": ["a", "b", "c"]},
                # Channels first, as LeRobot's HIL-SERL recorder (gym_manipulator) declares its cameras.
                "observation.images.top": {"dtype": "video", "shape": [3, 32, 48],
                                           "names": ["channels", "height", "width"]},
                "action": {"dtype": "float32", "shape": [2], "names": None},
                "next.reward": {"dtype": "float32", "shape": [1], "names": None},
                "next.done": {"dtype": "bool", "shape": [1], "names": None},
                "next.success": {"dtype": "bool", "shape": [1], "names": None}}
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for key in ("frame_index", "episode_index", "index", "task_index"):
        features[key] = {"dtype": "int64", "shape": [1], "names": None}
    info = {"codebase_version": "v3.0", "robot_type": "so101", "total_episodes": 2, "total_frames": 8,
            "total_tasks": 2, "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 200,
            "fps": fps, "splits": {"train": "0:2"},
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4", "features": features}
    (meta / "info.json").write_text(json.dumps(info))
    pandas_meta = {"index_columns": ["__index_level_0__"], "columns": []}
    tasks = pa.table({"task_index": [0, 1], "__index_level_0__": ["pick", "place"]})
    pq.write_table(tasks.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()}), meta / "tasks.parquet")
    rows = {k: [] for k in features if k != "observation.images.top"}
    frames = []
    for e, n in enumerate(lengths):
        for k in range(n):
            rows["observation.environment_state"].append([10.0 * e + k, -1.0])
            rows["observation.state"].append([e, k, 0.5])
            rows["action"].append([0.1 * k, -0.1 * e])
            rows["next.reward"].append(float(k == n - 1))
            rows["next.done"].append(k == n - 1)
            rows["next.success"].append(e == 0 and k == n - 1)
            rows["timestamp"].append(k / fps)
            rows["frame_index"].append(k)
            rows["episode_index"].append(e)
            rows["index"].append(len(frames))
            rows["task_index"].append(e)
            frames.append(np.full(shape, (60 + 30 * k, 100 + 50 * e, 150), np.uint8))
    columns = {k: pa.array(v, pa.list_(pa.float32(), len(v[0]))) if isinstance(v[0], list) else
               pa.array(v, pa.float32() if features[k]["dtype"] == "float32" else None) for k, v in rows.items()}
    pq.write_table(pa.table(columns), root / "data/chunk-000/file-000.parquet")
    with av.open(str(video_dir / "file-000.mp4"), "w") as container:
        stream = container.add_stream("libsvtav1", rate=fps, options={"g": "2", "crf": "30", "preset": "12"})
        stream.height, stream.width, stream.pix_fmt = 32, 48, "yuv420p"
        stream.codec_context.time_base = Fraction(1, fps)
        for i, frame in enumerate(frames):
            video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
            video_frame.pts = i
            for packet in stream.encode(video_frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    if broken_mp4:
        (video_dir / "file-000.mp4").write_bytes(b"not a video")
    key = "videos/observation.images.top/"
    episodes = {"episode_index": [0, 1], "tasks": [["pick"], ["place"]], "length": list(lengths),
                "data/chunk_index": [0, 0], "data/file_index": [0, 0], "dataset_from_index": [0, 5],
                "dataset_to_index": [5, 8], key + "chunk_index": [0, 0], key + "file_index": [0, 0],
                key + "from_timestamp": [0.0, 0.5], key + "to_timestamp": [0.5, 0.8],
                "meta/episodes/chunk_index": [0, 0], "meta/episodes/file_index": [0, 0],
                "stats/action/mean": [[0.2, 0.0], [0.1, -0.1]]}
    pq.write_table(pa.table(episodes), meta / "episodes/chunk-000/file-000.parquet")
    return frames


def test_a_dataset_recorded_by_lerobot_imports(tmp_path):
    frames = write_lerobot_recording(tmp_path / "rec")
    view = open_episodes(tmp_path / "rec")
    assert isinstance(view, LeRobotEpisodes)
    assert view.schema == EpisodeSchema({"top": (32, 48, 3)}, 5, 2)
    assert view.task_config["tasks"] == ["pick", "place"] and view.task_config["source"] == "lerobot"
    dataset = import_lerobot(tmp_path / "rec", tmp_path / "rec.zarr")
    assert len(dataset) == 2 and dataset.num_steps == 8
    first, second = dataset.episode(0), dataset.episode(1)
    # observation.state first, then observation.environment_state; the last observation repeated as the final one.
    np.testing.assert_array_equal(first["state"][:, :3], [[0, k, 0.5] for k in (0, 1, 2, 3, 4, 4)])
    np.testing.assert_array_equal(first["state"][:, 3:], [[k, -1] for k in (0, 1, 2, 3, 4, 4)])
    assert len(first["top"]) == 6 and np.array_equal(first["top"][-1], first["top"][-2])
    assert min(psnr(a, b) for a, b in zip(frames[:5], first["top"])) > 30
    assert min(psnr(a, b) for a, b in zip(frames[5:], second["top"])) > 30
    np.testing.assert_array_equal(first["action"][:, 0], np.float32([0, 0.1, 0.2, 0.3, 0.4]))
    np.testing.assert_array_equal(first["reward"], [0, 0, 0, 0, 1])
    # next.done at the last frame with no next.truncated: terminated; next.success labels every step.
    assert first["terminated"].tolist() == [False] * 4 + [True] and not first["truncated"].any()
    np.testing.assert_array_equal(first["success_label"], [0, 0, 0, 0, 1])
    np.testing.assert_array_equal(second["success_label"], [0, 0, 0])
    assert not first["intervention"].any()
    np.testing.assert_allclose(second["stamp"], [0, 0.1, 0.2], atol=1e-7)


def test_damaged_or_missing_files_are_refused_by_name(exported, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(exported, broken)
    data = broken / "data/chunk-000/file-000.parquet"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with pytest.raises(ValueError, match=f"{data}: not a readable parquet file"):
        LeRobotEpisodes(broken).episode(0)

    missing = tmp_path / "missing"
    shutil.copytree(exported, missing)
    video = missing / "videos/observation.images.wrist/chunk-000/file-000.mp4"
    video.unlink()
    with pytest.raises(FileNotFoundError, match=f"{video} is missing"):
        import_lerobot(missing, tmp_path / "out.zarr")

    write_lerobot_recording(tmp_path / "bad_video", broken_mp4=True)
    with pytest.raises(ValueError, match="file-000.mp4: not a readable video"):
        LeRobotEpisodes(tmp_path / "bad_video").episode(0)

    with pytest.raises(ValueError, match="neither: expected a robot_rl episode dataset"):
        open_episodes(tmp_path)
    (tmp_path / "v21/meta").mkdir(parents=True)
    (tmp_path / "v21/meta/info.json").write_text(json.dumps({"codebase_version": "v2.1"}))
    with pytest.raises(ValueError, match="codebase_version 'v2.1'; only LeRobotDataset v3.x"):
        open_episodes(tmp_path / "v21")


def test_cli_exports_and_imports_and_refuses_to_overwrite(source, tmp_path, capsys):
    out, back = tmp_path / "le", tmp_path / "back.zarr"
    assert main(["dataset", "export", str(source), "--format", "lerobot", "--out", str(out)]) == 0
    assert "3 episodes (23 frames at 20 fps (the recorded rate)" in capsys.readouterr().out  # control_hz
    assert main(["dataset", "import", str(out), "--out", str(back)]) == 0
    assert "3 episodes (23 steps)" in capsys.readouterr().out
    before = sorted(p.name for p in out.rglob("*"))
    assert main(["dataset", "export", str(source), "--format", "lerobot", "--out", str(out), "--fps", "5"]) == 2
    assert f"LeRobot dataset {out} already exists; pass --overwrite" in capsys.readouterr().err
    assert main(["dataset", "import", str(out), "--out", str(back)]) == 2
    assert f"dataset {back} already exists; pass --overwrite" in capsys.readouterr().err
    assert sorted(p.name for p in out.rglob("*")) == before and json.loads(
        (out / "meta/info.json").read_text())["fps"] == 20
    assert main(["dataset", "export", str(source), "--format", "lerobot", "--out", str(out), "--fps", "5",
                 "--overwrite", "--task", "stack"]) == 0
    assert json.loads((out / "meta/info.json").read_text())["fps"] == 5
    assert main(["dataset", "import", str(out), "--out", str(back), "--overwrite"]) == 0
    assert EpisodeDataset(back).num_steps == 23
    assert main(["dataset", "export", str(source), "--format", "lerobot", "--out", str(tmp_path / "x"),
                 "--codec", "libsvtav1"]) == 2
    assert "'libsvtav1' encodes pixel formats" in capsys.readouterr().err and not (tmp_path / "x").exists()


# ---- what LeRobot's HIL-SERL learner needs of an offline dataset (issue 40) ----------------------------------------

GYM_HIL_TASK_CONFIG = {"env_id": "gym_hil/PandaPickCube-v0", "cameras": ["pixels/front"]}  # no recorded rate


def state_dataset(path, task_config, gaps, gripper=(0.0, 2.0, 1.0)):
    """One episode, no cameras, steps `gaps` seconds apart; the action's last entry cycles through `gripper`."""
    writer = EpisodeWriter(path, EpisodeSchema({}, 2, 4), task_config)
    stamp = 1.7e9
    for t, gap in enumerate(gaps):
        writer.add_step({"state": np.full(2, t, np.float32)}, [0.1, -0.2, 0.3, gripper[t % len(gripper)]], 0.0,
                        t == len(gaps) - 1, False, False, None, stamp)
        stamp += gap
    writer.end_episode({"state": np.zeros(2, np.float32)})
    return path


def test_camera_names_rename_the_features_and_import_gives_ours_back(source, tmp_path):
    out = tmp_path / "renamed"
    export_lerobot(source, out, fps=20, camera_names={"front": "top"})
    info = json.loads((out / "meta/info.json").read_text())
    cameras = sorted(k for k, f in info["features"].items() if f["dtype"] == "video")
    assert cameras == ["observation.images.top", "observation.images.wrist"]
    assert (out / "videos/observation.images.top/chunk-000/file-000.mp4").is_file()
    assert "observation.images.top" in json.loads((out / "meta/stats.json").read_text())
    assert "videos/observation.images.top/from_timestamp" in pq.read_schema(
        out / "meta/episodes/chunk-000/file-000.parquet").names
    view = LeRobotEpisodes(out)
    assert set(view.schema.cameras) == {"front", "wrist"}  # meta/robot_rl.json remembers the rename
    back = import_lerobot(out, tmp_path / "back.zarr")
    assert back.schema == EpisodeDataset(source).schema
    assert min(psnr(a, b) for a, b in zip(EpisodeDataset(source).episode(0)["front"], back.episode(0)["front"])) > 35


def test_camera_names_the_dataset_lacks_or_that_collide_are_refused_naming_them(source, tmp_path, capsys):
    out = tmp_path / "x"
    refusals = {"pixels_top=front": "the dataset has no camera pixels_top (it has front, wrist)",
                "front=wrist": "cameras front and wrist would both be 'wrist'",
                "front=cam,wrist=cam": "cameras front and wrist would both be 'cam'",
                "front=observation.images.front": "'observation.images.front' is not a camera name"}
    for names, message in refusals.items():
        assert main(["dataset", "export", str(source), "--format", "lerobot", "--out", str(out),
                     "--camera-names", names]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
        assert not out.exists()
    malformed = {"front": "expected OURS=LEROBOT pairs", "front=a,front=b": "camera 'front' is named twice"}
    for names, message in malformed.items():
        with pytest.raises(SystemExit):
            main(["dataset", "export", str(source), "--format", "lerobot", "--out", str(out), "--camera-names", names])
        assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_discrete_gripper_gets_lerobots_discrete_penalty_column(tmp_path):
    """gym-hil's gripper (0 close ... 2 open as LeRobot's discrete head reads it): the learner's offline rows need
    complementary_info.discrete_penalty beside the online ones, float32 [1], zeros as LeRobot records for gym-hil."""
    gripper = state_dataset(tmp_path / "gripper.zarr", GYM_HIL_TASK_CONFIG, [0.1] * 6, gripper=(0.0, 2.0, 1.97))
    export_lerobot(gripper, tmp_path / "le", fps=10, task="pick_cube")
    info = json.loads((tmp_path / "le/meta/info.json").read_text())
    assert info["features"]["complementary_info.discrete_penalty"] == {"dtype": "float32", "shape": [1],
                                                                       "names": ["discrete_penalty"]}
    data = pq.read_table(tmp_path / "le/data/chunk-000/file-000.parquet")
    assert data.schema.field("complementary_info.discrete_penalty").type == pa.float32()
    assert data["complementary_info.discrete_penalty"].to_pylist() == [0.0] * 6
    stats = json.loads((tmp_path / "le/meta/stats.json").read_text())["complementary_info.discrete_penalty"]
    assert stats["max"] == [0.0] and stats["count"] == [6]

    continuous = state_dataset(tmp_path / "continuous.zarr", GYM_HIL_TASK_CONFIG, [0.1] * 6, gripper=(-1.0, 1.0))
    export_lerobot(continuous, tmp_path / "le2", fps=10, task="pick_cube")
    assert "complementary_info.discrete_penalty" not in json.loads((tmp_path / "le2/meta/info.json").read_text())[
        "features"]


def test_a_lerobot_datasets_own_discrete_penalty_is_carried_not_zeroed(tmp_path):
    write_lerobot_recording(tmp_path / "rec")
    data_path = tmp_path / "rec/data/chunk-000/file-000.parquet"
    table = pq.read_table(data_path)
    penalty = np.where(np.arange(table.num_rows) % 3 == 1, -0.02, 0.0).astype(np.float32)
    pq.write_table(table.append_column("complementary_info.discrete_penalty", pa.array(penalty)), data_path)
    info = json.loads((tmp_path / "rec/meta/info.json").read_text())
    info["features"]["complementary_info.discrete_penalty"] = {"dtype": "float32", "shape": [1], "names": None}
    (tmp_path / "rec/meta/info.json").write_text(json.dumps(info))
    export_lerobot(tmp_path / "rec", tmp_path / "le", task="pick")
    exported = pq.read_table(tmp_path / "le/data/chunk-000/file-000.parquet")
    np.testing.assert_array_equal(exported["complementary_info.discrete_penalty"].to_numpy(), penalty)


def test_fps_is_the_recorded_rate_else_evenly_paced_stamps_else_asked_for(tmp_path, capsys):
    # A graph recording's control rate, not its stamps (here twice as fast).
    paced = state_dataset(tmp_path / "paced.zarr", {"task": "arm_lift", "control_hz": 10.0}, [0.05] * 8)
    assert export_lerobot(paced, tmp_path / "a", task="lift").fps == 10
    assert main(["dataset", "export", str(paced), "--format", "lerobot", "--out", str(tmp_path / "b"),
                 "--task", "lift"]) == 0
    assert "at 10 fps (the recorded rate)" in capsys.readouterr().out
    # No recorded rate: evenly paced stamps tell it (a person's session at --control-hz) ...
    jitter = np.random.default_rng(0).uniform(-0.005, 0.005, 8)
    assert export_lerobot(state_dataset(tmp_path / "person.zarr", GYM_HIL_TASK_CONFIG, 0.1 + jitter),
                          tmp_path / "c", task="pick_cube").fps == 10
    # ... a scripted expert's, stepping as fast as rendering allows, do not (issue 40 guessed 2 fps from them).
    expert = state_dataset(tmp_path / "expert.zarr", GYM_HIL_TASK_CONFIG, [0.47, 0.49, 1.2, 0.5, 1.6, 0.52, 0.48, 1.7])
    with pytest.raises(ValueError, match=r"not evenly paced .*; give fps \(--fps\)"):
        export_lerobot(expert, tmp_path / "d", task="pick_cube")
    assert not (tmp_path / "d").exists()
    assert export_lerobot(expert, tmp_path / "d", fps=10, task="pick_cube").fps_from == "given"
    with pytest.raises(ValueError, match="recorded at 12.5 Hz, not a whole number"):
        export_lerobot(state_dataset(tmp_path / "odd.zarr", {"control_hz": 12.5}, [0.08] * 4), tmp_path / "e",
                       task="x")
    with pytest.raises(ValueError, match="under one frame per second"):
        export_lerobot(state_dataset(tmp_path / "slow.zarr", GYM_HIL_TASK_CONFIG, [3.0] * 4), tmp_path / "f",
                       task="x")
