"""Pretrain the shipped vision encoder on randomized images of our own simulated task.

Sim gives what real data never does: the true scene state behind every frame. The encoder
(the same grouped-conv trunk + spatial embeddings the RL agent uses) is trained to read that
state from the cameras: cube and end-effector positions, their offset, gripper opening,
whether the cube is held and how high. Frames come from randomized scenes (colours,
textures, lighting, camera pose, physics; `sim/arm/randomization.yaml`, train ranges) in
states a manipulation policy visits: scripted grasps with noise and random excursions.
Frozen, its features make pixel RL about as cheap as state-based RL on a CPU, and the
randomization makes them transfer (as SERL and FastRLAP use frozen pretrained encoders).

    robot-rl pretrain-encoder --out policies/encoders/arm_pick_cube_64
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

# Privileged targets read from the simulator state, in this order (metres; flags 0/1).
TARGET_NAMES = ("cube_x", "cube_y", "cube_z", "ee_x", "ee_y", "ee_z", "offset_x", "offset_y", "offset_z",
                "gripper_opening", "cube_grasped")


@dataclass
class PretrainConfig:
    """Data generation and training of the pretrained encoder."""

    env_id: str = "robot_rl/ArmPickCube-v0"
    env_kwargs: dict = field(default_factory=lambda: {"image_size": 64, "randomization_split": "pretrain"})
    """Scenes the frames come from: the randomization file's `pretrain` ranges (wider appearance
    than the policies' train ranges)."""
    encoder: EncoderConfig = field(default_factory=lambda: EncoderConfig(cameras=("front", "wrist"), image_size=64))
    frames: int = 30_000
    """Observations rendered for training (+ 10% more held out)."""
    expert_noise: float = 0.2
    """Action noise of the scripted episodes the frames come from."""
    random_action_prob: float = 0.2
    """Per-step chance of a random action instead of the expert's (visits off-expert states)."""
    epochs: int = 8
    batch_size: int = 256
    lr: float = 1e-3
    seed: int = 0


def arm_targets(state: dict) -> np.ndarray:
    from robot_rl.envs.arm_sim import cube_grasped

    cube, ee = np.asarray(state["cube_pos"]), np.asarray(state["ee_pos"])
    return np.concatenate([cube, ee, cube - ee, np.asarray(state["gripper"]).reshape(1),
                           [float(cube_grasped(state))]]).astype(np.float32)


def generate(config: PretrainConfig, count: int, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Renders `count` observations of scripted/perturbed episodes with their state targets."""
    from robot_rl.tasks import expert_for_env

    expert = expert_for_env(config.env_id)
    env = gym.make(config.env_id, **config.env_kwargs)
    rng = np.random.default_rng(seed)
    cameras = config.encoder.cameras
    frames = {k: np.empty((count, *env.observation_space[k].shape), np.uint8) for k in cameras}
    targets = np.empty((count, len(TARGET_NAMES)), np.float32)
    n = 0
    while n < count:
        obs, info = env.reset(seed=int(rng.integers(2**31)))
        done = False
        while not done and n < count:
            target = arm_targets(info["state"])
            if np.abs(target[:6]).max() < 2.0:  # a diverged simulation's frame teaches nothing
                for k in cameras:
                    frames[k][n] = obs[k]
                targets[n] = target
                n += 1
            if rng.random() < config.random_action_prob:
                action = rng.uniform(-1, 1, 4).astype(np.float32)
            else:
                action = expert(info["state"], rng, config.expert_noise)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
    env.close()
    return frames, targets


def pretrain(config: PretrainConfig, log=print) -> tuple[ImageEncoder, dict]:
    torch.manual_seed(config.seed)
    start = time.perf_counter()
    held_out = max(config.frames // 10, config.batch_size)
    train_frames, train_targets = generate(config, config.frames, config.seed)
    test_frames, test_targets = generate(config, held_out, config.seed + 1)
    log(f"rendered {config.frames} + {held_out} frames in {time.perf_counter() - start:.0f} s")
    mean, std = train_targets.mean(0), train_targets.std(0) + 1e-3
    encoder_config = EncoderConfig(**{**asdict(config.encoder), "kind": "conv", "weights": None, "freeze": False,
                                      "state_dim": 0})
    encoder = ImageEncoder(encoder_config)
    head = torch.nn.Linear(encoder.output_dim, len(TARGET_NAMES))
    params = list(encoder.parameters()) + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=1e-4)
    steps = config.epochs * (config.frames // config.batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, config.lr, total_steps=steps)
    norm = lambda t: (torch.from_numpy(t) - torch.from_numpy(mean)) / torch.from_numpy(std)  # noqa: E731
    rng = np.random.default_rng(config.seed)
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16, enabled=native_bf16(torch.device("cpu")))
    for step in range(steps):
        idx = rng.integers(0, config.frames, config.batch_size)
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
    metrics = evaluate(encoder, head, test_frames, test_targets, mean, std)
    metrics["train_seconds"] = round(time.perf_counter() - start, 1)
    log(f"held-out: {metrics}")
    return encoder, metrics


@torch.no_grad()
def evaluate(encoder, head, frames, targets, mean, std) -> dict:
    encoder.eval()
    predictions = []
    for i in range(0, len(targets), 512):
        obs = {k: torch.from_numpy(v[i:i + 512]) for k, v in frames.items()}
        predictions.append(head(encoder(obs)).numpy() * std + mean)
    prediction = np.concatenate(predictions)
    error = prediction - targets
    r2 = 1 - (error ** 2).mean(0) / targets.var(0).clip(1e-9)
    return {"held_out_frames": len(targets),
            "rmse": {n: round(float(e), 4) for n, e in zip(TARGET_NAMES, np.sqrt((error ** 2).mean(0)))},
            "r2": {n: round(float(r), 3) for n, r in zip(TARGET_NAMES, r2)}}


def pretrain_and_save(config: PretrainConfig, out: str, log=print) -> dict:
    encoder, metrics = pretrain(config, log)
    card = {
        "name": "robot_rl arm pick-cube encoder",
        "trained_on": f"{config.frames} frames rendered from {config.env_id} with {config.env_kwargs} "
                      "(scripted grasps with noise and random actions), our own simulation: no external data",
        "objective": "regress the true scene state from the cameras: " + ", ".join(TARGET_NAMES),
        "intended_use": "frozen image encoder for RL and success classifiers on the arm tasks "
                        "(cameras in this order)",
        "license": "same as robot_rl",
        "pretrain_config": {k: v for k, v in asdict(config).items() if k != "encoder"},
        "held_out_metrics": metrics,
    }
    save_pretrained(encoder, out, card)
    return metrics
