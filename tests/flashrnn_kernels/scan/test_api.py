"""Public API on CPU: the reference path, modules (whole sequence and step mode) and input errors."""
from __future__ import annotations

import itertools

import pytest
import torch

from flashrnn_kernels.library import scan_backward
from flashrnn_kernels.scan import (MinGRU, MinLSTM, linear_scan, min_gru, min_gru_scan, min_lstm, min_lstm_scan,
                                    reference)
from tests.flashrnn_kernels.gpu_cases import within_rounding
from tests.tolerances import relative_error


def test_cpu_path_is_the_reference_loop():
    x = torch.randn(2, 9, 5)
    W_z, W_h = torch.randn(2, 4, 5)
    h0 = torch.rand(2, 4)
    expected = reference.min_gru_loop(x @ W_z.t(), x @ W_h.t(), h0)
    assert relative_error(min_gru(x, W_z, W_h, h0), expected) < 1e-6
    W_f, W_i, W_o = torch.randn(3, 4, 5)
    expected = reference.min_lstm_loop(x @ W_f.t(), x @ W_i.t(), x @ W_o.t(), h0)
    assert relative_error(min_lstm(x, W_f, W_i, W_o, h0), expected) < 1e-6


@pytest.mark.parametrize("module_type", [MinGRU, MinLSTM])
def test_step_mode_matches_the_sequence(module_type):
    module = module_type(6, 8)
    x = torch.randn(3, 7, 6)
    h0 = torch.rand(3, 8)
    full = module(x, h0)
    h = h0
    for t in range(7):
        h = module.step(x[:, t], h)
        assert relative_error(h, full[:, t]) < 1e-6
    with pytest.raises(ValueError, match=r"x_t: \[B, D_in\]"):
        module.step(x, h)


def test_bad_inputs_name_the_problem():
    a, b = torch.rand(2, 5, 4), torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match=r"\[B, T, D\]"):
        linear_scan(a[0], b[0])
    with pytest.raises(ValueError, match="same"):
        linear_scan(a, b[:, :3])
    with pytest.raises(TypeError, match="one dtype"):
        linear_scan(a, b.double())
    with pytest.raises(TypeError, match="unsupported dtype"):
        linear_scan(a.int(), b.int())
    with pytest.raises(ValueError, match="contiguous"):
        linear_scan(a.transpose(0, 1), b.transpose(0, 1))
    with pytest.raises(ValueError, match=r"h0 must be a \[B, D\]"):
        linear_scan(a, b, torch.zeros(4))
    with pytest.raises(TypeError, match="h0 is torch.float64"):
        linear_scan(a, b, torch.zeros(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"W_h is \(4, 2\) but W_z is \(4, 3\)"):
        min_gru(torch.randn(2, 5, 3), torch.randn(4, 3), torch.randn(4, 2))
    with pytest.raises(ValueError, match=r"x has 6 features .* x must be \[B, T, 3\]"):
        min_gru(torch.randn(2, 5, 6), torch.randn(4, 3), torch.randn(4, 3))
    with pytest.raises(TypeError, match="W_z is torch.float32 .* but x is torch.float64"):
        min_gru(torch.randn(2, 5, 3, dtype=torch.float64), torch.randn(4, 3), torch.randn(4, 3))
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="one device"):
            linear_scan(a, b.cuda())


@pytest.mark.parametrize("shape", [(2, 0, 4), (0, 5, 4), (2, 5, 0)])
@pytest.mark.parametrize("with_h0", [False, True])
def test_empty_extents(shape, with_h0):
    """No steps, no batch rows or no channels: empty outputs and gradients of the inputs' shapes; with no steps h does
    not depend on h0, whose gradient is zero."""
    for op, cell, n in ((linear_scan, "linear", 2), (min_gru_scan, "min_gru", 2), (min_lstm_scan, "min_lstm", 3)):
        xs = [torch.rand(*shape, requires_grad=True) for _ in range(n)]
        h0 = torch.rand(shape[0], shape[2], requires_grad=True) if with_h0 else None
        h = op(*xs, h0)
        assert h.shape == shape
        leaves = xs + ([h0] if with_h0 else [])
        grads = scan_backward(cell, xs, h0, torch.ones(shape), h, [True] * (n + 1))
        assert [tuple(g.shape) for g in grads] == [tuple(t.shape) for t in leaves]
        if with_h0 and shape[1] == 0:
            assert torch.equal(grads[-1], torch.zeros_like(h0))


@pytest.mark.parametrize("module_type", [MinGRU, MinLSTM])
def test_modules_check_their_sizes_and_steps(module_type):
    for sizes in ((0, 3), (-1, 3), (5, 0), (5.0, 3), (True, 3)):
        with pytest.raises(ValueError, match="must be a positive int"):
            module_type(*sizes)
    module = module_type(5, 3, dtype=torch.float64)
    assert all(p.dtype == torch.float64 for p in module.parameters())
    with pytest.raises(TypeError, match="h is torch.float32"):
        module.step(torch.randn(2, 5, dtype=torch.float64), torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"step takes x_t: \[B, D_in\] = \[B, 5\], got \(2, 4\)"):
        module.step(torch.randn(2, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"dtype must be one of .*got torch.int64"):
        module_type(5, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"x must be a tensor \[B, T, D_in\], got a list"):
        module([[1.0] * 5])


SCAN_OPS = {"linear": (linear_scan, 2), "min_gru": (min_gru_scan, 2), "min_lstm": (min_lstm_scan, 3)}


def wanted_gradient_runs(cell: str, B: int, T: int, D: int, device: str, dtype: torch.dtype):
    """(the gradients of every input and h0, then for each proper subset of them that requires grad: its flags and
    gradients) for one random draw of `cell`'s inputs (decays in (0, 1) for linear_scan)."""
    op, count = SCAN_OPS[cell]
    g = torch.Generator().manual_seed(B * T + D)
    inputs = [(torch.rand if cell == "linear" and k == 0 else torch.randn)(B, T, D, generator=g) for k in range(count)]
    values = [t.to(device=device, dtype=dtype) for t in (*inputs, torch.randn(B, D, generator=g))]
    upstream = torch.randn(B, T, D, generator=g).to(device=device, dtype=dtype)

    def gradients(needs):
        leaves = [v.clone().requires_grad_(need) for v, need in zip(values, needs)]
        h = op(*leaves)
        return torch.autograd.grad(h, [t for t in leaves if t.requires_grad], upstream)

    every = (True,) * (count + 1)
    subsets = [n for n in itertools.product((False, True), repeat=count + 1) if any(n) and n != every]
    return gradients(every), [(needs, gradients(needs)) for needs in subsets]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("cell", list(SCAN_OPS))
def test_backward_computes_the_wanted_gradients(cell, device):
    """Inputs that do not require grad get none; the others' gradients are those of a call where all do: bitwise on
    the CPU reference; on the eager CUDA path (its autograd.Function) to two units of rounding, since [1, 5000, 64]
    splits its lane over blocks (the look-back)."""
    shape, dtype = ((2, 9, 5), torch.float64) if device == "cpu" else ((1, 5000, 64), torch.float32)
    full, runs = wanted_gradient_runs(cell, *shape, device, dtype)
    for needs, grads in runs:
        expected = [g for g, need in zip(full, needs) if need]
        assert len(grads) == len(expected)
        for k, (got, want) in enumerate(zip(grads, expected)):
            same = torch.equal(got, want) if device == "cpu" else within_rounding(want, got)
            assert same, f"{cell} needs={needs}: gradient {k}"


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_forward_is_paired_where_autograd_will_differentiate_it(device, monkeypatch):
    """`paired` (a backward follows: the forward's plan for that context) is set where grad mode is on and an input
    or h0 requires grad, on the custom op (CPU, torch.compile) and on the eager CUDA path alike."""
    from flashrnn_kernels import library

    seen = []
    if device == "cpu":
        op = library.scan_forward

        def recorded(cell, inputs, h0, paired):
            seen.append(paired)
            return op(cell, inputs, h0, paired)
        monkeypatch.setattr(library, "scan_forward", recorded)
    else:
        launch = library.run_scan

        def recorded(*args, paired=False, **kwargs):
            seen.append(paired)
            return launch(*args, paired=paired, **kwargs)
        monkeypatch.setattr(library, "run_scan", recorded)
    a, b = torch.rand(1, 300, 8, device=device), torch.randn(1, 300, 8, device=device)
    h0 = torch.randn(1, 8, device=device)
    linear_scan(a, b)
    linear_scan(a, b.requires_grad_())
    with torch.no_grad():
        linear_scan(a, b)
    b.requires_grad_(False)
    linear_scan(a, b, h0.requires_grad_())
    assert seen == [False, True, False, True]
