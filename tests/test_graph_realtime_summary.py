"""benchmarks/graph_realtime.py's summary: the acceptance rules on hand-made rows, and earlier recipes kept apart."""

import os
import sys
import time
from pathlib import Path

import pytest

from robot_rl.device import cpu_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import graph_realtime  # noqa: E402

SHIPPED = {"feature_views": 4, "bc_weight": 0.0, "max_update_ratio": 8.0, "warmup_transitions": 100, "compile": False,
           "action_history": 2, "corrections_end_at_reset": True, "ticks_staggered": True, "group_niced": True,
           "acks_beside_updates": False, "acks_on_arrival": False, "latency_and_noise": False}
"""A shipped recipe of before 2026-12-01 (eager, acknowledged between updates, arm_sim without latency and noise):
what the hand-made rows ran."""
EAGER_ACKS = "learner.acks_beside_updates=False,learner.acks_on_arrival=False,sim.latency_and_noise=False"
"""How those recipes' names end: acknowledgements sent between updates, no simulated latency (unnamed then)."""
BEFORE_NICED = ("learner.feature_views=4,learner.max_update_ratio=8.0,learner.warmup_transitions=100,"
                "learner.compile=False,task.action_history=2")
"""What rows before the learner's session was niced (7fe893b) name (compile unnamed then: False)."""
NEW = f"{BEFORE_NICED},learner.group_niced=True"
"""The shipped recipe as a real-time pick-cube row names it (bc_weight acts on a person's corrections only)."""
HIL = f"{NEW},learner.bc_weight=0.0,person.corrections_end_at_reset=True"
"""The shipped recipe as a hil row names it."""


HERE = graph_realtime.machine()


def _row(arm, seed, successes, recipe=None, wall_s=960.0, lost=0, machine=HERE):
    snapshots = [{"minutes": 2.0 * (i + 1), "transitions": 1200 * (i + 1), "success": s}
                 for i, s in enumerate(successes)]
    row = {"arm": arm, "seed": seed, "wall_s": wall_s, "snapshots": snapshots,
           "minutes_to_90": graph_realtime.first_reached(snapshots, 0.9, "minutes"),
           "lost_transitions": lost, "duplicate_transitions": 0, "act_latency_ms_p99": 5.0,
           "learner_updates_per_s": 9.9, "intervention_steps": 0}
    if machine:
        row["machine"] = machine
    if recipe:
        row["recipe"] = recipe
    return row


def test_a_target_counts_at_the_first_of_two_consecutive_snapshots():
    snaps = [{"minutes": m, "success": s} for m, s in ((2, 0.92), (4, 0.88), (6, 0.9), (8, 0.95))]
    assert graph_realtime.first_reached(snaps, 0.9, "minutes") == 6
    assert graph_realtime.first_reached(snaps[:3], 0.9, "minutes") is None


def test_summary_reports_the_current_recipe_and_keeps_earlier_ones_beside_it():
    new = NEW
    rows = [_row("realtime", 0, [0.5, 0.9, 0.92], recipe=new),  # 4 min
            _row("realtime", 1, [0.5, 0.8, 0.85], recipe=new),  # never: counts as its 16 min
            _row("realtime", 2, [0.9, 0.95, 0.9], recipe=new),  # 2 min
            _row("two_actors", 0, [0.91, 0.93], recipe=f"{new},fleet.ticks_staggered=True"),
            _row("realtime", 0, [0.7, 0.8, 0.86], wall_s=1200.0, lost=1)]  # no recipe: feature_views=1, 1 update each
    summary = graph_realtime.summarize(rows, SHIPPED)
    assert summary["recipe"] == ("learner.feature_views=4,learner.bc_weight=0.0,learner.max_update_ratio=8.0,"
                                 "learner.warmup_transitions=100,learner.compile=False,task.action_history=2,"
                                 "person.corrections_end_at_reset=True,fleet.ticks_staggered=True,"
                                 f"learner.group_niced=True,{EAGER_ACKS}")
    assert summary["rows"] == 4
    assert summary["wall_min_to_90"] == 4.0 and summary["realtime_seeds_reaching_90"] == "2/3"
    assert summary["two_actor_time_ratio"] == 0.5 and summary["lost_transitions"] == 0
    earlier = summary["earlier_recipes"][
        "learner.feature_views=1,learner.max_update_ratio=1.0,learner.warmup_transitions=500,learner.compile=False,"
        f"task.action_history=0,learner.group_niced=False,{EAGER_ACKS}"]
    assert earlier["wall_min_to_90"] == 20.0 and earlier["realtime_seeds_reaching_90"] == "0/1"
    assert earlier["lost_transitions"] == 1


def test_lockstep_step_ratio_divides_the_graphs_median_steps_by_the_in_process_loops():
    # lockstep: the actor's ratio, whatever the cap
    new = "learner.feature_views=4,learner.warmup_transitions=100,task.action_history=2"

    def by_steps(arm, seed, successes, env_steps=10_000):
        row = _row(arm, seed, successes, recipe=new)
        row["snapshots"] = [{**p, "transitions": 1000 * (i + 1)} for i, p in enumerate(row["snapshots"])]
        row.update(env_steps=env_steps, steps_to_90=graph_realtime.first_reached(row["snapshots"], 0.9, "transitions"))
        return row

    rows = [by_steps("lockstep", 0, [0.5, 0.8, 0.9, 0.95]),  # 3k
            by_steps("lockstep", 1, [0.5, 0.7, 0.8, 0.85]),  # never: its 10k steps
            by_steps("lockstep", 2, [0.9, 0.9]),  # 1k
            by_steps("in_process", 0, [0.5, 0.9, 0.9]),  # 2k
            by_steps("in_process", 1, [0.4, 0.6, 0.8, 0.9, 0.92]),  # 4k
            by_steps("in_process", 2, [0.9, 0.6, 0.9, 0.9])]  # 3k: a lone 90 % does not count
    for row in rows:
        if row["arm"] == "in_process":  # not a graph: no transport ledger, no learner of its own
            for key in ("lost_transitions", "duplicate_transitions", "act_latency_ms_p99", "learner_updates_per_s"):
                del row[key]
    rows.append(_row("realtime", 0, [0.9, 0.9], recipe=NEW))
    summary = graph_realtime.summarize(rows, SHIPPED)
    assert summary["lockstep_steps_to_90"] == 3000 and summary["lockstep_seeds_reaching_90"] == "2/3"
    assert summary["in_process_steps_to_90"] == 3000 and summary["in_process_seeds_reaching_90"] == "3/3"
    assert summary["lockstep_step_ratio"] == 1.0 and "lockstep_step_ratio" not in summary["not_measured"]
    assert summary["wall_min_to_90"] == 2.0 and summary["lost_transitions"] == 0
    assert set(summary["learner_updates_per_s"]) == {"lockstep", "realtime"}


def test_a_person_setting_splits_the_hil_rows_only():
    rows = [_row("realtime", 0, [0.9, 0.9], recipe=NEW),  # bc_weight: no person, same recipe
            _row("hil", 0, [0.2, 0.3], recipe=NEW),  # ran before bc_weight was named: 1.0
            _row("hil", 0, [0.9, 0.94], recipe=HIL),
            _row("hil", 1, [0.5, 0.9, 0.9], recipe=f"{NEW},learner.bc_weight=0.0")]  # before the person's fix
    summary = graph_realtime.summarize(rows, SHIPPED)
    assert summary["wall_min_to_90"] == 2.0 and summary["hil_wall_min_to_90"] == 2.0
    assert summary["hil_seeds_reaching_90"] == "1/1"
    earlier = summary["earlier_recipes"]
    before_bc = ("learner.feature_views=4,learner.bc_weight=1.0,learner.max_update_ratio=8.0,"
                 "learner.warmup_transitions=100,learner.compile=False,task.action_history=2,person.corrections_end_at_reset=False,"
                 f"learner.group_niced=True,{EAGER_ACKS}")
    assert earlier[before_bc]["hil_seeds_reaching_90"] == "0/1" and earlier[before_bc]["rows"] == 1
    before_fix = before_bc.replace("bc_weight=1.0", "bc_weight=0.0")
    assert earlier[before_fix]["hil_wall_min_to_90"] == 4.0 and earlier[before_fix]["rows"] == 1
    assert graph_realtime.shipped_settings()["corrections_end_at_reset"] is True  # the code's own
    assert graph_realtime.row_recipe(rows[0]) == graph_realtime.arm_recipe("realtime", SHIPPED)


def test_the_wall_clock_update_cap_splits_real_time_rows_but_not_lockstep_ones():
    before_cap = "learner.feature_views=4,learner.warmup_transitions=100,task.action_history=2"  # 1 update each
    old_realtime = _row("realtime", 0, [0.5, 0.9, 0.9], recipe=before_cap)
    old_lockstep = _row("lockstep", 0, [0.9, 0.9], recipe=before_cap)
    old_lockstep.update(env_steps=10_000, steps_to_90=1200)
    summary = graph_realtime.summarize([_row("realtime", 1, [0.9, 0.9], recipe=NEW), old_realtime, old_lockstep],
                                       SHIPPED)
    assert summary["wall_min_to_90"] == 2.0 and summary["lockstep_steps_to_90"] == 1200  # lockstep: same recipe
    earlier = summary["earlier_recipes"][
        "learner.feature_views=4,learner.max_update_ratio=1.0,learner.warmup_transitions=100,learner.compile=False,task.action_history=2,"
        f"learner.group_niced=False,{EAGER_ACKS}"]
    assert earlier["rows"] == 1 and earlier["wall_min_to_90"] == 4.0
    assert graph_realtime.arm_recipe("lockstep", SHIPPED) == f"{before_cap},sim.latency_and_noise=False"


def test_rows_from_before_the_task_observed_its_last_actions_are_an_earlier_recipe():
    before = "learner.feature_views=4,learner.max_update_ratio=8.0"  # what every row before 2026-11-29 names
    summary = graph_realtime.summarize([_row("realtime", 0, [0.9, 0.9], recipe=before),
                                        _row("realtime", 1, [0.5, 0.9, 0.9], recipe=NEW)], SHIPPED)
    assert summary["wall_min_to_90"] == 4.0 and summary["rows"] == 1
    earlier = (f"{before},learner.warmup_transitions=500,learner.compile=False,task.action_history=0,"
               f"learner.group_niced=False,{EAGER_ACKS}")
    assert summary["earlier_recipes"][earlier]["wall_min_to_90"] == 2.0
    assert graph_realtime.shipped_settings()["action_history"] == 2  # the pick-cube task's own


def test_rows_from_before_the_learners_session_was_niced_are_an_earlier_recipe_on_the_wall_clock_only():
    old_lockstep = _row("lockstep", 0, [0.9, 0.9], recipe="learner.feature_views=4,learner.warmup_transitions=100,"
                                                         "task.action_history=2")
    old_lockstep.update(env_steps=10_000, steps_to_90=1200)
    summary = graph_realtime.summarize([_row("realtime", 0, [0.9, 0.9], recipe=BEFORE_NICED),
                                        _row("realtime", 1, [0.5, 0.9, 0.9], recipe=NEW), old_lockstep], SHIPPED)
    assert summary["wall_min_to_90"] == 4.0 and summary["realtime_seeds_reaching_90"] == "1/1"
    assert summary["lockstep_steps_to_90"] == 1200  # lockstep is judged against steps: the same recipe
    earlier = summary["earlier_recipes"][f"{BEFORE_NICED},learner.group_niced=False,{EAGER_ACKS}"]
    assert earlier["wall_min_to_90"] == 2.0
    assert graph_realtime.shipped_settings()["group_niced"] is True  # the learner's own code


def test_the_car_counts_its_first_practice_lap_and_its_final_laps_against_the_expert():
    recipe = graph_realtime.arm_recipe("car", SHIPPED)

    def car(seed, first_lap_min, ratio, clean_laps=20):
        row = _row("car", seed, [0.5, 1.0], recipe=recipe, wall_s=600.0)
        row.update(first_lap_min=first_lap_min, lap_time_ratio=ratio, final={"laps": 20, "clean_laps": clean_laps})
        return row

    rows = [car(0, 3.0, 1.2), car(1, None, None, clean_laps=0), car(2, 4.5, 1.1)]  # seed 1: never lapped
    summary = graph_realtime.summarize(rows, SHIPPED)
    assert recipe == "learner.num_critics=2,learner.utd_ratio=1,learner.batch_size=256"
    assert summary["rows"] == 3 and not summary["earlier_recipes"]  # the car's recipe is not pick-cube's
    assert summary["car_first_lap_min"] == 4.5 and summary["car_seeds_lapping"] == "2/3"  # seed 1: its 10 min
    assert summary["car_lap_time_ratio"] == 1.2 and summary["car_failed_laps"] == [0, 20, 0]
    assert "car_first_lap_min" not in summary["not_measured"] and summary["lost_transitions"] == 0
    rows[0]["lap_time_ratio"] = None  # two of three seeds fail their laps: the median is infinitely slow
    assert graph_realtime.summarize(rows, SHIPPED)["car_lap_time_ratio"] is None


def test_the_wide_variant_is_summarized_apart_and_differs_from_pick_cube_only_in_its_scenes():
    recipe = NEW
    rows = [_row("realtime", 0, [0.9, 0.9], recipe=recipe), _row("wide", 0, [0.5, 0.9, 0.95], recipe=recipe),
            _row("wide", 1, [0.9, 0.92], recipe=recipe), _row("wide", 2, [0.5, 0.6], recipe=recipe, wall_s=1800.0)]
    summary = graph_realtime.summarize(rows, SHIPPED)
    assert summary["wall_min_to_90"] == 2.0 and summary["realtime_seeds_reaching_90"] == "1/1"
    assert summary["wide_wall_min_to_90"] == 4.0 and summary["wide_seeds_reaching_90"] == "2/3"
    assert "wide_wall_min_to_90" not in summary["not_measured"]
    assert summary["fewer_than_3_seeds"] == ["wall_min_to_90 (1 of 3)"]  # one realtime row: not yet a median of 3
    assert graph_realtime.arm_task("wide") == ("arm_pick_cube_wide", 10.0)

    import yaml  # the wide arm's rows are labelled with pick-cube's learner recipe: the configs must agree

    def sections(task):
        config = yaml.safe_load((graph_realtime.ROOT / "config" / f"{task}.yaml").read_text())
        return {f"{node}.{key}": value for node, section in config.items()
                for key, value in section["ros__parameters"].items()}

    narrow, wide = sections("arm_pick_cube"), sections("arm_pick_cube_wide")
    differ = {key for key in narrow.keys() | wide.keys() if narrow.get(key) != wide.get(key)}
    assert differ == {"arm_sim.cube_xy_range", "learner.encoder"} and wide["arm_sim.cube_xy_range"] == 0.15


def test_a_killed_actor_run_counts_in_the_ledger_not_in_the_time_medians():
    recipe = NEW
    killed = _row("killed_actor", 0, [0.2, 0.3], recipe=recipe, lost=0)
    killed.update(actor_killed_at_min=3.0, node_restarts=1, duplicate_transitions=0)
    rows = [_row("realtime", 0, [0.9, 0.9], recipe=recipe), killed]
    summary = graph_realtime.summarize(rows, SHIPPED)
    assert summary["wall_min_to_90"] == 2.0 and summary["realtime_seeds_reaching_90"] == "1/1"
    assert summary["killed_actor_runs"] == [{"seed": 0, "actor_killed_at_min": 3.0, "node_restarts": 1,
                                             "lost_transitions": 0, "duplicate_transitions": 0}]
    killed["lost_transitions"] = 2
    assert graph_realtime.summarize(rows, SHIPPED)["lost_transitions"] == 2


def test_kill_actor_kills_only_the_actor_of_that_run(tmp_path):
    import signal
    import subprocess

    def fake_node(run):  # a process whose command line reads as a node's: module and params file
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "robot_rl.nodes.arm_actor",
                                 str(run / "params.yaml")])

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ours, other = fake_node(tmp_path / "a"), fake_node(tmp_path / "b")
    try:
        assert graph_realtime.kill_node(tmp_path / "a") == ours.pid
        assert ours.wait(timeout=10) == -signal.SIGKILL and other.poll() is None
    finally:
        other.kill()
        other.wait()
    with pytest.raises(RuntimeError, match="no arm_actor process"):
        graph_realtime.kill_node(tmp_path / "a")


def test_rows_from_before_the_learner_started_at_100_transitions_are_an_earlier_recipe():
    before = "learner.feature_views=4,learner.max_update_ratio=8.0,task.action_history=2"  # rows of 2026-11-29
    summary = graph_realtime.summarize([_row("realtime", 0, [0.9, 0.9], recipe=before),
                                        _row("realtime", 1, [0.5, 0.9, 0.9], recipe=NEW)], SHIPPED)
    assert summary["wall_min_to_90"] == 4.0 and summary["rows"] == 1
    earlier = ("learner.feature_views=4,learner.max_update_ratio=8.0,learner.warmup_transitions=500,"
               f"learner.compile=False,task.action_history=2,learner.group_niced=False,{EAGER_ACKS}")
    assert summary["earlier_recipes"][earlier]["wall_min_to_90"] == 2.0
    assert graph_realtime.shipped_settings()["warmup_transitions"] == 100  # config/arm_pick_cube.yaml's


def test_staggering_a_fleets_ticks_splits_the_two_actors_rows_only():
    rows = [_row("realtime", 0, [0.9, 0.9], recipe=NEW),  # one robot: no fleet, same recipe
            _row("two_actors", 0, [0.5, 0.9, 0.9], recipe=NEW),  # before the ticks were staggered
            _row("two_actors", 0, [0.9, 0.92], recipe=f"{NEW},fleet.ticks_staggered=True")]
    summary = graph_realtime.summarize(rows, SHIPPED)
    assert summary["wall_min_to_90"] == 2.0 and summary["two_actors_wall_min_to_90"] == 2.0
    assert summary["two_actors_seeds_reaching_90"] == "1/1" and summary["rows"] == 2
    earlier = summary["earlier_recipes"][
        f"{BEFORE_NICED},fleet.ticks_staggered=False,learner.group_niced=True,{EAGER_ACKS}"]
    assert earlier["two_actors_wall_min_to_90"] == 4.0 and earlier["rows"] == 1
    assert graph_realtime.shipped_settings()["ticks_staggered"] is True  # the code's own
    assert graph_realtime.row_recipe(rows[0]) == graph_realtime.arm_recipe("realtime", SHIPPED)


def test_an_interrupted_run_stops_its_graph(tmp_path, monkeypatch):
    """The graph runs in a session of its own (Ctrl-C at the benchmark's terminal does not reach it): a run
    interrupted while it trains stops the graph with it instead of leaving it training."""
    import subprocess
    from types import SimpleNamespace

    ready = tmp_path / "graph_ready"
    graphs = []

    class InterruptedWhileWaiting(subprocess.Popen):
        interrupted = False

        def wait(self, timeout=None):
            if not self.interrupted:  # the first wait, once the graph is up: the person presses Ctrl-C
                while not ready.exists():
                    time.sleep(0.05)
                self.interrupted = True
                raise KeyboardInterrupt
            return super().wait(timeout)

    def graph(cmd, **kwargs):
        stops_on_sigint = ("import pathlib, signal, sys, time; signal.signal(signal.SIGINT, lambda *_: sys.exit(130)); "
                           f"pathlib.Path({str(ready)!r}).touch(); time.sleep(120)")  # as robot-rl train handles it
        graphs.append(InterruptedWhileWaiting([sys.executable, "-c", stops_on_sigint], **kwargs))
        return graphs[-1]

    monkeypatch.setattr(graph_realtime, "subprocess", SimpleNamespace(**{**vars(subprocess), "Popen": graph}))
    with pytest.raises(KeyboardInterrupt):
        graph_realtime.run_arm("realtime", 0, 100, 60.0, tmp_path / "run")
    assert len(graphs) == 1 and graphs[0].returncode == 130  # stopped by the SIGINT, not left training


def test_the_compiled_training_step_and_the_acknowledgements_split_real_time_rows_but_not_lockstep_ones():
    shipped = {**SHIPPED, "compile": True, "acks_beside_updates": True, "acks_on_arrival": True}
    eager = _row("realtime", 0, [0.5, 0.9, 0.9], recipe=NEW)
    old_lockstep = _row("lockstep", 0, [0.9, 0.9], recipe=NEW)  # lockstep: the same math, judged against steps
    old_lockstep.update(env_steps=10_000, steps_to_90=1200)
    compiled_first = f"{NEW},learner.compile=True,learner.acks_beside_updates=True"  # 265e304's rows
    queued_acks = _row("realtime", 2, [0.5, 0.5, 0.9, 0.9], recipe=compiled_first)
    compiled = _row("realtime", 1, [0.9, 0.9], recipe=f"{compiled_first},learner.acks_on_arrival=True")
    summary = graph_realtime.summarize([eager, old_lockstep, queued_acks, compiled], shipped)
    assert summary["wall_min_to_90"] == 2.0 and summary["lockstep_steps_to_90"] == 1200 and summary["rows"] == 2
    earlier = summary["earlier_recipes"]
    assert earlier[f"{NEW},{EAGER_ACKS}"]["wall_min_to_90"] == 4.0
    compiled_first_key = (f"{BEFORE_NICED.replace('compile=False', 'compile=True')},learner.group_niced=True,"
                          "learner.acks_beside_updates=True,learner.acks_on_arrival=False,sim.latency_and_noise=False")
    assert earlier[compiled_first_key]["wall_min_to_90"] == 6.0
    assert graph_realtime.shipped_settings()["compile"] is True  # config/arm_pick_cube.yaml's
    assert graph_realtime.shipped_settings()["acks_on_arrival"] is True  # the learner node's own code


def test_the_shipped_recipes_rows_from_another_machine_are_summarized_apart():
    here, there = "Intel(R) Xeon(R) Processor, 2 cores", "AMD EPYC 7B13, 2 cores"
    rows = [_row("realtime", 0, [0.5, 0.9, 0.92], recipe=NEW, machine=here),  # 4 min
            _row("realtime", 1, [0.9, 0.95], recipe=NEW, machine=there),  # 2 min, elsewhere
            _row("realtime", 2, [0.9, 0.9], recipe=NEW, machine=None)]  # 2 min, before rows named their machine
    summary = graph_realtime.summarize(rows, SHIPPED, here=here)
    assert summary["machine"] == here and summary["rows"] == 1 and summary["wall_min_to_90"] == 4.0
    elsewhere = summary["earlier_recipes"][f"{NEW},{EAGER_ACKS} on {there}"]
    assert elsewhere["rows"] == 1 and elsewhere["wall_min_to_90"] == 2.0
    unrecorded = summary["earlier_recipes"][f"{NEW},{EAGER_ACKS} on a machine not recorded"]
    assert unrecorded["rows"] == 1 and unrecorded["wall_min_to_90"] == 2.0
    assert graph_realtime.machine().startswith(f"{cpu_model()}, {os.cpu_count()} cores, ")
    assert graph_realtime.machine().endswith(" native bfloat16")
