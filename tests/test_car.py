"""The race car: tracks, checkpoints from a recorded lap, lap timing, the stuck and crash
detectors (by hand and on trajectories recorded in the simulator), the car's physics and the
FastRLAP task env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from robot_rl.robots.car.control import PracticeConfig, PracticeMonitor, Recovery
from robot_rl.robots.car.track import LapTimer, Track, TrackConfig, extract_checkpoints, generate_track

G = np.array([0.0, 0.0, 9.81])


def _square(side: float, per_side: int) -> np.ndarray:
    corners = np.array([[0, 0], [side, 0], [side, side], [0, side], [0, 0]], float)
    return np.concatenate([np.linspace(a, b, per_side, endpoint=False) for a, b in zip(corners[:-1], corners[1:])]
                          + [corners[-1:]])


def test_tracks_are_closed_drivable_and_differ_by_seed():
    config = TrackConfig()
    a, b = generate_track(np.random.default_rng(3), config), generate_track(np.random.default_rng(4), config)
    again = generate_track(np.random.default_rng(3), config)
    np.testing.assert_array_equal(a.centre, again.centre)
    assert abs(a.length - b.length) > 0.1
    for track in (a, b):
        step = np.linalg.norm(np.diff(np.vstack([track.centre, track.centre[:1]]), axis=0), axis=1)
        assert step.max() < 1.05 * step.min()  # evenly resampled, and the last point joins the first
        assert config.width[0] <= track.width.min() and track.width.max() <= config.width[1]
        inner = 1.0 / np.abs(track.curvature) - track.width / 2
        assert inner.min() >= config.min_inner_radius
        assert np.all(np.linalg.norm(track.left - track.right, axis=1) == pytest.approx(track.width))
    with pytest.raises(ValueError):
        Track(np.zeros((4, 2)), np.ones(4))


def test_checkpoints_from_a_recorded_lap_by_arc_length():
    lap = _square(4.0, 7)  # 16 m, unevenly sampled
    points = extract_checkpoints(lap, 2.0)
    expected = [[0, 0], [2, 0], [4, 0], [4, 2], [4, 4], [2, 4], [0, 4], [0, 2]]  # the 8th (16 m) closes on 0
    np.testing.assert_allclose(points, expected, atol=1e-9)
    # a car that stopped for a while on the way gives the same checkpoints
    stalled = np.insert(lap, 5, [lap[5]] * 20, axis=0)
    np.testing.assert_allclose(extract_checkpoints(np.c_[stalled, np.zeros(len(stalled))], 2.0), expected, atol=1e-9)
    with pytest.raises(ValueError, match="whole lap"):
        extract_checkpoints(lap[:3], 2.0)
    with pytest.raises(ValueError, match="finite"):
        extract_checkpoints(np.array([[0, 0], [np.nan, 1]]), 1.0)


def test_lap_timer_times_clean_laps_only():
    checkpoints = np.array([[0, 0], [4, 0], [4, 4], [0, 4]], float)
    timer = LapTimer(checkpoints, 0.5)
    route = [checkpoints[i % 4] for i in range(13)]  # three laps and back to the start
    times = [timer.update(p, float(t)) for t, p in enumerate(route)]
    assert times[:4] == [None] * 4 and times[4] == 4.0 and times[8] == 4.0 and timer.laps == [4.0, 4.0, 4.0]
    assert timer.update(np.array([2.0, 0.0]), 13.0) is None and timer.next_index == 1  # not near checkpoint 1
    timer.interrupt()  # a crash: this lap does not count, the next one does
    for t, i in enumerate([1, 2, 3, 0, 1, 2, 3, 0]):
        lap = timer.update(checkpoints[i], 20.0 + t)
    assert timer.laps == [4.0, 4.0, 4.0, 4.0] and lap == 4.0


def test_stuck_detector_by_hand():
    monitor = PracticeMonitor(PracticeConfig(stuck_window=30, stuck_radius=0.3))
    creeping = [np.array([0.01 * i, 0.0, 0.07]) for i in range(40)]  # 1 cm per step: 0.29 m in 30 steps
    flags = [monitor.update(p, G) for p in creeping]
    assert flags[:29] == [None] * 29 and flags[29] == "stuck"
    monitor.reset()
    driving = [np.array([0.05 * i, 0.0, 0.07]) for i in range(60)]  # 5 cm per step
    assert all(monitor.update(p, G) is None for p in driving)


def test_crash_detector_by_hand():
    monitor = PracticeMonitor()
    assert not monitor.crashed(G + [5.0, 3.0, 0.0])  # hard cornering
    assert monitor.crashed(G + [-25.0, 0.0, 0.0])  # a wall
    assert monitor.crashed(-G)  # on its roof
    with pytest.raises(ValueError):
        monitor.crashed(np.array([np.nan, 0.0, 9.81]))
    recovery = Recovery(PracticeConfig(recovery_s=1.0, recovery_speed=-1.0), 20.0, np.random.default_rng(0))
    commands = []
    while not recovery.done:
        commands.append(recovery.command())
    assert len(commands) == 20 and all(c == commands[0] and c[0] == -1.0 and abs(c[1]) <= 1 for c in commands)


# ---- the simulated car ------------------------------------------------------------------------

pytest.importorskip("mujoco")

from robot_rl.robots.car.sim import CarRaceEnv, CarSim, DriverConfig  # noqa: E402


@pytest.fixture(scope="module")
def straight() -> Track:
    """A long oval: two 30 m straights."""
    theta = np.linspace(-np.pi / 2, np.pi / 2, 40)
    right = np.c_[15 + 6 * np.cos(theta), 6 * np.sin(theta)]
    line = np.c_[np.linspace(-15, 15, 60, endpoint=False), np.full(60, -6.0)]
    centre = np.vstack([line, right[1:], line[::-1] * [1, -1], right[1:] * [-1, -1]])
    return Track(centre, np.full(len(centre), 2.0))


def test_car_top_speed_and_turning(straight):
    sim = CarSim(straight, render=False)
    sim.place(np.array([-14.0, -6.0]), 0.0)
    for _ in range(60):  # 3 s at full speed
        sim.step(4.5, 0.0)
    speed = float(np.linalg.norm(sim.data.qvel[:2]))
    assert 4.2 < speed < 4.7 and abs(sim.position[1] + 6.0) < 0.2
    sim.place(np.array([0.0, 0.0]), 0.0)  # the infield: room to turn circles
    yaws = []
    for _ in range(60):
        sim.step(1.0, 0.3)
        yaws.append(sim.yaw)
    # kinematic bicycle at low speed: yaw rate = v tan(steer) / wheelbase = 0.94 rad/s
    rate = np.diff(np.unwrap(yaws))[-20:].mean() * 20.0
    assert 0.75 < rate < 1.0, rate
    assert np.linalg.norm(sim.peak_accel - G) < 5.0  # a smooth ride reads about 1 g


def test_detectors_on_recorded_trajectories(straight):
    sim = CarSim(straight, render=False)
    # into the outer wall of the first bend at full speed: record the IMU and positions
    sim.place(np.array([5.0, -6.0]), np.pi / 2 - 0.4)
    accel, positions = [], []
    for _ in range(40):
        sim.step(3.5, 0.0)
        accel.append(sim.peak_accel)
        positions.append(sim.position)
    speeds = np.linalg.norm(np.diff(positions, axis=0), axis=1) * 20
    fastest = int(np.argmax(speeds))
    impact = fastest + int(np.argmax(speeds[fastest:] < 0.5 * speeds.max()))  # where it stopped short
    monitor = PracticeMonitor()
    flags = [monitor.update(p, a) for p, a in zip(positions, accel)]
    first = flags.index("crash")
    assert all(f is None for f in flags[:first]) and abs(first - impact) <= 2, (first, impact)
    # held against the wall at a crawl: stuck within the window, and no crash while pushing
    monitor.reset()
    flags = []
    for _ in range(45):
        sim.step(0.3, 0.0)
        flags.append(monitor.update(sim.position, sim.peak_accel))
    assert "stuck" in flags and "crash" not in flags and flags.index("stuck") == 29


def test_env_expert_laps_and_autonomous_practice():
    env = CarRaceEnv(render=False, randomization=None, max_episode_steps=600)
    obs, info = env.reset(seed=0)
    assert obs["state"].shape == (10,) and info["checkpoint"] == 0
    assert len(env.checkpoints) >= 8
    np.testing.assert_allclose(env.checkpoints[0], env.track.start_pose()[0], atol=0.05)
    laps, rewards = [], []
    for _ in range(600):
        obs, reward, terminated, truncated, info = env.step(env.expert_action())
        rewards.append(reward)
        if info["lap_time"]:
            laps.append(info["lap_time"])
        assert not terminated
    assert truncated and info["event"] == "time_limit"
    assert len(laps) >= 2 and 8.0 < laps[-1] < 16.0, laps
    assert np.mean(rewards) > 2.0  # mostly driving toward the checkpoint at speed
    # a reset after a time limit does not move the car; after a crash it backs out in place
    before = env.sim.position
    env.reset()
    np.testing.assert_allclose(env.sim.position, before, atol=1e-9)
    for _ in range(200):
        obs, reward, terminated, truncated, info = env.step(np.array([1.0, 1.0]))  # full speed, full lock
        if terminated or truncated:
            break
    assert info["event"] in ("crash", "stuck")
    crashed_at, steps = env.sim.position, env.recovery_steps
    env.reset()
    assert env.recovery_steps == steps + 20 and 0.1 < np.linalg.norm(env.sim.position - crashed_at) < 2.0
    env.close()


def test_env_actions_observations_and_bad_inputs():
    env = gym.make("robot_rl/CarRace-v0", randomization_split="eval")
    obs, _ = env.reset(seed=1)
    assert obs["frames"].shape == (3, 64, 64, 3) and obs["frames"].dtype == np.uint8
    assert obs["frames"].std() > 5  # the camera sees the track, not a blank image
    previous = np.zeros(2)
    for target in ([1.0, -1.0], [1.0, -1.0], [-1.0, 1.0]):
        obs, _, _, _, info = env.step(np.array(target))
        executed = info["executed_action"]
        assert np.all(np.abs(executed - previous) <= 0.2 + 1e-6)  # FastRLAP's action-rate limit
        np.testing.assert_allclose(obs["state"][-2:], executed)  # and the policy sees what was executed
        previous = executed
    assert not np.array_equal(obs["frames"][0], obs["frames"][-1])  # stacked frames are different times
    for bad in ([np.nan, 0.0], [0.0, 0.0, 0.0]):
        with pytest.raises(ValueError, match="action"):
            env.step(np.array(bad))
    env.close()
    with pytest.raises(ValueError):
        CarRaceEnv(boundary="hedges", render=False)


def test_cones_and_randomization_change_the_scene():
    env = CarRaceEnv(boundary="cones", track_seed=7)
    env.reset(seed=0)
    first = env.sim.frame().astype(int)
    assert any((env.sim.model.geom(i).name or "").startswith("wall_") for i in range(env.sim.model.ngeom))
    env.reset(seed=1, options={"teleport": True})
    env.sim.place(*env.track.start_pose())
    assert np.abs(env.sim.frame().astype(int) - first).mean() > 1.0  # new lighting and colours
    with pytest.raises(ValueError, match="unknown car randomization"):
        env.sim.apply({"gravity": 3.0})
    env.close()
    expert = DriverConfig()
    assert expert.max_speed == 4.5


def test_frame_stacks_stay_inside_their_episode():
    from robot_rl.robots.car.prior_driving import frame_stack_indices

    # two episodes of 2 and 3 steps: observations 0-2 and 3-6
    np.testing.assert_array_equal(frame_stack_indices(np.array([2, 5]), 3), [
        [0, 0, 0], [0, 0, 1], [0, 1, 2], [3, 3, 3], [3, 3, 4], [3, 4, 5], [4, 5, 6]])
    with pytest.raises(ValueError):
        frame_stack_indices(np.array([3, 3]), 3)


def test_prior_driving_dataset_round_trip(tmp_path):
    from robot_rl.robots.car.prior_driving import frame_stack_indices, record_prior_driving
    from robot_rl.data.episodes import EpisodeDataset

    counts = record_prior_driving(str(tmp_path / "prior.zarr"), tracks=2, steps_per_track=60, seed=0, image_size=32,
                                  episode_steps=40)
    data = EpisodeDataset(tmp_path / "prior.zarr")
    assert counts["steps"] == data.num_steps == 120 and len(data) == counts["episodes"] >= 4
    assert data.task_config["source"] == "prior_driving" and 0 not in data.task_config["tracks"]
    episode = data.episode(0)
    assert episode["state"].shape[1] == 10 and np.abs(episode["action"]).max() <= 1.0
    speeds = np.linalg.norm(episode["state"][:, 3:5], axis=1)
    assert speeds.max() < 2.6  # slow driving
    stacks = frame_stack_indices(data.episode_ends, 3)
    assert stacks.shape == (data.num_steps + len(data), 3)
