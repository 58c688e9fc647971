"""The CUDA scan kernels against the fp64 references: forward and all gradients (inputs and h0), fp32 / bf16 /
fp16, odd T (1, 3, 1000, 65537), with and without h0, thin and wide shapes, decays near 0 and 1. Outputs land in
memory that held NaN just before (the caching allocator hands the poisoned block back), so an unwritten element
fails the comparison."""
from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flashrnn_kernels.library import scan_backward
from flashrnn_kernels.scan import linear_scan, min_gru_scan, min_lstm_scan, reference
from tests.flashrnn_kernels.gpu_cases import captured, deterministic_algorithms, within_rounding
from tests.tolerances import relative_error

pytestmark = pytest.mark.gpu

OPS = {  # name: (kernel op, gates for the reference, input count)
    "linear": (linear_scan, lambda a, b: (a, b), 2),
    "min_gru": (min_gru_scan, reference.min_gru_gates, 2),
    "min_lstm": (min_lstm_scan, reference.min_lstm_gates, 3),
}
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def _poison_allocator(numel: int) -> None:
    block = torch.full((numel,), float("nan"), device="cuda")
    del block


def _random_inputs(name, B, T, D, scale=(1.0, 0.0)) -> list[torch.Tensor]:
    """Fresh fp32 inputs of `name` on the GPU: linear decays uniform in (0.5, 1) and normal b; a gate cell's inputs
    normal, all but the candidate's times scale[0] plus scale[1]."""
    if name == "linear":
        return [torch.rand(B, T, D, device="cuda") * 0.5 + 0.5, torch.randn(B, T, D, device="cuda")]
    gates = [torch.randn(B, T, D, device="cuda") * scale[0] + scale[1] for _ in range(OPS[name][2] - 1)]
    return gates + [torch.randn(B, T, D, device="cuda")]


def _reference(name, inputs, h0, dy):
    """fp64 forward and gradients through the chunk-carry reference (the step loop for short T)."""
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    h0_64 = None if h0 is None else h0.detach().double().requires_grad_()
    a, b = OPS[name][1](*leaves)
    h = reference.linear_scan_chunked(a, b, h0_64, chunk_len=512)
    grads = torch.autograd.grad(h, leaves + ([h0_64] if h0 is not None else []), dy.double())
    return h, grads


def _limits(name, dtype, inputs, h0, dy, h_ref, grads_ref, limit) -> dict[str, float]:
    """Each output's bound. The backward reads h_{t-1} from the forward's output, rounded to its dtype; where
    g(h_pre) - h_{t-1} (minGRU) or grad_a - dh g (minLSTM) nearly cancels, that rounding alone takes a gradient of a
    dozen elements past 1e-2 now and then (minGRU bf16 [2, 6, 1]: 2 draws in 10,000 in an fp32 emulation of the
    kernel's arithmetic, none past twice the stored h's own error). So a gradient's bound is the larger of `limit`
    and twice the error that the stored h alone gives in fp64: the CPU reference backward (scan_backward), which
    takes h as given, from the exact h rounded to `dtype`."""
    limits = {"h": limit} | {f"d{i}": limit for i in range(len(grads_ref))}
    if dtype != torch.float32:
        cpu64 = [t.detach().double().cpu() for t in (*inputs, dy, h_ref.to(dtype))]
        stored = scan_backward(name, cpu64[:-2], None if h0 is None else h0.detach().double().cpu(), *cpu64[-2:],
                               [True] * (len(inputs) + 1))
        limits.update({f"d{i}": max(limit, 2 * relative_error(g, r))
                       for i, (g, r) in enumerate(zip(stored, grads_ref))})
    return limits


def _check(name, dtype, B, T, D, with_h0, scale=(1.0, 1.0), tol=None):
    """Kernel vs the fp64 reference on fresh random inputs; `tol(inputs, h0)` replaces the dtype's tolerance."""
    op = OPS[name][0]
    inputs = [t.to(dtype).requires_grad_() for t in _random_inputs(name, B, T, D, scale)]
    h0 = (torch.rand(B, D, device="cuda") + 0.1).to(dtype).requires_grad_() if with_h0 else None
    dy = torch.randn(B, T, D, device="cuda").to(dtype)
    _poison_allocator(8 * B * T * D + (1 << 20))
    h = op(*inputs, h0)
    _poison_allocator(8 * B * T * D + (1 << 20))
    grads = torch.autograd.grad(h, inputs + ([h0] if with_h0 else []), dy)
    h_ref, grads_ref = _reference(name, inputs, h0, dy)
    assert torch.isfinite(h).all() and all(torch.isfinite(g).all() for g in grads)
    errors = {"h": relative_error(h, h_ref)}
    errors.update({f"d{i}": relative_error(g, r) for i, (g, r) in enumerate(zip(grads, grads_ref))})
    limits = _limits(name, dtype, inputs, h0, dy, h_ref, grads_ref, tol(inputs, h0) if callable(tol) else TOL[dtype])
    bad = {k: (v, limits[k]) for k, v in errors.items() if not v <= limits[k]}
    assert not bad, f"{name} {dtype} [{B},{T},{D}] h0={with_h0}: (error, limit) {bad}"


@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("T", [1, 3, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(OPS))
def test_kernel_matches_reference(name, dtype, T, with_h0):
    _check(name, dtype, 3, T, 96, with_h0)


@pytest.mark.parametrize("name", list(OPS))
def test_long_odd_sequence_thin_shape(name):
    _check(name, torch.float32, 1, 65537, 64, True)


@pytest.mark.parametrize("shape", [(2, 6), (1, 5000)])
@pytest.mark.parametrize("D", [1, 3, 12])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(OPS))
def test_tiny_hidden_sizes(name, dtype, D, shape):
    """A few channels per step: blocks of fewer than four warps, narrow accesses, chained lanes at T = 5000."""
    _check(name, dtype, *shape, D, True)


def test_fp16_and_non_tile_multiple_hidden_size():
    _check("linear", torch.float16, 2, 777, 1000, True)
    _check("min_gru", torch.float32, 2, 333, 500, False)
    _check("min_gru", torch.float16, 1, 5000, 64, True)  # chained segments
    _check("min_lstm", torch.float16, 2, 1000, 500, False)


def _linear_loop_error(a, b, h0, a32=None, b32=None) -> float:
    """The error of the plain sequential loop in fp32 (h = a h + b step by step on `a32`, `b32`: by default the inputs
    rounded to fp32) against the fp64 scan of `a`, `b`: what fp32 arithmetic itself gives on them."""
    a, b, h0 = (t.detach().double().cpu() for t in (a, b, h0))
    exact = reference.linear_scan_chunked(a, b, h0, chunk_len=512)
    a32 = a.float() if a32 is None else a32.detach().float().cpu()
    b32 = b.float() if b32 is None else b32.detach().float().cpu()
    h = h0.float()
    loop = torch.empty_like(a32)
    for t in range(a32.shape[1]):
        h = a32[:, t] * h + b32[:, t]
        loop[:, t] = h
    return relative_error(loop, exact)


def _fp32_loop_error(inputs, h0) -> float:
    """`_linear_loop_error` of min_gru: the loop on gates computed in fp32, as any fp32 implementation computes them,
    against the scan of the gates computed in fp64. With a = 1 - 6e-6 the spacing of fp32 near 1 is 1% of 1 - a, and
    20,000 steps of long memory accumulate the rounding; gates computed in fp32 rather than rounded from fp64 give
    1.0-2.2x that loop's error (CPU, 8 draws), so the bound starts from them."""
    k, h_pre = (t.detach().cpu() for t in inputs)
    return _linear_loop_error(*reference.min_gru_gates(k.double(), h_pre.double()), h0,
                              *reference.min_gru_gates(k.float(), h_pre.float()))


@pytest.mark.parametrize("bias", [-12.0, 12.0])
def test_decays_near_zero_and_one_stay_finite(bias):
    """min_gru with k ~ -12 (a ~ 1: long memory) and k ~ +12 (a ~ 6e-6: the state is replaced each step): finite,
    and within 1e-5 or twice the error of the sequential fp32 loop on the same inputs, if that is larger (the scan
    associates the products differently: rounding of the same order, not the same rounding)."""
    _check("min_gru", torch.float32, 2, 20000, 64, True, scale=(0.1, bias),
           tol=lambda inputs, h0: max(TOL[torch.float32], 2 * _fp32_loop_error(inputs, h0)))


@pytest.mark.parametrize("mode", ["default", "deterministic"])
def test_linear_lookback_without_early_end(mode):
    """Decays in (0.999, 1) over [1, 65537, 64] (one lane split into segments): no look-back ends early, so each
    segment composes its predecessors' maps, round after round, down to segment 0 or to a final state published
    already (torch's deterministic mode: always to segment 0). h and dL/db (the reverse scan dh_t = dy_t + a_{t+1}
    dh_{t+1}) within 1e-5 or twice the sequential fp32 loop's error on the same inputs."""
    with deterministic_algorithms() if mode == "deterministic" else contextlib.nullcontext():
        _check_lookback_without_early_end()


def _check_lookback_without_early_end():
    B, T, D = 1, 65537, 64
    a = (1.0 - 1e-3 * torch.rand(B, T, D, device="cuda")).requires_grad_()
    b = torch.randn(B, T, D, device="cuda").requires_grad_()
    h0 = torch.rand(B, D, device="cuda") + 0.1
    dy = torch.randn(B, T, D, device="cuda")
    h = linear_scan(a, b, h0)
    (db,) = torch.autograd.grad(h, [b], dy)
    exact = reference.linear_scan_chunked(a.detach().double(), b.detach().double(), h0.double(), chunk_len=512)
    assert relative_error(h, exact) <= max(TOL[torch.float32], 2 * _linear_loop_error(a, b, h0))
    # dh as the forward scan of the reversed sequence: decays a_{t+1} (none at t = T - 1), inputs dy
    ar = torch.cat([torch.zeros_like(a[:, :1]), a.detach().flip(1)[:, :-1]], dim=1)
    dyr, zero = dy.flip(1), torch.zeros(B, D, device="cuda")
    exact_db = reference.linear_scan_chunked(ar.double(), dyr.double(), zero.double(), chunk_len=512).flip(1)
    assert relative_error(db, exact_db) <= max(TOL[torch.float32], 2 * _linear_loop_error(ar, dyr, zero))


def test_parallel_and_sequential_forms_agree_with_h0():
    k, hp = (torch.randn(2, 300, 64, device="cuda", dtype=torch.float64) for _ in range(2))
    h0 = torch.rand(2, 64, device="cuda", dtype=torch.float64) + 0.1
    kernel = min_gru_scan(k.float(), hp.float(), h0.float())
    assert relative_error(kernel, reference.min_gru_loop(k, hp, h0)) < 1e-5
    assert relative_error(kernel, reference.min_gru_log_space(k, hp, h0)) < 1e-5


def test_workspace_reuse_across_shapes_and_epoch_wrap():
    """Back-to-back launches on one stream share the look-back words: different shapes, then an epoch wrap."""
    from flashrnn_kernels.scan import function

    for B, T, D in ((2, 5000, 64), (1, 3000, 128), (2, 5000, 64)):
        _check("linear", torch.float32, B, T, D, True)
    stream = torch.cuda.current_stream()
    function._workspaces[(stream.device_index, stream.cuda_stream)].epoch = function.EPOCH_LIMIT - 2
    for _ in range(3):
        _check("min_gru", torch.float32, 2, 4000, 64, False)


def _graph_workspaces():
    from flashrnn_kernels.scan import function

    return function._device_graph_workspaces(torch.device("cuda", torch.cuda.current_device()))


_FIRST_CAPTURE = """
import sys, torch
from flashrnn_kernels.scan import min_lstm_scan
from tests.flashrnn_kernels.gpu_cases import captured
xs = [torch.randn(8, 4096, 1536, device="cuda").requires_grad_() for _ in range(3)]
dy = torch.randn(8, 4096, 1536, device="cuda")
def pair():
    h = min_lstm_scan(*xs)
    return (h, *torch.autograd.grad(h, xs, dy))
with torch.no_grad():
    min_lstm_scan(*xs)
eager = [t.detach() for t in pair()]  # h's autograd graph would keep the AccumulateGrad nodes of xs alive
saved = min_lstm_scan(*xs)
torch.autograd.grad(saved, xs, dy, retain_graph=True)
del saved  # while an autograd graph holds the AccumulateGrad nodes of xs (bound to this stream), torch cannot
# capture a backward into xs on another stream
graph, outs = captured(pair)
for o in outs:
    o.fill_(float("nan"))
graph.replay()
torch.cuda.synchronize()
errors = [((o - e).abs().max() / e.abs().max()).item() for o, e in zip(outs, eager)]
print("errors", errors)
sys.exit(0 if max(errors) <= 1e-6 else 1)
"""


def test_first_capture_in_a_process_of_a_cell_pair():
    """The first CUDA graph captured in a fresh process, of a fused min_lstm forward + backward of whole lanes after
    eager calls of it (as a benchmark makes them: a forward alone, a pair, a backward of a kept forward; no autograd
    graph of them kept past the capture's start), captures and replays to the eager results into outputs poisoned
    with NaN."""
    root = Path(__file__).resolve().parents[3]
    result = subprocess.run([sys.executable, "-c", _FIRST_CAPTURE], cwd=root, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]


@pytest.mark.parametrize("name,workspace", [("linear", "spare"), ("linear", "memset"), ("linear", "epoch_cycle"),
                                            ("min_gru", "memset")])
def test_graph_replays_match_reference(name, workspace):
    """Forward and backward captured in one CUDA graph (split lanes) and replayed on fresh inputs copied into the
    captured tensors: each replay against the fp64 reference. The capture's look-back words: a spare zeroed by the
    warm-up, each launch counting its launches on the device in a slot of its own (with "epoch_cycle", the counts set
    so that the epochs they give cycle back to the first between two replays), or, with no spare left (and for the
    cells outside GRAPH_CELLS), words of the launch's own zeroed by a captured memset."""
    from flashrnn_kernels.scan.function import GRAPH_CYCLE

    B, T, D = 1, 20000, 64  # split lanes in both directions on an H200 / A100
    op, _, n = OPS[name]
    static = [torch.zeros(B, T, D, device="cuda", requires_grad=True) for _ in range(n)]
    h0 = torch.zeros(B, D, device="cuda", requires_grad=True)
    dy = torch.zeros(B, T, D, device="cuda")

    def step():
        h = op(*static, h0)
        return (h, *torch.autograd.grad(h, [*static, h0], dy))

    graphs = _graph_workspaces()
    held = len(graphs.held)
    if workspace == "memset":
        graphs.spares.clear()  # as if earlier captures had taken them; the warm-up below makes new ones
        step()  # the warm-up, on this stream
        graphs.spares.clear()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = step()
        assert len(graphs.held) == held
    else:
        graph, outs = captured(step)
        assert len(graphs.held) == held + 1, "the capture's launches share one spare"
        counters = graphs.held[-1].counters
    for replay in range(3):
        with torch.no_grad():
            for t, v in zip(static, _random_inputs(name, B, T, D)):
                t.copy_(v)
            h0.copy_(torch.rand(B, D, device="cuda") + 0.1)
            dy.copy_(torch.randn(B, T, D, device="cuda"))
            for o in outs:
                o.fill_(float("nan"))
        graph.replay()
        h_ref, grads_ref = _reference(name, static, h0, dy)
        errors = [relative_error(outs[0], h_ref)] + [relative_error(g, r) for g, r in zip(outs[1:], grads_ref)]
        assert max(errors) <= TOL[torch.float32], f"{name} replay {replay}: errors {errors}"
        if workspace == "memset":
            continue
        if replay == 0:  # slot 0 the forward, slot 1 the backward: what one launch adds to each counter
            per_launch = counters[:2].clone()
            assert per_launch.sum(dim=1).gt(0).all() and not counters[2:].any(), counters
            if workspace == "epoch_cycle":
                counters[:2] *= GRAPH_CYCLE - 1  # the next replay's epochs are the last of the cycle, then the first
        launches = (replay + 1) if workspace == "spare" else GRAPH_CYCLE - 1 + replay
        assert torch.equal(counters[:2], per_launch * launches), (replay, counters[:2], per_launch)


def _check_plans(name, dtype, shape, plans, label):
    """Forward h (plans[0]) and the backward's gradients of the inputs and h0 (plans[1]) against the fp64 reference,
    on poisoned memory."""
    from flashrnn_kernels.scan.function import run_scan

    B, T, D = shape
    inputs = [t.to(dtype) for t in _random_inputs(name, B, T, D)]
    h0 = (torch.rand(B, D, device="cuda") + 0.1).to(dtype)
    dy = torch.randn(B, T, D, device="cuda").to(dtype)
    _poison_allocator(8 * B * T * D + (1 << 20))
    (h,) = run_scan(name, "forward", tuple(inputs), h0, kernel_plan=plans[0])
    _poison_allocator(8 * B * T * D + (1 << 20))
    *grads, grad_h0 = run_scan(name, "backward", tuple(inputs), h0, dy=dy, h=h, kernel_plan=plans[1])
    h_ref, grads_ref = _reference(name, inputs, h0, dy)
    errors = {"h": relative_error(h, h_ref), "dh0": relative_error(grad_h0, grads_ref[-1])}
    errors.update({f"d{i}": relative_error(g, r) for i, (g, r) in enumerate(zip(grads, grads_ref))})
    limits = {"dh0": TOL[dtype], **_limits(name, dtype, inputs, h0, dy, h_ref, grads_ref, TOL[dtype])}
    bad = {k: (v, limits[k]) for k, v in errors.items() if not v <= limits[k]}
    assert not bad, f"{name} {dtype} {shape} {label} {plans[0]}: (error, limit) {bad}"


def _carry_plans(name, dtype, shape, carry):
    from flashrnn_kernels.scan.function import TORCH_DTYPES, _device_gpu
    from flashrnn_kernels.scan.plan import kernel_plan_for_carry
    from flashrnn_kernels.scan.problem import ScanProblem

    gpu = _device_gpu(torch.cuda.current_device())
    return [kernel_plan_for_carry(ScanProblem.for_shape(name, *shape, TORCH_DTYPES[dtype], d), gpu, carry)
            for d in ("forward", "backward")]


@pytest.mark.parametrize("shape", [(3, 1000, 96), (1, 5000, 64), (4, 700, 1536)])
@pytest.mark.parametrize("carry", ["whole", "resident", "chained"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(OPS))
def test_every_carry_mode(name, dtype, carry, shape):
    """The best plan of each carry mode (whole lanes, resident segments, chained one-chunk segments), whichever the
    solver would choose for the shape: forward h and the backward's gradients (inputs and h0) against the fp64
    reference."""
    _check_plans(name, dtype, shape, _carry_plans(name, dtype, shape, carry), f"carry={carry}")


@pytest.mark.parametrize("shape", [(1, 5000, 64), (1, 65537, 64)])
@pytest.mark.parametrize("carry", ["resident", "chained"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(OPS))
def test_deterministic_split_lanes(name, dtype, carry, shape):
    """The split-lane plans of torch's deterministic mode (SCAN_DETERMINISTIC: only segment 0 publishes its final
    state, every look-back composes maps down to it or to a zero product, whole groups' maps past its nearest
    segments; T = 65537 splits a lane into many groups): forward h and the backward's gradients against the fp64
    reference."""
    plans = [p.deterministic_variant() for p in _carry_plans(name, dtype, shape, carry)]
    _check_plans(name, dtype, shape, plans, f"deterministic carry={carry}")


@pytest.mark.parametrize("shape", [(1, 5000, 64), (2, 65537, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(OPS))
def test_held_steps(name, dtype, shape):
    """Chained forwards holding the first 4 of 21 steps per thread in registers (ScanPlan.holding, SCAN_HELD; with
    the H200's plans a last chunk at T = 5000 ends inside a thread's held steps): h and the backward's gradients
    against the fp64 reference."""
    from flashrnn_kernels.scan.function import _device_gpu

    forward, backward = _carry_plans(name, dtype, shape, "chained")
    held = forward.holding(_device_gpu(torch.cuda.current_device()), 21, 4, forward.min_blocks)
    _check_plans(name, dtype, shape, [held, backward], "held 4 of 21 steps")


@pytest.mark.parametrize("carry", ["whole", "resident", "chained"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(OPS))
def test_backward_writes_the_wanted_gradients(name, dtype, carry):
    """A backward launch asked for some gradients (`needs`: linear_scan with a fixed `a` skips h_{t-1} and da) writes
    those into poisoned memory, equal to the launch that writes all (whole lanes bitwise; split lanes to two units of
    rounding, their look-back), and returns None for the others."""
    from flashrnn_kernels.scan.function import run_scan

    B, T, D = shape = (3, 1000, 96)
    plans = _carry_plans(name, dtype, shape, carry)
    inputs = tuple(t.to(dtype) for t in _random_inputs(name, B, T, D))
    h0 = (torch.rand(B, D, device="cuda") + 0.1).to(dtype)
    dy = torch.randn(B, T, D, device="cuda").to(dtype)
    (h,) = run_scan(name, "forward", inputs, h0, kernel_plan=plans[0])
    full = run_scan(name, "backward", inputs, h0, dy=dy, h=h, kernel_plan=plans[1])
    for needs in itertools.product((False, True), repeat=len(inputs) + 1):
        _poison_allocator(8 * B * T * D + (1 << 20))
        got = run_scan(name, "backward", inputs, h0, dy=dy, h=h, kernel_plan=plans[1], needs=needs)
        for k, (g, f, need) in enumerate(zip(got, full, needs)):
            if not need:
                assert g is None, (needs, k)
                continue
            same = torch.equal(g, f) if carry == "whole" else within_rounding(f, g)
            assert same, f"needs={needs}: gradient {k}"


@pytest.mark.parametrize("decay", [8.0, 256.0])
@pytest.mark.parametrize("carry", ["whole", "resident", "chained"])
def test_zero_states_stay_out_of_overflowing_products(carry, decay):
    """Decays above 1 where the state is exactly 0: products of them overflow fp32 (8 over a segment's hundreds of
    steps, 256 over a thread's 16) while the step loop's states stay 0, so inf * 0 must not reach the outputs. Forward:
    a zero-padded start (b = 0 over the first 2,000 steps, no h0), then decays in (0.5, 1). Backward (dL/db, a fixed):
    dy = 0 over the last 2,000 steps, where the reverse scan starts, with the decays above 1 there, and b = 0, so that
    h (0 everywhere) does not overflow either. Each against the fp64 step loop."""
    from flashrnn_kernels.scan.function import run_scan

    B, T, D = shape = (1, 5000, 64)
    pad = 2000
    forward, backward = _carry_plans("linear", torch.float32, shape, carry)
    a = torch.rand(B, T, D, device="cuda") * 0.5 + 0.5
    b = torch.randn(B, T, D, device="cuda")
    a[:, :pad], b[:, :pad] = decay, 0.0
    _poison_allocator(8 * B * T * D + (1 << 20))
    (h,) = run_scan("linear", "forward", (a, b), None, kernel_plan=forward)
    exact = reference.linear_scan_loop(a.double(), b.double())
    assert torch.isfinite(h).all() and not h[:, :pad].any()
    assert relative_error(h, exact) <= TOL[torch.float32], carry

    a = torch.rand(B, T, D, device="cuda") * 0.5 + 0.5
    a[:, -pad:] = decay
    zeros = torch.zeros(B, T, D, device="cuda")
    dy = torch.randn(B, T, D, device="cuda")
    dy[:, -pad:] = 0.0
    _poison_allocator(8 * B * T * D + (1 << 20))
    (h,) = run_scan("linear", "forward", (a, zeros), None, kernel_plan=forward)
    assert not h.any()  # every product of decays multiplies a zero state
    _, db, _ = run_scan("linear", "backward", (a, zeros), None, dy=dy, h=h, kernel_plan=backward,
                        needs=(False, True, False))
    # dh_t = dy_t + a_{t+1} dh_{t+1}: the loop over the reversed sequence, decays shifted by one step
    shifted = torch.cat([torch.zeros_like(a[:, :1]), a.flip(1)[:, :-1]], dim=1)
    exact_db = reference.linear_scan_loop(shifted.double(), dy.flip(1).double()).flip(1)
    assert torch.isfinite(db).all() and not db[:, -pad:].any()
    assert relative_error(db, exact_db) <= TOL[torch.float32], carry


@pytest.mark.parametrize("extra", [0, 1], ids=["staged", "restaged"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(OPS))
def test_resident_segments_of_several_chunks(name, dtype, extra):
    """Resident segments of at most `stages` chunks, which pass A leaves staged (pass B rescans each row from its map
    since the segment's start), and launches whose longest segments hold `stages` + 1 chunks, where pass B stages
    every segment again (phases 1 and 2 per chunk; most of these launches mix segments of `stages` and `stages` + 1
    chunks): the plans run as on a GPU with fewer SMs, so that [3, 4000, 96] splits into such segments."""
    shape = (3, 4000, 96)
    plans = []
    for p in _carry_plans(name, dtype, shape, "resident"):
        lanes, chunks = shape[0] * p.d_tiles(shape[2]), p.chunks(shape[1])
        q = p.on_fewer_sms(lanes, chunks, p.stages + extra)
        longest = -(-chunks // q.segments(lanes, chunks))
        assert longest == p.stages + extra, (p, longest)
        plans.append(q)
    _check_plans(name, dtype, shape, plans, f"segments of stages + {extra} chunks")


@pytest.mark.parametrize("shape", [(2, 0, 4), (0, 5, 4), (2, 5, 0)])
@pytest.mark.parametrize("name", list(OPS))
def test_empty_extents_launch_nothing(name, shape):
    """No steps, batch rows or channels: empty h and gradients, a zero gradient of h0 where there are no steps."""
    n = OPS[name][2]
    inputs = [torch.rand(*shape, device="cuda", requires_grad=True) for _ in range(n)]
    h0 = torch.rand(shape[0], shape[2], device="cuda", requires_grad=True)
    h = OPS[name][0](*inputs, h0)
    assert h.shape == shape
    grads = torch.autograd.grad(h, inputs + [h0], torch.ones_like(h), allow_unused=True)
    assert all(g is None or g.shape == t.shape for g, t in zip(grads, inputs + [h0]))
    if shape[1] == 0 and grads[-1] is not None:
        assert torch.equal(grads[-1], torch.zeros_like(h0))
