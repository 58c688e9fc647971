"""Alternating backend on a GPU against the float64 reference: outputs, last states and every gradient, for every
cell and dtype; graph reuse across calls and shapes. Fresh random inputs per run; buffers poisoned before each run.
"""
from __future__ import annotations

import pytest
import torch

from flashrnn_kernels.alternating import (
    clear_graphs,
    flashrnn_alternating,
    function,
    runner,
)
from flashrnn_kernels.cells import CELLS, get_cell
from flashrnn_kernels.fused.reference import flashrnn_reference
from tests.flashrnn_kernels.float64_check import assert_close_rel, compare_with_float64
from tests.tolerances import TOLERANCES, relative_error

pytestmark = pytest.mark.gpu

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setattr(function, "POISON_OUTPUTS", True)


def make_inputs(cell, B, T, NH, DH, dtype):
    spec = get_cell(cell)
    G, S = spec.gate_count, spec.state_count
    draw = lambda *shape, scale: torch.randn(*shape, device="cuda", dtype=torch.float64) * scale
    states = draw(S, B, NH, DH, scale=0.5)
    if cell == "slstm":  # n > 0 (normaliser), m any
        states[2] = states[2].abs() + 0.5
    inputs = [draw(B, T, G, NH, DH, scale=1.0), draw(G, NH, DH, DH, scale=DH**-0.5), draw(G, NH, DH, scale=0.3),
              states]
    return [t.to(dtype).contiguous() for t in inputs]


def run_both(cell, B, T, NH, DH, dtype, grads=True):
    """(alternating results, float64 reference results) for the same rounded inputs and upstream gradients."""
    inputs = make_inputs(cell, B, T, NH, DH, dtype)
    return compare_with_float64(flashrnn_alternating, inputs, cell, grads)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("B,T,NH,DH", [(5, 37, 2, 48), (1, 1, 1, 2048), (3, 9, 1, 2048)])
def test_forward_and_gradients_match_float64(cell, dtype, B, T, NH, DH):
    out, ref = run_both(cell, B, T, NH, DH, DTYPES[dtype])
    assert_close_rel(out, ref, DTYPES[dtype])


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_inference_matches_float64_and_training(cell):
    out, ref = run_both(cell, 7, 20, 3, 32, torch.bfloat16, grads=False)
    assert_close_rel(out, ref, torch.bfloat16)
    Wx, R, b, states = make_inputs(cell, 7, 20, 3, 32, torch.bfloat16)
    with torch.no_grad():
        h0, last0 = flashrnn_alternating(Wx, R, b, states, cell)
    h1, last1 = flashrnn_alternating(Wx.requires_grad_(), R, b, states, cell)
    assert torch.equal(h0, h1) and torch.equal(last0, last1)


def test_graph_is_replayed_for_new_inputs_and_results_are_not_aliased():
    clear_graphs()
    first = make_inputs("lstm", 4, 16, 2, 64, torch.float32)
    second = make_inputs("lstm", 4, 16, 2, 64, torch.float32)
    h1, _ = flashrnn_alternating(*first, "lstm")
    key = runner.Key("lstm", 4, 16, 2, 64, torch.float32, torch.cuda.current_device(), False, False)
    (used,) = runner.POOL.runners[key]
    graph = used.forward_graph
    h1_copy = h1.clone()
    h2, _ = flashrnn_alternating(*second, "lstm")  # replay of the captured graph
    assert runner.POOL.runners[key] == [used] and used.forward_graph is graph
    assert torch.equal(h1, h1_copy), "a replay overwrote an earlier call's output"
    for got, inputs in ((h2, second), (h1, first)):
        ref, _ = flashrnn_reference(*[t.double() for t in inputs], "lstm")
        assert relative_error(got, ref) <= TOLERANCES[torch.float32]["rel"]


def test_tf32_setting_gets_its_own_graph(monkeypatch):
    inputs = make_inputs("elman", 4, 8, 1, 256, torch.float32)
    strict, _ = flashrnn_alternating(*inputs, "elman")
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    fast, _ = flashrnn_alternating(*inputs, "elman")
    keys = {key for key in runner.POOL.runners if key.cell == "elman" and key.head_dim == 256}
    assert {key.tf32 for key in keys} == {False, True}
    ref, _ = flashrnn_reference(*[t.double() for t in inputs], "elman")
    assert relative_error(strict, ref) <= TOLERANCES[torch.float32]["rel"]
    assert relative_error(fast, ref) <= 1e-2  # TF32 keeps a 10-bit mantissa


def test_two_shapes_and_repeated_training_steps():
    for shape in ((6, 12, 1, 96), (2, 30, 4, 16), (6, 12, 1, 96)):
        for _ in range(2):  # the second call replays both graphs
            out, ref = run_both("gru", *shape, torch.float32)
            assert_close_rel(out, ref, torch.float32)


def test_two_pending_forwards_keep_their_saved_values():
    inputs = [make_inputs("lstm", 3, 10, 1, 128, torch.float32) for _ in range(2)]
    leaves = [[t.clone().requires_grad_() for t in group] for group in inputs]
    outputs = [flashrnn_alternating(*group, "lstm") for group in leaves]  # second forward while first is leased
    for group, leaf, (h, last) in zip(inputs, leaves, outputs):
        ref_leaf = [t.double().requires_grad_() for t in group]
        h_ref, last_ref = flashrnn_reference(*ref_leaf, "lstm")
        (h.sum() + last.sum()).backward()
        (h_ref.sum() + last_ref.sum()).backward()
        for a, r in zip(leaf, ref_leaf):
            assert relative_error(a.grad, r.grad) <= TOLERANCES[torch.float32]["rel"]


def test_runs_on_the_current_stream():
    Wx, R, b, states = make_inputs("lstm", 8, 50, 2, 64, torch.bfloat16)
    expected, _ = flashrnn_alternating(Wx, R, b, states, "lstm")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        h, _ = flashrnn_alternating(Wx, R, b, states, "lstm")
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(h, expected)


def test_a_capture_around_it_raises_a_clear_error():
    """Its own graph cannot be launched inside another capture: the call says so before touching the stream."""
    Wx, R, b, states = make_inputs("lstm", 8, 20, 2, 64, torch.bfloat16)
    flashrnn_alternating(Wx, R, b, states, "lstm")  # a runner with its graph
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="cannot run inside a CUDA graph capture"):
        with torch.cuda.graph(graph):
            flashrnn_alternating(Wx, R, b, states, "lstm")
    h, _ = flashrnn_alternating(Wx, R, b, states, "lstm")  # the runner still works afterwards
    assert torch.isfinite(h.float()).all()


def test_bad_inputs_raise_clear_errors():
    Wx, R, b, states = make_inputs("lstm", 2, 3, 2, 32, torch.bfloat16)
    with pytest.raises(ValueError, match="R must have shape"):
        flashrnn_alternating(Wx, R[:, :1], b, states, "lstm")
    with pytest.raises(ValueError, match="dtype"):
        flashrnn_alternating(Wx, R.float(), b, states, "lstm")
    with pytest.raises(ValueError, match="CUDA"):
        flashrnn_alternating(Wx, R, b.cpu(), states, "lstm")
    with pytest.raises(ValueError, match="not supported"):
        flashrnn_alternating(*(t.double() for t in (Wx, R, b, states)), "lstm")
