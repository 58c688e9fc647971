"""Accuracy targets per storage dtype, one table for every kernel test.

`rel` bounds the relative error ||out - ref|| / ||ref|| against a float64 reference; `atol`/`rtol` serve
elementwise comparisons (torch.testing.assert_close) of short computations.
"""
from __future__ import annotations

import torch

TOLERANCES: dict[torch.dtype, dict[str, float]] = {
    torch.bfloat16: {"rel": 5e-3, "atol": 2e-2, "rtol": 2e-2},
    torch.float16: {"rel": 2e-3, "atol": 5e-3, "rtol": 5e-3},
    torch.float32: {"rel": 1e-5, "atol": 1e-5, "rtol": 1e-5},
    torch.float64: {"rel": 1e-12, "atol": 1e-12, "rtol": 1e-12},
}


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 (NaN anywhere gives NaN, which fails every bound)."""
    out, ref = out.detach().double(), ref.detach().double().to(out.device)
    return ((out - ref).norm() / ref.norm().clamp_min(1e-300)).item()
