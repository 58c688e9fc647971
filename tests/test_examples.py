"""Every example's main() runs at a small size and returns its results."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))

SMALL = {"quickstart": {"batch": 2, "steps": 8, "input_size": 6, "hidden_size": 8, "num_heads": 2, "device": "cpu"}}
"""Keyword arguments that keep an example to seconds on a CPU; examples not listed run main() as is."""


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"examples.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_main_runs(path, capsys):
    module = _load(path)
    results = module.main(**SMALL.get(path.stem, {}))
    assert results, f"{path.name}: main() returned {results!r}"
    assert capsys.readouterr().out, f"{path.name}: main() printed no summary"


def test_quickstart_agrees_with_torch():
    results = _load(EXAMPLES[[p.stem for p in EXAMPLES].index("quickstart")]).main(**SMALL["quickstart"])
    assert results["backend"] == "reference" and results["heads_h_shape"] == "(2, 8, 2, 4)"
    for key in ("output_error", "h_n_error", "c_n_error", "grad_x_error", "grad_R_error"):
        assert results[key] < 1e-5, (key, results[key])


@pytest.mark.gpu
def test_quickstart_runs_the_fused_kernel_on_cuda():
    module = _load(EXAMPLES[[p.stem for p in EXAMPLES].index("quickstart")])
    results = module.main(batch=2, steps=16, input_size=8, hidden_size=64, num_heads=4, device="cuda")
    assert results["backend"] == "fused" and results["heads_h_shape"] == "(2, 16, 4, 16)"
    for key in ("output_error", "h_n_error", "c_n_error", "grad_x_error", "grad_R_error"):
        assert results[key] < 1e-4, (key, results[key])
