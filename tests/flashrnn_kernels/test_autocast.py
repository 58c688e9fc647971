"""torch.autocast: the recurrent modules and `flashrnn` compute in the autocast dtype (as torch.nn's RNNs on cuDNN),
the scan ops promote mixed inputs, and backwards keep their dtypes when run under autocast. CPU (bf16 autocast, the
reference) and GPU (bf16 and fp16 autocast, the kernels), against float64 on the same rounded weights and inputs."""
from __future__ import annotations

import copy

import pytest
import torch

from flashrnn_kernels import FlashElman, FlashGRU, FlashLSTM, FlashSLSTM, MinGRU, MinLSTM, flashrnn, linear_scan
from flashrnn_kernels.scan import min_gru_scan
from tests.tolerances import relative_error

RECURRENT = [FlashLSTM, FlashGRU, FlashSLSTM, FlashElman]
CASES = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
    pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=pytest.mark.gpu),
    pytest.param("cuda", torch.float16, id="cuda-fp16", marks=pytest.mark.gpu),
]
BOUND = 1e-2  # relative error against float64 through a module: rounded projections as well as the recurrence


def _flat(states) -> list[torch.Tensor]:
    return list(states) if isinstance(states, tuple) else [states]


@pytest.mark.parametrize("device, dtype", CASES)
@pytest.mark.parametrize("cls", RECURRENT, ids=lambda c: c.__name__)
def test_modules_compute_in_the_autocast_dtype(device, dtype, cls):
    torch.manual_seed(21)
    B, T, I, H = 3, 40, 16, 64
    model = cls(I, H, num_heads=2, num_layers=2, device=device)  # fp32 weights
    x = torch.randn(B, T, I, device=device, requires_grad=True)
    with torch.no_grad():  # states a run leaves (sLSTM's normaliser and stabiliser are not any random values)
        _, states = model(torch.randn(B, 5, I, device=device))
    with torch.autocast(device, dtype=dtype):
        output, last = model(x, states)
    assert output.dtype == dtype and all(t.dtype == dtype for t in _flat(last))

    # float64 on the weights, inputs and states as autocast rounds them
    oracle = copy.deepcopy(model).to("cpu")
    with torch.no_grad():
        for parameter in oracle.parameters():
            parameter.copy_(parameter.to(dtype))
    oracle = oracle.double()
    x64 = x.detach().to("cpu", dtype).double().requires_grad_()
    states64 = tuple(t.to("cpu", dtype).double() for t in _flat(states))
    expected, expected_last = oracle(x64, states64 if len(states64) > 1 else states64[0])
    for name, got, want in zip(["output", *model.cell.states], [output, *_flat(last)],
                               [expected, *_flat(expected_last)]):
        assert relative_error(got.cpu(), want) <= BOUND, name

    upstream = torch.randn_like(expected)
    got = torch.autograd.grad(output, [x, *model.parameters()], upstream.to(device, dtype))
    want = torch.autograd.grad(expected, [x64, *oracle.parameters()], upstream)
    assert all(g.dtype == torch.float32 for g in got[1:])  # the parameters keep their dtype and get fp32 gradients
    names = ["x"] + [name for name, _ in model.named_parameters()]
    for name, g, w in zip(names, got, want):
        assert relative_error(g.cpu(), w) <= 3 * BOUND, name


@pytest.mark.parametrize("cls", [FlashLSTM, FlashGRU], ids=lambda c: c.__name__)
def test_the_other_half_dtype_under_cpu_autocast(cls):
    # fp16 weights and states under bf16 autocast (CPU autocast's own stack refuses to mix them): computed in bf16
    torch.manual_seed(5)
    model, x = cls(8, 16).half(), torch.randn(2, 7, 8)
    states = tuple(torch.randn(1, 2, 16, dtype=torch.float16) for _ in model.cell.states)
    states = states if len(states) > 1 else states[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output, _ = model(x, states)
    rounded = copy.deepcopy(model).to(torch.bfloat16)
    cast = tuple(t.to(torch.bfloat16) for t in _flat(states))
    expected, _ = rounded(x.to(torch.bfloat16), cast if len(cast) > 1 else cast[0])
    assert output.dtype == torch.bfloat16 and torch.equal(output, expected)


@pytest.mark.parametrize("device, dtype", CASES)
def test_backward_under_autocast_matches_the_backward_outside(device, dtype):
    """The backward's own products (the reference's einsums, the kernels' dR GEMM) keep their dtypes even when
    backward() runs inside the autocast region."""
    torch.manual_seed(22)
    model = FlashLSTM(16, 64, num_heads=2, device=device)
    x = torch.randn(3, 24, 16, device=device)
    with torch.autocast(device, dtype=dtype):
        output, _ = model(x)
        upstream = torch.randn_like(output)
        inside = torch.autograd.grad(output, list(model.parameters()), upstream, retain_graph=True)
    outside = torch.autograd.grad(output, list(model.parameters()), upstream)
    for name, a, b in zip([n for n, _ in model.named_parameters()], inside, outside):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=name)


@pytest.mark.parametrize("device, dtype", CASES)
def test_flashrnn_casts_mixed_inputs_under_autocast(device, dtype):
    torch.manual_seed(23)
    B, T, NH, DH = 2, 9, 2, 16
    Wx = torch.randn(B, T, 4, NH, DH, device=device, dtype=dtype)
    R, b = torch.randn(4, NH, DH, DH, device=device) / DH, torch.randn(4, NH, DH, device=device)
    states = torch.randn(2, B, NH, DH, device=device)
    with pytest.raises(TypeError, match="use one dtype for all inputs"):
        flashrnn(Wx, R, b, states)
    with torch.autocast(device, dtype=dtype):
        h, last = flashrnn(Wx, R, b, states)
    want_h, want_last = flashrnn(Wx, R.to(dtype), b.to(dtype), states.to(dtype))
    assert h.dtype == last.dtype == dtype
    assert torch.equal(h, want_h) and torch.equal(last, want_last)


def test_float64_inputs_keep_their_dtype_under_autocast():
    Wx, R, b = (torch.randn(shape, dtype=torch.float64) for shape in ((2, 5, 4, 1, 8), (4, 1, 8, 8), (4, 1, 8)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h, last = flashrnn(Wx, R, b, backend="reference")
    assert h.dtype == last.dtype == torch.float64


@pytest.mark.parametrize("device, dtype", CASES)
def test_linear_scan_promotes_mixed_inputs(device, dtype):
    torch.manual_seed(24)
    a = (0.999 + 0.001 * torch.rand(2, 300, 8, device=device))  # decays that a 16-bit dtype would round to 1
    b = torch.randn(2, 300, 8, device=device, dtype=dtype)
    h0 = torch.randn(2, 8, device=device, dtype=dtype)
    with torch.autocast(device, dtype=dtype):
        mixed = linear_scan(a, b, h0)
        lower = linear_scan(a.to(dtype), b, h0.float())
    assert mixed.dtype == torch.float32 and lower.dtype == dtype
    torch.testing.assert_close(mixed, linear_scan(a, b.float(), h0.float()), rtol=0, atol=0)
    torch.testing.assert_close(lower, linear_scan(a.to(dtype), b, h0), rtol=0, atol=0)


@pytest.mark.parametrize("device, dtype", CASES)
@pytest.mark.parametrize("module_type", [MinGRU, MinLSTM])
def test_min_rnns_scan_their_projections_in_the_autocast_dtype(device, dtype, module_type):
    torch.manual_seed(25)
    module = module_type(6, 8, device=device)
    x, h0 = torch.randn(3, 7, 6, device=device), torch.rand(3, 8, device=device)
    with torch.autocast(device, dtype=dtype):
        full = module(x, h0)
        h = h0
        for t in range(7):  # step mode: x_t in fp32, the carried h in the autocast dtype
            h = module.step(x[:, t], h)
            assert h.dtype == dtype
            assert relative_error(h, full[:, t]) < 1e-2
    assert full.dtype == dtype
    if module_type is MinGRU:
        with torch.autocast(device, dtype=dtype):
            k, h_pre = x @ module.W_z.t(), x @ module.W_h.t()
        torch.testing.assert_close(full, min_gru_scan(k, h_pre, h0.to(dtype)), rtol=0, atol=0)


@pytest.mark.parametrize("module_type", [FlashLSTM, MinGRU])
def test_compiled_modules_under_autocast_match_eager(module_type):
    """torch.compile(fullgraph=True) traces the autocast decisions (aot_eager: the graph, not inductor's code)."""
    torch._dynamo.reset()
    torch.manual_seed(26)
    model = module_type(8, 16)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = compiled(x), model(x)
    got, want = (got[0], want[0]) if isinstance(got, tuple) else (got, want)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    torch._dynamo.reset()
