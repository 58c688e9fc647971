"""Launchers and autograd Functions for the scan kernels (linear scan, minGRU, minLSTM), all on one scan.cu.

Tensors are [B, T, D], contiguous, one floating dtype (fp32, bf16 or fp16; fp32 accumulation inside). The forward
writes h; the backward runs the same kernel in reverse on dL/dh and the saved h and writes the gradients of the
cell's inputs and of h0.
"""
from __future__ import annotations

import functools

import hwmodels
import torch

from ..runtime.compile import get_kernel
from ..runtime.launch import launch
from .plan import ScanPlan, plan
from .problem import ScanProblem

KERNEL_NAME = "flashrnn_scan"
TORCH_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@functools.lru_cache(maxsize=None)
def _device_gpu(index: int) -> hwmodels.GPUModel:
    return hwmodels.detect(index)


def device_plan(cell: str, like: torch.Tensor, direction: str) -> ScanPlan:
    """The plan for `cell` on `like`'s device, hidden size and dtype."""
    problem = ScanProblem(cell, like.shape[-1], TORCH_DTYPES[like.dtype], direction)
    return plan(problem, _device_gpu(like.device.index if like.device.index is not None else 0))


@functools.lru_cache(maxsize=None)
def _kernel(p: ScanPlan):
    return get_kernel(p.source(), KERNEL_NAME)


def _aligned(t: torch.Tensor, access_bytes: int) -> torch.Tensor:
    return t if t.data_ptr() % access_bytes == 0 else t.clone()


def run_scan(cell: str, direction: str, inputs: tuple[torch.Tensor, ...], h0: torch.Tensor | None,
             dy: torch.Tensor | None = None, h: torch.Tensor | None = None,
             kernel_plan: ScanPlan | None = None) -> tuple[torch.Tensor, ...]:
    """One launch. Forward returns (h,); backward returns (grad of each input..., grad_h0 in fp32 or None).

    `kernel_plan` replaces the solver's plan (benchmarks compare the model's choice with alternatives)."""
    x = inputs[0]
    B, T, D = x.shape
    p = kernel_plan or device_plan(cell, x, direction)
    access = p.vec * x.element_size()
    inputs = tuple(_aligned(t, access) for t in inputs)
    h0 = None if h0 is None else _aligned(h0, access)
    backward = direction == "backward"
    outs = tuple(torch.empty_like(x) for _ in (inputs if backward else (x,)))
    grad_h0 = torch.empty(B, D, device=x.device, dtype=torch.float32) if backward and h0 is not None else None
    if T == 0:
        return (*outs, grad_h0.zero_() if grad_h0 is not None else None) if backward else outs
    d_tiles, chunks = p.d_tiles(D), p.chunks(T)
    lanes = B * d_tiles
    flags = torch.zeros(1 + (lanes * chunks * p.threads_d if chunks > 1 else 0), device=x.device,
                        dtype=torch.int32)
    work = torch.empty(3, lanes * chunks * p.tile if chunks > 1 else 1, device=x.device, dtype=torch.float32)
    x1, x2 = inputs[0], inputs[1]
    x3 = inputs[2] if len(inputs) > 2 else None
    y = outs + (None,) * (3 - len(outs))
    if backward:
        dy, h = _aligned(dy, access), _aligned(h, access)
    kernel = _kernel(p)
    launch(kernel, (lanes * chunks,), (p.threads_d, p.threads_t),
           (x1, x2, x3, h0, dy, h, y[0], y[1], y[2], grad_h0, work[0], work[1], work[2], flags,
            T, D, d_tiles, lanes, chunks), device=x.device)
    return (*outs, grad_h0) if backward else outs


class ScanFunction(torch.autograd.Function):
    """h = scan of the cell over its inputs; gradients from the reverse scan."""

    @staticmethod
    def forward(ctx, cell: str, h0: torch.Tensor | None, *inputs: torch.Tensor) -> torch.Tensor:
        (h,) = run_scan(cell, "forward", inputs, h0)
        ctx.cell = cell
        ctx.has_h0 = h0 is not None
        ctx.save_for_backward(h, h0, *inputs)
        return h

    @staticmethod
    def backward(ctx, dh: torch.Tensor):
        h, h0, *inputs = ctx.saved_tensors
        *grads, grad_h0 = run_scan(ctx.cell, "backward", tuple(inputs), h0, dh.contiguous(), h)
        grad_h0 = grad_h0.to(h0.dtype) if grad_h0 is not None else None
        return (None, grad_h0, *grads)
