"""choose(): the fused kernel or the alternating backend for one problem, and why.

Fused when fused/plan.py finds a tiling for both directions (R, or its L2-streamed part, fits the GPU's chip); the
alternating backend otherwise: a head_dim the fused kernel does not render, or a plan error quoting the limits
that no tiling meets (its message is the reason).
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from ..cells import get_cell
from ..fused.plan import KernelPlan, PlanError, plan
from ..fused.problem import HEAD_DIMS, dtype_name

BACKENDS: tuple[str, ...] = ("fused", "alternating")


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
    plans = []
    for direction in ("forward", "backward") if training else ("forward",):
        try:
            plans.append(plan(name, batch, num_heads, head_dim, dtype, gpu=gpu, direction=direction))
        except PlanError as exc:
            return BackendChoice("alternating", f"no fused {direction} tiling: {exc}")
    forward, backward = plans[0], plans[1] if training else None
    where = "on chip" if forward.global_k_tiles == 0 else "partly streamed from L2"
    blocks = ("one block per head" if forward.head_blocks == 1 else
              f"{forward.head_blocks} blocks per head exchanging h through global memory" if forward.global_exchange
              else f"a cluster of {forward.head_blocks} blocks per head")
    return BackendChoice("fused", f"the fused kernel has a tiling on {forward.gpu} (R {where}, batch tile "
                                  f"{forward.batch_tile}, {blocks})", forward, backward)
