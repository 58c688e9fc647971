"""run_scan's host side without a GPU: the launch sizes it caches per shape match the plan's, shape by shape (CPU
tensors, the launch recorded instead of made)."""
from __future__ import annotations

import hwmodels
import torch

from flashrnn_kernels import library
from flashrnn_kernels.scan import function
from tests.flashrnn_kernels.gpu_cases import deterministic_algorithms


def _record_launches(monkeypatch) -> list:
    """run_scan with the H200's plans and its launches recorded (kernel: the plan), not made."""
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
    return calls


def test_each_shape_launches_its_plans_sizes(monkeypatch):
    calls = _record_launches(monkeypatch)
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
            assert args[-7:-2] == (T, D, plan.d_tiles(D), lanes, segments) and kw["shared_mem"] == plan.stage_bytes
            assert (args[10] is None) == (segments == 1), "workspace words exactly where lanes are split"
            assert kw["programmatic"] == (direction == "backward" or plan.held > 0), \
                "backwards and forwards holding steps begin as the previous kernel ends"
    assert len(function._launches) == 2 * (len(shapes) - 1)
    assert any(c[0].held for c in calls), "the thin fp32 forward alone holds steps"
    x = torch.rand(1, 65536, 64)
    function.run_scan("linear", "forward", (x, torch.randn_like(x)), None, paired=True)
    assert calls[-1][0].problem.paired and calls[-1][4]["programmatic"], "so do forwards that a backward follows"
    function.run_scan("linear", "forward", (x, torch.randn_like(x)), None, kernel_plan=calls[-1][0])
    assert calls[-1][4]["programmatic"], "a given paired plan launches as its own problem says"


def test_deterministic_mode_launches_its_plans(monkeypatch):
    """Under torch.use_deterministic_algorithms split lanes launch the plan compiled for it (SCAN_DETERMINISTIC), with
    the same sizes, and whole lanes the same plan as without; each mode keeps its own launch record."""
    calls = _record_launches(monkeypatch)
    for shape, split in (((1, 65536, 64), True), ((8, 256, 1536), False)):
        a, b = torch.rand(*shape), torch.randn(*shape)
        function.run_scan("linear", "forward", (a, b), None)
        default = calls[-1]
        with deterministic_algorithms():
            function.run_scan("linear", "forward", (a, b), None)
        deterministic = calls[-1]
        function.run_scan("linear", "forward", (a, b), None)
        assert calls[-1][0] is default[0], "the default mode's record is kept"
        assert deterministic[0].defines()["SCAN_DETERMINISTIC"] == int(split)
        assert (deterministic[0] is default[0]) == (not split)
        assert deterministic[1:3] == default[1:3] and deterministic[4] == default[4]
    assert len(function._launches) == 4


def test_only_autograd_backwards_stage_settled_inputs(monkeypatch):
    """The kernel's last argument, `settled` (it stages the cell inputs before the previous kernel ends), is 1 only
    for a backward that autograd launches on the tensors the forward saved: not through the op (a compiled graph may
    compute its inputs just before), not for inputs copied on the way, never for a forward."""
    calls = _record_launches(monkeypatch)
    shape = (1, 65536, 64)
    a, b = torch.rand(*shape, requires_grad=True), torch.randn(*shape, requires_grad=True)
    h = library._EagerScan.apply("linear", True, None, a, b)
    assert calls[-1][0].problem.direction == "forward" and calls[-1][3][-1] == 0
    h.backward(torch.randn(*shape))
    assert calls[-1][0].problem.direction == "backward" and calls[-1][3][-1] == 1
    dy = torch.randn(*shape)
    inputs = [a.detach(), b.detach()]
    library._scan_backward_cuda("linear", inputs, None, dy, h.detach(), [True, True, False])
    assert calls[-1][3][-1] == 0, "the op's kernel: inputs not known to be settled"
    strided = [torch.rand(1, 64, 65536).transpose(1, 2), inputs[1]]
    library._scan_backward_cuda("linear", strided, None, dy, h.detach(), [True, True, False], settled=True)
    assert calls[-1][3][-1] == 0, "a non-contiguous input is copied just before the launch"
    offset = torch.rand(a.numel() + 1)[1:].view(shape)  # 4 bytes past an aligned address: cloned for the access
    function.run_scan("linear", "backward", (offset, inputs[1]), None, dy=dy, h=h.detach(), settled=True)
    assert calls[-1][3][-1] == 0, "an input cloned for alignment just before the launch"
    function.run_scan("linear", "backward", tuple(inputs), None, dy=dy, h=h.detach(), settled=True)
    assert calls[-1][3][-1] == 1
    function.run_scan("linear", "forward", tuple(inputs), None, settled=True)
    assert calls[-1][3][-1] == 0, "a forward's inputs may come from the kernel just before it"


def test_programmatic_launches():
    """Backwards, paired forwards and forwards holding steps launch programmatically, other forwards and the gate
    cells' whole lanes plainly; the shapes take every cell through whole and split lanes, and linear forwards through
    held steps."""
    from flashrnn_kernels.scan.plan import plan
    from flashrnn_kernels.scan.problem import ScanProblem

    gpu, seen = hwmodels.load("H200-SXM-141GB"), set()
    for cell in ("linear", "min_gru", "min_lstm"):
        for B, T, D in [(8, 4096, 1536), (8, 256, 1536), (1, 65536, 64), (2, 32768, 128)]:
            for direction, paired in (("forward", False), ("forward", True), ("backward", False)):
                p = plan(ScanProblem.for_shape(cell, B, T, D, "float32", direction, paired=paired), gpu)
                expected = ((direction == "backward" or paired or p.held > 0)
                            and not (p.carry == "whole" and cell != "linear"))
                assert function.programmatic_launch(p) is expected, (cell, B, T, D, direction, paired, p.carry)
                seen.add((cell, p.carry != "whole", direction, paired, p.held > 0))
    for cell in ("linear", "min_gru", "min_lstm"):
        for split in (False, True):
            assert {(cell, split, "forward", True, False), (cell, split, "backward", False, False)} <= seen, cell
    assert ("linear", True, "forward", False, True) in seen, "no held forward among the shapes"
