"""Cell specs: written backward == autograd of written forward, CUDA rendering == torch evaluation, validation."""
from __future__ import annotations

import re
import subprocess

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from flashrnn_kernels.cells import CELLS, FUNCTIONS, CellSpec, CellSpecError, get_cell
from tests.nvcc import NVCC, RUNTIME_OPTIONS, requires_nvcc


def _random_inputs(cell: CellSpec, n: int = 257, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = {g: 3 * torch.randn(n, dtype=torch.float64, generator=generator) for g in cell.gates}
    s = {name: torch.randn(n, dtype=torch.float64, generator=generator) for name in cell.states}
    dy = {name: torch.randn(n, dtype=torch.float64, generator=generator) for name in cell.states}
    return x, s, dy


@pytest.mark.parametrize("name", sorted(CELLS))
def test_backward_equals_autograd_of_forward(name):
    cell = get_cell(name)
    x, s, dy = _random_inputs(cell)
    leaves = {f"x_{g}": t.requires_grad_() for g, t in x.items()} | {f"s_{n}": t.requires_grad_() for n, t in s.items()}
    y, a = cell.torch_forward(x, s)
    grads = torch.autograd.grad(
        [y[n] for n in cell.states], list(leaves.values()), [dy[n] for n in cell.states], allow_unused=True
    )
    expected = {key: torch.zeros_like(t) if g is None else g for (key, t), g in zip(leaves.items(), grads)}
    detach = lambda d: {k: v.detach() for k, v in d.items()}  # noqa: E731
    dx, ds = cell.torch_backward(detach(a), detach(s), detach(y), dy)
    for g in cell.gates:
        torch.testing.assert_close(dx[g], expected[f"x_{g}"], rtol=1e-12, atol=1e-12, msg=f"{name} dx_{g}")
    for n in cell.states:
        torch.testing.assert_close(ds[n], expected[f"s_{n}"], rtol=1e-12, atol=1e-12, msg=f"{name} ds_{n}")


_C_TO_PYTHON = {c_name: name for name, (_, c_name, _) in FUNCTIONS.items()}


def _run_rendered_c(statements: str, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Evaluate the rendered C statements as Python (float literal suffixes and helper names mapped back)."""
    def numbers_as_tensors(fn):
        return lambda *args: fn(*(torch.as_tensor(arg, dtype=torch.float64) for arg in args))

    namespace = {name: numbers_as_tensors(fn) for name, (_, _, fn) in FUNCTIONS.items()} | dict(values)
    namespace["cell_div"] = numbers_as_tensors(torch.div)
    for line in statements.splitlines():
        match = re.fullmatch(r"const float (\w+) = (.*);", line)
        assert match, f"unexpected rendered line {line!r}"
        expr = re.sub(r"(\d)f\b", r"\1", match.group(2))
        expr = re.sub(r"\b(\w+)\(", lambda m: _C_TO_PYTHON.get(m.group(1), m.group(1)) + "(", expr)
        namespace[match.group(1)] = eval(expr, namespace)  # test-only: checks the C text means the same
    return namespace


@pytest.mark.parametrize("name", sorted(CELLS))
def test_rendered_cuda_means_the_same_as_torch(name):
    cell = get_cell(name)
    x, s, dy = _random_inputs(cell, seed=1)
    y, a = cell.torch_forward(x, s)
    inputs = {f"x_{g}": t for g, t in x.items()} | {f"s_{n}": t for n, t in s.items()}
    forward = _run_rendered_c(cell.cuda_forward(), inputs)
    for n in cell.states:
        torch.testing.assert_close(forward[f"y_{n}"], y[n], rtol=1e-14, atol=0)
    dx, ds = cell.torch_backward(a, s, y, dy)
    values = {f"a_{g}": t for g, t in a.items()} | {f"s_{n}": t for n, t in s.items()}
    values |= {f"y_{n}": t for n, t in y.items()} | {f"dy_{n}": t for n, t in dy.items()}
    backward = _run_rendered_c(cell.cuda_backward(), values)
    rendered = lambda key, like: torch.as_tensor(backward[key], dtype=torch.float64).expand_as(like)  # noqa: E731
    for g in cell.gates:
        torch.testing.assert_close(rendered(f"dx_{g}", dx[g]), dx[g], rtol=1e-14, atol=0)
    for n in cell.states:
        torch.testing.assert_close(rendered(f"ds_{n}", ds[n]), ds[n], rtol=1e-14, atol=0)


def _expressions():
    leaves = st.sampled_from(["x_a", "s_h", "2", "0.5", "3.25"])

    def extend(inner):
        binary = st.tuples(inner, st.sampled_from(["+", "-", "*", "/"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
        bare = st.tuples(inner, st.sampled_from(["+", "-", "*", "/"]), inner).map(lambda t: f"{t[0]} {t[1]} {t[2]}")
        unary = inner.map(lambda e: f"-{e}")
        call = st.tuples(st.sampled_from(["tanh", "sigmoid", "logsigmoid"]), inner).map(lambda t: f"{t[0]}({t[1]})")
        pair = st.tuples(inner, inner).map(lambda t: f"maximum({t[0]}, {t[1]})")
        return binary | bare | unary | call | pair

    return st.recursive(leaves, extend, max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(_expressions())
@example("(3.25 / (x_a + s_h))")  # number / tensor: one rounded division, not a reciprocal times the number
@example("tanh(2 / 0) - 0 / 0")  # literals divided by zero: inf and nan, as in C
def test_rendering_keeps_precedence_and_literals(expr):
    """Unparenthesised Python (a - b * c / d, -x * y) and its fully parenthesised C text compute the same."""
    cell = CellSpec("t", ("a",), ("h",), (("a_a", "x_a"), ("y_h", expr)), (("dx_a", "dy_h"), ("ds_h", "0")))
    values = {"x_a": torch.linspace(-3, 3, 13, dtype=torch.float64), "s_h": torch.full((13,), 0.75).double()}
    y, _ = cell.torch_forward({"a": values["x_a"]}, {"h": values["s_h"]})
    rendered = torch.as_tensor(_run_rendered_c(cell.cuda_forward(), values)["y_h"], dtype=torch.float64)
    torch.testing.assert_close(rendered.expand_as(y["h"]), y["h"], rtol=0, atol=0, equal_nan=True)


def test_lstm_is_torch_formulation():
    cell = get_cell("lstm")
    assert cell.gates == ("i", "f", "z", "o") and cell.states == ("h", "c")
    x, s, _ = _random_inputs(cell)
    y, _ = cell.torch_forward(x, s)
    c = torch.sigmoid(x["f"]) * s["c"] + torch.sigmoid(x["i"]) * torch.tanh(x["z"])
    torch.testing.assert_close(y["c"], c)
    torch.testing.assert_close(y["h"], torch.sigmoid(x["o"]) * torch.tanh(c))


def test_literals_render_as_float():
    forward = (("a_a", "x_a"), ("y_h", "1 / 2 * x_a - -s_h"))
    cell = CellSpec("half", ("a",), ("h",), forward, (("dx_a", "dy_h / 2"), ("ds_h", "dy_h")))
    assert "const float y_h = ((cell_div(1.0f, 2.0f) * x_a) - (-s_h));" in cell.cuda_forward().splitlines()
    y, _ = cell.torch_forward({"a": torch.tensor([4.0])}, {"h": torch.tensor([1.0])})
    assert y["h"].item() == 3.0


def _spec(forward=(("a_a", "x_a"), ("y_h", "x_a")), backward=(("dx_a", "dy_h"), ("ds_h", "0")), **kw):
    return CellSpec(kw.get("name", "t"), kw.get("gates", ("a",)), kw.get("states", ("h",)), forward, backward)


@pytest.mark.parametrize(
    "forward, message",
    [
        ((("a_a", "x_a ** 2"), ("y_h", "x_a")), r"Pow.*not allowed"),
        ((("a_a", "pow(x_a, 2)"), ("y_h", "x_a")), r"call of 'pow'.*allowed functions"),
        ((("a_a", "torch.tanh(x_a)"), ("y_h", "x_a")), r"call of 'torch.tanh'"),
        ((("a_a", "tanh(x_a, 1)"), ("y_h", "x_a")), r"tanh\(\) takes 1"),
        ((("a_a", "x_a if s_h else 0"), ("y_h", "x_a")), r"IfExp.*not allowed"),
        ((("a_a", "x_a < 1"), ("y_h", "x_a")), r"Compare.*not allowed"),
        ((("a_a", "'x'"), ("y_h", "x_a")), r"Constant.*not allowed"),
        ((("a_a", "1e39 * x_a"), ("y_h", "x_a")), r"literal 1e\+39 .* outside the float32 range"),
        ((("a_a", "x_a +"), ("y_h", "x_a")), r"cannot parse"),
        ((("a_a", "q + x_a"), ("y_h", "x_a")), r"undefined name\(s\) \['q'\]"),
        ((("a_a", "x_a"),), r"must assign \['y_h'\]"),
        ((("a_a", "x_a"), ("a_a", "x_a"), ("y_h", "x_a")), r"'a_a' is assigned twice"),
        ((("float", "x_a"), ("a_a", "x_a"), ("y_h", "x_a")), r"'float' is reserved"),
        ((("cell_tanh", "x_a"), ("a_a", "x_a"), ("y_h", "x_a")), r"'cell_tanh' is reserved"),
        ((("dx", "x_a"), ("a_a", "x_a"), ("y_h", "x_a")), r"'dx' is reserved: bare prefixes"),
        ((("GATES", "x_a"), ("a_a", "x_a"), ("y_h", "x_a")), r"'GATES' is reserved.*upper-case"),
        ((("a-b", "x_a"),), r"not a plain identifier"),
        ((("a_a", 1.0),), r"\(name, expression\) pair of str"),
    ],
)
def test_bad_forward_rejected_at_definition(forward, message):
    with pytest.raises(CellSpecError, match=message):
        _spec(forward=forward)


def test_bad_backward_and_names_rejected():
    with pytest.raises(CellSpecError, match=r"backward: must assign \['ds_h'\]"):
        _spec(backward=(("dx_a", "dy_h"),))
    with pytest.raises(CellSpecError, match=r"undefined name\(s\) \['x_a'\]"):
        _spec(backward=(("dx_a", "x_a"), ("ds_h", "0")))
    with pytest.raises(CellSpecError, match=r"distinct names"):
        _spec(gates=("a", "a"))
    with pytest.raises(CellSpecError, match=r"at least one gate"):
        _spec(gates=())


def test_missing_inputs_reported_by_name():
    cell = get_cell("lstm")
    with pytest.raises(KeyError, match=r"missing \['x_o'\]"):
        cell.torch_forward({g: torch.zeros(1) for g in "ifz"}, {"h": torch.zeros(1), "c": torch.zeros(1)})


def test_get_cell_lists_known_cells():
    assert get_cell("lstm") is CELLS["lstm"]
    assert get_cell(CELLS["lstm"]) is CELLS["lstm"]
    with pytest.raises(ValueError, match=r"unknown cell 'lstn'; known cells: \[.*'lstm'"):
        get_cell("lstn")


def _kernel_source(cell: CellSpec) -> str:
    """Kernels binding every input of the cell's two steps as fp32 locals and storing every output."""
    def block(inputs, statements, outputs):
        binds = "".join(f"const float {n} = to_float(in[{k}]);\n" for k, n in enumerate(inputs))
        stores = "".join(f"out[{k}] = from_float<T>({n});\n" for k, n in enumerate(outputs))
        return "{\n" + binds + statements + "\n" + stores + "}\n"

    g, s = cell.gates, cell.states
    fwd_in, fwd_out = [f"x_{n}" for n in g] + [f"s_{n}" for n in s], [f"y_{n}" for n in s] + [f"a_{n}" for n in g]
    fwd = block(fwd_in, cell.cuda_forward(), fwd_out)
    bwd_in = [f"a_{n}" for n in g] + [f"{p}_{n}" for p in ("s", "y", "dy") for n in s]
    bwd = block(bwd_in, cell.cuda_backward(), [f"dx_{n}" for n in g] + [f"ds_{n}" for n in s])
    kernel = f"step_{cell.name}"
    return (
        f"template <typename T> __global__ void {kernel}(const T* in, T* out) {{\n" + fwd + bwd + "}\n"
        + "".join(
            f"template __global__ void {kernel}<{t}>(const {t}*, {t}*);\n" for t in ("float", "__half", "__nv_bfloat16")
        )
    )


@requires_nvcc
@pytest.mark.parametrize("arch, flags", [("sm_80", ()), ("sm_90", ("-DFLASHRNN_FAST_ACTIVATIONS",))])
def test_rendered_steps_compile_with_nvcc(arch, flags, tmp_path):
    source = tmp_path / "cells.cu"
    source.write_text('#include "cells/ops.cuh"\n' + "".join(_kernel_source(cell) for cell in CELLS.values()))
    command = [NVCC, f"-arch={arch}", *RUNTIME_OPTIONS, *flags, "-c", str(source)]
    command += ["-o", str(tmp_path / "cells.o")]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


_DIVIDE_KERNEL = r"""
#include "cells/ops.cuh"
extern "C" __global__ void divide(const float* a, const float* b, float* q, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) q[i] = cell_div(a[i], b[i]);
}
"""


@pytest.mark.gpu
@pytest.mark.parametrize("fast", [False, True])
def test_cell_div_on_the_gpu_matches_ieee_division(fast):
    """cell_div against IEEE division with subnormals flushed to zero (CuPy compiles with -ftz=true): random operands
    over the whole exponent range within 2^-22 relative (2^-21 with the fast activations); zero, infinite, NaN and
    subnormal operands, overflows and underflows as IEEE's."""
    from flashrnn_kernels.runtime.compile import get_kernel

    generator = torch.Generator().manual_seed(torch.seed() % 2**32)
    n = 1 << 16
    magnitude = lambda: torch.exp2(torch.empty(n).uniform_(-149, 127, generator=generator))  # noqa: E731
    sign = lambda: torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0)  # noqa: E731
    a, b = sign() * magnitude(), sign() * magnitude()
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-45, 3e38, 1.0])
    grid_a, grid_b = torch.cartesian_prod(special, special).unbind(1)
    a, b = torch.cat([a, grid_a]).float(), torch.cat([b, grid_b]).float()
    kernel = get_kernel(_DIVIDE_KERNEL, "divide", ("-DFLASHRNN_FAST_ACTIVATIONS",) if fast else ())
    a_gpu, b_gpu = a.cuda(), b.cuda()
    q = torch.full_like(a_gpu, 12345.0)
    kernel(((a.numel() + 255) // 256,), (256,), (a_gpu.data_ptr(), b_gpu.data_ptr(), q.data_ptr(), a.numel()))
    torch.cuda.synchronize()
    flush = lambda x: torch.where(x.abs() < torch.finfo(torch.float32).tiny, x * 0, x)  # noqa: E731 (keeps the sign)
    q, expected = q.cpu(), flush(flush(a) / flush(b))
    assert torch.equal(torch.isnan(q), torch.isnan(expected)), "NaN where IEEE division gives none, or the reverse"
    exact = ~torch.isnan(expected) & (torch.isinf(expected) | (expected == 0))
    assert torch.equal(q[exact], expected[exact]), "an infinite or zero quotient differs from IEEE's"
    normal = torch.isfinite(expected) & (expected != 0)
    relative = ((q[normal] - expected[normal]).abs() / expected[normal].abs()).max().item()
    bound = 2.0**-21 if fast else 2.0**-22  # 2 ulp; 1 where the correction's residual is not subnormal (FTZ)
    assert relative <= bound, f"cell_div's relative error {relative:.3g} exceeds {bound:.3g}"
