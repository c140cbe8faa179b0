"""Our shipped gym-hil encoder as a Hugging Face model, so that LeRobot's SAC loads the same local file as ours
(issue 40's encoder rule: pretrained only on gym-hil renders of random actions, loaded from a local file by both).

LeRobot 0.4.4 builds a pretrained image encoder with `transformers.AutoModel.from_pretrained(name,
trust_remote_code=True)`, runs every camera's frames through that one model (the cameras stacked on the batch),
reads `last_hidden_state` (B, C, h, w) and sizes its own spatial embeddings from `config.hidden_sizes[-1]` (C).
Our encoder (`policies/encoders/gym_hil_pick_cube_128`) keeps one conv stack per camera. A model that cannot tell
the cameras apart therefore runs every frame through both stacks and returns both stacks' maps side by side
(2 x 32 channels); LeRobot's per-camera spatial embeddings learn which to read. Our pooling and projection are
left out: LeRobot's policy has its own. The first layer of both stacks is one convolution (each stack's first
layer sees the same three colour channels), the later ones grouped convolutions, one group per stack: the same
weights, one call per layer.

    .venv-peer-lerobot/bin/python benchmarks/peer_lerobot/hf_encoder.py ENCODER_DIR OUT_DIR

writes OUT_DIR (refusing one that exists). This file is the model's code: `save_pretrained` copies it into OUT_DIR,
so it imports nothing of robot_rl and runs in LeRobot's venv as in ours.
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithNoAttention

TRUNK_PREFIX = "trunk.net."
"""Our encoder's conv stacks in its safetensors file: `trunk.net.{2k}.weight/bias` for conv layer k (ReLUs between)."""


class CameraStacksConfig(PretrainedConfig):
    model_type = "robot_rl_camera_stacks"

    def __init__(self, stacks: int = 2, channels: int = 32, num_layers: int = 4, source: str = "", **kwargs):
        kwargs.pop("hidden_sizes", None)  # derived, written to config.json for LeRobot to read
        super().__init__(**kwargs)
        self.stacks, self.channels, self.num_layers, self.source = stacks, channels, num_layers, source
        self.hidden_sizes = [stacks * channels]


class CameraStacksModel(PreTrainedModel):
    """(B, 3, H, W) float frames in [0, 1] -> last_hidden_state (B, stacks * channels, H / 2^L, W / 2^L)."""

    config_class = CameraStacksConfig
    main_input_name = "pixel_values"

    def __init__(self, config: CameraStacksConfig):
        super().__init__(config)
        width = config.stacks * config.channels
        self.convs = nn.ModuleList(nn.Conv2d(3 if layer == 0 else width, width, 3, stride=2, padding=1,
                                             groups=1 if layer == 0 else config.stacks)
                                   for layer in range(config.num_layers))
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """Nothing: the weights always come from our encoder's file."""

    def forward(self, pixel_values: torch.Tensor, **kwargs) -> BaseModelOutputWithNoAttention:
        x = pixel_values
        for conv in self.convs:
            x = torch.relu(conv(x))
        return BaseModelOutputWithNoAttention(last_hidden_state=x)


def convert(encoder_dir: Path) -> CameraStacksModel:
    """The model holding the conv stacks of our encoder in `encoder_dir` (its card and safetensors file)."""
    card = json.loads((encoder_dir / "card.json").read_text())
    arch = card["architecture"]
    config = CameraStacksConfig(stacks=len(arch["cameras"]), channels=arch["channels"], num_layers=arch["num_layers"],
                                source=f"{encoder_dir.name}: {card['name']}; cameras {arch['cameras']}")
    model = CameraStacksModel(config)
    ours = load_file(encoder_dir / "encoder.safetensors")
    state = {f"convs.{layer}.{part}": ours[f"{TRUNK_PREFIX}{2 * layer}.{part}"]
             for layer in range(config.num_layers) for part in ("weight", "bias")}
    model.load_state_dict(state, strict=True)
    return model.eval()


def write(encoder_dir: Path, out: Path) -> None:
    if out.exists():
        raise SystemExit(f"hf_encoder: {out} exists; give a new directory")
    CameraStacksConfig.register_for_auto_class()
    CameraStacksModel.register_for_auto_class("AutoModel")
    convert(encoder_dir).save_pretrained(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("encoder_dir", type=Path, help="our encoder's directory (card.json, encoder.safetensors)")
    parser.add_argument("out", type=Path, help="the Hugging Face model directory to write")
    args = parser.parse_args()
    write(args.encoder_dir, args.out)


if __name__ == "__main__":
    # save_pretrained copies a model's code only from an imported module, never from __main__ (and transformers
    # scans this file's import statements for packages it needs, hence no `import` of itself)
    importlib.import_module(Path(__file__).stem).main()
