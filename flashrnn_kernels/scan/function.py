"""Launcher for the scan kernels (linear scan, minGRU, minLSTM), all on one scan.cu (autograd: library.py).

Tensors are [B, T, D], contiguous, one floating dtype (fp32, bf16 or fp16; fp32 accumulation inside). The forward
writes h; the backward runs the same kernel in reverse on dL/dh and the saved h and writes the gradients of the
cell's inputs and of h0.

Host path per call: the launch's sizes from a dict keyed by (cell, direction, device, dtype, B, T, D, wanted
gradients, paired forward, torch's deterministic mode) (the plans themselves are solved once per bucket of B and T),
for split lanes the workspace reused per stream (no allocation and no memset: every published word carries the
launch's epoch), and one launch. A launch captured into a CUDA graph takes a workspace zeroed ahead by an eager call
and its epoch from the device (GraphWorkspaces).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from ..runtime.compile import get_kernel
from ..runtime.device import device_gpu as _device_gpu
from ..runtime.launch import capture_id, cupy_stream, current_stream_handle, launch
from .plan import ScanPlan, plan
from .problem import ALL_GRADIENTS, ScanProblem, bucket

KERNEL_NAME = "flashrnn_scan"
TORCH_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
EPOCH_LIMIT = 1 << 31
"""Published words carry a tag in their high 32 bits, 2 * epoch (a segment's map) or 2 * epoch + 1 (its final
state): epochs run 1 .. EPOCH_LIMIT - 1, then the words are zeroed."""

_plans: dict[tuple, ScanPlan] = {}


def device_plan(cell: str, like: torch.Tensor, direction: str, wanted: int = ALL_GRADIENTS,
                paired: bool = False, deterministic: bool = False) -> ScanPlan:
    """The plan for `cell` on `like`'s device for its [B, T, D] shape and dtype, a backward writing the gradients
    `wanted` (ScanProblem.wanted), a forward that a backward follows where `paired` (ScanProblem.paired), bitwise
    repeatable where `deterministic`: solved once per bucket of B and T, then a dict lookup."""
    index = like.device.index if like.device.index is not None else 0
    B, T, D = like.shape
    key = (cell, index, D, like.dtype, direction, bucket(B), bucket(T), wanted, paired, deterministic)
    found = _plans.get(key)
    if found is None:
        problem = ScanProblem.for_shape(cell, B, T, D, TORCH_DTYPES[like.dtype], direction, wanted, paired,
                                        deterministic)
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
    words: int  # published words per array (split lanes: every segment's, then every group's), else 0
    programmatic: bool  # `programmatic_launch`


def programmatic_launch(p: ScanPlan) -> bool:
    """Whether `p` launches as a programmatic dependent launch, beginning as the previous kernel on the stream ends
    (scan.cu waits for it at entry). Backwards, forwards that a backward follows, and forwards holding steps do: in
    linear_scan forward + backward pairs on an H100 0.972-0.981x the time; repeated forwards alone 0.968-1.029x (the
    thin ones slower, results/scan_pdl_probe_h100.md), so the others launch plainly, but those holding steps (one
    wave) 0.941-0.947x (results/scan_held_alone_pdl_ab_h100.md). Whole-lane minGRU / minLSTM launches are plain: as
    programmatic ones their forward + backward pairs took 1.11-1.30x the sum of their kernels, plain ones that sum
    (results/scan_cell_pairs_plain_whole_h100.md)."""
    if p.carry == "whole" and p.problem.cell != "linear":
        return False
    return p.problem.direction == "backward" or p.problem.paired or p.held > 0


_launches: dict[tuple, _Launch] = {}
_LAUNCHES_KEPT = 4096


def _launch_of(p: ScanPlan, B: int, T: int, D: int, element_size: int, device: int) -> _Launch:
    d_tiles = p.d_tiles(D)
    lanes = B * d_tiles
    segments = p.segments(lanes, p.chunks(T))
    return _Launch(_kernel(p, device), (lanes * segments,), (p.threads_d, p.threads_t), p.stage_bytes,
                   p.vec * element_size, d_tiles, lanes, segments, p.published_words(lanes, segments),
                   programmatic_launch(p))


def _device_launch(cell: str, direction: str, x: torch.Tensor, wanted: int = ALL_GRADIENTS,
                   paired: bool = False) -> _Launch:
    """The solver's plan's launch for `cell` on `x` (its device, dtype and [B, T, D]), a backward writing the
    gradients `wanted`, a paired forward, bitwise repeatable under torch.use_deterministic_algorithms: a dict lookup
    after the first call of a shape."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    key = (cell, direction, x.device.index, x.dtype, *x.shape, wanted, paired, deterministic)
    found = _launches.get(key)
    if found is None:
        if len(_launches) >= _LAUNCHES_KEPT:
            _launches.clear()
        B, T, D = x.shape
        found = _launches[key] = _launch_of(device_plan(cell, x, direction, wanted, paired, deterministic), B, T, D,
                                            x.element_size(), x.device.index)
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

SPARES = 2
"""Zeroed workspaces each device keeps for captures (GraphWorkspaces)..."""
SPARE_WORDS = 1 << 16
"""...for launches of up to this many words per array (1 MiB a workspace, which a capture keeps): a larger launch
runs long enough that a captured memset beside it costs little."""
GRAPH_CELLS = ("linear",)
"""Cells whose captured launches take spares: in CUDA graphs on the H200, linear_scan's split lanes took 0.83-0.96x
the time with them, minGRU / minLSTM's chained ones 1.00-1.03x (benchmarks/results/scan_graph_words_ab.md)."""
GRAPH_SLOTS = 16  # launches sharing one workspace in a capture (scan.cu's SCAN_GRAPH_SLOTS)
GRAPH_CYCLE = (1 << 26) - 1  # launch counts cycle in this (scan.cu's SCAN_GRAPH_CYCLE)
GRAPH_COUNTERS = 32  # launch counters per slot (carries.cuh's graph_epoch)


class GraphWorkspace(NamedTuple):
    words: torch.Tensor  # [2, capacity] int64, zeroed before the graph's first replay
    counters: torch.Tensor  # [GRAPH_SLOTS, GRAPH_COUNTERS] int64 launch counters (graph_epoch), zeroed too


@torch.inference_mode(False)  # normal tensors, which tests and the sanitizer case may write outside inference mode
def _graph_workspace(device: torch.device, stream: int, capacity: int) -> GraphWorkspace:
    """A zeroed GraphWorkspace of `capacity` words per array, made on raw stream `stream`, which is synchronised so
    that a graph replayed on any stream finds it zeroed."""
    header = GRAPH_SLOTS * GRAPH_COUNTERS // 2
    buffer = _zeroed_words(device, stream, capacity + header).view(-1)
    if device.type == "cuda":
        cupy_stream(device.index, stream).synchronize()
    return GraphWorkspace(buffer[:2 * capacity].view(2, capacity),
                          buffer[2 * capacity:].view(GRAPH_SLOTS, GRAPH_COUNTERS))


class GraphWorkspaces:
    """Workspaces of the split-lane launches captured into CUDA graphs, on one device.

    A replay repeats its launches' parameters, so a captured launch makes its epoch on the device from a row of
    launch counters (carries.cuh's graph_epoch) and publishes into words zeroed once before the graph's first
    replay. That zeroing cannot be captured (it would run in every replay), so eager calls keep SPARES workspaces
    zeroed ahead. A capture takes one per capturing stream, whose launches in the capture (the graph runs them one
    after another) share its words, each with a row of counters of its own (its slot), and keeps it while the
    process lives, since the graph may replay at any time. A captured launch finding none (no eager call since the
    last captures took them, more than SPARE_WORDS words, or GRAPH_SLOTS launches already on the workspace) gets
    `None` and a workspace of its own, zeroed by a captured memset in every replay."""

    def __init__(self, device: torch.device):
        self.device = device
        self.capacity = 0
        self.spares: list[GraphWorkspace] = []
        self.captured: dict[tuple[int, int], tuple[GraphWorkspace, int]] = {}  # (capture, stream): (newest, slots used)
        self.held: list[GraphWorkspace] = []  # every workspace a capture took

    def keep(self, stream: int, words: int) -> None:
        """Eager calls: SPARES zeroed workspaces of at least `words` words (up to SPARE_WORDS) ready for captures."""
        if words > SPARE_WORDS:
            return
        if words > self.capacity:
            self.spares.clear()
            self.capacity = min(SPARE_WORDS, max(_even(words), 2 * self.capacity))
        while len(self.spares) < SPARES:
            self.spares.append(_graph_workspace(self.device, stream, self.capacity))

    def take(self, capture: int, stream: int, words: int) -> tuple[GraphWorkspace, int] | None:
        """(the workspace, the slot) of the next launch of capture `capture` on raw stream `stream`, of `words` words
        per array, or None."""
        found, used = self.captured.get((capture, stream), (None, GRAPH_SLOTS))
        if found is None or used == GRAPH_SLOTS or found.words.shape[1] < words:
            if not self.spares or self.capacity < words:
                return None
            found, used = self.spares.pop(), 0
            self.held.append(found)
        self.captured[capture, stream] = (found, used + 1)
        return found, used


_graph_workspaces: dict[torch.device, GraphWorkspaces] = {}


def _device_graph_workspaces(device: torch.device) -> GraphWorkspaces:
    found = _graph_workspaces.get(device)
    if found is None:
        found = _graph_workspaces[device] = GraphWorkspaces(device)
    return found


def _even(words: int) -> int:
    """Rows of an even number of words: both arrays start 16-byte aligned (the look-back reads word pairs)."""
    return words + words % 2


def _workspace(device: torch.device, stream: int, words: int,
               cell: str) -> tuple[tuple[torch.Tensor, ...], int, torch.Tensor | None]:
    """(the two word arrays, the epoch, None) for an eager launch on raw stream handle `stream` of `device`, from the
    stream's workspace (StreamWorkspace.take); (the words, the slot, the slot's launch counters) for a captured launch
    given a GraphWorkspace."""
    if torch.cuda.is_current_stream_capturing():
        capture = capture_id(stream) if cell in GRAPH_CELLS else None
        found = None if capture is None else _device_graph_workspaces(device).take(capture, stream, words)
        if found is not None:
            workspace, slot = found
            return tuple(workspace.words), slot, workspace.counters[slot]
        # a replay repeats the launch's epoch, so words left by one replay would read as published in the next:
        # a workspace of its own, zeroed by a captured memset before each replay
        return tuple(torch.zeros(2, max(2, _even(words)), device=device, dtype=torch.int64)), 1, None
    key = (device.index, stream)
    ws = _workspaces.get(key)
    if ws is None:
        ws = _workspaces[key] = StreamWorkspace(device, stream)
    maps, epoch = ws.take(words)
    if cell in GRAPH_CELLS:
        _device_graph_workspaces(device).keep(stream, words)
    return maps, epoch, None


def _aligned(t: torch.Tensor, access_bytes: int) -> torch.Tensor:
    return t if t.data_ptr() % access_bytes == 0 else t.clone()


def run_scan(cell: str, direction: str, inputs: tuple[torch.Tensor, ...], h0: torch.Tensor | None,
             dy: torch.Tensor | None = None, h: torch.Tensor | None = None,
             kernel_plan: ScanPlan | None = None, needs: tuple[bool, ...] | None = None,
             paired: bool = False, settled: bool = False) -> tuple[torch.Tensor, ...]:
    """One launch. Forward returns (h,); backward returns (grad of each input..., grad_h0 in fp32 or None).

    `needs` (backward): which of the inputs, then h0, want a gradient (None: all); the others get None, and the kernel
    (planned and compiled for the inputs' flags, ScanProblem.wanted) neither writes them nor reads h where no wanted
    gradient needs it (linear_scan with a fixed `a` reads dy and a and writes db alone). `kernel_plan` replaces the
    solver's plan (benchmarks compare the model's choice with alternatives; a backward's is taken for `needs`).
    `paired` (forward): a backward of this call follows, so the forward takes the plan made for that context
    (ScanProblem.paired). `settled` (backward): no kernel has written `inputs` since the forward read them (autograd's
    saved tensors), so the kernel stages them before the previous kernel on the stream ends (scan.cu's `early`);
    inputs copied here for alignment are not settled."""
    x = inputs[0]
    B, T, D = x.shape
    backward = direction == "backward"
    needs = (True,) * (len(inputs) + 1) if needs is None else needs
    outs = (tuple(torch.empty_like(t) if need else None for t, need in zip(inputs, needs)) if backward
            else (torch.empty_like(x),))
    grad_h0 = (torch.empty(B, D, device=x.device, dtype=torch.float32) if backward and h0 is not None and needs[-1]
               else None)
    if x.numel() == 0:  # nothing to launch; with no steps h does not depend on h0
        return (*outs, grad_h0.zero_() if grad_h0 is not None else None) if backward else outs
    wanted = ALL_GRADIENTS & ~sum(1 << i for i, need in enumerate(needs[:len(inputs)]) if not need)
    if kernel_plan is not None and backward:
        kernel_plan = kernel_plan.for_gradients(wanted)
    run = (_launch_of(kernel_plan, B, T, D, x.element_size(), x.device.index) if kernel_plan is not None
           else _device_launch(cell, direction, x, wanted, paired))
    access = run.access
    given, inputs = inputs, tuple(_aligned(t, access) for t in inputs)
    settled = backward and settled and all(a is b for a, b in zip(inputs, given))
    if h0 is not None:
        h0 = _aligned(h0, access)
    stream = current_stream_handle(x.device.index)
    if run.words:
        maps, epoch, counters = _workspace(x.device, stream, run.words, cell)
    else:  # nothing is published: null workspace pointers
        maps, epoch, counters = (None, None), 0, None
    x1, x2 = inputs[0], inputs[1]
    x3 = inputs[2] if len(inputs) > 2 else None
    y = outs + (None,) * (3 - len(outs))
    if backward:
        dy, h = _aligned(dy, access), _aligned(h, access)
    launch(run.kernel, run.grid, run.block,
           (x1, x2, x3, h0, dy, h, y[0], y[1], y[2], grad_h0, *maps, counters, T, D, run.d_tiles, run.lanes,
            run.segments, epoch, int(settled)),
           shared_mem=run.shared_mem, device=x.device.index, stream=stream,
           programmatic=run.programmatic)
    return (*outs, grad_h0) if backward else outs
