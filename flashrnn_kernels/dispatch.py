"""`flashrnn`: the public recurrent op, and the single decision between the fused CUDA kernel and the reference."""
from __future__ import annotations

import functools
import importlib.util
import warnings

import torch
from torch import Tensor

from .cells import CELLS, CellSpec, get_cell
from .fused.problem import HEAD_DIMS
from .fused.reference import flashrnn_reference
from .library import flashrnn_op
from .validation import FUSED_DTYPES, check_contiguous, check_dtype, check_same_dtype_and_device, check_shapes

BACKENDS: tuple[str, ...] = ("auto", "fused", "reference")
FUSED_CELLS: frozenset[str] = frozenset({"lstm", "gru", "slstm", "elman"})
"""Cells the fused kernel implements; other cells run on the reference."""

_warned: set[str] = set()


class ReferenceFallbackWarning(UserWarning):
    """backend="auto" chose the (slow) pure-PyTorch reference; issued once per reason."""


@functools.cache
def _cupy_importable() -> bool:
    return importlib.util.find_spec("cupy") is not None


def choose_backend(backend: str, device: torch.device, dtype: torch.dtype, cell: CellSpec, head_dim: int) -> str:
    """"fused" or "reference" for these inputs; "auto" warns once per reason when it falls back to the reference."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid backends: {list(BACKENDS)}")
    if backend == "reference":
        return "reference"
    registered = cell.name in FUSED_CELLS and get_cell(cell.name) is cell
    if backend == "fused":
        if device.type != "cuda":
            raise ValueError(
                f"backend='fused' needs CUDA tensors, got tensors on {device}; move them with .cuda() "
                "or use backend='reference'"
            )
        if not registered:
            raise ValueError(
                f"backend='fused' has no kernel for cell {cell.name!r}; fused cells: {sorted(FUSED_CELLS)}; "
                "use backend='reference'"
            )
        return "fused"
    reason = None
    if device.type != "cuda":
        reason = f"inputs are on {device} and the fused kernel needs CUDA"
    elif not registered:
        reason = f"the fused kernel does not implement cell {cell.name!r} (fused cells: {sorted(FUSED_CELLS)})"
    elif head_dim not in HEAD_DIMS:
        reason = f"the fused kernel does not support head_dim={head_dim} (supported: {list(HEAD_DIMS)})"
    elif dtype not in FUSED_DTYPES:
        reason = f"the fused kernel does not support {dtype} (supported: {[str(d) for d in FUSED_DTYPES]})"
    elif not _cupy_importable():
        reason = "CuPy is not installed (pip install 'flashrnn-kernels[gpu]')"
    if reason is None:
        return "fused"
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(
            f"flashrnn backend='auto' runs the pure-PyTorch reference loop (slow): {reason}",
            ReferenceFallbackWarning,
            stacklevel=3,
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
    backend: "fused" (CUDA kernel), "reference" (PyTorch loop, any device) or "auto" (fused for CUDA
    tensors whose cell, dtype and head dim the kernel supports, else the reference with a one-time warning).
    dtype: cast all inputs to it first.
    Returns (h [B, T, NH, DH], last_states [S, B, NH, DH]) in the inputs' dtype; differentiable.
    torch.compile (fullgraph=True too) sees the fused kernel, and the reference on CPU, as one custom op
    (`flashrnn_kernels.library`); a custom CellSpec, or the reference on CUDA, is traced as plain torch ops.
    """
    spec = get_cell(cell)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid backends: {list(BACKENDS)}")
    shape = check_shapes(Wx, R, b, states, spec)
    tensors = {"Wx": Wx, "R": R, "b": b} | ({} if states is None else {"states": states})
    check_contiguous(tensors)
    if dtype is not None:
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype such as torch.bfloat16, got {dtype!r}")
        tensors = {name: tensor.to(dtype) for name, tensor in tensors.items()}
    check_same_dtype_and_device(tensors)
    Wx, R, b = tensors["Wx"], tensors["R"], tensors["b"]
    chosen = choose_backend(backend, Wx.device, Wx.dtype, spec, shape.head_dim)
    check_dtype(Wx.dtype, chosen)
    states = tensors.get("states")
    if states is None:
        states = Wx.new_zeros(shape.state_count, shape.batch, shape.head_count, shape.head_dim)
    if chosen == "fused":
        from .fused.function import flashrnn_fused  # needs CuPy: imported only when the kernel runs

        return flashrnn_fused(Wx, R, b, states, spec.name)
    if Wx.device.type == "cpu" and CELLS.get(spec.name) is spec:
        return flashrnn_op(Wx, R, b, states, spec.name)  # the custom op's CPU implementation is the reference
    return flashrnn_reference(Wx, R, b, states, spec)
