"""Launcher for the scan kernels (linear scan, minGRU, minLSTM), all on one scan.cu (autograd: library.py).

Tensors are [B, T, D], contiguous, one floating dtype (fp32, bf16 or fp16; fp32 accumulation inside). The forward
writes h; the backward runs the same kernel in reverse on dL/dh and the saved h and writes the gradients of the
cell's inputs and of h0.

Host path per call: a plan from a dict keyed by (cell, device, D, dtype, direction), the look-back workspace
reused per stream (no allocation and no memset: the kernel resets its ticket counter and status words carry the
launch's epoch), and one launch.
"""
from __future__ import annotations

import functools

import torch

import hwmodels

from ..runtime.compile import get_kernel
from ..runtime.launch import current_stream_handle, launch
from .plan import ScanPlan, plan
from .problem import ScanProblem

KERNEL_NAME = "flashrnn_scan"
TORCH_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
EPOCH_LIMIT = 1 << 29
"""Status words hold epoch * 4 + state in an int32: epochs run 1 .. EPOCH_LIMIT - 1, then the words are zeroed."""

_plans: dict[tuple, ScanPlan] = {}


@functools.cache
def _device_gpu(index: int) -> hwmodels.GPUModel:
    return hwmodels.detect(index)


def device_plan(cell: str, like: torch.Tensor, direction: str) -> ScanPlan:
    """The plan for `cell` on `like`'s device, hidden size and dtype (solved once per key, then a dict lookup)."""
    index = like.device.index if like.device.index is not None else 0
    key = (cell, index, like.shape[-1], like.dtype, direction)
    found = _plans.get(key)
    if found is None:
        problem = ScanProblem(cell, like.shape[-1], TORCH_DTYPES[like.dtype], direction)
        found = _plans[key] = plan(problem, _device_gpu(index))
    return found


@functools.cache
def _kernel(p: ScanPlan):
    return get_kernel(p.source(), KERNEL_NAME, dynamic_smem=p.stage_bytes)


class StreamWorkspace:
    """Ticket counter + status words (int32, one per chunk) and the fp32 look-back maps (one value per channel and
    chunk), reused by every launch on one stream.

    Launches on one stream run in order, so one buffer serves them all: the kernel hands the ticket counter back
    at 0, and a status word written by an earlier launch carries an older epoch, which the kernel reads as "not
    ready". The words are zeroed only when the buffer grows or the epoch counter wraps."""

    def __init__(self, device: torch.device):
        self.device = device
        self.flags = torch.zeros(1, device=device, dtype=torch.int32)
        self.work = torch.empty(3, 1, device=device, dtype=torch.float32)
        self.maps = tuple(self.work)
        self.epoch = 0

    def take(self, status_words: int, work_len: int) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], int]:
        """(flags, the three fp32 maps (agg_a, agg_b, incl), epoch) for one launch needing `status_words` words and
        `work_len` fp32 per map."""
        if self.flags.numel() < 1 + status_words:
            self.flags = torch.zeros(max(1 + status_words, 2 * self.flags.numel()), device=self.device,
                                     dtype=torch.int32)
            self.epoch = 0
        if self.work.shape[1] < work_len:
            self.work = torch.empty(3, max(work_len, 2 * self.work.shape[1]), device=self.device,
                                    dtype=torch.float32)
            self.maps = tuple(self.work)
        self.epoch += 1
        if self.epoch >= EPOCH_LIMIT:
            self.flags.zero_()
            self.epoch = 1
        return self.flags, self.maps, self.epoch


_workspaces: dict[tuple[int, int], StreamWorkspace] = {}


def _workspace(device: torch.device, stream: int, status_words: int,
               work_len: int) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], int]:
    """The workspace of raw stream handle `stream` on `device` for one launch (see StreamWorkspace.take)."""
    if torch.cuda.is_current_stream_capturing():  # a captured graph replays its arguments: fresh words each time
        flags = torch.zeros(1 + status_words, device=device, dtype=torch.int32)
        return flags, tuple(torch.empty(3, max(1, work_len), device=device, dtype=torch.float32)), 1
    key = (device.index, stream)
    ws = _workspaces.get(key)
    if ws is None:
        ws = _workspaces[key] = StreamWorkspace(device)
    return ws.take(status_words, work_len)


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
    if T == 0 or B == 0:
        return (*outs, grad_h0.zero_() if grad_h0 is not None else None) if backward else outs
    d_tiles, chunks = p.d_tiles(D), p.chunks(T)
    lanes = B * d_tiles
    stream = current_stream_handle(x.device.index)
    multi = chunks > 1
    flags, maps, epoch = _workspace(x.device, stream, lanes * chunks if multi else 0,
                                    lanes * chunks * p.tile if multi else 1)
    x1, x2 = inputs[0], inputs[1]
    x3 = inputs[2] if len(inputs) > 2 else None
    y = outs + (None,) * (3 - len(outs))
    if backward:
        dy, h = _aligned(dy, access), _aligned(h, access)
    launch(_kernel(p), (p.grid(lanes * chunks),), (p.threads_d, p.threads_t),
           (x1, x2, x3, h0, dy, h, y[0], y[1], y[2], grad_h0, *maps, flags,
            T, D, d_tiles, lanes, chunks, epoch), shared_mem=p.stage_bytes, device=x.device.index, stream=stream)
    return (*outs, grad_h0) if backward else outs

