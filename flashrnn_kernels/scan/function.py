"""Launcher for the scan kernels (linear scan, minGRU, minLSTM), all on one scan.cu (autograd: library.py).

Tensors are [B, T, D], contiguous, one floating dtype (fp32, bf16 or fp16; fp32 accumulation inside). The forward
writes h; the backward runs the same kernel in reverse on dL/dh and the saved h and writes the gradients of the
cell's inputs and of h0.

Host path per call: the launch's sizes from a dict keyed by (cell, direction, device, dtype, B, T, D) (the plans
themselves are solved once per bucket of B and T), for split lanes the workspace reused per stream (no allocation
and no memset: every published word carries the launch's epoch), and one launch.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from ..runtime.compile import get_kernel
from ..runtime.device import device_gpu as _device_gpu
from ..runtime.launch import cupy_stream, current_stream_handle, launch
from .plan import ScanPlan, plan
from .problem import ScanProblem, bucket

KERNEL_NAME = "flashrnn_scan"
TORCH_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
EPOCH_LIMIT = 1 << 31
"""Published words carry a tag in their high 32 bits, 2 * epoch (a segment's map) or 2 * epoch + 1 (its final
state): epochs run 1 .. EPOCH_LIMIT - 1, then the words are zeroed."""

_plans: dict[tuple, ScanPlan] = {}


def device_plan(cell: str, like: torch.Tensor, direction: str) -> ScanPlan:
    """The plan for `cell` on `like`'s device for its [B, T, D] shape and dtype (solved once per bucket of B and T,
    then a dict lookup)."""
    index = like.device.index if like.device.index is not None else 0
    B, T, D = like.shape
    key = (cell, index, D, like.dtype, direction, bucket(B), bucket(T))
    found = _plans.get(key)
    if found is None:
        problem = ScanProblem.for_shape(cell, B, T, D, TORCH_DTYPES[like.dtype], direction)
        found = _plans[key] = plan(problem, _device_gpu(index))
    return found


@functools.cache
def _kernel(p: ScanPlan, device: int):
    return get_kernel(p.source(), KERNEL_NAME, dynamic_smem=p.stage_bytes, device=device)


class _Launch(NamedTuple):
    """What one launch of a plan on [B, T, D] needs besides its tensors, worked out once per shape."""

    kernel: object  # the plan's compiled kernel on the launch's device (`_kernel`)
    grid: tuple[int]
    block: tuple[int, int]
    shared_mem: int
    access: int  # bytes of one thread's access: every tensor's address is a multiple of it
    d_tiles: int
    lanes: int
    segments: int
    words: int  # published words per array (split lanes), else 0


_launches: dict[tuple, _Launch] = {}
_LAUNCHES_KEPT = 4096


def _launch_of(p: ScanPlan, B: int, T: int, D: int, element_size: int, device: int) -> _Launch:
    d_tiles = p.d_tiles(D)
    lanes = B * d_tiles
    segments = p.segments(lanes, p.chunks(T))
    return _Launch(_kernel(p, device), (lanes * segments,), (p.threads_d, p.threads_t), p.stage_bytes,
                   p.vec * element_size, d_tiles, lanes, segments, lanes * segments * p.tile if segments > 1 else 0)


def _device_launch(cell: str, direction: str, x: torch.Tensor) -> _Launch:
    """The solver's plan's launch for `cell` on `x` (its device, dtype and [B, T, D]): a dict lookup after the first
    call of a shape."""
    key = (cell, direction, x.device.index, x.dtype, *x.shape)
    found = _launches.get(key)
    if found is None:
        if len(_launches) >= _LAUNCHES_KEPT:
            _launches.clear()
        B, T, D = x.shape
        found = _launches[key] = _launch_of(device_plan(cell, x, direction), B, T, D, x.element_size(),
                                            x.device.index)
    return found


@torch.inference_mode(False)  # a normal tensor: zeroed in place again when the epochs wrap, in any grad mode
def _zeroed_words(device: torch.device, stream: int, words: int) -> torch.Tensor:
    """[2, words] int64 zeros for the workspace of raw stream handle `stream`. On a GPU the memory comes from CuPy's
    pool, zeroed on that stream, and not from torch's caching allocator: a CUDA graph pool that collects the
    allocations of eager warm-up calls (torch.compile's cudagraph trees) must not find the workspace live in it."""
    if device.type != "cuda":
        return torch.zeros(2, words, device=device, dtype=torch.int64)
    import cupy

    with cupy.cuda.Device(device.index), cupy_stream(device.index, stream):
        return torch.from_dlpack(cupy.zeros((2, words), dtype=cupy.int64))


class StreamWorkspace:
    """The published words of split lanes on one stream (int64: each segment's map a, b per channel), reused by
    every launch on the stream.

    Launches on one stream run in order, so one buffer serves them all: a word written by an earlier launch carries
    an older epoch, which the kernel reads as "not yet published". The words are zeroed only when the buffer grows
    or the epoch counter wraps."""

    def __init__(self, device: torch.device, stream: int = 0):
        self.device, self.stream = device, stream
        self.words = _zeroed_words(device, stream, 2)
        self.maps = tuple(self.words)
        self.epoch = 0

    def take(self, words: int) -> tuple[tuple[torch.Tensor, ...], int]:
        """(the two word arrays (a, b), epoch) for one launch needing `words` words per array."""
        words = _even(words)
        if self.words.shape[1] < words:
            self.words = _zeroed_words(self.device, self.stream, max(words, 2 * self.words.shape[1]))
            self.maps = tuple(self.words)
            self.epoch = 0
        self.epoch += 1
        if self.epoch >= EPOCH_LIMIT:
            self.words.zero_()
            self.epoch = 1
        return self.maps, self.epoch


_workspaces: dict[tuple[int, int], StreamWorkspace] = {}


def _even(words: int) -> int:
    """Rows of an even number of words: both arrays start 16-byte aligned (the look-back reads word pairs)."""
    return words + words % 2


def _workspace(device: torch.device, stream: int, words: int) -> tuple[tuple[torch.Tensor, ...], int]:
    """The workspace of raw stream handle `stream` on `device` for one launch (see StreamWorkspace.take)."""
    if torch.cuda.is_current_stream_capturing():
        # a captured graph replays the same epoch, so words left by one replay would read as published in the
        # next: the graph gets a workspace of its own, zeroed by a captured memset before each replay
        return tuple(torch.zeros(2, max(2, _even(words)), device=device, dtype=torch.int64)), 1
    key = (device.index, stream)
    ws = _workspaces.get(key)
    if ws is None:
        ws = _workspaces[key] = StreamWorkspace(device, stream)
    return ws.take(words)


def _aligned(t: torch.Tensor, access_bytes: int) -> torch.Tensor:
    return t if t.data_ptr() % access_bytes == 0 else t.clone()


def run_scan(cell: str, direction: str, inputs: tuple[torch.Tensor, ...], h0: torch.Tensor | None,
             dy: torch.Tensor | None = None, h: torch.Tensor | None = None,
             kernel_plan: ScanPlan | None = None) -> tuple[torch.Tensor, ...]:
    """One launch. Forward returns (h,); backward returns (grad of each input..., grad_h0 in fp32 or None).

    `kernel_plan` replaces the solver's plan (benchmarks compare the model's choice with alternatives)."""
    x = inputs[0]
    B, T, D = x.shape
    backward = direction == "backward"
    outs = tuple(torch.empty_like(t) for t in inputs) if backward else (torch.empty_like(x),)
    grad_h0 = torch.empty(B, D, device=x.device, dtype=torch.float32) if backward and h0 is not None else None
    if x.numel() == 0:  # nothing to launch; with no steps h does not depend on h0
        return (*outs, grad_h0.zero_() if grad_h0 is not None else None) if backward else outs
    run = (_launch_of(kernel_plan, B, T, D, x.element_size(), x.device.index) if kernel_plan is not None
           else _device_launch(cell, direction, x))
    access = run.access
    inputs = tuple(_aligned(t, access) for t in inputs)
    if h0 is not None:
        h0 = _aligned(h0, access)
    stream = current_stream_handle(x.device.index)
    if run.words:
        maps, epoch = _workspace(x.device, stream, run.words)
    else:  # nothing is published: null workspace pointers
        maps, epoch = (None, None), 0
    x1, x2 = inputs[0], inputs[1]
    x3 = inputs[2] if len(inputs) > 2 else None
    y = outs + (None,) * (3 - len(outs))
    if backward:
        dy, h = _aligned(dy, access), _aligned(h, access)
    launch(run.kernel, run.grid, run.block,
           (x1, x2, x3, h0, dy, h, y[0], y[1], y[2], grad_h0, *maps, T, D, run.d_tiles, run.lanes, run.segments, epoch),
           shared_mem=run.shared_mem, device=x.device.index, stream=stream)
    return (*outs, grad_h0) if backward else outs
