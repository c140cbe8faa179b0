"""`robot-rl dataset verify`: every chunk of every array of a dataset of either format checked
(present where the manifest expects it, checksum and decode), with a one-line report."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import zarr
from zarr.errors import GroupNotFoundError

from robot_rl.data.dataset import TRANSITIONS_FORMAT, open_transitions
from robot_rl.data.episodes import FORMAT as EPISODES_FORMAT
from robot_rl.data.episodes import EpisodeDataset


@dataclass(frozen=True)
class VerifyReport:
    path: Path
    format: str
    arrays: int
    chunks: int
    episodes: int | None
    checksummed: bool

    def summary(self) -> str:
        episodes = f", {self.episodes} episodes" if self.episodes is not None else ""
        if self.checksummed:
            return f"{self.path}: OK ({self.format}{episodes}, {self.arrays} arrays, {self.chunks} chunks checked)"
        return (f"{self.path}: {self.chunks} chunks of {self.arrays} arrays decode ({self.format}{episodes}), but "
                "it was written before chunk checksums: missing chunks cannot be detected; re-record it to protect it")


def verify_dataset(path: str | os.PathLike) -> VerifyReport:
    """Checks every chunk of every array of the dataset at `path`; raises DatasetCorruptError naming
    the first damaged one (array, chunk, rows, episodes), FileNotFoundError or ValueError."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no dataset at {path}")
    try:
        format_name = zarr.open_group(str(path), mode="r").attrs.get("format", TRANSITIONS_FORMAT)
    except GroupNotFoundError:
        raise ValueError(f"{path} is not a zarr dataset") from None
    if format_name == EPISODES_FORMAT:
        guard = EpisodeDataset(path).guard
    else:
        guard = open_transitions(path)[2]
    chunks = guard.verify()
    episodes = len(guard.episode_ends) if guard.episode_ends is not None else None
    return VerifyReport(Path(path), format_name, len(guard.rows), chunks, episodes, guard.checksummed)
