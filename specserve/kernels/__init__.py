"""Native CPU kernels: packed-weight matrix multiplies and a fused decoder forward.

`mode()` says which implementation the serving forwards use:
  * "native": the C++ kernels in native/ (compiled once per machine, see build.py);
  * "torch": plain PyTorch operations (any device; also the reference the native path is tested against).
`configure(kernels="auto"|"native"|"torch", threads=N)` sets it for the process; "auto" uses the native
kernels when they build and the model is on the CPU. SPECSERVE_KERNELS sets the default.
"""
from __future__ import annotations

import ctypes
import logging
import os

from ..errors import OptionError
from .build import KernelBuildError, library_path
from .capi import (ABI_VERSION, FEATURE_AMX, FEATURE_AVX2, FEATURE_AVX512_BF16, FEATURE_AVX512_VNNI,
                   bind)
from .threads import default_threads

log = logging.getLogger("specserve.kernels")
KERNEL_MODES = ("auto", "native", "torch")

_state = {"requested": os.environ.get("SPECSERVE_KERNELS", "auto"), "lib": None, "error": None, "threads": None}


def _load():
    if _state["lib"] is None and _state["error"] is None:
        try:
            lib = bind(str(library_path()))
            if lib.ss_version() != ABI_VERSION:
                raise KernelBuildError(f"kernel library version {lib.ss_version()} != {ABI_VERSION}")
            _state["lib"] = lib
        except (KernelBuildError, OSError) as exc:
            _state["error"] = str(exc)
    return _state["lib"]


def configure(kernels: str | None = None, threads: int | None = None) -> None:
    """Choose the kernels (auto/native/torch) and the CPU thread count (0 = the physical cores; None
    keeps the process's setting, which is the physical cores until something sets it)."""
    if kernels is not None:
        if kernels not in KERNEL_MODES:
            raise OptionError(f"--kernels must be one of {', '.join(KERNEL_MODES)}, got {kernels!r}")
        _state["requested"] = kernels
        if kernels == "native" and _load() is None:
            raise OptionError(f"--kernels native: the native kernels are unavailable: {_state['error']}")
    if threads is not None:
        set_threads(threads)
    elif _state["threads"] is None:
        set_threads(0)


def set_threads(threads: int) -> int:
    """Threads for PyTorch and the native kernels; 0 picks the physical cores this process may use."""
    import torch
    n = threads if threads and threads > 0 else default_threads()
    _state["threads"] = n
    lib = _load() if _state["requested"] != "torch" else None
    if lib is not None:
        # the kernels do the heavy work on their own threads; PyTorch's pool would only compete
        # with them for the same cores on the small operations left to it (sampling, norms of a few rows)
        lib.ss_set_threads(n)
        torch.set_num_threads(1)
    else:
        torch.set_num_threads(n)
    return n


def threads() -> int:
    """The compute threads in use (set by set_threads; the physical cores by default)."""
    return _state["threads"] or default_threads()


def requested() -> str:
    """The configured choice: auto, native or torch."""
    return _state["requested"]


def mode() -> str:
    """'native' or 'torch' for CPU models under the current configuration."""
    requested = _state["requested"]
    if requested == "torch":
        return "torch"
    if _load() is None:
        if requested == "native":
            raise OptionError(f"the native kernels are unavailable: {_state['error']}")
        log.warning("native kernels unavailable, using PyTorch operations: %s", _state["error"])
        _state["requested"] = "torch"
        return "torch"
    return "native"


def use_native_kernels(device, quant: str | None = None) -> bool:
    """Whether a model on `device` serves through the native kernels (weight quantization needs them)."""
    if getattr(device, "type", str(device)) != "cpu" or mode() != "native":
        if quant:
            raise OptionError(f"quantization ({quant}) needs the native CPU kernels "
                              f"(kernels: {_state['requested']}, device: {device})")
        return False
    return True


def library():
    """The bound library (ctypes.CDLL); raises KernelBuildError when it cannot be built."""
    lib = _load()
    if lib is None:
        raise KernelBuildError(_state["error"])
    return lib


def pool_stats() -> dict:
    """The kernels' thread pool: jobs run, jobs run on the calling thread alone because another
    process was taking a core, and how many times that happened."""
    values = (ctypes.c_int64 * 3)()
    library().ss_pool_stats(values)
    return {"jobs": values[0], "solo_jobs": values[1], "solo_periods": values[2]}


def has_bf16_dot() -> bool:
    """Whether bf16 weights meet rows rounded to bf16 in bf16 dot products (AVX-512 BF16)."""
    return bool(library().ss_features() & FEATURE_AVX512_BF16)


def has_bf16_weights() -> bool:
    """Whether bf16 weights stay bf16 in memory: bf16 dot products, or (AVX2) widened in registers
    and multiplied into float32 rows; elsewhere they are stored as float32."""
    return bool(library().ss_features() & (FEATURE_AVX512_BF16 | FEATURE_AVX2))


def has_amx() -> bool:
    """Whether bf16 products of many rows run on AMX tiles (16 rows cost about what one does)."""
    return bool(library().ss_features() & FEATURE_AMX)


def has_int8_dot() -> bool:
    """Whether q8 weights run on int8 dot-product instructions (AVX-512 VNNI, or AVX2's vpmaddubsw;
    elsewhere they take a slow portable path)."""
    return bool(library().ss_features() & (FEATURE_AVX512_VNNI | FEATURE_AVX2))
