"""Fast recurrent networks on NVIDIA GPUs: fused persistent kernels planned by a constraint solver.

Public API: `flashrnn` (the recurrent op), the modules `FlashLSTM`, `FlashGRU`, `FlashSLSTM`, `FlashElman`,
`get_cell`, `plan` / `KernelPlan` (the fused kernel's planner, imported on first use), and the parallel-scan
ops `linear_scan`, `min_gru`, `min_lstm` with their modules `MinGRU`, `MinLSTM`.
"""
from __future__ import annotations

import importlib
from typing import Any

from .cells import CellSpec, get_cell
from .dispatch import ReferenceFallbackWarning, flashrnn
from .nn import FlashElman, FlashGRU, FlashLSTM, FlashRNNBase, FlashSLSTM
from .scan import MinGRU, MinLSTM, linear_scan, min_gru, min_lstm

_LAZY_PLAN_NAMES = ("plan", "KernelPlan")


def __getattr__(name: str) -> Any:
    if name in _LAZY_PLAN_NAMES:
        return getattr(importlib.import_module(".fused.plan", __name__), name)
    raise AttributeError(f"module 'flashrnn_kernels' has no attribute {name!r}")


__all__ = [
    "CellSpec",
    "FlashElman",
    "FlashGRU",
    "FlashLSTM",
    "FlashRNNBase",
    "FlashSLSTM",
    "KernelPlan",
    "MinGRU",
    "MinLSTM",
    "ReferenceFallbackWarning",
    "flashrnn",
    "get_cell",
    "linear_scan",
    "min_gru",
    "min_lstm",
    "plan",
]
