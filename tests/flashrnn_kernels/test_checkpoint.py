"""Activation checkpointing (torch.utils.checkpoint, reentrant and not) around the modules: the forward runs again
inside the backward, and the output and every gradient equal those of the plain module. On the CPU the reference;
on a GPU the fused kernel, the alternating backend (whose runner holds a training forward's saves) and the scan,
within the rounding of the input projections, which cuBLAS may compute in another order when the backward
recomputes them (the kernels themselves rerun bitwise: test_repeatability_gpu.py)."""
from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from flashrnn_kernels import FlashGRU, FlashLSTM, MinGRU, MinLSTM
from tests.tolerances import TOLERANCES, relative_error


def _output_and_grads(module: torch.nn.Module, x: torch.Tensor, upstream: torch.Tensor,
                      reentrant: bool | None) -> list[torch.Tensor]:
    """Output, then the gradients of x and every parameter; `reentrant` None: no checkpoint."""
    leaf = x.detach().requires_grad_()
    module.zero_grad(set_to_none=True)
    out = module(leaf) if reentrant is None else checkpoint(module, leaf, use_reentrant=reentrant)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(upstream)
    return [out.detach(), leaf.grad, *(p.grad for p in module.parameters())]


def _check(module: torch.nn.Module, x: torch.Tensor, bound: float) -> None:
    with torch.no_grad():
        out = module(x)
    upstream = torch.randn_like(out[0] if isinstance(out, tuple) else out)
    plain = _output_and_grads(module, x, upstream, None)
    for reentrant in (False, True):
        got = _output_and_grads(module, x, upstream, reentrant)
        assert len(got) == len(plain)
        for k, (a, b) in enumerate(zip(got, plain)):
            assert b is not None and a is not None, f"result {k} missing (reentrant={reentrant})"
            error = relative_error(a, b)
            assert error <= bound, f"result {k} differs by {error:.2e} (reentrant={reentrant})"


@pytest.mark.parametrize("make", [lambda: FlashLSTM(5, 8, num_heads=2, num_layers=2, backend="reference"),
                                  lambda: MinGRU(5, 8)], ids=["flashlstm", "mingru"])
def test_checkpointed_modules_match_on_cpu(make):
    torch.manual_seed(0)
    _check(make().double(), torch.randn(3, 11, 5, dtype=torch.float64), 1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("make, dtype", [
    (lambda: FlashLSTM(32, 128, num_heads=2), torch.bfloat16),
    (lambda: FlashGRU(32, 768), torch.float32),
    (lambda: FlashLSTM(32, 2048, backend="alternating"), torch.bfloat16),
    (lambda: MinGRU(32, 64), torch.float32),
    (lambda: MinLSTM(32, 256), torch.bfloat16),
], ids=["fused-lstm", "fused-gru-split-head", "alternating-lstm", "mingru", "minlstm"])
def test_checkpointed_modules_match_on_gpu(make, dtype):
    torch.manual_seed(1)
    module = make().to("cuda", dtype)
    _check(module, torch.randn(4, 300, 32, device="cuda", dtype=dtype), TOLERANCES[dtype]["rel"])
