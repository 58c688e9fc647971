"""Input checks for `flashrnn`: shapes in [B, T, G, NH, DH] terms, dtypes, devices, contiguity."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .cells import CellSpec, get_cell
from .fused.problem import dtype_name

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


def check_positive_ints(**sizes: object) -> None:
    """Every keyword a positive int (bools refused), else a ValueError naming it."""
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_parameter_dtype(dtype: object) -> None:
    """None or a dtype the modules' parameters may have (REFERENCE_DTYPES), else a TypeError naming them."""
    if dtype is not None and dtype not in REFERENCE_DTYPES:
        raise TypeError(f"dtype must be one of {[str(d) for d in REFERENCE_DTYPES]} or None "
                        f"for torch's default, got {dtype!r}")


def _expect(name: str, tensor: Tensor, layout: str, expected: tuple[int, ...]) -> None:
    if tuple(tensor.shape) != expected:
        raise ValueError(f"{name} must have shape {layout} = {list(expected)}, got {list(tensor.shape)}")


def check_shapes(Wx: Tensor, R: Tensor, b: Tensor, states: Tensor | None, cell: CellSpec) -> Shape:
    """Shapes consistent with Wx [B, T, G, NH, DH] and the cell's gate and state counts."""
    if states is not None and not isinstance(states, Tensor):
        raise TypeError(f"states must be a torch.Tensor (or None for zeros), got {type(states).__name__}")
    for name, tensor in (("Wx", Wx), ("R", R), ("b", b)):
        if not isinstance(tensor, Tensor):
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


def check_kernel_inputs(Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: str, *,
                        contiguous: bool) -> tuple[int, int, int, int]:
    """Cheap re-check of a CUDA backend's preconditions (`flashrnn` validates in full): the shapes of `cell`, one
    CUDA device and one supported dtype, every extent >= 1 and, when `contiguous`, contiguous tensors.
    Returns (B, T, NH, DH)."""
    spec = get_cell(cell)
    G, S = spec.gate_count, spec.state_count
    if Wx.dim() != 5:
        raise ValueError(f"Wx must be [B, T, G, NH, DH], got shape {tuple(Wx.shape)}")
    B, T, _, NH, DH = Wx.shape
    expected = {"Wx": (B, T, G, NH, DH), "R": (G, NH, DH, DH), "b": (G, NH, DH), "states": (S, B, NH, DH)}
    for name, t in (("Wx", Wx), ("R", R), ("b", b), ("states", states)):
        if tuple(t.shape) != expected[name]:
            raise ValueError(f"{name} must have shape {expected[name]} for cell {cell!r}, got {tuple(t.shape)}")
        if not t.is_cuda or t.device != Wx.device:
            raise ValueError(f"{name} must be a CUDA tensor on {Wx.device}, got {t.device}")
        if t.dtype != Wx.dtype:
            raise ValueError(f"{name} has dtype {t.dtype}; all inputs must share Wx's dtype {Wx.dtype}")
        if contiguous and not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous; call .contiguous() first")
    dtype_name(Wx.dtype)
    if min(B, T, NH, DH) < 1:
        raise ValueError(f"Wx [B, T, G, NH, DH] needs every extent >= 1, got {tuple(Wx.shape)}")
    return B, T, NH, DH
