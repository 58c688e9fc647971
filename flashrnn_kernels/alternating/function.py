"""flashrnn_alternating: per step one cuBLAS GEMM (R h, block-diagonal over heads) and one pointwise kernel, the
whole sequence replayed from a CUDA graph (alternating/runner.py): eagerly as an autograd.Function whose saved
values stay in the runner; under torch.compile as the custom ops' "alternating" backend (`alternating_forward` /
`alternating_backward`, library.py), whose saved values travel between the ops as tensors.

For hidden sizes whose R cannot stay on chip (e.g. one head of 2048 or 4096), where the fused kernel has no
tiling: R is read from L2 or HBM every step, as cuDNN does at these sizes.
"""
from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor

from ..cells import get_cell
from ..library import first_order_message, flashrnn_op
from ..validation import check_kernel_inputs
from .runner import POOL, Key, Lease, Runner

POISON_OUTPUTS = bool(os.environ.get("FLASHRNN_POISON_OUTPUTS"))
"""Fill every buffer the steps write with NaN before each run (tests use it to prove that every element is
written)."""


class AlternatingRNNFunction(torch.autograd.Function):
    """Autograd wrapper of the alternating forward and backward graphs."""

    @staticmethod
    def forward(ctx: Any, Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: str) -> tuple[Tensor, Tensor]:
        training = any(ctx.needs_input_grad[:4])
        with torch.cuda.device(Wx.device):
            runner = POOL.acquire(_key(cell, Wx, training))
            h, last = runner.forward(Wx, R, b, states, poison=POISON_OUTPUTS)
        if training:
            ctx.runner = runner
            ctx.lease = Lease(runner)
        return h, last

    @staticmethod
    def backward(ctx: Any, d_h: Tensor, d_last: Tensor) -> tuple[Tensor | None, ...]:
        if torch.is_grad_enabled():  # create_graph=True: its gradients would silently have no derivative
            raise RuntimeError(first_order_message("flashrnn"))
        runner: Runner = ctx.runner
        if runner.generation != ctx.lease.generation:
            raise RuntimeError(
                "the alternating backend's saved values of this forward were reused by a later forward after a "
                "first backward (retain_graph=True); run the second backward before the next forward"
            )
        dtype = runner.key.dtype
        with torch.cuda.device(d_h.device):
            grads = runner.backward(d_h.to(dtype), d_last.to(dtype), poison=POISON_OUTPUTS)
        ctx.lease.release()
        return (*grads, None)


def _key(cell: str, like: Tensor, training: bool) -> Key:
    """The runner key of a problem from Wx [B, T, G, NH, DH] or h [B, T, NH, DH] (same leading and trailing dims)."""
    (B, T), (NH, DH) = like.shape[:2], like.shape[-2:]
    tf32 = like.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    return Key(cell, B, T, NH, DH, like.dtype, like.device.index, training, tf32)


def alternating_forward(Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: str,
                        training: bool) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """One forward on checked inputs as the custom op runs it: (h, last, gate values, non-h states), the saves
    fp32 copies when `training` (None otherwise; the non-h states also None for S = 1)."""
    with torch.cuda.device(Wx.device):
        runner = POOL.acquire(_key(cell, Wx, training))
        out = runner.forward(Wx, R, b, states, poison=POISON_OUTPUTS, saves=training)
    if not training:
        return (*out, None, None)
    h, last, gates, s = out
    return h, last, gates, s if s.numel() else None


def alternating_backward(R: Tensor, states: Tensor, h: Tensor, gates_save: Tensor, states_save: Tensor | None,
                         d_h: Tensor, d_last: Tensor, cell: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The backward of `alternating_forward`'s saves: gradients of (Wx, R, b, states) in h's dtype."""
    with torch.cuda.device(h.device):
        runner = POOL.acquire(_key(cell, h, True))
        saved = runner.s if states_save is None else states_save  # S = 1: nothing to restore
        return runner.backward(d_h.to(h.dtype), d_last.to(h.dtype), poison=POISON_OUTPUTS,
                               restore=(R, states, h, gates_save, saved))


def flashrnn_alternating(Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: str = "lstm") -> tuple[Tensor, Tensor]:
    """Run `cell` over the sequence with the alternating backend (per step a cuBLAS GEMM and a pointwise kernel).

    Wx [B, T, G, NH, DH], R [G, NH, DH, DH] (gate, head, out, in), b [G, NH, DH], states [S, B, NH, DH] (CUDA,
    one dtype of bf16/fp16/fp32; any strides). Returns (h [B, T, NH, DH], last_states [S, B, NH, DH]) in the
    input dtype; differentiable with respect to all four inputs. Any head_dim and cell of `cells.CELLS`.
    """
    name = get_cell(cell).name
    check_kernel_inputs(Wx, R, b, states, name, contiguous=False)
    if torch.compiler.is_compiling():
        return flashrnn_op(Wx, R, b, states, name, backend="alternating")
    return AlternatingRNNFunction.apply(Wx, R, b, states, name)
