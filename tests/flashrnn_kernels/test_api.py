"""flashrnn(): validation messages, casting, default states, backend choice and the lazy plan export."""
from __future__ import annotations

import re
import warnings

import pytest
import torch

import flashrnn_kernels
from flashrnn_kernels import ReferenceFallbackWarning, flashrnn, get_cell
from flashrnn_kernels import dispatch
from flashrnn_kernels.fused.reference import flashrnn_reference
from flashrnn_kernels.validation import check_dtype

B, T, NH, DH = 2, 3, 2, 4


def _inputs(dtype=torch.float32, **overrides):
    generator = torch.Generator().manual_seed(0)
    shapes = {"Wx": (B, T, 4, NH, DH), "R": (4, NH, DH, DH), "b": (4, NH, DH), "states": (2, B, NH, DH)}
    tensors = {name: torch.randn(*shape, generator=generator, dtype=dtype) for name, shape in shapes.items()}
    return tensors | overrides


def _call(**kwargs):
    options = {key: kwargs.pop(key) for key in ("cell", "backend", "dtype") if key in kwargs}
    options.setdefault("backend", "reference")
    return flashrnn(**_inputs(**kwargs), **options)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"Wx": torch.zeros(B, T, 4 * NH * DH)}, r"Wx must be 5-D \[B, T, G, NH, DH\].*got 3-D shape \[2, 3, 32\]"),
        ({"Wx": torch.zeros(B, T, 3, NH, DH)}, r"Wx has G=3 .* cell 'lstm' has 4 gates"),
        ({"Wx": torch.zeros(B, 0, 4, NH, DH)}, r"every extent >= 1, got \[2, 0, 4, 2, 4\]"),
        (
            {"R": torch.zeros(4, NH, DH, DH + 1)},
            r"R must have shape \[G, NH, DH, DH\] = \[4, 2, 4, 4\], got \[4, 2, 4, 5\]",
        ),
        ({"R": torch.zeros(4, NH * DH, NH * DH)}, r"R must have shape \[G, NH, DH, DH\]"),
        ({"b": torch.zeros(4, NH * DH)}, r"b must have shape \[G, NH, DH\] = \[4, 2, 4\], got \[4, 8\]"),
        (
            {"states": torch.zeros(2, B + 1, NH, DH)},
            r"states must have shape \[S, B, NH, DH\] \(S=2 states \('h', 'c'\)\)",
        ),
        ({"states": torch.zeros(1, B, NH, DH)}, r"states must have shape .* got \[1, 2, 2, 4\]"),
    ],
)
def test_shape_errors_name_argument_and_layout(overrides, message):
    with pytest.raises(ValueError, match=message):
        _call(**overrides)


def test_type_errors():
    with pytest.raises(TypeError, match=r"R must be a torch.Tensor, got list"):
        _call(R=[[1.0]])
    for name in ("Wx", "R", "b"):
        with pytest.raises(TypeError, match=rf"{name} must be a torch.Tensor, got NoneType"):
            _call(**{name: None})
    with pytest.raises(TypeError, match=r"b has dtype torch.float64 but Wx has torch.float32.*pass dtype="):
        _call(b=torch.zeros(4, NH, DH, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"backend 'reference' supports dtypes .*torch.float64.*got torch.int32"):
        _call(dtype=torch.int32)
    with pytest.raises(TypeError, match=r"dtype must be a torch.dtype"):
        _call(dtype="bf16")
    fused_dtypes = r"\['torch.bfloat16', 'torch.float16', 'torch.float32'\]"
    with pytest.raises(TypeError, match=rf"backend 'fused' supports dtypes {fused_dtypes}, got torch.float64"):
        check_dtype(torch.float64, "fused")


def test_device_mismatch():
    with pytest.raises(ValueError, match=r"states is on meta but Wx is on cpu"):
        _call(states=torch.zeros(2, B, NH, DH, device="meta"))


def test_non_contiguous_input_asks_for_contiguous():
    R = torch.zeros(4, NH, DH, DH).transpose(2, 3)
    with pytest.raises(ValueError, match=r"R is not contiguous .*call R.contiguous\(\) first"):
        _call(R=R)


def test_unknown_cell_and_backend_list_valid_choices():
    with pytest.raises(ValueError, match=r"unknown cell 'lstmm'; known cells: \[.*'lstm'.*\]"):
        _call(cell="lstmm")
    valid = r"\['auto', 'fused', 'alternating', 'reference'\]"
    with pytest.raises(ValueError, match=r"unknown backend 'cuda'; valid backends: " + valid):
        _call(backend="cuda")


@pytest.mark.parametrize("backend", ["fused", "alternating"])
def test_cuda_backends_on_cpu_are_a_clear_error(backend):
    message = rf"backend='{backend}' needs CUDA tensors, got tensors on cpu.*backend='reference'"
    with pytest.raises(ValueError, match=message):
        _call(backend=backend)


def test_dtype_casts_every_input():
    inputs = _inputs(dtype=torch.float32)
    h, last = flashrnn(**inputs, backend="reference", dtype=torch.float64)
    assert h.dtype == last.dtype == torch.float64
    expected = flashrnn_reference(*(inputs[k].double() for k in ("Wx", "R", "b", "states")), "lstm")
    torch.testing.assert_close((h, last), expected, rtol=0, atol=0)


def test_default_states_are_zeros():
    inputs = _inputs(dtype=torch.float64)
    inputs.pop("states")
    h, last = flashrnn(**inputs, backend="reference")
    expected = flashrnn(**inputs, states=torch.zeros(2, B, NH, DH, dtype=torch.float64), backend="reference")
    torch.testing.assert_close((h, last), expected, rtol=0, atol=0)
    assert h.shape == (B, T, NH, DH) and last.shape == (2, B, NH, DH)


def test_gradients_flow_to_every_input():
    inputs = {name: t.double().requires_grad_() for name, t in _inputs().items()}
    h, last = flashrnn(**inputs, backend="reference")
    (h.sum() + last.sum()).backward()
    for name, tensor in inputs.items():
        assert tensor.grad is not None and tensor.grad.abs().sum() > 0, name


def test_auto_on_cpu_warns_once_and_uses_reference(monkeypatch):
    monkeypatch.setattr(dispatch, "_warned", set())
    inputs = _inputs(dtype=torch.float64)
    with pytest.warns(ReferenceFallbackWarning, match=r"inputs are on cpu and the CUDA kernels need a GPU"):
        result = flashrnn(**inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReferenceFallbackWarning)
        flashrnn(**inputs)
    torch.testing.assert_close(result, flashrnn(**inputs, backend="reference"), rtol=0, atol=0)


@pytest.mark.parametrize(
    "dtype, cupy, expected, reason",
    [
        (torch.bfloat16, True, "fused", None),
        (torch.float32, True, "fused", None),
        (torch.float64, True, "reference", r"do not support torch.float64"),
        (torch.float16, False, "reference", r"CuPy is not installed"),
    ],
)
def test_auto_choice_for_cuda_devices(monkeypatch, dtype, cupy, expected, reason):
    monkeypatch.setattr(dispatch, "_warned", set())
    monkeypatch.setattr(dispatch, "_cupy_importable", lambda: cupy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chosen = dispatch.choose_backend("auto", torch.device("cuda"), dtype, get_cell("lstm"), 64)
    assert chosen == expected
    messages = [str(w.message) for w in caught if issubclass(w.category, ReferenceFallbackWarning)]
    if reason is None:
        assert messages == []
    else:
        assert len(messages) == 1 and re.search(reason, messages[0]), messages


def test_unregistered_cell_runs_on_reference_only():
    lstm = get_cell("lstm")
    custom = type(lstm)("lstm", lstm.gates, lstm.states, lstm.forward, lstm.backward)
    with pytest.raises(ValueError, match=r"backend='fused' has no kernel for cell 'lstm'"):
        dispatch.choose_backend("fused", torch.device("cuda"), torch.float32, custom, 64)
    inputs = _inputs(dtype=torch.float64)
    torch.testing.assert_close(
        flashrnn(**inputs, cell=custom, backend="reference"), flashrnn(**inputs, backend="reference")
    )


def test_plan_is_exported_lazily():
    assert {"flashrnn", "plan", "KernelPlan", "FlashLSTM", "get_cell"} <= set(flashrnn_kernels.__all__)
    with pytest.raises(AttributeError, match=r"has no attribute 'not_a_name'"):
        flashrnn_kernels.not_a_name  # noqa: B018
    plan_module = pytest.importorskip("flashrnn_kernels.fused.plan")
    assert flashrnn_kernels.plan is plan_module.plan
    assert flashrnn_kernels.KernelPlan is plan_module.KernelPlan


def test_custom_cells_run_on_the_reference_and_have_no_cuda_kernel(monkeypatch):
    monkeypatch.setattr(dispatch, "_warned", set())
    monkeypatch.setattr(dispatch, "_cupy_importable", lambda: True)
    gru = get_cell("gru")
    custom = type(gru)("my_gru", gru.gates, gru.states, gru.forward, gru.backward)
    with pytest.warns(ReferenceFallbackWarning, match=r"cell 'my_gru' is a custom CellSpec"):
        assert dispatch.choose_backend("auto", torch.device("cuda"), torch.float32, custom, 64) == "reference"
    fused = r"backend='fused' has no kernel for cell 'my_gru'; fused cells: \['elman', 'gru', 'lstm', 'slstm'\]"
    with pytest.raises(ValueError, match=fused):
        dispatch.choose_backend("fused", torch.device("cuda"), torch.float32, custom, 64)
    with pytest.raises(ValueError, match=r"backend='alternating' has no kernel for cell 'my_gru'"):
        dispatch.choose_backend("alternating", torch.device("cuda"), torch.float32, custom, 64)


def test_auto_runs_head_dims_without_a_fused_kernel_on_the_alternating_backend(monkeypatch):
    monkeypatch.setattr(dispatch, "_warned", set())
    monkeypatch.setattr(dispatch, "_cupy_importable", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReferenceFallbackWarning)
        chosen = dispatch.choose_backend("auto", torch.device("cuda"), torch.float32, get_cell("lstm"), 24, 16, 4)
    assert chosen == "alternating"


def test_auto_asks_the_planner_when_the_problem_is_known(monkeypatch):
    monkeypatch.setattr(dispatch, "_cupy_importable", lambda: True)
    asked = []

    def planned(*key):
        asked.append(key)
        return "alternating"

    monkeypatch.setattr(dispatch, "_planned_backend", planned)
    cuda = torch.device("cuda", 0)
    assert dispatch.choose_backend("auto", cuda, torch.bfloat16, get_cell("gru"), 1024, 16, 4, False) == "alternating"
    assert asked == [("gru", 16, 4, 1024, torch.bfloat16, 0, False)]
