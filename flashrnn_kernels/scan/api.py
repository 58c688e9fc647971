"""Public scan ops with input checks, run as the custom op `flashrnn_kernels::scan_forward`: CUDA tensors go to the
fused kernels, CPU tensors to the reference loop; differentiable and traceable by torch.compile. Under
torch.use_deterministic_algorithms(True) the kernels of long, thin problems (lanes split over blocks) are the ones
built to rerun to the bit; otherwise those agree to rounding from run to run."""
from __future__ import annotations

import torch

# the module object, not its names: library imports this package's reference and launcher in turn
from .. import library
from ..autocast import ELIGIBLE, autocast_dtype, cast_eligible, mixes, widest
from .function import TORCH_DTYPES

REFERENCE_DTYPES = (*TORCH_DTYPES, torch.float64)


def _check(names: tuple[str, ...], tensors: tuple[torch.Tensor, ...], h0: torch.Tensor | None) -> None:
    first = tensors[0]
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor [B, T, D], got {type(t).__name__}")
        if t.dim() != 3:
            raise ValueError(f"{name} must be [B, T, D] (3-D), got shape {tuple(t.shape)}")
        if t.shape != first.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but {names[0]} has {tuple(first.shape)}; "
                             "all inputs must have the same [B, T, D]")
        if t.device != first.device:
            raise ValueError(f"{name} is on {t.device} but {names[0]} is on {first.device}; use one device")
        if t.dtype != first.dtype:
            raise TypeError(f"{name} is {t.dtype} but {names[0]} is {first.dtype}; use one dtype")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous [B, T, D] (strides {t.stride()}); call .contiguous()")
    allowed = TORCH_DTYPES if first.is_cuda else REFERENCE_DTYPES
    if first.dtype not in allowed:
        raise TypeError(f"unsupported dtype {first.dtype} on {first.device}; use one of {tuple(allowed)}")
    if h0 is not None:
        B, _, D = first.shape
        if not isinstance(h0, torch.Tensor) or h0.shape != (B, D):
            shape = tuple(h0.shape) if isinstance(h0, torch.Tensor) else type(h0).__name__
            raise ValueError(f"h0 must be a [B, D] = [{B}, {D}] tensor, got {shape}")
        if h0.device != first.device or h0.dtype != first.dtype:
            raise TypeError(f"h0 is {h0.dtype} on {h0.device}; it must match the inputs ({first.dtype} on "
                            f"{first.device})")


def _autocast(inputs: tuple[torch.Tensor, ...],
              h0: torch.Tensor | None) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
    """(inputs, h0) as the scan takes them: under torch.autocast, inputs of mixed dtypes promoted to the widest of
    them and h0 cast to it (inputs of one dtype keep it); unchanged otherwise."""
    first = inputs[0]
    if not isinstance(first, torch.Tensor) or autocast_dtype(first.device) is None:
        return inputs, h0
    if not all(isinstance(t, torch.Tensor) and t.dtype in ELIGIBLE for t in inputs):
        return inputs, h0  # _check reports what is wrong
    dtype = widest([t.dtype for t in inputs])
    return tuple(t.to(dtype) for t in inputs), h0 if not isinstance(h0, torch.Tensor) else cast_eligible(h0, dtype)


def _scan(cell: str, names: tuple[str, ...], inputs: tuple[torch.Tensor, ...], h0: torch.Tensor | None) -> torch.Tensor:
    inputs, h0 = _autocast(inputs, h0)
    _check(names, inputs, h0)
    return library.scan_op(cell, inputs, None if h0 is None else h0.contiguous())


def linear_scan(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t over time. a, b: [B, T, D]; h0: [B, D] or None (zeros). Returns h: [B, T, D].

    Under torch.autocast inputs of mixed dtypes are promoted to the widest of them (decays made in fp32 stay
    fp32), and h0 follows them; min_gru and min_lstm scan their projections in the autocast dtype."""
    return _scan("linear", ("a", "b"), (a, b), h0)


def min_gru_scan(k: torch.Tensor, h_pre: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """minGRU from projected inputs, gates and scan fused. k, h_pre: [B, T, H]; h0: [B, H]. Returns h: [B, T, H]."""
    return _scan("min_gru", ("k", "h_pre"), (k, h_pre), h0)


def min_lstm_scan(f: torch.Tensor, i: torch.Tensor, h_pre: torch.Tensor,
                  h0: torch.Tensor | None = None) -> torch.Tensor:
    """minLSTM from projected inputs, gates and scan fused. f, i, h_pre: [B, T, H]; h0: [B, H]. Returns [B, T, H]."""
    return _scan("min_lstm", ("f", "i", "h_pre"), (f, i, h_pre), h0)


def _project(x: torch.Tensor, weights: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        got = f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else f"a {type(x).__name__}"
        raise ValueError(f"x must be a tensor [B, T, D_in], got {got}")
    first_name, first = next(iter(weights.items()))
    for name, w in weights.items():  # the first weight is checked first, before any comparison with it
        if not isinstance(w, torch.Tensor) or w.dim() != 2:
            shape = tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
            raise ValueError(f"{name} must be a 2-D weight [H, D_in], got {shape}")
        if w.shape != first.shape:
            raise ValueError(f"{name} is {tuple(w.shape)} but {first_name} is {tuple(first.shape)}; the weights share "
                             "one [H, D_in]")
        if (w.dtype != x.dtype and not mixes(x.device, w.dtype, x.dtype)) or w.device != x.device:
            raise TypeError(f"{name} is {w.dtype} on {w.device} but x is {x.dtype} on {x.device}; use one dtype and "
                            "device (convert x, or the weights / module with .to(...))")
    if x.shape[-1] != first.shape[1]:
        raise ValueError(f"x has {x.shape[-1]} features (shape {tuple(x.shape)}) but the weights take D_in = "
                         f"{first.shape[1]}: x must be [B, T, {first.shape[1]}]")
    return [torch.matmul(x, w.t()).contiguous() for w in weights.values()]


def min_gru(x: torch.Tensor, W_z: torch.Tensor, W_h: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """minGRU layer. x: [B, T, D_in]; W_z, W_h: [H, D_in]; h0: [B, H] or None. Returns h: [B, T, H].

    k = x W_z^T and h_pre = x W_h^T (torch matmul), then one fused kernel: z = sigmoid(k),
    h_t = (1 - z_t) h_{t-1} + z_t g(h_pre_t).
    """
    k, h_pre = _project(x, {"W_z": W_z, "W_h": W_h})
    return min_gru_scan(k, h_pre, h0)


def min_lstm(x: torch.Tensor, W_f: torch.Tensor, W_i: torch.Tensor, W_h: torch.Tensor,
             h0: torch.Tensor | None = None) -> torch.Tensor:
    """minLSTM layer. x: [B, T, D_in]; W_f, W_i, W_h: [H, D_in]; h0: [B, H] or None. Returns h: [B, T, H].

    Projections by torch matmul, then one fused kernel: f' = f / (f + i), i' = i / (f + i) with f, i the sigmoid
    gates, h_t = f'_t h_{t-1} + i'_t g(h_pre_t).
    """
    f, i, h_pre = _project(x, {"W_f": W_f, "W_i": W_i, "W_h": W_h})
    return min_lstm_scan(f, i, h_pre, h0)
