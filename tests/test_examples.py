"""Every example's main() runs at a small size and returns its results."""
from __future__ import annotations

import contextlib
import importlib.util
import inspect
import io
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))

SMALL = {
    "quickstart": {"batch": 2, "steps": 8, "input_size": 6, "hidden_size": 8, "num_heads": 2, "device": "cpu"},
    "state_tracking": {
        "steps": 40, "batch": 32, "train_length": 8, "eval_lengths": (8, 32), "hidden_size": 32, "samples": 64,
        "device": "cpu",
    },
}
"""Keyword arguments that keep an example to seconds on a CPU; examples not listed run main() as is. Examples
whose main() takes `out_dir` write into a temporary directory."""


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"examples.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """run(stem) -> (results, printed text) of the example's main() at its small size, run once per module."""
    cache = {}

    def run(stem: str):
        if stem not in cache:
            module = _load(EXAMPLES[[p.stem for p in EXAMPLES].index(stem)])
            kwargs = SMALL.get(stem, {})
            if "out_dir" in inspect.signature(module.main).parameters:
                kwargs = kwargs | {"out_dir": tmp_path_factory.mktemp(stem)}
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                cache[stem] = module.main(**kwargs), printed.getvalue()
        return cache[stem]

    return run


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_main_runs(path, small_run):
    results, printed = small_run(path.stem)
    assert results, f"{path.name}: main() returned {results!r}"
    assert printed, f"{path.name}: main() printed no summary"


def test_quickstart_agrees_with_torch(small_run):
    results, _ = small_run("quickstart")
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


def test_state_tracking_trains_and_plots(small_run):
    results, printed = small_run("state_tracking")
    assert "FlashSLSTM" in printed
    assert set(results["models"]) == {"FlashLSTM", "FlashSLSTM", "Transformer"}
    for name, result in results["models"].items():
        assert set(result["eval_accuracy"]) == {8, 32}, name
        assert all(0 <= accuracy <= 1 for accuracy in result["eval_accuracy"].values()), name
        steps, losses, _ = zip(*result["curve"])
        assert steps[-1] == 40 and all(loss > 0 for loss in losses), name
    lstm = results["models"]["FlashLSTM"]
    assert lstm["curve"][-1][1] < lstm["curve"][0][1] / 2  # the loss falls: parity is being learned
    for key in ("learning_curve_png", "length_generalisation_png"):
        assert Path(results[key]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| FlashSLSTM |" in Path(results["summary_md"]).read_text()
