"""FlashLSTM: torch.nn.LSTM parity through from_torch / to_torch, argument checks, and the fused path on CUDA."""
from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from torch import nn

from flashrnn_kernels import FlashLSTM, ReferenceFallbackWarning

F64 = {"rtol": 1e-10, "atol": 1e-12}


def _grads(module: nn.Module, x: torch.Tensor, outputs, upstream) -> dict[str, torch.Tensor]:
    tensors = [x, *module.parameters()]
    return dict(zip(["x", *(n for n, _ in module.named_parameters())], torch.autograd.grad(outputs, tensors, upstream)))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("with_states", [True, False])
def test_from_torch_matches_nn_lstm(batch_first, bias, with_states):
    torch.manual_seed(0)
    B, T, I, H = 3, 6, 5, 7
    lstm = nn.LSTM(I, H, bias=bias, batch_first=batch_first, dtype=torch.float64)
    model = FlashLSTM.from_torch(lstm, backend="reference")
    assert model.batch_first == batch_first and (model.b is None) == (not bias)
    x = torch.randn(*((B, T) if batch_first else (T, B)), I, dtype=torch.float64, requires_grad=True)
    states = tuple(torch.randn(2, 1, B, H, dtype=torch.float64)) if with_states else None

    expected, (h_ref, c_ref) = lstm(x, states)
    output, (h_n, c_n) = model(x, states)
    assert output.shape == expected.shape and h_n.shape == h_ref.shape == (1, B, H) and c_n.shape == (1, B, H)
    torch.testing.assert_close((output, h_n, c_n), (expected, h_ref, c_ref), **F64)

    upstream = [torch.randn_like(t) for t in (expected, h_ref, c_ref)]
    want = _grads(lstm, x, [expected, h_ref, c_ref], upstream)
    got = _grads(model, x, [output, h_n, c_n], upstream)
    torch.testing.assert_close(got["x"], want["x"], **F64)
    torch.testing.assert_close(got["W_l0"], want["weight_ih_l0"], **F64)
    torch.testing.assert_close(got["R_l0"].view(4 * H, H), want["weight_hh_l0"], **F64)
    if bias:
        torch.testing.assert_close(got["b_l0"].view(4 * H), want["bias_ih_l0"], **F64)
        torch.testing.assert_close(got["b_l0"].view(4 * H), want["bias_hh_l0"], **F64)


@pytest.mark.parametrize("num_heads", [1, 2, 4])
def test_to_torch_reproduces_outputs(num_heads):
    torch.manual_seed(1)
    model = FlashLSTM(6, 8, num_heads=num_heads, dtype=torch.float64, backend="reference")
    lstm = model.to_torch()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    torch.testing.assert_close(model(x)[0], lstm(x)[0], **F64)
    if num_heads > 1:  # the heads become a block-diagonal recurrent matrix
        off_block = lstm.weight_hh_l0.view(4, num_heads, 8 // num_heads, num_heads, 8 // num_heads)
        mask = ~torch.eye(num_heads, dtype=torch.bool)[None, :, None, :, None].expand_as(off_block)
        assert off_block[mask].abs().max() == 0


def test_round_trip_preserves_parameters():
    torch.manual_seed(2)
    lstm = nn.LSTM(4, 6, batch_first=True)
    model = FlashLSTM.from_torch(lstm)
    again = FlashLSTM.from_torch(model.to_torch())
    for (name, p), (_, q) in zip(model.named_parameters(), again.named_parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)
    back = model.to_torch()
    torch.testing.assert_close(back.weight_ih_l0, lstm.weight_ih_l0, rtol=0, atol=0)
    torch.testing.assert_close(back.weight_hh_l0, lstm.weight_hh_l0, rtol=0, atol=0)
    torch.testing.assert_close(back.bias_ih_l0 + back.bias_hh_l0, lstm.bias_ih_l0 + lstm.bias_hh_l0)


@pytest.mark.parametrize(
    "module, message",
    [
        (nn.LSTM(3, 4, proj_size=2), r"proj_size=0 only, got proj_size=2"),
    ],
)
def test_from_torch_rejects_unsupported_lstms(module, message):
    with pytest.raises(ValueError, match=message):
        FlashLSTM.from_torch(module)


def test_from_torch_rejects_other_modules():
    with pytest.raises(TypeError, match=r"FlashLSTM.from_torch expects a torch.nn.LSTM, got GRU"):
        FlashLSTM.from_torch(nn.GRU(3, 4))


def test_constructor_checks():
    with pytest.raises(ValueError, match=r"hidden_size=10 is not divisible by num_heads=4"):
        FlashLSTM(3, 10, num_heads=4)
    with pytest.raises(ValueError, match=r"input_size must be a positive int, got 0"):
        FlashLSTM(0, 8)
    with pytest.raises(ValueError, match=r"unknown backend 'gpu'"):
        FlashLSTM(3, 8, backend="gpu")


def test_parameter_shapes_and_initialisation():
    torch.manual_seed(3)
    model = FlashLSTM(10, 64, num_heads=4)
    assert model.W.shape == (4 * 64, 10) and model.R.shape == (4, 4, 16, 16) and model.b.shape == (4, 4, 16)
    bound = 1 / math.sqrt(64)
    for name, parameter in model.named_parameters():
        assert parameter.abs().max() <= bound, name
        assert parameter.std() > bound / 3, name  # spread over the interval, not constant


def test_forward_argument_checks():
    model = FlashLSTM(3, 4, backend="reference")
    with pytest.raises(ValueError, match=r"x must be \[B, T, input_size\] with input_size=3, got shape \[2, 5, 4\]"):
        model(torch.zeros(2, 5, 4))
    with pytest.raises(ValueError, match=r"h_0 must have shape \[num_layers \* D, B, hidden_size\] = \[1, 2, 4\]"):
        model(torch.zeros(2, 5, 3), (torch.zeros(2, 4), torch.zeros(1, 2, 4)))
    with pytest.raises(ValueError, match=r"states must be a tuple \(h_0, c_0\)"):
        model(torch.zeros(2, 5, 3), torch.zeros(1, 2, 4))
    with pytest.raises(TypeError, match=r"x is torch.float64 .* convert the input"):
        model(torch.zeros(2, 5, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="h_0 is torch.float64"):
        model(torch.zeros(2, 5, 3), (torch.zeros(1, 2, 4, dtype=torch.float64), torch.zeros(1, 2, 4)))


@pytest.mark.parametrize("batch_first", [True, False])
def test_empty_batch_or_sequence(batch_first):
    """No batch rows or no steps: an empty output, and the initial states (zeros by default) as the last states,
    differentiable with respect to the given ones."""
    model = FlashLSTM(3, 4, num_heads=2, num_layers=2, bidirectional=True, batch_first=batch_first,
                      backend="reference")
    for B, T in ((0, 5), (2, 0)):
        x = torch.zeros((B, T, 3) if batch_first else (T, B, 3))
        out, (h, c) = model(x)
        assert out.shape == ((B, T, 8) if batch_first else (T, B, 8))
        assert h.shape == c.shape == (4, B, 4) and not h.any() and not c.any()
    h0, c0 = torch.randn(4, 2, 4, requires_grad=True), torch.randn(4, 2, 4)
    _, (h, c) = model(torch.zeros((2, 0, 3) if batch_first else (0, 2, 3)), (h0, c0))
    assert torch.equal(h, h0) and torch.equal(c, c0)
    (grad,) = torch.autograd.grad(h.sum(), h0)
    assert torch.equal(grad, torch.ones_like(h0))


def _relative_error(value: torch.Tensor, expected: torch.Tensor) -> float:
    expected = expected.detach().double().cpu()
    return ((value.detach().double().cpu() - expected).abs().max() / expected.abs().max()).item()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2), (torch.float16, 1e-2)])
def test_fused_from_torch_matches_nn_lstm_on_cuda(dtype, tolerance):
    torch.manual_seed(4)
    B, T, I, H = 3, 33, 20, 64
    lstm = nn.LSTM(I, H, batch_first=True).to("cuda", dtype)
    oracle = copy.deepcopy(lstm).to("cpu", torch.float64)  # same (rounded) weights, float64 math
    model = FlashLSTM.from_torch(lstm, backend="fused")
    x = torch.randn(B, T, I, device="cuda", dtype=dtype, requires_grad=True)
    x64 = x.detach().to("cpu", torch.float64).requires_grad_()

    output, (h_n, c_n) = model(x)
    expected, (h_ref, c_ref) = oracle(x64)
    for name, got, want in (("output", output, expected), ("h_n", h_n, h_ref), ("c_n", c_n, c_ref)):
        assert got.dtype == dtype and _relative_error(got, want) <= tolerance, name

    upstream = [torch.randn_like(t) for t in (expected, h_ref, c_ref)]
    got = _grads(model, x, [output, h_n, c_n], [u.to("cuda", dtype) for u in upstream])
    want = _grads(oracle, x64, [expected, h_ref, c_ref], upstream)
    checks = {"x": want["x"], "W_l0": want["weight_ih_l0"], "R_l0": want["weight_hh_l0"], "b_l0": want["bias_ih_l0"]}
    for name, expected_grad in checks.items():
        error = _relative_error(got[name].reshape(expected_grad.shape), expected_grad)
        assert error <= 3 * tolerance, f"d{name}: relative error {error:.2e}"


@pytest.mark.gpu
def test_auto_backend_uses_fused_kernel_on_cuda(monkeypatch):
    import flashrnn_kernels.fused.function as function

    calls = []
    original = function.flashrnn_fused
    monkeypatch.setattr(function, "flashrnn_fused", lambda *args: calls.append(args[-1]) or original(*args))
    model = FlashLSTM(8, 32, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReferenceFallbackWarning)
        output, _ = model(torch.randn(2, 4, 8, device="cuda"))
    assert calls == ["lstm"] and output.is_cuda
