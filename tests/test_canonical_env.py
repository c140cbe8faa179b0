"""EnvAdapter: third-party observation, action and info conventions onto the agent's, pinned by hand."""

import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from robot_rl.envs.adapter import AdapterConfig, EnvAdapter, StateNormalizer, make_canonical

sys.path.insert(0, str(Path(__file__).parent))
import dict_grip_env  # noqa: E402

ENV_ID = "dict_grip_env:DictGrip-v0"
GRIP = AdapterConfig(image_size=16, gripper_index=2, gripper_open=0.0, gripper_close=2.0)


def test_nested_dict_observation_becomes_cameras_and_one_state_vector():
    env = make_canonical(ENV_ID, {}, GRIP, normalize=False)
    adapter = env.adapter
    # gymnasium orders Dict keys; state entries follow the space's order, nested keys joined by "/"
    assert adapter.state_keys == ["robot/gripper_m", "robot/joint_pos_mm", "target_mm"]
    assert adapter.cameras == ("pixels_top", "pixels_wrist") and adapter.state_dim == 5
    obs, info = env.reset(seed=3)
    raw = env.unwrapped._obs()
    np.testing.assert_array_equal(obs["state"], [raw["robot"]["gripper_m"][0], *raw["robot"]["joint_pos_mm"],
                                                 *raw["target_mm"]])
    assert obs["pixels_top"].shape == obs["pixels_wrist"].shape == (16, 16, 3)  # CHW 24x24 and HWC 16x16 -> 16x16
    assert obs["pixels_top"].dtype == np.uint8 and obs["pixels_top"].flags.writeable
    np.testing.assert_array_equal(obs["pixels_wrist"], raw["pixels"]["wrist"])  # already 16x16: untouched
    assert env.observation_space["state"].shape == (5,)


def test_cameras_of_different_sizes_are_refused_without_an_image_size():
    with pytest.raises(ValueError, match="not one square size; set image_size"):
        make_canonical(ENV_ID, {})


def test_obs_keys_choose_and_order_and_unknown_keys_are_named():
    env = make_canonical(ENV_ID, {}, AdapterConfig(obs_keys=("target_mm", "robot/joint_pos_mm")), normalize=False)
    assert env.adapter.state_keys == ["target_mm", "robot/joint_pos_mm"] and not env.adapter.cameras
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4,)  # no cameras: a flat vector
    np.testing.assert_array_equal(obs[:2], env.unwrapped.target.astype(np.float32))
    with pytest.raises(ValueError, match=r"no observation entry \['robot/elbow'\]"):
        make_canonical(ENV_ID, {}, AdapterConfig(obs_keys=("robot/elbow",)))


def test_gripper_and_box_actions_map_both_ways():
    env = make_canonical(ENV_ID, {}, GRIP)
    adapter = env.adapter
    np.testing.assert_allclose(adapter.env_action([0.5, -1.0, 1.0]), [0.5, -1.0, 2.0])  # +1 closes: 2
    np.testing.assert_allclose(adapter.env_action([0.0, 0.0, -1.0]), [0.0, 0.0, 0.0])  # -1 opens: 0
    np.testing.assert_allclose(adapter.agent_action(np.array([0.5, -1.0, 2.0])), [0.5, -1.0, 1.0])
    # a gripper whose closed value is the low end maps the other way round
    flipped = make_canonical(ENV_ID, {}, AdapterConfig(image_size=16, gripper_index=2, gripper_open=2.0,
                                                       gripper_close=0.0)).adapter
    np.testing.assert_allclose(flipped.env_action([0, 0, 1.0]), [0, 0, 0.0])
    with pytest.raises(ValueError, match="together"):
        make_canonical(ENV_ID, {}, AdapterConfig(image_size=16, gripper_index=2))
    with pytest.raises(ValueError, match="NaN"):
        adapter.agent_action(np.array([np.nan, 0, 0]))


class DictActionEnv(gym.Env):
    """A Dict action of an arm Box in [-2, 2] and a discrete gripper of 3 choices; success under info["success"]."""

    observation_space = spaces.Box(np.array([-1, -1000], np.float32), np.array([1, 1000], np.float32))
    action_space = spaces.Dict({"arm": spaces.Box(-2, 2, (2,), np.float32), "gripper": spaces.Discrete(3)})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([0.5, 500.0], np.float32), {}

    def step(self, action):
        self.last = action
        return np.array([0.5, 500.0], np.float32), 0.0, False, False, {"success": action["gripper"] == 2}


def test_dict_actions_with_a_discrete_entry_and_bounds_normalisation():
    env = make_canonical("test_canonical_env:DictAction-v0", {})
    adapter = env.adapter
    # entries flattened in the space's (sorted) order: arm (2), gripper (1)
    action = adapter.env_action([0.5, -1.0, 1.0])
    np.testing.assert_allclose(action["arm"], [1.0, -2.0])
    assert action["gripper"] == 2
    assert adapter.env_action([0, 0, -0.2])["gripper"] == 1  # rounded to the nearest choice
    np.testing.assert_allclose(adapter.agent_action({"arm": np.array([1.0, -2.0]), "gripper": 2}), [0.5, -1, 1])
    obs, _ = env.reset()
    np.testing.assert_allclose(obs, [0.5, 0.5])  # declared bounds: [-1, 1] as it is, [-1000, 1000] -> /1000
    _, _, _, _, info = env.step(np.array([0, 0, 1.0], np.float32))
    assert info["is_success"] is True and env.unwrapped.last["gripper"] == 2


gym.register("DictAction-v0", entry_point=DictActionEnv)


def test_statistics_normalise_unbounded_features_and_survive_json():
    normalizer = StateNormalizer.from_bounds(np.array([-np.inf, 0.0, -1e6]), np.array([np.inf, 10.0, 1e6]), "auto")
    assert normalizer.pending == [True, False, True]  # unbounded, usable bounds, a placeholder bound
    samples = np.array([[1000.0, 5.0, 3.0], [3000.0, 5.0, 3.0]])
    normalizer.fit(samples)
    np.testing.assert_allclose(normalizer(np.array([2000.0, 10.0, 3.0])), [0.0, 1.0, 0.0])  # constant: unit scale
    np.testing.assert_allclose(normalizer(np.array([1e9, 0.0, 3.0])), [10.0, -1.0, 0.0])  # clipped at 10
    off = StateNormalizer.from_bounds(np.array([-np.inf]), np.array([np.inf]), "off")
    assert not off.needs_statistics and off(np.array([123.0]))[0] == 123.0
    env = make_canonical(ENV_ID, {}, GRIP)
    env.adapter.normalizer.fit(np.arange(10.0).reshape(2, 5))
    restored = EnvAdapter.from_json(env.adapter.to_json())
    assert restored == env.adapter
    with pytest.raises(ValueError, match="normalize_state"):
        StateNormalizer.from_bounds(np.zeros(1), np.ones(1), "sometimes")


def test_a_persons_takeover_reported_in_info_becomes_the_agents_action():
    env = make_canonical(ENV_ID, {"intervene_every": 2}, GRIP)
    env.reset(seed=1)
    _, _, _, _, first = env.step(np.zeros(3, np.float32))
    assert first["intervention"] is False
    hand, target = env.unwrapped.hand.copy(), env.unwrapped.target.copy()
    _, _, _, _, second = env.step(np.zeros(3, np.float32))
    assert second["intervention"] is True
    expected = env.adapter.agent_action(dict_grip_env.expert_action(hand, target))
    np.testing.assert_allclose(second["intervention_action"], expected, atol=1e-6)


def test_success_from_the_usual_keys_or_a_named_one():
    adapter = make_canonical(ENV_ID, {}, GRIP).adapter
    assert adapter.success({"succeed": True}) and adapter.success({"is_success": np.array(True)})
    assert not adapter.success({"other": True})
    named = make_canonical(ENV_ID, {}, AdapterConfig(image_size=16, success_key="task_done")).adapter
    assert named.success({"task_done": 1}) and not named.success({"succeed": True})


def test_only_discrete_actions_are_refused():
    with pytest.raises(ValueError, match="continuous"):
        make_canonical("CartPole-v1", {})


class PixelsOnlyEnv(gym.Env):
    """The observation is one CHW image (as Atari-style and some manipulation envs give it), no state."""

    observation_space = spaces.Box(0, 255, (3, 20, 20), np.uint8)
    action_space = spaces.Box(-1, 1, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.full((3, 20, 20), 7, np.uint8), {}

    def step(self, action):
        return np.full((3, 20, 20), 9, np.uint8), 0.0, False, False, {}


gym.register("PixelsOnly-v0", entry_point=PixelsOnlyEnv, max_episode_steps=10)


def test_an_observation_that_is_one_image_is_the_camera_image_with_an_empty_state():
    env = make_canonical("test_canonical_env:PixelsOnly-v0", {})
    obs, _ = env.reset()
    assert env.adapter.cameras == ("image",) and env.adapter.state_dim == 0
    assert obs["image"].shape == (20, 20, 3) and obs["image"][0, 0, 0] == 7 and obs["state"].shape == (0,)


def test_a_pixels_only_env_trains_through_the_trainer():
    from robot_rl.agents.sac import SACConfig
    from robot_rl.training.gym_loop import GymTrainConfig, Trainer

    config = GymTrainConfig("test_canonical_env:PixelsOnly-v0", total_steps=40, demo_episodes=0, warmup_steps=20,
                            eval_every=0, eval_episodes=1, buffer_capacity=100,
                            sac=SACConfig(batch_size=8, hidden_dims=(16, 16)))
    history = Trainer(config).run()
    assert history[-1]["steps"] == 40 and history[-1]["updates"] == 21


def test_a_saved_adapter_is_checked_against_the_environment_it_is_used_on():
    """An environment whose spaces changed since an adapter was saved (the arm task gained its action history) is
    refused naming the entry and both sizes, not run into a shape error deep inside a policy."""
    old = make_canonical("robot_rl/ArmPickCube-v0", {"action_history": 0}).adapter
    with pytest.raises(ValueError, match=r"observation 'state' is Box\(.*\(20,\).*expects a state of 12 values"):
        make_canonical("robot_rl/ArmPickCube-v0", {}, adapter=old)
    assert make_canonical("robot_rl/ArmPickCube-v0", {"action_history": 0}, adapter=old).adapter is old
    grip = make_canonical(ENV_ID, {}, GRIP).adapter
    renamed = EnvAdapter.from_json({**json.loads(grip.to_json()),
                                    "camera_keys": ["pixels/side", *grip.camera_keys[1:]]})
    with pytest.raises(ValueError, match=r"no camera \['pixels/side'\]"):
        make_canonical(ENV_ID, {}, adapter=renamed)
    wider = EnvAdapter.from_json({**json.loads(grip.to_json()), "actions": [
        {**a, "size": a["size"] + 1} for a in json.loads(grip.to_json())["actions"]]})
    with pytest.raises(ValueError, match="is not the one the saved adapter maps onto"):
        make_canonical(ENV_ID, {}, adapter=wider)


def test_eval_of_a_policy_saved_before_its_environment_changed_says_how_to_rebuild_that_environment(tmp_path):
    from robot_rl.agents.policy import Policy, PolicySpec
    from robot_rl.training.evaluate import evaluate_saved
    from robot_rl.training.gym_loop import save_env_policy

    state = {"observation": "state"}
    old = make_canonical("robot_rl/ArmPickCube-v0", {**state, "action_history": 0})
    path = tmp_path / "policy.pt"  # as `train --env` saved it before the env took action_history
    saved_dim = old.adapter.state_dim
    save_env_policy(path, Policy(PolicySpec(saved_dim, 4, hidden_dims=(8,))), old.adapter, "robot_rl/ArmPickCube-v0",
                    state)
    with pytest.raises(ValueError) as refused:
        evaluate_saved(path, episodes=1)
    message = str(refused.value)
    assert message.startswith(f"{path}: robot_rl/ArmPickCube-v0: the observation is Box(")
    assert f"({saved_dim + 8},)" in message and f"expects a state of {saved_dim} values" in message
    assert "--env-kwargs" in message and "action_history" in message.split("it also takes:")[1]
    result = evaluate_saved(path, episodes=1, env_kwargs={"action_history": 0})
    assert result["episodes"] == 1 and result["env_kwargs"] == {**state, "action_history": 0}
