"""`robot-rl train --env`: SAC + RLPD on any Gymnasium env (Box or Dict observations), no ROS."""

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from robot_rl.agents.encoders import EncoderConfig, ImageEncoder, save_pretrained
from robot_rl.agents.sac import SACConfig
from robot_rl.data.frames import FrameReplayBuffer
from robot_rl.training.gym_loop import GymTrainConfig, Trainer


class DotReach(gym.Env):
    """Move a point to a target seen only in a 16x16 camera image; dense reward, success within 0.1."""

    def __init__(self, max_steps: int = 20):
        self.observation_space = spaces.Dict({
            "cam": spaces.Box(0, 255, (16, 16, 3), np.uint8),
            "state": spaces.Box(-1, 1, (2,), np.float32)})
        self.action_space = spaces.Box(-1, 1, (2,), np.float32)
        self.max_steps = max_steps

    def _obs(self):
        image = np.zeros((16, 16, 3), np.uint8)
        r, c = np.clip(((self.target + 1) * 7.5).round().astype(int), 0, 15)
        image[max(r - 1, 0):r + 2, max(c - 1, 0):c + 2] = 255
        return {"cam": image, "state": self.pos.astype(np.float32)}

    def _info(self):
        return {"is_success": bool(np.linalg.norm(self.pos - self.target) < 0.1),
                "state": {"pos": self.pos.copy(), "target": self.target.copy()}}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = np.zeros(2)
        self.target = self.np_random.uniform(-0.8, 0.8, 2)
        self.t = 0
        return self._obs(), self._info()

    def step(self, action):
        self.pos = np.clip(self.pos + 0.2 * np.clip(action, -1, 1), -1, 1)
        self.t += 1
        info = self._info()
        return self._obs(), -float(np.linalg.norm(self.pos - self.target)), info["is_success"], \
            self.t >= self.max_steps, info


def dot_expert(state, rng, noise):
    step = np.clip((state["target"] - state["pos"]) / 0.2, -1, 1)
    return np.clip(step + rng.normal(0, noise, 2), -1, 1).astype(np.float32)


gym.register("test/DotReach-v0", entry_point=DotReach)


def test_box_env_through_the_cli(tmp_path):
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", "--env", "Pendulum-v1", "--steps", "300",
                          "--run-dir", str(run), "--set", "warmup_steps=100", "--set", "eval_episodes=1",
                          "--set", "eval_every=0", "--set", "sac.batch_size=32", "--set", "demo_episodes=0"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "evaluation success rate" in out.stdout
    history = json.loads((run / "history.json").read_text())
    assert history[-1]["steps"] == 300 and history[-1]["updates"] == 201
    assert (run / "policy.pt").exists()
    # the agent's checkpoint (OffPolicyCore's format) loads into a fresh trainer of the same shape
    config = GymTrainConfig("Pendulum-v1", sac=SACConfig(batch_size=32), demo_episodes=0)
    fresh = Trainer(config)
    state = fresh.core.load_checkpoint(run / "checkpoint.pt", fresh.network_shape())
    assert fresh.agent.num_updates == 201 and state["steps"] == 300
    with pytest.raises(ValueError, match="hidden_dims"):
        other = Trainer(GymTrainConfig("Pendulum-v1", sac=SACConfig(hidden_dims=(8,)), demo_episodes=0))
        other.core.load_checkpoint(run / "checkpoint.pt", other.network_shape())


def test_cli_rejects_unknown_settings_and_unsupported_envs(tmp_path):
    bad = subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", "--env", "Pendulum-v1", "--set", "nope=1"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown setting --set nope" in bad.stderr
    discrete = subprocess.run([sys.executable, "-m", "robot_rl.cli", "train", "--env", "CartPole-v1",
                               "--set", "demo_episodes=0"], capture_output=True, text=True, timeout=120)
    assert discrete.returncode == 2 and "continuous (Box) action" in discrete.stderr


def _config(**kw):
    sac = SACConfig(batch_size=16, hidden_dims=(32, 32))
    base = dict(total_steps=60, demo_episodes=2, warmup_steps=30, eval_every=0, eval_episodes=2, sac=sac,
                buffer_capacity=500)
    return GymTrainConfig("test/DotReach-v0", **{**base, **kw})


def test_dict_env_with_a_trainable_encoder_stores_frames_once():
    encoder = EncoderConfig(cameras=("cam",), image_size=16, num_layers=2, latent_dim=8, state_dim=2)
    trainer = Trainer(_config(encoder=encoder), expert=dot_expert)
    history = trainer.run()
    assert isinstance(trainer.online, FrameReplayBuffer) and len(trainer.online) == 60
    assert len(trainer.demos) > 0 and history[-1]["updates"] == 31
    assert 0.0 <= history[-1]["success_rate"] <= 1.0


def test_dict_env_with_a_frozen_encoder_stores_features_and_routes_interventions(tmp_path):
    frozen = EncoderConfig(cameras=("cam",), image_size=16, num_layers=2, latent_dim=8)
    save_pretrained(ImageEncoder(frozen), tmp_path / "enc", {"name": "test"})
    from robot_rl.agents.encoders import pretrained_config

    calls = {"n": 0}

    def intervener(state, action, rng):  # takes over every third step
        calls["n"] += 1
        return (dot_expert(state, rng, 0.0), True) if calls["n"] % 3 == 0 else (action, False)

    trainer = Trainer(_config(encoder=pretrained_config(tmp_path / "enc", state_dim=2), demo_episodes=0),
                      expert=dot_expert, intervener=intervener)
    trainer.run()
    assert trainer.online.layout["obs"][0] == (8 + 2,)  # features + state, no pixels
    assert len(trainer.demos) == 20  # every intervened transition is a demonstration too
    assert trainer.demos.storage["intervention"][:20].all()


def test_missing_expert_is_a_clear_error():
    with pytest.raises(ValueError, match="no scripted expert"):
        Trainer(_config(), expert=None)


def test_a_paced_loop_uses_one_torch_thread_unless_told(monkeypatch):
    import torch

    chosen = []
    monkeypatch.setattr(torch, "set_num_threads", chosen.append)  # the test process keeps its own
    Trainer(_config(control_hz=30.0), expert=dot_expert)
    Trainer(_config(control_hz=30.0, torch_threads=2), expert=dot_expert)
    Trainer(_config(), expert=dot_expert)  # unpaced: torch's default, untouched
    assert chosen == [1, 2]
    with pytest.raises(ValueError, match="torch_threads must be in"):
        Trainer(_config(torch_threads=-1), expert=dot_expert)


def test_config_interventions_and_early_stop():
    trainer = Trainer(_config(interventions=True, demo_episodes=0, total_steps=90, eval_every=30,
                              stop_success_rate=0.0), expert=dot_expert)
    history = trainer.run()
    assert len(history) == 1 and history[0]["steps"] == 30  # the first evaluation met the (trivial) bar
    assert trainer.intervener is not None and trainer.intervener.steps == 30
    assert len(trainer.demos) == trainer.intervener.intervention_steps > 0  # a fresh policy gets corrected


def test_vlac_protocol_offline_replay_and_return_and_explore():
    import robot_rl.envs  # noqa: F401
    from robot_rl.tasks import expert_for_env

    env_id = "robot_rl/ArmPickCube-v0"
    config = GymTrainConfig(env_id, env_kwargs={"observation": "state"}, total_steps=40, demo_episodes=2,
                            warmup_steps=20, eval_every=0, eval_episodes=1, buffer_capacity=500,
                            sac=SACConfig(batch_size=16, hidden_dims=(32, 32), grasp_critic=True),
                            offline_updates=7, return_and_explore=1.0)
    trainer = Trainer(config, expert=expert_for_env(env_id))
    starts = []
    reset = trainer.env.reset
    trainer.env.reset = lambda **kw: (starts.append(kw.get("options")), reset(**kw))[1]
    history = trainer.run()
    training_starts = starts[history[-1]["demo_attempts"]:]  # the demonstrations' own resets come first
    assert trainer.demo_states and training_starts
    assert all(o is not None and "snapshot" in o for o in training_starts)  # every episode from a demo state
    # 7 offline updates, then one per step after the 20-step warm-up
    assert trainer.agent.num_updates == 7 + (40 - 20 + 1)
    with pytest.raises(ValueError, match="snapshot"):
        Trainer(_config(return_and_explore=0.5), expert=dot_expert)


def test_expert_transitions_given_up_front_are_stored_as_corrections_and_counted():
    trainer = Trainer(_config(demo_episodes=1, correction_transitions=13, total_steps=30, eval_every=30),
                      expert=dot_expert)
    history = trainer.run()
    flags = trainer.demos.intervention[trainer.demos._valid_mask()]
    assert len(trainer.demos) == flags.size and flags.sum() == 13  # exactly 13 corrections, the rest demonstrations
    assert flags.size > 13
    assert history[-1]["expert_transitions"] == 13 and history[-1]["expert_transitions_up_front"] == 13
    with pytest.raises(ValueError, match="no scripted expert"):
        Trainer(_config(demo_episodes=0, correction_transitions=5), expert=None)


def test_a_persons_corrections_are_counted_as_expert_transitions():
    trainer = Trainer(_config(interventions=True, demo_episodes=0, total_steps=30, eval_every=30), expert=dot_expert)
    history = trainer.run()
    assert history[-1]["expert_transitions"] == trainer.intervener.intervention_steps > 0
