"""Pretrain a vision encoder on simulated images: our arm task's randomized scenes, or any MuJoCo environment.

Sim gives what real data never does: the true scene state behind every frame. The encoder
(the same grouped-conv trunk + spatial embeddings the RL agent uses) is trained to read that
state from the cameras. Two sources of frames:

* our arm task (the default): randomized scenes (colours, textures, lighting, camera pose, physics;
  `sim/arm/randomization.yaml`, the `pretrain` ranges) in states a manipulation policy visits, scripted
  grasps with noise and random excursions; targets: cube and end-effector positions, their offset,
  gripper opening, whether the cube is held.
* any Gymnasium environment simulated in MuJoCo (`--env ID`, seen through its `EnvAdapter`): uniformly
  random actions, each held a few steps, in short episodes (each reset draws a new scene); targets: the
  world positions of the free bodies (objects), mocap bodies (targets) and the last body of each chain
  (fingers) (`env.unwrapped.data.xpos`, where Gymnasium's MuJoCo environments and gym-hil keep their
  state). No reward, success, expert or demonstration is used: an encoder for a benchmark whose rule
  allows pretraining "only on renders with random actions".

Frozen, its features make pixel RL about as cheap as state-based RL on a CPU, and the
randomization makes them transfer (as SERL and FastRLAP use frozen pretrained encoders).

    robot-rl pretrain-encoder --out policies/encoders/arm_pick_cube_64
    robot-rl pretrain-encoder --env gym_hil_cpu/PandaPickCube-v0 --env-kwargs '{"image_obs": true}' --out enc
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from robot_rl.agents.encoders import EncoderConfig, ImageEncoder, save_pretrained
from robot_rl.agents.sac import native_bf16
from robot_rl.envs.adapter import AdapterConfig, make_canonical
from robot_rl.robots.registry import encoder_scene, encoder_scene_ids

@dataclass
class PretrainConfig:
    """Data generation and training of the pretrained encoder."""

    env_id: str = "robot_rl/ArmPickCube-v0"
    env_kwargs: dict = field(default_factory=lambda: {"image_size": 64, "randomization_split": "pretrain"})
    """Scenes the frames come from: the randomization file's `pretrain` ranges (wider appearance
    than the policies' train ranges)."""
    adapter: AdapterConfig | None = None
    """Any other MuJoCo environment: how its observations are read (cameras, their size); its frames come
    from random actions and its targets are body positions. None: `env_id` is a robot's simulation with scripted
    frames of its own (a robot's `encoder_scenes`: the arm's pick-cube scenes by default)."""
    encoder: EncoderConfig = field(default_factory=lambda: EncoderConfig(cameras=("front", "wrist"), image_size=64))
    """Trunk settings; with `adapter` the cameras and their size are the environment's."""
    frames: int = 30_000
    """Observations rendered for training (+ 10% more held out)."""
    expert_noise: float = 0.2
    """Action noise of the scripted episodes the frames come from."""
    random_action_prob: float = 0.2
    """Per-step chance of a random action instead of the expert's (visits off-expert states)."""
    action_hold_steps: int = 5
    """Any environment: steps each uniformly random action is held (a held action travels, jitter does not)."""
    episode_steps: int = 20
    """Any environment: steps before the next reset (each reset draws a new scene, e.g. the object's place)."""
    epochs: int = 8
    batch_size: int = 256
    lr: float = 1e-3
    seed: int = 0


def generate(config: PretrainConfig, count: int, seed: int,
             log=None) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]:
    """Renders `count` observations with their state targets; returns (frames, targets, target names).
    `log` hears how far it got at every tenth (rendering may take many minutes)."""
    tenth = max(count // 10, 1)

    def progress(rendered: int) -> None:
        if log is not None and rendered % tenth == 0:
            log(f"rendered {rendered}/{count} frames")

    if config.adapter is not None:
        return random_action_frames(config, count, seed, progress)
    scripted = encoder_scene(config.env_id)
    if scripted is None:
        raise ValueError(f"no robot records scripted frames of {config.env_id!r} (robots' encoder_scenes: "
                         f"{sorted(encoder_scene_ids())}); give the environment's adapter (--env) for frames from "
                         "random actions")
    return scripted(config, count, seed, progress)


def tracked_bodies(env: gym.Env) -> tuple[list[int], list[str]]:
    """The bodies whose world positions are the targets, and the targets' names (`block_x`, ...): each
    free-floating body (an object), each mocap body (a target) and the last body of each kinematic chain (a hand's
    fingers). The links between a base and a hand follow from the hand; were they targets, an arm of twenty
    bodies would outweigh the one object in the loss.

    Raises:
        ValueError: the environment keeps no MuJoCo state where Gymnasium's MuJoCo environments do.
    """
    data, model = getattr(env.unwrapped, "data", None), getattr(env.unwrapped, "model", None)
    if not hasattr(data, "xpos") or not hasattr(model, "body_parentid"):
        raise ValueError(f"{env.spec.id if env.spec else env}: pretraining on an environment reads its body positions "
                         "from env.unwrapped.data / .model (MuJoCo), and this one has none")
    free = {int(model.jnt_bodyid[j]) for j in range(model.njnt) if model.jnt_type[j] == 0}  # mjJNT_FREE
    parents = set(int(p) for p in model.body_parentid[1:])
    bodies = [i for i in range(1, model.nbody) if i in free or model.body_mocapid[i] >= 0 or i not in parents]
    return bodies, [f"{model.body(i).name or f'body{i}'}_{axis}" for i in bodies for axis in "xyz"]


def random_action_frames(config: PretrainConfig, count: int, seed: int,
                         progress=lambda n: None) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]:
    """Frames of `config.env_id` under uniformly random actions (each held `action_hold_steps`) in episodes of at
    most `episode_steps`, reset with `seeded_reset` (environments that draw scenes from NumPy's global state
    too), and the bodies' positions behind each frame."""
    from robot_rl.envs.adapter import seeded_reset

    env = make_canonical(config.env_id, config.env_kwargs, config.adapter, normalize=False)
    try:
        adapter, rng = env.adapter, np.random.default_rng(seed)
        if not adapter.cameras:
            raise ValueError(f"{config.env_id} as adapted has no cameras to pretrain an encoder on")
        bodies, names = tracked_bodies(env)
        data = env.unwrapped.data
        frames = {k: np.empty((count, adapter.image_size, adapter.image_size, 3), np.uint8) for k in adapter.cameras}
        targets = np.empty((count, len(names)), np.float32)
        n = 0
        while n < count:
            obs, _ = seeded_reset(env, int(rng.integers(2**32)))
            for step in range(config.episode_steps):
                for k in adapter.cameras:
                    frames[k][n] = obs[k]
                targets[n], n = data.xpos[bodies].reshape(-1), n + 1
                progress(n)
                if n == count:
                    break
                if step % config.action_hold_steps == 0:
                    action = rng.uniform(-1, 1, adapter.action_dim).astype(np.float32)
                obs, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    break
    finally:
        env.close()
    return frames, targets, names


def pretrain(config: PretrainConfig, log=print) -> tuple[ImageEncoder, dict]:
    start = time.perf_counter()
    held_out = max(config.frames // 10, config.batch_size)
    train = generate(config, config.frames, config.seed, log)
    test = generate(config, held_out, config.seed + 1, log)
    log(f"rendered {config.frames} + {held_out} frames in {time.perf_counter() - start:.0f} s")
    encoder, metrics = fit(config, train, test, log)
    metrics["train_seconds"] = round(time.perf_counter() - start, 1)
    return encoder, metrics


def fit(config: PretrainConfig, train: tuple, test: tuple, log=print) -> tuple[ImageEncoder, dict]:
    """The encoder (and a linear head) trained to regress `train`'s targets from its frames; metrics on `test`.
    `train`, `test`: (frames, targets, names) as `generate` returns them."""
    torch.manual_seed(config.seed)
    (train_frames, train_targets, names), (test_frames, test_targets, _) = train, test
    # Targets that do not change (bodies fixed in place) teach nothing: under 0.1 mm of spread is no motion.
    moving = train_targets.std(0) > 1e-4
    train_targets, test_targets, names = train_targets[:, moving], test_targets[:, moving], \
        [name for name, keep in zip(names, moving) if keep]
    mean, std = train_targets.mean(0), train_targets.std(0) + 1e-3
    cameras = tuple(train_frames)
    frames = len(train_targets)
    encoder_config = EncoderConfig(**{**asdict(config.encoder), "kind": "conv", "weights": None, "freeze": False,
                                      "state_dim": 0, "cameras": cameras,
                                      "image_size": train_frames[cameras[0]].shape[1]})
    encoder = ImageEncoder(encoder_config)
    head = torch.nn.Linear(encoder.output_dim, len(names))
    params = list(encoder.parameters()) + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=1e-4)
    steps = config.epochs * max(frames // config.batch_size, 1)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, config.lr, total_steps=steps)
    norm = lambda t: (torch.from_numpy(t) - torch.from_numpy(mean)) / torch.from_numpy(std)  # noqa: E731
    rng = np.random.default_rng(config.seed)
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16, enabled=native_bf16(torch.device("cpu")))
    for step in range(steps):
        idx = rng.integers(0, frames, config.batch_size)
        obs = {k: torch.from_numpy(v[idx]) for k, v in train_frames.items()}
        with bf16:
            prediction = head(encoder(obs, augment=True)).float()
        loss = F.mse_loss(prediction, norm(train_targets[idx]))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 200 == 0 or step == steps - 1:
            log(f"step {step}/{steps} loss {loss.item():.4f}")
    metrics = evaluate(encoder, head, test_frames, test_targets, mean, std, names)
    log(f"held-out: {metrics}")
    return encoder, metrics


@torch.no_grad()
def evaluate(encoder, head, frames, targets, mean, std, names: list[str]) -> dict:
    encoder.eval()
    predictions = []
    for i in range(0, len(targets), 512):
        obs = {k: torch.from_numpy(v[i:i + 512]) for k, v in frames.items()}
        predictions.append(head(encoder(obs)).numpy() * std + mean)
    prediction = np.concatenate(predictions)
    error = prediction - targets
    r2 = 1 - (error ** 2).mean(0) / targets.var(0).clip(1e-9)
    return {"held_out_frames": len(targets),
            "rmse": {n: round(float(e), 4) for n, e in zip(names, np.sqrt((error ** 2).mean(0)))},
            "r2": {n: round(float(r), 3) for n, r in zip(names, r2)}}


def pretrain_and_save(config: PretrainConfig, out: str, log=print) -> dict:
    encoder, metrics = pretrain(config, log)
    targets = ", ".join(metrics["rmse"])
    if config.adapter is None:
        about = {"name": "robot_rl arm pick-cube encoder",
                 "trained_on": f"{config.frames} frames rendered from {config.env_id} with {config.env_kwargs} "
                               "(scripted grasps with noise and random actions), our own simulation: no external data",
                 "intended_use": "frozen image encoder for RL and success classifiers on the arm tasks "
                                 "(cameras in this order)"}
    else:
        about = {"name": f"robot_rl encoder for {config.env_id}",
                 "trained_on": f"{config.frames} frames rendered from {config.env_id} with {config.env_kwargs} under "
                               f"uniformly random actions (each held {config.action_hold_steps} steps, resets every "
                               f"{config.episode_steps} steps); no reward, success, expert or demonstration used",
                 "intended_use": f"frozen image encoder for RL on {config.env_id} (cameras in this order)"}
    card = {**about, "objective": "regress the true scene state from the cameras: " + targets,
            "license": "same as robot_rl",
            "pretrain_config": {k: v for k, v in asdict(config).items() if k != "encoder"},
            "held_out_metrics": metrics}
    save_pretrained(encoder, out, card)
    return metrics
