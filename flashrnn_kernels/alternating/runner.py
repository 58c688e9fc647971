"""Static buffers, the step loops and their CUDA graphs for one alternating problem (cell, B, T, NH, DH, dtype,
device, training).

Forward, per step t: one batched GEMM over heads, pre[n] = h_{t-1}[n] @ R[n]^T (cuBLAS through torch.bmm, fp32
output), then one pointwise kernel (the cell's step). Backward, per step in reverse: the pointwise backward kernel,
then dh_rec[n] = dx_t[n] @ R[n] (the recurrent gradient); dR and db are whole-sequence GEMMs / sums afterwards.
Each loop is captured once into a CUDA graph (on first use, after one eager run that warms up cuBLAS and the
kernels and serves that call) and replayed afterwards.

Why static buffers: a graph bakes in every pointer, and the caller's tensors live at new addresses on every call,
so inputs are copied in (Wx, R, b, states; upstream gradients) and returned outputs are copied out (h, last states,
gradients). These copies are O(B T G H) bytes against the O(T G H^2) bytes of R the steps stream, i.e. a B / H
fraction (under 1 % for the one-head sizes this backend targets). Saved values (gates, non-h states) never leave
the runner: a training forward leases its runner until its backward has run (or its autograd graph is freed), and a
forward that finds every runner of its key leased builds another one. Through the custom op (torch.compile) the
saved values do leave: `forward(saves=True)` returns copies and `backward(restore=...)` copies them back, so that
the two ops stay functional.

Precision (as the fused kernel): GEMM outputs, gate values and non-h states in fp32; h in the storage dtype
(it is the next step's GEMM operand); the backward's dx in the storage dtype (the GEMM operand and dWx).
fp32 GEMMs follow torch.backends.cuda.matmul.allow_tf32 (default: off); the setting is part of the Key, since a
graph keeps the GEMM kernels chosen at capture.
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..cells import get_cell
from ..runtime.compile import get_kernel
from ..runtime.launch import launch
from .source import KERNEL_NAMES, THREADS, render

MAX_KEYS = 8
"""Problems whose runners are kept (least recently used beyond this are dropped once idle)."""


@dataclass(frozen=True)
class Key:
    """One captured problem: everything a graph's pointers and launch shapes depend on."""

    cell: str
    batch: int
    steps: int
    num_heads: int
    head_dim: int
    dtype: torch.dtype
    device: int
    training: bool
    tf32: bool  # fp32 GEMMs on TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32 when fp32, else False)


@functools.lru_cache(maxsize=64)
def _kernels(cell: str, dtype: torch.dtype, device: int) -> tuple[Any, Any]:
    source = render(cell, dtype)
    return (get_kernel(source, KERNEL_NAMES["forward"], device=device),
            get_kernel(source, KERNEL_NAMES["backward"], device=device))


def _i64(value: int) -> np.int64:
    return np.int64(value)


def _bmm(a: Tensor, b: Tensor, out: Tensor) -> None:
    """out = a @ b per head, accumulated and written in fp32 (out's dtype)."""
    if a.dtype == torch.float32:
        torch.bmm(a, b, out=out)
    else:
        torch.bmm(a, b, torch.float32, out=out)


class Runner:
    """Buffers and graphs of one Key. Not thread-safe; used on one stream at a time (ordered by an event)."""

    @torch.inference_mode(False)  # normal tensors: calls in any grad mode write them in place
    def __init__(self, key: Key):
        self.key = key
        spec = get_cell(key.cell)
        B, T, NH, DH = key.batch, key.steps, key.num_heads, key.head_dim
        G, S = spec.gate_count, spec.state_count
        self.G, self.S = G, S
        if B * NH * DH >= 2**31:
            raise ValueError(f"B * NH * DH = {B * NH * DH} elements per step exceed 2^31; split the batch")
        dev = torch.device("cuda", key.device)
        e = {"device": dev, "dtype": key.dtype}
        f = {"device": dev, "dtype": torch.float32}
        self.kernel_forward, self.kernel_backward = _kernels(key.cell, key.dtype, key.device)
        self.grid = (-(-B * NH * DH // THREADS), 1, 1)
        self.wx = torch.empty(B, T, G, NH, DH, **e)
        self.r = torch.empty(NH, G * DH, DH, **e)  # r[n, g * DH + o, i] = R[g, n, o, i]
        self.bias = torch.empty(G, NH, DH, **e)
        self.states = torch.empty(S, B, NH, DH, **e)
        self.h = torch.empty(B, T, NH, DH, **e)
        self.last = torch.empty(S, B, NH, DH, **e)
        self.pre = torch.empty(NH, B, G * DH, **f)
        # non-h states: every step's when training ([S-1, B, T+1, NH, DH], index 0 the initial ones), else one
        # buffer updated in place ([S-1, B, 1, NH, DH])
        self.saved_steps = T + 1 if key.training else 1
        self.s = torch.empty(S - 1, B, self.saved_steps, NH, DH, **f)  # empty (null pointers) when S == 1
        self.gates = torch.empty(B, T, G, NH, DH, **f) if key.training else None
        self.forward_graph: torch.cuda.CUDAGraph | None = None
        self.backward_graph: torch.cuda.CUDAGraph | None = None
        self.backward_buffers = False  # allocated by the first backward
        self.leased = False
        self.generation = 0
        self.done = torch.cuda.Event()

    # ------------------------------------------------------------------------------------------- forward

    def _forward_steps(self) -> None:
        B, T, NH, DH = self.key.batch, self.key.steps, self.key.num_heads, self.key.head_dim
        U, S, G = NH * DH, self.S, self.G
        if S > 1:
            self.s[:, :, 0].copy_(self.states[1:])
        r_t = self.r.transpose(1, 2)  # [NH, DH, G * DH]
        s_sb, s_sk = self.saved_steps * U, B * self.saved_steps * U
        for t in range(T):
            h_prev, h_prev_sb = (self.states[0], U) if t == 0 else (self.h[:, t - 1], T * U)
            _bmm(h_prev.transpose(0, 1), r_t, self.pre)  # [NH, B, DH] @ [NH, DH, G*DH]
            step_in = t if self.key.training else 0
            step_out = t + 1 if self.key.training else 0
            launch(self.kernel_forward, self.grid, (THREADS, 1, 1), (
                self.pre, self.wx[:, t], self.bias, h_prev, self.s[:, :, step_in], self.h[:, t],
                self.s[:, :, step_out], None if self.gates is None else self.gates[:, t],
                _i64(T * G * U), _i64(h_prev_sb), _i64(T * U), _i64(s_sb), _i64(s_sk), _i64(T * G * U), B, NH, DH,
            ), device=self.h.device)
        self.last[0].copy_(self.h[:, T - 1])
        if S > 1:
            self.last[1:].copy_(self.s[:, :, self.saved_steps - 1])

    def forward(self, Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, poison: bool = False,
                saves: bool = False) -> tuple[Tensor, ...]:
        """Run the sequence on copies of the inputs; returns fresh (h, last_states), and with `saves` (a training
        runner) also copies of the saved gate values [B, T, G, NH, DH] and non-h states [S-1, B, T+1, NH, DH] (fp32).
        `poison` fills every buffer the steps write with NaN first (tests: an element left unwritten shows up)."""
        _check_not_capturing()
        torch.cuda.current_stream().wait_event(self.done)
        if poison:
            _poison(self.h, self.last, self.pre, self.s, self.gates)
        self.wx.copy_(Wx)
        self.r.view(self.key.num_heads, self.G, self.key.head_dim, self.key.head_dim).copy_(R.transpose(0, 1))
        self.bias.copy_(b)
        self.states.copy_(states)
        self.forward_graph = _run_or_capture(self.forward_graph, self._forward_steps, self.key.tf32)
        self.generation += 1
        out = (self.h.clone(), self.last.clone())
        if saves:
            out += (self.gates.clone(), self.s.clone())
        self.done.record()
        return out

    # ------------------------------------------------------------------------------------------ backward

    @torch.inference_mode(False)
    def _allocate_backward(self) -> None:
        B, T, NH, DH = self.key.batch, self.key.steps, self.key.num_heads, self.key.head_dim
        e = {"device": self.h.device, "dtype": self.key.dtype}
        f = {"device": self.h.device, "dtype": torch.float32}
        self.d_h = torch.empty(B, T, NH, DH, **e)
        self.d_last = torch.empty(self.S, B, NH, DH, **e)
        self.h_prev = torch.empty(B, T, NH, DH, **e)
        self.ds = torch.empty(self.S, B, NH, DH, **f)
        self.dh_rec = torch.empty(NH, B, DH, **f)
        self.dpre = torch.empty(NH, B, T, self.G * DH, **e)  # dx of every step, per head
        self.d_states = torch.empty(self.S, B, NH, DH, **e)
        self.dr = torch.empty(NH, self.G * DH, DH, **f)
        self.db = torch.empty(NH, self.G * DH, **f)

    def _backward_steps(self) -> None:
        B, T, NH, DH = self.key.batch, self.key.steps, self.key.num_heads, self.key.head_dim
        U, G = NH * DH, self.G
        self.h_prev[:, 0].copy_(self.states[0])
        if T > 1:
            self.h_prev[:, 1:].copy_(self.h[:, :-1])
        self.ds.copy_(self.d_last)
        self.dh_rec.zero_()
        s_sb, s_sk = (T + 1) * U, B * (T + 1) * U
        for t in reversed(range(T)):
            dpre_t = self.dpre[:, :, t]
            launch(self.kernel_backward, self.grid, (THREADS, 1, 1), (
                self.gates[:, t], self.h_prev[:, t], self.h[:, t], self.s[:, :, t], self.s[:, :, t + 1],
                self.d_h[:, t], self.dh_rec, self.ds, dpre_t,
                _i64(T * G * U), _i64(T * U), _i64(s_sb), _i64(s_sk), _i64(T * U), _i64(B * T * G * DH),
                _i64(T * G * DH), B, NH, DH,
            ), device=self.h.device)
            _bmm(dpre_t, self.r, self.dh_rec)  # [NH, B, G*DH] @ [NH, G*DH, DH]
        self.ds[0].add_(self.dh_rec.transpose(0, 1))
        self.d_states.copy_(self.ds)
        dpre = self.dpre.view(NH, B * T, G * DH)
        _bmm(dpre.transpose(1, 2), self.h_prev.view(B * T, NH, DH).transpose(0, 1), self.dr)
        torch.sum(dpre, dim=1, dtype=torch.float32, out=self.db)

    def backward(self, d_h: Tensor, d_last: Tensor, poison: bool = False,
                 restore: tuple[Tensor, ...] | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Gradients (dWx, dR, db, d_states), fresh tensors in the storage dtype, for the last forward, or for the
        forward whose (R, states, h, gate values, non-h states) `restore` gives back (as `forward(saves=True)`
        returned them)."""
        _check_not_capturing()
        if not self.key.training:
            raise RuntimeError("this runner ran an inference forward; it saved nothing for a backward pass")
        if not self.backward_buffers:
            self._allocate_backward()
            self.backward_buffers = True
        torch.cuda.current_stream().wait_event(self.done)
        if restore is not None:
            R, states, h, gates, s = restore
            self.r.view(self.key.num_heads, self.G, self.key.head_dim, self.key.head_dim).copy_(R.transpose(0, 1))
            self.states.copy_(states)
            self.h.copy_(h)
            self.gates.copy_(gates)
            self.s.copy_(s)
        if poison:
            _poison(self.h_prev, self.ds, self.dh_rec, self.dpre, self.d_states, self.dr, self.db)
        self.d_h.copy_(d_h)
        self.d_last.copy_(d_last)
        self.backward_graph = _run_or_capture(self.backward_graph, self._backward_steps, self.key.tf32)
        B, T, NH, DH, G, dtype = *self.h.shape[:2], self.key.num_heads, self.key.head_dim, self.G, self.key.dtype
        d_wx = _copy(self.dpre.view(NH, B, T, G, DH).permute(1, 2, 3, 0, 4), dtype)
        d_r = _copy(self.dr.view(NH, G, DH, DH).transpose(0, 1), dtype)
        d_b = _copy(self.db.view(NH, G, DH).transpose(0, 1), dtype)
        d_states = self.d_states.clone()
        self.done.record()
        return d_wx, d_r, d_b, d_states


def _check_not_capturing() -> None:
    """A runner replays (or captures) a CUDA graph of its own, and a graph cannot be launched or captured inside
    another capture (torch.cuda.graph, torch.compile's mode="reduce-overhead")."""
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("the alternating backend cannot run inside a CUDA graph capture (torch.cuda.graph, or "
                           "torch.compile with mode='reduce-overhead'): it replays a CUDA graph of its own, one launch "
                           "per call already; call it outside the capture, or compile without CUDA graphs")


def _poison(*buffers: Tensor | None) -> None:
    for buffer in buffers:
        if buffer is not None:
            buffer.fill_(float("nan"))


def _copy(view: Tensor, dtype: torch.dtype) -> Tensor:
    """A new contiguous tensor holding `view` in `dtype` (never an alias of a runner buffer)."""
    out = torch.empty(view.shape, dtype=dtype, device=view.device)
    out.copy_(view)
    return out


def _run_or_capture(graph: torch.cuda.CUDAGraph | None, steps, tf32: bool) -> torch.cuda.CUDAGraph:
    """Replay `graph`; the first time (None) run `steps` eagerly (warm-up, and this call's result), then capture,
    both with TF32 fp32 GEMMs allowed exactly when `tf32` (the Key's setting, whatever the global one is now)."""
    if graph is not None:
        graph.replay()
        return graph
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        steps()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(stream)
        with torch.cuda.graph(graph, stream=side):
            steps()
        stream.wait_stream(side)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    return graph


class _Pool:
    """Runners by Key; a training forward leases one until its backward (or its autograd graph's end)."""

    def __init__(self) -> None:
        self.runners: OrderedDict[Key, list[Runner]] = OrderedDict()

    def acquire(self, key: Key) -> Runner:
        found = self.runners.pop(key, [])
        self.runners[key] = found  # most recently used last
        runner = next((r for r in found if not r.leased), None)
        if runner is None:
            runner = Runner(key)
            found.append(runner)
        while len(self.runners) > MAX_KEYS:
            oldest = next(iter(self.runners))
            del self.runners[oldest]  # leased runners stay alive through their leases
        return runner

    def clear(self) -> None:
        self.runners.clear()


POOL = _Pool()


class Lease:
    """Marks a runner's saved values as owned by one autograd graph; released by `release` or when collected."""

    def __init__(self, runner: Runner):
        self.runner = runner
        self.generation = runner.generation
        runner.leased = True

    def release(self) -> None:
        if self.runner is not None:
            self.runner.leased = False
            self.runner = None

    def __del__(self) -> None:
        self.release()


def clear_graphs() -> None:
    """Drop every idle runner (its buffers and graphs); leased ones are freed with their autograd graphs."""
    POOL.clear()
