"""Every CUDA path gives bitwise-identical outputs and gradients when run again on the same inputs (no reduction
whose order depends on timing): the cases of gpu_cases.py."""
from __future__ import annotations

import pytest
import torch

from .gpu_cases import CASES, max_difference

pytestmark = pytest.mark.gpu
RERUNS = 3


@pytest.mark.parametrize("case", list(CASES))
def test_reruns_are_bitwise_identical(case):
    run = CASES[case]("cuda")
    first = run()
    for _ in range(RERUNS):
        again = run()
        for k, (a, b) in enumerate(zip(first, again)):
            assert torch.equal(a, b), f"result {k} differs by up to {max_difference(a, b):.3e}"
