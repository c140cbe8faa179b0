"""Tests of the simulated arm pick/lift task (robot_rl.robots.arm.sim, robot_rl.robots.arm.control)."""

import os

os.environ.setdefault("MUJOCO_GL", "osmesa")

import warnings  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from gymnasium.utils.env_checker import check_env  # noqa: E402

import robot_rl.envs  # noqa: E402,F401  (registers robot_rl/ArmLift-v0)
from robot_rl.robots.arm.control import TOP_DOWN_QUAT, quat_error  # noqa: E402
from robot_rl.robots.arm.lift import ArmLiftEnv  # noqa: E402
from robot_rl.robots.arm.sim import (  # noqa: E402
    CUBE_REST_Z,
    LIFT_OBS_DIM,
    ArmSim,
    ArmSimConfig,
    lift_observation,
    lift_reward,
    lift_success,
    scripted_lift_action,
)


@pytest.fixture
def sim():
    s = ArmSim()
    s.reset(np.random.default_rng(0))
    yield s
    s.close()


def test_scripted_expert_succeeds():
    env = ArmLiftEnv()
    successes = 0
    try:
        for seed in range(20):
            env.reset(seed=seed)
            truncated = False
            steps = 0
            while not truncated:
                obs, reward, terminated, truncated, info = env.step(
                    scripted_lift_action(env.state)
                )
                steps += 1
                assert 0.0 <= reward <= 1.0
                assert obs.shape == (LIFT_OBS_DIM,) and obs.dtype == np.float32
                assert not terminated
            assert steps == 50
            assert info["success"] == info["is_success"]
            successes += bool(info["success"])
    finally:
        env.close()
    assert successes >= 18, f"scripted expert succeeded on {successes}/20 episodes"


@pytest.mark.parametrize("delta", [(0.05, 0, 0), (0, -0.05, 0), (0, 0, -0.05), (0, 0, 0.05)])
def test_osc_tracks_step_target(sim, delta):
    start = sim.state()["ee_pos"]
    sim.target_pos = start + np.asarray(delta)
    errs = []
    for _ in range(10):  # 10 control steps = 1 s of simulation
        sim.step(np.array([0.0, 0.0, 0.0, -1.0]))
        errs.append(np.linalg.norm(sim.state()["ee_pos"] - sim.target_pos))
    assert sim.time == pytest.approx(1.0)
    assert errs[-1] < 0.01 and max(errs[5:]) < 0.01, errs
    rot = np.linalg.norm(quat_error(TOP_DOWN_QUAT, sim.state()["ee_quat"]))
    assert rot < np.radians(2.0)


def test_gravity_compensated_hold(sim):
    before = sim.state()
    for _ in range(20):  # 2 s holding still
        sim.step(np.zeros(4))
    after = sim.state()
    assert np.linalg.norm(after["ee_pos"] - before["ee_pos"]) < 1e-3
    assert np.abs(after["joint_vel"]).max() < 1e-2
    assert abs(after["cube_pos"][2] - CUBE_REST_Z) < 1e-3


def _red_pixels(img: np.ndarray) -> int:
    r, g, b = (img[..., i].astype(np.int32) for i in range(3))
    return int(np.count_nonzero((r > 150) & (g < 90) & (b < 90)))


@pytest.mark.parametrize("size", [64, 128])
def test_render_shapes_and_cube_visible(size):
    s = ArmSim(ArmSimConfig(image_size=size, render=True))
    try:
        s.reset(np.random.default_rng(1))
        imgs = s.render_all()
        assert set(imgs) == {"front", "wrist"}
        for img in imgs.values():
            assert img.shape == (size, size, 3)
            assert img.dtype == np.uint8
            assert img.flags.c_contiguous
        red = {cam: _red_pixels(img) for cam, img in imgs.items()}
        assert all(n >= 4 for n in red.values()), red
        # Move the cube out of both views: the red pixels disappear.
        s.set_cube_pose([0.85, -0.55, 0.02])
        moved = {cam: _red_pixels(s.render(cam)) for cam in ("front", "wrist")}
        assert all(moved[c] < red[c] / 4 for c in moved), (red, moved)
        with pytest.raises(ValueError):
            s.render("no_such_camera")
    finally:
        s.close()


@pytest.mark.parametrize(
    "bad",
    [
        np.array([0.0, 0.0, np.nan, 1.0]),
        np.array([np.inf, 0.0, 0.0, 1.0]),
        np.zeros(3),
        np.zeros(5),
        np.zeros((4, 1)),
        np.zeros((1, 4)),
    ],
)
def test_bad_actions_raise(sim, bad):
    t0 = sim.time
    target = sim.target_pos.copy()
    with pytest.raises(ValueError):
        sim.step(bad)
    assert sim.time == t0
    np.testing.assert_array_equal(sim.target_pos, target)


def test_env_bad_action_raises():
    env = ArmLiftEnv()
    try:
        env.reset(seed=0)
        with pytest.raises(ValueError):
            env.step(np.array([np.nan, 0, 0, 0], dtype=np.float32))
    finally:
        env.close()


def test_workspace_clamp(sim):
    cfg = sim.config
    low, high = np.array(cfg.workspace_low), np.array(cfg.workspace_high)
    for action, check in (
        ([1.0, 1.0, 1.0, -1.0], high),
        ([-1.0, -1.0, -1.0, -1.0], low),
    ):
        for _ in range(25):
            sim.step(np.array(action))
            assert np.all(sim.target_pos >= low - 1e-12) and np.all(sim.target_pos <= high + 1e-12)
        np.testing.assert_allclose(sim.target_pos, check)
        ee = sim.state()["ee_pos"]
        assert np.all(ee >= low - 0.01) and np.all(ee <= high + 0.01), ee
    # Out-of-range actions are clipped to [-1, 1]: one step moves at most action_scale.
    before = sim.target_pos.copy()
    sim.step(np.array([100.0, 0.0, 100.0, 0.0]))
    assert np.all(np.abs(sim.target_pos - before) <= cfg.action_scale + 1e-12)


def test_a_control_period_that_is_no_multiple_of_the_physics_timestep_is_split_evenly(sim):
    """30 Hz (cameras' rate): 33.3 ms is no multiple of 2 ms, so 17 equal timesteps of 1.96 ms; a rate whose period is
    a multiple keeps the configured timestep exactly."""
    assert sim.model.opt.timestep == 0.002 and sim.n_substeps == 50  # 10 Hz
    fast = ArmSim(ArmSimConfig(control_hz=30.0))
    try:
        fast.reset(np.random.default_rng(0))
        assert fast.n_substeps == 17 and fast.model.opt.timestep == pytest.approx(1 / 30 / 17)
        fast.step(np.array([1.0, 0.0, 0.0, -1.0]))
        assert fast.time == pytest.approx(1 / 30)
    finally:
        fast.close()


def test_task_functions_on_state(sim):
    state = sim.state()
    for key, shape in (
        ("joint_pos", (7,)),
        ("joint_vel", (7,)),
        ("gripper", (1,)),
        ("ee_pos", (3,)),
        ("ee_quat", (4,)),
        ("cube_pos", (3,)),
        ("cube_quat", (4,)),
        ("time", ()),
    ):
        assert state[key].shape == shape and state[key].dtype == np.float64, key
    obs = lift_observation(state)
    assert obs.shape == (LIFT_OBS_DIM,) and obs.dtype == np.float32
    assert 0.0 <= lift_reward(state) <= 1.0
    assert not lift_success(state)
    held = dict(state, cube_pos=state["ee_pos"].copy())
    held["cube_pos"][2] = CUBE_REST_Z + 0.06
    held["ee_pos"] = held["cube_pos"].copy()
    held["gripper"] = np.array([0.04])
    assert lift_success(held)
    assert lift_reward(held) == pytest.approx(1.0)


def test_gym_make_and_check_env():
    env = gym.make("robot_rl/ArmLift-v0")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # unbounded Box observation warnings
            check_env(env.unwrapped)
        assert env.observation_space.shape == (LIFT_OBS_DIM,)
        assert env.action_space.shape == (4,)
        obs1, _ = env.reset(seed=3)
        obs2, _ = env.reset(seed=3)
        np.testing.assert_array_equal(obs1, obs2)
    finally:
        env.close()


def test_image_obs_and_terminate_on_success():
    env = gym.make(
        "robot_rl/ArmLift-v0",
        image_obs=True,
        terminate_on_success=True,
        config=ArmSimConfig(image_size=64),
    )
    try:
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        assert obs["front"].shape == (64, 64, 3) and obs["wrist"].dtype == np.uint8
        terminated = truncated = False
        while not (terminated or truncated):
            obs, _, terminated, truncated, info = env.step(
                scripted_lift_action(env.unwrapped.state)
            )
        assert terminated and info["success"]
    finally:
        env.close()
