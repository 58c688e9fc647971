"""choose(): the fused kernel or the alternating backend for one problem, and why.

The alternating backend when the fused kernel cannot run the problem (a head_dim it does not render, or a plan error
quoting the limits that no tiling meets: its message is the reason), or when it is predicted to be much slower: the
fused plans' objectives (predicted cycles per step) against a per-step model of the alternating backend, fitted to
H200 measurements (alternating_crossover.md, alternating.md: a fixed cost of the step's graph nodes plus R read once
per step, from L2 while it fits there, else from memory). The models are coarse, so the alternating backend must be
predicted ALTERNATING_MARGIN times faster to be chosen.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from ..cells import get_cell
from ..fused.plan import KernelPlan, PlanError, gpu_model, plan
from ..fused.problem import HEAD_DIMS, dtype_name

BACKENDS: tuple[str, ...] = ("fused", "alternating")

ALTERNATING_MARGIN = 1.5
ALTERNATING_FIXED_US = {"forward": 4.9, "backward": 5.5}  # per step: the graph's GEMM and pointwise nodes
ALTERNATING_R_READS = {"forward": 1.0, "backward": 2.3}  # R's bytes per step in units of one read of R
L2_RATE, MEMORY_RATE = 1.34, 0.86  # R re-read per step, as a multiple of the GPU's memory bandwidth (H200 fit:
# 12x64 to 2x1024 bf16 from L2, 1x4096 bf16 from memory)


def alternating_step_us(num_heads: int, head_dim: int, gates: int, elem_bytes: int, gpu: Any, direction: str) -> float:
    """Predicted microseconds of one step of the alternating backend in `direction`."""
    r_bytes = gates * num_heads * head_dim * head_dim * elem_bytes
    rate = (L2_RATE if r_bytes <= gpu.l2_bytes // 2 else MEMORY_RATE) * gpu.memory_bandwidth
    return ALTERNATING_FIXED_US[direction] + 1e6 * ALTERNATING_R_READS[direction] * r_bytes / rate


def fused_step_us(found: KernelPlan, gpu: Any) -> float:
    """Predicted microseconds of one step of the fused kernel: its plan's objective at the boost clock."""
    return found.objective / gpu.boost_clock_mhz


@dataclass(frozen=True)
class BackendChoice:
    """The chosen backend ("fused" or "alternating"), the reason in words, and the fused plans when fused."""

    backend: str
    reason: str
    forward_plan: KernelPlan | None = None
    backward_plan: KernelPlan | None = None


def choose(cell: str, batch: int, num_heads: int, head_dim: int, dtype: Any, gpu: Any = None,
           training: bool = True, fused_cells: Collection[str] | None = None) -> BackendChoice:
    """Fused or alternating for `cell` on `gpu` (a hwmodels GPUModel, a name, or None for the current device).

    `training` also requires a backward plan for "fused"; `fused_cells`, when given, names the cells the fused
    kernel is wired for (others go to the alternating backend). Raises ValueError for a dtype neither backend runs.
    """
    name = get_cell(cell).name
    dtype = dtype_name(dtype)
    for label, value in (("batch", batch), ("num_heads", num_heads), ("head_dim", head_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive int, got {value!r}")
    if fused_cells is not None and name not in fused_cells:
        return BackendChoice("alternating", f"the fused kernel does not implement cell {name!r} (fused cells: "
                                            f"{sorted(fused_cells)}); the alternating backend runs every cell")
    if head_dim not in HEAD_DIMS:
        return BackendChoice("alternating", f"the fused kernel supports head_dim in {list(HEAD_DIMS)}, got "
                                            f"{head_dim}; the alternating backend runs any head_dim")
    plans, direction = [], "forward"
    try:
        model = gpu_model(gpu)  # detected once for both plans and the predictions
        for direction in ("forward", "backward") if training else ("forward",):
            plans.append(plan(name, batch, num_heads, head_dim, dtype, gpu=model, direction=direction))
    except PlanError as exc:
        return BackendChoice("alternating", f"no fused {direction} tiling: {exc}")
    forward, backward = plans[0], plans[1] if training else None
    fused_us = sum(fused_step_us(p, model) for p in plans)
    alternating_us = sum(alternating_step_us(num_heads, head_dim, p.gates, p.problem.elem_bytes, model, p.direction)
                         for p in plans)
    where = "on chip" if forward.global_k_tiles == 0 else "partly streamed from L2"
    if alternating_us * ALTERNATING_MARGIN < fused_us:
        return BackendChoice("alternating", f"the alternating backend is predicted at {alternating_us:.1f} us per step "
                                            f"against the fused kernel's {fused_us:.1f} us on {forward.gpu} (R "
                                            f"{where} there)")
    blocks = ("one block per head" if forward.head_blocks == 1 else
              f"{forward.head_blocks} blocks per head exchanging h through global memory" if forward.global_exchange
              else f"a cluster of {forward.head_blocks} blocks per head")
    return BackendChoice("fused", f"the fused kernel has a tiling on {forward.gpu} (R {where}, batch tile "
                                  f"{forward.batch_tile}, {blocks}; predicted {fused_us:.1f} us per step against "
                                  f"{alternating_us:.1f} alternating)", forward, backward)

