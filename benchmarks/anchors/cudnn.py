"""torch.nn.LSTM (cuDNN on a GPU) as an anchor: one layer, batch_first, flattened weights.

cuDNN always computes its own input projection ``x @ W_ih^T`` while the head-wise API takes ``Wx``
precomputed, so the benchmark times it twice: with ``input_size = hidden`` (its usual cost, as is) and
with a tiny ``input_size`` (the recurrence with an almost free input projection).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CudnnCase:
    """A single-layer LSTM problem: ``hidden`` units, ``input_size`` features, ``batch`` x ``seq``."""

    hidden: int
    input_size: int
    batch: int
    seq: int
    dtype: torch.dtype


def callables(case: CudnnCase, device: torch.device) -> tuple[Callable[[], object], Callable[[], object]]:
    """``(forward, forward_backward)`` closures over random inputs and upstream gradients for ``case``.

    The forward runs under ``torch.no_grad``; the backward asks for gradients of the input, the initial
    states and every parameter, with random gradients on the output sequence and both final states.
    """
    lstm = torch.nn.LSTM(case.input_size, case.hidden, num_layers=1, batch_first=True)
    lstm = lstm.to(device=device, dtype=case.dtype)
    lstm.flatten_parameters()

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, dtype=torch.float32).to(case.dtype).requires_grad_()

    x = rand(case.batch, case.seq, case.input_size)
    h0 = rand(1, case.batch, case.hidden)
    c0 = rand(1, case.batch, case.hidden)
    grads = (
        torch.randn(case.batch, case.seq, case.hidden, device=device).to(case.dtype),
        torch.randn(1, case.batch, case.hidden, device=device).to(case.dtype),
        torch.randn(1, case.batch, case.hidden, device=device).to(case.dtype),
    )
    wrt = (x, h0, c0, *lstm.parameters())

    def forward() -> object:
        with torch.no_grad():
            return lstm(x, (h0, c0))

    def forward_backward() -> object:
        out, (hn, cn) = lstm(x, (h0, c0))
        return torch.autograd.grad((out, hn, cn), wrt, grads)

    return forward, forward_backward
