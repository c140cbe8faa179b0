"""The act latency's two parts, pinned by hand: the control callback's own time, and the time a step waited
for the learner before it could be taken; the frame age of a step with cameras, and the per-step timing log; the
live line's columns for them; the learner's training thread, which gives way to the control loops."""

import gc
import time

import pytest

pytest.importorskip("rclpy")

from robot_rl.ros.act_timing import TIMING_LOG_COLUMNS, ActTiming  # noqa: E402
from robot_rl.nodes.learner import autogroup_nice  # noqa: E402
from robot_rl.ros.session import _latency_columns  # noqa: E402


def test_a_step_that_waited_counts_its_wait_apart_from_the_callbacks_time():
    timing = ActTiming(period_s=0.1)
    timing.acted(stamp=1, started=10.000, now=10.002, latency_s=0.004)  # taken at once: 2 ms, no wait
    timing.deferred(stamp=2, now=11.000)  # refused: the learner is behind
    timing.deferred(stamp=2, now=11.250)  # refused again (a repeat of the same observation): still from 11.0
    timing.acted(stamp=2, started=11.600, now=11.603, latency_s=0.604)  # missed its 100 ms period
    timing.deferred(stamp=3, now=12.000)  # an observation that was never acted on ...
    timing.acted(stamp=4, started=12.100, now=12.101, latency_s=0.002)  # ... does not lend its wait to the next one
    assert list(timing.control_ms) == pytest.approx([2.0, 3.0, 1.0])
    assert list(timing.wait_ms) == pytest.approx([0.0, 600.0, 0.0])
    assert list(timing.act_ms) == pytest.approx([4.0, 604.0, 2.0]) and timing.missed_periods == 1
    shown = timing.summary()
    assert shown["act_latency_ms_p50"] == 4.0 and shown["missed_periods"] == 1
    assert shown["control_ms_p50"] == 2.0 and shown["learner_wait_ms_p50"] == 0.0
    assert shown["learner_wait_ms_p99"] == pytest.approx(588.0)  # numpy's linear interpolation: 0 + 0.98 * 600


def test_the_frame_age_runs_from_the_oldest_frame_to_the_command_and_every_step_is_logged(tmp_path):
    log = tmp_path / "timing.csv"
    timing = ActTiming(period_s=1 / 30, frames=True, log_path=str(log))
    assert timing.summary()["frame_age_ms_p99"] == "-"  # before the first step
    # observation stamped 10.000 s (the arm), its oldest camera frame captured 25 ms before; command 4 ms after
    timing.acted(stamp=10_000_000_000, started=1.0, now=1.003, latency_s=0.004, frames_stamp=9_975_000_000,
                 episode=3)
    timing.acted(stamp=10_033_000_000, started=1.1, now=1.101, latency_s=0.040, frames_stamp=10_033_000_000,
                 episode=3)  # a frame as new as the observation: its age is the act latency, a missed period
    timing.close()
    assert list(timing.frame_age_ms) == pytest.approx([29.0, 40.0]) and timing.missed_periods == 1
    assert timing.summary()["frame_age_ms_p50"] == pytest.approx(34.5)
    header, *rows = [line.split(",") for line in log.read_text().splitlines()]
    assert tuple(header) == TIMING_LOG_COLUMNS and len(rows) == 2
    first = dict(zip(header, rows[0]))
    assert (first["stamp_ns"], first["episode"]) == ("10000000000", "3")
    assert [float(first[k]) for k in ("act_ms", "control_ms", "learner_wait_ms", "frame_age_ms")] == \
        pytest.approx([4.0, 3.0, 0.0, 29.0])
    assert abs(int(first["command_wall_ns"]) - time.time_ns()) < 10e9
    again = ActTiming(period_s=0.1, log_path=str(log))  # a restarted actor appends, without a second header
    again.acted(stamp=11_000_000_000, started=2.0, now=2.001, latency_s=0.002)
    again.close()
    lines = log.read_text().splitlines()
    assert len(lines) == 4 and "frame_age_ms_p50" not in again.summary()
    assert dict(zip(header, lines[-1].split(",")))["frame_age_ms"] == ""  # no cameras: no frame age


def test_the_log_says_what_a_slow_callback_spent_its_time_on_cpu_and_garbage_collection(tmp_path):
    log = tmp_path / "timing.csv"
    timing = ActTiming(period_s=0.1, log_path=str(log))
    gc.disable()  # only the collection below falls in a callback's window
    try:
        started = time.monotonic()
        gc.collect()
        timing.acted(stamp=1, started=started, now=time.monotonic(), latency_s=0.02, cpu_s=0.0015)
        started = time.monotonic()
        timing.acted(stamp=2, started=started, now=started + 0.001, latency_s=0.002)  # no collection in it
    finally:
        gc.enable()
        timing.close()
    header, *rows = [line.split(",") for line in log.read_text().splitlines()]
    first, second = (dict(zip(header, row)) for row in rows)
    assert float(first["control_cpu_ms"]) == pytest.approx(1.5)
    assert 0.0 < float(first["gc_ms"]) <= float(first["control_ms"]) + 1e-3
    assert second["control_cpu_ms"] == "" and float(second["gc_ms"]) == 0.0
    assert timing.gc_pauses._on_gc not in gc.callbacks  # closed: the collector no longer reports to it


def test_a_log_of_other_columns_is_refused_and_kept(tmp_path):
    old = tmp_path / "timing.csv"
    old.write_text("command_wall_ns,stamp_ns,episode,act_ms,control_ms,learner_wait_ms,frame_age_ms\n1,2,0,3,4,0,\n")
    with pytest.raises(ValueError, match="not a timing log with the columns"):
        ActTiming(period_s=0.1, log_path=str(old))
    assert old.read_text().count("\n") == 2


def test_the_live_line_shows_the_control_time_and_the_learner_wait_in_columns_of_their_own():
    assert _latency_columns({"act_latency_ms_p99": "-", "control_ms_p99": "-"}) == ""  # before the first step
    columns = _latency_columns({"act_latency_ms_p99": 650.0, "control_ms_p99": 3.1, "learner_wait_ms_p99": 641.7})
    assert columns == "  control p99 3.1 ms  learner wait p99 641.7 ms"


def test_the_learners_training_thread_yields_the_cpu_and_leaves_the_rest_of_the_process_alone():
    import os
    import threading

    from robot_rl.nodes.learner import lower_thread_priority

    seen = {}

    def train():
        seen["failed"] = lower_thread_priority(7)
        me = threading.get_native_id()
        seen["niceness"] = os.getpriority(os.PRIO_PROCESS, me)
        seen["again"] = lower_thread_priority(3)  # never raises a thread's priority back: 7 stays
        seen["kept"] = os.getpriority(os.PRIO_PROCESS, me)

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=train)
    thread.start()
    thread.join()
    assert seen == {"failed": None, "niceness": max(7, before), "again": None, "kept": max(7, before)}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before  # the executor's thread: as it was


def test_autogroup_applies_only_where_the_kernel_names_the_group(tmp_path):
    # an empty file: the process is in the kernel's default group (CI's container, under its init's session)
    (tmp_path / "in_group").write_text("/autogroup-1052 nice 5\n")
    (tmp_path / "default_group").write_text("")
    assert autogroup_nice(tmp_path / "in_group") == 5
    assert autogroup_nice(tmp_path / "default_group") is None
    assert autogroup_nice(tmp_path / "no_autogroup_kernel") is None


@pytest.mark.skipif(autogroup_nice() is None, reason="no scheduling group of the test's session here (a kernel "
                    "without autogroup, or its default group)")
@pytest.mark.parametrize("own_session", [True, False])
def test_a_learner_leading_its_own_session_lowers_its_scheduling_group_and_one_sharing_it_leaves_it(own_session):
    import subprocess
    import sys

    probe = ("from robot_rl.nodes.learner import autogroup_nice, lower_session_priority; "
             "print(lower_session_priority(7)); print(autogroup_nice())")
    ours = autogroup_nice()
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         start_new_session=own_session).stdout.split()
    # a new session starts a group at niceness 0; one sharing the test's session sees the test's group, untouched
    assert out == ["None", "7" if own_session else str(ours)]
