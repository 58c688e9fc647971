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
    """Each head evolves on its own: NH heads at once == each head run alone (to float64 rounding: a batched product of
    three heads may round differently from one head's, depending on the BLAS build)."""
    Wx, R, b, states = _random_problem(B=2, T=5, NH=3, DH=4)
    h, last = flashrnn_reference(Wx, R, b, states, "lstm")
    for n in range(3):
        head = slice(n, n + 1)
        h_n, last_n = flashrnn_reference(Wx[:, :, :, head], R[:, head], b[:, head], states[:, :, head], "lstm")
        torch.testing.assert_close(h[:, :, head], h_n, rtol=1e-13, atol=1e-15)
        torch.testing.assert_close(last[:, :, head], last_n, rtol=1e-13, atol=1e-15)


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


def _grad_check(outputs, expected_outputs, inputs, tol):
    upstream = [torch.randn_like(t) for t in expected_outputs]
    got = torch.autograd.grad(outputs, inputs, upstream)
    want = torch.autograd.grad(expected_outputs, inputs, upstream)
    for k, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, **tol, msg=lambda m, k=k: f"gradient of input {k}: {m}")


def test_gru_matches_torch_gru():
    """Gate n's input part and its recurrent part (with b_hn, under the reset gate) are gates n and hn."""
    torch.manual_seed(5)
    B, T, I, H = 3, 6, 4, 5
    gru = nn.GRU(I, H, batch_first=True, dtype=torch.float64)
    x = torch.randn(B, T, I, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(1, B, H, dtype=torch.float64, requires_grad=True)
    expected, h_n = gru(x, h0)

    w_ir, w_iz, w_in = gru.weight_ih_l0.chunk(3)
    w_hr, w_hz, w_hn = gru.weight_hh_l0.chunk(3)
    b_ir, b_iz, b_in = gru.bias_ih_l0.chunk(3)
    b_hr, b_hz, b_hn = gru.bias_hh_l0.chunk(3)
    projected = [x @ w.T for w in (w_ir, w_iz, w_in)]
    Wx = torch.stack([*projected, torch.zeros_like(projected[0])], dim=2).view(B, T, 4, 1, H)
    R = torch.stack([w_hr, w_hz, torch.zeros_like(w_hn), w_hn]).view(4, 1, H, H)
    b = torch.stack([b_ir + b_hr, b_iz + b_hz, b_in, b_hn]).view(4, 1, H)
    h, last = flashrnn_reference(Wx, R, b, h0.view(1, B, 1, H), "gru")
    tol = TOLERANCES[torch.float64]
    torch.testing.assert_close(h.view(B, T, H), expected, **tol)
    torch.testing.assert_close(last.view(1, B, H), h_n, **tol)
    _grad_check([h.view(B, T, H), last.view(1, B, H)], [expected, h_n], [x, h0, *gru.parameters()], tol)


def test_elman_matches_torch_rnn():
    torch.manual_seed(6)
    B, T, I, H = 2, 7, 3, 4
    rnn = nn.RNN(I, H, batch_first=True, dtype=torch.float64)
    x = torch.randn(B, T, I, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(1, B, H, dtype=torch.float64, requires_grad=True)
    expected, h_n = rnn(x, h0)
    Wx = (x @ rnn.weight_ih_l0.T).view(B, T, 1, 1, H)
    R = rnn.weight_hh_l0.view(1, 1, H, H)
    b = (rnn.bias_ih_l0 + rnn.bias_hh_l0).view(1, 1, H)
    h, last = flashrnn_reference(Wx, R, b, h0.view(1, B, 1, H), "elman")
    tol = TOLERANCES[torch.float64]
    torch.testing.assert_close(h.view(B, T, H), expected, **tol)
    _grad_check([h.view(B, T, H), last.view(1, B, H)], [expected, h_n], [x, h0, *rnn.parameters()], tol)


def test_slstm_equals_unstabilised_formulas():
    """The stabiliser m rescales c and n by exp(-m) and leaves h unchanged."""
    B, T, NH, DH = 2, 12, 2, 3
    generator = torch.Generator().manual_seed(7)
    Wx = torch.randn(B, T, 4, NH, DH, dtype=torch.float64, generator=generator)
    R = torch.randn(4, NH, DH, DH, dtype=torch.float64, generator=generator) / DH
    b = torch.randn(4, NH, DH, dtype=torch.float64, generator=generator)
    states = torch.zeros(4, B, NH, DH, dtype=torch.float64)
    h, last = flashrnn_reference(Wx, R, b, states, "slstm")

    hs, h_t, c_t, n_t = [], states[0], states[1], states[2]
    for t in range(T):
        x_i, x_f, x_z, x_o = (Wx[:, t] + b + torch.einsum("gnoi,bni->bgno", R, h_t)).unbind(1)
        i, f = torch.exp(x_i), torch.sigmoid(x_f)
        c_t = f * c_t + i * torch.tanh(x_z)
        n_t = f * n_t + i
        h_t = torch.sigmoid(x_o) * c_t / n_t
        hs.append(h_t)
    torch.testing.assert_close(h, torch.stack(hs, 1), **TOLERANCES[torch.float64])
    m = last[3]
    torch.testing.assert_close(last[1] * torch.exp(m), c_t, **TOLERANCES[torch.float64])
    torch.testing.assert_close(last[2] * torch.exp(m), n_t, **TOLERANCES[torch.float64])
