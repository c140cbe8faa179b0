"""Cameras at real rates (issue 42 item 2), a rate benchmark with no learning target: two 640x480 colour streams
at 30 fps through the camera node, the arm's state from `arm_sim` at 30 Hz with its rendering off, the actor running
the pixel policy at 30 Hz on what the cameras send, and the learner training on what arrives.

What runs is what a user runs on hardware: `robot-rl train --task arm_pick_cube` (arm_sim, arm_actor, learner; the
learner with the task's own settings) with the camera nodes started beside it as the README starts them
(`robot-rl node camera`), one per camera of the task, in front of the actor instead of the simulator's renders:

* the streams are recorded frames played at rate: the arm scene rendered at 640x480 from the front and wrist
  cameras while the scripted expert picks the cube, with sensor-like noise (sigma 2 levels; renders are flat, real
  sensors are not, which matters to the recording's compression), stored uncompressed (YUV 4:2:0 AVI: no decoding,
  only the colour conversion a YUYV webcam needs too; an MJPG webcam would add about 3.5 ms of decoding a frame here)
  and played by the node's OpenCV backend at 30 fps, stamped when each frame is read, cropped to the centre 480x480
  square (the field of view of the policy's square cameras) and resized to the task's 64x64;
* `arm_sim` runs on the wall clock at 30 Hz (`clock_mode: realtime`) and stamps with the wall clock
  (`stamp_clock: wall`), as a robot does, so the actor pairs its states with the cameras' frames by stamp
  (`obs_slop_s` 1.5 periods: the three streams' phases are independent);
* the actor acts on each complete observation set (state + both cameras), never waits for the learner
  (`sync_updates_per_step: 0`), and logs every step's timing (`timing_log`: when its command went out, the
  observation stamp, the episode, act latency, frame age).

Figures over the measured window (`--minutes`, after the learner has started training and `--settle-s` more):
`control_hz_achieved` (commands per second inside episodes: a reset between episodes is no control period),
`act_latency_p99_ms` (observation stamp to command), `missed_periods_fraction` (steps whose act latency exceeded
the period, as the actor counts them), `frame_age_p99_ms` (the oldest camera frame's capture stamp to the command),
the learner's updates per second, the cameras' delivered frame rates and each node's CPU share.
Targets: >= 29.7 Hz, <= 15 ms, <= 0.005, <= 50 ms.

`--mcap zstd|lz4` also records both full-resolution streams (the camera nodes' `color/native/image_raw`, published
only while someone subscribes) with `robot-rl record-bag` for `--mcap-s` (at most 60) seconds in the middle of the
window, and reports the same figures over the recording and over the rest of the window, with the recording's size,
compression ratio, frames kept and its capture-to-recorder latency.
`--transport shm` (default) is the graph's own: Fast DDS shared memory with this package's 64 MiB segments
(config/fastdds_large_payloads.xml); `--transport udp` puts every node on UDP over loopback alone, for comparison.

    python benchmarks/camera_rate.py --quick                 # ~1 minute, no result written (--mcap: 8 s of it)
    python benchmarks/camera_rate.py                         # 5 minutes measured, a row in the results
    python benchmarks/camera_rate.py --mcap zstd             # the same with a 60 s recording of both streams

The last line is one JSON object. A full run appends it under its configuration's key (transport, recording) to
benchmarks/results/camera_rate.json; earlier rows are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
from graph_realtime import _commit, stop_group

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "camera_rate.json"
TASK = "arm_pick_cube"
CONTROL_HZ = 30.0
FPS = 30
NATIVE_W, NATIVE_H = 640, 480
CROP = (80, 0, 480, 480)
"""The centre square of a 640x480 frame: what the policy's square cameras of the same vertical field of view see."""
NOISE_SIGMA = 2.0
OBS_SLOP_S = 1.5 / CONTROL_HZ
TARGETS = {"control_hz_achieved": (">=", 29.7), "act_latency_p99_ms": ("<=", 15.0),
           "missed_periods_fraction": ("<=", 0.005), "frame_age_p99_ms": ("<=", 50.0)}
MAX_MCAP_S = 60.0
UDP_PROFILE = """<?xml version="1.0" encoding="UTF-8" ?>
<dds xmlns="http://www.eprosima.com"><profiles>
  <transport_descriptors><transport_descriptor><transport_id>udp_only</transport_id><type>UDPv4</type>
  </transport_descriptor></transport_descriptors>
  <participant profile_name="udp_only" is_default_profile="true"><rtps>
    <userTransports><transport_id>udp_only</transport_id></userTransports>
    <useBuiltinTransports>false</useBuiltinTransports></rtps></participant>
</profiles></dds>
"""
"""Fast DDS over UDP on loopback alone: every sample serialised into datagrams through the kernel."""


# ---- the recorded streams -----------------------------------------------------------------------------------


def record_streams(folder: Path, frames: int, cameras: tuple[str, ...], seed: int = 0) -> dict[str, Path]:
    """The arm scene at 640x480 from each camera while the scripted expert picks the cube, `frames` frames at 30 fps,
    with sensor noise, as uncompressed AVI files (camera -> path)."""
    import cv2
    import mujoco

    from robot_rl.robots.arm.sim import ArmSim, ArmSimConfig, scripted_lift_action

    rng = np.random.default_rng(seed)
    sim = ArmSim(ArmSimConfig(control_hz=CONTROL_HZ))
    sim.reset(rng)
    renderer = mujoco.Renderer(sim.model, height=NATIVE_H, width=NATIVE_W)
    paths = {camera: folder / f"{camera}.avi" for camera in cameras}
    writers = {camera: cv2.VideoWriter(str(path), 0, FPS, (NATIVE_W, NATIVE_H)) for camera, path in paths.items()}
    try:
        if not all(w.isOpened() for w in writers.values()):
            raise RuntimeError("OpenCV cannot write uncompressed AVI here (its FFmpeg backend is missing)")
        for _ in range(frames):
            for camera, writer in writers.items():
                renderer.update_scene(sim.data, camera=camera)
                noisy = renderer.render() + rng.normal(0.0, NOISE_SIGMA, (NATIVE_H, NATIVE_W, 3))
                writer.write(cv2.cvtColor(np.clip(noisy, 0, 255).astype(np.uint8), cv2.COLOR_RGB2BGR))
            sim.step(scripted_lift_action(sim.state(), gain=0.5))
    finally:
        for writer in writers.values():
            writer.release()
        renderer.close()
        sim.close()
    return paths


# ---- the processes ------------------------------------------------------------------------------------------


def transport_environment(transport: str, domain_id: int, folder: Path) -> dict[str, str]:
    """The environment of every process of the run: the graph's own (loopback, shared memory) or UDP alone."""
    from robot_rl.ros.graph import fastdds_profile_path, loopback_environment

    base = dict(os.environ, FASTDDS_DEFAULT_PROFILES_FILE=str(fastdds_profile_path()))  # not a profile of the user's
    if transport == "udp":
        profile = folder / "fastdds_udp_only.xml"
        profile.write_text(UDP_PROFILE)
        base["FASTDDS_DEFAULT_PROFILES_FILE"] = str(profile)
    env = loopback_environment(domain_id, base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def camera_command(camera: str, video: Path, image_size: int, native: bool) -> list[str]:
    params = {"backend": "opencv", "device": str(video), "camera_name": camera, "fps": FPS, "width": 0, "height": 0,
              "loop": True, "crop_x": CROP[0], "crop_y": CROP[1], "crop_width": CROP[2], "crop_height": CROP[3],
              "output_width": image_size, "output_height": image_size, "publish_depth": False,
              "publish_native": native}
    args = [sys.executable, "-m", "robot_rl.cli", "node", "camera", "--ros-args", "-r", f"__node:={camera}_camera"]
    for key, value in params.items():
        args += ["-p", f"{key}:={str(value).lower() if isinstance(value, bool) else value}"]
    return args


def train_command(run_dir: Path, domain_id: int, demo_episodes: int | None) -> list[str]:
    settings = {"arm_sim.clock_mode": "realtime", "arm_sim.stamp_clock": "wall", "arm_sim.publish_images": "false",
                "arm_sim.control_hz": CONTROL_HZ, "arm_actor.control_hz": CONTROL_HZ,
                "arm_actor.use_sim_time": "false", "arm_actor.sync_updates_per_step": 0,
                "arm_actor.obs_slop_s": round(OBS_SLOP_S, 4), "arm_actor.timing_log": str(run_dir / "timing.csv")}
    if demo_episodes is not None:
        settings["robot_rl.demos"] = f"{{episodes: {demo_episodes}}}"
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", "--task", TASK, "--run-dir", str(run_dir),
           "--domain-id", str(domain_id), "--steps", "10000000", "--eval-episodes", "0", "--plain",
           "--status-period", "30"]
    for key, value in settings.items():
        cmd += ["--set", f"{key}={value}"]
    return cmd


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def graph_pids(run_dir: Path) -> dict[str, int]:
    """The node processes of the graph started with `run_dir`'s params file: node name -> pid."""
    marker = str(run_dir / "params.yaml")
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:  # not a process, or one that just ended
            continue
        if proc.name.isdigit() and marker in argv:
            name = next((a.split(":=", 1)[1] for a in argv if a.startswith("__node:=")), proc.name)
            found[name] = int(proc.name)
    return found


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds each process has used so far (its threads included)."""
    out = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def cpu_percent(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    return {name: round(100 * (after[name] - before[name]) / seconds, 1) for name in after if name in before}


# ---- the figures --------------------------------------------------------------------------------------------


def read_timing(path: Path) -> dict[str, np.ndarray]:
    """The actor's timing log (robot_rl/ros/act_timing.py) as columns."""
    from robot_rl.ros.act_timing import TIMING_LOG_COLUMNS

    lines = path.read_text().splitlines()
    if not lines or tuple(lines[0].split(",")) != TIMING_LOG_COLUMNS:
        raise SystemExit(f"camera_rate: {path} is not the actor's timing log (header {lines[:1]})")
    rows = [line.split(",") for line in lines[1:] if line.count(",") == len(TIMING_LOG_COLUMNS) - 1]
    columns = dict(zip(TIMING_LOG_COLUMNS, zip(*rows))) if rows else {c: () for c in TIMING_LOG_COLUMNS}
    out = {c: np.array(columns[c], dtype=np.int64) for c in ("command_wall_ns", "stamp_ns", "episode")}
    out.update({c: np.array([v or "nan" for v in columns[c]], dtype=float) for c in TIMING_LOG_COLUMNS[3:]})
    return out


def window_figures(timing: dict[str, np.ndarray], mask: np.ndarray, period_s: float) -> dict:
    """The targets' figures over the steps `mask` selects."""
    steps = int(mask.sum())
    if steps < 2:
        return {"steps": steps}
    t, episode = timing["command_wall_ns"][mask], timing["episode"][mask]
    same = episode[1:] == episode[:-1]
    intervals_s = np.diff(t)[same] * 1e-9
    act, age = timing["act_ms"][mask], timing["frame_age_ms"][mask]
    return {"steps": steps, "episodes": int(len(np.unique(episode))),
            "control_hz_achieved": round(float(len(intervals_s) / intervals_s.sum()), 3) if len(intervals_s) else None,
            "skipped_periods": int((intervals_s > 1.5 * period_s).sum()),
            "act_latency_p50_ms": round(float(np.percentile(act, 50)), 2),
            "act_latency_p99_ms": round(float(np.percentile(act, 99)), 2),
            "missed_periods_fraction": round(float((act > period_s * 1e3).mean()), 5),
            "frame_age_p50_ms": round(float(np.nanpercentile(age, 50)), 2),
            "frame_age_p99_ms": round(float(np.nanpercentile(age, 99)), 2),
            "control_p99_ms": round(float(np.percentile(timing["control_ms"][mask], 99)), 2),
            "learner_wait_p99_ms": round(float(np.percentile(timing["learner_wait_ms"][mask], 99)), 2)}


def targets_met(figures: dict) -> dict[str, bool]:
    met = {}
    for key, (op, bound) in TARGETS.items():
        value = figures.get(key)
        met[key] = value is not None and bool(value >= bound if op == ">=" else value <= bound)
    return met


def mcap_figures(path: Path, cameras: int) -> dict:
    """What the recording kept: frames per stream against what 30 fps gives, bytes raw and on disk, and the
    capture-to-recorder latency (each message's log time, when the recorder received it, minus its header stamp)."""
    from mcap.reader import make_reader

    per_topic: dict[str, list[int]] = {}
    raw_bytes, first_ns, last_ns = 0, None, None
    with open(path, "rb") as f:
        for _, channel, message in make_reader(f).iter_messages():
            if not channel.topic.endswith("/image_raw"):
                continue
            sec, nanosec = struct.unpack_from("<iI", message.data, 4)  # CDR: 4-byte header, then header.stamp
            per_topic.setdefault(channel.topic, []).append(message.log_time - (sec * 1_000_000_000 + nanosec))
            raw_bytes += len(message.data)
            first_ns = message.log_time if first_ns is None else min(first_ns, message.log_time)
            last_ns = message.log_time if last_ns is None else max(last_ns, message.log_time)
    if first_ns is None:
        raise SystemExit(f"camera_rate: the recording {path} holds no frames")
    seconds = (last_ns - first_ns) * 1e-9
    latencies = np.concatenate([np.array(v) for v in per_topic.values()]) * 1e-6
    size = path.stat().st_size
    return {"first_ns": first_ns, "last_ns": last_ns, "frames": {topic: len(v) for topic, v in per_topic.items()},
            "frames_expected": int(round(seconds * FPS)) * cameras,
            "raw_mb": round(raw_bytes / 1e6, 1), "file_mb": round(size / 1e6, 1),
            "compression_ratio": round(raw_bytes / size, 2),
            "written_mb_per_s": round(size / 1e6 / seconds, 1),
            "capture_to_recorder_p50_ms": round(float(np.percentile(latencies, 50)), 2),
            "capture_to_recorder_p99_ms": round(float(np.percentile(latencies, 99)), 2)}


# ---- one run ------------------------------------------------------------------------------------------------


class Mark(NamedTuple):
    """The run at one moment: wall time, each process's CPU seconds, the learner's updates, the cameras' frames."""

    wall_ns: int
    cpu: dict[str, float]
    updates: float
    frames: dict[str, float]


def mark(probe, pids: dict[str, int], cameras: tuple[str, ...]) -> Mark:
    return Mark(time.time_ns(), cpu_seconds(pids), probe.value("updates", "learner"),
                {c: probe.value("frames_published", f"{c}_camera") for c in cameras})


def wait_for_training(probe, train: subprocess.Popen, timeout_s: float, log: Path) -> None:
    """Until the learner has made its first update (the graph is up and transitions arrive)."""
    deadline = time.monotonic() + timeout_s
    while not probe.value("updates", "learner") > 0:
        if train.poll() is not None or time.monotonic() > deadline:
            why = f"ended with exit code {train.returncode}" if train.poll() is not None else \
                f"no learner update after {timeout_s:.0f} s"
            raise SystemExit(f"camera_rate: `robot-rl train` {why}; its output ended with:\n{log.read_text()[-3000:]}")
        probe.spin_until(time.monotonic() + 1.0)


def record_cameras(args, probe, env: dict[str, str], topics: list[str], folder: Path) -> dict:
    """`robot-rl record-bag` of `topics` for args.mcap_s seconds; returns the recording's figures and its own CPU
    seconds (from its start, imports included; measured when it is reaped, the only child to end meanwhile)."""
    import resource

    def children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    before, out = children_cpu(), folder / "cameras.mcap"
    recorder = start([sys.executable, "-m", "robot_rl.cli", "record-bag", "--topics", *topics, "--out", str(out),
                      "--duration", str(args.mcap_s), "--compression", args.mcap], env, folder / "record_bag.log")
    started = time.monotonic()
    try:
        while recorder.poll() is None and time.monotonic() - started < args.mcap_s + 60:
            probe.spin_until(time.monotonic() + 0.5)
    finally:
        code = stop_group(recorder, 60.0)
    if code != 0 or not out.exists():
        raise SystemExit(f"camera_rate: record-bag ended with exit code {code}:\n"
                         f"{(folder / 'record_bag.log').read_text()[-3000:]}")
    return {**mcap_figures(out, len(topics)), "record_bag_cpu_s": round(children_cpu() - before, 1),
            "record_bag_wall_s": round(time.monotonic() - started, 1)}


def run(args: argparse.Namespace, folder: Path) -> dict:
    from robot_rl.ros.probe import RosProbe, fresh_domain_id
    from robot_rl.tasks import get_task

    task = get_task(TASK)
    domain_id = fresh_domain_id()
    env = transport_environment(args.transport, domain_id, folder)
    os.environ.update(env)  # the probe joins the same graph the same way
    started = time.time()
    videos = record_streams(folder, args.frames, task.cameras)
    print(f"camera_rate: recorded {args.frames} frames of {', '.join(task.cameras)} at {NATIVE_W}x{NATIVE_H} "
          f"in {time.time() - started:.0f} s", flush=True)
    run_dir = folder / "run"
    cameras = {camera: start(camera_command(camera, videos[camera], task.image_size, bool(args.mcap)), env,
                             folder / f"{camera}_camera.log") for camera in task.cameras}
    train = start(train_command(run_dir, domain_id, args.demo_episodes), env, folder / "train.log")
    probe = RosProbe(domain_id, "camera_rate_probe")
    recording = None
    try:
        wait_for_training(probe, train, args.start_timeout_s, folder / "train.log")
        probe.spin_until(time.monotonic() + args.settle_s)
        pids = {**graph_pids(run_dir), **{f"{c}_camera": p.pid for c, p in cameras.items()},
                "robot-rl train": train.pid, "benchmark (probe)": os.getpid()}
        window_s = args.minutes * 60
        first = mark(probe, pids, task.cameras)
        print(f"camera_rate: measuring {window_s:.0f} s from {time.time() - started:.0f} s after the start", flush=True)
        marks = {}
        if args.mcap:
            probe.spin_until(time.monotonic() + (window_s - args.mcap_s) / 2)
            marks["recording"] = mark(probe, pids, task.cameras)
            topics = [f"/{c}/color/native/image_raw" for c in task.cameras]
            recording = record_cameras(args, probe, env, topics, folder)
            marks["recorded"] = mark(probe, pids, task.cameras)
        probe.spin_until(time.monotonic() + window_s - (time.time_ns() - first.wall_ns) * 1e-9)
        last = mark(probe, pids, task.cameras)
        sync_dropped = probe.value("sync_dropped", "arm_actor")
    finally:
        probe.close()
        code = stop_group(train, 60.0)
        for process in cameras.values():
            stop_group(process, 20.0)
    timing = read_timing(run_dir / "timing.csv")
    result = {"quick": args.quick, "transport": args.transport,
              "image_transport": "Fast DDS shared memory, 64 MiB segments (config/fastdds_large_payloads.xml)"
              if args.transport == "shm" else "Fast DDS UDPv4 over loopback only",
              "mcap": args.mcap or None, **summarize(timing, first, last, task.cameras),
              "actor_sync_dropped": sync_dropped, "train_exit_code": code}
    if recording is not None:  # over the recording's own span (its first to its last frame), and the rest
        span = (recording.pop("first_ns"), recording.pop("last_ns"))
        result["with_mcap"] = summarize(timing, marks["recording"], marks["recorded"], task.cameras, span)
        t = timing["command_wall_ns"]
        rest = (t >= first.wall_ns) & (t <= last.wall_ns) & ((t < span[0]) | (t > span[1]))
        figures = window_figures(timing, rest, 1.0 / CONTROL_HZ)
        result["without_mcap"] = {**figures, "targets_met": targets_met(figures)}
        result["recording"] = recording
    return {**result, "date": time.strftime("%Y-%m-%d"), "commit": _commit(), "cpus": os.cpu_count()}


def summarize(timing: dict[str, np.ndarray], first: Mark, last: Mark, cameras: tuple[str, ...],
              span: tuple[int, int] | None = None) -> dict:
    """The figures of the steps between two marks (or within `span`, wall ns), and the CPU shares, learner updates
    and camera frames between the marks."""
    seconds = (last.wall_ns - first.wall_ns) * 1e-9
    t0, t1 = span or (first.wall_ns, last.wall_ns)
    t = timing["command_wall_ns"]
    figures = window_figures(timing, (t >= t0) & (t <= t1), 1.0 / CONTROL_HZ)
    return {"window_s": round((t1 - t0) * 1e-9, 1), **figures, "targets_met": targets_met(figures),
            "learner_updates_per_s": round((last.updates - first.updates) / seconds, 2),
            "camera_fps": {c: round((last.frames[c] - first.frames[c]) / seconds, 2) for c in cameras},
            "cpu_percent": cpu_percent(first.cpu, last.cpu, seconds)}


def config_key(result: dict) -> str:
    return result["transport"] + (f"+mcap_{result['mcap']}" if result["mcap"] else "")


def append_result(result: dict, path: Path = RESULTS, key: Callable[[dict], str] = config_key) -> None:
    """Adds the run's row under its configuration's key (`key(result)`); the rows already there stay. Also
    benchmarks/reward_latency.py's, keyed by device and size."""
    from robot_rl.outputs import atomic_write_text

    rows: dict[str, list[dict]] = {}
    if path.exists():
        try:
            rows = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise SystemExit(f"{path.stem}: {path} is not valid JSON ({exc}); fix or move it, nothing was written")
        if not isinstance(rows, dict) or not all(isinstance(v, list) for v in rows.values()):
            raise SystemExit(f"{path.stem}: {path} is not a map of configuration -> rows; nothing was written")
    rows.setdefault(key(result), []).append(result)
    atomic_write_text(path, json.dumps(rows, indent=2) + "\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 20 s window after a short start (about a minute), "
                        "no result written")
    parser.add_argument("--minutes", type=float, default=5.0, help="length of the measured window")
    parser.add_argument("--settle-s", type=float, default=30.0,
                        help="seconds between the learner's first update and the window")
    parser.add_argument("--mcap", choices=["zstd", "lz4"], help="also record both full-resolution streams to MCAP "
                        "with this chunk compression, for --mcap-s seconds in the middle of the window")
    parser.add_argument("--mcap-s", type=float, default=MAX_MCAP_S, help=f"seconds recorded (at most {MAX_MCAP_S:g})")
    parser.add_argument("--transport", choices=["shm", "udp"], default="shm",
                        help="shm: the graph's own Fast DDS shared memory; udp: UDP over loopback alone")
    parser.add_argument("--frames", type=int, default=60, help="length of the recorded streams' loop, in frames")
    parser.add_argument("--demo-episodes", type=int, help="scripted demonstrations made before the graph starts "
                        "(default: the task config's)")
    parser.add_argument("--workdir", type=Path, help="keep the run's files here (streams, logs, the actor's timing "
                        "log, the recording; an empty or new folder) instead of a temporary folder")
    parser.add_argument("--start-timeout-s", type=float, default=900.0,
                        help="how long the graph may take to its learner's first update")
    args = parser.parse_args(argv)
    if args.quick:  # the same measurement, short: no demonstrations to make, a 20 s window (8 s recorded)
        args.minutes, args.settle_s, args.frames, args.demo_episodes = 20 / 60, 3.0, 30, 0
        args.mcap_s, args.start_timeout_s = min(args.mcap_s, 8.0), min(args.start_timeout_s, 240.0)
    if args.minutes <= 0 or args.settle_s < 0 or args.frames < 1:
        parser.error("--minutes must be > 0, --settle-s >= 0 and --frames >= 1")
    if args.mcap and not 0 < args.mcap_s <= min(MAX_MCAP_S, args.minutes * 60 - 10):
        parser.error(f"--mcap-s must be in (0, {MAX_MCAP_S:g}] and leave 10 s of the window unrecorded")
    return args


def run_in_workdir(name: str, run: Callable[[argparse.Namespace, Path], dict], args: argparse.Namespace) -> dict:
    """`run(args, folder)` in `args.workdir` (a new or empty folder, kept) or else in a temporary one (removed after);
    also benchmarks/reward_latency.py's."""
    if args.workdir is None:
        with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
            return run(args, Path(tmp))
    args.workdir.mkdir(parents=True, exist_ok=True)
    if any(args.workdir.iterdir()):
        raise SystemExit(f"{name}: --workdir {args.workdir} is not empty; name a new or empty folder")
    return run(args, args.workdir.resolve())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run_in_workdir("camera_rate", run, args)
    if not args.quick:
        append_result(result)
    print(json.dumps(result), flush=True)
    return 0 if result["steps"] >= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
