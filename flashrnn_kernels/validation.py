"""Input checks for `flashrnn`: shapes in [B, T, G, NH, DH] terms, dtypes, devices, contiguity."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .cells import CellSpec

FUSED_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
REFERENCE_DTYPES: tuple[torch.dtype, ...] = FUSED_DTYPES + (torch.float64,)


@dataclass(frozen=True)
class Shape:
    """Extents of one recurrent problem."""

    batch: int  # B
    steps: int  # T
    gate_count: int  # G
    head_count: int  # NH
    head_dim: int  # DH
    state_count: int  # S


def _expect(name: str, tensor: Tensor, layout: str, expected: tuple[int, ...]) -> None:
    if tuple(tensor.shape) != expected:
        raise ValueError(f"{name} must have shape {layout} = {list(expected)}, got {list(tensor.shape)}")


def check_shapes(Wx: Tensor, R: Tensor, b: Tensor, states: Tensor | None, cell: CellSpec) -> Shape:
    """Shapes consistent with Wx [B, T, G, NH, DH] and the cell's gate and state counts."""
    for name, tensor in (("Wx", Wx), ("R", R), ("b", b), ("states", states)):
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if Wx.dim() != 5:
        raise ValueError(
            f"Wx must be 5-D [B, T, G, NH, DH] (G={cell.gate_count} gates {cell.gates} for cell {cell.name!r}), "
            f"got {Wx.dim()}-D shape {list(Wx.shape)}"
        )
    B, T, G, NH, DH = Wx.shape
    if G != cell.gate_count:
        raise ValueError(
            f"Wx has G={G} on axis 2 of [B, T, G, NH, DH] but cell {cell.name!r} has {cell.gate_count} gates "
            f"{cell.gates}; got shape {list(Wx.shape)}"
        )
    if min(B, T, NH, DH) < 1:
        raise ValueError(f"Wx [B, T, G, NH, DH] needs every extent >= 1, got {list(Wx.shape)}")
    _expect("R", R, "[G, NH, DH, DH]", (G, NH, DH, DH))
    _expect("b", b, "[G, NH, DH]", (G, NH, DH))
    S = cell.state_count
    if states is not None:
        _expect("states", states, f"[S, B, NH, DH] (S={S} states {cell.states})", (S, B, NH, DH))
    return Shape(B, T, G, NH, DH, S)


def check_same_dtype_and_device(tensors: dict[str, Tensor]) -> None:
    """All tensors on one device with one dtype (pass dtype= to flashrnn to cast)."""
    first_name, first = next(iter(tensors.items()))
    for name, tensor in tensors.items():
        if tensor.device != first.device:
            raise ValueError(
                f"{name} is on {tensor.device} but {first_name} is on {first.device}; move all inputs to one device"
            )
        if tensor.dtype != first.dtype:
            raise TypeError(
                f"{name} has dtype {tensor.dtype} but {first_name} has {first.dtype}; "
                "use one dtype for all inputs or pass dtype= to cast them"
            )


def check_contiguous(tensors: dict[str, Tensor]) -> None:
    """Every tensor contiguous in row-major order (the kernels index with fixed strides)."""
    for name, tensor in tensors.items():
        if not tensor.is_contiguous():
            raise ValueError(
                f"{name} is not contiguous (shape {list(tensor.shape)}, strides {list(tensor.stride())}); "
                f"call {name}.contiguous() first"
            )


def check_dtype(dtype: torch.dtype, backend: str) -> None:
    """The dtype is one the backend computes in."""
    allowed = FUSED_DTYPES if backend in ("fused", "alternating") else REFERENCE_DTYPES
    if dtype not in allowed:
        raise TypeError(f"backend {backend!r} supports dtypes {[str(d) for d in allowed]}, got {dtype}")
