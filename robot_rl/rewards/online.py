"""Scoring a live camera stream with a progress backend: everything the reward node does, without ROS.

The reward node (`robot_rl.nodes.reward`) is a thin wrapper around `RewardStream`:

* `robot_rl.ros.reward_io.feed_image` turns each image message into a stamped uint8 (H, W, 3) frame
  for `RewardStream.on_frame` (or its rejection for `RewardStream.on_rejected`); frames the model
  cannot read (`robot_rl.rewards.scorer_input.check_frame_shape`) are refused too, each counted by reason.
* `StampPairer` pairs the cameras' frames by stamp (equal within a tolerance); frames that
  never find partners are dropped and counted.
* `RewardStream` keeps the episodes: the first paired frame after a new episode starts (a
  ``reset`` / ``rerecord`` teleop event, a stamped episode start, or a new goal) is the
  episode's first frame; of the paired frames after it, every `frame_skip`-th is handed to
  `PendingSteps`, a hand-off holding at most `max_batch` steps (a newer step pushes out the oldest the
  worker has not taken yet, counted as skipped), so the caller (a subscription callback) never waits
  for the model.
* The worker (`ScoringWorker`, a thread) takes every waiting step (oldest first) and scores them in
  one batched call, each against the episode's first frame and the step before it, the first against
  the frame scored last (VLAC's skip when steps were pushed out; with `max_batch` 1 only the newest
  step is ever scored); a step the model's answer could not be read for is counted as a score error
  and the step after it is scored again, alone, against the last one read. It accumulates the value
  (``v <- v + (1 - v) c``, `robot_rl.rewards.progress.accumulate_value`) step by step, counts
  consecutive done frames and returns a `RewardResult` per step stamped with its observation's stamp,
  flagged late when it is ready more than `max_latency_s` after that stamp. A batch never spans two
  episodes.

The models it scores with are loaded by `robot_rl.rewards.backends`.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from robot_rl.config_fields import setting
from robot_rl.device import check_device_name
from robot_rl.rewards.backends import BACKENDS, LoadedBackend, backend_names
from robot_rl.rewards.scorer_input import FrameRejected, StampPairer, UnreadableScores, check_frame_shape

__all__ = ["PendingSteps", "RewardConfig", "RewardResult", "RewardStream", "ScoringWorker"]

NS_PER_S = 1_000_000_000
_CAMERA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*$")
_WORDS = re.compile(r"[A-Za-z0-9]")


# ---- configuration --------------------------------------------------------------------------

@dataclass
class RewardConfig:
    """The reward node's parameters, validated (ValueError names the bad one). The model path is
    checked by `check_model_path` (and again by `load_backend`), not here."""

    backend: str = setting("progress", "Reward model: progress (the local progress model), success (a success "
                           "classifier as a sparse reward), vlac (a VLAC/InternVL checkpoint), vlm_critic or "
                           "vlm_episode_score (a Qwen-VL checkpoint).", choices=backend_names())
    model_path: str = setting("", "Directory of the backend's model (required). Progress: `robot-rl reward train "
                              "--demos <dataset> --out <dir>` makes one.")
    cameras: tuple[str, ...] = setting(("front", "wrist"), "Cameras to score: <cam>/color/image_raw each; must "
                                       "include the model's cameras.")
    goal: str = setting("", "Goal sentence until one arrives on task/goal; empty: none (frames are not scored).")
    frame_skip: int = setting(1, "Score every N-th paired frame, against the frame scored last.", low=1, high=10_000)
    max_batch: int = setting(1, "Steps the worker scores in one batched call: every waiting step up to this many "
                             "(the oldest pushed out beyond it). 1: only the newest (VLAC's skip). More scores every "
                             "step when a batch is fast enough (a VLM critic on a GPU: BENCHMARKS.md).",
                             low=1, high=256)
    reward_scale: float = setting(1.0, "reward = reward_scale * progress delta.", low=1e-6, high=1e6)
    done_threshold: float = setting(0.0, "Done probability counting as done; 0: the model's own, else in (0, 1).",
                                    low=0.0, high=1.0)
    done_consecutive: int = setting(1, "Scored frames in a row at or above the done threshold before reward/done.",
                                    low=1, high=10_000)
    max_latency_s: float = setting(1.0, "Rewards published later than this after their observation's stamp are "
                                   "flagged late (header.frame_id 'late').", low=1e-4, high=3600.0)
    device: str = setting("auto", "Torch device: auto (cuda when available, else cpu), cpu, cuda, cuda:N or mps.")
    stamp_tolerance_s: float = setting(0.001, "Largest stamp difference of frames paired across cameras.",
                                       low=0.0, high=1.0)

    def __post_init__(self) -> None:
        self.cameras = tuple(self.cameras)
        self.goal = self.goal.strip()
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r} is not one of {backend_names()}")
        if not self.cameras:
            raise ValueError("cameras must name at least one camera")
        for camera in self.cameras:
            if not isinstance(camera, str) or not _CAMERA_NAME.match(camera):
                raise ValueError(f"camera name {camera!r} is not a valid topic prefix (letters, digits, _ and /)")
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"cameras {list(self.cameras)} name a camera twice")
        if self.goal and not _WORDS.search(self.goal):
            raise ValueError(f"goal {self.goal!r} has no words")
        _check_count("frame_skip", self.frame_skip)
        _check_count("max_batch", self.max_batch, high=256)
        if not (math.isfinite(self.reward_scale) and self.reward_scale > 0):
            raise ValueError(f"reward_scale must be > 0, got {self.reward_scale}")
        if not (self.done_threshold == 0.0 or 0.0 < self.done_threshold < 1.0):
            raise ValueError(f"done_threshold must be 0 (the model's own) or in (0, 1), got {self.done_threshold}")
        _check_count("done_consecutive", self.done_consecutive)
        if not (math.isfinite(self.max_latency_s) and self.max_latency_s > 0):
            raise ValueError(f"max_latency_s must be > 0, got {self.max_latency_s}")
        if not (math.isfinite(self.stamp_tolerance_s) and self.stamp_tolerance_s >= 0):
            raise ValueError(f"stamp_tolerance_s must be >= 0, got {self.stamp_tolerance_s}")
        check_device_name(self.device)


def _check_count(name: str, value: Any, high: int | None = None) -> None:
    """Refuses a count setting that is not an integer >= 1 (and <= `high`), naming it."""
    if isinstance(value, bool) or int(value) != value or value < 1 or (high is not None and value > high):
        raise ValueError(f"{name} must be an integer " + (f"in [1, {high}]" if high else ">= 1") + f", got {value}")


class PendingSteps:
    """A bounded hand-off between threads: `put` appends, pushing out the oldest item not yet taken
    when `capacity` are waiting (and says so); `take` empties it. Capacity 1 keeps only the newest."""

    def __init__(self, capacity: int = 1):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._cond = threading.Condition()
        self._items: deque[Any] = deque(maxlen=capacity)
        self._closed = False

    def put(self, item: Any) -> bool:
        """Stores `item`; True when it pushed out one that was never taken."""
        with self._cond:
            pushed_out = len(self._items) == self._items.maxlen
            self._items.append(item)
            self._cond.notify()
            return pushed_out

    def take(self, timeout: float | None = None) -> list[Any]:
        """Every waiting item, oldest first (emptying it), or [] after `timeout` seconds or once closed."""
        with self._cond:
            if not self._items and not self._closed:
                self._cond.wait(timeout)
            items = list(self._items)
            self._items.clear()
            return items

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


# ---- episodes and scoring -------------------------------------------------------------------

@dataclass
class RewardResult:
    """One scored observation: what the node publishes on `reward` (and `reward/done`)."""

    stamp_ns: int
    """Stamp of the scored observation."""
    reward: float
    """reward_scale * progress_delta."""
    progress_delta: float
    value: float
    """The episode's accumulated value after this observation."""
    done_probability: float
    late: bool
    """Ready more than max_latency_s after the observation's stamp (by the clock given)."""
    latency_s: float
    """Observation stamp to result, by the clock given."""
    score_s: float
    """Time the scorer took for the batch that held this observation."""
    done: bool
    """This observation completed done_consecutive done frames: the episode's one done signal."""
    episode: int


@dataclass
class _Episode:
    index: int
    goal: str
    first: dict[str, np.ndarray] | None = None
    first_stamp: int | None = None
    paired: int = 0
    previous: dict[str, np.ndarray] | None = None
    value: float = 0.0
    consecutive: int = 0
    done_sent: bool = False
    scored: int = 0


@dataclass
class _Job:
    episode: _Episode
    stamp_ns: int
    frames: dict[str, np.ndarray]


def _stacked(steps: list[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {c: np.stack([step[c] for step in steps]) for c in steps[0]}


@dataclass
class _Counters:
    received: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    paired: int = 0
    without_goal: int = 0
    before_model: int = 0
    first_frames: int = 0
    frame_skip: int = 0
    skipped: int = 0
    scored: int = 0
    score_calls: int = 0
    score_errors: int = 0
    late: int = 0
    dones: int = 0
    episodes: int = 0


class RewardStream:
    """Episode bookkeeping, frame pairing and scoring of a live stream (see the module docstring).

    Thread-safe: the subscription side calls `on_frame` / `on_frames`, `set_goal` and
    `new_episode`; the worker side calls `run_once` (or `score_jobs`). `now_ns` is the clock rewards
    are judged late by (the node's clock)."""

    def __init__(self, config: RewardConfig, now_ns: Callable[[], int] = time.time_ns,
                 backend: LoadedBackend | None = None, stats_window: int = 1000):
        self.config = config
        self.now_ns = now_ns
        self.backend: LoadedBackend | None = None
        self.load_error = ""
        self.pairer = StampPairer(config.cameras, int(round(config.stamp_tolerance_s * NS_PER_S)))
        self.slot = PendingSteps(config.max_batch)
        self.counters = _Counters()
        self.last_rejection = ""
        self.last_score_error = ""
        self._lock = threading.Lock()
        self._episode_index = 0
        self.goal: str | None = config.goal or None
        self._episode = _Episode(0, self.goal or "")
        self._start_stamp: int | None = None  # a new episode waiting for its first frame (stamped start)
        self._score_s: deque[float] = deque(maxlen=stats_window)
        self._latency_s: deque[float] = deque(maxlen=stats_window)
        if backend is not None:
            self.attach(backend)

    # -- setup ---------------------------------------------------------------------------------

    def attach(self, backend: LoadedBackend) -> None:
        """Starts scoring with a loaded backend."""
        with self._lock:
            self.backend = backend

    @property
    def done_threshold(self) -> float | None:
        if self.config.done_threshold > 0:
            return self.config.done_threshold
        return None if self.backend is None else self.backend.done_threshold

    @property
    def needs_goal(self) -> bool:
        return self.backend is None or self.backend.needs_goal

    # -- subscription side ---------------------------------------------------------------------

    def set_goal(self, goal: str) -> bool:
        """A new goal sentence; a different one starts a new episode. Returns whether it changed.

        Raises:
            ValueError: the goal has no words.
        """
        if not isinstance(goal, str) or not _WORDS.search(goal):
            raise ValueError(f"goal {goal!r} has no words")
        goal = goal.strip()
        with self._lock:
            if goal == self.goal:
                return False
            self.goal = goal
            self._new_episode_locked()
            return True

    def new_episode(self, start_stamp_ns: int | None = None) -> int | None:
        """Starts a new episode: the next paired frame is its first; returns the episode index.
        With `start_stamp_ns` (a stamped start) the new episode begins with the first paired frame
        stamped at or after it, so frames of the previous episode still in flight are scored in that
        one; nothing changes if the episode in progress already began at or after it (a start
        announced twice, before and after a reset). Returns None for a stamped start."""
        with self._lock:
            if start_stamp_ns is None:
                self._start_stamp = None
                return self._new_episode_locked()
            first = self._episode.first_stamp
            self._start_stamp = None if first is not None and first >= start_stamp_ns else int(start_stamp_ns)
            return None

    def _new_episode_locked(self) -> int:
        self._episode_index += 1
        self._episode = _Episode(self._episode_index, self.goal or "")
        self.counters.episodes += 1
        return self._episode_index

    def reject(self, reason: str, detail: str) -> None:
        with self._lock:
            self.counters.rejected[reason] = self.counters.rejected.get(reason, 0) + 1
            self.last_rejection = f"{reason}: {detail}"

    def on_frame(self, camera: str, stamp_ns: int, frame: np.ndarray) -> str:
        """A decoded (H, W, 3) frame of `camera`: checked against the model's input, paired and (when
        a set completes) handed on. Returns what became of it: rejected:<reason>, waiting (for its
        partners), or the status of `on_frames`."""
        with self._lock:
            self.counters.received += 1
        backend = self.backend
        # size rules only for the cameras the model reads
        if backend is not None and (backend.cameras is None or camera in backend.cameras):
            try:
                check_frame_shape(frame, backend.square, backend.image_size)
            except FrameRejected as exc:
                return self._refuse(camera, exc)
        with self._lock:
            paired = self.pairer.add(camera, stamp_ns, frame)
        if paired is None:
            return "waiting"
        return self.on_frames(*paired)

    def on_rejected(self, camera: str, rejection: FrameRejected) -> str:
        """A frame of `camera` that could not be decoded: counted as received and rejected."""
        with self._lock:
            self.counters.received += 1
        return self._refuse(camera, rejection)

    def _refuse(self, camera: str, rejection: FrameRejected) -> str:
        self.reject(rejection.reason, f"{camera}: {rejection.detail}")
        return f"rejected:{rejection.reason}"

    def on_frames(self, stamp_ns: int, frames: dict[str, np.ndarray]) -> str:
        """A paired set of frames: returns "before_model", "no_goal", "first" (the episode's first
        frame), "frame_skip", "queued" or "replaced" (queued, pushing out one the worker never took)."""
        with self._lock:
            c = self.counters
            c.paired += 1
            if self.backend is None:
                c.before_model += 1
                return "before_model"
            if self.backend.needs_goal and not self.goal:
                c.without_goal += 1
                return "no_goal"
            if self._start_stamp is not None and stamp_ns >= self._start_stamp:
                self._start_stamp = None
                self._new_episode_locked()
            episode = self._episode
            if episode.first is None:
                episode.first, episode.first_stamp = frames, stamp_ns
                c.first_frames += 1
                return "first"
            episode.paired += 1
            if episode.paired % self.config.frame_skip:
                c.frame_skip += 1
                return "frame_skip"
            replaced = self.slot.put(_Job(episode, stamp_ns, frames))
            c.skipped += int(replaced)
            return "replaced" if replaced else "queued"

    # -- worker side ---------------------------------------------------------------------------

    def run_once(self, timeout: float | None = 0.0) -> list[RewardResult]:
        """Scores the steps waiting (waiting up to `timeout` s for one): one batched call per episode
        among them, results in stamp order; a call that failed yields none for its steps."""
        jobs = self.slot.take(timeout)
        results: list[RewardResult] = []
        while jobs:
            same = next((i for i, job in enumerate(jobs) if job.episode is not jobs[0].episode), len(jobs))
            results += self.score_jobs(jobs[:same])
            jobs = jobs[same:]
        return results

    def score_jobs(self, jobs: list[_Job]) -> list[RewardResult]:
        """Scores consecutive steps of one episode in one call: each against the step before it, the
        first against the frame scored last (or the episode's first frame). A row the scorer could not
        read is a score error; the row after it, read against that unread step, is scored again alone
        against the last one read, and the rows after it keep the batch's readings. So the value's chain
        of deltas never skips a step it counts, and an unreadable answer costs one single-step call. A
        call that fails as a whole (an exception other than `UnreadableScores`) loses its steps."""
        results: list[RewardResult] = []
        ahead: tuple[np.ndarray, np.ndarray, float, str] | None = None  # readings of jobs[1:], against jobs[0]
        while jobs:
            call = jobs if ahead is None else jobs[:1]
            read = self._read(call)
            if read is None:  # its steps are counted as errors
                if ahead is None:
                    return results
                jobs = jobs[1:]  # the next step was read against the lost one: again, alone
                ahead = (ahead[0][1:], ahead[1][1:], ahead[2], ahead[3]) if len(jobs) > 1 else None
                continue
            delta, done, score_s, error = read
            score_s = np.full(len(call), score_s)
            if ahead is not None:
                delta, done = np.r_[delta, ahead[0]], np.r_[done, ahead[1]]
                score_s = np.r_[score_s, np.full(len(ahead[0]), ahead[2])]
                error = error or ahead[3]
            readable = np.isfinite(delta) & np.isfinite(done)
            n_read = len(jobs) if readable.all() else int(np.argmin(readable))
            results += self._accept(jobs[:n_read], delta, done, score_s)
            if n_read == len(jobs):
                break
            self._count_errors(1, error or f"ValueError: non-finite score (delta {delta[n_read]}, done "
                                             f"{done[n_read]})")
            jobs = jobs[n_read + 1:]
            rest = slice(n_read + 2, None)
            ahead = (delta[rest], done[rest], float(score_s[-1]), error) if len(jobs) > 1 else None
        return results

    def _read(self, jobs: list[_Job]) -> tuple[np.ndarray, np.ndarray, float, str] | None:
        """(delta, done, seconds, error) of one scorer call on `jobs`, NaN in rows it could not read; None
        (its steps counted as errors) when the call failed as a whole."""
        episode = jobs[0].episode
        previous = episode.previous if episode.previous is not None else episode.first
        started = time.perf_counter()
        error = ""
        try:
            try:
                delta, done = self.backend.scorer.score({c: f[None] for c, f in episode.first.items()},
                                                        _stacked([previous] + [job.frames for job in jobs[:-1]]),
                                                        _stacked([job.frames for job in jobs]), episode.goal)
            except UnreadableScores as exc:
                delta, done, error = exc.delta, exc.done, f"{type(exc).__name__}: {exc}"
            delta = np.asarray(delta, np.float64).reshape(-1)
            done = np.asarray(done, np.float64).reshape(-1)
            if len(delta) != len(jobs) or len(done) != len(jobs):
                raise ValueError(f"{len(delta)} deltas and {len(done)} done readings for {len(jobs)} steps")
        except Exception as exc:  # noqa: BLE001 - a bad frame or model hiccup must not end the worker
            self._count_errors(len(jobs), f"{type(exc).__name__}: {exc}")
            return None
        seconds = time.perf_counter() - started
        with self._lock:
            self.counters.score_calls += 1
            self._score_s.append(seconds)
        return delta, done, seconds, error

    def _accept(self, jobs: list[_Job], delta: np.ndarray, done: np.ndarray,
                score_s: np.ndarray) -> list[RewardResult]:
        """The results of read steps, in order: the episode's value, done count and previous frame move on."""
        if not jobs:
            return []
        episode, config, threshold = jobs[0].episode, self.config, self.done_threshold
        results = []
        for job, step_delta, step_done, seconds in zip(jobs, np.clip(delta, -1.0, 1.0), np.clip(done, 0.0, 1.0),
                                                       score_s):
            step_delta, step_done = float(step_delta), float(step_done)
            episode.previous = job.frames
            episode.value = episode.value + (1.0 - episode.value) * step_delta
            episode.scored += 1
            episode.consecutive = episode.consecutive + 1 if step_done >= threshold else 0
            done_now = episode.consecutive >= config.done_consecutive and not episode.done_sent
            episode.done_sent |= done_now
            latency_s = (self.now_ns() - job.stamp_ns) / NS_PER_S
            results.append(RewardResult(job.stamp_ns, config.reward_scale * step_delta, step_delta, episode.value,
                                        step_done, latency_s > config.max_latency_s, latency_s, float(seconds),
                                        done_now, episode.index))
        with self._lock:
            c = self.counters
            c.scored += len(results)
            c.late += sum(r.late for r in results)
            c.dones += sum(r.done for r in results)
            self._latency_s.extend(r.latency_s for r in results)
        return results

    def _count_errors(self, steps: int, message: str) -> None:
        with self._lock:
            self.counters.score_errors += steps
            self.last_score_error = message

    # -- reporting -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters and latency figures for /diagnostics."""
        with self._lock:
            c = self.counters
            score_ms = np.asarray(self._score_s) * 1e3
            latency_ms = np.asarray(self._latency_s) * 1e3
            episode = self._episode
            out = {
                "goal": self.goal or "",
                "frames_received": c.received,
                "frames_rejected": sum(c.rejected.values()),
                **{f"frames_rejected_{reason}": n for reason, n in sorted(c.rejected.items())},
                "frames_unmatched": self.pairer.dropped,
                "frames_paired": c.paired,
                "frames_before_model": c.before_model,
                "frames_without_goal": c.without_goal,
                "frames_first": c.first_frames,
                "frames_skipped_frame_skip": c.frame_skip,
                "frames_skipped": c.skipped,
                "frames_scored": c.scored,
                "score_batch_mean": round(c.scored / c.score_calls, 3) if c.score_calls else 0.0,
                "score_errors": c.score_errors,
                "rewards_late": c.late,
                "dones": c.dones,
                "episode": episode.index,
                "episode_scored": episode.scored,
                "value": round(episode.value, 4),
                "score_ms_mean": round(float(score_ms.mean()), 3) if score_ms.size else 0.0,
                "score_ms_p99": round(float(np.percentile(score_ms, 99)), 3) if score_ms.size else 0.0,
                "latency_ms_mean": round(float(latency_ms.mean()), 3) if latency_ms.size else 0.0,
                "latency_ms_p99": round(float(np.percentile(latency_ms, 99)), 3) if latency_ms.size else 0.0,
                "last_rejection": self.last_rejection,
                "last_score_error": self.last_score_error,
            }
        threshold = self.done_threshold
        out["done_threshold"] = "" if threshold is None else threshold
        return out


class ScoringWorker:
    """The scoring thread: loads the backend (`load()`), attaches it to the stream, then scores
    whatever the stream hands over and calls `publish(result)`. A load failure is kept in
    `stream.load_error` and ends the thread; `on_error(message)` hears about it."""

    def __init__(self, stream: RewardStream, load: Callable[[], LoadedBackend],
                 publish: Callable[[RewardResult], None], on_error: Callable[[str], None] | None = None,
                 poll_s: float = 0.1):
        self.stream = stream
        self._load = load
        self._publish = publish
        self._on_error = on_error
        self._poll_s = poll_s
        self._stop = threading.Event()
        self.publish_errors = 0
        self.last_publish_error = ""
        self.thread = threading.Thread(target=self._run, name="reward-scoring", daemon=True)

    def start(self) -> ScoringWorker:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            backend = self._load()
        except Exception as exc:  # noqa: BLE001 - reported, the node exits
            self.stream.load_error = str(exc) or type(exc).__name__
            if self._on_error is not None:
                self._on_error(self.stream.load_error)
            return
        self.stream.attach(backend)
        while not self._stop.is_set():
            for result in self.stream.run_once(self._poll_s):
                if self._stop.is_set():
                    break
                try:
                    self._publish(result)
                except Exception as exc:  # noqa: BLE001 - e.g. the context is shutting down
                    self.publish_errors += 1
                    self.last_publish_error = f"{type(exc).__name__}: {exc}"

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.stream.slot.close()
        if self.thread.is_alive():
            self.thread.join(timeout)
