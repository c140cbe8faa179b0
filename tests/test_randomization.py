"""The robot-agnostic domain-randomization format (robot_rl.envs.randomization)."""

import numpy as np
import pytest

from robot_rl.envs.randomization import Randomization

SPEC = {
    "train": {
        "size": {"uniform": [0.035, 0.045]},
        "mass": {"log_uniform": [0.05, 0.2]},
        "latency": {"choice": [0, 1, 2]},
        "texture": {"choice": ["plain", "checker"]},
        "noise": {"constant": 0.002},
        "offset": {"uniform": {"low": [-0.1, 0.0, 1.0], "high": [0.1, 0.0, 2.0]}},
        "gains": {"log_uniform": [[1.0, 10.0], [2.0, 20.0]]},
    },
    "eval": {"size": {"uniform": [0.039, 0.041]}, "offset": {"constant": [0.0, 0.0, 1.5]}},
}


def test_samples_have_the_declared_kinds_ranges_and_shapes():
    r = Randomization.load(SPEC)
    for seed in range(50):
        s = r.sample("train", np.random.default_rng(seed))
        assert list(s) == list(SPEC["train"])  # file order
        assert isinstance(s["size"], float) and 0.035 <= s["size"] <= 0.045
        assert 0.05 <= s["mass"] <= 0.2
        assert s["latency"] in (0, 1, 2) and isinstance(s["latency"], int)
        assert s["texture"] in ("plain", "checker") and s["noise"] == 0.002
        assert s["offset"].shape == (3,) and -0.1 <= s["offset"][0] <= 0.1 and s["offset"][1] == 0.0
        assert 1.0 <= s["offset"][2] <= 2.0
        assert 1.0 <= s["gains"][0] <= 2.0 and 10.0 <= s["gains"][1] <= 20.0
    masses = [r.sample("train", np.random.default_rng(i))["mass"] for i in range(400)]
    assert np.median(masses) == pytest.approx(np.sqrt(0.05 * 0.2), rel=0.15)  # log-uniform, not uniform
    ev = r.sample("eval", np.random.default_rng(0))
    assert set(ev) == {"size", "offset"} and 0.039 <= ev["size"] <= 0.041
    np.testing.assert_array_equal(ev["offset"], [0.0, 0.0, 1.5])


def test_batched_draws_have_the_same_kinds_ranges_and_shapes():
    r = Randomization.load(SPEC)
    b = r.sample_batch("train", np.random.default_rng(0), 500)
    assert list(b) == list(SPEC["train"])
    assert b["size"].shape == (500,) and b["size"].min() >= 0.035 and b["size"].max() <= 0.045
    assert np.median(b["mass"]) == pytest.approx(np.sqrt(0.05 * 0.2), rel=0.15)  # log-uniform
    assert set(b["latency"].tolist()) == {0, 1, 2}
    assert b["texture"].dtype == object and set(b["texture"]) == {"plain", "checker"}
    assert np.all(b["noise"] == 0.002)
    assert b["offset"].shape == (500, 3) and np.all(b["offset"][:, 1] == 0.0)
    assert b["gains"].shape == (500, 2) and b["gains"][:, 1].min() >= 10.0
    e = r.sample_batch("eval", np.random.default_rng(0), 3)
    np.testing.assert_array_equal(e["offset"], np.tile([0.0, 0.0, 1.5], (3, 1)))
    with pytest.raises(ValueError):
        r.sample_batch("train", np.random.default_rng(0), -1)


def test_sampling_is_reproducible_and_the_splits_differ():
    r = Randomization.load("sim/arm/randomization.yaml")
    a = r.sample("train", np.random.default_rng(7))
    b = r.sample("train", np.random.default_rng(7))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    c = r.sample("train", np.random.default_rng(8))
    assert any(not np.array_equal(a[k], c[k]) for k in a)
    assert r.distributions["train"] != r.distributions["eval"]
    e = r.sample("eval", np.random.default_rng(7))
    assert any(not np.array_equal(a[k], e[k]) for k in a)
    with pytest.raises(ValueError, match="split"):
        r.sample("test", np.random.default_rng(0))


def test_pretrain_ranges_cover_train_and_eval_appearance():
    r = Randomization.load("sim/arm/randomization.yaml")
    assert r.parameters("pretrain") == r.parameters("train")
    for name in ("light_diffuse_scale", "cube_rgb", "table_rgb", "front_camera_offset", "wrist_camera_rotation"):
        wide = r.distributions["pretrain"][name]
        for split in ("train", "eval"):
            narrow = r.distributions[split][name]
            assert np.all(wide.low <= narrow.low) and np.all(wide.high >= narrow.high), (name, split)
    # a file without the optional section pretrains on its train ranges
    plain = Randomization({"train": {"size": {"constant": 0.04}}, "eval": {}})
    assert plain.sample("pretrain", np.random.default_rng(0)) == {"size": 0.04}


@pytest.mark.parametrize(("spec", "message"), [
    ({"train": {}}, "missing section"),
    ({"train": {}, "eval": {}, "validation": {}}, "unknown section"),
    ([1, 2], "mapping"),
    ({"train": [], "eval": {}}, "section train"),
    ({"train": {"cube_size": {"gaussian": [0, 1]}}, "eval": {}}, "train.cube_size: unknown distribution kind"),
    ({"train": {}, "eval": {"cube_size": {"uniform": [0.05, 0.03]}}}, r"eval.cube_size: uniform low > high"),
    ({"train": {"v": {"uniform": {"low": [0, 1], "high": [1, 0]}}}, "eval": {}}, "train.v: uniform low > high"),
    ({"train": {"v": {"uniform": {"low": [0, 1], "high": [1]}}}, "eval": {}}, "train.v: .*equal-length"),
    ({"train": {"v": {"uniform": [0, 1, 2]}}, "eval": {}}, "train.v: uniform needs"),
    ({"train": {"v": {"uniform": {"lo": 0, "high": 1}}}, "eval": {}}, "train.v: .*low and high"),
    ({"train": {"v": {"uniform": ["a", "b"]}}, "eval": {}}, "train.v: .*numbers"),
    ({"train": {"v": {"uniform": [0, float("inf")]}}, "eval": {}}, "train.v: .*finite"),
    ({"train": {"m": {"log_uniform": [0.0, 1.0]}}, "eval": {}}, "train.m: log_uniform bounds must be > 0"),
    ({"train": {"c": {"choice": []}}, "eval": {}}, "train.c: choice needs a non-empty list"),
    ({"train": {"c": {"choice": [1, None]}}, "eval": {}}, "train.c: values"),
    ({"train": {"k": {"constant": {"a": 1}}}, "eval": {}}, "train.k: values"),
    ({"train": {"k": {"uniform": [0, 1], "constant": 1}}, "eval": {}}, "train.k: expected a mapping with one"),
    ({"train": {"k": 0.5}, "eval": {}}, "train.k: expected a mapping with one"),
])
def test_invalid_specs_raise_naming_the_parameter(spec, message):
    with pytest.raises(ValueError, match=message):
        Randomization.load(spec)


def test_yaml_files(tmp_path):
    good = tmp_path / "r.yaml"
    good.write_text("train:\n  a: {uniform: [0, 1]}\neval:\n")  # an empty section is allowed
    r = Randomization.load(good)
    assert r.parameters("train") == ("a",) and r.parameters("eval") == ()
    assert Randomization.load(r) is r
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {a: {uniform: [0, 1]\n")
    with pytest.raises(ValueError, match="invalid YAML"):
        Randomization.load(bad)
    with pytest.raises(ValueError, match="cannot read"):
        Randomization.load(tmp_path / "missing.yaml")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("train:\n  a: {uniform: [2, 1]}\neval: {}\n")
    with pytest.raises(ValueError, match=r"wrong.yaml: train.a"):
        Randomization.load(wrong)


def test_the_quadrotor_heldout_split_lies_beyond_every_training_range_it_shifts():
    from robot_rl.resources import package_path

    randomization = Randomization.load(package_path("sim/quad/randomization.yaml"))
    train = randomization.sample_batch("train", np.random.default_rng(0), 20_000)
    heldout = randomization.sample_batch("heldout", np.random.default_rng(1), 2_000)
    shifted = ("restitution", "ball_mass", "thrust_scale", "motor_tau", "action_latency_steps", "position_noise",
               "velocity_noise", "rate_noise")
    for name in shifted:
        low, high = train[name].min(), train[name].max()
        margin = 0.1 * (high - low) * 0.98  # 10 % of the training width (sampled extremes sit just inside it)
        outside = (heldout[name] <= low - margin) | (heldout[name] >= high + margin)
        assert outside.all(), f"{name}: held-out draws within 10 % of the training range {low}..{high}"
    assert set(heldout) == set(train)


def test_the_quadrotor_train_hard_split_is_the_hard_end_of_the_training_ranges_toward_heldout():
    from robot_rl.resources import package_path

    randomization = Randomization.load(package_path("sim/quad/randomization.yaml"))
    rng = np.random.default_rng(0)
    hard = randomization.sample_batch("train_hard", rng, 2_000)
    heldout = randomization.sample_batch("heldout", rng, 2_000)
    for name in hard:
        dist = randomization.distributions["train"][name]
        low, high = (dist.low, dist.high) if hasattr(dist, "low") else (min(dist.values), max(dist.values))
        assert low <= hard[name].min() and hard[name].max() <= high, f"{name}: train_hard leaves the training range"
        below = heldout[name].max() < low
        edge = low if below else high
        # the quarter of the training width nearest the held-out plants
        assert np.all(np.abs(hard[name] - edge) <= 0.25 * (high - low) + 1e-9), name
    unshifted = {"mass_scale", "inertia_scale", "quad_start_offset", "ball_start_offset"}
    assert set(hard) == set(randomization.parameters("train")) - unshifted


def test_train_hard_may_narrow_training_parameters_but_not_add_one():
    spec = {"train": {"mass": {"uniform": [1.0, 2.0]}}, "eval": {},
            "train_hard": {"mass": {"uniform": [1.75, 2.0]}}}
    assert Randomization(spec).sample_batch("train_hard", np.random.default_rng(0), 4)["mass"].min() >= 1.75
    with pytest.raises(ValueError, match="r.yaml: train_hard names colour, which train does not randomize"):
        Randomization({**spec, "train_hard": {"colour": {"choice": [1, 2]}}}, source="r.yaml")


def test_a_split_the_file_lacks_is_refused_except_pretrain(tmp_path):
    spec = {"train": {"mass": {"uniform": [1.0, 2.0]}}, "eval": {"mass": {"uniform": [1.0, 2.0]}}}
    randomization = Randomization(spec, source="r.yaml")
    assert randomization.sample_batch("pretrain", np.random.default_rng(0), 3)["mass"].shape == (3,)
    with pytest.raises(ValueError, match="r.yaml has no randomization split 'heldout'"):
        randomization.sample_batch("heldout", np.random.default_rng(0), 3)


def test_a_shift_redraws_only_what_it_sets_and_keeps_its_bases_draws():
    spec = {"train": {"mass": {"uniform": [1.0, 2.0]}, "friction": {"uniform": [0.5, 1.0]},
                      "latency": {"choice": [0, 1]}},
            "eval": {},
            "shifts": {"heavy": {"from": "train", "set": {"mass": {"uniform": [3.0, 3.5]}}},
                       "heavy_late": {"from": "heavy", "set": {"latency": {"choice": [3]}}}}}
    randomization = Randomization(spec, source="r.yaml")
    assert randomization.splits == ("train", "eval", "heavy", "heavy_late")
    assert randomization.parameters("heavy_late") == ("mass", "friction", "latency")  # the base's order
    train = randomization.sample_batch("train", np.random.default_rng(5), 50)
    heavy = randomization.sample_batch("heavy", np.random.default_rng(5), 50)
    late = randomization.sample_batch("heavy_late", np.random.default_rng(5), 50)
    assert 3.0 <= heavy["mass"].min() and heavy["mass"].max() <= 3.5
    # the same seed draws the same values for every parameter a shift leaves alone
    np.testing.assert_array_equal(heavy["friction"], train["friction"])
    np.testing.assert_array_equal(heavy["latency"], train["latency"])
    np.testing.assert_array_equal(late["mass"], heavy["mass"])
    assert set(late["latency"].tolist()) == {3}


@pytest.mark.parametrize("shifts, message", [
    ({"x": {"from": "nowhere", "set": {}}}, "shifts.x: from 'nowhere' is not a section or an earlier shift"),
    ({"x": {"from": "train", "set": {"colour": {"choice": [1]}}}}, "shifts.x: sets colour, which train does not"),
    ({"eval": {"from": "train", "set": {}}}, "shifts.eval: the name of a section"),
    ({"heldout": {"from": "train", "set": {}}}, "shifts.heldout: the name of a section"),
    ({"x": {"from": "train"}}, r"shifts.x: expected \{from: SPLIT, set:"),
    ({"x": {"from": "train", "set": {"mass": {"uniform": [2, 1]}}}}, "shifts.x.mass"),
    (["x"], "section shifts must map split names"),
])
def test_a_malformed_shift_is_refused_by_name(shifts, message):
    spec = {"train": {"mass": {"uniform": [1.0, 2.0]}}, "eval": {}, "shifts": shifts}
    with pytest.raises(ValueError, match=message):
        Randomization(spec, source="r.yaml")


def test_the_quadrotor_one_shift_splits_move_one_parameter_beyond_the_widened_training_range():
    # Issue 41: each heldout_<parameter> is eval with that parameter alone 10-20 % of train_wide's width beyond
    # it on the harder side; restitution_low is eval with restitution 0.60-0.70.
    from robot_rl.resources import package_path

    randomization = Randomization.load(package_path("sim/quad/randomization.yaml"))
    wide = randomization.distributions["train_wide"]
    assert (float(wide["restitution"].low), float(wide["restitution"].high)) == (0.60, 1.0)
    shifted = {"heldout_restitution": "restitution", "heldout_ball_mass": "ball_mass",
               "heldout_thrust": "thrust_scale", "heldout_motor_lag": "motor_tau",
               "heldout_latency": "action_latency_steps", "heldout_position_noise": "position_noise",
               "heldout_velocity_noise": "velocity_noise", "heldout_rate_noise": "rate_noise"}
    evaluation = randomization.distributions["eval"]
    for split, name in shifted.items():
        dists = randomization.distributions[split]
        assert [k for k in dists if dists[k] is not evaluation[k]] == [name], split
        if name == "action_latency_steps":
            assert dists[name].values == (3,)
            continue
        low, high = float(wide[name].low), float(wide[name].high)
        lower_is_harder = name in ("restitution", "thrust_scale")
        beyond = (low - np.array([dists[name].high, dists[name].low]) if lower_is_harder
                  else np.array([dists[name].low, dists[name].high]) - high) / (high - low)
        assert 0.1 - 1e-9 <= beyond.min() and beyond.max() <= 0.2 + 1e-9, (split, beyond)
    low = randomization.distributions["restitution_low"]
    assert [k for k in low if low[k] is not evaluation[k]] == ["restitution"]
    assert (float(low["restitution"].low), float(low["restitution"].high)) == (0.60, 0.70)


def test_the_arm_dynamics_shifts_move_one_parameter_each_outside_its_training_range():
    from robot_rl.resources import package_path

    randomization = Randomization.load(package_path("sim/arm/randomization.yaml"))
    train, evaluation = randomization.distributions["train"], randomization.distributions["eval"]
    expected = {"dynamics_cube_mass": ("cube_mass", 0.25), "dynamics_cube_friction": ("cube_friction", 0.5),
                "dynamics_latency": ("action_latency_steps", 2),
                "dynamics_controller_gain": ("controller_gain_scale", 0.65),
                "dynamics_joint_damping": ("joint_damping_scale", 1.6),
                "dynamics_proprio_noise": ("observation_noise", 0.004)}
    rng = np.random.default_rng(0)
    for split, (name, value) in expected.items():
        dists = randomization.distributions[split]
        assert [k for k in dists if dists[k] is not evaluation[k]] == [name], split
        assert set(randomization.sample_batch(split, rng, 20)[name].tolist()) == {value}
        drawn = train[name].sample_batch(rng, 20_000)
        assert not drawn.min() <= value <= drawn.max(), f"{split}: {value} is inside training's {name}"
