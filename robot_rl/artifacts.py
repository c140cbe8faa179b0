"""Model directories on disk (policies, encoders, reward models, classifiers): safetensors weights
plus a `card.json`. Written whole or not at all; read with errors that name the file at fault.

Every saver and loader of such a directory goes through here, so a truncated weights file, a
broken card or weights that hold NaN fail the same way everywhere: a ValueError naming the file
(and the tensor), never a parser traceback or a policy that outputs NaN actions later.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping

from robot_rl.outputs import atomic_path


@contextlib.contextmanager
def model_directory(directory: str | os.PathLike) -> Iterator[Path]:
    """Yields an empty temporary directory to write a model into; it replaces `directory` when the
    block succeeds (an existing model stays intact if writing fails or is interrupted)."""
    with atomic_path(directory, directory=True) as tmp:
        yield tmp


def save_weights(tensors: Mapping[str, Any], path: str | os.PathLike) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(path))


def save_card(card: Mapping[str, Any], path: str | os.PathLike, indent: int = 2) -> None:
    Path(path).write_text(json.dumps(card, indent=indent, default=str) + "\n")


def load_weights(path: str | os.PathLike, device: str = "cpu") -> dict[str, Any]:
    """The tensors of a safetensors file; refuses a missing, unreadable or non-finite one by name."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {path} is missing")
    try:
        tensors = load_file(str(path), device=device)
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"weights file {path} is unreadable (truncated or not safetensors: {exc})") from None
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"weights file {path}: tensor {name!r} holds NaN or infinite values (a diverged or "
                             "corrupted model; retrain or restore it)")
    return tensors


def load_checkpoint(path: str | os.PathLike, device: str = "cpu", weights_only: bool = True) -> dict[str, Any]:
    """The dict a `torch.save` checkpoint (.pt) holds; refuses a missing, truncated or foreign one by name (torch's
    own errors name neither the file nor what to do)."""
    import pickle
    import zipfile

    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} is missing")
    try:
        state = torch.load(path, map_location=device, weights_only=weights_only)
    except (RuntimeError, pickle.UnpicklingError, EOFError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        reason = str(exc).split(". ")[0].splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"checkpoint {path} is unreadable (truncated, corrupted or not a torch checkpoint: "
                         f"{reason}); restore it or retrain") from None
    if not isinstance(state, dict):
        raise ValueError(f"checkpoint {path} holds a {type(state).__name__}, not a robot_rl checkpoint (a dict)")
    return state


def load_card(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON object of a card file; refuses a missing or malformed one by name."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"card {path} is missing")
    try:
        card = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"card {path} is not valid JSON ({exc})") from None
    if not isinstance(card, dict):
        raise ValueError(f"card {path} must hold a JSON object, not {type(card).__name__}")
    return card
