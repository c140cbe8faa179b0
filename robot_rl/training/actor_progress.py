"""Where a restarted actor (crash, SIGKILL, `--resume`) continues from: its step, episode and
sent counters, as of the last transition batch it put into its outbox.

Two records hold them: the progress file, rewritten atomically after each batch, and the batch
itself, which carries the counters after it (`meta["progress"]`). The batch is the commit point:
a kill between writing it to the outbox and rewriting the file would otherwise leave a restart
taking those steps again while the outbox still sends them (transitions stored twice). A restart
takes whichever of the two has more payloads sent. (Acks are handled under the actor's lock, so
a batch is never acknowledged and deleted between the two writes; when an older batch is the
newest left, the file is ahead of it and wins.)
"""

from __future__ import annotations

import json
from pathlib import Path

from robot_rl.outputs import atomic_write_text
from robot_rl.transport import codec
from robot_rl.transport.kinds import TRANSITIONS
from robot_rl.transport.outbox import Outbox

PROGRESS_COUNTERS = ("train_steps", "episode_index", "transitions_sent", "payloads_sent")
"""What a restarted actor continues from."""


def committed_progress(progress_path: Path, outbox: Outbox, key: bytes | None) -> dict[str, int] | None:
    """The newer of the progress file and the newest unacknowledged batch's counters; None for a
    fresh actor. Raises ValueError if that batch cannot be read (what was sent is then unknown)."""
    saved = json.loads(progress_path.read_text()) if progress_path.exists() else None
    newest = outbox.newest()
    if newest is not None:
        seq, payload = newest
        try:
            committed = codec.decode(payload, expect_kind=TRANSITIONS, key=key).meta.get("progress")
        except codec.PayloadError as exc:
            raise ValueError(f"actor outbox {outbox.spill_dir}: its newest payload {outbox.spill_path(seq)} is "
                             f"unreadable ({exc}), so the actor cannot tell what it already sent; move that file "
                             "aside to continue without its transitions") from exc
        if committed is not None and (saved is None or committed["payloads_sent"] > saved["payloads_sent"]):
            saved = committed
    return None if saved is None else {name: int(saved[name]) for name in PROGRESS_COUNTERS}


def save_progress(progress_path: Path, counters: dict[str, int]) -> None:
    atomic_write_text(progress_path, json.dumps(counters))
