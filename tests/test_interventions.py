"""The scripted human of HIL-SERL (robot_rl.teleop.scripted_human)."""

import os

os.environ.setdefault("MUJOCO_GL", "osmesa")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from robot_rl.robots.arm.sim import ArmSim  # noqa: E402
from robot_rl.tasks import get_task  # noqa: E402
from robot_rl.teleop.scripted_human import InterventionConfig, ScriptedIntervener  # noqa: E402

TASK = get_task("arm_pick_cube")
ZERO = np.zeros(4, np.float32)


@pytest.fixture(scope="module")
def start_state():
    sim = ArmSim()
    sim.reset(np.random.default_rng(0))  # EE ~17 cm above the cube: the expert moves toward it
    yield sim.state()
    sim.close()


def test_takes_over_a_bad_policy_after_the_streak_and_holds(start_state):
    cfg = InterventionConfig(off_track_steps=3, hold_steps=4, decay_steps=0, takeover_prob_end=1.0)
    intervener = ScriptedIntervener(TASK.expert, cfg)
    rng = np.random.default_rng(0)
    flags = []
    for _ in range(14):
        action, intervened = intervener(start_state, ZERO, rng)
        flags.append(intervened)
        if intervened:
            np.testing.assert_array_equal(action, TASK.expert(start_state, rng, 0.0))
        else:
            np.testing.assert_array_equal(action, ZERO)
    # 3 disagreeing steps judged, then 4 expert steps, then judging starts over.
    assert flags == [False, False, True, True, True, True, False, False, True, True, True, True, False, False]
    assert intervener.intervention_steps == 8
    # Wrong direction or a wrong gripper command disagree too; the expert's own action does not.
    expert = TASK.expert(start_state, rng, 0.0)
    assert intervener.disagrees(-expert, expert)
    assert intervener.disagrees(np.concatenate([expert[:3], -expert[3:]]), expert)
    assert not intervener.disagrees(expert, expert)
    assert not intervener.disagrees(np.concatenate([0.5 * expert[:3], expert[3:]]), expert)


def test_never_takes_over_a_policy_that_acts_like_the_expert_and_rescues_one_that_does_not():
    sim = ArmSim()
    cfg = InterventionConfig(off_track_steps=1, hold_steps=3, decay_steps=0, takeover_prob_end=1.0)
    try:
        for policy in ("expert", "zero"):
            intervener = ScriptedIntervener(TASK.expert, cfg)
            rng = np.random.default_rng(1)
            sim.reset(rng)
            intervener.start_episode()
            interventions, success = 0, False
            for _ in range(TASK.max_episode_steps):
                state = sim.state()
                policy_action = TASK.expert(state, rng, 0.0) if policy == "expert" else ZERO
                action, intervened = intervener(state, policy_action, rng)
                interventions += intervened
                sim.step(action)
                success = TASK.success(sim.state())
                if success:
                    break
            if policy == "expert":
                assert interventions == 0 and success
            else:  # judged off track at every free step: the expert drives 3 of every 4 steps
                assert interventions > 0 and success
    finally:
        sim.close()


def test_takeover_rate_decays(start_state):
    cfg = InterventionConfig(takeover_prob_start=1.0, takeover_prob_end=0.0, decay_steps=600, off_track_steps=1,
                             hold_steps=1)
    intervener = ScriptedIntervener(TASK.expert, cfg)
    rng = np.random.default_rng(2)
    flags = np.array([intervener(start_state, ZERO, rng)[1] for _ in range(800)])
    early, middle, late = flags[:200].mean(), flags[200:400].mean(), flags[600:].mean()
    assert early > middle > late and early > 0.6 and late == 0.0
    assert intervener.takeover_probability == 0.0


def test_deterministic_given_the_rng(start_state):
    cfg = InterventionConfig(takeover_prob_start=0.5, takeover_prob_end=0.5, off_track_steps=1, hold_steps=2,
                             expert_noise=0.2)
    runs = []
    for _ in range(2):
        intervener = ScriptedIntervener(TASK.expert, cfg)
        rng = np.random.default_rng(3)
        runs.append([intervener(start_state, ZERO, rng) for _ in range(40)])
    assert [f for _, f in runs[0]] == [f for _, f in runs[1]] and 0 < sum(f for _, f in runs[0]) < 40
    for (a, _), (b, _) in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_a_new_episode_ends_an_intervention(start_state):
    cfg = InterventionConfig(off_track_steps=1, hold_steps=10, decay_steps=0, takeover_prob_end=1.0)
    intervener = ScriptedIntervener(TASK.expert, cfg)
    rng = np.random.default_rng(4)
    later = dict(start_state, time=np.array(2.0))
    assert intervener(later, ZERO, rng)[1]
    expert = TASK.expert(start_state, rng, 0.0)
    # The clock went back (the simulator was reset): the hold ends, a good policy keeps control.
    assert not intervener(dict(start_state, time=np.array(0.0)), expert, rng)[1]
    assert intervener(later, ZERO, rng)[1]
    intervener.start_episode()
    assert not intervener(later, expert, rng)[1]


@pytest.mark.parametrize("kwargs", [
    {"takeover_prob_start": 1.5}, {"takeover_prob_end": -0.1}, {"decay_steps": -1}, {"off_track_steps": 0},
    {"hold_steps": 0}, {"min_cosine": 2.0}, {"min_expert_motion": -1.0}, {"expert_noise": -0.1},
    {"motion_dims": (), "gripper_index": None},
])
def test_bad_config_raises(kwargs):
    with pytest.raises(ValueError):
        InterventionConfig(**kwargs)


def test_bad_policy_action_raises(start_state):
    intervener = ScriptedIntervener(TASK.expert)
    rng = np.random.default_rng(0)
    for bad in (np.zeros(3), np.array([np.nan, 0, 0, 0])):
        with pytest.raises(ValueError, match="policy action"):
            intervener(start_state, bad, rng)
