"""Launch compiled kernels on PyTorch's current CUDA stream with torch tensors as arguments (no copies)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

_NULL = np.uint64(0)
_cupy_streams: dict[tuple[int, int], Any] = {}


def pointer(t: torch.Tensor | None) -> np.uint64:
    """A device pointer kernel argument; None becomes a null pointer."""
    return _NULL if t is None else np.uint64(t.data_ptr())


def as_args(values: Sequence[Any]) -> tuple:
    """Kernel arguments: tensors and None become pointers, Python ints int32, floats float32."""
    args = []
    for v in values:
        kind = type(v)
        if v is None:
            args.append(_NULL)
        elif kind is int:
            if not -(2**31) <= v < 2**31:
                raise OverflowError(f"kernel int argument {v} does not fit in int32")
            args.append(np.int32(v))
        elif isinstance(v, torch.Tensor):
            args.append(np.uint64(v.data_ptr()))
        elif kind is bool:
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


def _cupy_stream(stream: torch.cuda.Stream) -> Any:
    """The CuPy view of a torch stream, made once per (device, stream handle)."""
    key = (stream.device_index, stream.cuda_stream)
    found = _cupy_streams.get(key)
    if found is None:
        import cupy

        found = _cupy_streams[key] = cupy.cuda.ExternalStream(stream.cuda_stream, stream.device_index)
    return found


def launch(kernel: Any, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any], shared_mem: int = 0,
           device: torch.device | None = None, stream: torch.cuda.Stream | None = None) -> None:
    """Launch `kernel` (a `cupy.RawKernel`) on `stream` (default: torch's current stream of `device`, itself
    defaulting to the current device).

    When the stream's device is CuPy's current device, the kernel's `cupy.cuda.function.Function` is launched
    with the stream passed explicitly (no device or stream context switches: a few microseconds per call);
    otherwise both contexts are entered first."""
    import cupy

    if stream is None:
        stream = torch.cuda.current_stream(device)
    cupy_stream = _cupy_stream(stream)
    if cupy.cuda.runtime.getDevice() == stream.device_index:
        kernel.kernel(tuple(grid), tuple(block), as_args(args), shared_mem, cupy_stream)
        return
    with cupy.cuda.Device(stream.device_index), cupy_stream:
        kernel(tuple(grid), tuple(block), as_args(args), shared_mem=shared_mem)
