"""A CUDA backend against the float64 reference on the same rounded inputs: outputs, last states and every
gradient, and the relative-error assertion the GPU tests share."""
from __future__ import annotations

from collections.abc import Callable

import torch

from flashrnn_kernels.fused.reference import flashrnn_reference
from tests.tolerances import TOLERANCES, relative_error


def compare_with_float64(run: Callable, inputs: list[torch.Tensor], cell: str,
                         grads: bool = True) -> tuple[dict, dict]:
    """(results of `run(Wx, R, b, states, cell)`, float64 reference results) for the same rounded inputs and
    random upstream gradients.

    An sLSTM in bf16 or fp16 gets no upstream gradient on the last states after h: its c, n, m carry the factor
    exp(-m) of the running maximum m, h does not, so a loss on them has kinks where the maximum changes hands, and
    rounding h to 16 bits moves elements across them."""
    load_stabilised_states = not (cell == "slstm" and inputs[0].dtype in (torch.bfloat16, torch.float16))
    ref_inputs = [t.detach().double().requires_grad_(grads) for t in inputs]
    run_inputs = [t.detach().clone().requires_grad_(grads) for t in inputs]
    h, last = run(*run_inputs, cell)
    h_ref, last_ref = flashrnn_reference(*ref_inputs, cell)
    out, ref = {"h": h, "last_states": last}, {"h": h_ref, "last_states": last_ref}
    if grads:
        gh, gl = torch.randn_like(h_ref), torch.randn_like(last_ref)
        if not load_stabilised_states:
            gl[1:] = 0
        torch.autograd.backward((h, last), (gh.to(h.dtype), gl.to(h.dtype)))
        torch.autograd.backward((h_ref, last_ref), (gh, gl))
        for name, a, r in zip(("dWx", "dR", "db", "dstates"), run_inputs, ref_inputs):
            out[name], ref[name] = a.grad, r.grad
    return out, ref


def assert_close_rel(out: dict, ref: dict, dtype: torch.dtype, bound: float | None = None) -> None:
    """Every result has `dtype` and no unwritten (NaN) element, and its relative error is at most `bound` (default:
    the dtype's tolerance)."""
    bound = bound or TOLERANCES[dtype]["rel"]
    for name, t in out.items():
        assert t.dtype == dtype and not t.isnan().any(), f"{name}: dtype {t.dtype} or unwritten (NaN) elements"
    errors = {name: relative_error(out[name], ref[name]) for name in ref}
    bad = {name: e for name, e in errors.items() if not e <= bound}
    assert not bad, f"relative errors above {bound}: {bad} (all: {errors})"
