"""Every CUDA path gives bitwise-identical outputs and gradients when run again on the same inputs (no reduction
whose order depends on timing), except the split-lane scans, which agree to rounding (gpu_cases.ROUNDING_ONLY), and
to the bit under torch.use_deterministic_algorithms, also while another stream's kernel holds SMs: the cases of
gpu_cases.py."""
from __future__ import annotations

import pytest
import torch

from .gpu_cases import CASES, ROUNDING_ONLY, deterministic_algorithms, max_difference, same_or_rounding

pytestmark = pytest.mark.gpu
RERUNS = 3


@pytest.mark.parametrize("case", list(CASES))
def test_reruns_are_bitwise_identical(case):
    run = CASES[case]("cuda")
    first = run()
    for _ in range(RERUNS):
        again = run()
        for k, (a, b) in enumerate(zip(first, again)):
            assert same_or_rounding(case, a, b), f"result {k} differs by up to {max_difference(a, b):.3e}"


def _crowded(run):
    """`run` while a long elementwise kernel on another stream holds SMs, so that the scan's blocks start in another
    order and at other times than alone."""
    side, crowd = torch.cuda.Stream(), torch.rand(1 << 27, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(4):
            crowd.mul_(0.999)
    result = run()
    torch.cuda.current_stream().wait_stream(side)
    return result


@pytest.mark.parametrize("case", sorted(ROUNDING_ONLY))
def test_split_lanes_rerun_bitwise_in_deterministic_mode(case):
    with deterministic_algorithms():
        run = CASES[case]("cuda")
        first = run()
        for crowd in (False, True, False, True):
            again = _crowded(run) if crowd else run()
            for k, (a, b) in enumerate(zip(first, again)):
                assert torch.equal(a, b), f"crowd={crowd}: result {k} differs by up to {max_difference(a, b):.3e}"
