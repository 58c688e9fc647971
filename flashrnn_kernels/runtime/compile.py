"""Compile rendered CUDA sources with CuPy (NVRTC) for the current device, cached by content.

A kernel is identified by (source, options, device architecture): the in-memory cache is keyed on the sha256 of
those; CuPy keeps the compiled cubin on disk under the same content. The options carry a digest of the package's
headers (`.cuh`), so an edited header retires cubins cached on disk from its older text. Compile errors raise
`CompileError` with the compiler log and the path of the dumped source, so a failing plan can be reproduced with
nvcc.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import multiprocessing
import os
import tempfile
from pathlib import Path
from typing import Any

KERNEL_DIR = Path(__file__).resolve().parent.parent
"""Package root: `#include "cells/ops.cuh"` style includes resolve against it."""


def headers_digest(root: Path = KERNEL_DIR) -> str:
    """sha256 prefix of every `.cuh` header under `root` (names and contents): the included text a source's own
    hash does not cover."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.cuh")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


DEFAULT_OPTIONS: tuple[str, ...] = ("-std=c++17", f"-I{KERNEL_DIR}", f"-DFLASHRNN_HEADERS=0x{headers_digest()}")

_modules: dict[str, Any] = {}


class CompileError(RuntimeError):
    """NVRTC rejected a rendered source; carries the log and where the source was written."""

    def __init__(self, message: str, log: str, source_path: Path):
        super().__init__(f"{message}\nsource: {source_path}\n{log}")
        self.log = log
        self.source_path = source_path


def _cupy():
    try:
        import cupy
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise RuntimeError(
            "the fused CUDA kernels need CuPy: pip install 'flashrnn-kernels[gpu]' (cupy-cuda13x), "
            "or use backend='reference'"
        ) from exc
    return cupy


def device_arch() -> str:
    """The current CUDA device's architecture, e.g. 'sm_90'."""
    cupy = _cupy()
    return f"sm_{cupy.cuda.Device().compute_capability}"


def source_key(source: str, options: tuple[str, ...], arch: str) -> str:
    """Content hash naming one compiled module."""
    digest = hashlib.sha256()
    for part in (source, "\0".join(options), arch):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def dump_source(source: str, key: str) -> Path:
    """Write a rendered source where a developer can compile it by hand; returns the path."""
    directory = Path(os.environ.get("FLASHRNN_DUMP_DIR", Path(tempfile.gettempdir()) / "flashrnn_kernels"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key[:16]}.cu"
    path.write_text(source)
    return path


def load_module(source: str, options: tuple[str, ...] = ()) -> Any:
    """Compile `source` (or fetch it from the cache) as a `cupy.RawModule` for the current device."""
    cupy = _cupy()
    all_options = DEFAULT_OPTIONS + tuple(options)
    key = source_key(source, all_options, device_arch())
    module = _modules.get(key)
    if module is not None:
        return module
    if os.environ.get("FLASHRNN_DUMP_SOURCES"):
        dump_source(source, key)
    module = cupy.RawModule(code=source, options=all_options, backend="nvrtc")
    try:
        module.compile()
    except cupy.cuda.compiler.CompileException as exc:
        raise CompileError("NVRTC failed to compile a rendered kernel", str(exc), dump_source(source, key)) from exc
    _modules[key] = module
    return module


def allow_dynamic_smem(kernel: Any, dynamic_smem: int) -> Any:
    """`kernel` (a `cupy.RawKernel`) with its dynamic shared-memory limit raised to `dynamic_smem` bytes where it is
    lower (the default limit is 48 KiB minus the kernel's static shared memory)."""
    if kernel.max_dynamic_shared_size_bytes < dynamic_smem:
        kernel.max_dynamic_shared_size_bytes = dynamic_smem
    return kernel


def get_kernel(source: str, name: str, options: tuple[str, ...] = (), dynamic_smem: int = 0,
               device: int | None = None) -> Any:
    """A `cupy.RawKernel` from a module compiled for CUDA device `device` (default: the current one), allowed
    `dynamic_smem` bytes of dynamic shared memory there.

    A kernel's attributes belong to its function on one device (CuPy loads a module once per device and sets an
    attribute on the current device's function), so a kernel launched on several devices is fetched once for each."""
    cupy = _cupy()
    with cupy.cuda.Device(device):
        return allow_dynamic_smem(load_module(source, options).get_function(name), dynamic_smem)


def _compile_only(source: str, options: tuple[str, ...]) -> None:
    load_module(source, options)


def precompile(sources: list[str], options: tuple[str, ...] = (), workers: int | None = None) -> None:
    """Compile `sources` in parallel worker processes (one per CPU by default), so that CuPy's disk cache holds their
    cubins and the calling process loads them without compiling (sweeps over many kernel variants). The workers are
    spawned, so they import the calling script: its own work belongs under `if __name__ == "__main__":`."""
    todo = sorted(set(sources))
    if len(todo) < 2:
        for source in todo:
            load_module(source, options)
        return
    context = multiprocessing.get_context("spawn")  # a forked child cannot use the parent's CUDA context
    with concurrent.futures.ProcessPoolExecutor(workers or os.cpu_count(), mp_context=context) as pool:
        list(pool.map(_compile_only, todo, [options] * len(todo)))  # raises the first worker's CompileError
