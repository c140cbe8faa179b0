"""The deployable car policy: one frozen per-frame image encoder and an actor on [K frame features, state].

FastRLAP's policy sees K stacked frames of one camera. Every frame goes through the same frozen
encoder, so whoever runs the policy encodes only the newest frame per step and keeps the last K
embeddings (`FeatureStack`); the replay memory stores the same per-frame features, so training
never runs the encoder again. IQL pretraining exports one of these (its encoder and initial
actor), the online run exports the trained one, and the simulated and the real car run either
through `load_frame_stack_policy`.

Layout of a policy directory: the encoder as `save_pretrained` writes it (`encoder.safetensors`,
`card.json` with the architecture), the actor in `actor.safetensors`, and the card's "actor"
entry: obs_dim, action_dim, state_dim, frame_stack, hidden_dims, layer_norm.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Mapping

import numpy as np
import torch

from robot_rl.agents.encoders import CARD_FILE, ImageEncoder, pretrained_config, save_pretrained
from robot_rl.agents.networks import TanhGaussianActor
from robot_rl.artifacts import load_card, load_weights, model_directory, save_weights
from robot_rl.resources import package_path

__all__ = ["ACTOR_FILE", "FeatureStack", "FrameStackPolicy", "load_frame_stack_policy", "save_frame_stack_policy"]

ACTOR_FILE = "actor.safetensors"


class FeatureStack:
    """The last K frame embeddings of one episode; an episode's first frame fills all K (as the
    env fills its frame stack at a reset)."""

    def __init__(self, frame_stack: int):
        if frame_stack < 1:
            raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
        self._features: deque[np.ndarray] = deque(maxlen=frame_stack)

    def reset(self) -> None:
        """A new episode: the next frame pushed is its first."""
        self._features.clear()

    @property
    def empty(self) -> bool:
        """True between `reset` and the episode's first frame."""
        return not self._features

    def push(self, features: np.ndarray) -> None:
        self._features.extend([features] * (self._features.maxlen if self.empty else 1))

    def flat(self) -> np.ndarray:
        """(K * latent,) oldest first, as `encode_stack` orders a stack."""
        return np.concatenate(self._features)


class FrameStackPolicy:
    """Encoder + actor; `encode` one or more frames, `act` on stacked features + state."""

    def __init__(self, encoder: ImageEncoder, actor: TanhGaussianActor, frame_stack: int, state_dim: int,
                 device: str | torch.device = "cpu"):
        if len(encoder.config.cameras) != 1 or encoder.config.state_dim != 0:
            raise ValueError("a frame-stack policy's encoder sees one camera and no state")
        self.device = torch.device(device)
        self.encoder, self.actor = encoder.to(self.device).eval(), actor.to(self.device).eval()
        self.frame_stack, self.state_dim = frame_stack, state_dim
        self.latent_dim = encoder.output_dim
        self.feature_dim = frame_stack * self.latent_dim + state_dim
        self.image_size = encoder.config.image_size

    @torch.inference_mode()
    def encode(self, frames: np.ndarray) -> np.ndarray:
        """uint8 (H, W, 3) or (N, H, W, 3) frames -> float32 (latent,) or (N, latent) embeddings."""
        frames = np.asarray(frames)
        single = frames.ndim == 3
        batch = frames[None] if single else frames
        size = self.image_size
        if batch.dtype != np.uint8 or batch.ndim != 4 or batch.shape[1:] != (size, size, 3):
            raise ValueError(f"frames must be uint8 ({size}, {size}, 3), got {frames.dtype} {frames.shape}")
        tensor = torch.from_numpy(np.ascontiguousarray(batch)).to(self.device)
        features = self.encoder({self.encoder.config.cameras[0]: tensor}).float().cpu().numpy()
        return features[0] if single else features

    def observation(self, stacked_features: np.ndarray, state: np.ndarray) -> np.ndarray:
        """[K frame embeddings, state] as the actor and the replay memory see it, validated."""
        stacked = np.asarray(stacked_features, np.float32).reshape(-1)
        state = np.asarray(state, np.float32).reshape(-1)
        if stacked.shape != (self.frame_stack * self.latent_dim,) or state.shape != (self.state_dim,):
            raise ValueError(f"need {self.frame_stack} x {self.latent_dim} frame features and {self.state_dim} "
                             f"state values, got {stacked.size} and {state.size}")
        if not np.isfinite(state).all():
            raise ValueError(f"state must be finite, got {state}")
        return np.concatenate([stacked, state])

    @torch.inference_mode()
    def act(self, observation: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Action in [-1, 1] for one `observation()` vector."""
        obs = torch.from_numpy(np.asarray(observation, np.float32)).to(self.device)[None]
        if obs.shape[-1] != self.feature_dim:
            raise ValueError(f"observation must have {self.feature_dim} values, got {obs.shape[-1]}")
        action, _ = self.actor(obs, deterministic=deterministic)
        return action[0].cpu().numpy()


def save_frame_stack_policy(directory: str | Path, encoder: ImageEncoder, actor: TanhGaussianActor, state_dim: int,
                            frame_stack: int, card: Mapping) -> None:
    """Writes encoder, actor and card (see the module docstring); `card` adds training facts."""
    spec = {"obs_dim": actor.obs_dim, "action_dim": actor.action_dim, "state_dim": state_dim,
            "frame_stack": frame_stack, "hidden_dims": list(actor.hidden_dims), "layer_norm": actor.layer_norm}
    if spec["obs_dim"] != frame_stack * encoder.output_dim + state_dim:
        raise ValueError(f"the actor sees {spec['obs_dim']} values, not {frame_stack} x {encoder.output_dim} "
                         f"+ {state_dim}")
    with model_directory(directory) as tmp:
        save_pretrained(encoder, tmp, {**card, "actor": spec})
        save_weights(actor.state_dict(), tmp / ACTOR_FILE)


def load_frame_stack_policy(directory: str | Path, device: str | torch.device = "cpu") -> FrameStackPolicy:
    """The policy a directory holds (a path, or one relative to the package), frozen, in eval mode."""
    directory = package_path(directory)
    weights = directory / ACTOR_FILE
    if not weights.is_file():
        raise FileNotFoundError(f"no actor at {weights}")
    spec = load_card(directory / CARD_FILE).get("actor")
    if not isinstance(spec, dict):
        raise ValueError(f"{directory / CARD_FILE} has no 'actor' section (not a frame-stack policy directory?)")
    encoder = ImageEncoder(pretrained_config(directory))
    actor = TanhGaussianActor(spec["obs_dim"], spec["action_dim"], tuple(spec["hidden_dims"]),
                              layer_norm=spec["layer_norm"])
    try:
        actor.load_state_dict(load_weights(weights), strict=True)
    except RuntimeError as exc:
        raise ValueError(f"actor weights {weights} do not match the card's spec {spec}: {exc}") from None
    return FrameStackPolicy(encoder, actor, spec["frame_stack"], spec["state_dim"], device)
