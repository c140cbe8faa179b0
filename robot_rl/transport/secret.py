"""The per-run secret that keys the codec's HMAC (`<run_dir>/secret.key`, 32 random bytes, mode 0600).

The learner stores only transition batches signed with it, so a participant that joins the domain
cannot feed it data, and a payload from another run (another key) fails the check. Every node with a
run directory creates the secret there if it is missing (atomically, so nodes sharing the directory
agree whichever starts first); an actor on another machine is given a copy of the learner's file
with its `key_file` parameter, which must then exist.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Mapping

from robot_rl.outputs import TEMP_PREFIX, UserError

SECRET_FILE = "secret.key"
SECRET_BYTES = 32


def ensure_run_secret(run_dir: str | os.PathLike) -> bytes:
    """The run's secret, created in `run_dir` if it is not there yet (a resumed run keeps its own)."""
    path = Path(run_dir) / SECRET_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{TEMP_PREFIX}{SECRET_FILE}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(SECRET_BYTES))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # fails if another node created it meanwhile: theirs is kept
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return read_secret(path)


def read_secret(path: str | os.PathLike) -> bytes:
    path = Path(path)
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"key file {path} does not exist: copy the learner's <run_dir>/{SECRET_FILE} here") from None
    if len(key) != SECRET_BYTES:
        raise UserError(f"key file {path} holds {len(key)} bytes, not the {SECRET_BYTES} of a run secret")
    return key


def run_key(params: Mapping[str, Any]) -> bytes:
    """An actor node's key: its `key_file` parameter when set (the file must exist), else the
    secret in its `run_dir`."""
    return read_secret(params["key_file"]) if params["key_file"] else ensure_run_secret(params["run_dir"])
