"""`torch.compile`d variants of an agent's loss methods, falling back to eager on a compiler failure.

SAC and PPO compile their losses through this one class, so the fallback (logged once, naming the
cause and the cache to delete, visible in `active`) is the same everywhere.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Sequence

import torch

from robot_rl import device as device_utils

log = logging.getLogger(__name__)


class CompiledMethods:
    """Calls `owner.<name>(*args)` through `torch.compile` while `active`; eager otherwise."""

    def __init__(self, owner: Any, names: Sequence[str], device: torch.device, enabled: bool,
                 differentiates: bool = False) -> None:
        self.owner = owner
        self._compiled: dict[str, Any] = {}
        # Methods that call torch.autograd.grad trace it into their graph instead of breaking there.
        self._config = (torch._dynamo.config.patch(trace_autograd_ops=True) if differentiates
                        else contextlib.nullcontext())
        if enabled:
            device_utils.remove_broken_compiled_kernels()
            mode = "reduce-overhead" if device.type == "cuda" else None  # CUDA graphs on GPU
            # Compiled code draws its random numbers as eager code does: same seed, same run.
            torch._inductor.config.fallback_random = True
            self._compiled = {name: torch.compile(getattr(owner, name), mode=mode) for name in names}

    @property
    def active(self) -> bool:
        """True while the methods run compiled: compiling was asked for and no compiler failure fell back."""
        return bool(self._compiled)

    def __call__(self, name: str, *args):
        compiled = self._compiled.get(name)
        if compiled is not None:
            try:
                with self._config:
                    return compiled(*args)
            except Exception as exc:  # noqa: BLE001 - any backend failure -> eager, same math
                cause = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
                log.warning("torch.compile of %s failed (%s: %s); running eagerly (same math, slower). If every run "
                            "says this, delete the torch.compile cache %s", name, type(exc).__name__, cause[:300],
                            device_utils.inductor_cache_dir())
                self._compiled.clear()
        return getattr(self.owner, name)(*args)
