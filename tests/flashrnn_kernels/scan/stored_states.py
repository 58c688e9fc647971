"""The scan cells' gradients as the kernels' backward computes them: from the forward's output h, stored in its
dtype, rather than from the exact states."""
from __future__ import annotations

from typing import Callable

import torch

from flashrnn_kernels.scan import reference


def gradients_from_stored_h(gates: Callable[..., tuple[torch.Tensor, torch.Tensor]], inputs: list[torch.Tensor],
                            h0: torch.Tensor | None, dy: torch.Tensor, storage: torch.dtype) -> list[torch.Tensor]:
    """fp64 gradients of every input (and of h0 when given) of h = scan(gates(*inputs), h0) for upstream `dy`, with
    h_{t-1} in dL/da_t = dh_t h_{t-1} rounded to `storage`; dh_t = dy_t + a_{t+1} dh_{t+1} and the gates exact."""
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    a, b = gates(*leaves)
    a_, b_ = a.detach(), b.detach()
    start = None if h0 is None else h0.detach().double()
    h = reference.linear_scan_chunked(a_, b_, start, chunk_len=512)
    first = torch.zeros_like(h[:, :1]) if start is None else start.unsqueeze(1)
    h_prev = torch.cat([first, h[:, :-1].to(storage).double()], dim=1)
    a_next = torch.cat([a_[:, 1:], torch.zeros_like(a_[:, :1])], dim=1)
    dh = reference.linear_scan_chunked(a_next.flip(1), dy.detach().double().flip(1), None, chunk_len=512).flip(1)
    grads = list(torch.autograd.grad((a, b), leaves, (dh * h_prev, dh)))
    if h0 is not None:
        grads.append(a_[:, 0] * dh[:, 0])
    return grads
