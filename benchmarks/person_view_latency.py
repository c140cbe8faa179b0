"""The person's view must not slow the control loop: act latency of the arm actor with the view
open (a browser client reading its MJPEG stream) against the same session without it.

Each run is a real `robot-rl record --task arm_pick_cube --teleop scripted` session (the scripted
human drives through the teleop node, the simulator renders both 64x64 cameras at 10 Hz in real
time, as a person's session runs); conditions alternate (off, on, off, on, ...) so drifts of the
machine hit both. The act latency is the actor's own figure from /diagnostics: from the moment an
observation set is complete in the actor to its command published (p50/p99 over the run's steps),
with the control periods it missed counted.

    python benchmarks/person_view_latency.py [--rounds 2] [--seconds 60] [--quick]

Last line: JSON with per-run figures, the median p99 per condition, their ratio and
`meets_target` (p99 with the view <= 20 ms at 10 Hz).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from robot_rl.ros.probe import RosProbe, free_port, fresh_domain_id

TARGET_P99_MS = 20.0


def _stream_reader(port: int, stop: threading.Event, counts: dict) -> None:
    """A browser's share: reads the MJPEG stream until stopped (reconnecting while the view starts)."""
    while not stop.is_set():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/stream.mjpg", timeout=5) as response:
                while not stop.is_set():
                    chunk = response.read(65536)
                    if not chunk:
                        break
                    counts["bytes"] += len(chunk)
        except OSError:
            time.sleep(0.5)


def run_session(view: bool, seconds: float, workdir: Path) -> dict:
    domain_id, port = fresh_domain_id(), free_port()
    run_dir = workdir / f"run-{'view' if view else 'noview'}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "robot_rl.cli", "record", "--task", "arm_pick_cube", "--teleop", "scripted",
           "--episodes", "0", "--out", str(run_dir / "demos.zarr"), "--run-dir", str(run_dir), "--plain",
           "--status-period", "30", "--domain-id", str(domain_id), "--view", "browser" if view else "off",
           "--view-port", str(port), "--reset-time-s", "0"]
    session = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    probe = RosProbe(domain_id, "person_view_latency")
    probe.watched = "arm_actor"
    stop, counts = threading.Event(), {"bytes": 0}
    reader = threading.Thread(target=_stream_reader, args=(port, stop, counts), daemon=True)
    if view:
        reader.start()
    try:
        probe.wait_for(lambda: probe.value("act_latency_ms_p50") >= 0, 120, "the actor's first steps")
        probe.spin(seconds)
        result = {"view": view, "p50_ms": probe.value("act_latency_ms_p50"),
                  "p99_ms": probe.value("act_latency_ms_p99"), "missed_periods": int(probe.value("missed_periods")),
                  "steps": int(probe.value("train_steps") + probe.value("episode_steps")),
                  "view_frames": int(probe.value("frames_composed", "session_view")) if view else 0,
                  "stream_mb": round(counts["bytes"] / 1e6, 1)}
    finally:
        stop.set()
        probe.close()
        os.killpg(session.pid, signal.SIGINT)
        session.wait(timeout=60)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs per condition (alternating)")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per run")
    parser.add_argument("--quick", action="store_true", help="one short run per condition (a smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds = 1, 8.0
    runs = []
    with tempfile.TemporaryDirectory(prefix="person_view_latency-") as tmp:
        for _ in range(args.rounds):
            for view in (False, True):
                runs.append(run_session(view, args.seconds, Path(tmp)))
                print(json.dumps(runs[-1]), flush=True)
    p99 = {view: float(np.median([r["p99_ms"] for r in runs if r["view"] == view])) for view in (False, True)}
    summary = {"runs": runs, "p99_ms_without_view": p99[False], "p99_ms_with_view": p99[True],
               "ratio_with_to_without": round(p99[True] / p99[False], 2),
               "missed_periods_with_view": sum(r["missed_periods"] for r in runs if r["view"]),
               "target_p99_ms": TARGET_P99_MS, "meets_target": p99[True] <= TARGET_P99_MS}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
