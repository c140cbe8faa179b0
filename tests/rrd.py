"""A Rerun recording (.rrd) read back for tests: entity path -> component -> rows."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from rerun.chunk import RrdReader


def read_rrd(path: Path) -> dict[str, dict[str, list]]:
    """entity path -> component column -> [(step or None, value)], in step order (static rows: step None)."""
    columns: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for chunk in RrdReader(path).stream():
        batch = chunk.to_record_batch()
        names = batch.schema.names
        steps = batch.column("step").to_pylist() if "step" in names else [None] * batch.num_rows
        for name in names:
            if ":" in name and not name.startswith("rerun.") and not name.startswith("RecordingInfo"):
                columns[chunk.entity_path][name] += zip(steps, batch.column(name).to_pylist())
    for components in columns.values():
        for rows in components.values():
            rows.sort(key=lambda row: -1 if row[0] is None else row[0])
    return columns


def values(recording: dict, entity: str, component: str = "Scalars:scalars") -> list:
    """Each row's values (a component is a list per row: the scalars of a series, one text, one image)."""
    return [value for _, value in recording[entity][component]]


def texts(recording: dict, entity: str) -> list[str]:
    return [text for text, in values(recording, entity, "TextLog:text")]
