"""Fused kernels on a GPU against the float64 reference: outputs, last states and every gradient, every cell.

Inputs are fresh random draws on every run; outputs are poisoned with NaN before each launch. Scales keep each
cell in its working range: R ~ N(0, 1/DH) (Elman: half that standard deviation, so that the tanh recurrence
contracts and rounding noise is not amplified over 1024 steps); sLSTM's initial normaliser n is at least 1 (a
normaliser near 0 divides h by it) and its stabiliser m starts near 0, as a running sLSTM's would.
"""
from __future__ import annotations

import hwmodels
import pytest
import torch

from flashrnn_kernels.cells import get_cell
from flashrnn_kernels.fused import function
from flashrnn_kernels.fused.function import flashrnn_fused
from flashrnn_kernels.fused.plan import plan
from flashrnn_kernels.runtime.codegen import render
from flashrnn_kernels.runtime.compile import allow_dynamic_smem
from tests.flashrnn_kernels.float64_check import assert_close_rel, compare_with_float64
from tests.flashrnn_kernels.gpu_cases import captured
from tests.nvcc import compile_ptx, requires_nvcc
from tests.tolerances import TOLERANCES

pytestmark = pytest.mark.gpu

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setattr(function, "POISON_OUTPUTS", True)


def make_inputs(B, T, NH, DH, dtype, cell="lstm"):
    spec = get_cell(cell)
    G, S = spec.gate_count, spec.state_count
    gen = torch.Generator(device="cuda").manual_seed(torch.seed() % (2**31))
    draw = lambda *shape, scale: (torch.randn(*shape, device="cuda", generator=gen, dtype=torch.float64) * scale)
    Wx = draw(B, T, G, NH, DH, scale=1.0)
    R = draw(G, NH, DH, DH, scale=(0.5 if cell == "elman" else 1.0) / DH**0.5)
    b = draw(G, NH, DH, scale=0.3)
    states = draw(S, B, NH, DH, scale=0.5)
    if cell == "slstm":  # states h, c, n, m: a normaliser n >= 1
        states[2] = 1.0 + states[2].abs()
    return [t.to(dtype).contiguous() for t in (Wx, R, b, states)]


def run_both(B, T, NH, DH, dtype, grads=True, cell="lstm"):
    """(fused results, float64 reference results) for the same rounded inputs and upstream gradients."""
    inputs = make_inputs(B, T, NH, DH, dtype, cell)
    return compare_with_float64(flashrnn_fused, inputs, cell, grads)


@pytest.mark.parametrize("dtype,B,T,NH,DH", [
    ("bf16", 16, 1024, 12, 64),
    ("bf16", 16, 1024, 6, 128),
    ("fp32", 16, 1024, 12, 64),
    ("fp16", 16, 256, 6, 128),
    ("bf16", 3, 64, 48, 16),
    ("bf16", 17, 33, 5, 32),
    ("fp32", 1, 1, 1, 16),
    ("bf16", 1, 1, 3, 64),
    ("fp32", 5, 17, 3, 256),
    ("bf16", 9, 40, 2, 512),
    ("bf16", 16, 1024, 1, 768),
    ("bf16", 2, 16, 1, 1024),
    ("fp32", 2, 8, 1, 768),
    ("bf16", 2, 1, 1, 256),  # a cluster exchanging a single vector (T=1), and two (T=2: both buffers' first fills)
    ("fp16", 3, 2, 1, 512),
])
def test_forward_and_gradients_match_float64(dtype, B, T, NH, DH):
    out, ref = run_both(B, T, NH, DH, DTYPES[dtype])
    assert_close_rel(out, ref, DTYPES[dtype])


EXCHANGE_CASES = [  # (exchange, dtype, B, T, NH, DH): split heads both ways; T = 1 and 2 fill the slots first
    ("global", "bf16", 3, 64, 2, 64), ("global", "fp32", 5, 17, 3, 256), ("global", "bf16", 17, 33, 1, 768),
    ("global", "fp16", 3, 2, 1, 512), ("global", "bf16", 2, 1, 1, 256), ("global", "fp32", 2, 8, 1, 768),
    ("global", "bf16", 2, 16, 1, 1024),
    ("cluster", "bf16", 4, 64, 1, 768), ("cluster", "bf16", 2, 16, 1, 1024), ("cluster", "fp32", 2, 8, 1, 768),
    ("partials", "bf16", 3, 64, 2, 64), ("partials", "fp32", 5, 17, 3, 256), ("partials", "bf16", 17, 33, 1, 768),
    ("partials", "fp16", 3, 2, 1, 512), ("partials", "bf16", 2, 1, 1, 256), ("partials", "bf16", 2, 16, 1, 1024),
    ("partials", "fp32", 4, 40, 1, 512),
    ("pairs", "bf16", 3, 64, 2, 64), ("pairs", "fp32", 5, 17, 3, 256), ("pairs", "bf16", 17, 33, 1, 768),
    ("pairs", "fp16", 3, 2, 1, 512), ("pairs", "bf16", 2, 1, 1, 256), ("pairs", "bf16", 2, 16, 1, 1024),
]


@pytest.mark.parametrize("cell", ["lstm", "slstm"])
@pytest.mark.parametrize("exchange,dtype,B,T,NH,DH", EXCHANGE_CASES)
def test_each_exchange_matches_float64(monkeypatch, cell, exchange, dtype, B, T, NH, DH):
    """The blocks of a split head exchanging the step vector inside a cluster and through global memory, and the
    backward reduce-scattering partial sums of single blocks and of pairs of blocks (clusters of two)."""
    for direction in ("forward", "backward"):
        p = plan(cell, B, NH, DH, dtype, gpu=function._device_gpu(torch.cuda.current_device()), direction=direction,
                 exchange=exchange)
        assert p.head_blocks > 1 and p.global_exchange == (exchange != "cluster")
        assert p.partial_sums == (exchange in ("partials", "pairs") and direction == "backward")
        assert p.pair_blocks == (2 if p.partial_sums and exchange == "pairs" else 1)
    monkeypatch.setattr(function, "EXCHANGE", exchange)
    out, ref = run_both(B, T, NH, DH, DTYPES[dtype], cell=cell)
    bound = 3 * TOLERANCES[torch.float32]["rel"] if dtype == "fp32" and DH >= 1024 else None
    assert_close_rel(out, ref, DTYPES[dtype], bound)


def compute_80_kernel(found, directory):
    """The plan's kernel compiled by nvcc to PTX for compute_80 (the sm_80 code paths) and loaded through CuPy, which
    has the driver compile it for the current GPU."""
    import cupy

    ptx = compile_ptx(render(found), directory / f"{found.kernel_name}_{found.direction}.cu", "compute_80")
    return allow_dynamic_smem(cupy.RawModule(path=str(ptx)).get_function(found.kernel_name), found.smem_bytes)


@requires_nvcc
@pytest.mark.parametrize("cell,dtype,B,T,NH,DH", [
    ("lstm", "bf16", 17, 33, 1, 768), ("gru", "bf16", 5, 33, 1, 768), ("lstm", "fp32", 2, 8, 1, 768),
    ("lstm", "bf16", 3, 64, 3, 256),
])
def test_sm80_code_matches_float64_here(monkeypatch, tmp_path, cell, dtype, B, T, NH, DH):
    """What an A100 runs: its plans (sm_80 has no clusters, so a split head's blocks exchange through global memory;
    the backward reduce-scatters partial sums or polls the gate gradients), compiled for compute_80, on this GPU."""
    a100 = hwmodels.load("a100")
    for direction in ("forward", "backward"):
        assert plan(cell, B, NH, DH, dtype, gpu=a100, direction=direction).global_exchange
    monkeypatch.setattr(function, "_device_gpu", lambda index: a100)
    monkeypatch.setattr(function, "_kernel", lambda found, device: compute_80_kernel(found, tmp_path))
    function._cached_launch.cache_clear()
    try:
        out, ref = run_both(B, T, NH, DH, DTYPES[dtype], cell=cell)
    finally:
        function._cached_launch.cache_clear()  # no launch keeps the A100 plan or the compute_80 kernel
    assert_close_rel(out, ref, DTYPES[dtype])


CELL_CASES = [  # (B, T, NH, DH): T=1024, odd batches, T=1, a cluster of blocks per head, R partly streamed from L2
    (16, 1024, 12, 64), (17, 33, 5, 32), (3, 1, 3, 64), (5, 64, 1, 768), (2, 16, 1, 1024),
]


@pytest.mark.parametrize("cell", ["gru", "slstm", "elman"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("B,T,NH,DH", CELL_CASES)
def test_every_cell_matches_float64(cell, dtype, B, T, NH, DH):
    out, ref = run_both(B, T, NH, DH, DTYPES[dtype], cell=cell)
    # fp32 runs 3xTF32 products (about 2^-22 per term): at DH = 1024 (K = 1024 terms, R partly streamed from L2) the
    # initial-state gradient of GRU and sLSTM measured 1.7e-5, so that case gets three times the fp32 bound
    bound = 3 * TOLERANCES[torch.float32]["rel"] if dtype == "fp32" and DH >= 1024 else None
    assert_close_rel(out, ref, DTYPES[dtype], bound)


@pytest.mark.parametrize("cell,dtype,B,T,NH,DH", [("lstm", "bf16", 200, 8, 1, 1024), ("gru", "fp32", 250, 6, 1, 512)])
def test_streamed_heads_at_large_batches_match_float64(cell, dtype, B, T, NH, DH):
    # on the H200, heads whose R streams partly from L2 at large batches: batch tiles of 16 at two blocks per SM
    # (bf16), clusters of 16 blocks with 4 warps along K (fp32); a partial last batch tile
    out, ref = run_both(B, T, NH, DH, DTYPES[dtype], cell=cell)
    assert_close_rel(out, ref, DTYPES[dtype])


@pytest.mark.parametrize("cell", ["gru", "slstm", "elman"])
def test_every_cell_forward_without_grad(cell):
    out, ref = run_both(9, 200, 6, 128, torch.bfloat16, grads=False, cell=cell)
    assert_close_rel(out, ref, torch.bfloat16)


@pytest.mark.parametrize("dtype,B,T,DH", [("fp16", 4, 64, 1024), ("bf16", 40, 100, 256)])
def test_forward_without_grad(dtype, B, T, DH):
    out, ref = run_both(B, T, 1, DH, DTYPES[dtype], grads=False)
    assert_close_rel(out, ref, DTYPES[dtype])


@pytest.mark.parametrize("cell", ["lstm", "gru", "slstm", "elman"])
def test_inference_skips_saves_and_matches_training(cell):
    Wx, R, b, states = make_inputs(4, 50, 2, 64, torch.bfloat16, cell)
    with torch.no_grad():
        h0, last0 = flashrnn_fused(Wx, R, b, states, cell)
    h1, last1 = flashrnn_fused(Wx.requires_grad_(), R, b, states, cell)
    assert torch.equal(h0, h1) and torch.equal(last0, last1)


def test_runs_on_the_current_stream():
    Wx, R, b, states = make_inputs(8, 100, 3, 32, torch.bfloat16)
    expected, _ = flashrnn_fused(Wx, R, b, states, "lstm")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        h, _ = flashrnn_fused(Wx, R, b, states, "lstm")
    stream.synchronize()
    assert torch.equal(h, expected)


@pytest.mark.parametrize("NH,DH", [(12, 64), (1, 768)])  # a head per block; a head split over blocks through L2
def test_forward_and_backward_replay_from_a_cuda_graph(NH, DH):
    """A captured forward + backward (the split head's cooperative launches and their zeroed exchange buffers
    included) replays with the results of eager calls on each new input."""
    static = [t.requires_grad_() for t in make_inputs(16, 64, NH, DH, torch.bfloat16)]
    upstream = torch.randn(16, 64, NH, DH, device="cuda", dtype=torch.bfloat16)

    def step():
        h, last = flashrnn_fused(*static, "lstm")
        return (h, last, *torch.autograd.grad(h, static, upstream))

    graph, outs = captured(step)
    for _ in range(2):
        with torch.no_grad():
            for t, v in zip(static, make_inputs(16, 64, NH, DH, torch.bfloat16)):
                t.copy_(v)
            upstream.copy_(torch.randn_like(upstream))
            for o in outs:
                o.fill_(float("nan"))
        graph.replay()
        expected = step()
        for k, (a, b) in enumerate(zip(outs, expected)):
            assert torch.equal(a, b), f"result {k} of the replay differs from an eager call"


def test_bad_inputs_raise_clear_errors():
    Wx, R, b, states = make_inputs(2, 3, 2, 32, torch.bfloat16)
    with pytest.raises(ValueError, match="R must have shape"):
        flashrnn_fused(Wx, R[:, :1], b, states, "lstm")
    with pytest.raises(ValueError, match="dtype"):
        flashrnn_fused(Wx, R.float(), b, states, "lstm")
    with pytest.raises(ValueError, match="contiguous"):
        flashrnn_fused(Wx, R.transpose(-1, -2), b, states, "lstm")
    with pytest.raises(ValueError, match="CUDA"):
        flashrnn_fused(Wx, R, b.cpu(), states, "lstm")
    with pytest.raises(ValueError, match="head_dim 48"):
        w, r, bb, s = make_inputs(2, 3, 1, 48, torch.bfloat16)
        flashrnn_fused(w, r, bb, s, "lstm")
    with pytest.raises(ValueError, match="known cells"):
        flashrnn_fused(Wx, R, b, states, "lsmt")
