"""Every learner, actor, arm simulator and reward-node setting is declared once: a config dataclass field made with
`setting(...)` is the node parameter of the same name (description, range, choices and default come from it), and a
node declares by hand only the parameters that are no config field, listed here."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys

import pytest

pytest.importorskip("rclpy")

from robot_rl.agents.sac import SACConfig  # noqa: E402
from robot_rl.config_fields import config_from_params, settings_of  # noqa: E402
from robot_rl.envs.arm_sim import ArmSimConfig  # noqa: E402
from robot_rl.nodes import arm_actor, arm_sim, car_actor, env_actor, env_sim, learner, reward  # noqa: E402
from robot_rl.ros import actor_node, arm_io, env_io  # noqa: E402
from robot_rl.rewards.online import RewardConfig  # noqa: E402
from robot_rl.ros.link_params import LINK_PARAMS  # noqa: E402
from robot_rl.ros.node_utils import TORCH_THREADS, params_from_dataclass  # noqa: E402
from robot_rl.training.actor import ActorConfig  # noqa: E402
from robot_rl.training.learner import LearnerConfig  # noqa: E402

NODES = {"arm_actor": arm_actor, "env_actor": env_actor, "car_actor": car_actor, "learner": learner, "reward": reward,
         "arm_sim": arm_sim, "env_sim": env_sim}
SOURCES = {"arm_actor": (actor_node, arm_io), "env_actor": (actor_node, env_io)}
"""Modules whose source declares a node's parameters, where that is not the node's own module: both actor nodes are
`ros/actor_node.py` over their robot's I/O."""
CONFIGS = {"arm_actor": (ActorConfig,), "env_actor": (ActorConfig,), "car_actor": (ActorConfig,),
           "learner": (SACConfig, LearnerConfig), "reward": (RewardConfig,), "arm_sim": (ArmSimConfig,), "env_sim": ()}
ACTOR_NODE_ONLY = {"task", "mode", "record_path", "run_dir", "control_mode", "obs_slop_s", "max_obs_age_s",
                   "reset_service", "teleop_timeout_s", "reward_source", "reset_time_s"}
NODE_ONLY = {
    "arm_actor": ACTOR_NODE_ONLY | {"action_scale", "control_hz"},
    "env_actor": ACTOR_NODE_ONLY | {"env_task"},
    "car_actor": {"policy_dir", "checkpoints", "reach_radius", "run_dir", "obs_slop_s", "reset_service",
                  "device"},
    "learner": {"task", "env_task", "run_dir", "demos", "reward_model", "reward_goal", "lr", "publish_period_s",
                "checkpoint_period_s", "snapshot_period_s", "snapshot_every_transitions"},
    "reward": {"torch_threads", "diagnostics_period_s"},
    "arm_sim": {"clock_mode", "publish_images", "command_timeout_s", "republish_period_s", "randomization",
                "randomization_split", "seed", "viewer"},
    "env_sim": {"env_task", "clock_mode", "command_timeout_s", "republish_period_s", "seed"},
}
"""The parameters a node declares by hand: none is a config field."""
LINKED = {"arm_actor", "env_actor", "car_actor"}
"""Nodes that declare the learner link's parameters (robot_rl/ros/link_params.py)."""
OWN_DEFAULTS = {"car_actor": {"actor_id", "total_steps", "eval_episodes"}, "learner": {"precision"}}
"""Settings whose node default is not the dataclass default."""

def _hand_declared(node: str) -> list[str]:
    """Names of the `Param("name", ...)` calls written in the source of a node's modules."""
    trees = [ast.parse(inspect.getsource(module)) for module in SOURCES.get(node, (NODES[node],))]
    return [call.args[0].value for tree in trees for call in ast.walk(tree)
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Param"
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


@pytest.mark.parametrize("node", ["arm_actor", "learner", "reward", "arm_sim"])
def test_every_setting_is_a_parameter_of_its_node(node):
    names = {p.name for p in NODES[node].PARAMS}
    for cls in CONFIGS[node]:
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
