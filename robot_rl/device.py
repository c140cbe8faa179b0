"""Torch device names: one check for every place a user names a device (learner, training loops,
reward node). Torch is imported only when a name needs it, so light modules can use this."""

from __future__ import annotations

import re

_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?|mps)$")


def check_device_name(device: str) -> None:
    """Raises ValueError unless `device` is auto, cpu, cuda, cuda:<index> or mps (no torch needed)."""
    if not isinstance(device, str) or not _DEVICE.match(device):
        raise ValueError(f"device {device!r} must be auto, cpu, cuda, cuda:<index> or mps")


def resolve_device(device: str) -> str:
    """"auto" -> "cuda" when a GPU is usable, else "cpu"; refuses a device that is not there.

    Raises:
        ValueError: a malformed name, or a GPU (index) this machine does not have.
    """
    check_device_name(device)
    if device == "cpu":
        return device
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: no CUDA GPU is available on this machine (use auto or cpu)")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s)")
    elif device == "mps" and not torch.backends.mps.is_available():
        raise ValueError("device 'mps' is not available")
    return device
