"""An actor's transition batches packed on a thread of their own (`BatchPacker`), so that a control loop at a
camera's rate never holds its next observation behind a batch: stacking, signing and writing 50 steps of two
cameras' frames (2.5 MB, fsynced to the outbox) took 10-70 ms on a loaded 2-core machine, up to two 30 Hz periods.
The thread spends most of that time outside the GIL (HMAC, write, fsync), so the control loop runs meanwhile.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, TypeVar

import numpy as np

from robot_rl.tasks import TaskSpec
from robot_rl.training.actor_progress import save_progress
from robot_rl.transport import codec
from robot_rl.transport.kinds import TRANSITIONS
from robot_rl.transport.layout import TRANSITION_FIELDS, stack_transitions
from robot_rl.transport.outbox import Outbox

Job = TypeVar("Job")

RETRY_S = 1.0
"""Seconds between tries of a batch whose packing failed (a full disk, say): it is kept, never dropped."""


@dataclass
class PendingTransitions:
    """What an actor recorded since its last batch."""
    fields: dict[str, list] = field(default_factory=lambda: {k: [] for k in TRANSITION_FIELDS})
    """Per-step values of each transition field (frame fields are added for pixel tasks)."""
    episodes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class TakenBatch:
    """Transitions taken from the pending ones, to be packed: with learned rewards, each row's observation stamp
    and whether its reward is late; `meta` is the payload's (its sequence number and progress counters)."""
    pending: PendingTransitions
    stamps: np.ndarray | None
    reward_late: np.ndarray | None
    meta: dict[str, Any]


def pack_batch(batch: TakenBatch, task: TaskSpec, outbox: Outbox, key: bytes | None,
               progress_path: str | os.PathLike | None) -> None:
    """Encodes and signs a taken batch, puts it into the outbox, then saves the progress counters it carries (a
    restarted actor continues from them: actor_progress.py)."""
    arrays = stack_transitions(batch.pending.fields, task.obs_dim, task.action_dim, task.frame_shapes)
    if batch.stamps is not None:
        arrays["stamp"], arrays["reward_late"] = batch.stamps, batch.reward_late
    outbox.put(batch.meta["seq"], codec.encode(TRANSITIONS, arrays, batch.meta, key=key))
    if progress_path is not None:
        save_progress(progress_path, batch.meta["progress"])


class BatchPacker(Generic[Job]):
    """Runs `pack(job)` for each submitted job on one thread, in the order submitted, then `on_packed()` (the
    link sends what is new). A job whose packing raises is tried again every RETRY_S seconds, before any later
    one, so order holds and nothing is lost; `error` names the failure until a try succeeds."""

    def __init__(self, pack: Callable[[Job], None], name: str = "batch-packer"):
        self._pack = pack
        self.on_packed: Callable[[], None] | None = None
        """Called on the packing thread after each packed batch (set by the actor's link to the learner)."""
        self.error: str | None = None
        """The last packing failure, while its batch is still waiting; None when all went well."""
        self.failures = 0
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._in_flight = 0
        self._idle = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def in_flight(self) -> int:
        """Jobs submitted and not yet packed."""
        with self._idle:
            return self._in_flight

    def submit(self, job: Job) -> None:
        with self._idle:
            self._in_flight += 1
        self._jobs.put(job)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Blocks until every submitted job is packed (or `timeout_s` passed); True if none is left."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout_s)

    def close(self, timeout_s: float = 30.0) -> bool:
        """Packs what was submitted (a stopping actor keeps its last batches on disk) and ends the thread.
        True if everything was packed within `timeout_s`."""
        done = self.wait(timeout_s)
        self._stopping.set()
        self._jobs.put(None)
        self._thread.join(timeout=5.0)
        return done

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            while not self._pack_once(job):
                if self._stopping.wait(RETRY_S):
                    return
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()
            if self.on_packed is not None:
                try:
                    self.on_packed()
                except Exception:  # noqa: BLE001 - e.g. a node shutting down; the link's send timer sends it
                    pass

    def _pack_once(self, job: Job) -> bool:
        try:
            self._pack(job)
        except Exception as exc:  # noqa: BLE001 - the batch is kept and tried again; the owner shows `error`
            self.failures += 1
            self.error = f"{type(exc).__name__}: {exc} (at {time.strftime('%H:%M:%S')}, trying again)"
            return False
        self.error = None
        return True
