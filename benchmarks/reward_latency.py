"""How fast the reward backends score a control step, and whether a loop scoring every step keeps its rate
(issue 45 item 4): the vlac backend (VLAC's pair critic and done check) on the native InternVL class, vlm_critic
on Qwen3-VL, and the local `progress` model as the reference measured in the same run.

Rules, fixed before any result:

* Models: random weights of the backends' own classes at a named size (`--size`): ``tiny`` (seconds, for
  `--quick`) or ``2b``, the published sizes of VLAC-2B / InternVL2-2B and Qwen3-VL-2B-Instruct
  (`robot_rl.rewards.vlm_checkpoints` names the config values and where they come from). Built once into
  `--cache-dir` (a directory this script made, marked by `MARKER`; any other directory there is refused,
  never overwritten) and loaded through `load_backend` as the reward node loads them. `progress` is an
  untrained `ProgressModel` on the shipped arm encoder (training changes its weights, not its cost).
  Noise weights cost what trained ones cost, with one exception: vlac generates its answers, and noise
  does not stop early as a trained checkpoint answering "35" or "1" would; its generation runs up to
  `robot_rl.rewards.vlac.MAX_NEW_TOKENS` steps, so its figures are an upper bound. Noise answers the
  reading cannot parse are counted (`unreadable`), their calls timed all the same (the model ran).
* Frames: one control step of arm_pick_cube, the task whose cameras the shipped encoder reads: uint8 RGB,
  `--image-size` (64) square, from each of `--cameras` (front, wrist); random pixels (the cost does not
  depend on them). vlac reads the first camera (its critics take one view), vlm_critic every camera, as in
  the node. A call is ``scorer.score(first, previous, current, goal)`` with `previous` and `current` holding
  B steps (`--batches`, default 1 4 16) and `first` one frame: the pair and done questions of B steps.
* Timing: `--warmup` calls per batch size not counted, then `--calls` calls, each timed with
  `time.perf_counter` (and `torch.cuda.synchronize` before and after on CUDA); p50, p99 and mean in ms,
  and each backend's p50 over the progress model's at the same batch (`ratio_p50_to_progress`). float32
  on CPU, bfloat16 on CUDA (`--device auto`: CUDA when available), as the backends load themselves; torch's
  CPU threads as `--torch-threads` (0: torch's default, as the reward node's torch_threads), named in the row.
* The stream: the reward node's own code path without ROS (`RewardStream` + `ScoringWorker`, its scoring
  thread): one step's frames of every camera fed at `--control-hz` (10) on the wall clock for `--stream-s`
  seconds, stamped when fed, once for each of the node's `max_batch` values in `--stream-max-batch` (1: the
  worker scores only the newest step, skipping those it had no time for; 8: every waiting step, up to 8, in
  one call); reported: the share of steps scored (the episode's first frame is the reference, not scored),
  the scored rate, the steps per call, the score lag (stamp to result) p50/p99 and the results flagged late
  (`--max-latency-s`, the node's max_latency_s, 1 s by default).
* The actor: arm_pick_cube's graph as `robot-rl train` starts it (arm_sim on the wall clock at 10 Hz, arm_actor
  asynchronous, learner; no demonstrations), twice with the same seed: without the reward node, and with it
  (`reward` in `robot_rl.nodes`, `--actor-backend` at `--size`, the actor taking its rewards from it:
  reward_source reward_node, not waiting for them). The actor's act latency (observation stamp to command,
  its `timing_log`) over `--actor-s` seconds after `--settle-s` seconds of acting; reported p50/p99 of both
  runs and their ratio, and the reward node's own figures since it started (`REWARD_NODE_FIGURES`).
  `--actor-s 0` skips this part.

    python benchmarks/reward_latency.py --quick        # tiny sizes, batches 1 and 4, short stream and graph runs
    python benchmarks/reward_latency.py --size 2b --batches 1 --device cpu   # the CPU figure (2B at batch 1)
    python benchmarks/reward_latency.py --size 2b --batches 1 8 16 --device cuda   # the GPU figures

The last line is one JSON object (the hardware named). A full run appends it to
benchmarks/results/reward_latency.json (or `--results`) under "<device>+<size>"; earlier rows are kept. `--quick`
writes nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from robot_rl.device import cpu_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from camera_rate import append_result as append_keyed_result, read_timing, run_in_workdir  # noqa: E402
from graph_realtime import _commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "reward_latency.json"
TASK = "arm_pick_cube"
GOAL = "pick up the cube"
REFERENCE = "progress"
FAMILIES = {"vlac": "internvl", "vlm_critic": "qwen3_vl", "vlm_episode_score": "qwen3_vl"}
"""The model family each VLM backend's checkpoint is (vlm_critic and vlm_episode_score share one)."""
MARKER = "robot_rl_reward_latency.json"
"""Written into every checkpoint directory this script builds: what it holds, so a later run reuses it."""
REWARD_NODE_FIGURES = ("frames_paired", "frames_scored", "frames_skipped", "rewards_late", "score_ms_p99",
                       "latency_ms_p99")
"""The reward node's /diagnostics figures reported from the graph run with it (as the node counts them)."""
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "robot_rl" / "reward_latency"


# ---- figures ----------------------------------------------------------------------------------------------------

def percentiles(samples_s: list[float]) -> dict[str, float | int]:
    """p50, p99 and mean in ms (rounded to 0.01 ms) of samples in seconds; {"calls": 0} for none."""
    if not samples_s:
        return {"calls": 0}
    ms = np.asarray(samples_s, np.float64) * 1e3
    p50, p99 = np.percentile(ms, [50, 99])
    return {"calls": len(ms), "p50_ms": round(float(p50), 2), "p99_ms": round(float(p99), 2),
            "mean_ms": round(float(ms.mean()), 2)}


def ratios_to_reference(score: dict[str, dict[str, dict]], key: str = "p50_ms") -> dict[str, dict[str, float]]:
    """Each backend's `key` over the reference's at the same batch size (batch sizes both measured)."""
    reference = score.get(REFERENCE, {})
    out = {}
    for backend, by_batch in score.items():
        if backend == REFERENCE:
            continue
        out[backend] = {b: round(fig[key] / reference[b][key], 1) for b, fig in by_batch.items()
                        if key in fig and reference.get(b, {}).get(key)}
    return out


def hardware(device: str) -> dict[str, Any]:
    """The CPU's model name and core count, and the GPU's name on CUDA."""
    out: dict[str, Any] = {"cpu": cpu_model(), "cores": os.cpu_count()}
    if device.startswith("cuda"):
        import torch

        out["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return out


# ---- checkpoints ------------------------------------------------------------------------------------------------

def checkpoint_spec(backend: str, size: str) -> dict[str, str]:
    """What a backend's checkpoint directory holds (the marker's content): the progress reference is one size."""
    if backend == REFERENCE:
        return {"model": "progress_untrained", "size": "shipped"}
    return {"model": FAMILIES[backend], "size": size, "goal": GOAL}


def _build(spec: dict[str, str], path: Path) -> None:
    if spec["model"] == "progress_untrained":
        from robot_rl.rewards.progress import ProgressModel, ProgressModelConfig

        ProgressModel(ProgressModelConfig()).save(path)
        return
    from robot_rl.rewards.vlm_checkpoints import save_internvl_checkpoint, save_qwen3vl_checkpoint

    builder = save_internvl_checkpoint if spec["model"] == "internvl" else save_qwen3vl_checkpoint
    builder(path, spec["goal"], spec["size"])


def checkpoint_dir(cache: Path, backend: str, size: str, log: Callable[[str], None] = print) -> Path:
    """The backend's checkpoint under `cache`, built there (into a temporary sibling, then renamed) unless a
    directory this script built for the same spec is there already.

    Raises:
        SystemExit: the directory exists but this script did not build it, or built it for another spec.
    """
    spec = checkpoint_spec(backend, size)
    path = cache / f"{spec['model']}-{spec['size']}"
    if path.exists():
        marker = path / MARKER
        try:
            found = json.loads(marker.read_text())
        except (OSError, json.JSONDecodeError):
            raise SystemExit(f"reward_latency: {path} exists but holds no readable {MARKER} (not built by this "
                             "script); move it away or pass another --cache-dir. Nothing was changed") from None
        if found != spec:
            raise SystemExit(f"reward_latency: {marker} describes {found}, not {spec}; delete {path} to rebuild it "
                             "or pass another --cache-dir")
        return path
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    building = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=cache))
    try:
        _build(spec, building)
        (building / MARKER).write_text(json.dumps(spec))
        building.rename(path)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    log(f"reward_latency: built {path} in {time.perf_counter() - started:.1f} s")
    return path


# ---- scoring one control step -----------------------------------------------------------------------------------

def step_frames(rng: np.random.Generator, batch: int, cameras: tuple[str, ...], size: int):
    """(first, previous, current): camera -> uint8 frames; first one frame, the others `batch` each."""
    def frames(n: int) -> dict[str, np.ndarray]:
        return {c: rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8) for c in cameras}
    first = {c: f[0] for c, f in frames(1).items()}
    return first, frames(batch), frames(batch)


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def time_scoring(scorer: Any, batch: int, calls: int, warmup: int, device: str, cameras: tuple[str, ...],
                 image_size: int, seed: int = 0) -> dict[str, float | int]:
    """p50/p99/mean of `calls` timed `scorer.score` calls at `batch` (after `warmup` untimed ones); calls whose
    answers the reading refused (ValueError) are timed too and counted as `unreadable`."""
    rng = np.random.default_rng(seed)
    inputs = [step_frames(rng, batch, cameras, image_size) for _ in range(min(calls + warmup, 4))]
    samples, unreadable = [], 0
    for i in range(warmup + calls):
        first, previous, current = inputs[i % len(inputs)]
        _synchronize(device)
        started = time.perf_counter()
        try:
            scorer.score(first, previous, current, GOAL)
        except ValueError:
            unreadable += int(i >= warmup)
        _synchronize(device)
        if i >= warmup:
            samples.append(time.perf_counter() - started)
    return {**percentiles(samples), "unreadable": unreadable}


# ---- the reward node's asynchronous scoring --------------------------------------------------------------------

def stream_figures(results: list, steps: int, seconds: float, stats: dict[str, Any]) -> dict[str, Any]:
    """The stream's figures from its published results over `steps` fed steps (the first is the reference)."""
    scorable = max(steps - 1, 1)
    lag = percentiles([r.latency_s for r in results])
    return {"steps_fed": steps, "scored": len(results), "scored_share": round(len(results) / scorable, 3),
            "scored_hz": round(len(results) / seconds, 2), "batch_mean": stats["score_batch_mean"],
            "skipped": stats["frames_skipped"],
            "score_errors": stats["score_errors"], "late": sum(bool(r.late) for r in results),
            "lag_p50_ms": lag.get("p50_ms"), "lag_p99_ms": lag.get("p99_ms")}


def run_stream(loaded: Any, backend: str, model_path: Path, cameras: tuple[str, ...], image_size: int,
               control_hz: float, seconds: float, max_latency_s: float, device: str,
               max_batch: int = 1) -> dict[str, Any]:
    """Feeds one step's frames of every camera at `control_hz` for `seconds` into a `RewardStream` (the node's
    `max_batch`) whose `ScoringWorker` scores with `loaded`, then waits for the last queued step;
    `stream_figures`."""
    from robot_rl.rewards.online import RewardConfig, RewardStream, ScoringWorker

    config = RewardConfig(backend=backend, model_path=str(model_path), cameras=cameras, goal=GOAL, device=device,
                          max_latency_s=max_latency_s, max_batch=max_batch)
    stream, published, errors = RewardStream(config), [], []
    worker = ScoringWorker(stream, lambda: loaded, published.append, errors.append, poll_s=0.01).start()
    rng = np.random.default_rng(1)
    shots = [{c: rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8) for c in cameras}
             for _ in range(8)]
    steps = int(round(seconds * control_hz))
    try:
        while stream.backend is None and not errors:
            time.sleep(0.01)
        started = time.monotonic()
        for k in range(steps):
            time.sleep(max(0.0, started + k / control_hz - time.monotonic()))
            stamp = time.time_ns()
            for camera in cameras:
                stream.on_frame(camera, stamp, shots[k % len(shots)][camera])
        elapsed = time.monotonic() - started
        deadline = time.monotonic() + 120.0  # the step queued last, however slow the model
        while len(published) + stream.counters.score_errors + stream.counters.skipped < steps - 1 \
                and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        worker.stop(timeout=120.0)
    if errors:
        raise SystemExit(f"reward_latency: the scoring worker could not load {backend}: {errors[0]}")
    return stream_figures(published, steps, elapsed, stream.stats())


# ---- the actor with and without the reward node -----------------------------------------------------------------

def graph_overrides(run_dir: Path, seed: int, reward: dict[str, Any] | None) -> dict[str, Any]:
    """arm_pick_cube on the wall clock with the actor's timing log, plus the reward node scoring with
    `reward` (its backend, model_path, device) feeding the actor when given."""
    from robot_rl.ros.settings import run_length_settings

    nodes = ["arm_sim", "arm_actor", "learner"] + (["reward"] if reward else [])
    # wall-clock stamps, as a robot's (camera_rate.py's settings): act latency and the reward node's lag and late
    # flags then run from the observation's stamp on the wall clock
    overrides = {"robot_rl.nodes": nodes, "robot_rl.demos": {"episodes": 0}, "arm_sim.clock_mode": "realtime",
                 "arm_sim.stamp_clock": "wall", "arm_actor.use_sim_time": False,
                 "arm_actor.sync_updates_per_step": 0.0, "arm_actor.timing_log": str(run_dir / "timing.csv"),
                 **run_length_settings(nodes, steps=1_000_000, eval_episodes=0, seed=seed)}
    if reward:
        overrides.update({"arm_actor.reward_source": "reward_node", "arm_actor.sync_rewards": False,
                          "reward.goal": GOAL, "reward.use_sim_time": False, "reward.diagnostics_period_s": 0.5,
                          **{f"reward.{k}": v for k, v in reward.items()}})
    return overrides


def run_actor(run_dir: Path, seed: int, settle_s: float, seconds: float, reward: dict[str, Any] | None,
              start_timeout_s: float = 300.0) -> dict[str, Any]:
    """One graph run: the actor's act latency over `seconds` after `settle_s` of acting, and the reward node's
    figures (`REWARD_NODE_FIGURES`, with `reward`)."""
    from robot_rl.ros.probe import RosProbe, fresh_domain_id, start_graph

    run_dir.mkdir(parents=True)
    domain_id = fresh_domain_id()
    probe = RosProbe(domain_id, "reward_latency_probe")
    supervisor = start_graph(TASK, graph_overrides(run_dir, seed, reward), run_dir, domain_id)
    timing = run_dir / "timing.csv"
    try:
        probe.wait_for(lambda: _rows(timing) > 0, start_timeout_s, "the actor's first command")
        if reward:
            probe.wait_for(lambda: probe.value("frames_scored", "reward") >= 1, start_timeout_s,
                           "the reward node's first scored frame")
        window_start = time.time_ns() + int(settle_s * 1e9)
        probe.spin(settle_s + seconds)
        window_end = time.time_ns()
        node = {k: probe.value(k, "reward") for k in REWARD_NODE_FIGURES} if reward else {}
        exited = [n.spec.name for n, _ in supervisor.exited()]
    finally:
        codes = supervisor.stop()
        probe.close()
    if exited:
        raise SystemExit(f"reward_latency: node(s) {exited} exited during the run; logs in {run_dir / 'logs'}")
    columns = read_timing(timing)
    inside = (columns["command_wall_ns"] >= window_start) & (columns["command_wall_ns"] <= window_end)
    act = columns["act_ms"][inside]
    figures = percentiles(list(act * 1e-3))
    return {"steps": figures.pop("calls"), **{f"act_{k}": v for k, v in figures.items()},
            "reward_node": {k: None if np.isnan(v) else v for k, v in node.items()} or None,
            "exit_codes_ok": all(code == 0 for code in codes.values())}


def _rows(path: Path) -> int:
    return max(0, len(path.read_text().splitlines()) - 1) if path.is_file() else 0


def actor_latency(args: argparse.Namespace, model_path: Path, device: str, workdir: Path) -> dict[str, Any]:
    """The actor's act latency without and with the reward node, and the ratio of their p99s."""
    reward = {"backend": args.actor_backend, "model_path": str(model_path), "device": device,
              "torch_threads": args.torch_threads}
    without = run_actor(workdir / "without_reward", args.seed, args.settle_s, args.actor_s, None)
    with_reward = run_actor(workdir / "with_reward", args.seed, args.settle_s, args.actor_s, reward)
    ratio = (with_reward["act_p99_ms"] / without["act_p99_ms"]
             if without.get("act_p99_ms") and with_reward.get("act_p99_ms") else None)
    return {"backend": args.actor_backend, "window_s": args.actor_s, "without_reward": without,
            "with_reward": with_reward, "act_p99_ratio": None if ratio is None else round(ratio, 2)}


# ---- the run ----------------------------------------------------------------------------------------------------

def resolve(device: str) -> tuple[str, str]:
    """(device, dtype name) as the backends load themselves: bfloat16 on CUDA, float32 elsewhere."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"reward_latency: --device {device}: CUDA is not available here")
    return device, "bfloat16" if device.startswith("cuda") else "float32"


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from robot_rl.rewards.backends import load_backend

    import torch

    device, dtype = resolve(args.device)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    cameras = tuple(args.cameras)
    paths = {b: checkpoint_dir(args.cache_dir, b, args.size) for b in args.backends}
    score, stream = {}, {}
    for backend in args.backends:
        started = time.perf_counter()
        loaded = load_backend(backend, str(paths[backend]), device, cameras)
        load_s = time.perf_counter() - started
        score[backend] = {str(b): time_scoring(loaded.scorer, b, args.calls, args.warmup, device, cameras,
                                               args.image_size) for b in args.batches}
        stream[backend] = {"load_s": round(load_s, 1), "max_batch": {str(m): run_stream(
            loaded, backend, paths[backend], cameras, args.image_size, args.control_hz, args.stream_s,
            args.max_latency_s, device, m) for m in args.stream_max_batch}}
        print(json.dumps({"backend": backend, "score": score[backend], "stream": stream[backend]}), flush=True)
        del loaded
        gc.collect()  # a 2B model's memory back before the next one loads
    result = {"size": args.size, "device": device.split(":")[0], "dtype": dtype, "hardware": hardware(device),
              "torch_threads": torch.get_num_threads(), "image_size": args.image_size, "cameras": list(cameras),
              "goal": GOAL, "warmup": args.warmup, "score": score, "ratio_p50_to_progress": ratios_to_reference(score),
              "control_hz": args.control_hz, "stream_s": args.stream_s, "max_latency_s": args.max_latency_s,
              "stream": stream}
    if args.actor_s > 0:
        if args.actor_backend not in paths:
            paths[args.actor_backend] = checkpoint_dir(args.cache_dir, args.actor_backend, args.size)
        result["actor"] = actor_latency(args, paths[args.actor_backend], device, workdir)
    return {**result, "date": time.strftime("%Y-%m-%d"), "commit": _commit()}


def result_key(result: dict) -> str:
    return f"{result['device']}+{result['size']}"


def append_result(result: dict, path: Path = RESULTS) -> None:
    """Adds the run's row under "<device>+<size>"; the rows already there stay."""
    append_keyed_result(result, path, result_key)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, batches 1 and 4, a few calls, short "
                        "stream and graph runs (about 2 minutes on a CPU); nothing recorded")
    parser.add_argument("--size", choices=["tiny", "2b"], default="2b", help="model size (the module docstring)")
    parser.add_argument("--backends", nargs="+", choices=[REFERENCE, *FAMILIES], default=[REFERENCE, "vlac",
                        "vlm_critic"], help=f"backends measured ({REFERENCE}, the reference, is always among them)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16], help="steps scored in one call")
    parser.add_argument("--calls", type=int, default=50, help="timed calls per batch size")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls per batch size before them")
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda or cuda:N")
    parser.add_argument("--torch-threads", type=int, default=0, help="torch CPU threads for scoring, here and in "
                        "the graph's reward node (its torch_threads); 0: torch's default")
    parser.add_argument("--image-size", type=int, default=64, help="square camera frames, pixels (arm_pick_cube: 64)")
    parser.add_argument("--cameras", nargs="+", default=["front", "wrist"], help="cameras of one control step")
    parser.add_argument("--control-hz", type=float, default=10.0, help="rate the stream is fed at")
    parser.add_argument("--stream-s", type=float, default=30.0, help="seconds the stream is fed")
    parser.add_argument("--max-latency-s", type=float, default=1.0, help="the reward node's max_latency_s")
    parser.add_argument("--stream-max-batch", type=int, nargs="+", default=[1, 8], help="the reward node's "
                        "max_batch values the stream is run with, one stream each (1: only the newest step scored)")
    parser.add_argument("--actor-s", type=float, default=60.0, help="seconds of act latency measured per graph "
                        "run (0: no graph runs)")
    parser.add_argument("--settle-s", type=float, default=10.0, help="seconds of acting before that window")
    parser.add_argument("--actor-backend", choices=list(FAMILIES), default="vlac",
                        help="the reward node's backend in the graph run with it")
    parser.add_argument("--seed", type=int, default=0, help="seed of both graph runs")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE,
                        help="where the random checkpoints are built once and reused")
    parser.add_argument("--workdir", type=Path, help="keep the graph runs' files here (a new or empty folder)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the rows file a full run adds its row to "
                        "(benchmarks/gpu_run.sh: its OUT_DIR)")
    args = parser.parse_args(argv)
    if args.quick:  # the same measurements, tiny and short (shorter settings given stay)
        args.size, args.batches = "tiny", [b for b in args.batches if b <= 4] or [1]
        args.calls, args.warmup = min(args.calls, 5), min(args.warmup, 1)
        args.stream_s, args.actor_s, args.settle_s = min(args.stream_s, 3.0), min(args.actor_s, 8.0), min(
            args.settle_s, 3.0)
    if REFERENCE not in args.backends:
        args.backends.insert(0, REFERENCE)
    args.backends = list(dict.fromkeys(args.backends))
    if min(args.batches) < 1 or min(args.stream_max_batch) < 1 or args.calls < 1 or args.warmup < 0 \
            or args.image_size < 8 or args.torch_threads < 0:
        parser.error("--batches, --stream-max-batch and --calls must be >= 1, --warmup and --torch-threads >= 0, "
                     "--image-size >= 8")
    if args.control_hz <= 0 or args.stream_s <= 0 or args.max_latency_s <= 0 or args.actor_s < 0 \
            or args.settle_s < 0:
        parser.error("--control-hz, --stream-s and --max-latency-s must be > 0, --actor-s and --settle-s >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run_in_workdir("reward_latency", run, args)
    if not args.quick:
        append_result(result, args.results)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
