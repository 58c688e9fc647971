"""Gradients of gradients: the ops' backward is first order, so a second backward must raise rather than treat
the gradients as constants (which would drop their derivative from a loss without a word)."""
from __future__ import annotations

import warnings

import pytest
import torch

from flashrnn_kernels import flashrnn, linear_scan, min_lstm
from flashrnn_kernels.fused.reference import flashrnn_reference
from flashrnn_kernels.scan.reference import linear_scan_loop

FIRST_ORDER = "gradients of the gradients of .* are not implemented: the backward ops are first order"


def _lstm_inputs(device: str, dtype: torch.dtype = torch.float32, DH: int = 16) -> list[torch.Tensor]:
    shapes = [(2, 5, 4, 1, DH), (4, 1, DH, DH), (4, 1, DH), (2, 2, 1, DH)]
    return [(0.5 * torch.randn(s, device=device, dtype=dtype)).requires_grad_() for s in shapes]


def _second_backward(outputs: torch.Tensor, inputs: list[torch.Tensor]) -> None:
    """A gradient penalty: backward through the gradients of `outputs`."""
    grads = torch.autograd.grad(outputs.pow(2).sum(), inputs, create_graph=True)
    assert all(g.requires_grad for g in grads), "the gradients must stay attached to the graph"
    sum(g.pow(2).sum() for g in grads).backward()


def _call_flashrnn(inputs: list[torch.Tensor], backend: str) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference fallback's one-time warning on CPU
        h, _ = flashrnn(*inputs, cell="lstm", backend=backend)
    return h


def test_second_backward_through_the_ops_raises_on_cpu():
    inputs = _lstm_inputs("cpu")
    with pytest.raises(RuntimeError, match=FIRST_ORDER + ".*fused.reference.flashrnn_reference"):
        _second_backward(_call_flashrnn(inputs, "auto"), inputs)
    a, b = torch.rand(2, 7, 3, requires_grad=True), torch.randn(2, 7, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match=FIRST_ORDER + ".*scan.reference"):
        _second_backward(linear_scan(a, b), [a, b])


def test_first_order_gradients_with_create_graph_match_the_reference():
    inputs = _lstm_inputs("cpu", torch.float64)
    got = torch.autograd.grad(_call_flashrnn(inputs, "auto").sum(), inputs, create_graph=True)
    want = torch.autograd.grad(flashrnn_reference(*inputs, "lstm")[0].sum(), inputs)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_the_references_the_message_names_give_second_order_gradients():
    inputs = _lstm_inputs("cpu", torch.float64)
    _second_backward(flashrnn_reference(*inputs, "lstm")[0], inputs)
    a, b = torch.rand(2, 7, 3, dtype=torch.float64, requires_grad=True), torch.randn(2, 7, 3, dtype=torch.float64,
                                                                                       requires_grad=True)
    _second_backward(linear_scan_loop(a, b), [a, b])
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in [*inputs, a, b])


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["fused", "alternating"])
def test_second_backward_through_the_cuda_backends_raises(backend):
    inputs = _lstm_inputs("cuda", DH=64)
    with pytest.raises(RuntimeError, match=FIRST_ORDER):
        _second_backward(_call_flashrnn(inputs, backend), inputs)


@pytest.mark.gpu
def test_second_backward_through_the_cuda_scans_raises():
    a, b = (torch.rand(2, 9, 32, device="cuda", requires_grad=True) for _ in range(2))
    with pytest.raises(RuntimeError, match=FIRST_ORDER):
        _second_backward(linear_scan(a, b), [a, b])
    x = torch.randn(2, 9, 8, device="cuda", requires_grad=True)
    weights = [torch.randn(32, 8, device="cuda", requires_grad=True) for _ in range(3)]
    with pytest.raises(RuntimeError, match=FIRST_ORDER):
        _second_backward(min_lstm(x, *weights), [x, *weights])
