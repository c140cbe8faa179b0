"""Pixel pick-cube env and arm domain randomization."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import robot_rl.envs  # noqa: F401
from robot_rl.robots.arm.pick_cube import (ACTION_HISTORY, HOLD_ACTION, PROPRIO_DIM, STATE_DIM, ArmPickCubeEnv,
                                          CommandDelay, read_sensors)
from robot_rl.envs.randomization import Randomization
from robot_rl.tasks import get_task

EXPERT = get_task("arm_pick_cube").expert


def _env(**kw):
    return ArmPickCubeEnv(**{"image_size": 32, **kw})


def test_spaces_hide_the_cube_and_pass_the_gymnasium_checker():
    env = _env()
    obs, info = env.reset(seed=0)
    assert set(obs) == {"front", "wrist", "state"} and obs["front"].shape == (32, 32, 3)
    assert obs["state"].shape == (PROPRIO_DIM + 4 * ACTION_HISTORY,) and obs["state"][-1] == -1.0  # gripper open
    assert "cube_pos" in info["state"]  # privileged state only in info
    check_env(ArmPickCubeEnv(image_size=32), skip_render_check=True)


@pytest.mark.parametrize("split", ["train", "eval"])
def test_scripted_expert_succeeds_under_randomization_and_reward_is_sparse(split):
    env = _env(randomization_split=split)
    rng = np.random.default_rng(0)
    successes = 0
    for episode in range(20):
        obs, info = env.reset(seed=episode)
        rewards, done = [], False
        while not done:
            obs, reward, terminated, truncated, info = env.step(EXPERT(info["state"], rng, 0.1))
            rewards.append(reward)
            done = terminated or truncated
        assert set(rewards) <= {0.0, 1.0} and sum(rewards) == float(terminated)
        assert terminated == info["is_success"]  # success ends the episode, with reward 1
        successes += info["is_success"]
    assert successes >= 19


def test_randomization_is_seeded_and_splits_differ():
    r = Randomization.load("sim/arm/randomization.yaml")
    a, b = r.sample("train", np.random.default_rng(3)), r.sample("train", np.random.default_rng(3))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert r.distributions["train"]["light_diffuse_scale"] != r.distributions["eval"]["light_diffuse_scale"]
    with pytest.raises(ValueError, match="train.cube_size"):
        Randomization({"train": {"cube_size": {"uniform": [0.05, 0.03]}}, "eval": {}})
    with pytest.raises(ValueError, match="missing section"):
        Randomization({"train": {}})
    with pytest.raises(ValueError, match="train.x"):
        Randomization({"train": {"x": {"gaussian": [0, 1]}}, "eval": {}})


def test_samples_change_the_model_and_never_compound():
    env = _env(randomization=False)
    model, randomizer = env.sim.model, env.randomizer
    cube, front = model.geom("cube").id, model.camera("front").id
    nominal_size, nominal_cam = model.geom_size[cube].copy(), model.cam_pos[front].copy()
    base_image = env.reset(seed=0)[0]["front"]
    sample_a = {"cube_size": 0.044, "cube_friction": 1.3, "joint_damping_scale": 1.3, "controller_gain_scale": 1.2,
                "light_diffuse_scale": 0.5, "cube_rgb": np.array([0.2, 0.9, 0.2]), "table_texture": "checker",
                "front_camera_offset": np.array([0.02, 0.0, 0.0])}
    randomizer.apply(sample_a)
    assert model.geom_size[cube][0] == pytest.approx(0.022) and model.geom_friction[cube][0] == 1.3
    assert env.sim.controller.gains.kp_pos == pytest.approx(480.0)
    assert model.cam_pos[front][0] == pytest.approx(nominal_cam[0] + 0.02)
    env.sim.reset(np.random.default_rng(0))
    assert env.sim.state()["cube_size"] == pytest.approx(0.044)
    changed = env.sim.render("front")
    randomizer.apply({"cube_size": 0.036})  # B after A == B alone: nothing of A survives
    np.testing.assert_allclose(model.geom_size[cube], [0.018] * 3)
    np.testing.assert_allclose(model.cam_pos[front], nominal_cam)
    assert env.sim.controller.gains.kp_pos == pytest.approx(400.0)
    randomizer.apply({})
    np.testing.assert_allclose(model.geom_size[cube], nominal_size)
    env.sim.reset(np.random.default_rng(0))
    np.testing.assert_array_equal(env.sim.render("front"), base_image)
    assert np.abs(changed.astype(int) - base_image).mean() > 2  # colour, light, texture, camera show
    with pytest.raises(ValueError, match="unknown"):
        randomizer.apply({"gravity": 1.0})
    with pytest.raises(ValueError, match="table_texture"):
        randomizer.apply({"table_texture": "marble"})


def test_action_latency_delays_execution_by_exactly_k_steps():
    spec = {"train": {"action_latency_steps": {"constant": 2}}, "eval": {}}
    env = _env(randomization=spec)
    env.reset(seed=0)
    start = env.sim.target_pos.copy()
    up = np.array([0.0, 0.0, 1.0, -1.0], np.float32)
    env.step(up)
    env.step(np.zeros(4, np.float32))
    np.testing.assert_allclose(env.sim.target_pos, start)  # two no-ops executed so far
    env.step(np.zeros(4, np.float32))
    assert env.sim.target_pos[2] == pytest.approx(start[2] + env.sim.config.action_scale)


def test_a_command_delay_keeps_its_commands_in_order_and_refuses_a_latency_it_cannot_hold():
    delay = CommandDelay(2)
    sent = [np.full(4, k, np.float32) for k in range(4)]
    ran = [delay(a) for a in sent]
    np.testing.assert_array_equal(ran, [HOLD_ACTION, HOLD_ACTION, sent[0], sent[1]])
    delay.cancel(np.zeros(4))
    np.testing.assert_array_equal(delay(sent[0]), np.zeros(4))  # cancelled: sent[2] never runs
    assert len(delay.in_flight) == 2 and CommandDelay(0)(sent[3]) is not None
    with pytest.raises(ValueError, match=">= 0"):
        CommandDelay(-1)
    with pytest.raises(ValueError, match="1 commands in flight for a latency of 2"):
        CommandDelay(2, [HOLD_ACTION])


def test_sensor_noise_is_one_draw_in_the_proprioceptions_units():
    state = {"ee_pos": np.zeros(3), "gripper": np.zeros(1), "joint_vel": np.zeros(7), "cube_pos": np.ones(3)}
    read = read_sensors(state, 0.01, np.random.default_rng(0))
    draw = np.random.default_rng(0).normal(0.0, 0.01, 11)
    np.testing.assert_allclose(read["ee_pos"], draw[:3])
    np.testing.assert_allclose(read["joint_vel"], 10.0 * draw[4:])  # observed / 10: the noise is in those units
    assert read["cube_pos"] is state["cube_pos"] and read_sensors(state, 0.0, None) is state


def test_observation_noise_touches_only_the_proprioception():
    noisy = _env(randomization={"train": {"observation_noise": {"constant": 0.01}}, "eval": {}})
    clean = _env(randomization={"train": {"observation_noise": {"constant": 0.0}}, "eval": {}})
    a, _ = noisy.reset(seed=1)
    b, _ = clean.reset(seed=1)
    np.testing.assert_array_equal(a["front"], b["front"])
    sensors = PROPRIO_DIM - 1  # then the commands sent, which are not noisy
    assert np.abs(a["state"][:sensors] - b["state"][:sensors]).max() > 1e-4
    np.testing.assert_array_equal(a["state"][sensors:], b["state"][sensors:])


def test_registered_id_and_state_variant():
    env = gym.make("robot_rl/ArmPickCube-v0", observation="state", image_size=32)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (STATE_DIM + 4 * ACTION_HISTORY,) and obs[-1] == -1.0  # gripper command last: open
    for _ in range(2):  # at most one step of randomized action latency
        obs, *_ = env.step(np.array([0, 0, 0, 1], np.float32))
    assert obs[-1] == 1.0
    with pytest.raises(ValueError, match="observation"):
        ArmPickCubeEnv(observation="depth")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="finite"):
        env.unwrapped.step(np.array([np.nan, 0, 0, 0], np.float32))


def test_snapshot_restores_scene_physics_and_actions_in_flight():
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (12, 4)).astype(np.float32)
    env = ArmPickCubeEnv(observation="state", randomization={"train": {
        "cube_size": {"uniform": [0.036, 0.044]}, "action_latency_steps": {"constant": 1}}, "eval": {}})
    env.reset(seed=3)
    for a in actions[:5]:
        env.step(a)
    snap = env.snapshot()
    expected = [env.step(a)[0] for a in actions[5:]]
    other = ArmPickCubeEnv(observation="state", randomization={"train": {
        "cube_size": {"uniform": [0.036, 0.044]}, "action_latency_steps": {"constant": 1}}, "eval": {}})
    obs, _ = other.reset(seed=99, options={"snapshot": snap})
    assert other.sample == snap["sample"] and len(other._delay.in_flight) == 1
    replayed = [other.step(a)[0] for a in actions[5:]]
    np.testing.assert_allclose(replayed, expected, atol=1e-9)
    with pytest.raises(ValueError, match="snapshot"):
        other.sim.restore(snap["sim"][:-1])


def test_the_cube_range_is_a_scene_option_within_the_sim_nodes_range(tmp_path):
    from robot_rl.training.evaluate import node_params

    positions = []
    env = _env(cube_xy_range=0.15, observation="state")
    for seed in range(40):
        _, info = env.reset(seed=seed)
        positions.append(info["state"]["cube_pos"][:2] - np.array([0.5, 0.0]))
    env.close()
    spread = np.abs(np.array(positions)).max(axis=0)
    assert (spread > 0.1).all() and (spread <= 0.15).all()  # wider than arm_pick_cube's 5 cm
    with pytest.raises(ValueError, match=r"cube_xy_range must be in \[0.0, 0.2\]"):
        _env(cube_xy_range=0.3)
    # robot-rl eval reads the scenes a graph run trained in from its params.yaml (a fleet's first robot)
    (tmp_path / "params.yaml").write_text("/robot0/arm_sim:\n  ros__parameters:\n    cube_xy_range: 0.15\n"
                                          "/robot1/arm_sim:\n  ros__parameters:\n    cube_xy_range: 0.15\n")
    assert node_params(tmp_path, "arm_sim") == {"cube_xy_range": 0.15} and node_params(tmp_path, "car_sim") == {}


def test_overrides_replace_their_draws_and_leave_the_rest_of_the_seeds_scene():
    drawn = ArmPickCubeEnv(observation="state", randomization_split="eval")
    fixed = ArmPickCubeEnv(observation="state", randomization_split="eval",
                           overrides={"action_latency_steps": 0, "observation_noise": 0.0})
    noise = []
    for seed in range(4):
        drawn.reset(seed=seed)
        fixed.reset(seed=seed)
        noise.append(drawn.sample["observation_noise"])
        assert fixed.sample["action_latency_steps"] == 0 and fixed.sample["observation_noise"] == 0.0
        assert fixed.sample.keys() == drawn.sample.keys()
        for name in drawn.sample.keys() - fixed.overrides.keys():
            np.testing.assert_array_equal(fixed.sample[name], drawn.sample[name], err_msg=name)
        np.testing.assert_array_equal(fixed.sim.state()["cube_pos"], drawn.sim.state()["cube_pos"])
    assert max(noise) > 0  # the split draws noise; the overrides took it away
    with pytest.raises(ValueError, match="does not draw"):
        ArmPickCubeEnv(observation="state", overrides={"cube_colour": 1.0})


def test_the_action_history_shows_the_commands_sent_newest_first_and_survives_a_snapshot():
    env = _env(randomization={"train": {"action_latency_steps": {"constant": 2}}, "eval": {}})
    assert env.action_history == ACTION_HISTORY == 2
    obs, _ = env.reset(seed=0)
    rest = [0, 0, 0, -1]  # before any decision: holding still, gripper open
    np.testing.assert_array_equal(obs["state"][11:19], rest + rest)
    first, second = np.array([0.1, 0.2, 0.3, 0.4], np.float32), np.array([-0.5, 0.6, -0.7, 0.8], np.float32)
    env.step(first)
    snapshot = env.snapshot()
    obs, *_ = env.step(second)
    np.testing.assert_array_equal(obs["state"][11:19], np.concatenate([second, first]))
    assert obs["state"][-1] == -1.0  # both commands still in flight: the gripper has not closed
    obs, _ = env.reset(options={"snapshot": snapshot})
    np.testing.assert_array_equal(obs["state"][11:19], np.concatenate([first, rest]))
    obs, _ = _env(action_history=0).reset(seed=0)
    assert obs["state"].shape == (PROPRIO_DIM,)
    with pytest.raises(ValueError, match="action_history"):
        _env(action_history=9)
