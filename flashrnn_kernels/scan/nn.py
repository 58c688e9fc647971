"""nn.Modules for minGRU and minLSTM: whole sequences through the fused kernel, or one step at a time."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from ..autocast import mixes
from ..validation import check_parameter_dtype, check_positive_ints
from .api import min_gru, min_lstm


def _weight(hidden_size: int, input_size: int, factory: dict) -> nn.Parameter:
    bound = 1.0 / math.sqrt(input_size)
    return nn.Parameter(torch.empty(hidden_size, input_size, **factory).uniform_(-bound, bound))


def _check_step(x_t: torch.Tensor, h: torch.Tensor | None, input_size: int, hidden_size: int) -> None:
    if not isinstance(x_t, torch.Tensor) or x_t.dim() != 2 or x_t.shape[1] != input_size:
        shape = tuple(x_t.shape) if isinstance(x_t, torch.Tensor) else type(x_t).__name__
        raise ValueError(f"step takes x_t: [B, D_in] = [B, {input_size}], got {shape}")
    if h is None:
        return
    if not isinstance(h, torch.Tensor) or h.shape != (x_t.shape[0], hidden_size):
        shape = tuple(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__
        raise ValueError(f"step takes h: [B, H] = [{x_t.shape[0]}, {hidden_size}], got {shape}")
    if (h.dtype != x_t.dtype and not mixes(x_t.device, h.dtype, x_t.dtype)) or h.device != x_t.device:
        raise TypeError(f"h is {h.dtype} on {h.device}; it must match x_t ({x_t.dtype} on {x_t.device})")


class _MinRNN(nn.Module):
    """A min cell: its weights (WEIGHTS, each [H, D_in]) and its op (OP), over whole sequences or one step."""

    WEIGHTS: tuple[str, ...]
    OP: Callable[..., torch.Tensor]

    def __init__(self, input_size: int, hidden_size: int, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None):
        super().__init__()
        check_positive_ints(input_size=input_size, hidden_size=hidden_size)
        check_parameter_dtype(dtype)
        self.input_size, self.hidden_size = input_size, hidden_size
        factory = {"device": device, "dtype": dtype}
        for name in self.WEIGHTS:
            setattr(self, name, _weight(hidden_size, input_size, factory))

    def forward(self, x: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
        """x: [B, T, D_in]; h0: [B, H] or None. Returns h: [B, T, H]."""
        return type(self).OP(x, *(getattr(self, name) for name in self.WEIGHTS), h0)

    def step(self, x_t: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
        """One step for autoregressive use. x_t: [B, D_in]; h: [B, H] or None. Returns the new h: [B, H]."""
        _check_step(x_t, h, self.input_size, self.hidden_size)
        return self.forward(x_t.unsqueeze(1), h)[:, 0]


class MinGRU(_MinRNN):
    """minGRU: h_t = (1 - z_t) h_{t-1} + z_t g(W_h x_t), z_t = sigmoid(W_z x_t). Weights W_z, W_h: [H, D_in]."""

    WEIGHTS = ("W_z", "W_h")
    OP = staticmethod(min_gru)


class MinLSTM(_MinRNN):
    """minLSTM: h_t = f'_t h_{t-1} + i'_t g(W_h x_t) with f', i' the normalised sigmoid gates of W_f x_t, W_i x_t.
    Weights W_f, W_i, W_h: [H, D_in]."""

    WEIGHTS = ("W_f", "W_i", "W_h")
    OP = staticmethod(min_lstm)
