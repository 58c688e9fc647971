"""One forward + backward on each CUDA path, as a function of the device: the fused kernel with a head on one block,
split over blocks through L2, in every dtype; the alternating backend; the scan's whole lanes, split lanes and
chained fused cells. Inputs are drawn on the CPU, so every device gets the same values."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from flashrnn_kernels import flashrnn, get_cell, linear_scan
from flashrnn_kernels.scan import min_gru_scan

Run = Callable[[], list[torch.Tensor]]


def _draw(seed: int, device: str, dtype: torch.dtype):
    g = torch.Generator().manual_seed(seed)
    return lambda *shape, scale=1.0, rand=False: (scale * (torch.rand if rand else torch.randn)(
        *shape, generator=g)).to(device=device, dtype=dtype)


def recurrent(cell: str, B: int, T: int, NH: int, DH: int, dtype: torch.dtype, backend: str, device: str) -> Run:
    """`flashrnn` on `device` with random inputs: returns a function that runs it and gives [h, last states, grads]."""
    spec = get_cell(cell)
    draw = _draw(B * T + DH, device, torch.float32)
    states = draw(spec.state_count, B, NH, DH, scale=0.5)
    if cell == "slstm":  # a normaliser n >= 1
        states[2] = 1 + states[2].abs()
    inputs = [draw(B, T, spec.gate_count, NH, DH), draw(spec.gate_count, NH, DH, DH, scale=DH**-0.5),
              draw(spec.gate_count, NH, DH, scale=0.3), states]
    inputs = [t.to(dtype) for t in inputs]
    upstream = draw(B, T, NH, DH).to(dtype)

    def run() -> list[torch.Tensor]:
        leaves = [t.clone().requires_grad_() for t in inputs]
        h, last = flashrnn(*leaves, cell=cell, backend=backend)
        torch.autograd.backward(h, upstream)
        return [h, last, *(t.grad for t in leaves)]

    return run


def scan(op, B: int, T: int, D: int, dtype: torch.dtype, device: str, near_one: bool = False) -> Run:
    """A scan op (a, b, h0) on `device` with random inputs, decays in (0, 1), or with `near_one` in (0.999, 1), which
    bf16 rounds to 1 (no look-back of a split lane ends before segment 0): [h, grads]."""
    draw = _draw(T + D, device, dtype)
    decays = 1 - draw(B, T, D, scale=1e-3, rand=True) if near_one else draw(B, T, D, rand=True)
    inputs = [decays, draw(B, T, D), draw(B, D)]
    upstream = draw(B, T, D)

    def run() -> list[torch.Tensor]:
        leaves = [t.clone().requires_grad_() for t in inputs]
        h = op(*leaves)
        torch.autograd.backward(h, upstream)
        return [h, *(t.grad for t in leaves)]

    return run


CASES: dict[str, Callable[[str], Run]] = {
    "fused-lstm-12x64-bf16": lambda dev: recurrent("lstm", 16, 128, 12, 64, torch.bfloat16, "fused", dev),
    "fused-lstm-1x768-bf16": lambda dev: recurrent("lstm", 16, 64, 1, 768, torch.bfloat16, "fused", dev),
    "fused-gru-1x1024-fp32": lambda dev: recurrent("gru", 8, 32, 1, 1024, torch.float32, "fused", dev),
    "fused-slstm-3x256-fp16": lambda dev: recurrent("slstm", 5, 50, 3, 256, torch.float16, "fused", dev),
    "alternating-lstm-1x2048-bf16": lambda dev: recurrent("lstm", 4, 16, 1, 2048, torch.bfloat16, "alternating", dev),
    "linear-scan-split-lanes-fp32": lambda dev: scan(linear_scan, 1, 65536, 64, torch.float32, dev),
    "linear-scan-whole-lanes-bf16": lambda dev: scan(linear_scan, 8, 1024, 1536, torch.bfloat16, dev),
    "linear-scan-split-lanes-near-one-bf16": lambda dev: scan(linear_scan, 1, 65536, 64, torch.bfloat16, dev, True),
    "min-gru-chained-bf16": lambda dev: scan(min_gru_scan, 1, 65536, 64, torch.bfloat16, dev),
}
"""Each case's builder: device -> Run."""
ROUNDING_ONLY = {"linear-scan-split-lanes-fp32", "linear-scan-split-lanes-near-one-bf16", "min-gru-chained-bf16"}
"""Cases whose reruns may differ by rounding: a split lane's look-back composes each predecessor's map, or takes its
final state where that is published already, and which of the two it finds depends on timing (the carries agree to
rounding, not to the bit; compute-sanitizer's racecheck, which changes the timing, showed it). Under
torch.use_deterministic_algorithms they rerun to the bit (only segment 0 publishes a final state; with decays near 1
every look-back reaches it, through the groups' maps)."""


@contextlib.contextmanager
def deterministic_algorithms() -> Iterator[None]:
    """torch.use_deterministic_algorithms(True) inside (warn_only: torch's own GEMMs would need a cuBLAS workspace
    setting), the previous setting after."""
    kept = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(kept[0], warn_only=kept[1])


def same_or_rounding(case: str, a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal, or for ROUNDING_ONLY cases within_rounding."""
    if case not in ROUNDING_ONLY or torch.equal(a, b):
        return torch.equal(a, b)
    return within_rounding(a, b)


def within_rounding(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether b is within two units of rounding of a's dtype, relative to max |a| (what a split lane's look-back
    allows)."""
    scale = a.double().abs().max().item()
    return max_difference(a, b) <= 2 * torch.finfo(a.dtype).eps * scale


def max_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double().cpu() - b.double().cpu()).abs().max().item()


def captured(step: Callable[[], Any]) -> tuple[torch.cuda.CUDAGraph, Any]:
    """(graph, outputs) of `step` captured on the current device, after one warm-up call on a side stream (plans
    and compiles happen there, outside the capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step()
    return graph, outputs
