"""torch.compile(fullgraph=True) of every module, and torch.library.opcheck of the custom ops.

CPU: inductor (needs a C++ compiler) against eager in float64, outputs and all gradients; the graph holds the
custom op rather than an unrolled step loop. GPU: the fused kernels compiled against the float64 reference, with
outputs poisoned before each launch.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

from flashrnn_kernels import (
    FlashElman,
    FlashGRU,
    FlashLSTM,
    FlashSLSTM,
    MinGRU,
    MinLSTM,
    library,
)
from flashrnn_kernels.cells import CELLS
from flashrnn_kernels.dispatch import FUSED_CELLS
from flashrnn_kernels.fused import function
from tests.tolerances import TOLERANCES, relative_error

RECURRENT = [FlashLSTM, FlashGRU, FlashSLSTM, FlashElman]
LAYOUTS = {"1-layer": {}, "2-layer-bidirectional": {"num_layers": 2, "bidirectional": True}}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every test compiles new module instances of a few classes: without a reset, dynamo's guards on `self` would
    count them as recompiles of one forward and stop at its recompile limit."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _gradients(outputs, inputs: list[torch.Tensor], upstream) -> list[torch.Tensor]:
    return list(torch.autograd.grad(outputs, inputs, upstream))


def _flat(result) -> list[torch.Tensor]:
    """(output, states) of a module as a flat list of tensors."""
    output, states = result
    return [output, *(states if isinstance(states, tuple) else (states,))]


def _assert_matches_eager(module, compiled, args: tuple, kwargs: dict, bound: float) -> None:
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad] + list(module.parameters())
    eager = _flat(module(*args, **kwargs))
    got = _flat(compiled(*args, **kwargs))
    upstream = [torch.randn_like(t) for t in eager]
    for name, out, ref in zip(["output", "state 0", "state 1", "state 2", "state 3"], got, eager):
        assert relative_error(out, ref) <= bound, name
    names = ["x"] + [name for name, _ in module.named_parameters()]
    for name, g, r in zip(names, _gradients(got, leaves, upstream), _gradients(eager, leaves, upstream)):
        assert relative_error(g, r) <= bound, f"d{name}"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("module_type", RECURRENT, ids=lambda t: t.__name__)
def test_recurrent_modules_compile_fullgraph_on_cpu(module_type, layout):
    module = module_type(5, 8, num_heads=2, backend="reference", **LAYOUTS[layout]).double()
    compiled = torch.compile(module, fullgraph=True)
    x = torch.randn(3, 7, 5, dtype=torch.float64, requires_grad=True)
    _assert_matches_eager(module, compiled, (x,), {}, TOLERANCES[torch.float64]["rel"])


def test_default_backend_compiles_fullgraph_on_cpu():
    """backend="auto" (the default) neither warns nor plans inside the traced graph."""
    module = FlashGRU(5, 8, num_heads=2).double()
    compiled = torch.compile(module, fullgraph=True)
    x = torch.randn(3, 7, 5, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the eager call's one-time note that the reference runs on CPU
        _assert_matches_eager(module, compiled, (x,), {}, TOLERANCES[torch.float64]["rel"])


@pytest.mark.parametrize("module_type", [FlashLSTM, FlashGRU], ids=lambda t: t.__name__)
def test_lengths_and_initial_states_compile(module_type):
    module = module_type(4, 6, backend="reference", num_layers=2, bidirectional=True, batch_first=False).double()
    compiled = torch.compile(module, fullgraph=True)
    x = torch.randn(7, 3, 4, dtype=torch.float64, requires_grad=True)
    shape = (4, 3, 6)
    states = tuple(torch.randn(shape, dtype=torch.float64) for _ in module.cell.states)
    states = states[0] if len(states) == 1 else states
    lengths = [5, 7, 2]  # a Python list: a CPU tensor of lengths is read with .tolist(), a graph break
    kwargs = {"lengths": lengths, "enforce_sorted": False}
    _assert_matches_eager(module, compiled, (x, states), kwargs, TOLERANCES[torch.float64]["rel"])


@pytest.mark.parametrize("module_type", [MinGRU, MinLSTM], ids=lambda t: t.__name__)
def test_scan_modules_compile_fullgraph_on_cpu(module_type):
    module = module_type(5, 8).double()
    compiled = torch.compile(module, fullgraph=True)
    x = torch.randn(3, 9, 5, dtype=torch.float64, requires_grad=True)
    h0 = torch.rand(3, 8, dtype=torch.float64, requires_grad=True)
    leaves = [x, h0, *module.parameters()]
    eager, got = module(x, h0), compiled(x, h0)
    assert relative_error(got, eager) <= TOLERANCES[torch.float64]["rel"]
    upstream = torch.randn_like(eager)
    for g, r in zip(_gradients(got, leaves, upstream), _gradients(eager, leaves, upstream)):
        assert relative_error(g, r) <= TOLERANCES[torch.float64]["rel"]


def test_graph_holds_the_custom_ops_and_not_the_step_loop():
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm.code)
        return gm.forward

    lstm, gru = FlashLSTM(4, 8, backend="reference"), MinGRU(4, 8)
    run = torch.compile(lambda x: lstm(x)[0] + gru(x), fullgraph=True, backend=record)
    run(torch.randn(2, 50, 4))
    (code,) = graphs
    assert "flashrnn_kernels.flashrnn_forward" in code and "flashrnn_kernels.scan_forward" in code
    assert "sigmoid" not in code  # the 50 steps' gate math stays inside the op


def test_new_sequence_lengths_reuse_the_dynamic_graph():
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("aot_eager")
    gru, scan = FlashGRU(4, 8, backend="reference", num_layers=2, bidirectional=True), MinLSTM(16, 8)
    run = torch.compile(lambda x: scan(gru(x)[0]), fullgraph=True, backend=counter)
    for T in (5, 9, 13, 40):
        run(torch.randn(2, T, 4)).sum().backward()
    assert counter.frame_count == 2  # the first shape, then one graph with a symbolic T: no step loop to unroll


def _recurrent_samples(device: str, dtype: torch.dtype, cells) -> list[tuple]:
    samples = []
    for cell in cells:
        spec = CELLS[cell]
        G, S, B, T, NH, DH = spec.gate_count, spec.state_count, 3, 5, 2, 16
        shapes = [(B, T, G, NH, DH), (G, NH, DH, DH), (G, NH, DH), (S, B, NH, DH)]
        for training in (True, False):
            tensors = [(torch.randn(s, device=device, dtype=dtype) * 0.5).requires_grad_(training) for s in shapes]
            samples.append((*tensors, cell, training))
    return samples


def _scan_samples(device: str, dtype: torch.dtype) -> list[tuple]:
    samples = []
    for cell, count in (("linear", 2), ("min_gru", 2), ("min_lstm", 3)):
        for with_h0 in (True, False):
            inputs = [torch.randn(2, 6, 8, device=device, dtype=dtype, requires_grad=True) for _ in range(count)]
            h0 = torch.rand(2, 8, device=device, dtype=dtype, requires_grad=True) if with_h0 else None
            samples.append((cell, inputs, h0))
    return samples


def _opcheck_all(device: str, dtype: torch.dtype, cells, backend: str = "fused") -> None:
    for sample in _recurrent_samples(device, dtype, cells):
        Wx, R, b, states, cell, training = sample
        torch.library.opcheck(library.flashrnn_forward, (*sample, backend))
        if training:
            h, last, gates, saved = library.flashrnn_forward(*(t.detach() for t in (Wx, R, b, states)), cell, True,
                                                             backend)
            backward_args = (None, R.detach(), b.detach(), states.detach(), h, gates, saved, torch.randn_like(h),
                             torch.randn_like(last), cell, backend)
            torch.library.opcheck(library.flashrnn_backward, backward_args)
    if backend != "fused":
        return
    for cell, inputs, h0 in _scan_samples(device, dtype):
        torch.library.opcheck(library.scan_forward, (cell, inputs, h0))
        plain = [t.detach() for t in inputs]
        h0 = None if h0 is None else h0.detach()
        h = library.scan_forward(cell, plain, h0)
        every = [True] * (len(plain) + 1)
        for needs in (every, [False, *every[1:]]):  # all gradients; all but the first input's
            torch.library.opcheck(library.scan_backward, (cell, plain, h0, torch.randn_like(h), h, needs))


def test_opcheck_on_cpu():
    _opcheck_all("cpu", torch.float64, sorted(CELLS))
    _opcheck_all("cpu", torch.float64, ["lstm"], backend="alternating")  # the schema's backend argument


def test_cpu_backward_op_matches_autograd_through_the_reference():
    from flashrnn_kernels.fused.reference import flashrnn_reference

    for Wx, R, b, states, cell, training in _recurrent_samples("cpu", torch.float64, sorted(CELLS))[::2]:
        h, last = library.flashrnn_op(Wx, R, b, states, cell)
        h_ref, last_ref = flashrnn_reference(Wx, R, b, states, cell)
        upstream = [torch.randn_like(h), torch.randn_like(last)]
        got = _gradients([h, last], [Wx, R, b, states], upstream)
        want = _gradients([h_ref, last_ref], [Wx, R, b, states], upstream)
        for name, g, r in zip(("dWx", "dR", "db", "dstates"), got, want):
            assert relative_error(g, r) <= TOLERANCES[torch.float64]["rel"], f"{cell} {name}"


def test_cpu_backward_op_reads_the_forward_saves():
    # bf16: the saves hold fp32 gate values and states, h_{t-1} comes from the bf16 output (as on CUDA); the bound
    # is twice the bf16 tolerance, since the gradients are rounded to bf16 themselves (about 2^-9 of the largest)
    from tests.flashrnn_kernels.float64_check import assert_close_rel, compare_with_float64

    for Wx, R, b, states, cell, training in _recurrent_samples("cpu", torch.bfloat16, sorted(CELLS))[::2]:
        out, ref = compare_with_float64(library.flashrnn_op, [Wx, R, b, states], cell)
        assert_close_rel(out, ref, torch.bfloat16, 2 * TOLERANCES[torch.bfloat16]["rel"])
    Wx, R, b, states, cell, _ = _recurrent_samples("cpu", torch.float32, ["lstm"])[1]  # training=False: no saves
    h, last, gates, saved = library.flashrnn_forward(Wx, R, b, states, cell, False)
    assert gates.numel() == 0 and saved.numel() == 0
    with pytest.raises(ValueError, match="no saved gate values.*training=True"):
        library.flashrnn_backward(None, R, b, states, h, gates, saved, torch.ones_like(h), torch.ones_like(last), cell)


def test_cpu_scan_backward_op_matches_autograd_through_the_loop():
    for cell, inputs, h0 in _scan_samples("cpu", torch.float64):
        if cell == "linear":  # decays in (0, 1), as the gated cells produce
            inputs = [torch.rand_like(inputs[0]).requires_grad_(), inputs[1]]
        leaves = [*inputs, *([] if h0 is None else [h0])]
        h = library.scan_op(cell, tuple(inputs), h0)
        h_ref = library.SCAN_LOOPS[cell](*inputs, h0)
        upstream = torch.randn_like(h)
        for k, (g, r) in enumerate(zip(_gradients(h, leaves, upstream), _gradients(h_ref, leaves, upstream))):
            assert relative_error(g, r) <= TOLERANCES[torch.float64]["rel"], f"{cell} gradient {k}"


def test_unknown_cell_names_are_rejected_by_the_ops():
    Wx, R, b, states, _, _ = _recurrent_samples("cpu", torch.float64, ["lstm"])[1]
    with pytest.raises(ValueError, match="unknown cell 'lsmt'.*registered cells"):
        library.flashrnn_forward(Wx, R, b, states, "lsmt", False)
    with pytest.raises(ValueError, match="backend must be one of.*'cudnn'"):
        library.flashrnn_forward(Wx, R, b, states, "lstm", False, "cudnn")
    with pytest.raises(ValueError, match="unknown scan cell 'gru'.*valid"):
        library.scan_forward("gru", [torch.randn(2, 3, 4)] * 2, None)


# ---- GPU -------------------------------------------------------------------------------------------------------

@pytest.fixture
def _poison(monkeypatch):
    monkeypatch.setattr(function, "POISON_OUTPUTS", True)


def _poison_cached_memory(numel: int = 1 << 26) -> None:
    """NaN into freed blocks of the caching allocator, so an output the scan kernel leaves unwritten shows up."""
    block = torch.full((numel,), float("nan"), device="cuda")
    del block


MODULE_BOUNDS = {torch.bfloat16: 1e-2, torch.float32: 1e-5}
"""Relative error of a whole module against float64: the fused bounds plus the rounding of the torch projections
and of each layer's output in the storage dtype (test_nn's bounds for the same comparison)."""


def _check_gpu_against_eager_and_oracle(model, oracle, args: tuple, args64: tuple, dtype: torch.dtype,
                                        load_stabilised_states: bool = True) -> None:
    """compiled(model) against eager model (same kernels) and against the float64 oracle, outputs and gradients.

    `load_stabilised_states=False` puts no upstream gradient on the states after h (float64_check's reason: sLSTM's
    c, n, m carry exp(-m) of the running maximum m, whose kinks rounding moves elements across; compiled and eager
    round the input projections differently)."""
    compiled = torch.compile(model, fullgraph=True)
    results = {}
    for name, run in (("compiled", compiled), ("eager", model)):
        _poison_cached_memory()
        results[name] = run(*args)
    results["oracle"] = oracle(*args64)
    flat = {name: _flat(r) if isinstance(r, tuple) else [r] for name, r in results.items()}
    leaves = [a for a in args if a is not None and a.requires_grad] + list(model.parameters())
    leaves64 = [a for a in args64 if a is not None and a.requires_grad] + list(oracle.parameters())
    upstream = [torch.randn_like(t) for t in flat["oracle"]]
    if not load_stabilised_states:  # flat: output, h_n, then the stabilised states
        upstream[2:] = [torch.zeros_like(u) for u in upstream[2:]]
    grads = {
        "compiled": _gradients(flat["compiled"], leaves, [u.to("cuda", dtype) for u in upstream]),
        "eager": _gradients(flat["eager"], leaves, [u.to("cuda", dtype) for u in upstream]),
        "oracle": _gradients(flat["oracle"], leaves64, upstream),
    }
    for reference, bound in (("eager", TOLERANCES[dtype]["rel"]), ("oracle", MODULE_BOUNDS[dtype])):
        for k, (out, ref) in enumerate(zip(flat["compiled"], flat[reference])):
            error = relative_error(out, ref)
            assert out.dtype == dtype and error <= bound, f"output {k} vs {reference}: {error:.2e}"
        for k, (g, r) in enumerate(zip(grads["compiled"], grads[reference])):
            error = relative_error(g, r)
            assert error <= 3 * bound, f"gradient {k} vs {reference}: {error:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("cell", sorted(FUSED_CELLS))
def test_fused_modules_compile_fullgraph_on_gpu(_poison, cell, layout, dtype):
    module_type = next(t for t in RECURRENT if t.cell_name == cell)
    model = module_type(48, 128, num_heads=2, backend="fused", **LAYOUTS[layout]).to("cuda", dtype)
    oracle = copy.deepcopy(model).to("cpu", torch.float64)  # the same rounded weights, float64 math
    oracle.backend = "reference"
    x = torch.randn(4, 33, 48, device="cuda", dtype=dtype, requires_grad=True)
    x64 = x.detach().to("cpu", torch.float64).requires_grad_()
    smooth = not (cell == "slstm" and dtype != torch.float32)
    _check_gpu_against_eager_and_oracle(model, oracle, (x,), (x64,), dtype, load_stabilised_states=smooth)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("module_type", [MinGRU, MinLSTM], ids=lambda t: t.__name__)
def test_scan_modules_compile_fullgraph_on_gpu(module_type, dtype):
    model = module_type(24, 96).to("cuda", dtype)
    oracle = copy.deepcopy(model).to("cpu", torch.float64)
    x = torch.randn(3, 300, 24, device="cuda", dtype=dtype, requires_grad=True)
    h0 = torch.rand(3, 96, device="cuda", dtype=dtype, requires_grad=True)
    args64 = tuple(t.detach().to("cpu", torch.float64).requires_grad_() for t in (x, h0))
    _check_gpu_against_eager_and_oracle(model, oracle, (x, h0), args64, dtype)


@pytest.mark.gpu
def test_opcheck_on_gpu(_poison):
    _opcheck_all("cuda", torch.float32, sorted(FUSED_CELLS))


@pytest.mark.gpu
def test_alternating_opcheck_on_gpu(monkeypatch):
    from flashrnn_kernels.alternating import function as alternating

    monkeypatch.setattr(alternating, "POISON_OUTPUTS", True)
    _opcheck_all("cuda", torch.float32, sorted(CELLS), backend="alternating")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_alternating_modules_compile_fullgraph_on_gpu(monkeypatch, cell, dtype):
    """The alternating backend under torch.compile(fullgraph=True): its custom op, saves passed between the ops."""
    from flashrnn_kernels.alternating import function as alternating

    monkeypatch.setattr(alternating, "POISON_OUTPUTS", True)
    module_type = next(t for t in RECURRENT if t.cell_name == cell)
    model = module_type(40, 96, backend="alternating", **LAYOUTS["2-layer-bidirectional"]).to("cuda", dtype)
    oracle = copy.deepcopy(model).to("cpu", torch.float64)
    oracle.backend = "reference"
    x = torch.randn(3, 21, 40, device="cuda", dtype=dtype, requires_grad=True)
    x64 = x.detach().to("cpu", torch.float64).requires_grad_()
    _check_gpu_against_eager_and_oracle(model, oracle, (x,), (x64,), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("make, dtype", [
    (lambda: FlashLSTM(32, 128, num_heads=2, backend="fused"), torch.bfloat16),
    (lambda: FlashGRU(32, 768, backend="fused"), torch.float32),  # a head split over blocks through L2
    (lambda: MinGRU(32, 64), torch.float32),  # split lanes: a workspace per capture
    (lambda: MinLSTM(32, 256), torch.bfloat16),
], ids=["fused-lstm", "fused-gru-split-head", "mingru", "minlstm"])
def test_modules_replay_under_reduce_overhead(make, dtype):
    """torch.compile(mode="reduce-overhead") records forward and backward into CUDA graphs (inductor's cudagraph
    trees) and replays them: every step's output and gradients match eager ones on fresh inputs. (The alternating
    backend replays a graph of its own and refuses to run inside a capture: test_alternating_gpu.py.)"""
    torch.manual_seed(2)
    model = make().to("cuda", dtype)
    compiled = torch.compile(model, mode="reduce-overhead")
    T = 2000 if isinstance(model, MinGRU) else 40
    for step in range(4):  # warm-up, recording, then replays
        x = torch.randn(4, T, 32, device="cuda", dtype=dtype)
        upstream = None
        results = {}
        for name, run in (("compiled", compiled), ("eager", model)):
            torch.compiler.cudagraph_mark_step_begin()
            leaf = x.clone().requires_grad_()
            model.zero_grad(set_to_none=True)
            out = run(leaf)
            out = out[0] if isinstance(out, tuple) else out
            upstream = torch.randn_like(out) if upstream is None else upstream
            out.backward(upstream)
            results[name] = [t.detach().clone() for t in (out, leaf.grad, *(p.grad for p in model.parameters()))]
        for k, (got, expected) in enumerate(zip(results["compiled"], results["eager"])):
            error = relative_error(got, expected)
            assert error <= TOLERANCES[dtype]["rel"], f"step {step}, result {k}: {error:.2e} from eager"
