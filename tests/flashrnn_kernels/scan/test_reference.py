"""The references agree with each other: step loop == log-space form == chunk-carry decomposition, forward and
backward, with and without h0, and stay finite for decays near 0 and 1 over long sequences."""
from __future__ import annotations

import pytest
import torch

from flashrnn_kernels.scan import linear_scan
from flashrnn_kernels.scan import reference as ref
from tests.tolerances import relative_error

F64 = torch.float64


def _inputs(n: int, B: int = 2, T: int = 29, D: int = 6) -> list[torch.Tensor]:
    return [torch.randn(B, T, D, dtype=F64, requires_grad=True) for _ in range(n)]


@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("cell", ["min_gru", "min_lstm"])
def test_loop_equals_log_space_forward_and_backward(cell, with_h0):
    inputs = _inputs(2 if cell == "min_gru" else 3)
    h0 = torch.rand(2, 6, dtype=F64, requires_grad=True) + 0.1 if with_h0 else None
    loop, log = (ref.min_gru_loop, ref.min_gru_log_space) if cell == "min_gru" else (
        ref.min_lstm_loop, ref.min_lstm_log_space)
    dy = torch.randn(2, 29, 6, dtype=F64)
    leaves = inputs + ([h0] if with_h0 else [])
    out_loop = loop(*inputs, h0)
    grads_loop = torch.autograd.grad(out_loop, leaves, dy)
    out_log = log(*inputs, h0)
    grads_log = torch.autograd.grad(out_log, leaves, dy)
    assert relative_error(out_log, out_loop) < 1e-12
    for name, g_log, g_loop in zip("abcdh", grads_log, grads_loop):
        assert relative_error(g_log, g_loop) < 1e-10, name


@pytest.mark.parametrize("T", [1, 2, 29, 1000])
@pytest.mark.parametrize("chunk_len", [None, 1, 4, 7, 29, 64])
def test_chunked_decomposition_equals_loop(chunk_len, T):
    a, b = torch.rand(3, T, 5, dtype=F64), torch.randn(3, T, 5, dtype=F64)
    h0 = torch.randn(3, 5, dtype=F64)
    for start in (None, h0):
        chunked = ref.linear_scan_chunked(a, b, start, chunk_len)
        assert relative_error(chunked, ref.linear_scan_loop(a, b, start)) < 1e-13
        backwards = ref.linear_scan_chunked(a, b, start, chunk_len, reverse=True)
        assert relative_error(backwards, ref.linear_scan_loop(a.flip(1), b.flip(1), start).flip(1)) < 1e-13


@pytest.mark.parametrize("chunk_len", [None, 7])
@pytest.mark.parametrize("reverse", [False, True])
def test_chunked_scan_gradcheck_fp64(chunk_len, reverse):
    # the GPU tests differentiate it as their float64 reference
    a, b = torch.rand(2, 50, 3, dtype=F64, requires_grad=True), torch.randn(2, 50, 3, dtype=F64, requires_grad=True)
    h0 = torch.randn(2, 3, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *xs: ref.linear_scan_chunked(*xs, chunk_len, reverse), (a, b, h0))
    zero = torch.zeros(2, 3, dtype=F64, requires_grad=True)  # a zero state still passes its gradient on
    assert torch.autograd.gradcheck(lambda *xs: ref.linear_scan_chunked(*xs, chunk_len, reverse), (a, b, zero))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_chunked_scan_accumulates_as_the_loop_does(dtype):
    a = (0.5 + 0.5 * torch.rand(2, 3001, 8)).to(dtype)  # decays in (0.5, 1): long memories
    b, h0 = torch.randn(2, 3001, 8).to(dtype), torch.randn(2, 8).to(dtype)
    chunked, loop = ref.linear_scan_chunked(a, b, h0), ref.linear_scan_loop(a, b, h0)
    assert chunked.dtype == loop.dtype == dtype
    exact = ref.linear_scan_loop(a.double(), b.double(), h0.double())
    assert relative_error(chunked, exact) <= 2 * max(relative_error(loop, exact), torch.finfo(dtype).eps)
    assert ref.linear_scan_chunked(a[:, :0], b[:, :0], h0).shape == (2, 0, 8)


def test_chunked_scan_keeps_zero_states_out_of_overflowing_products():
    # a zero prefix (padding) with decays above 1: a chunk's product of them overflows fp32, the loop's states stay 0
    a, b = torch.full((1, 4096, 4), 0.5), torch.randn(1, 4096, 4)
    a[:, :64], b[:, :64] = 8.0, 0.0
    exact = ref.linear_scan_loop(a.double(), b.double())
    assert relative_error(ref.linear_scan_chunked(a, b), exact) < 1e-6
    backwards = ref.linear_scan_chunked(a.flip(1), b.flip(1), reverse=True).flip(1)
    assert relative_error(backwards, exact) < 1e-6
    assert not ref.linear_scan_chunked(torch.full((1, 8, 1), 1e20), torch.zeros(1, 8, 1)).any()


def test_chunk_length_balances_the_passes():
    assert ref.chunk_length(1) == 1 and ref.chunk_length(65537) == 181  # 2 * 181 + 362 steps instead of 65,537
    assert ref.chunk_length(65536) == 128  # a divisor of T (2 * 128 + 512 steps), rather than a ragged end


@pytest.mark.parametrize("fn,n", [(ref.linear_scan_loop, 2), (ref.min_gru_loop, 2), (ref.min_lstm_loop, 3),
                                  (ref.min_gru_log_space, 2), (ref.min_lstm_log_space, 3)])
def test_gradcheck_fp64(fn, n):
    inputs = _inputs(n, B=2, T=5, D=3)
    h0 = (torch.rand(2, 3, dtype=F64) + 0.2).requires_grad_()
    assert torch.autograd.gradcheck(lambda *xs: fn(*xs[:-1], xs[-1]), (*inputs, h0))
    assert torch.autograd.gradcheck(lambda *xs: fn(*xs, None), tuple(inputs))


def test_log_space_rejects_non_positive_h0():
    k, hp = torch.randn(2, 1, 4, 3, dtype=F64)
    with pytest.raises(ValueError, match="positive h0"):
        ref.min_gru_log_space(k, hp, -torch.ones(1, 3, dtype=F64))


@pytest.mark.parametrize("k_scale", [-30.0, 30.0])
def test_long_sequences_with_extreme_decays_stay_finite(k_scale):
    """k = -30: z ~ 1e-13, a ~ 1 (memory kept); k = +30: a ~ 1e-13 (state replaced each step). The log-space
    form is compared in fp64: in fp32 its cumulative log-decay (down to -1.2e5 here) cancels catastrophically."""
    T = 4096
    k = torch.full((1, T, 4), k_scale, dtype=F64) + 0.1 * torch.randn(1, T, 4, dtype=F64)
    hp = torch.randn(1, T, 4, dtype=F64)
    h0 = torch.rand(1, 4, dtype=F64) + 0.5
    loop = ref.min_gru_loop(k, hp, h0)
    log = ref.min_gru_log_space(k, hp, h0)
    loop32 = ref.min_gru_loop(k.float(), hp.float(), h0.float())
    assert torch.isfinite(loop).all() and torch.isfinite(log).all() and torch.isfinite(loop32).all()
    assert relative_error(log, loop) < 1e-9
    assert relative_error(loop32, loop) < 1e-5
    if k_scale < 0:  # the state barely moves from h0: no underflow to zero
        assert (loop[:, -1] > 0.5 * h0).all()
    else:  # each state is the current candidate
        assert relative_error(loop, ref.g(hp)) < 1e-9



@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_loops_accumulate_in_fp32(dtype):
    """A running sum of 4,096 steps of about 0.01 in a bf16 state would stall at 4 (its increments fall below half an
    ulp); the loops and the CPU op's gradients keep the state in fp32, as the kernels do, and round what they return."""
    a, b = torch.ones(2, 4096, 3), torch.full((2, 4096, 3), 0.01) + 0.001 * torch.rand(2, 4096, 3)
    k, h_pre = torch.randn(2, 4096, 3), torch.randn(2, 4096, 3)
    for loop, inputs in ((ref.linear_scan_loop, (a, b)), (ref.min_gru_loop, (k, h_pre))):
        rounded = [t.to(dtype) for t in inputs]
        low = loop(*rounded)
        assert low.dtype == dtype
        assert relative_error(low.double(), loop(*(t.double() for t in rounded))) < 1e-2
    leaves = [t.to(dtype).requires_grad_() for t in (a, b)]
    dy = torch.randn(2, 4096, 3).to(dtype)
    grads = torch.autograd.grad(linear_scan(*leaves), leaves, dy)
    exact = [t.detach().double().requires_grad_() for t in leaves]
    expected = torch.autograd.grad(ref.linear_scan_loop(*exact), exact, dy.double())
    for got, want in zip(grads, expected):
        assert got.dtype == dtype and relative_error(got.double(), want) < 1e-2
