"""The alternating backend's pointwise kernels as CUDA source: the cell's step rendered exactly as for the fused
kernel (runtime/codegen.py `cell_function`), then alternating/pointwise.cu.

The source depends on the cell and the storage dtype only (no sizes: B, NH, DH and every stride are runtime
arguments), so one compiled module serves every shape.
"""
from __future__ import annotations

from pathlib import Path

from ..cells import CellSpec, get_cell
from ..fused.problem import dtype_name
from ..runtime.codegen import cell_function

THREADS = 256
"""Threads per block of both pointwise kernels (one thread per (batch, head, unit) element)."""
KERNEL_NAMES = {"forward": "alternating_forward", "backward": "alternating_backward"}
_BODY = Path(__file__).resolve().parent / "pointwise.cu"


def render(cell: str | CellSpec, dtype: object) -> str:
    """CUDA source defining `alternating_forward` and `alternating_backward` for `cell` in `dtype` (bf16/fp16/fp32).

    bf16/fp16 use the hardware activations (FLASHRNN_FAST_ACTIVATIONS), as the fused kernel does.
    """
    spec = get_cell(cell)
    name = dtype_name(dtype)
    lines = [
        f"// alternating pointwise kernels: cell {spec.name}, {name}",
        f"#define GATES {spec.gate_count}",
        f"#define STATES {spec.state_count}",
        f"#define THREADS {THREADS}",
        f"#define DTYPE_{name.upper()} 1",
    ]
    if name != "fp32":
        lines.append("#define FLASHRNN_FAST_ACTIVATIONS 1")
    lines += ['#include "cells/ops.cuh"', cell_function(spec, "forward"), cell_function(spec, "backward"),
              _BODY.read_text()]
    return "\n".join(lines)
