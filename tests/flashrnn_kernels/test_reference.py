"""The pure-PyTorch reference against torch.nn.LSTM: forward, last states and every gradient."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from flashrnn_kernels.fused.reference import flashrnn_reference

TOLERANCES = {torch.float64: {"rtol": 1e-10, "atol": 1e-12}, torch.float32: {"rtol": 1e-5, "atol": 1e-5}}


def _lstm_case(dtype, B=3, T=7, input_size=5, H=6, seed=0):
    torch.manual_seed(seed)
    lstm = nn.LSTM(input_size, H, batch_first=True, dtype=dtype)
    x = torch.randn(B, T, input_size, dtype=dtype)
    h0, c0 = torch.randn(2, 1, B, H, dtype=dtype)
    return lstm, x, h0, c0


def _torch_weights_as_heads(lstm: nn.LSTM):
    """Map torch's gates (i, f, g, o) to Wx/R/b with one head: R[g, 0] = weight_hh rows of gate g."""
    H = lstm.hidden_size
    R = lstm.weight_hh_l0.view(4, 1, H, H)
    b = (lstm.bias_ih_l0 + lstm.bias_hh_l0).view(4, 1, H)
    return R, b


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_reference_matches_torch_lstm(dtype):
    lstm, x, h0, c0 = _lstm_case(dtype)
    B, T, _ = x.shape
    H = lstm.hidden_size
    for t in (x, h0, c0):
        t.requires_grad_()
    expected, (h_n, c_n) = lstm(x, (h0, c0))

    R, b = _torch_weights_as_heads(lstm)
    Wx = (x @ lstm.weight_ih_l0.T).view(B, T, 4, 1, H)
    states = torch.stack([h0[0], c0[0]]).view(2, B, 1, H)
    h, last = flashrnn_reference(Wx, R, b, states, "lstm")
    tol = TOLERANCES[dtype]
    torch.testing.assert_close(h.view(B, T, H), expected, **tol)
    torch.testing.assert_close(last[0].view(1, B, H), h_n, **tol)
    torch.testing.assert_close(last[1].view(1, B, H), c_n, **tol)

    # Random upstream gradients for the outputs and both final states.
    dh, dh_n, dc_n = torch.randn_like(expected), torch.randn_like(h_n), torch.randn_like(c_n)
    inputs = [x, h0, c0, *lstm.parameters()]
    expected_grads = torch.autograd.grad([expected, h_n, c_n], inputs, [dh, dh_n, dc_n])
    grads = torch.autograd.grad(
        [h.view(B, T, H), last[0].view(1, B, H), last[1].view(1, B, H)], inputs, [dh, dh_n, dc_n]
    )
    names = ["x", "h0", "c0"] + [name for name, _ in lstm.named_parameters()]
    for name, got, want in zip(names, grads, expected_grads):
        torch.testing.assert_close(got, want, **tol, msg=lambda m, name=name: f"d{name}: {m}")


def _random_problem(B, T, NH, DH, dtype=torch.float64, seed=1):
    generator = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, dtype=torch.float64, generator=generator).to(dtype)  # noqa: E731
    return randn(B, T, 4, NH, DH), randn(4, NH, DH, DH) / DH**0.5, randn(4, NH, DH), randn(2, B, NH, DH)


def test_heads_are_independent():
    """Each head evolves on its own: NH heads at once == each head run alone."""
    Wx, R, b, states = _random_problem(B=2, T=5, NH=3, DH=4)
    h, last = flashrnn_reference(Wx, R, b, states, "lstm")
    for n in range(3):
        head = slice(n, n + 1)
        h_n, last_n = flashrnn_reference(Wx[:, :, :, head], R[:, head], b[:, head], states[:, :, head], "lstm")
        torch.testing.assert_close(h[:, :, head], h_n, rtol=0, atol=0)
        torch.testing.assert_close(last[:, :, head], last_n, rtol=0, atol=0)


def test_single_step_is_one_cell_update():
    Wx, R, b, states = _random_problem(B=3, T=1, NH=2, DH=5)
    h, last = flashrnn_reference(Wx, R, b, states, "lstm")
    pre = Wx[:, 0] + b + torch.einsum("gnoi,bni->bgno", R, states[0])
    i, f, z, o = pre.unbind(1)
    c = torch.sigmoid(f) * states[1] + torch.sigmoid(i) * torch.tanh(z)
    torch.testing.assert_close(last[1], c)
    torch.testing.assert_close(h[:, 0], torch.sigmoid(o) * torch.tanh(c))
    torch.testing.assert_close(last[0], h[:, 0])


@pytest.mark.parametrize("dtype, rtol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)])
def test_half_precision_inputs_return_their_dtype(dtype, rtol):
    Wx, R, b, states = _random_problem(B=2, T=16, NH=2, DH=8, dtype=dtype)
    h, last = flashrnn_reference(Wx, R, b, states, "lstm")
    assert h.dtype == dtype and last.dtype == dtype
    h64, last64 = flashrnn_reference(*(t.double() for t in (Wx, R, b, states)), "lstm")
    torch.testing.assert_close(h.double(), h64, rtol=rtol, atol=rtol)
    torch.testing.assert_close(last.double(), last64, rtol=rtol, atol=rtol)
