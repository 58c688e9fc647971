"""run_scan's host side without a GPU: the launch sizes it caches per shape match the plan's, shape by shape (CPU
tensors, the launch recorded instead of made)."""
from __future__ import annotations

import hwmodels
import torch

from flashrnn_kernels.scan import function


def test_each_shape_launches_its_plans_sizes(monkeypatch):
    gpu = hwmodels.load("H200-SXM-141GB")
    calls = []
    monkeypatch.setattr(function, "_device_gpu", lambda index: gpu)
    monkeypatch.setattr(function, "_kernel", lambda plan, device: plan)
    monkeypatch.setattr(function, "current_stream_handle", lambda index: 0)
    monkeypatch.setattr(function, "_workspaces", {})
    monkeypatch.setattr(function, "_graph_workspaces", {})
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(function, "launch", lambda kernel, grid, block, args, **kw: calls.append(
        (kernel, grid, block, args, kw)))
    monkeypatch.setattr(function, "_launches", {})
    # same buckets of B and T for the first two (one plan), other sizes; the first shape again at the end
    shapes = [(3, 5000, 64), (4, 6000, 64), (1, 65536, 64), (8, 256, 1536), (3, 5000, 64)]
    for direction in ("forward", "backward"):
        for B, T, D in shapes:
            x = torch.rand(B, T, D)
            extra = {"dy": torch.randn(B, T, D), "h": torch.randn(B, T, D)} if direction == "backward" else {}
            function.run_scan("linear", direction, (x, torch.randn(B, T, D)), None, **extra)
            plan, grid, block, args, kw = calls[-1]
            assert plan == function.device_plan("linear", x, direction)
            lanes = B * plan.d_tiles(D)
            segments = plan.segments(lanes, plan.chunks(T))
            assert grid == (lanes * segments,) and block == (plan.threads_d, plan.threads_t)
            assert args[-6:-1] == (T, D, plan.d_tiles(D), lanes, segments) and kw["shared_mem"] == plan.stage_bytes
            assert (args[10] is None) == (segments == 1), "workspace words exactly where lanes are split"
    assert len(function._launches) == 2 * (len(shapes) - 1)
