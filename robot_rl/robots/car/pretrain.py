"""FastRLAP's offline stage: prior driving on other tracks -> IQL -> a frame-stack policy.

The prior data (`robot_rl.robots.car.prior_driving`: slow, wandering, sometimes crashing driving on
procedural tracks that never include the target track) are recorded once into an episode
dataset; IQL then trains the pixel encoder through its value and Q losses and an initial
actor by advantage-weighted regression. The export (`policies/car_race_iql_64` ships one) is
what the online run (`robot_rl.robots.car.train`) and the car actor load: the encoder frozen,
the actor as the starting actor.

Frames are held once in memory; stacks and next observations are index arrays into them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from robot_rl.agents.iql import IQL, IQLConfig
from robot_rl.robots.car.prior_driving import frame_stack_indices, record_prior_driving
from robot_rl.data.episodes import EpisodeDataset
from robot_rl.device import resolve_device

__all__ = ["CarPretrainConfig", "PriorData", "pretrain_car"]


@dataclass
class CarPretrainConfig:
    """Prior data and IQL for the car's encoder."""

    dataset: str = "runs/car_prior.zarr"
    """Episode dataset of prior driving; recorded first if it does not exist."""
    tracks: int = 24
    """Procedural tracks the prior data drive on when recorded (seeds 1000, 1001, ...)."""
    steps_per_track: int = 800
    """Control steps recorded on each track."""
    updates: int = 6000
    """IQL gradient steps."""
    iql: IQLConfig = field(default_factory=IQLConfig)
    seed: int = 0
    log_every: int = 500
    device: str = "auto"

    def __post_init__(self) -> None:
        if isinstance(self.iql, dict):
            self.iql = IQLConfig(**self.iql)
        if self.updates < 1 or self.log_every < 1:
            raise ValueError("updates and log_every must be >= 1")


class PriorData:
    """An episode dataset with camera "front" as IQL batches of frame stacks."""

    def __init__(self, dataset: EpisodeDataset, frame_stack: int):
        if tuple(dataset.schema.cameras) != ("front",):
            raise ValueError(f"{dataset.path}: prior driving data have one camera, 'front'; got {dataset.schema.cameras}")
        self.frames = dataset.observations("front")
        self.state = dataset.observations("state").astype(np.float32)
        self.stacks = frame_stack_indices(dataset.episode_ends, frame_stack)
        steps = dataset.transitions()
        self.obs_index = dataset.step_observations()
        self.action = steps["action"].astype(np.float32)
        self.reward = steps["reward"].astype(np.float32)
        self.terminated = steps["terminated"].astype(np.float32)

    def __len__(self) -> int:
        return len(self.action)

    def sample(self, count: int, rng: np.random.Generator) -> dict[str, Any]:
        steps = rng.integers(0, len(self), count)
        obs, next_obs = self.obs_index[steps], self.obs_index[steps] + 1
        observation = lambda i: {"frames": self.frames[self.stacks[i]], "state": self.state[i]}  # noqa: E731
        return {"obs": observation(obs), "next_obs": observation(next_obs), "action": self.action[steps],
                "reward": self.reward[steps], "terminated": self.terminated[steps]}


def pretrain_car(config: CarPretrainConfig, out: str | Path, log: Callable[[dict], None] = print) -> dict[str, Any]:
    """Records the prior data if needed, trains IQL, exports to `out`; returns the card."""
    cfg = config
    path = Path(cfg.dataset)
    recorded = None
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        recorded = record_prior_driving(str(path), cfg.tracks, cfg.steps_per_track, seed=cfg.seed,
                                        image_size=cfg.iql.encoder.image_size)
        log({"recorded": recorded, "wall_s": round(time.perf_counter() - started, 1)})
    dataset = EpisodeDataset(path)
    if dataset.num_steps == 0:
        raise ValueError(f"{path} holds no steps")
    size = dataset.schema.cameras["front"][0]
    if size != cfg.iql.encoder.image_size:
        raise ValueError(f"{path} has {size} px frames; the encoder is for {cfg.iql.encoder.image_size} px")
    data = PriorData(dataset, cfg.iql.frame_stack)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    iql = IQL(data.state.shape[1], data.action.shape[1], cfg.iql, resolve_device(cfg.device))
    started, metrics = time.perf_counter(), {}
    for update in range(1, cfg.updates + 1):
        metrics = iql.update(data.sample(cfg.iql.batch_size, rng))
        if update % cfg.log_every == 0 or update == cfg.updates:
            log({"update": update, "wall_s": round(time.perf_counter() - started, 1),
                 **{k: round(v, 4) for k, v in metrics.items()}})
    card = {"task": "car_race", "trainer": "iql", "dataset": {"path": str(path), "steps": dataset.num_steps,
                                                               "episodes": len(dataset), **dataset.task_config},
            "pretrain": {k: v for k, v in asdict(cfg).items() if k != "iql"}, "final_metrics": metrics,
            "train_s": round(time.perf_counter() - started, 1)}
    if recorded is not None:
        card["recorded"] = recorded
    iql.export(out, card)
    return card
