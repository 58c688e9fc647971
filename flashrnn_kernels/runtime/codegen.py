"""render(plan, cell) -> CUDA source: #defines from the plan's kernel fields, the cell's step as a device
function, then the direction's kernel body (fused/forward.cu or fused/backward.cu).

Nothing here re-derives a tile size: the kernel computes its own layout from the defines and static_asserts
that it matches the plan's derived thread count and shared-memory size.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..cells import CellSpec, get_cell

KERNEL_DIR = Path(__file__).resolve().parent.parent / "fused"

INT_FIELDS: tuple[str, ...] = (
    "num_heads", "head_dim", "gates", "states", "batch_tile", "head_blocks", "global_exchange", "warps_m", "warps_k",
    "k_tile", "m_tiles", "reg_k_tiles", "global_k_tiles", "blocks_per_sm", "vector_buffers", "stages", "pair_blocks",
)
"""Integer plan fields rendered as `#define NAME value` (upper-case field name)."""


def defines(plan: Any) -> str:
    """The plan's kernel fields and derived sizes as preprocessor definitions."""
    lines = [f"#define {name.upper()} {int(getattr(plan, name))}" for name in INT_FIELDS]
    lines.append(f"#define DTYPE_{plan.dtype.upper()} 1")
    if plan.fast_activations:
        lines.append("#define FLASHRNN_FAST_ACTIVATIONS 1")
    lines.append(f"#define PLAN_THREADS {plan.threads}")
    lines.append(f"#define PLAN_SMEM_BYTES {plan.smem_bytes}")
    return "\n".join(lines)


def _bind(kind: str, names: tuple[str, ...], array: str) -> list[str]:
    return [f"    [[maybe_unused]] const float {kind}_{name} = {array}[{k}];" for k, name in enumerate(names)]


def cell_function(cell: CellSpec, direction: str) -> str:
    """The cell's pointwise step as `cell_forward(x, s, y, a)` or `cell_backward(a, s, y, dy, dx, ds)`."""
    g, s = cell.gates, cell.states
    if direction == "forward":
        head = ("__device__ __forceinline__ void cell_forward(const float (&x)[GATES], const float (&s)[STATES], "
                "float (&y)[STATES], float (&a)[GATES]) {")
        body = _bind("x", g, "x") + _bind("s", s, "s") + ["    " + ln for ln in cell.cuda_forward().splitlines()]
        body += [f"    y[{k}] = y_{n};" for k, n in enumerate(s)] + [f"    a[{k}] = a_{n};" for k, n in enumerate(g)]
    else:
        head = ("__device__ __forceinline__ void cell_backward(const float (&a)[GATES], const float (&s)[STATES], "
                "const float (&y)[STATES], const float (&dy)[STATES], float (&dx)[GATES], float (&ds)[STATES]) {")
        body = _bind("a", g, "a") + _bind("s", s, "s") + _bind("y", s, "y") + _bind("dy", s, "dy")
        body += ["    " + ln for ln in cell.cuda_backward().splitlines()]
        body += [f"    dx[{k}] = dx_{n};" for k, n in enumerate(g)]
        body += [f"    ds[{k}] = ds_{n};" for k, n in enumerate(s)]
    return "\n".join([head, *body, "}"])


def render(plan: Any, cell: str | CellSpec | None = None) -> str:
    """Complete CUDA source of the plan's kernel (`plan.kernel_name`), for NVRTC or nvcc with -I<package root>."""
    spec = get_cell(plan.cell if cell is None else cell)
    if spec.gate_count != plan.gates or spec.state_count != plan.states:
        raise ValueError(f"cell {spec.name!r} has {spec.gate_count} gates / {spec.state_count} states but the plan "
                         f"was solved for {plan.gates} / {plan.states}; plan for cell {spec.name!r}")
    body = (KERNEL_DIR / plan.kernel_source).read_text()
    return "\n".join([
        f"// {plan.kernel_name}: cell {spec.name}, {plan.dtype}, planned for {plan.gpu} ({plan.version})",
        defines(plan),
        '#include "cells/ops.cuh"',
        cell_function(spec, plan.direction),
        body,
    ])
