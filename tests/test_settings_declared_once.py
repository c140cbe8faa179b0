"""Every node's settings are declared once: a config dataclass field made with `setting(...)` is the node parameter
of the same name (description, range, choices and default come from it), and a node declares by hand only the
parameters that are no config field, listed here."""

from __future__ import annotations

import ast
import inspect
import pkgutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

pytest.importorskip("rclpy")

import robot_rl.nodes  # noqa: E402
from robot_rl.agents.ppo import PPOConfig  # noqa: E402
from robot_rl.agents.sac import SACConfig  # noqa: E402
from robot_rl.config_fields import config_from_params, settings_of  # noqa: E402
from robot_rl.robots.arm.sim import ArmSimConfig  # noqa: E402
from robot_rl.hardware.safety import SafetyConfig  # noqa: E402
from robot_rl.nodes import (  # noqa: E402
    arm,
    arm_actor,
    arm_sim,
    camera,
    car,
    car_actor,
    car_sim,
    env_actor,
    env_sim,
    juggle_actor,
    learner,
    ppo_learner,
    quad_sim,
    quadrotor,
    reward,
    scripted_human,
    session_view,
    teleop,
)
from robot_rl.rewards.online import RewardConfig  # noqa: E402
from robot_rl.robots.car.sim import CarRaceConfig  # noqa: E402
from robot_rl.robots.quad.train import JuggleTrainConfig  # noqa: E402
from robot_rl.ros import actor_node, arm_io, env_io, hardware_node, sim_time  # noqa: E402
from robot_rl.ros.link_params import LINK_PARAMS  # noqa: E402
from robot_rl.ros.node_utils import TORCH_THREADS, params_from_dataclass  # noqa: E402
from robot_rl.teleop.arbitration import ArbitrationConfig  # noqa: E402
from robot_rl.teleop.scripted_human import InterventionConfig  # noqa: E402
from robot_rl.training.actor import ActorConfig  # noqa: E402
from robot_rl.training.learner import LearnerConfig  # noqa: E402

SAFETY = SimpleNamespace(PARAMS=hardware_node.SAFETY_PARAMS)
"""The parameters every hardware node (arm, car, quadrotor) declares through `ros/hardware_node.py`."""
NODES = {"arm_actor": arm_actor, "env_actor": env_actor, "car_actor": car_actor, "learner": learner, "reward": reward,
         "arm_sim": arm_sim, "env_sim": env_sim, "car_sim": car_sim, "quad_sim": quad_sim, "camera": camera,
         "arm": arm, "car": car, "quadrotor": quadrotor, "hardware_safety": SAFETY, "juggle_actor": juggle_actor,
         "ppo_learner": ppo_learner, "scripted_human": scripted_human, "session_view": session_view, "teleop": teleop}
SOURCES = {"arm_actor": (actor_node, arm_io), "env_actor": (actor_node, env_io), "hardware_safety": (hardware_node,),
           **{sim: (NODES[sim], sim_time) for sim in ("arm_sim", "env_sim", "car_sim", "quad_sim")}}
"""Modules whose source declares a node's parameters, where that is not the node's own module: both actor nodes are
`ros/actor_node.py` over their robot's I/O; every simulator takes its clock's from `ros/sim_time.py`."""
CONFIGS = {"arm_actor": (ActorConfig, ArmSimConfig), "env_actor": (ActorConfig,), "car_actor": (ActorConfig,
                                                                                             CarRaceConfig),
           "learner": (SACConfig, LearnerConfig), "reward": (RewardConfig,), "arm_sim": (ArmSimConfig,), "env_sim": (),
           "car_sim": (CarRaceConfig,), "quad_sim": (), "camera": (), "arm": (), "car": (), "quadrotor": (),
           "hardware_safety": (SafetyConfig,), "juggle_actor": (), "ppo_learner": (JuggleTrainConfig, PPOConfig),
           "scripted_human": (ArmSimConfig, InterventionConfig), "session_view": (), "teleop": (ArbitrationConfig,)}
"""The configs a node's settings come from (a node may take only some of a config's settings)."""
ACTOR_NODE_ONLY = {"task", "mode", "record_path", "run_dir", "control_mode", "obs_slop_s", "max_obs_age_s",
                   "reset_service", "teleop_timeout_s", "reward_source", "reset_time_s", "timing_log",
                   "policy_file"}
SIM_NODE_ONLY = {"clock_mode", "command_timeout_s", "republish_period_s", "tick_phase", "seed"}
NODE_ONLY = {
    "arm_actor": ACTOR_NODE_ONLY,
    "env_actor": ACTOR_NODE_ONLY | {"env_task"},
    "car_actor": {"policy_dir", "checkpoints", "run_dir", "obs_slop_s", "reset_service", "device"},
    "learner": {"task", "env_task", "run_dir", "demos", "reward_model", "reward_goal", "lr", "publish_period_s",
                "checkpoint_period_s", "snapshot_period_s", "snapshot_every_transitions", "train_niceness"},
    "reward": {"torch_threads", "diagnostics_period_s"},
    "arm_sim": SIM_NODE_ONLY | {"publish_images", "randomization", "randomization_split", "viewer", "stamp_clock",
                                "reset_seeds_from"},
    "env_sim": SIM_NODE_ONLY | {"env_task"},
    "car_sim": SIM_NODE_ONLY | {"hardware", "max_speed", "max_steer"},
    "quad_sim": SIM_NODE_ONLY | {"hardware", "randomization", "randomization_split", "ball_mass", "plant"},
    "camera": {"backend", "serial", "device", "device_index", "width", "height", "fps", "crop_x", "crop_y",
               "crop_width", "crop_height", "output_width", "output_height", "camera_name", "frame_id",
               "publish_depth", "publish_native", "loop", "fx", "fy", "cx", "cy", "frame_timeout_s",
               "reconnect_backoff_s", "reconnect_backoff_max_s", "diagnostics_period_s"},
    "arm": {"hardware"},
    "car": {"hardware", "port", "seed"},
    "quadrotor": {"hardware", "connection", "auto_arm", "arm_retry_s", "quaternion_tolerance", "max_position_m"},
    "hardware_safety": {"control_hz", "stamp_future_tolerance_s", "autostart", "activation_retry_s",
                        "diagnostics_period_s"},
    "juggle_actor": {"policy_dir", "hardware", "episodes", "max_episode_s", "reset_service", "run_dir", "device",
                     "follow_learner"},
    "ppo_learner": {"iterations", "publish_every", "run_dir"},
    "scripted_human": {"task", "mapping", "rate_hz", "expert_gain", "label_success", "seed"},
    "session_view": {"task", "cameras", "env_task", "device", "host", "port", "max_fps", "jpeg_quality",
                     "record_path", "rerun", "run_dir", "stale_s", "diagnostics_period_s"},
    "teleop": {"device", "mapping", "device_path", "rate_hz", "speed", "frame_id", "reconnect_s",
               "diagnostics_period_s"},
}
"""The parameters a node declares by hand: none is a config field. They are what only the node uses: its topics,
timers, files and devices (the camera's are its drivers' constructor arguments; the hardware YAML configures the
robots' limits), or a value whose meaning differs from the config field's of that name (the juggle actor's
max_episode_s ends a flight; the task's, which the policy observes, is its training horizon; the PPO learner's
iterations count until the graph stops, 0 meaning never)."""
LINKED = {"arm_actor", "env_actor", "car_actor"}
"""Nodes that declare the learner link's parameters (robot_rl/ros/link_params.py)."""
OWN_DEFAULTS = {"car_actor": {"actor_id", "total_steps", "eval_episodes"}, "learner": {"precision"},
                "car_sim": {"randomization"}, "ppo_learner": {"randomization", "compile"}}
"""Settings whose node default is not the dataclass default (a randomization file named in the package, not by its
installed path; the juggling recipe's PPO compiles its losses)."""


def test_every_node_module_is_covered():
    modules = {m.name for m in pkgutil.iter_modules(robot_rl.nodes.__path__)}
    assert modules <= set(NODES), f"add {sorted(modules - set(NODES))} to this test's tables"


def _hand_declared(node: str) -> list[str]:
    """Names of the `Param("name", ...)` calls written in the source of a node's modules."""
    trees = [ast.parse(inspect.getsource(module)) for module in SOURCES.get(node, (NODES[node],))]
    return [call.args[0].value for tree in trees for call in ast.walk(tree)
            if isinstance(call, ast.Call) and getattr(call.func, "id", "").endswith("Param")
            and call.args and isinstance(call.args[0], ast.Constant)]


@pytest.mark.parametrize("node", NODES)
def test_a_node_declares_by_hand_only_its_own_parameters(node):
    hand = _hand_declared(node)
    assert sorted(hand) == sorted(NODE_ONLY[node]), "declare config fields with setting(...) on their dataclass"
    assert not {name for cls in CONFIGS[node] for name in settings_of(cls)} & set(hand)


@pytest.mark.parametrize("node", NODES)
def test_node_parameters_come_from_the_config_dataclasses(node):
    params = NODES[node].PARAMS
    names = [p.name for p in params]
    assert len(names) == len(set(names)), "a parameter declared twice"
    linked = {p.name for p in LINK_PARAMS} if node in LINKED else set()
    settings = {name: pair for cls in CONFIGS[node] for name, pair in settings_of(cls).items()}
    for p in params:
        if p.name in NODE_ONLY[node] or p.name in linked or p is TORCH_THREADS:  # shared by every torch node
            continue
        assert p.name in settings, f"{node}.{p.name} is neither a config field nor listed as the node's own"
        field, s = settings[p.name]
        assert (p.description, p.low, p.high, p.choices) == (s.description, s.low, s.high, s.choices)
        if p.name not in OWN_DEFAULTS.get(node, ()):
            default = s.unset if field.default is None else field.default
            assert p.default == (list(default) if isinstance(default, tuple) else default), p.name
    assert linked <= set(names)


TAKES_EVERY_SETTING = {"arm_actor": (ActorConfig,), "learner": (SACConfig, LearnerConfig), "reward": (RewardConfig,),
                       "arm_sim": (ArmSimConfig,), "scripted_human": (InterventionConfig,),
                       "teleop": (ArbitrationConfig,), "hardware_safety": (SafetyConfig,), "ppo_learner": (PPOConfig,)}
"""Configs whose every setting is a parameter of the node (the others give a node only some of theirs)."""


@pytest.mark.parametrize("node", TAKES_EVERY_SETTING)
def test_every_setting_is_a_parameter_of_its_node(node):
    names = {p.name for p in NODES[node].PARAMS}
    for cls in TAKES_EVERY_SETTING[node]:
        assert set(settings_of(cls)) <= names


def test_the_node_defaults_build_the_configs_with_their_sentinels_mapped():
    actor_values = {p.name: p.default for p in arm_actor.PARAMS}
    assert config_from_params(ActorConfig, actor_values) == ActorConfig()
    assert config_from_params(RewardConfig, {p.name: p.default for p in reward.PARAMS}) == RewardConfig()
    sim_values = {p.name: p.default for p in arm_sim.PARAMS}
    assert config_from_params(ArmSimConfig, {**sim_values, "cameras": tuple(sim_values["cameras"])}) == ArmSimConfig()
    values = {p.name: p.default for p in learner.PARAMS}
    assert values["critic_subsample"] == 0 and values["target_entropy"] == 0.0 and values["encoder"] == ""
    assert config_from_params(SACConfig, values) == SACConfig(precision="auto")
    config = config_from_params(LearnerConfig, values, obs_dim=3, action_dim=2)
    assert config == LearnerConfig(obs_dim=3, action_dim=2)
    assert config.encoder is None and config.initial_actor is None
    sac = config_from_params(SACConfig, {**values, "critic_subsample": 2, "num_critics": 10, "hidden_dims": [64]})
    assert (sac.critic_subsample, sac.num_critics, sac.hidden_dims) == (2, 10, (64,))


def test_the_default_parameters_of_the_other_cores_build_their_default_configs():
    def defaults(node):
        return {p.name: p.default for p in NODES[node].PARAMS}

    assert config_from_params(PPOConfig, defaults("ppo_learner")) == JuggleTrainConfig().ppo
    assert config_from_params(PPOConfig, defaults("ppo_learner") | {"huber_delta": 0.0}).huber_delta is None
    assert config_from_params(InterventionConfig, defaults("scripted_human")) == InterventionConfig()
    assert config_from_params(SafetyConfig, defaults("hardware_safety")) == SafetyConfig()
    assert config_from_params(ArbitrationConfig, defaults("teleop")) == ArbitrationConfig()
    assert config_from_params(CarRaceConfig, defaults("car_actor")) == CarRaceConfig()
    car = config_from_params(CarRaceConfig, defaults("car_sim"))
    assert car.randomization == "sim/car/randomization.yaml" and car.track_seed == CarRaceConfig.track_seed
    assert config_from_params(CarRaceConfig, defaults("car_sim") | {"randomization": ""}).randomization is None


def test_only_takes_the_named_settings_and_refuses_one_the_config_lacks():
    assert [p.name for p in params_from_dataclass(ArmSimConfig, only=("control_hz", "action_scale"))] == \
        ["control_hz", "action_scale"]
    with pytest.raises(KeyError, match="no setting 'speed'"):
        params_from_dataclass(ArbitrationConfig, only=("speed",))


def test_a_setting_the_dataclass_lacks_cannot_be_excluded_or_given_a_default():
    with pytest.raises(KeyError, match="no setting 'random_step'"):
        params_from_dataclass(ActorConfig, exclude=("random_step",))
    with pytest.raises(KeyError, match="no setting 'layer_norm'"):
        params_from_dataclass(SACConfig, defaults={"layer_norm": False})


def test_critic_subsample_above_num_critics_is_refused_once_by_the_config(tmp_path):
    values = {p.name: p.default for p in learner.PARAMS} | {"num_critics": 2, "critic_subsample": 3}
    with pytest.raises(ValueError, match="critic_subsample"):
        config_from_params(SACConfig, values)
    result = subprocess.run([sys.executable, "-m", "robot_rl.cli", "node", "learner", "--ros-args",
                             "-p", "num_critics:=2", "-p", "critic_subsample:=3", "-p", f"run_dir:={tmp_path / 'run'}"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "critic_subsample must be in [1, num_critics=2]" in result.stderr
