"""Quadrotor physics and low-level control: hover, rate tracking, motor lag, mixer, CTBR mapping,
ball-racket restitution, input validation (robot_rl.robots.quad.control, robot_rl.robots.quad.env)."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from robot_rl.robots.quad.control import (
    CTBR_MAX_RATE, MotorModel, QuadController, QuadParams, RateController, ctbr_from_action, mix,
)
from robot_rl.robots.quad.env import (
    QuadJuggleConfig, QuadJuggleSim, contact_restitution, solref_for_restitution,
)

FAR_BALL = (3.0, 3.0, 0.04)  # ball resting on the floor out of the way


@pytest.fixture(scope="module")
def sim() -> QuadJuggleSim:
    return QuadJuggleSim()


# --------------------------------------------------------------------------- flight


def test_model_parameters(sim):
    p = sim.params
    assert p.mass == pytest.approx(1.0)
    assert p.arm_length == pytest.approx(0.17, abs=1e-4)
    assert sim.model.opt.timestep == 0.002 and sim.n_substeps == 10
    assert np.all(np.asarray(p.inertia) > 4e-3) and np.all(np.asarray(p.inertia) < 1e-2)
    assert float(p.max_rotor_thrust) * 4 == pytest.approx(2.5 * 9.81)


@pytest.mark.parametrize("kick", [None, (0.3, -0.3, 0.5)])
def test_hover_holds_altitude(sim, kick):
    """From rest at 1 m (motors at hover throttle), thrust = g and zero rates; ``kick``: initial
    body rates [rad/s] the rate loop has to stop (it leaves a small tilt: no attitude loop)."""
    sim.reset(quad_pos=(0.0, 0.0, 1.0), quad_rates=kick, ball_pos=FAR_BALL)
    g = sim.params.gravity
    for _ in range(25):  # settle 0.5 s
        sim.step([g, 0.0, 0.0, 0.0])
    z0 = sim.state()["quad_pos"][2]
    zs, tilts = [], []
    for _ in range(100):  # 2 s
        sim.step([g, 0.0, 0.0, 0.0])
        s = sim.state()
        zs.append(s["quad_pos"][2])
        tilts.append(math.acos(np.clip(s["racket_normal"][2], -1, 1)))
    dev = np.max(np.abs(np.array(zs) - z0))
    assert abs(z0 - 1.0) < 0.05
    assert dev < 0.05, dev
    assert max(tilts) < (0.01 if kick is None else 0.05)


@pytest.mark.parametrize("axis,rate", [(0, 1.0), (0, -1.0), (1, 1.0)])
def test_body_rate_step_tracked(sim, axis, rate):
    sim.reset(ball_pos=FAR_BALL)
    g = sim.params.gravity
    for _ in range(5):
        sim.step([g, 0.0, 0.0, 0.0])
    cmd = np.array([g, 0.0, 0.0, 0.0])
    cmd[1 + axis] = rate
    measured = []
    for _ in range(20):  # 0.4 s
        sim.step(cmd)
        measured.append(sim.state()["quad_rates"])
    measured = np.array(measured)
    # after 0.2 s (10 policy steps) and from then on: within 10 %
    assert np.all(np.abs(measured[9:, axis] - rate) < 0.1 * abs(rate)), measured[:, axis]
    others = [i for i in range(3) if i != axis]
    assert np.all(np.abs(measured[:, others]) < 0.02)


def test_yaw_rate_step_tracked(sim):
    sim.reset(ball_pos=FAR_BALL)
    g = sim.params.gravity
    for _ in range(15):  # 0.3 s
        sim.step([g, 0.0, 0.0, 1.0])
    assert sim.state()["quad_rates"][2] == pytest.approx(1.0, abs=0.1)


def test_mixer_matches_plant(sim):
    """The rotor actuators (site gear) produce exactly the torques the mixer allocated."""
    sim.reset(ball_pos=FAR_BALL)
    p = sim.params
    tau = np.array([0.12, -0.08, 0.03])
    thrusts = mix(p.mass * p.gravity, tau, p.arm_length, p.yaw_moment_coeff, p.max_rotor_thrust)
    m, d = sim.model, sim.data
    d.ctrl[:4] = thrusts
    mujoco.mj_forward(m, d)
    np.testing.assert_allclose(d.qfrc_actuator[3:6], tau, atol=1e-9)  # free joint: body-frame torques
    np.testing.assert_allclose(d.qfrc_actuator[0:3], [0.0, 0.0, p.mass * p.gravity], atol=1e-9)


# --------------------------------------------------------------------------- motor model


def test_motor_lag_time_constant():
    tau, dt = 0.027, 0.002
    motors = MotorModel(max_thrust=6.0, tau=tau)
    t, history = 0.0, []
    for _ in range(100):
        thrust = motors.step(np.ones(4), dt)
        t += dt
        history.append((t, motors.throttle[0], thrust[0]))
    times = np.array([h[0] for h in history])
    throttle = np.array([h[1] for h in history])
    t63 = times[np.argmax(throttle >= 1.0 - math.exp(-1.0))]
    assert abs(t63 - tau) <= dt
    np.testing.assert_allclose([h[2] for h in history], 6.0 * throttle**2)  # thrust = k_f throttle^2
    assert throttle[-1] == pytest.approx(1.0 - math.exp(-0.2 / tau))


def test_motor_model_batched_per_quad_tau():
    motors = MotorModel(max_thrust=np.array([5.0, 6.0]), tau=np.array([0.02, 0.04]), n=2)
    motors.step(np.ones((2, 4)), 0.02)
    np.testing.assert_allclose(motors.throttle[:, 0], 1.0 - np.exp(-0.02 / np.array([0.02, 0.04])))
    motors.reset(np.array([0.3, 0.6]))
    np.testing.assert_allclose(motors.throttle, [[0.3] * 4, [0.6] * 4])


# --------------------------------------------------------------------------- mixer

ARM, KM, FMAX, W = 0.17, 0.016, 6.13125, 9.81


def test_mixer_pure_yaw_by_hand():
    f = mix(W, [0.0, 0.0, 0.05], ARM, KM, FMAX)
    # T/4 = 2.4525 N; yaw share 0.05 / (4 * 0.016) = 0.78125 N; rotors 0, 1 react -z, rotors 2, 3 +z
    np.testing.assert_allclose(f, [1.67125, 1.67125, 3.23375, 3.23375], atol=1e-9)


def test_mixer_pure_roll_by_hand():
    f = mix(W, [0.2, 0.0, 0.0], ARM, KM, FMAX)
    # d = 0.17 / sqrt(2) = 0.1202082; roll share 0.2 / (4 d) = 0.4159452 N; +y rotors (1, 2) push up
    np.testing.assert_allclose(f, [2.0365548, 2.8684452, 2.8684452, 2.0365548], atol=1e-6)


def _torques(f, arm=ARM, km=KM):
    d = arm / math.sqrt(2.0)
    sx = np.array([1, -1, 1, -1])
    sy = np.array([-1, 1, 1, -1])
    s = np.array([-1, -1, 1, 1])
    return np.stack([(f * sy * d).sum(-1), -(f * sx * d).sum(-1), (f * s * km).sum(-1)], -1)


def test_mixer_saturation_keeps_range_and_priorities():
    rng = np.random.default_rng(0)
    n = 2000
    T = rng.uniform(-5.0, 40.0, n)
    tau = rng.normal(0.0, 1.0, (n, 3)) * [1.5, 1.5, 0.5] * 10.0 ** rng.uniform(-2.5, 0.0, (n, 1))
    f = mix(T, tau, ARM, KM, FMAX)
    assert f.shape == (n, 4)
    assert np.all(f >= 0.0) and np.all(f <= FMAX)
    got = _torques(f)
    d = ARM / math.sqrt(2.0)
    rp_spread = 2.0 * (np.abs(tau[:, 0]) + np.abs(tau[:, 1])) / (4.0 * d)  # max - min of the roll/pitch part
    feasible = rp_spread <= FMAX
    # roll/pitch kept exactly when they fit; otherwise scaled with their direction kept
    np.testing.assert_allclose(got[feasible, :2], tau[feasible, :2], atol=1e-9)
    ratio = got[~feasible, :2] / tau[~feasible, :2]
    np.testing.assert_allclose(ratio[:, 0], ratio[:, 1], rtol=1e-9)
    assert np.all(ratio < 1.0)
    # yaw is only ever reduced, never reversed or amplified
    yaw_ratio = got[:, 2] / tau[:, 2]
    assert np.all(yaw_ratio >= -1e-9) and np.all(yaw_ratio <= 1.0 + 1e-9)
    # a request the rotors can meet is allocated exactly (the unsaturated inverse)
    sx, sy, sgn = np.array([1, -1, 1, -1]), np.array([-1, 1, 1, -1]), np.array([-1, -1, 1, 1])
    exact = (T[:, None] / 4 + (tau[:, :1] * sy - tau[:, 1:2] * sx) / (4 * d) + tau[:, 2:] * sgn / (4 * KM))
    fits = np.all((exact >= 0) & (exact <= FMAX), axis=1)
    assert 100 < fits.sum() < n - 100
    np.testing.assert_allclose(f[fits], exact[fits], atol=1e-12)


def test_mixer_zero_thrust_keeps_attitude_authority():
    f = mix(0.0, [0.1, 0.0, 0.0], ARM, KM, FMAX)
    assert f.min() == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(_torques(f)[0], 0.1)


def test_mixer_yaw_yields_to_collective():
    f = mix(4 * FMAX * 0.98, [0.0, 0.0, 0.2], ARM, KM, FMAX)  # near full thrust, big yaw request
    assert f.sum() == pytest.approx(4 * FMAX * 0.98)
    assert 0.0 < _torques(f)[2] < 0.2
    assert f.max() == pytest.approx(FMAX)


# --------------------------------------------------------------------------- CTBR


def test_ctbr_from_action_mapping():
    np.testing.assert_allclose(ctbr_from_action([-1, -1, -1, -1]), [0.0, -math.pi, -math.pi, -math.pi])
    np.testing.assert_allclose(ctbr_from_action([0, 0, 0, 0]), [7.5, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(ctbr_from_action([1, 1, 1, 1]), [15.0, math.pi, math.pi, math.pi])
    batch = ctbr_from_action(np.array([[1, 0, -1, 0.5], [3.0, -7.0, 0, 0]]))  # clipped beyond +-1
    np.testing.assert_allclose(batch, [[15.0, 0.0, -math.pi, math.pi / 2], [15.0, -math.pi, 0.0, 0.0]])


@pytest.mark.parametrize("bad", [[np.nan, 0, 0, 0], [0, 0, np.inf, 0], [[0, 0, 0, 0], [0, np.nan, 0, 0]]])
def test_non_finite_actions_refused(bad):
    with pytest.raises(ValueError):
        ctbr_from_action(bad)


def test_non_finite_commands_refused_by_controller_and_sim(sim):
    ctrl = QuadController(QuadParams())
    with pytest.raises(ValueError):
        ctrl.step([np.nan, 0, 0, 0], np.zeros(3), 0.002)
    with pytest.raises(ValueError):
        ctrl.step([9.81, 0, 0, 0], [0.0, np.nan, 0.0], 0.002)
    with pytest.raises(ValueError):
        ctbr_from_action([0, 0, 0])
    sim.reset(ball_pos=FAR_BALL)
    t0 = sim.time
    with pytest.raises(ValueError):
        sim.step([9.81, 0.0, np.nan, 0.0])
    with pytest.raises(ValueError):
        sim.step_action([0.0, np.nan, 0.0, 0.0])
    with pytest.raises(ValueError):
        sim.step([9.81, 0.0, 0.0])
    assert sim.time == t0


def test_command_clamped_to_limits():
    ctrl = QuadController(QuadParams())
    np.testing.assert_allclose(ctrl.clamp_ctbr([40.0, 10.0, -10.0, 1.0]),
                               [15.0, CTBR_MAX_RATE, -CTBR_MAX_RATE, 1.0])


def test_batched_controller_matches_single():
    rng = np.random.default_rng(1)
    n = 3
    masses = np.array([0.8, 1.0, 1.3])
    inertia = np.array([[4e-3, 4e-3, 7e-3], [5.6e-3, 5.6e-3, 8.8e-3], [7e-3, 7e-3, 1e-2]])
    batch = QuadController(QuadParams(mass=masses, inertia=inertia), n=n)
    singles = [QuadController(QuadParams(mass=masses[i], inertia=inertia[i])) for i in range(n)]
    for _ in range(20):
        cmd = ctbr_from_action(rng.uniform(-1, 1, (n, 4)))
        rates = rng.normal(0, 1, (n, 3))
        out = batch.step(cmd, rates, 0.002)
        for i in range(n):
            np.testing.assert_allclose(out[i], singles[i].step(cmd[i], rates[i], 0.002), atol=1e-12)
    batch.reset(mask=np.array([True, False, False]))
    assert np.all(batch.rate.integral[0] == 0) and np.any(batch.rate.integral[1] != 0)


def test_rate_integral_is_clamped():
    rc = RateController(np.array([5e-3, 5e-3, 8e-3]))
    for _ in range(5000):
        rc.step(np.array([3.0, -3.0, 3.0]), np.zeros(3), 0.002)
    np.testing.assert_allclose(np.abs(rc._ki * rc.integral), rc.gains.i_limit)


# --------------------------------------------------------------------------- restitution


def _drop(sim: QuadJuggleSim, height: float) -> tuple[float, float]:
    """Drop the ball onto the racket centre from ``height`` (ball bottom above the racket top);
    returns the relative normal speeds at the first penetrating sample and at the first sample
    back above the surface (500 Hz)."""
    top = sim.state()["racket_pos"][2]
    sim.reset(ball_pos=(0.0, 0.0, top + 0.04 + height))
    racket_vel = np.zeros(6)
    gaps, rel = [], []
    for _ in range(int(2.0 * math.sqrt(2 * height / 9.81) / 0.002) + 60):
        sim.step_physics(np.array([sim.params.gravity, 0.0, 0.0, 0.0]))
        mujoco.mj_objectVelocity(sim.model, sim.data, mujoco.mjtObj.mjOBJ_SITE,
                                 sim.model.site("racket_center").id, racket_vel, 0)
        s = sim.state()
        gaps.append(s["ball_pos"][2] - 0.04 - s["racket_pos"][2])
        rel.append(s["ball_vel"][2] - racket_vel[5])
    gaps = np.array(gaps)
    first = int(np.argmax(gaps < 0.0))
    assert gaps[first] < 0.0, "the ball never reached the racket"
    last = first + int(np.argmax(gaps[first:] >= 0.0))
    assert last > first, "the ball never left the racket"
    return -rel[first], rel[last]


@pytest.mark.parametrize("e", [0.7, 0.85, 1.0])
def test_ball_rebound_restitution_fixed_racket(e):
    sim = QuadJuggleSim(QuadJuggleConfig(restitution=e, fix_quad=True))
    v_in, v_out = _drop(sim, 0.5)
    assert v_in == pytest.approx(math.sqrt(2 * 9.81 * 0.5), rel=0.025)  # air drag takes ~1.3 %
    assert abs(v_out / v_in - e) <= 0.05, (e, v_out / v_in)


def test_ball_rebound_restitution_hovering_quad():
    """Relative normal restitution is the same on the free (hovering) quadrotor."""
    sim = QuadJuggleSim(QuadJuggleConfig(restitution=0.8))
    v_in, v_out = _drop(sim, 0.5)
    assert abs(v_out / v_in - 0.8) <= 0.05


def test_solref_for_restitution_round_trip():
    for e in (0.5, 0.8, 0.95):
        solref = solref_for_restitution(e)
        assert solref[0] < 0 and solref[1] <= 0
        assert contact_restitution(-solref[0], -solref[1]) == pytest.approx(e, abs=1e-3)
    assert solref_for_restitution(1.0)[1] == pytest.approx(0.0, abs=0.05)
    for bad in (0.0, 1.2, float("nan")):
        with pytest.raises(ValueError):
            solref_for_restitution(bad)
    with pytest.raises(ValueError):
        solref_for_restitution(0.8, natural_frequency=1000.0)  # w dt = 2: unresolved
