"""The public ``flashrnn`` package (1.0.8) as an anchor, in the same head-wise layout as ours.

Its hardware query compiles a torch extension that does not build on CUDA 13; :func:`load` replaces it
with :func:`device_info`, which reads the same four limits from torch (CuPy for any torch lacks).
Its ``flashrnn(Wx, R, b, states, function, backend, dtype)`` takes ``Wx [B,T,4,NH,DH]``,
``R [4,NH,DH_out,DH_in]``, ``b [4,NH,DH]`` and ``states [S,B,1,NH,DH]``, and returns every state of every
step ``[S,B,T,NH,DH]`` plus the last ``[S,B,1,NH,DH]``; gates in the order input, forget, candidate, output.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch

MODULE = "flashrnn.flashrnn.flashrnn"
BACKENDS = ("cuda_fused", "cuda", "triton_fused")
_DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def device_info(device_id: int) -> dict:
    """The limits flashrnn's planner reads, for CUDA device ``device_id``."""
    props = torch.cuda.get_device_properties(device_id)
    info = {
        "maxThreadsPerBlock": getattr(props, "max_threads_per_block", None),
        "regsPerMultiprocessor": getattr(props, "regs_per_multiprocessor", None),
        "multiProcessorCount": props.multi_processor_count,
        "sharedMemPerBlockOptin": getattr(props, "shared_memory_per_block_optin", None),
    }
    if None in info.values():
        import cupy

        runtime = cupy.cuda.runtime.getDeviceProperties(device_id)
        info = {key: value if value is not None else int(runtime[key]) for key, value in info.items()}
    return info


def load() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """Import flashrnn, patch its hardware query, and return its ``flashrnn`` function."""
    module = importlib.import_module(MODULE)
    module.get_gpu_info = device_info
    return module.flashrnn


def make_runner(backend: str = "cuda_fused") -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """A function ``(Wx, R, b, states) -> (h, last_states)`` in our layout that calls flashrnn's ``backend``."""
    if backend not in BACKENDS:
        raise ValueError(f"flashrnn backend {backend!r} is not one of {BACKENDS}")
    flashrnn = load()

    def run(Wx: torch.Tensor, R: torch.Tensor, b: torch.Tensor, states: torch.Tensor):
        if Wx.dtype not in _DTYPE_NAMES:
            raise ValueError(f"flashrnn anchor takes bf16, fp16 or fp32 inputs, got {Wx.dtype}")
        all_states, last = flashrnn(
            Wx, R, b, states.unsqueeze(2), function="lstm", backend=backend, dtype=_DTYPE_NAMES[Wx.dtype]
        )
        return all_states[0], last[:, :, 0]

    return run
