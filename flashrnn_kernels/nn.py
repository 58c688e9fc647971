"""nn.Modules over `flashrnn`, with weight layouts convertible to and from torch.nn.LSTM."""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .cells import get_cell
from .dispatch import BACKENDS, flashrnn


class FlashLSTM(nn.Module):
    """A single-layer, unidirectional LSTM with `num_heads` block-diagonal recurrent heads.

    Parameters (H = hidden_size, NH = num_heads, DH = H // NH, gates i, f, z, o as torch's i, f, g, o):
      W: [4 * H, input_size] input projection, rows ordered (gate, head, dim) like torch's weight_ih_l0;
      R: [4, NH, DH, DH] recurrent weights (gate, head, out, in); with NH = 1 this is weight_hh_l0 reshaped;
      b: [4, NH, DH] bias (torch's bias_ih_l0 + bias_hh_l0), absent when bias=False.
    Initialised like torch.nn.LSTM: every entry uniform in [-1/sqrt(H), 1/sqrt(H)].

    forward(x, states=None) follows torch.nn.LSTM's conventions for one layer: x is [B, T, input_size]
    (batch_first=True) or [T, B, input_size]; states is (h_0, c_0), each [1, B, H], zeros when None; returns
    (output, (h_n, c_n)) with output [B, T, H] (or [T, B, H]) and h_n, c_n each [1, B, H].
    `backend` is passed to `flashrnn` ("auto", "fused" or "reference").
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_heads: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        backend: str = "auto",
    ):
        super().__init__()
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size), ("num_heads", num_heads)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if hidden_size % num_heads:
            raise ValueError(
                f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}; "
                f"use a num_heads among the divisors of {hidden_size}"
            )
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; valid backends: {list(BACKENDS)}")
        self.cell = get_cell("lstm")
        self.input_size, self.hidden_size, self.num_heads = input_size, hidden_size, num_heads
        self.head_dim = hidden_size // num_heads
        self.batch_first, self.backend = batch_first, backend
        G, NH, DH = self.cell.gate_count, num_heads, self.head_dim
        factory = {"dtype": dtype, "device": device}
        self.W = nn.Parameter(torch.empty(G * hidden_size, input_size, **factory))
        self.R = nn.Parameter(torch.empty(G, NH, DH, DH, **factory))
        self.b = nn.Parameter(torch.empty(G, NH, DH, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform in [-1/sqrt(hidden_size), 1/sqrt(hidden_size)], as torch.nn.LSTM."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for parameter in self.parameters():
            nn.init.uniform_(parameter, -bound, bound)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, num_heads={self.num_heads}, bias={self.b is not None}, "
            f"batch_first={self.batch_first}, backend={self.backend!r}"
        )

    def _initial_states(self, states, batch: int) -> Tensor | None:
        if states is None:
            return None
        if not (isinstance(states, (tuple, list)) and len(states) == 2):
            raise ValueError("states must be a pair (h_0, c_0), each [1, B, hidden_size], or None")
        expected = (1, batch, self.hidden_size)
        for name, tensor in zip(("h_0", "c_0"), states):
            if tuple(tensor.shape) != expected:
                raise ValueError(
                    f"{name} must have shape [1, B, hidden_size] = {list(expected)}, got {list(tensor.shape)}"
                )
        return torch.cat(states).view(2, batch, self.num_heads, self.head_dim)

    def forward(self, x: Tensor, states: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            layout = "[B, T, input_size]" if self.batch_first else "[T, B, input_size]"
            raise ValueError(f"x must be {layout} with input_size={self.input_size}, got shape {list(x.shape)}")
        if not self.batch_first:
            x = x.transpose(0, 1)
        B, T, _ = x.shape
        G, NH, DH = self.cell.gate_count, self.num_heads, self.head_dim
        Wx = nn.functional.linear(x, self.W).reshape(B, T, G, NH, DH).contiguous()
        b = self.b if self.b is not None else self.R.new_zeros(G, NH, DH)
        h, last = flashrnn(Wx, self.R, b, self._initial_states(states, B), cell=self.cell, backend=self.backend)
        output = h.reshape(B, T, self.hidden_size)
        if not self.batch_first:
            output = output.transpose(0, 1)
        h_n, c_n = last.reshape(2, 1, B, self.hidden_size).unbind(0)
        return output, (h_n, c_n)

    @classmethod
    def from_torch(cls, lstm: nn.LSTM, backend: str = "auto") -> FlashLSTM:
        """A FlashLSTM (num_heads=1) computing the same function as a single-layer unidirectional nn.LSTM."""
        if not isinstance(lstm, nn.LSTM):
            raise TypeError(f"from_torch expects a torch.nn.LSTM, got {type(lstm).__name__}")
        unsupported = {
            "num_layers": (lstm.num_layers, 1),
            "bidirectional": (lstm.bidirectional, False),
            "proj_size": (lstm.proj_size, 0),
        }
        for name, (value, needed) in unsupported.items():
            if value != needed:
                raise ValueError(f"from_torch supports nn.LSTM with {name}={needed!r} only, got {name}={value!r}")
        weight_ih = lstm.weight_ih_l0
        module = cls(
            lstm.input_size,
            lstm.hidden_size,
            num_heads=1,
            bias=lstm.bias,
            batch_first=lstm.batch_first,
            dtype=weight_ih.dtype,
            device=weight_ih.device,
            backend=backend,
        )
        H = lstm.hidden_size
        with torch.no_grad():
            module.W.copy_(weight_ih)
            module.R.copy_(lstm.weight_hh_l0.view(4, 1, H, H))
            if lstm.bias:
                module.b.copy_((lstm.bias_ih_l0 + lstm.bias_hh_l0).view(4, 1, H))
        return module

    def to_torch(self) -> nn.LSTM:
        """An equivalent nn.LSTM; several heads become a block-diagonal weight_hh_l0 (bias goes to bias_ih_l0)."""
        H = self.hidden_size
        lstm = nn.LSTM(
            self.input_size, H, bias=self.b is not None, batch_first=self.batch_first,
            dtype=self.W.dtype, device=self.W.device,
        )
        with torch.no_grad():
            lstm.weight_ih_l0.copy_(self.W)
            lstm.weight_hh_l0.copy_(torch.stack([torch.block_diag(*self.R[g]) for g in range(4)]).view(4 * H, H))
            if self.b is not None:
                lstm.bias_ih_l0.copy_(self.b.reshape(4 * H))
                lstm.bias_hh_l0.zero_()
        return lstm
