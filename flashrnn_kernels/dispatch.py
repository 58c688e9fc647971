"""`flashrnn`: the public recurrent op, and the single decision between the fused kernel, the alternating backend
and the reference."""
from __future__ import annotations

import functools
import importlib.util
import warnings

import torch
from torch import Tensor

from .autocast import autocast_dtype, cast_eligible
from .cells import CELLS, CellSpec, get_cell
from .fused.problem import HEAD_DIMS
from .fused.reference import flashrnn_reference
from .library import flashrnn_op
from .validation import (
    FUSED_DTYPES,
    Shape,
    check_contiguous,
    check_dtype,
    check_same_dtype_and_device,
    check_shapes,
)

BACKENDS: tuple[str, ...] = ("auto", "fused", "alternating", "reference")
FUSED_CELLS: frozenset[str] = frozenset({"lstm", "gru", "slstm", "elman"})
"""Cells the fused kernel implements; other cells run on the reference."""

_warned: set[str] = set()


class ReferenceFallbackWarning(UserWarning):
    """backend="auto" chose the (slow) pure-PyTorch reference; issued once per reason."""


@functools.cache
def _cupy_importable() -> bool:
    return importlib.util.find_spec("cupy") is not None


@functools.lru_cache(maxsize=1024)
def _planned_backend(cell: str, batch: int, num_heads: int, head_dim: int, dtype: torch.dtype, device_index: int,
                     training: bool) -> str:
    """`choose`'s backend: "fused" when the fused planner tiles this problem (both directions when training) and the
    alternating backend is not predicted much faster, else "alternating"."""
    from .alternating.choice import choose

    with torch.cuda.device(device_index):
        return choose(cell, batch, num_heads, head_dim, dtype, training=training, fused_cells=FUSED_CELLS).backend


def _require_cuda_kernel(backend: str, device: torch.device, cell: CellSpec, cells: frozenset[str] | None) -> None:
    if device.type != "cuda":
        raise ValueError(f"backend={backend!r} needs CUDA tensors, got tensors on {device}; move them with .cuda() "
                         "or use backend='reference'")
    registered = CELLS.get(cell.name) is cell and (cells is None or cell.name in cells)
    if not registered:
        known = sorted(cells if cells is not None else CELLS)
        raise ValueError(f"backend={backend!r} has no kernel for cell {cell.name!r}; {backend} cells: {known}; "
                         "use backend='reference'")


def choose_backend(backend: str, device: torch.device, dtype: torch.dtype, cell: CellSpec, head_dim: int,
                   batch: int | None = None, num_heads: int | None = None, training: bool = True) -> str:
    """"fused", "alternating" or "reference" for these inputs.

    "auto" on CUDA takes the fused kernel when the planner tiles the problem (batch and num_heads given), the
    alternating backend when it cannot (R too large for the chip, or a head_dim the fused kernel does not render) or
    when that is predicted much faster (alternating.choose),
    and warns once per reason when it falls back to the reference (CPU tensors, a custom CellSpec, a dtype the
    kernels do not compute in, no CuPy). Under torch.compile it takes the fused kernel's custom op without asking
    the planner, or the alternating backend's where the fused kernel does not apply."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid backends: {list(BACKENDS)}")
    if backend == "reference":
        return "reference"
    if backend in ("fused", "alternating"):
        _require_cuda_kernel(backend, device, cell, FUSED_CELLS if backend == "fused" else None)
        return backend
    reason = None
    if device.type != "cuda":
        reason = f"inputs are on {device} and the CUDA kernels need a GPU"
    elif CELLS.get(cell.name) is not cell:
        reason = f"cell {cell.name!r} is a custom CellSpec; the CUDA kernels are built for {sorted(CELLS)}"
    elif dtype not in FUSED_DTYPES:
        reason = f"the CUDA kernels do not support {dtype} (supported: {[str(d) for d in FUSED_DTYPES]})"
    elif not _cupy_importable():
        reason = "CuPy is not installed (pip install 'flashrnn-kernels[gpu]')"
    if reason is None:
        fused = cell.name in FUSED_CELLS and head_dim in HEAD_DIMS
        if torch.compiler.is_compiling():  # traced once per shape: the custom op of one of the two CUDA backends
            return "fused" if fused else "alternating"
        if not fused:
            return "alternating"
        if batch is None or num_heads is None:
            return "fused"
        index = device.index if device.index is not None else torch.cuda.current_device()
        return _planned_backend(cell.name, batch, num_heads, head_dim, dtype, index, training)
    if reason not in _warned and not torch.compiler.is_compiling():
        _warned.add(reason)
        warnings.warn(
            f"flashrnn backend='auto' runs the pure-PyTorch reference loop (slow): {reason}",
            ReferenceFallbackWarning,
            stacklevel=4,  # the caller of flashrnn (flashrnn -> _run -> choose_backend)
        )
    return "reference"


def flashrnn(
    Wx: Tensor,
    R: Tensor,
    b: Tensor,
    states: Tensor | None = None,
    cell: str | CellSpec = "lstm",
    backend: str = "auto",
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """Run a recurrent cell over a sequence with block-diagonal (per-head) recurrent weights.

    Wx: [B, T, G, NH, DH] input projection (precomputed); R: [G, NH, DH, DH] (gate, head, out, in);
    b: [G, NH, DH]; states: [S, B, NH, DH] initial states (zeros when None), ordered as the cell's states
    (LSTM: h, c; gates i, f, z, o as torch.nn.LSTM's i, f, g, o).
    cell: a name in `flashrnn_kernels.cells.CELLS` ("lstm", "gru", "slstm", "elman") or a CellSpec; the fused
    kernel implements the cells in FUSED_CELLS, the reference runs any cell.
    backend: "fused" (the persistent CUDA kernel), "alternating" (per step one cuBLAS GEMM and one pointwise kernel,
    replayed from a CUDA graph: for weights too large for the chip), "reference" (PyTorch loop, any device) or
    "auto" (on CUDA the fused kernel when the planner tiles the problem and does not predict the alternating
    backend much faster, else the alternating backend; the reference with a one-time warning for CPU tensors, custom
    CellSpecs or other dtypes).
    dtype: cast all inputs to it first. Under torch.autocast (dtype None) the fp32 / fp16 / bf16 inputs are cast
    to the autocast dtype, as torch's recurrent layers compute there (`flashrnn_kernels.autocast`).
    Returns (h [B, T, NH, DH], last_states [S, B, NH, DH]) in the dtype computed in; differentiable.
    torch.compile (fullgraph=True too) sees the fused kernel, the alternating backend and the reference on CPU as
    one custom op (`flashrnn_kernels.library`); a custom CellSpec, or the reference on CUDA, is traced as plain
    torch ops.
    """
    spec = get_cell(cell)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid backends: {list(BACKENDS)}")
    shape = check_shapes(Wx, R, b, states, spec)
    tensors = {"Wx": Wx, "R": R, "b": b} | ({} if states is None else {"states": states})
    check_contiguous(tensors)
    autocast = autocast_dtype(Wx.device) if dtype is None else None
    if dtype is not None:
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype such as torch.bfloat16, got {dtype!r}")
        tensors = {name: tensor.to(dtype) for name, tensor in tensors.items()}
    elif autocast is not None:
        tensors = {name: cast_eligible(tensor, autocast) for name, tensor in tensors.items()}
    check_same_dtype_and_device(tensors)
    if autocast is None:
        return _run(tensors, spec, backend, shape)
    with torch.autocast(Wx.device.type, enabled=False):
        return _run(tensors, spec, backend, shape)


def _run(tensors: dict[str, Tensor], spec: CellSpec, backend: str, shape: Shape) -> tuple[Tensor, Tensor]:
    """`flashrnn` on checked inputs of one dtype and device: the chosen backend's result."""
    Wx, R, b = tensors["Wx"], tensors["R"], tensors["b"]
    training = torch.is_grad_enabled() and any(t.requires_grad for t in tensors.values())
    chosen = choose_backend(backend, Wx.device, Wx.dtype, spec, shape.head_dim, shape.batch, shape.head_count,
                            training)
    check_dtype(Wx.dtype, chosen)
    states = tensors.get("states")
    if states is None:
        states = Wx.new_zeros(shape.state_count, shape.batch, shape.head_count, shape.head_dim)
    if chosen == "fused":
        from .fused.function import flashrnn_fused  # needs CuPy: imported only when the kernel runs

        return flashrnn_fused(Wx, R, b, states, spec.name)
    if chosen == "alternating":
        from .alternating.function import flashrnn_alternating  # needs CuPy

        return flashrnn_alternating(Wx, R, b, states, spec.name)
    if Wx.device.type == "cpu" and CELLS.get(spec.name) is spec:
        return flashrnn_op(Wx, R, b, states, spec.name)  # the custom op's CPU implementation is the reference
    return flashrnn_reference(Wx, R, b, states, spec)
