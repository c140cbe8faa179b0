"""Any Gymnasium environment as a node graph's task: what `robot-rl train --env ID --graph` (and the launch file
with `task:=env`) prepares before the nodes start.

The graph section's `env` mapping (`EnvSection`) names the environment; `prepare_env_task` resolves its
adapter once, fits the state normalisation on demonstrations (or, without any, on random-action
rollouts), and writes the run's env task file (`tasks.py: EnvTaskFile`) that the simulator, actor,
learner and `robot-rl eval` all read, so every node sees the environment the same way, and a resumed
run keeps its normalisation. Demonstrations (an expert's episodes, a recorded dataset) become the
learner's demonstration transitions in the agent's units.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from robot_rl.data.dataset import save_transitions
from robot_rl.data.episodes import EpisodeDataset
from robot_rl.envs.adapter import AdapterConfig, EnvAdapter, make_canonical, resize_frame, seeded_reset
from robot_rl.outputs import atomic_path
from robot_rl.tasks import ENV_TASK, EnvTaskFile

ENV_TASK_FILE, DEMOS_FILE, EXPERT_EPISODES_FILE = "env_task.json", "demos.zarr", "expert_episodes.zarr"


@dataclass
class EnvSection:
    """The graph section's `env` mapping: the environment a graph of task `env` runs."""

    id: str
    """Registered Gymnasium id (`ns/Name-v0` imports the namespace's module; `module:Id` works too)."""
    kwargs: dict = field(default_factory=dict)
    """gymnasium.make keyword arguments."""
    adapter: dict = field(default_factory=dict)
    """`AdapterConfig` fields: observation keys, image size, gripper, teleop axes, normalisation."""
    expert: str = ""
    """`module:callable` scripted expert whose successful episodes are the demonstrations ('' for none)."""
    dataset: str = ""
    """An episode dataset of this environment (e.g. `robot-rl record --env`) loaded as demonstrations ('' for none)."""
    max_episode_steps: int = 0
    """Episode horizon; 0: the environment's registered max_episode_steps."""
    control_hz: float = 10.0
    """Control rate: the simulated clock's step, and the pace on the wall clock."""
    statistics_steps: int = 1000
    """Without demonstrations: random-action steps whose states fit the state normalisation."""

    @classmethod
    def from_mapping(cls, section: Any) -> "EnvSection":
        if not isinstance(section, Mapping) or not section.get("id"):
            raise ValueError(f"task {ENV_TASK!r} needs robot_rl.env with at least an id, e.g. {{id: gym_hil/"
                             f"PandaPickCube-v0}}; got {section!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise ValueError(f"robot_rl.env has no key {unknown[0]!r}; known: {sorted(known)}")
        return cls(**section)

    def adapter_config(self) -> AdapterConfig:
        known = {f.name for f in fields(AdapterConfig)}
        unknown = sorted(set(self.adapter) - known)
        if unknown:
            raise ValueError(f"robot_rl.env.adapter has no field {unknown[0]!r}; known: {sorted(known)}")
        values = {k: tuple(v) if k in ("obs_keys", "teleop_axes") and v is not None else v
                  for k, v in self.adapter.items()}
        return AdapterConfig(**values)


def env_task_name(env_id: str) -> str:
    return f"{ENV_TASK}:{env_id}"


def prepare_env_task(section: Mapping[str, Any], run_dir: str | Path, demo_episodes: int = 0, demo_seed: int = 0,
                     demo_noise: float = 0.0) -> tuple[Path, Path | None]:
    """Writes the run's env task file and demonstration transitions; returns their paths (None: no
    demonstrations). A run directory that has them (a resumed run) keeps them as they are."""
    run_dir = Path(run_dir)
    task_path, demos_path = run_dir / ENV_TASK_FILE, run_dir / DEMOS_FILE
    if task_path.exists():
        EnvTaskFile.load(task_path)  # refuses a damaged file before any node reads it
        return task_path, demos_path if demos_path.exists() else None
    env_section = EnvSection.from_mapping(section)
    env = make_canonical(env_section.id, env_section.kwargs, env_section.adapter_config(), normalize=False)
    try:
        horizon = env_section.max_episode_steps or (env.spec.max_episode_steps if env.spec else None)
        if not horizon:
            raise ValueError(f"{env_section.id} registers no max_episode_steps: set robot_rl.env.max_episode_steps")
        run_dir.mkdir(parents=True, exist_ok=True)
        datasets = []
        if env_section.expert and demo_episodes > 0:
            from robot_rl.data.env_recorder import EnvEpisodeRecorder
            from robot_rl.training.experts import load_expert, record_expert_episodes

            expert = load_expert(env_section.expert)  # a bad spec is refused before anything is written
            # Recorded beside and renamed into place when complete: a failed start leaves no partial episodes
            # that a retry (--resume) would take for the run's demonstrations.
            with atomic_path(run_dir / EXPERT_EPISODES_FILE, directory=True) as recording:
                recorder = EnvEpisodeRecorder(recording, env_section.id, env_section.kwargs, env.adapter)
                record_expert_episodes(env, recorder, expert, demo_episodes, seed=demo_seed, noise=demo_noise)
            datasets.append(EpisodeDataset(run_dir / EXPERT_EPISODES_FILE))
        if env_section.dataset:
            datasets.append(EpisodeDataset(env_section.dataset))
        adapter = env.adapter
        raw = [d.transitions(adapter.cameras) for d in datasets]
        for d, arrays in zip(datasets, raw):
            _check_fits(d.path, arrays, adapter)
        if adapter.normalizer.needs_statistics:
            states = (np.concatenate([a["obs"] for a in raw]) if raw
                      else random_states(env, env_section.statistics_steps))
            adapter.normalizer.fit(states)
        EnvTaskFile(env_section.id, dict(env_section.kwargs), asdict(adapter), int(horizon),
                    float(env_section.control_hz)).save(task_path)
    finally:
        env.close()
    if not raw:
        return task_path, None
    arrays = {name: np.concatenate([agent_transitions(a, adapter)[name] for a in raw]) for name in raw[0]}
    save_transitions(demos_path, arrays, {"task": env_task_name(env_section.id), "source": "env_demonstrations",
                                          "episodes": sum(len(d) for d in datasets)})
    return task_path, demos_path


def _check_fits(path, arrays: Mapping[str, np.ndarray], adapter: EnvAdapter) -> None:
    state_dim, action_dim = arrays["obs"].shape[1], arrays["action"].shape[1]
    if (state_dim, action_dim) != (adapter.state_dim, adapter.action_dim):
        raise ValueError(f"{path}: state {state_dim} and action {action_dim} values, the environment as adapted has "
                         f"{adapter.state_dim} and {adapter.action_dim}")


def agent_transitions(arrays: Mapping[str, np.ndarray], adapter: EnvAdapter) -> dict[str, np.ndarray]:
    """An episode dataset's transitions (raw state, the environment's action units, frames as recorded) in the
    agent's units: normalised state, actions in [-1, 1], frames at the adapter's size."""
    out = dict(arrays)
    out["obs"], out["next_obs"] = adapter.normalizer(arrays["obs"]), adapter.normalizer(arrays["next_obs"])
    out["action"] = np.stack([adapter.agent_action(a) for a in arrays["action"]]).astype(np.float32)
    for camera in adapter.cameras:
        for key in (f"obs_{camera}", f"next_obs_{camera}"):
            out[key] = np.stack([resize_frame(f, adapter.image_size) for f in arrays[key]])
    return out


def random_states(env, steps: int, seed: int = 0) -> np.ndarray:
    """Raw states of `steps` uniformly random actions (episodes reset with seeds seed, seed + 1, ...)."""
    rng = np.random.default_rng(seed)
    states, episode = [], 0
    obs, _ = seeded_reset(env, seed)
    while len(states) < steps:
        states.append(obs["state"] if isinstance(obs, dict) else obs)
        obs, _, terminated, truncated, _ = env.step(rng.uniform(-1.0, 1.0, env.action_space.shape))
        if terminated or truncated:
            episode += 1
            obs, _ = seeded_reset(env, seed + episode)
    return np.stack(states)
