"""`torch.compile`d variants of an agent's loss methods, falling back to eager on a compiler failure.

SAC and PPO compile their losses through this one class, so the fallback (logged once, naming the
cause and the cache to delete, visible in `active`) is the same everywhere. On CPU the generated code
of methods that differentiate inside their graph (SAC's training step) is driven by inductor's C++
wrapper, unless a graph holds an op without a C kernel (then by its Python wrapper, which calls such
ops safely).
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
        self.owner, self.device = owner, device
        self._compiled: dict[str, Any] = {}
        # Methods that call torch.autograd.grad trace it into their graph instead of breaking there.
        self._config = (torch._dynamo.config.patch(trace_autograd_ops=True) if differentiates
                        else contextlib.nullcontext())
        # Only where a call is the whole graph: a backward graph compiled lazily, at the first backward pass, would
        # be generated outside the check for ops without a C kernel (`_refusing_python_fallbacks`).
        self._cpp_wrapper = device.type == "cpu" and differentiates
        if enabled:
            device_utils.remove_broken_compiled_kernels()
            # Compiled code draws its random numbers as eager code does: same seed, same run.
            torch._inductor.config.fallback_random = True
            self._compiled = {name: self._compile(name, self._cpp_wrapper) for name in names}

    def _compile(self, name: str, cpp_wrapper: bool):
        # CUDA graphs on GPU. On CPU a C++ wrapper calls the kernels and allocates the buffers instead of Python:
        # a SAC training step launches ~50 kernels and ~300 buffers (1.1x updates/s at 2 critics).
        how = dict(mode="reduce-overhead") if self.device.type == "cuda" else dict(options={"cpp_wrapper": cpp_wrapper})
        return torch.compile(getattr(self.owner, name), **how)

    @property
    def active(self) -> bool:
        """True while the methods run compiled: compiling was asked for and no compiler failure fell back."""
        return bool(self._compiled)

    def __call__(self, name: str, *args):
        compiled = self._compiled.get(name)
        if compiled is not None:
            try:
                with self._config, _refusing_python_fallbacks(self._cpp_wrapper):
                    return compiled(*args)
            except Exception as exc:  # noqa: BLE001 - any backend failure -> eager, same math
                if _caused_by(exc, _PythonFallback):
                    log.info("torch.compile of %s: %s; generating it with the Python wrapper", name,
                             _PythonFallback.__doc__)
                    self._cpp_wrapper = False
                    self._compiled = {n: self._compile(n, cpp_wrapper=False) for n in self._compiled}
                    return self(name, *args)
                cause = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
                log.warning("torch.compile of %s failed (%s: %s); running eagerly (same math, slower). If every run "
                            "says this, delete the torch.compile cache %s", name, type(exc).__name__, cause[:300],
                            device_utils.inductor_cache_dir())
                self._compiled.clear()
        return getattr(self.owner, name)(*args)


class _PythonFallback(RuntimeError):
    """an op has no C kernel, and the C++ wrapper would call it through Python"""


def _refuse_python_fallback(record: logging.LogRecord) -> bool:
    # Inductor says so while generating the wrapper, before anything runs; such a call crashed a SAC step
    # (_foreach_norm, torch 2.13), so the graph is generated again with the Python wrapper instead.
    if "missing a c-shim implementation" in record.getMessage():
        raise _PythonFallback(record.getMessage())
    return True


@contextlib.contextmanager
def _refusing_python_fallbacks(active: bool):
    logger = logging.getLogger("torch._inductor.ir")
    if active:
        logger.addFilter(_refuse_python_fallback)
    try:
        yield
    finally:
        logger.removeFilter(_refuse_python_fallback)


def _caused_by(exc: BaseException | None, kind: type) -> bool:
    """Whether `exc` or an exception it wraps (inductor wraps what its passes raise) is a `kind`."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "inner_exception", None)
    return False
