"""SafetyGate timelines checked by hand, and the vector helpers (no ROS)."""

import math

import numpy as np
import pytest

from robot_rl.hardware.safety import SafetyConfig, SafetyGate, StopReason, clamp_box, limit_step

try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
except ImportError:  # pragma: no cover - property tests need hypothesis
    given = None

S = StopReason


def _active_gate(**cfg) -> SafetyGate:
    gate = SafetyGate(SafetyConfig(**cfg))
    gate.set_active(True, 0.0)
    gate.on_state(0.0)
    return gate


def test_config_refuses_bad_values():
    for bad in ({"command_timeout_s": 0.0}, {"state_timeout_s": -1.0}, {"estop_heartbeat_timeout_s": math.nan},
                {"max_command_age_s": math.inf}):
        with pytest.raises(ValueError):
            SafetyConfig(**bad)


def test_inactive_gate_never_allows_motion_and_ignores_commands():
    gate = SafetyGate(SafetyConfig(command_timeout_s=0.2, state_timeout_s=0.0))
    assert gate.verdict(0.0) is S.INACTIVE
    gate.on_command(0.0)
    assert gate.verdict(0.05) is S.INACTIVE
    gate.set_active(True, 0.1)
    assert gate.verdict(0.1) is S.STALE_COMMAND  # the command from before activation does not count
    gate.on_command(0.15)
    assert gate.verdict(0.2) is S.NONE
    gate.set_active(False, 0.25)
    assert gate.verdict(0.25) is S.INACTIVE


def test_command_watchdog_timeline():
    # timeout 0.125 s (binary-exact times, so "exactly the timeout" is exact)
    gate = _active_gate(command_timeout_s=0.125, state_timeout_s=0.0)
    assert gate.verdict(0.0) is S.STALE_COMMAND  # nothing received yet
    assert gate.counters["stale"] == 0  # "never commanded" is not a watchdog event
    gate.on_command(0.25)
    assert gate.verdict(0.3) is S.NONE
    assert gate.verdict(0.375) is S.NONE  # age 0.125: exactly the timeout is still fresh
    assert gate.verdict(0.3751) is S.STALE_COMMAND
    assert gate.verdict(0.5) is S.STALE_COMMAND
    assert gate.counters["stale"] == 1  # one expiry, counted once
    assert gate.command_expires_at() == 0.375
    gate.on_command(0.5)
    assert gate.verdict(0.55) is S.NONE
    assert gate.verdict(0.7) is S.STALE_COMMAND
    assert gate.counters["stale"] == 2
    assert gate.counters["accepted"] == 2


def test_state_watchdog():
    gate = SafetyGate(SafetyConfig(command_timeout_s=1.0, state_timeout_s=0.5))
    gate.set_active(True, 0.0)
    gate.on_command(0.0)
    assert gate.verdict(0.1) is S.NO_STATE  # no state yet
    gate.on_state(0.2)
    assert gate.verdict(0.3) is S.NONE
    assert gate.verdict(0.7) is S.NONE
    assert gate.verdict(0.71) is S.NO_STATE  # state 0.51 s old
    gate.on_state(0.8)
    assert gate.verdict(0.8) is S.NONE


def test_estop_latches_until_explicit_reset_with_false():
    gate = _active_gate(command_timeout_s=1.0, state_timeout_s=0.0)
    gate.on_command(0.0)
    assert gate.verdict(0.1) is S.NONE
    assert gate.on_estop(True, 0.2) is True
    assert gate.verdict(0.2) is S.ESTOP
    gate.on_command(0.25)  # commands during the stop do not revive the robot
    assert gate.on_estop(True, 0.3) is False  # already latched: not a new trip
    ok, why = gate.reset_estop(0.35)
    assert not ok and "still asserted" in why
    gate.on_estop(False, 0.4)
    assert gate.verdict(0.45) is S.ESTOP  # False alone does not release
    ok, why = gate.reset_estop(0.5)
    assert ok and "released" in why
    assert gate.verdict(0.5) is S.STALE_COMMAND  # waits for a new command after the reset
    gate.on_command(0.6)
    assert gate.verdict(0.6) is S.NONE
    assert gate.counters["estop_trips"] == 1 and gate.counters["estop_resets"] == 1
    ok, why = gate.reset_estop(0.7)
    assert ok and "not latched" in why


def test_estop_reported_even_when_inactive():
    gate = SafetyGate(SafetyConfig(state_timeout_s=0.0))
    gate.on_estop(True, 0.0)
    assert gate.verdict(0.0) is S.ESTOP


def test_heartbeat_timeline():
    gate = _active_gate(command_timeout_s=10.0, state_timeout_s=0.0, estop_heartbeat_timeout_s=0.15)
    gate.on_command(0.0)
    assert gate.verdict(0.0) is S.ESTOP_HEARTBEAT  # never heard: hold, but nothing tripped
    assert gate.counters["estop_trips"] == 0
    ok, why = gate.reset_estop(0.0)
    assert not ok and "heartbeat" in why
    gate.on_estop(False, 0.1)
    assert gate.verdict(0.1) is S.STALE_COMMAND  # the command from before is not revived
    gate.on_command(0.12)
    assert gate.verdict(0.2) is S.NONE
    gate.on_estop(False, 0.2)
    assert gate.verdict(0.35) is S.NONE  # heartbeat 0.15 s old: fresh
    assert gate.verdict(0.36) is S.ESTOP_HEARTBEAT  # publisher went silent: trips and latches
    assert gate.counters["estop_trips"] == 1
    gate.on_estop(False, 0.5)  # heartbeat back: still latched
    gate.on_command(0.5)
    assert gate.verdict(0.5) is S.ESTOP_HEARTBEAT
    ok, _ = gate.reset_estop(0.7)  # heartbeat 0.2 s old at the reset: refused
    assert not ok
    gate.on_estop(False, 0.75)
    ok, _ = gate.reset_estop(0.8)
    assert ok
    gate.on_command(0.8)
    assert gate.verdict(0.85) is S.NONE


def test_heartbeat_gap_between_verdicts_still_trips():
    gate = _active_gate(command_timeout_s=10.0, state_timeout_s=0.0, estop_heartbeat_timeout_s=0.1)
    gate.on_estop(False, 0.0)
    gate.on_estop(False, 0.5)  # 0.5 s gap, no verdict called in between
    assert gate.counters["estop_trips"] == 1
    assert gate.verdict(0.5) is S.ESTOP_HEARTBEAT


def test_explicit_estop_outranks_heartbeat_loss():
    gate = _active_gate(state_timeout_s=0.0, estop_heartbeat_timeout_s=0.1)
    gate.on_estop(False, 0.0)
    assert gate.verdict(0.2) is S.ESTOP_HEARTBEAT
    gate.on_estop(True, 0.25)
    assert gate.verdict(0.25) is S.ESTOP
    assert gate.counters["estop_trips"] == 1  # one latched stop


def test_late_commands_are_refused_and_counted():
    gate = _active_gate(command_timeout_s=1.0, state_timeout_s=0.0, max_command_age_s=0.2)
    assert gate.on_command(0.0, stamp_age_s=0.5) is False
    assert gate.verdict(0.0) is S.STALE_COMMAND
    assert gate.on_command(0.1, stamp_age_s=0.05) is True
    assert gate.verdict(0.1) is S.NONE
    gate.reject("nan")
    c = gate.counters
    assert (c["late"], c["rejected"], c["accepted"]) == (1, 2, 1)
    assert gate.reject_reasons == {"late": 1, "nan": 1}
    status = gate.status(0.2)
    assert status["rejected"] == 2 and status["last_reject_reason"] == "nan" and status["active"] is True


def test_clamp_box():
    v, was = clamp_box([0.5, -2.0, 3.0], [0, -1, 0], [1, 1, 1])
    assert v.tolist() == [0.5, -1.0, 1.0] and was
    v, was = clamp_box(np.array([0.2, 0.3]), 0.0, 1.0)
    assert v.tolist() == [0.2, 0.3] and not was
    for bad in ([math.nan, 0, 0], [0, math.inf, 0]):
        with pytest.raises(ValueError, match="NaN or Inf"):
            clamp_box(bad, -1, 1)
    with pytest.raises(ValueError):
        clamp_box([0, 0, 0], [0, 0], [1, 1])  # shapes
    with pytest.raises(ValueError):
        clamp_box([0.0], 1.0, -1.0)  # low > high
    with pytest.raises(ValueError):
        clamp_box(0.0, [0, 0], [1, 1])  # limits would broadcast the value
    with pytest.raises(ValueError):
        clamp_box([0.0], [math.nan], [1.0])


def test_limit_step():
    v, was = limit_step([1.0, 0.02, -1.0], [0.0, 0.0, 0.0], 0.05)
    np.testing.assert_allclose(v, [0.05, 0.02, -0.05])
    assert was
    v, was = limit_step([0.1, 0.2], [0.09, 0.25], [0.05, 0.1])
    assert v.tolist() == [0.1, 0.2] and not was  # unlimited elements are the target exactly
    with pytest.raises(ValueError):
        limit_step([0.0, math.nan], [0.0, 0.0], 0.1)
    with pytest.raises(ValueError):
        limit_step([0.0], [math.inf], 0.1)
    with pytest.raises(ValueError):
        limit_step([0.0], [0.0], -0.1)
    with pytest.raises(ValueError):
        limit_step([0.0, 0.0], [0.0], 0.1)


if given is not None:
    finite = st.floats(-1e12, 1e12, allow_nan=False)
    vec3 = hnp.arrays(np.float64, 3, elements=finite)

    @settings(max_examples=200, deadline=None)
    @given(vec3, vec3, vec3)
    def test_clamp_box_property(v, a, b):
        low, high = np.minimum(a, b), np.maximum(a, b)
        out, was = clamp_box(v, low, high)
        assert ((out >= low) & (out <= high)).all()
        assert was == bool((out != v).any())
        assert (out[(v >= low) & (v <= high)] == v[(v >= low) & (v <= high)]).all()

    @settings(max_examples=200, deadline=None)
    @given(vec3, vec3, hnp.arrays(np.float64, 3, elements=st.floats(0, 1e6)))
    def test_limit_step_property(target, current, step):
        out, was = limit_step(target, current, step)
        # tolerance: current + step is rounded once
        assert (np.abs(out - current) <= step * (1 + 1e-12) + 1e-9 * np.abs(current)).all()
        assert was == bool((np.abs(target - current) > step).any())
        # never overshoots the target
        assert (np.abs(out - target) <= np.abs(target - current) + 1e-9 * np.abs(current)).all()

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(["cmd", "state", "estop_t", "estop_f", "reset", "tick"]),
                              st.floats(0.0, 0.3)), max_size=40))
    def test_gate_never_allows_motion_during_estop(events):
        gate = _active_gate(command_timeout_s=0.15, state_timeout_s=0.5)
        now, estopped = 0.0, False
        for kind, dt in events:
            now += dt
            if kind == "cmd":
                gate.on_command(now)
            elif kind == "state":
                gate.on_state(now)
            elif kind == "estop_t":
                gate.on_estop(True, now)
                estopped = True
            elif kind == "estop_f":
                gate.on_estop(False, now)
            elif kind == "reset":
                ok, _ = gate.reset_estop(now)
                estopped = estopped and not ok
            verdict = gate.verdict(now)
            if estopped:
                assert verdict is S.ESTOP
            if verdict is S.NONE:
                assert gate.command_expires_at() >= now
