"""Every CUDA path gives bitwise-identical outputs and gradients when run again on the same inputs (no reduction
whose order depends on timing), except the split-lane scans, which agree to rounding (gpu_cases.ROUNDING_ONLY):
the cases of gpu_cases.py."""
from __future__ import annotations

import pytest

from .gpu_cases import CASES, max_difference, same_or_rounding

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
