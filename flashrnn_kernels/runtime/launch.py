"""Launch compiled kernels on PyTorch's current CUDA stream with torch tensors as arguments (no copies)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch


def pointer(t: torch.Tensor | None) -> np.uint64:
    """A device pointer kernel argument; None becomes a null pointer."""
    return np.uint64(0 if t is None else t.data_ptr())


def as_args(values: Sequence[Any]) -> tuple:
    """Kernel arguments: tensors and None become pointers, Python ints int32, floats float32."""
    args = []
    for v in values:
        if v is None or isinstance(v, torch.Tensor):
            args.append(pointer(v))
        elif isinstance(v, bool):
            args.append(np.int32(int(v)))
        elif isinstance(v, int):
            if not -(2**31) <= v < 2**31:
                raise OverflowError(f"kernel int argument {v} does not fit in int32")
            args.append(np.int32(v))
        elif isinstance(v, float):
            args.append(np.float32(v))
        else:
            args.append(v)
    return tuple(args)


def launch(kernel: Any, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any], shared_mem: int = 0,
           device: torch.device | None = None) -> None:
    """Launch `kernel` on torch's current stream of `device` (default: the current device)."""
    import cupy

    stream = torch.cuda.current_stream(device)
    with cupy.cuda.Device(stream.device_index), cupy.cuda.ExternalStream(stream.cuda_stream, stream.device_index):
        kernel(tuple(grid), tuple(block), as_args(args), shared_mem=shared_mem)
