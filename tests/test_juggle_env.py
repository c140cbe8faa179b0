"""The juggling task and its environments: hits, rewards, terminations, randomization, API."""

from __future__ import annotations

import dataclasses
import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import robot_rl.envs  # noqa: F401 - registers robot_rl/QuadJuggle-v0

from robot_rl.robots.quad.juggling import OBS_DIM, PRIVILEGED_DIM, JuggleConfig, JuggleRewardWeights, JuggleState, JuggleTask
from robot_rl.robots.quad.physics import NOMINAL_PLANT, RolloutPhysics
from robot_rl.robots.quad.vec_env import (DEFAULT_RANDOMIZATION, HOVER_ACTION, JuggleCore, QuadJuggleEnv,
                                           QuadJuggleGymVectorEnv, QuadJuggleVecEnv)
from robot_rl.envs.randomization import Randomization
from robot_rl.resources import package_path

HOVER = np.array([HOVER_ACTION, 0.0, 0.0, 0.0])


def state(n=1, quad=(0.0, 0.0, 1.0), ball=(0.0, 0.0, 1.5), ball_vel=(0.0, 0.0, 0.0), quat=(1.0, 0.0, 0.0, 0.0)):
    rep = lambda v: np.tile(np.asarray(v, dtype=np.float64), (n, 1))  # noqa: E731
    return JuggleState(rep(quad), rep(quat), rep((0, 0, 0)), rep((0, 0, 0)), rep(ball), rep(ball_vel))


def test_hit_detection_counts_debounces_and_ignores_flight():
    cfg = JuggleConfig()
    task = JuggleTask(1, cfg)
    surface = 1.0 + cfg.racket_top_offset + cfg.ball_radius
    task.reset([0], state(ball=(0, 0, surface + 0.5)))
    for _ in range(20):  # free flight: the velocity changes by -g dt each step, never a hit
        task.step(state(ball=(0, 0, surface + 0.3), ball_vel=(0, 0, -2.0)), HOVER[None])
    task.prev_ball_vel[:] = (0, 0, -3.0)
    _, _, ev = task.step(state(ball=(0, 0, surface + 0.01), ball_vel=(0, 0, 2.5)), HOVER[None])
    assert ev["hit"][0] and ev["contact"][0] and task.hits[0] == 1
    # the same contact still pushing next step: not a second contact
    _, _, ev = task.step(state(ball=(0, 0, surface + 0.05), ball_vel=(0, 0, 3.0)), HOVER[None])
    assert not ev["contact"][0]
    # a new contact 5 steps after the counted hit: a contact, but not a counted hit (< 0.6 s)
    for _ in range(3):
        task.step(state(ball=(0, 0, surface + 0.1), ball_vel=(0, 0, -1.0)), HOVER[None])
    _, _, ev = task.step(state(ball=(0, 0, surface), ball_vel=(0, 0, 2.0)), HOVER[None])
    assert ev["contact"][0] and not ev["hit"][0] and task.contacts[0] == 2 and task.hits[0] == 1
    # a velocity jump far from the racket (a wall, a glitch) is no hit
    task.prev_ball_vel[:] = (0, 0, -3.0)
    task.since_hit[:] = 100
    task.since_contact[:] = 100
    task.prev_ball_in_zone[:] = False
    _, _, ev = task.step(state(ball=(0.5, 0, surface), ball_vel=(0, 0, 2.5)), HOVER[None])
    assert not ev["contact"][0]


def test_true_hits_follow_jugglerls_rule_and_apexes_are_measured_above_the_contact():
    cfg = JuggleConfig()
    assert cfg.min_hit_interval_s == 0.6 and round(cfg.min_hit_interval_s * cfg.policy_hz) == 30
    task = JuggleTask(1, cfg)
    surface = 1.0 + cfg.racket_top_offset + cfg.ball_radius

    def bounce(x=0.0, quad_z=1.0):
        task.prev_ball_vel[:] = (0, 0, -3.0)
        task.prev_ball_in_zone[:] = True
        return task.step(state(quad=(0, 0, quad_z), ball=(x, 0, surface + quad_z - 1.0), ball_vel=(0, 0, 2.5)),
                         HOVER[None])[2]

    def fly(steps):
        for _ in range(steps):
            task.step(state(ball=(0, 0, surface + 0.3), ball_vel=(0, 0, -1.0)), HOVER[None])

    task.reset([0], state(ball=(0, 0, surface + 0.5)))
    assert bounce()["hit"][0]  # the first hit of an episode counts at once
    fly(28)
    assert not bounce()["hit"][0] and task.contacts[0] == 2  # 29 steps (0.58 s) later: a contact only
    fly(29)
    # inside the cylinder's margin but outside the racket's radius: a contact, not a true hit
    assert not bounce(x=cfg.racket_radius + 0.01)["hit"][0]
    fly(29)
    ev = bounce(quad_z=1.2)  # 0.6 s after the first counted hit, met 20 cm higher
    assert ev["hit"][0] and task.hits[0] == 2
    task.step(state(quad=(0, 0, 1.2), ball=(0, 0, 2.0), ball_vel=(0, 0, 1.0)), HOVER[None])
    above_contact, above_home = task.apex_above_contact_sum[0], task.apex_sum[0]
    ev = task.step(state(quad=(0, 0, 1.2), ball=(0, 0, 2.1), ball_vel=(0, 0, -0.1)), HOVER[None])[2]
    assert ev["apex"][0]  # the flight's apex: measured from where the racket met the ball, 20 cm up
    assert task.apex_above_contact_sum[0] - above_contact == pytest.approx(2.1 - (1.2 + cfg.racket_top_offset))
    assert task.apex_sum[0] - above_home == pytest.approx(2.1 - (1.0 + cfg.racket_top_offset))


def test_every_reward_term_reaches_the_summed_reward():
    """Each term is switched on by a situation that activates it; doubling its weight must change
    the environment's reward by exactly the term's value."""
    cfg = JuggleConfig()
    surface = 1.0 + cfg.racket_top_offset + cfg.ball_radius
    apex_z = 1.0 + cfg.racket_top_offset + cfg.apex_height

    def reward_with(weights: JuggleRewardWeights) -> tuple[float, dict[str, float]]:
        task = JuggleTask(1, dataclasses.replace(cfg, weights=weights))
        task.reset([0], state(ball=(0.02, 0, surface + 0.4)))
        task.actions[0, 0] = (0.2, 0.1, 0.0, 0.0)
        task.since_hit[:] = 100
        # a hit: the ball near the racket, bouncing up; the quad off home, yawed, rotating
        yaw = 0.2
        s = state(quad=(0.1, 0.05, 1.1), ball=(0.12, 0.05, 1.1 + surface - 1.0), ball_vel=(0, 0, 3.0),
                  quat=(np.cos(yaw / 2), 0, 0, np.sin(yaw / 2)))
        s.quad_rates[:] = (0.5, -0.3, 0.2)
        task.prev_ball_vel[:] = (0, 0, -3.0)
        terms1, _, ev1 = task.step(s, np.array([[0.3, 0.0, 0.1, 0.0]]))
        assert ev1["hit"][0]
        # its apex, then a crash: the quad far below the minimum height
        s2 = state(quad=(0.1, 0.05, 1.1), ball=(0.0, 0.0, apex_z), ball_vel=(0, 0, -0.01))
        terms2, _, ev2 = task.step(s2, np.array([[0.3, 0.0, 0.1, 0.0]]))
        assert ev2["apex"][0]
        s3 = state(quad=(0.1, 0.05, 0.1), ball=(0.0, 0.0, 1.5))
        terms3, term3, _ = task.step(s3, np.array([[0.3, 0.0, 0.1, 0.0]]))
        assert term3[0]
        total = {k: float(terms1[k][0] + terms2[k][0] + terms3[k][0]) for k in terms1}
        return sum(total.values()), total

    base_weights = JuggleRewardWeights()
    base, terms = reward_with(base_weights)
    assert set(terms) == {f.name for f in dataclasses.fields(JuggleRewardWeights)}
    for name in terms:
        assert terms[name] != 0.0, f"term {name} never active in this scenario"
        doubled = dataclasses.replace(base_weights, **{name: 2 * getattr(base_weights, name)})
        total, _ = reward_with(doubled)
        assert total - base == pytest.approx(terms[name], rel=1e-9, abs=1e-12), name


def test_terminations_and_non_finite_state():
    task = JuggleTask(4)
    s = state(4)
    task.reset(np.arange(4), s)
    s.ball_pos[1, 2] = 0.5            # ball fell past the racket
    s.quad_pos[2, 2] = 0.2            # crashed
    s.quad_vel[3, 0] = np.nan         # broken state
    terms, terminated, ev = task.step(s, np.tile(HOVER, (4, 1)))
    assert terminated.tolist() == [False, True, True, True]
    assert ev["ball_lost"].tolist() == [False, True, False, False]
    assert ev["crash"].tolist() == [False, False, True, False]
    assert ev["non_finite"].tolist() == [False, False, False, True]
    assert all(np.isfinite(v).all() for v in terms.values())
    obs = task.observation(s)
    assert obs.shape == (4, OBS_DIM) and np.isfinite(obs).all()


def test_vector_env_matches_the_single_env_step_for_step():
    """Same plant, same commands: the rollout batch and the plain mj_step simulator agree."""
    single = QuadJuggleEnv(randomization=None)
    vec = JuggleCore(RolloutPhysics(3, nthread=2), randomization=None, auto_reset=False)
    single.reset(seed=0)
    vec.reset()
    rng = np.random.default_rng(0)
    for _ in range(40):
        a = np.clip(HOVER + rng.normal(scale=0.1, size=4), -1, 1)
        _, r1, t1, _, _ = single.step(a)
        r, t, _, _ = vec.step(np.tile(a, (3, 1)))
        s1, s2 = single.core.physics.state(), vec.physics.state()
        np.testing.assert_allclose(s2.quad_pos, np.repeat(s1.quad_pos, 3, 0), atol=1e-9)
        np.testing.assert_allclose(s2.ball_vel, np.repeat(s1.ball_vel, 3, 0), atol=1e-9)
        assert r == pytest.approx(np.full(3, r1), abs=1e-9) and t1 == t[0]
    vec.physics.close()


def test_isaac_lab_convention_auto_reset_and_bad_actions():
    env = QuadJuggleVecEnv(8, nthread=1, seed=1)
    obs, extras = env.reset()
    assert obs["policy"].shape == (8, OBS_DIM) and obs["critic"].shape == (8, OBS_DIM + PRIVILEGED_DIM)
    assert obs["policy"].dtype == torch.float32
    actions = torch.full((8, 4), -1.0)  # no thrust: every quadrotor falls and crashes
    ended = 0
    for _ in range(60):
        obs, reward, terminated, truncated, extras = env.step(actions)
        assert reward.shape == (8,) and terminated.dtype == torch.bool and truncated.dtype == torch.bool
        ended += int(terminated.sum())
        if terminated.any():
            assert extras["log"]["Episode/crash"] > 0
            assert (env.episode_length_buf[terminated] == 0).all()  # already in a new episode
    assert ended >= 8
    with pytest.raises(ValueError, match="finite"):
        env.step(torch.full((8, 4), float("nan")))
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(7, 4))
    env.close()


def test_randomization_draws_the_yaml_ranges_per_pair():
    core = JuggleCore(RolloutPhysics(128, nthread=1, model_variants=16), seed=3)
    core.reset()
    p = core.plant
    assert 0.7 <= p["restitution"].min() and p["restitution"].max() <= 1.0
    assert np.unique(p["restitution"]).size == 16  # 16 shared model variants
    assert 0.9 <= p["thrust_scale"].min() and p["thrust_scale"].max() <= 1.1
    assert np.unique(p["thrust_scale"]).size == 128  # per pair
    assert set(np.unique(core.latency)) == {0, 1, 2}
    # each pair's model carries its variant's restitution and ball mass
    ball = core.physics.ids["ball"]
    for i in range(0, 128, 17):
        assert core.physics.models[i].body_mass[ball] == pytest.approx(p["ball_mass"][i])
    # an override (the 5 g ball) applies to every pair and variant
    light = JuggleCore(RolloutPhysics(8, nthread=1), overrides={"ball_mass": 0.005}, seed=0)
    light.reset()
    assert np.all(light.plant["ball_mass"] == 0.005)
    assert all(m.body_mass[ball] == 0.005 for m in light.physics.models)
    with pytest.raises(ValueError, match="unknown quadrotor randomization"):
        JuggleCore(RolloutPhysics(2, nthread=1), overrides={"ball_colour": 1.0})
    assert set(Randomization.load(core.randomization).parameters("eval")) <= set(NOMINAL_PLANT)


def test_juggle_eval_fixes_plant_parameters_from_the_command_line(capsys):
    from robot_rl.cli import main

    assert main(["juggle", "eval", "--policy", str(package_path("policies/quad_juggle")), "--trials", "1",
                 "--max-s", "0.5", "--split", "train_hard", "--plant", "restitution=0.7",
                 "--plant", "ball_start_offset=0,0,0.8", "--plant", "action_latency_steps=2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["split"] == "train_hard" and printed["trials"] == 1
    assert printed["fixed_plant"] == {"restitution": 0.7, "ball_start_offset": [0.0, 0.0, 0.8],
                                      "action_latency_steps": 2.0}
    with pytest.raises(ValueError, match="restitution must be in"):
        JuggleCore(RolloutPhysics(2, nthread=1), overrides={"restitution": 1.4})


def test_juggle_training_draws_from_the_split_and_fixed_plant_it_is_given(tmp_path, monkeypatch):
    # An oracle for held-out plants: trained and evaluated on that split (BENCHMARKS.md's ceiling row).
    import robot_rl.robots.quad.train as juggle

    built, evaluated = [], []
    real_env, real_evaluate = QuadJuggleVecEnv.__init__, juggle.evaluate_policy

    def env_init(self, *args, **kwargs):
        built.append(kwargs)
        real_env(self, *args, **kwargs)

    def evaluate(*args, **kwargs):
        evaluated.append(kwargs)
        return real_evaluate(*args, **kwargs)
    monkeypatch.setattr(QuadJuggleVecEnv, "__init__", env_init)
    monkeypatch.setattr(juggle, "evaluate_policy", evaluate)
    base = juggle.JuggleTrainConfig()
    cfg = dataclasses.replace(base, num_envs=8, iterations=1, eval_every=1, eval_trials=1, eval_max_s=0.2,
                              device="cpu", physics="rollout", split="heldout", overrides={"ball_mass": 0.05},
                              ppo=dataclasses.replace(base.ppo, compile=False, num_steps_per_env=4))
    card = juggle.train_juggling(cfg, tmp_path / "policy", log=lambda line: None)
    assert (built[0]["split"], built[0]["overrides"]) == ("heldout", {"ball_mass": 0.05})
    assert (evaluated[0]["split"], evaluated[0]["overrides"]) == ("heldout", {"ball_mass": 0.05})
    assert card["train_config"]["split"] == "heldout" and (tmp_path / "policy" / "policy.safetensors").exists()


def test_a_hard_fraction_draws_whole_plants_from_the_hard_end_of_the_training_ranges():
    hard_split = Randomization.load(DEFAULT_RANDOMIZATION).distributions["train_hard"]
    hard = JuggleCore(RolloutPhysics(64, nthread=1, model_variants=64), seed=1, hard_fraction=1.0)
    hard.reset()
    for name, dist in hard_split.items():
        values = hard.latency if name == "action_latency_steps" else hard.plant[name]
        if hasattr(dist, "low"):
            assert dist.low <= values.min() and values.max() <= dist.high, name
        else:
            assert set(np.unique(values)) == {2}
    # with 0.5 of the draws hard, every hard one is hard in all its per-pair parameters together
    mixed = JuggleCore(RolloutPhysics(2000, nthread=1, model_variants=8), seed=2, hard_fraction=0.5)
    mixed.reset()
    slow = mixed.plant["motor_tau"] >= 0.03125
    weak = mixed.plant["thrust_scale"] <= 0.95
    lagged = mixed.latency == 2
    assert 0.5 < slow.mean() < 0.7  # 0.5 hard + 0.5 x 0.25 of the uniform training draws
    joint = (slow & weak & lagged).mean()
    assert 0.45 < joint < 0.6  # 0.5 hard + 0.5 x (0.25 x 0.25 x 1/3) of the independent training draws
    assert JuggleCore(RolloutPhysics(4, nthread=1), seed=2).hard_fraction == 0.0
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="hard_fraction must be in"):
            JuggleCore(RolloutPhysics(2, nthread=1), hard_fraction=bad)
    with pytest.raises(ValueError, match="train_hard"):
        JuggleCore(RolloutPhysics(2, nthread=1), randomization={"train": {}, "eval": {}}, hard_fraction=0.5)


def _physics(backend: str, n: int):
    if backend == "warp":
        pytest.importorskip("mujoco_warp", reason="MuJoCo Warp is not installed (pip install mujoco-warp)")
        from robot_rl.robots.quad.warp import WarpPhysics

        return WarpPhysics(n, device="cpu")  # Warp's CPU backend: the GPU kernels, compiled for the CPU
    return RolloutPhysics(n, nthread=1, model_variants=n)


@pytest.mark.parametrize("backend", ["rollout", "warp"])
@pytest.mark.parametrize("ball_mass", [0.005, 0.047])
def test_a_drawn_ball_mass_is_its_inertia_not_just_its_weight(ball_mass, backend):
    """Free fall at g whatever the mass (a mass written into a compiled MuJoCo model changes
    only the weight unless the model's constants are rebuilt: a 5 g ball fell at 1 m/s^2)."""
    core = JuggleCore(_physics(backend, 2), randomization=None, overrides={"ball_mass": ball_mass}, auto_reset=False)
    core.reset()
    for _ in range(5):  # 0.1 s: the ball is still above the racket
        core.step(np.tile(HOVER, (2, 1)))
    vz = core.physics.state().ball_vel[:, 2]
    # air drag at 1 m/s takes ~2.5 % of g off the 5 g ball, ~0.3 % off the 47 g one
    np.testing.assert_allclose(vz, -9.81 * 0.1, rtol=0.04)
    core.physics.close()


def test_warp_physics_matches_the_rollout_physics_step_for_step():
    """Same seed, same randomized plants (masses, inertia, restitution, rotors, latency), same
    noisy actions: MuJoCo Warp (float32) tracks mujoco.rollout through a bounce and its hit."""
    n = 4
    cores = [JuggleCore(_physics(backend, n), seed=5, auto_reset=False) for backend in ("rollout", "warp")]
    for core in cores:
        core.reset()
    np.testing.assert_array_equal(cores[0].plant["ball_mass"], cores[1].plant["ball_mass"])
    rng = np.random.default_rng(0)
    for _ in range(40):  # 0.8 s: the ball falls 0.5-1 m onto the racket and flies back up
        actions = np.clip(np.tile(HOVER, (n, 1)) + 0.1 * rng.normal(size=(n, 4)), -1.0, 1.0)
        rewards = [core.step(actions)[0] for core in cores]
        np.testing.assert_allclose(rewards[0], rewards[1], atol=1e-3)
    cpu, gpu = cores[0].physics.state(), cores[1].physics.state()
    assert cores[0].task.hits.sum() >= n and np.array_equal(cores[0].task.hits, cores[1].task.hits)
    np.testing.assert_allclose(gpu.quad_pos, cpu.quad_pos, atol=1e-4)
    np.testing.assert_allclose(gpu.ball_pos, cpu.ball_pos, atol=1e-4)
    np.testing.assert_allclose(gpu.ball_vel, cpu.ball_vel, atol=1e-3)
    for core in cores:
        core.physics.close()


def test_latency_delays_the_executed_action():
    core = JuggleCore(RolloutPhysics(3, nthread=1), randomization=None, auto_reset=False)
    core.reset()
    core.latency[:] = (0, 1, 2)
    full = np.tile([1.0, 0.0, 0.0, 0.0], (3, 1))
    core.step(full)
    vz = core.physics.state().quad_vel[:, 2]
    # only the undelayed one climbs (slowly: the motors lag), the others still hover
    assert vz[0] > 0.02 and abs(vz[1]) < 0.003 and abs(vz[2]) < 0.003
    core.step(full)
    vz = core.physics.state().quad_vel[:, 2]
    assert vz[1] > 0.02 and abs(vz[2]) < 0.003
    core.physics.close()


@pytest.mark.parametrize("latency", [3, 5])
def test_a_latency_beyond_the_training_range_runs_and_delays_by_that_many_steps(latency):
    core = JuggleCore(RolloutPhysics(2, nthread=1), randomization=None, auto_reset=False,
                      overrides={"action_latency_steps": latency})
    core.reset()
    full = np.tile([1.0, 0.0, 0.0, 0.0], (2, 1))
    for _ in range(latency):
        core.step(full)
        assert np.abs(core.physics.state().quad_vel[:, 2]).max() < 0.003  # still hovering: the delay holds
    core.step(full)
    assert (core.physics.state().quad_vel[:, 2] > 0.02).all()
    core.physics.close()


@pytest.mark.parametrize("latency", [-1, 1.5, 51])
def test_an_impossible_latency_is_refused_by_name(latency):
    core = JuggleCore(RolloutPhysics(1, nthread=1), randomization=None, auto_reset=False,
                      overrides={"action_latency_steps": latency})
    with pytest.raises(ValueError, match="action_latency_steps must be whole steps"):
        core.reset()
    core.physics.close()


def test_gymnasium_single_and_vector_envs():
    env = gym.make("robot_rl/QuadJuggle-v0")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (OBS_DIM,) and obs.dtype == np.float32
    obs, reward, terminated, truncated, info = env.step(HOVER)
    assert np.isfinite(reward) and "hits" in info
    env.close()
    venv = QuadJuggleGymVectorEnv(4, nthread=1)
    obs, _ = venv.reset(seed=0)
    assert obs.shape == (4, OBS_DIM)
    saw_final = False
    for _ in range(80):
        obs, reward, terminated, truncated, infos = venv.step(np.full((4, 4), -1.0))
        if terminated.any():
            saw_final = True
            assert infos["_final_obs"][terminated].all()
    assert saw_final
    venv.close()
