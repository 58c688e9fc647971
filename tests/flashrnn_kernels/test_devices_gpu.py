"""The kernels on a second GPU: every path of gpu_cases.py run on cuda:1 gives the bits it gives on cuda:0 (to
rounding for gpu_cases.ROUNDING_ONLY; two devices of one model plan and compile alike), whichever device is current,
in any order of first use; and a CUDA graph captured on cuda:1 replays there."""
from __future__ import annotations

import functools

import pytest
import torch

from flashrnn_kernels import flashrnn, linear_scan

from .gpu_cases import CASES, captured, max_difference, recurrent, same_or_rounding, scan

pytestmark = pytest.mark.gpu


def _two_of_a_kind() -> str | None:
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        return "needs two CUDA devices"
    names = {torch.cuda.get_device_name(i) for i in (0, 1)}
    return None if len(names) == 1 else f"cuda:0 and cuda:1 differ ({sorted(names)}): their plans may differ"


_NOT_TWO = _two_of_a_kind()
needs_two = pytest.mark.skipif(_NOT_TWO is not None, reason=str(_NOT_TWO))


@functools.cache
def _on_first_device(case: str) -> tuple[torch.Tensor, ...]:
    with torch.cuda.device(0):
        return tuple(t.cpu() for t in CASES[case]("cuda:0")())


@needs_two
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("data, current", [(1, 0), (1, 1), (0, 1)], ids=["on1-current0", "on1-current1",
                                                                         "on0-current1"])
def test_same_bits_on_either_device(case, data, current):
    with torch.cuda.device(current):
        got = CASES[case](f"cuda:{data}")()
        torch.cuda.synchronize(data)
    expected = _on_first_device(case)
    for k, (a, b) in enumerate(zip(expected, got)):
        assert b.device == torch.device("cuda", data), f"result {k} is on {b.device}"
        assert same_or_rounding(case, a, b.cpu()), \
            f"result {k} differs from cuda:0's by up to {max_difference(a, b):.3e}"


@needs_two
@pytest.mark.parametrize("op", ["linear_scan", "flashrnn"])
def test_graph_captured_on_second_device(op):
    """Forwards captured on cuda:1 (split lanes of the scan, with their workspace; a head split over blocks through
    L2) replay there with the eager results, including after new inputs are copied in."""
    device = "cuda:1"
    with torch.cuda.device(1):
        if op == "linear_scan":
            run_eager = scan(linear_scan, 1, 65536, 64, torch.float32, device)
            inputs = [torch.rand(1, 65536, 64, device=device), torch.randn(1, 65536, 64, device=device),
                      torch.randn(1, 64, device=device)]
            forward = lambda: linear_scan(*inputs)  # noqa: E731
        else:
            run_eager = recurrent("lstm", 16, 64, 1, 768, torch.bfloat16, "fused", device)
            inputs = [torch.randn(16, 64, 4, 1, 768, device=device, dtype=torch.bfloat16),
                      0.03 * torch.randn(4, 1, 768, 768, device=device, dtype=torch.bfloat16),
                      torch.randn(4, 1, 768, device=device, dtype=torch.bfloat16),
                      0.5 * torch.randn(2, 16, 1, 768, device=device, dtype=torch.bfloat16)]
            forward = lambda: flashrnn(*inputs, cell="lstm", backend="fused")[0]  # noqa: E731
        run_eager()  # plans and compiles on this device first
        graph, out = captured(forward)
        for _ in range(2):
            for t in inputs:
                t.copy_(t.roll(1, dims=1) * 0.9)
            graph.replay()
            torch.cuda.synchronize(1)
            expected = forward()
            assert out.device == torch.device(device)
            case = "linear-scan-split-lanes-fp32" if op == "linear_scan" else "fused-lstm-1x768-bf16"
            assert same_or_rounding(case, out, expected), f"replay differs from eager by " \
                                                          f"{max_difference(out, expected):.3e}"
