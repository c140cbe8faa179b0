"""`robot-rl view`: recorded episodes and runs replayed into a Rerun session (`rerun_log`).

An episode dataset (`robot_rl.data.episodes`, or a LeRobotDataset v3 directory read through
`robot_rl.data.lerobot_format`) is replayed observation by observation: an episode
of T steps is T + 1 steps of the session (its final observation last, with no action), a step
with `intervention` set is the person's (driver "person", its action also under action/human),
the others the policy's. A run directory (`robot-rl train`, `train --env`) is shown as its
learning curve (episodes.jsonl, history.json, eval.json) followed by the episode datasets it holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import zarr

from robot_rl.data.episodes import FORMAT, UNLABELLED, EpisodeDataset
from robot_rl.data.lerobot_format import LeRobotEpisodes, is_lerobot_dataset
from robot_rl.outputs import UserError
from robot_rl.view.rerun_log import RerunSession

Episodes = EpisodeDataset | LeRobotEpisodes
"""What is replayed: our zarr episodes or a LeRobot dataset (the same reading API)."""

RUN_FILES = ("episodes.jsonl", "history.json", "eval.json")
"""What marks a run directory (any of them)."""


def is_zarr_group(path: Path) -> bool:
    return (path / "zarr.json").is_file() or (path / ".zgroup").is_file()


def is_episode_dataset(path: Path) -> bool:
    """Whether `path` holds an episode dataset (not e.g. a graph run's demonstration buffer)."""
    if not is_zarr_group(path):
        return False
    try:
        return zarr.open_group(str(path), mode="r").attrs.get("format") == FORMAT
    except Exception:  # noqa: BLE001 - anything unreadable is not a dataset to show here
        return False


def view_sources(path: str | Path) -> tuple[Path | None, list[Path]]:
    """(the run directory or None, the episode datasets to replay) of what `robot-rl view` was given."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such dataset or run directory")
    if is_zarr_group(path) or is_lerobot_dataset(path):  # opening one says what is wrong with it
        return None, [path]
    if path.is_dir() and any((path / name).exists() for name in RUN_FILES):
        return path, sorted(child for child in path.iterdir()
                            if child.is_dir() and (is_episode_dataset(child) or is_lerobot_dataset(child)))
    raise UserError(f"{path} is neither an episode dataset (zarr, format {FORMAT!r}, or LeRobotDataset v3) nor a "
                    f"run directory (with {', '.join(RUN_FILES)})")


def parse_episodes(text: str | None) -> list[int] | None:
    """`--episodes 0,3,-1` as indices (None: all)."""
    if text is None:
        return None
    try:
        episodes = [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"--episodes expects comma-separated episode indices such as 0,3,-1, got {text!r}") from None
    if len(set(episodes)) != len(episodes):
        raise UserError(f"--episodes names an episode twice: {text}")
    return episodes


def chosen_episodes(dataset: Episodes, episodes: Sequence[int] | None) -> list[int]:
    """The indices of `episodes` in `dataset` (negative ones counted from the end); UserError for one out of range."""
    if episodes is None:
        return list(range(len(dataset)))
    outside = [e for e in episodes if not -len(dataset) <= e < len(dataset)]
    if outside:
        raise UserError(f"--episodes {','.join(map(str, outside))}: {dataset.path} has {len(dataset)} episodes "
                        f"(0 to {len(dataset) - 1})")
    return [e % len(dataset) for e in episodes]


def replay_episode(session: RerunSession, dataset: Episodes, index: int, first_step: int) -> int:
    """Logs episode `index` from session step `first_step`; returns the step after its final observation."""
    episode = dataset.episode(index)
    cameras = tuple(dataset.schema.cameras)
    actions, interventions, rewards, stamps = (episode["action"], episode["intervention"], episode["reward"],
                                               episode["stamp"])
    steps = len(actions)
    driver = "policy"
    for k in range(steps + 1):
        acted = k < steps
        if acted:
            driver = "person" if interventions[k] else "policy"
        session.step(first_step + k, {camera: episode[camera][k] for camera in cameras},
                     episode["state"][k] if dataset.schema.state_dim else None,
                     actions[k] if acted else None, None, driver,
                     reward=float(rewards[k]) if acted else None, episode=index,
                     wall_time=float(stamps[k]) if acted else None)
    label = int(episode["success_label"][-1])
    ending = "terminated" if episode["terminated"][-1] else "truncated"
    session.episode_end(index, None if label == UNLABELLED else bool(label), f"{ending}, {dataset.path.name}")
    return first_step + steps + 1


def log_run(session: RerunSession, run: Path) -> int:
    """The learning curve of run directory `run`; returns how many rows were logged."""
    rows = 0
    episodes, history, evaluation = (run / name for name in RUN_FILES)
    if episodes.exists():
        for number, line in enumerate(episodes.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                session.curve({"return": float(entry["return"]), "success": float(bool(entry["success"])),
                               "length": float(entry["steps"]),
                               "interventions": float(entry.get("intervention_steps", 0))},
                              episode=int(entry["index"]), env_step=int(entry["env_steps"]),
                              wall_time=entry.get("time"))
            except (ValueError, KeyError, TypeError) as exc:
                raise UserError(f"{episodes}:{number}: not an episode record ({exc})") from None
            rows += 1
    if history.exists():
        evaluations = json.loads(history.read_text())
        if not isinstance(evaluations, list):
            raise UserError(f"{history} is not a training history (a list of evaluations)")
    elif evaluation.exists():
        evaluations = [json.loads(evaluation.read_text())]
    else:
        evaluations = []
    for row in evaluations:
        try:
            step = int(row.get("steps", row.get("train_steps")))
            session.curve({f"eval_{key}": float(row[key]) for key in ("success_rate", "mean_return") if key in row},
                          env_step=step)
        except (TypeError, ValueError, AttributeError) as exc:
            raise UserError(f"{history if history.exists() else evaluation}: not an evaluation row ({exc})") from None
        rows += 1
    return rows


def replay(session: RerunSession, datasets: Sequence[Episodes], episodes: Sequence[int] | None) -> int:
    """Every chosen episode of each dataset, one after the other; returns the session steps logged."""
    step = 0
    for dataset in datasets:
        for index in chosen_episodes(dataset, episodes):
            step = replay_episode(session, dataset, index, step)
    return step


def camera_names(datasets: Sequence[Episodes]) -> tuple[str, ...]:
    """Every dataset's cameras, first seen first (the session's layout)."""
    return tuple(dict.fromkeys(name for dataset in datasets for name in dataset.schema.cameras))

