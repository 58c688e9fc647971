"""The CUDA paths under torch.inference_mode, torch.no_grad and grad mode, in any order of first use (buffers that a
backend keeps between calls, such as the alternating runner's and the scan's look-back workspace, are made in the
first mode and written in the others): every mode gives the same output (to rounding for split lanes), and a
backward still runs afterwards."""
from __future__ import annotations

import pytest
import torch

from flashrnn_kernels import flashrnn, linear_scan

from .gpu_cases import same_or_rounding

pytestmark = pytest.mark.gpu

MODES = {"inference": torch.inference_mode, "no_grad": torch.no_grad, "grad": torch.enable_grad}


def _recurrent(backend: str):
    g = torch.Generator().manual_seed(3)
    B, T, NH, DH = 4, 30, 1, 2048 if backend == "alternating" else 64
    draw = lambda *shape, scale=1.0: (scale * torch.randn(*shape, generator=g)).to("cuda", torch.bfloat16)  # noqa
    inputs = [draw(B, T, 4, NH, DH), draw(4, NH, DH, DH, scale=DH**-0.5), draw(4, NH, DH, scale=0.3),
              draw(2, B, NH, DH, scale=0.5)]
    return inputs, lambda *t: flashrnn(*t, cell="lstm", backend=backend)[0]


def _scan(op):
    g = torch.Generator().manual_seed(4)
    B, T, D = 1, 20000, 64  # split lanes: the per-stream workspace
    inputs = [torch.rand(B, T, D, generator=g).cuda(), torch.randn(B, T, D, generator=g).cuda()]
    return inputs, op


ROUNDING_CASE = {"linear_scan": "linear-scan-split-lanes-fp32"}  # the gpu_cases case of the same kind
CASES = {
    "fused": lambda: _recurrent("fused"),
    "alternating": lambda: _recurrent("alternating"),
    "linear_scan": lambda: _scan(linear_scan),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("order", [("inference", "no_grad", "grad"), ("no_grad", "inference", "grad"),
                                   ("grad", "inference", "no_grad")], ids="-then-".join)
def test_every_grad_mode_in_any_order(case, order):
    inputs, run = CASES[case]()
    outputs = {}
    for mode in order:
        with MODES[mode]():
            leaves = [t.clone().requires_grad_(mode == "grad") for t in inputs]
            out = run(*leaves)
            if mode == "grad":
                out.float().square().sum().backward()
                assert all(t.grad is not None and torch.isfinite(t.grad.float()).all() for t in leaves)
            outputs[mode] = out.detach().clone()
    with torch.inference_mode():  # once more, after the other modes
        outputs["inference again"] = run(*inputs).clone()
    first = outputs[order[0]]
    for mode, out in outputs.items():  # the split lanes' look-back agrees to rounding (gpu_cases.ROUNDING_ONLY)
        assert same_or_rounding(ROUNDING_CASE.get(case, case), out, first), f"{mode} differs from {order[0]}"
