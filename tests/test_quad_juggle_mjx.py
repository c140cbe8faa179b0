"""The juggling env on MuJoCo MJX (JAX), on the CPU: its controller against the numpy one, its physics and
task against CPU MuJoCo and JuggleTask step for step, its plant draws, its torch face and a PPO round.

The GPU figures are benchmarks (benchmarks/gpu_run.sh); here JAX runs on the CPU, where one env of a size
compiles in ~30 s, so one env serves every test that steps it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("mujoco.mjx")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

from robot_rl.robots.quad.control import QuadController, QuadParams, mix  # noqa: E402
from robot_rl.robots.quad.control_jax import ControllerConstants, ControllerState, controller_step  # noqa: E402
from robot_rl.robots.quad.control_jax import mix as mix_jax  # noqa: E402
from robot_rl.robots.quad.mjx import QuadJuggleMJXVecEnv, _PlantDraws  # noqa: E402
from robot_rl.robots.quad.physics import RolloutPhysics  # noqa: E402
from robot_rl.robots.quad.backends import make_vec_env  # noqa: E402
from robot_rl.robots.quad.vec_env import DEFAULT_RANDOMIZATION, HOVER_ACTION, JuggleCore  # noqa: E402
from robot_rl.envs.randomization import Randomization  # noqa: E402

N = 2
RESTITUTIONS = (0.7, 1.0)
# every pair starts the same way and draws only its restitution: pair i gets RESTITUTIONS[i] below
PLANTS = {split: {"restitution": {"choice": list(RESTITUTIONS)}} for split in ("train", "eval")}


@pytest.fixture(scope="module")
def vec_env():
    env = make_vec_env(N, device="cpu", physics="mjx", randomization=PLANTS, seed=3)
    assert isinstance(env, QuadJuggleMJXVecEnv)
    return env


def test_controller_matches_the_numpy_controller_step_by_step():
    n, dt = 64, 0.002
    rng = np.random.default_rng(0)
    tau = rng.uniform(0.02, 0.035, n)
    reference = QuadController(QuadParams(motor_tau=tau), n=n)
    consts = ControllerConstants.of(reference)
    state = ControllerState(*(jnp.asarray(x) for x in (reference.rate.integral, reference.rate.rate_dot,
                                                        reference.rate._prev, reference.rate._has_prev,
                                                        reference.motors.throttle)))
    worst = 0.0
    for step in range(40):
        # thrust from 0 to 15 m/s^2 and rates up to pi rad/s: many rows saturate the mixer
        ctbr = np.column_stack([rng.uniform(0, 15, n), rng.uniform(-math.pi, math.pi, (n, 3))])
        rates = rng.normal(0, 2.0, (n, 3))
        expected = reference.step(ctbr, rates, dt, validated=True)
        state, thrust = controller_step(state, jnp.asarray(ctbr, jnp.float32), jnp.asarray(rates, jnp.float32), dt,
                                        jnp.asarray(tau, jnp.float32), consts)
        worst = max(worst, float(np.abs(np.asarray(thrust) - expected).max()))
    # float32 against float64 under random rate jumps (a 1,000 rad/s^2 derivative): 0.02 % of a rotor's 6.1 N
    assert worst < 1e-3, f"rotor thrusts differ by up to {worst} N"


def test_mixer_priorities_match_when_saturated():
    rng = np.random.default_rng(1)
    params = QuadParams()
    consts = ControllerConstants.of(QuadController(params, n=200))
    collective = rng.uniform(0, 30, 200)
    torques = rng.normal(0, 1.0, (200, 3)) * np.array([1.0, 1.0, 0.2])
    expected = mix(collective, torques, params.arm_length, params.yaw_moment_coeff, params.max_rotor_thrust)
    got = np.asarray(mix_jax(jnp.asarray(collective, jnp.float32), jnp.asarray(torques, jnp.float32), consts))
    fmax = float(params.max_rotor_thrust)
    saturated = np.any((expected <= 1e-9) | (expected >= fmax - 1e-9), axis=1)
    assert saturated.sum() > 50, "the draw should saturate many rows"
    np.testing.assert_allclose(got, expected, atol=2e-4)


def _cpu_twin(env: QuadJuggleMJXVecEnv) -> JuggleCore:
    """CPU MuJoCo with each pair's drawn restitution, the same start, and the ball's drag model MJX has."""
    physics = RolloutPhysics(N, model_variants=N, nthread=1)
    core = JuggleCore(physics, randomization=None, auto_reset=False)
    core.reset()
    drawn = np.asarray(env.env.state.plant["restitution"], np.float64)
    for i, e in enumerate(drawn):
        physics.set_variant(i, {"restitution": float(e), "ball_mass": 0.047, "mass_scale": 1.0, "inertia_scale": 1.0})
    core.plant["restitution"][:] = drawn
    for model in physics.variants:  # MJX has the inertia-box fluid model only (quad_juggle_mjx's docstring)
        model.geom_fluid[physics.ids["ball_geom"], 0] = 0.0
    return core


def test_physics_and_task_match_cpu_mujoco_through_bounces(vec_env):
    obs, _ = vec_env.reset()
    drawn = np.asarray(vec_env.env.state.plant["restitution"], np.float64).round(3)
    assert sorted(drawn.tolist()) == list(RESTITUTIONS), "seed 3 should give the two pairs different balls"
    core = _cpu_twin(vec_env)
    np.testing.assert_allclose(obs["critic"].numpy(), core.observations()[1], atol=1e-5)
    spec = vec_env.env.spec
    hits = np.zeros(N, int)
    worst_pos = worst_vel = worst_obs = 0.0
    for t in range(60):  # the ball falls 0.65 m, bounces (at ~0.35 s), rises and falls again
        a = np.tile([HOVER_ACTION + 0.05 * math.sin(t / 5), 0.03 * math.sin(t / 7), 0.03 * math.cos(t / 6), 0.0],
                    (N, 1))
        obs, reward, terminated, truncated, extras = vec_env.step(torch.as_tensor(a, dtype=torch.float32))
        cpu_reward, cpu_terminated, _, info = core.step(a)
        s = core.physics.state()
        qpos, qvel = np.asarray(vec_env.env.state.data.qpos), np.asarray(vec_env.env.state.data.qvel)
        worst_pos = max(worst_pos, np.abs(qpos[:, spec.bq:spec.bq + 3] - s.ball_pos).max(),
                        np.abs(qpos[:, spec.qq:spec.qq + 3] - s.quad_pos).max())
        worst_vel = max(worst_vel, np.abs(qvel[:, spec.bv:spec.bv + 3] - s.ball_vel).max())
        worst_obs = max(worst_obs, np.abs(obs["critic"].numpy() - core.observations()[1]).max())
        # a hit's reward reads the ball's distance from the racket axis at 0.05 m scale: float32 physics moves it
        # by a fraction of a millimetre (5.4650 against 5.4663 at the first hit)
        np.testing.assert_allclose(reward.numpy(), cpu_reward, rtol=1e-3, atol=2e-3)
        assert terminated.numpy().tolist() == cpu_terminated.tolist()
        hits += info["events"]["hit"]
    # two bounces in float32 against float64: 0.2 mm and 0.01 m/s of 3 m/s on the machine this was written on,
    # 2.1 mm and 0.026 m/s on another (an AVX-512 AMD EPYC, 2026-11-29, the same pins, MuJoCo 3.17 or 4.0 alike:
    # XLA's float32 contact solve, every step's reward still within the tolerance above). Wrong physics is off by
    # centimetres: the racket is 15 cm across and a hit's reward reads the ball's offset at a 5 cm scale.
    assert worst_pos < 5e-3 and worst_vel < 5e-2, (worst_pos, worst_vel)
    assert worst_obs < 5e-2  # the ball velocity it holds (0.026 on the EPYC above, as worst_vel)
    assert np.asarray(vec_env.env.state.task.contacts).tolist() == core.task.contacts.tolist()
    assert (core.task.contacts >= 1).all(), "every ball should have met the racket"


def test_bad_actions_are_refused_and_nothing_is_simulated(vec_env):
    vec_env.reset()
    before = np.asarray(vec_env.env.state.data.qpos).copy()
    bad = torch.zeros(N, 4)
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="non-finite rows \\[1\\]"):
        vec_env.step(bad)
    with pytest.raises(ValueError, match="shape"):
        vec_env.step(torch.zeros(N, 3))
    np.testing.assert_array_equal(np.asarray(vec_env.env.state.data.qpos), before)


def test_finished_pairs_restart_inside_the_step(vec_env):
    obs, _ = vec_env.reset()
    assert obs["policy"].dtype == torch.float32 and obs["policy"].shape == (N, 32)
    assert obs["critic"].shape == (N, 41)
    ended = torch.zeros(N, dtype=torch.bool)
    for _ in range(100):  # full thrust: the quadrotors climb out of the allowed box
        obs, reward, terminated, truncated, extras = vec_env.step(torch.ones(N, 4))
        ended |= terminated
        if terminated.any():
            break
    assert ended.all(), "full thrust for 2 s should end every episode"
    assert "Episode/hits" in extras["log"] and extras["log"]["Episode/crash"] == 1.0
    assert (vec_env.episode_length_buf == 0).all(), "ended pairs are in new episodes"
    np.testing.assert_allclose(np.asarray(vec_env.env.state.data.qpos)[:, 2], 1.0, atol=0.11)


def test_plant_draws_follow_the_split_the_hard_share_and_the_overrides():
    rand = Randomization.load(DEFAULT_RANDOMIZATION)
    draws = _PlantDraws.build(rand, "train", 0.5, {"ball_mass": 0.05})
    values = {k: np.asarray(v) for k, v in draws.draw(jax.random.PRNGKey(0), 4000).items()}
    assert np.all((values["restitution"] >= 0.7) & (values["restitution"] <= 1.0))
    assert np.all(values["ball_mass"] == np.float32(0.05))
    assert set(np.unique(values["action_latency_steps"]).tolist()) == {0.0, 1.0, 2.0}
    # train_hard puts restitution in [0.7, 0.775]: half the draws, plus a quarter of train's half
    hard = values["restitution"] <= 0.775
    assert 0.6 < hard.mean() < 0.65
    assert values["quad_start_offset"].shape == (4000, 3)
    assert np.all(np.abs(values["quad_start_offset"][:, :2]) <= 0.07 + 1e-6)


def _one_split(parameters: dict) -> Randomization:
    return Randomization.load({"train": parameters, "eval": {}})


def test_plants_the_device_cannot_draw_are_refused():
    with pytest.raises(ValueError, match="restitution must be drawn from \\[0.3, 1\\]"):
        _PlantDraws.build(_one_split({"restitution": {"uniform": [0.1, 0.9]}}), "train", 0.0, {})
    with pytest.raises(ValueError, match="action_latency_steps must be whole steps"):
        _PlantDraws.build(_one_split({"action_latency_steps": {"uniform": [0, 2]}}), "train",
                          0.0, {})
    with pytest.raises(ValueError, match="unknown quadrotor randomization parameter"):
        _PlantDraws.build(_one_split({"restitutoin": {"uniform": [0.7, 0.9]}}), "train", 0.0, {})


def test_ppo_trains_on_it_through_the_runner(vec_env, tmp_path):
    from dataclasses import replace

    from robot_rl.robots.quad.train import _juggle_ppo_defaults
    from robot_rl.training.ppo_runner import OnPolicyRunner

    config = replace(_juggle_ppo_defaults(), num_steps_per_env=8, num_mini_batches=1, compile=False)
    runner = OnPolicyRunner(vec_env, config, log_dir=str(tmp_path), device="cpu", seed=0)
    before = [p.detach().clone() for p in runner.alg.actor_critic.parameters()]
    stats = runner.learn(2)
    assert len(stats) == 2 and all(math.isfinite(s["mean_return"]) for s in stats if "mean_return" in s)
    assert runner.total_env_steps == 2 * 8 * N
    assert any(not torch.equal(a, b) for a, b in zip(before, runner.alg.actor_critic.parameters()))
