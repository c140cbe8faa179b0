"""One rule for everything a command writes (datasets, models, policies, run directories):

- an existing output is refused unless the user says what to do with it: `--append` (datasets,
  schema-checked), `--resume` (run directories) or `--overwrite`;
- files and directories appear whole or not at all: they are built under a temporary name beside
  the target and renamed into place, so a crash, Ctrl-C or a full disk leaves the previous version
  intact and no partial output behind;
- a full disk names the path that could not be written.

`UserError` is the one exception type a command turns into a single line on stderr and exit code 2.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

TEMP_PREFIX = ".robot_rl-tmp-"
"""Name prefix of outputs still being written (removed on failure; never read as data)."""


class UserError(Exception):
    """An expected failure caused by the user's input: the CLI prints its message as one line on
    stderr and exits with code 2 (the traceback only with --debug)."""


class OutputExistsError(UserError, FileExistsError):
    """The output already exists and the user did not say to append, resume or overwrite."""


class OutputWriteError(UserError, OSError):
    """Writing an output failed (disk full, no permission); the previous version is intact."""


OUTPUT_MARKERS: dict[str, tuple[str, ...]] = {
    "dataset": ("zarr.json", ".zgroup"),
    "LeRobot dataset": ("meta/info.json",),
    "run directory": ("params.yaml", "history.json", "eval.json", "checkpoint.pt", "ppo_checkpoint.pt", "tensorboard",
                      "INTERRUPTED", "secret.key"),
    "policy directory": ("card.json",),
    "encoder directory": ("card.json",),
    "reward model directory": ("card.json",),
    "keystore": ("enclaves", "public", "private"),
}
"""What each kind of directory output of ours holds (any one of these): `--overwrite` replaces only a directory
that holds one (or is empty), never a user's folder that happens to have the name. Outputs not listed are files."""


def _refuse_foreign(path: Path, what: str) -> None:
    """--overwrite on `path`: refused when it is not a `what` of ours (see OUTPUT_MARKERS), naming what is there."""
    markers = OUTPUT_MARKERS.get(what)
    if markers is None:
        if path.is_dir() and not path.is_symlink():
            raise UserError(f"--overwrite: {path} is a directory, not a {what}; remove it yourself or choose another "
                            "path")
        return
    if not path.is_dir():
        raise UserError(f"--overwrite: {path} is a file, not a {what}; remove it yourself or choose another path")
    if any(path.iterdir()) and not any((path / marker).exists() for marker in markers):
        found = ", ".join(sorted(child.name for child in path.iterdir())[:3])
        expected = " or ".join(markers[:3]) + (" ..." if len(markers) > 3 else "")
        raise UserError(f"--overwrite: {path} holds {found} but no {expected}, so it is not a {what} robot-rl wrote; "
                        "remove it yourself or choose another path")


def _what_exists(path: Path, what: str, allowed: tuple[str, ...]) -> str:
    options = " or ".join(f"--{flag}" for flag in allowed)
    return f"{what} {path} already exists; pass {options} (or choose another path)"


def check_output(path: str | os.PathLike, what: str, *, overwrite: bool = False, append: bool = False,
                 resume: bool = False, appendable: bool = False, resumable: bool = False) -> Path:
    """Refuses an existing `path` unless one of the user's flags allows it; returns the path.

    `appendable`/`resumable` say which of --append/--resume this command offers (they go into the
    message). Exactly one of the flags may be set."""
    path = Path(path)
    if sum((overwrite, append, resume)) > 1:
        raise UserError("choose one of --overwrite, --append and --resume")
    if append and not appendable:
        raise UserError(f"{what} cannot be appended to; use --overwrite or another path")
    if resume and not resumable:
        raise UserError(f"{what} cannot be resumed; use --overwrite or another path")
    if path.exists() or path.is_symlink():
        if not (overwrite or append or resume):
            allowed = (*(("append",) if appendable else ()), *(("resume",) if resumable else ()), "overwrite")
            raise OutputExistsError(_what_exists(path, what, allowed))
        if overwrite:
            _refuse_foreign(path, what)
        elif what in OUTPUT_MARKERS and not path.is_dir():
            raise UserError(f"--{'resume' if resume else 'append'}: {path} is a file, not a {what}")
    elif resume:
        raise UserError(f"--resume: {what} {path} does not exist")
    return path


USER_ERRNOS = {errno.EROFS: "read-only file system", errno.ENOSPC: "no space left on the device",
               errno.EDQUOT: "disk quota exceeded", errno.EACCES: "permission denied",
               errno.EPERM: "operation not permitted", errno.EEXIST: "a file of that name is in the way",
               errno.ENOTDIR: "a part of the path is a file, not a directory", errno.EISDIR: "is a directory",
               errno.ENOENT: "no such file or directory", errno.ENAMETOOLONG: "the name is too long"}
"""OS errors that the user's paths and disks cause (and can fix), by errno, with the words that say so."""
PATH_ERRORS = (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError)


def expected_failure(exc: BaseException) -> str | None:
    """The one line a command (or a node starting) prints for a failure the user caused and can fix: a refused
    input (UserError, ValueError: a value, a setting, a corrupt file named in the message), a malformed YAML file,
    or a path or disk the OS refused. None for anything else, which is a bug and keeps its traceback. The one
    decision of what is the user's to fix, shared by the `robot-rl` command and every node's start."""
    import yaml

    if isinstance(exc, OSError) and not isinstance(exc, UserError):
        # raised with an errno by the OS, or without one by our code (FileNotFoundError("no dataset at ..."))
        if exc.errno not in USER_ERRNOS and not (exc.errno is None and isinstance(exc, PATH_ERRORS)):
            return None
        text = " ".join(str(exc).split()) if exc.errno is None else USER_ERRNOS[exc.errno]
        filename = exc.filename
        if filename is not None and exc.filename2 is not None:
            filename = f"{filename} -> {exc.filename2}"
        return f"{filename}: {text}" if filename is not None and str(filename) not in text else text
    if isinstance(exc, (UserError, ValueError, yaml.YAMLError)):
        return " ".join(str(exc).split()) or type(exc).__name__
    return None


def _write_error(path: Path, exc: OSError) -> OutputWriteError:
    reason = USER_ERRNOS[errno.ENOSPC] if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
    return OutputWriteError(f"could not write {path}: {reason}; the previous version (if any) is unchanged")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, directory: bool = False) -> Iterator[Path]:
    """Yields a temporary sibling of `path` to write (a file, or with `directory` an empty
    directory to fill); on success it replaces `path` in one rename, on any error it is removed and
    `path` is left as it was. A directory that replaces an existing one is swapped in by renaming
    the old one aside first (two renames: a crash between them leaves the old one under a
    `.robot_rl-tmp-` name, never a mixture)."""
    path = Path(path)
    parent = path.parent
    # the outermost folder made for it: removed again, with those inside it, when writing fails
    made = next((p for p in reversed([parent, *parent.parents]) if not p.exists()), None)
    try:
        parent.mkdir(parents=True, exist_ok=True)
        if directory:
            tmp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{path.name}-", dir=parent))
        else:
            fd, name = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name}-", dir=parent)
            os.close(fd)
            tmp = Path(name)
    except OSError as exc:
        raise _write_error(path, exc) from exc
    try:
        yield tmp
        if directory:
            if path.exists():
                old = parent / f"{TEMP_PREFIX}{path.name}-old-{os.getpid()}"
                os.replace(path, old)
                os.replace(tmp, path)
                _remove(old)
            else:
                os.replace(tmp, path)
        else:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        _remove_made(made, parent)
        raise _write_error(path, exc) from exc
    except BaseException:
        _remove(tmp)
        _remove_made(made, parent)
        raise


def _remove_made(made: Path | None, parent: Path) -> None:
    """Removes the empty folders from `parent` up to `made` (those `atomic_path` created): a failed write leaves no
    trace. A folder something else wrote into meanwhile stays."""
    if made is None:
        return
    folder = parent
    while True:
        try:
            folder.rmdir()
        except OSError:
            return
        if folder == made:
            return
        folder = folder.parent


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Writes `data` to `path` atomically (temporary file + fsync + rename)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))
