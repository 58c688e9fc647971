"""The fused kernels' launchers (plan -> render -> compile -> launch) and `flashrnn_fused`, their public entry.

Autograd and torch.compile support come from the custom ops in `flashrnn_kernels.library`, whose CUDA
implementations are `fused_forward` and `fused_backward`.

Forward: one persistent launch over all T steps. In training it also saves, in fp32, the cell's per-gate values
a_g [B, T, G, NH, DH] and the non-h states of every step [S-1, B, T+1, NH, DH] (index 0: the initial states).
Backward: one persistent launch for the gate-gradient recurrence writes dgates in the input dtype
[B, T, G, NH, DH] (the gradient of Wx), the initial states' gradients, h_{t-1} of every step (copied from its staged
inputs) and each batch row's sum of dgates over the steps (fp32); then dR[g, n] = sum_{b,t} dgates[b, t, g, n]^T
h_{t-1}[b, n] is one whole-sequence GEMM in torch (`recurrent_weight_grad`, fp32 accumulation) and db the sum of the
batch rows' sums.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..cells import get_cell
from ..library import flashrnn_op
from ..runtime.codegen import render
from ..runtime.compile import get_kernel
from ..runtime.device import device_gpu as _device_gpu
from ..runtime.launch import launch, launch_ex_available
from ..validation import check_kernel_inputs
from .plan import KernelPlan, plan
from .problem import HEAD_DIMS

POISON_OUTPUTS = bool(os.environ.get("FLASHRNN_POISON_OUTPUTS"))
"""Fill outputs with NaN before each launch (tests use it to prove that every element is written)."""

EXCHANGE = os.environ.get("FLASHRNN_EXCHANGE") or None
""""cluster", "global", "partials" or "pairs" (plan's `exchange`): how the blocks of a split head exchange a step,
instead of the planner's choice (tests and benchmarks run each)."""

_NON_PORTABLE_CLUSTER_ATTRIBUTE = 14  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
_MAX_GRID_Y = 65535


@functools.lru_cache(maxsize=256)
def _kernel(found: KernelPlan, device: int) -> Any:
    """The plan's kernel on CUDA device `device`, its function attributes set there."""
    kernel = get_kernel(render(found), found.kernel_name, dynamic_smem=found.smem_bytes, device=device)
    if found.nonportable_cluster:
        _allow_nonportable_cluster(kernel, device)
    return kernel


@dataclass(frozen=True)
class _Launch:
    """Everything a call needs besides its tensors, derived once per problem (plan properties are not free)."""

    kernel: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    scratch_bytes: int
    exchange_bytes: int  # > 0: the blocks of a head exchange through global memory, launched cooperatively
    clustered: bool  # cluster dimensions compiled in as well (pairs of blocks of the partial-sum backward)


def _allow_nonportable_cluster(kernel: Any, device: int) -> None:
    """Clusters above the portable size (8 on sm_90) need a per-function opt-in (on `device`'s function) that CuPy
    does not wrap."""
    import cupy

    with cupy.cuda.Device(device):
        function = kernel.kernel.ptr
    try:
        from cuda.bindings import driver
    except ImportError:
        cupy.cuda.driver.funcSetAttribute(function, _NON_PORTABLE_CLUSTER_ATTRIBUTE, 1)
        return
    attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    (err,) = driver.cuFuncSetAttribute(driver.CUfunction(function), attribute, 1)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED) failed: {err}")


def _launch_for(cell: str, h: Tensor, direction: str) -> _Launch:
    B, _, NH, DH = h.shape
    return _cached_launch(cell, B, NH, DH, h.dtype, h.device.index, direction, EXCHANGE)


@functools.lru_cache(maxsize=1024)
def _cached_launch(cell: str, B: int, NH: int, DH: int, dtype: torch.dtype, index: int, direction: str,
                   exchange: str | None) -> _Launch:
    """plan() and the compiled kernel keyed by plain values: no problem or GPU model is hashed per call. Pairs of
    blocks need a clustered cooperative launch (cuda-bindings); without it the backward plans single blocks."""
    gpu = _device_gpu(index)
    found = plan(cell, B, NH, DH, dtype, gpu=gpu, direction=direction, exchange=exchange)
    if found.pair_blocks > 1 and not launch_ex_available():
        if exchange == "pairs":
            raise RuntimeError("exchange 'pairs' launches clustered and cooperative blocks through cuLaunchKernelEx, "
                               "which needs the cuda-bindings package (pip install cuda-bindings)")
        found = plan(cell, B, NH, DH, dtype, gpu=gpu, direction=direction, exchange="partials")
    return _Launch(_kernel(found, index), found.grid(B), found.block, found.smem_bytes, found.scratch_bytes(B),
                   found.exchange_bytes(B), found.pair_blocks > 1)


def _empty(shape: tuple[int, ...], like: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    out = torch.empty(shape, device=like.device, dtype=dtype or like.dtype)
    if POISON_OUTPUTS:
        out.fill_(float("nan"))
    return out


def _scratch(config: _Launch, like: Tensor) -> Tensor | None:
    size = config.scratch_bytes
    return torch.empty(size, device=like.device, dtype=torch.uint8) if size else None


def _exchange(config: _Launch, like: Tensor) -> Tensor | None:
    """The global exchange's buffer, zeroed (tag 0: no fill written yet)."""
    size = config.exchange_bytes
    return torch.zeros(size, device=like.device, dtype=torch.uint8) if size else None


def _run(config: _Launch, args: tuple, like: Tensor) -> None:
    launch(config.kernel, config.grid, config.block, args, shared_mem=config.smem_bytes, device=like.device,
           cooperative=config.exchange_bytes > 0, clustered=config.clustered)


def _check(Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: str) -> None:
    """Cheap re-check of the kernel's preconditions (the front end validates in full)."""
    B, _, _, DH = check_kernel_inputs(Wx, R, b, states, cell, contiguous=True)
    if DH not in HEAD_DIMS:
        raise ValueError(f"head_dim {DH} is not supported by the fused kernel; use one of {HEAD_DIMS}")
    if -(-B // 8) > _MAX_GRID_Y:
        raise ValueError(f"batch {B} needs more than {_MAX_GRID_Y} batch tiles; split the batch")


def fused_forward(Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: str,
                  training: bool) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """One forward launch on checked inputs. Returns (h [B, T, NH, DH], last [S, B, NH, DH], gates_save,
    states_save): the fp32 values the backward reads, None when not `training` (states_save also None for S = 1)."""
    B, T, G, NH, DH = Wx.shape
    S = states.shape[0]
    h = _empty((B, T, NH, DH), Wx)
    config = _launch_for(cell, h, "forward")
    last = _empty((S, B, NH, DH), Wx)
    gates_save = _empty((B, T, G, NH, DH), Wx, torch.float32) if training else None
    states_save = _empty((S - 1, B, T + 1, NH, DH), Wx, torch.float32) if training and S > 1 else None
    _run(config, (Wx, R, b, states, h, last, gates_save, states_save, _scratch(config, Wx), _exchange(config, Wx),
                  B, T), Wx)
    return h, last, gates_save, states_save


def fused_backward(R: Tensor, states: Tensor, h: Tensor, gates_save: Tensor, states_save: Tensor | None,
                   d_h: Tensor, d_last: Tensor, cell: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One backward launch plus the dR / db reductions. d_h [B, T, NH, DH], d_last [S, B, NH, DH] (any float
    dtype, cast to h's). Returns the gradients of (Wx, R, b, states) in h's dtype."""
    B, T, NH, DH = h.shape
    G, S = R.shape[0], states.shape[0]
    d_h, d_last = d_h.to(h.dtype).contiguous(), d_last.to(h.dtype).contiguous()
    config = _launch_for(cell, h, "backward")
    d_wx = _empty((B, T, G, NH, DH), h)
    d_states = _empty((S, B, NH, DH), h)
    h_prev = _empty((B, T, NH, DH), h)
    d_bias_rows = _empty((B, G, NH, DH), h, torch.float32)
    _run(config, (R, states, h, gates_save, states_save, d_h, d_last, d_wx, d_states, h_prev, d_bias_rows,
                  _scratch(config, h), _exchange(config, h), B, T), h)
    d_r = recurrent_weight_grad(d_wx, h_prev)
    d_b = d_bias_rows.sum(0).to(h.dtype)
    return d_wx, d_r, d_b, d_states


def recurrent_weight_grad(d_wx: Tensor, h_prev: Tensor) -> Tensor:
    """dR[g, n] = sum over (b, t) of d_wx[b, t, g, n]^T h_prev[b, t, n] in d_wx's dtype: one GEMM over every (b, t)
    with both read in place (all gates at once for one head, a batched GEMM over heads per gate otherwise), so the
    sum is rounded once. d_wx [B, T, G, NH, DH], h_prev [B, T, NH, DH] (h_{t-1}, h_0 at t = 0)."""
    B, T, G, NH, DH = d_wx.shape
    K = B * T
    lhs = d_wx.view(K, G, NH, DH).permute(1, 2, 3, 0)  # [G, NH, DH_out, K]
    rhs = h_prev.view(K, NH, DH).transpose(0, 1)  # [NH, K, DH_in]
    if NH == 1:
        return torch.mm(lhs.reshape(G * DH, K), rhs[0]).view(G, NH, DH, DH)
    d_r = torch.empty((G, NH, DH, DH), device=d_wx.device, dtype=d_wx.dtype)
    for g in range(G):
        torch.bmm(lhs[g], rhs, out=d_r[g])
    return d_r


def flashrnn_fused(Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: str = "lstm") -> tuple[Tensor, Tensor]:
    """Run `cell` over the sequence with the fused kernels (as the custom op `flashrnn_kernels::flashrnn_forward`).

    Wx [B, T, G, NH, DH], R [G, NH, DH, DH], b [G, NH, DH], states [S, B, NH, DH] (CUDA, one dtype of bf16/fp16/
    fp32, contiguous). Returns (h [B, T, NH, DH], last_states [S, B, NH, DH]) in the input dtype; differentiable
    with respect to all four inputs, and traceable by torch.compile.
    """
    name = get_cell(cell).name
    _check(Wx, R, b, states, name)
    return flashrnn_op(Wx, R, b, states, name)
