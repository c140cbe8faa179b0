"""benchmarks/peer_lerobot.py's summary on hand-made rows (no LeRobot needed): medians with a seed that never got
to 90 % counted as its budget, ours over LeRobot's, no ratio when LeRobot never learned; the demonstrations' cache
check and what is read from LeRobot's own logs."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import peer_lerobot  # noqa: E402
from lerobot_processes import log_facts  # noqa: E402  (benchmarks/peer_lerobot/, put on sys.path by peer_lerobot)

BUDGET = 30_000


def _row(system, seed, successes, at_budget, wall_s=3000.0, kill=None):
    """A row whose snapshots every 2,000 steps (3 minutes apart) scored `successes` (None: stopped early)."""
    snapshots = [{"transitions": 2000 * (i + 1), "minutes": 3.0 * (i + 1), "success": s,
                  "successes": 0 if s is None else round(50 * s)} for i, s in enumerate(successes)]
    return {"system": system, "seed": seed, "steps_budget": BUDGET, "wall_s": wall_s, "snapshots": snapshots,
            **peer_lerobot.common_figures(snapshots), "success_at_budget": at_budget, "learner_updates_per_s": 2.0,
            "lost_transitions": 0, "kill_learner_at_steps": kill, "restart": None, "lerobot_version": "0.4.4",
            "learner_updates": 130, "actor_episodes": 300, "actor_successes": 0, "env_steps": BUDGET,
            "snapshot_every": 2000}


def test_a_snapshot_stopped_early_is_below_the_target():
    figures = peer_lerobot.common_figures([{"transitions": 2000, "minutes": 3.0, "success": 0.9},
                                           {"transitions": 4000, "minutes": 6.0, "success": None},
                                           {"transitions": 6000, "minutes": 9.0, "success": 0.92},
                                           {"transitions": 8000, "minutes": 12.0, "success": 0.96}])
    assert figures == {"steps_to_90": 6000, "wall_min_to_90": 9.0}


def test_medians_count_a_seed_that_never_reached_90_as_its_budget():
    rows = [_row("ours", 0, [0.5, 0.92, 0.94], 0.96),    # 4,000 steps, 6 minutes
            _row("ours", 1, [0.5, 0.8, 0.85], 0.86),     # never: 30,000 steps, its 50 minutes
            _row("ours", 2, [0.9, 0.95], 1.0)]           # 2,000 steps, 3 minutes
    summary = peer_lerobot.summarize(rows)
    assert summary["ours_steps_to_90"] == 4000 and summary["ours_wall_min_to_90"] == 6.0
    assert summary["ours_seeds_reaching_90"] == "2/3" and summary["ours_success_at_budget"] == 0.96
    assert summary["ours_learner_updates_per_s"] == 2.0
    assert summary["lerobot_steps_to_90"] is None and summary["fewer_than_3_seeds"] == ["lerobot"]
    assert summary["step_ratio_vs_lerobot"] is None and summary["lerobot_learned"] is None


def test_ratios_are_ours_over_lerobots():
    rows = [_row("ours", seed, [0.5, 0.92, 0.94], 0.96) for seed in range(3)]  # 4,000 steps, 6 min
    rows += [_row("lerobot", seed, [0.2, 0.4, 0.6, 0.8, 0.9, 0.95], 0.95) for seed in range(3)]  # 10,000, 15 min
    summary = peer_lerobot.summarize(rows)
    assert summary["lerobot_version"] == "0.4.4" and summary["lerobot_steps_to_90"] == 10_000
    assert summary["step_ratio_vs_lerobot"] == 0.4 and summary["wall_ratio_vs_lerobot"] == 0.4
    assert summary["lerobot_median_is_its_budget"] is False and "ratio_not_a_result" not in summary


def test_a_lerobot_that_learned_but_never_reached_90_counts_as_its_budget():
    rows = [_row("ours", seed, [0.5, 0.92, 0.94], 0.96) for seed in range(3)]
    rows += [_row("lerobot", seed, [0.0, None, 0.1], 0.04) for seed in range(3)]
    summary = peer_lerobot.summarize(rows)
    assert summary["lerobot_learned"] and summary["lerobot_seeds_reaching_90"] == "0/3"
    assert summary["step_ratio_vs_lerobot"] == round(4000 / BUDGET, 3)
    assert summary["wall_ratio_vs_lerobot"] == round(6.0 / 50.0, 3)
    assert summary["lerobot_median_is_its_budget"] is True


def test_a_lerobot_that_never_learned_gives_no_ratio_and_shows_its_logs():
    rows = [_row("ours", seed, [0.5, 0.92, 0.94], 0.96) for seed in range(3)]
    rows += [_row("lerobot", seed, [0.0, None, None], 0.0) for seed in range(3)]
    summary = peer_lerobot.summarize(rows)
    assert summary["lerobot_learned"] is False
    assert summary["step_ratio_vs_lerobot"] is None and summary["wall_ratio_vs_lerobot"] is None
    assert "no judged episode" in summary["ratio_not_a_result"]
    assert [log["learner_updates"] for log in summary["lerobot_logs"]] == [130, 130, 130]
    assert summary["lerobot_steps_to_90"] == BUDGET and summary["lerobot_success_at_budget"] == 0.0


def test_the_plotted_curve_shows_stopped_snapshots_as_their_played_episodes_and_ends_at_the_budget(tmp_path):
    stopped = {"transitions": 2000, "minutes": 10.0, "success": None, "success_at_most": 0.88, "stopped_after": 8,
               "successes": 2}
    full = {"transitions": 4000, "minutes": 20.0, "success": 0.92, "success_at_most": None, "stopped_after": None,
            "successes": 46}
    at_budget = {**stopped, "transitions": BUDGET, "minutes": 150.0, "stopped_after": 14, "successes": 8}
    ours = {"system": "ours", "seed": 0, "steps_budget": BUDGET, "wall_s": 3000.0, "snapshots": [stopped, full],
            "success_at_budget": 0.98}
    assert peer_lerobot.curve_points(ours) == [
        {"steps": 2000, "minutes": 10.0, "success": 0.25, "low": 0.04, "high": 0.88, "kind": "stopped"},  # 2 of 8
        {"steps": 4000, "minutes": 20.0, "success": 0.92, "low": 0.92, "high": 0.92, "kind": "full"},
        {"steps": BUDGET, "minutes": 50.0, "success": 0.98, "low": 0.98, "high": 0.98, "kind": "budget"}]
    # LeRobot's last snapshot is its budget's policy, judged again on all 50: the full result takes its place
    theirs = {**ours, "system": "lerobot", "snapshots": [stopped, at_budget], "success_at_budget": 0.3}
    points = peer_lerobot.curve_points(theirs)
    assert [(p["steps"], p["minutes"], p["success"], p["kind"]) for p in points] == [
        (2000, 10.0, 0.25, "stopped"), (BUDGET, 150.0, 0.3, "budget")]
    peer_lerobot.plot([ours, theirs], tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_restart_checks_stay_out_of_the_medians():
    killed = _row("ours", 0, [0.0, 0.0], 0.0, kill=10_000)
    killed["restart"] = {"continued": True, "env_steps_lost": 0, "updates_lost_at_least": 12}
    rows = [_row("ours", 0, [0.92, 0.94], 0.96), killed]
    summary = peer_lerobot.summarize(rows)
    assert summary["ours_steps_to_90"] == 2000 and summary["ours_seeds_reaching_90"] == "1/1"
    assert summary["restart_checks"] == [{"system": "ours", "seed": 0, "continued": True, "env_steps_lost": 0,
                                          "updates_lost_at_least": 12}]


def _recorded(folder, recipe):
    (folder / "demos.zarr").mkdir(parents=True)
    (folder / "demos.zarr" / "chunk").write_bytes(b"frames")
    manifest = {"recipe": recipe, "files": peer_lerobot.file_digests(folder)}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_the_demonstrations_cache_refuses_what_it_did_not_record_intact(tmp_path):
    recipe = {"episodes": 20, "seed": 1000}
    _recorded(tmp_path / "ok", recipe)
    peer_lerobot.check_demonstrations(tmp_path / "ok", recipe)
    with pytest.raises(SystemExit, match="not this benchmark's"):
        peer_lerobot.check_demonstrations(tmp_path / "ok", {**recipe, "episodes": 3})
    (tmp_path / "ok" / "demos.zarr" / "chunk").write_bytes(b"frameZ")
    with pytest.raises(SystemExit, match=r"corrupt: 1 file\(s\) .* demos.zarr/chunk"):
        peer_lerobot.check_demonstrations(tmp_path / "ok", recipe)
    (tmp_path / "interrupted").mkdir()
    with pytest.raises(SystemExit, match="no manifest.json"):
        peer_lerobot.check_demonstrations(tmp_path / "interrupted", recipe)
    (tmp_path / "interrupted" / "manifest.json").write_text("{")
    with pytest.raises(SystemExit, match="manifest.json is corrupt"):
        peer_lerobot.check_demonstrations(tmp_path / "interrupted", recipe)


def test_what_lerobots_own_logs_say():
    learner = ("INFO 2026-11-29 04:00:48 /learner.py:666 [LEARNER] gRPC server started\n"
               "INFO 2026-11-29 04:03:55 /learner.py:586 [LEARNER] Number of optimization step: 1\n"
               "INFO 2026-11-29 04:04:15 /learner.py:586 [LEARNER] Number of optimization step: 2\n")
    actor = ("INFO 2026-11-29 04:03:27 ib/actor.py:329 [ACTOR] Global step 99: Episode reward: 0.0\n"
             "ERROR 2026-11-29 04:03:28 ib/actor.py:440 [ACTOR] Waiting for Learner to be ready... x\n"
             "INFO 2026-11-29 04:04:33 ib/actor.py:329 [ACTOR] Global step 161: Episode reward: 1.0\n"
             "ERROR 2026-11-29 04:05:00 ib/actor.py:599 [ACTOR] gRPC error: StatusCode.UNAVAILABLE\n")
    facts = log_facts(learner, actor)
    assert facts["learner_updates"] == 2 and facts["actor_episodes"] == 2 and facts["actor_successes"] == 1
    assert facts["actor_last_step"] == 162 and facts["problems"] == [actor.splitlines()[-1]]
    assert facts["first_update_at"] is not None
    assert log_facts("", "")["first_update_at"] is None


def test_a_missing_venv_is_refused_in_one_line_naming_its_make_target(tmp_path, monkeypatch):
    built = tmp_path / "built"
    (built / "bin").mkdir(parents=True)
    (built / "bin" / "python").write_text("")
    for name in ("STACK_VENV", "GYM_HIL_VENV"):
        monkeypatch.setattr(peer_lerobot, name, built)
    monkeypatch.setattr(peer_lerobot, "ROOT", tmp_path)
    monkeypatch.setattr(peer_lerobot.lerobot_processes, "VENV", tmp_path / ".venv-peer-lerobot")
    with pytest.raises(SystemExit, match=r"^peer_lerobot: \.venv-peer-lerobot is missing; build it with "
                                         r"`make peer-lerobot`$"):
        peer_lerobot.check_venvs()
    monkeypatch.setattr(peer_lerobot, "GYM_HIL_VENV", tmp_path / ".venv-gym-hil")
    with pytest.raises(SystemExit, match="^peer_lerobot: .venv-gym-hil is missing; build it with `make gym-hil-env`$"):
        peer_lerobot.check_venvs()


def test_an_interrupted_lerobot_run_stops_the_processes_it_started(tmp_path, monkeypatch):
    """LeRobot's processes live in sessions of their own (Ctrl-C at the benchmark's terminal does not reach them):
    a run interrupted while they play stops them, instead of leaving them training."""
    import subprocess

    import lerobot_processes

    monkeypatch.setattr(lerobot_processes.subprocess, "run",  # the encoder's conversion, not under test here
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    run = lerobot_processes.LeRobotRun(tmp_path / "run", tmp_path / "demos", tmp_path / "encoder", 0, 1000, 250)
    started = []

    def start_learner(resume=False):
        run.learner = run._spawn([sys.executable, "-c", "import time; time.sleep(120)"], run.learner_logs, "learner")
        started.append(run.learner)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "start_learner", start_learner)
    monkeypatch.setattr(run, "wait_for_line", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run.run()
    assert len(started) == 1 and started[0].poll() is not None  # stopped, not left sleeping


class _FakeJudge:
    """LeRobot's snapshot judge as the row reads it: every snapshot fails its sixth episode, the budget's all 50;
    `interrupt_at`: the call that raises KeyboardInterrupt instead (a session ending mid-judging)."""

    calls = 0
    interrupt_at: int | None = None
    opened: list["_FakeJudge"] = []

    def __init__(self, run_dir, episodes, seed):
        self.closed = False
        self.opened.append(self)

    def __call__(self, snapshot, max_failures):
        type(self).calls += 1
        if type(self).calls == self.interrupt_at:
            raise KeyboardInterrupt
        episodes = 6 if max_failures is not None else 50
        return {"policy_version": 1, "transitions": int(snapshot.name.rsplit("-s", 1)[1]), "success_rate": None
                if max_failures is not None else 0.0, "success_at_most": 0.88 if max_failures is not None else None,
                "stopped_after": 6 if max_failures is not None else None,
                "results": [{"success": False}] * episodes}

    def close(self):
        self.closed = True


def test_an_interrupted_judging_keeps_the_run_and_judge_run_finishes_its_row(tmp_path, monkeypatch, capsys):
    """Judging a LeRobot run's snapshots takes a while after its hours of running: interrupted, the folder stays
    with the run's facts and the command that finishes the row, which gives the row the uninterrupted judging
    would have (the run's own seed, budget, commit and date, and when it was judged)."""
    import lerobot_processes

    run_dir = tmp_path / "lerobot"
    started = 1_796_000_000.0
    for steps in (2000, 4000):
        snapshot = run_dir / "snapshots" / f"{int((started + steps / 10) * 1e9)}-s{steps:07d}"
        snapshot.mkdir(parents=True)
        (snapshot / "snapshot.json").write_text(json.dumps({"parameter_loads": steps // 100}))
    facts = {"seed": 2, "steps_budget": 4000, "commit": "abc1234", "snapshot_every": 2000,
             "episodes_per_snapshot": 50, "kill_learner_at_steps": None, "date": "2026-11-29", "started": started,
             "first_update_at": started + 150, "learner_updates": 30, "wall_s": 410.0, "env_steps": 4000,
             "actor_episodes": 40, "actor_successes": 0, "ended": "budget played", "restart": None}
    (run_dir / peer_lerobot.RUN_FACTS).write_text(json.dumps(facts))
    monkeypatch.setattr(lerobot_processes, "SnapshotJudge", _FakeJudge)

    _FakeJudge.calls, _FakeJudge.interrupt_at = 0, 2
    _FakeJudge.opened.clear()
    with pytest.raises(KeyboardInterrupt):
        peer_lerobot.judge_interrupted_run(run_dir)
    assert f"--judge-run {run_dir}" in capsys.readouterr().err
    assert (run_dir / peer_lerobot.RUN_FACTS).is_file()
    assert _FakeJudge.opened and all(judge.closed for judge in _FakeJudge.opened)  # its process ends with it

    _FakeJudge.calls, _FakeJudge.interrupt_at = 0, None
    row = peer_lerobot.judge_interrupted_run(run_dir)
    assert (row["system"], row["seed"], row["steps_budget"], row["commit"], row["date"]) == \
        ("lerobot", 2, 4000, "abc1234", "2026-11-29")
    assert [s["minutes"] for s in row["snapshots"]] == [3.33, 6.67]
    assert row["steps_to_90"] is None and row["success_at_budget"] == 0.0 and row["parameter_loads"] == 40
    assert row["first_update_min"] == 2.5 and row["learner_updates_per_s"] == round(30 / 410, 3)
    assert row["judged_later"] and "started" not in row and "first_update_at" not in row


def test_judge_run_refuses_a_folder_without_run_facts(tmp_path):
    with pytest.raises(SystemExit, match="run_facts.json is missing"):
        peer_lerobot.judge_interrupted_run(tmp_path)
