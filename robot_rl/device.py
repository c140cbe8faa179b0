"""Torch device names: one check for every place a user names a device (learner, training loops,
reward node), and the learners' process-level CPU memory setting. Torch is imported only when a
name needs it, so light modules can use this."""

from __future__ import annotations

import functools
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


_GLIBC_M_TRIM_THRESHOLD, _GLIBC_M_MMAP_THRESHOLD = -1, -3


@functools.cache  # once per process: finding libc runs ldconfig (~4 ms) and the setting stays
def reuse_freed_cpu_memory() -> bool:
    """Makes glibc's malloc keep freed blocks for reuse instead of handing them back to the OS.

    Torch's CPU allocator does not cache: every activation of a few MB is a fresh mmap (or heap
    growth) whose pages fault in, zeroed, on first touch, and is unmapped again when freed. A
    learner allocates the same sizes every update, so it pays ~1,800 page faults per SAC update
    (10 critics, batch 256; 30 % of the update on a 2-core CPU). Blocks up to 32 MiB now come from
    the heap and up to 128 MiB of freed memory per arena is kept (resident memory stays near its peak).
    A process-wide setting, so call it in learner processes; it changes no result. Returns False
    where the C library is not glibc (nothing changed there).
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    # Setting the mmap threshold also stops glibc from adjusting it dynamically. The trim threshold applies to each
    # of malloc's arenas (one per thread that allocates, up to 8 per core), so at 1 GiB a learner whose transport
    # threads churn through multi-MB pixel payloads may keep a GiB free per arena; 128 MiB holds an update's
    # working set and bounds what the arenas keep.
    return bool(mallopt(_GLIBC_M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(_GLIBC_M_TRIM_THRESHOLD, 128 << 20))


def _cpuinfo_field(name: str) -> str | None:
    """The value of the first `name` line of /proc/cpuinfo, or None where there is none (not Linux, or a kernel that
    does not list it)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith(name)), None)
    except OSError:
        return None


def cpu_model() -> str:
    """This machine's CPU model name, e.g. "Intel(R) Xeon(R) Processor" (for benchmark rows: a figure measured on
    one CPU is compared with another's only when named so)."""
    import platform

    return _cpuinfo_field("model name") or platform.processor() or "unknown CPU"


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags the kernel lists for this machine's CPU (empty where it lists none)."""
    return frozenset((_cpuinfo_field("flags") or "").split())


def cpu_has_native_bf16() -> bool:
    """Whether this CPU runs bfloat16 matmuls natively (AVX512-BF16 or AMX), where `precision: auto` trains in
    bfloat16: two VMs of the same model name ran the learner 29-41 and 62-74 updates/s (the faster one has it), so
    a benchmark row says which kind it ran on."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


_ELF_MAGIC = b"\x7fELF"


def inductor_cache_dir():
    """Where torch.compile (inductor) keeps its compiled kernels: shared by every process of the user."""
    from pathlib import Path

    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir())


@functools.cache  # once per process: the scan is cheap, but a second one finds nothing new
def remove_broken_compiled_kernels() -> list:
    """Deletes kernel libraries in the inductor cache that are not ELF files, so inductor rebuilds them.

    A process killed while inductor links a kernel (Ctrl-C or a timeout in a run's first minute)
    leaves an empty `.so` under its final name. Inductor trusts that name, so every later compile
    that needs the kernel fails ('invalid ELF header') in every run and benchmark of the user.
    Returns the deleted paths.
    """
    import logging

    root = inductor_cache_dir()
    removed = []
    for path in root.rglob("*.so") if root.is_dir() else ():
        try:
            with open(path, "rb") as f:
                intact = f.read(4) == _ELF_MAGIC
            if not intact:
                path.unlink()
                removed.append(path)
        except OSError:  # another process is replacing it, or it is not ours to delete
            continue
    if removed:
        logging.getLogger(__name__).warning(
            "removed %d broken compiled kernel(s) from the torch.compile cache %s (left by a process killed "
            "mid-compile); they are rebuilt", len(removed), root)
    return removed
