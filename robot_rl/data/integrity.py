"""Chunk integrity of zarr datasets: checksums, a manifest of expected chunks, and errors that name them.

zarr reads a missing chunk back as its fill value (a deleted camera chunk trains on black frames)
and a damaged one as a bare codec error. So every array a writer creates checksums each chunk
(zarr's crc32c codec after zstd) and writes every chunk, zeros too; and the dataset's root
attributes carry a manifest, `chunk_manifest`: the rows of every array that are committed (for
transition datasets also where episodes end). The chunks holding those rows must all be on disk
and decode. Writers update the manifest in the same attribute write that commits new rows.

`ChunkGuard` enforces this for one opened dataset: `require_present` lists the store (cheap: no
chunk is read), `read` turns a decoding failure into a `DatasetCorruptError` naming the dataset,
array, chunk, rows and episodes, and `verify` decodes every chunk. Datasets written before
checksums (no manifest) still load: a damaged chunk is still named, but a missing one cannot be
told from one never written, so `robot_rl.data.verify` reports them as unverifiable.
"""

from __future__ import annotations

import itertools
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from robot_rl.outputs import UserError

MANIFEST_ATTR = "chunk_manifest"
CHECKSUM = "crc32c"


class DatasetCorruptError(UserError, ValueError):
    """A chunk a dataset needs is missing or does not decode (its checksum fails)."""


def array_options() -> dict[str, Any]:
    """`create_array` options of every new dataset array: checksummed chunks, all of them written."""
    return {"compressors": (ZstdCodec(), Crc32cCodec()), "config": {"write_empty_chunks": True}}


def writable(array: zarr.Array) -> zarr.Array:
    """`array` writing every chunk, zeros too (zarr skips chunks equal to the fill value by default,
    and a skipped chunk is indistinguishable from a lost one)."""
    return array.with_config({"write_empty_chunks": True})


def manifest(rows: Mapping[str, int], episode_ends: Sequence[int] | None = None) -> dict[str, Any]:
    """The `chunk_manifest` attribute: committed rows per array (and, where the arrays do not record
    them, the cumulative row count at the end of each episode)."""
    value: dict[str, Any] = {"checksum": CHECKSUM, "rows": {key: int(n) for key, n in rows.items()}}
    if episode_ends is not None:
        value["episode_ends"] = [int(end) for end in episode_ends]
    return value


def _span(first: int, last: int) -> str:
    return f"{first}" if first == last else f"{first}-{last}"


@dataclass(frozen=True)
class ChunkProblem:
    array: str
    chunk: str
    rows: tuple[int, int]
    """Committed rows [start, stop) the chunk holds."""
    episodes: tuple[int, int] | None
    """First and last episode with rows in the chunk (None: unknown)."""
    reason: str

    def describe(self) -> str:
        where = f"rows {_span(self.rows[0], self.rows[1] - 1)}"
        if self.episodes is not None:
            where += f", episode{'s' if self.episodes[0] != self.episodes[1] else ''} {_span(*self.episodes)}"
        return f"array {self.array!r} chunk {self.chunk} ({where}) {self.reason}"


class ChunkGuard:
    """Integrity checks of one opened dataset.

    `rows` maps each array to its committed rows; `counts` says what an array's rows count
    ("steps", "observations": T + 1 per episode, or "episodes"), and `episode_ends` (cumulative
    steps, may be set after opening with `set_episode_ends`) maps rows to episodes for the messages.
    Opening refuses row counts that do not add up: an array shorter than its committed rows, arrays
    counting the same thing with different committed rows, episode ends that do not rise to the steps."""

    def __init__(self, path: str | os.PathLike, group: zarr.Group, rows: Mapping[str, int],
                 counts: Mapping[str, str], manifest_attr: Mapping[str, Any] | None,
                 episode_ends: np.ndarray | None = None):
        self.path = Path(path)
        self.group = group
        self.rows = dict(rows)
        self.counts = dict(counts)
        self.episode_ends: np.ndarray | None = None
        self.checksummed = manifest_attr is not None
        if self.checksummed and manifest_attr.get("rows") != self.rows:
            raise DatasetCorruptError(f"dataset {self.path} is damaged: its chunk manifest lists rows "
                                      f"{manifest_attr.get('rows')} but {self.rows} are committed")
        self._check_rows()
        if episode_ends is not None:
            self.set_episode_ends(episode_ends, "its chunk manifest")

    def _damaged(self, what: str) -> DatasetCorruptError:
        return DatasetCorruptError(f"dataset {self.path} is damaged: {what}")

    def _check_rows(self) -> None:
        """Every array holds its committed rows (rows beyond them are an uncommitted tail, which readers
        ignore), and arrays counting the same thing commit as many rows."""
        for key, rows in self.rows.items():
            if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
                raise self._damaged(f"the committed rows of array {key!r} must be a count, got {rows!r}")
            found = self.group[key].shape[0]
            if found < rows:
                raise self._damaged(f"array {key!r} has {found} rows, but {rows} {self.counts[key]} are committed"
                                    + (" by its chunk manifest" if self.checksummed else ""))
        for kind in set(self.counts.values()):
            same_kind = [key for key in self.rows if self.counts[key] == kind]
            usual = Counter(self.rows[key] for key in same_kind).most_common(1)[0][0]
            for key in same_kind:
                if self.rows[key] != usual:
                    lists = "its chunk manifest lists" if self.checksummed else "it has"
                    raise self._damaged(f"{lists} {self.rows[key]} rows of array {key!r} but {usual} of the other "
                                        f"arrays of {kind}")

    def set_episode_ends(self, ends: Any, where: str) -> None:
        """Sets where episodes end (cumulative steps; `where` names their source in messages), checked:
        integers rising by at least 1 per episode, the last at the committed steps."""
        ends = np.asarray(ends)
        steps = next((rows for key, rows in self.rows.items() if self.counts[key] == "steps"), None)
        lengths = np.diff(ends, prepend=0) if ends.ndim == 1 and ends.dtype.kind in "iu" else None
        if ends.size == 0 and ends.ndim == 1:
            problem = "it lists no episodes" if steps else None
        elif lengths is None:
            problem = f"it is not a list of integers ({ends.dtype} of shape {ends.shape})"
        elif (lengths < 1).any():
            episode = int(np.argmax(lengths < 1))
            problem = f"episode {episode} ends at {ends[episode]}, after {ends[episode - 1] if episode else 0}"
        elif steps is not None and ends[-1] != steps:
            problem = f"the last episode ends at {ends[-1]}"
        else:
            problem = None
        if problem is not None:
            raise self._damaged(f"episode_ends must rise by at least 1 per episode up to the {steps} steps committed, "
                                f"but {problem} ({where})")
        self.episode_ends = ends.astype(np.int64)

    def _episodes(self, key: str, start: int, stop: int) -> tuple[int, int] | None:
        if self.counts[key] == "episodes":
            return start, stop - 1
        if self.episode_ends is None or not len(self.episode_ends):
            return None
        ends = np.asarray(self.episode_ends, np.int64)
        if self.counts[key] == "observations":
            ends = ends + np.arange(1, len(ends) + 1)  # T + 1 observations per episode
        first, last = np.searchsorted(ends, [start, stop - 1], side="right")
        return int(first), int(min(last, len(ends) - 1))

    def _problem(self, key: str, coords: tuple[int, ...], reason: str) -> ChunkProblem:
        array = self.group[key]
        start = coords[0] * array.chunks[0]
        stop = min(start + array.chunks[0], self.rows[key])
        return ChunkProblem(key, array.metadata.encode_chunk_key(coords), (start, stop),
                            self._episodes(key, start, stop), reason)

    def _error(self, problems: Sequence[ChunkProblem]) -> DatasetCorruptError:
        more = f" (and {len(problems) - 1} more damaged chunks)" if len(problems) > 1 else ""
        return self._damaged(f"{problems[0].describe()}{more}; restore it from a copy or re-record it "
                             f"(`robot-rl dataset verify {self.path}` lists it)")

    def _chunks(self, key: str, row_chunks: Iterable[int] | None = None) -> Iterator[tuple[int, ...]]:
        """Chunk coordinates of `key` holding committed rows (or only the given row chunks)."""
        array = self.group[key]
        if row_chunks is None:
            row_chunks = range(math.ceil(self.rows[key] / array.chunks[0]))
        return itertools.product(row_chunks, *map(range, array.cdata_shape[1:]))

    def missing(self, keys: Sequence[str] | None = None) -> list[ChunkProblem]:
        """Committed chunks absent from the store (nothing is read); none can be told apart for
        datasets without a manifest."""
        if not self.checksummed:
            return []
        problems = []
        for key in keys if keys is not None else self.rows:
            array = self.group[key]
            directory = self.path / array.path
            on_disk = {Path(root, name).relative_to(directory).as_posix()
                       for root, _, names in os.walk(directory) for name in names}
            problems += [self._problem(key, coords, "is missing") for coords in self._chunks(key)
                         if array.metadata.encode_chunk_key(coords) not in on_disk]
        return problems

    def require_present(self, keys: Sequence[str] | None = None) -> None:
        problems = self.missing(keys)
        if problems:
            raise self._error(problems)

    def _decode_problem(self, key: str, coords: tuple[int, ...]) -> ChunkProblem | None:
        try:
            self.group[key].blocks[coords]
        except Exception as exc:  # noqa: BLE001 - whatever the codec raises, the chunk is unreadable
            return self._problem(key, coords, f"does not decode ({type(exc).__name__}: {exc})")
        return None

    def require_appendable(self) -> None:
        """Checks the chunks an append rewrites (each array's last, partly filled one) decode."""
        problems = []
        for key, rows in self.rows.items():
            chunk_rows = self.group[key].chunks[0]
            if rows % chunk_rows:
                problems += [p for coords in self._chunks(key, [rows // chunk_rows])
                             if (p := self._decode_problem(key, coords))]
        if problems:
            raise self._error(problems)

    def read(self, key: str, rows: slice | np.ndarray) -> np.ndarray:
        """Rows of array `key` (a slice, or row indices), a chunk that fails to decode raising
        DatasetCorruptError."""
        array = self.group[key]
        try:
            return array.oindex[rows] if isinstance(rows, np.ndarray) else array[rows]
        except Exception:
            if isinstance(rows, np.ndarray):
                touched = np.unique(rows // array.chunks[0]).tolist()
            else:
                start, stop, _ = rows.indices(array.shape[0])
                touched = range(start // array.chunks[0], math.ceil(stop / array.chunks[0]))
            problems = [p for coords in self._chunks(key, touched) if (p := self._decode_problem(key, coords))]
            if problems:
                raise self._error(problems) from None
            raise

    def verify(self) -> int:
        """Checks every committed chunk exists and decodes; returns how many were checked."""
        problems = self.missing()
        if problems:
            raise self._error(problems)
        checked = 0
        for key in self.rows:
            for coords in self._chunks(key):
                checked += 1
                if (problem := self._decode_problem(key, coords)) is not None:
                    problems.append(problem)
        if problems:
            raise self._error(problems)
        return checked
