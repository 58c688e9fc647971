"""Every example's main() runs at a small size and returns its results."""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES = sorted(path for path in EXAMPLES_DIR.glob("*.py") if 'if __name__ == "__main__":' in path.read_text())
"""The example scripts; the other modules in examples/ are helpers they import (as a script's directory is on
sys.path when it runs, `_load` puts examples/ there)."""

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
    if str(EXAMPLES_DIR) not in sys.path:
        sys.path.insert(0, str(EXAMPLES_DIR))
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


def _state_tracking_tasks():
    _load(EXAMPLES_DIR / "state_tracking.py")  # puts examples/ on sys.path
    return importlib.import_module("state_tracking_tasks")


def test_s5_targets_are_the_running_composition():
    tasks = _state_tracking_tasks()
    permutations = tasks.permutations()
    assert len(set(permutations)) == 120 and permutations[0] == (0, 1, 2, 3, 4)
    tokens, targets, lengths = tasks.s5_batch(6, 12, torch.Generator().manual_seed(1))
    assert tokens.shape == targets.shape == (6, 12) and lengths.shape == (6,)
    assert int(tokens.max()) < 120 and int(targets.max()) < 120
    for sequence, labels, length in zip(tokens.tolist(), targets.tolist(), lengths.tolist()):
        assert 1 <= length <= 12 and all(token == 0 for token in sequence[length:])  # identity padding
        state = (0, 1, 2, 3, 4)
        for token, label in zip(sequence, labels):
            applied = permutations[token]
            state = tuple(applied[state[i]] for i in range(5))  # apply the newest permutation last
            assert permutations[label] == state
    fixed = tasks.s5_batch(3, 5, torch.Generator().manual_seed(2), fixed=True)[2]
    assert fixed.tolist() == [5, 5, 5]


def test_s5_composition_is_not_commutative():
    table = _state_tracking_tasks().composition_table()
    assert table.shape == (120, 120) and bool((table[0] == torch.arange(120)).all())  # identity on the left
    assert bool((table != table.T).any())  # the order of the tokens matters: S5 is not abelian


def test_state_tracking_s5_trains_and_plots(tmp_path):
    module = _load(EXAMPLES_DIR / "state_tracking.py")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        results = module.main(task="s5", quick=True, steps=30, batch=16, hidden_size=32, eval_lengths=(4, 16),
                              samples=32, device="cpu", out_dir=tmp_path)
    assert results["task"] == "s5" and "permutations of 5 elements" in printed.getvalue()
    assert set(results["models"]) == {"FlashLSTM", "FlashSLSTM", "Transformer"}
    for name, result in results["models"].items():
        assert set(result["eval_accuracy"]) == {4, 16}, name
        assert all(0 <= accuracy <= 1 for accuracy in result["eval_accuracy"].values()), name
        steps, losses, accuracies = zip(*result["curve"])
        assert steps == tuple(range(1, 31)) and all(0 <= accuracy <= 1 for accuracy in accuracies), name
        assert all(0 < loss < float("inf") for loss in losses), name
        if name != "Transformer":  # the recurrent models start near ln(120): a first guess over 120 states
            assert 4.0 < losses[0] < 5.6, (name, losses[0])
    for key, suffix in (("learning_curve_png", "learning_curves"), ("length_generalisation_png",
                                                                    "length_generalisation")):
        path = Path(results[key])
        assert path == tmp_path / f"state_tracking_s5_{suffix}.png"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = Path(results["summary_md"])
    assert summary == tmp_path / "state_tracking_s5.md" and "| FlashSLSTM |" in summary.read_text()
    assert not (tmp_path / "state_tracking.md").exists()  # parity's files are left alone


def test_state_tracking_rejects_an_unknown_task():
    module = _load(EXAMPLES_DIR / "state_tracking.py")
    with pytest.raises(ValueError, match="unknown task 'sorting'.*'parity', 's5'"):
        module.main(task="sorting", device="cpu")


@pytest.mark.gpu
def test_state_tracking_s5_runs_on_cuda(tmp_path):
    module = _load(EXAMPLES_DIR / "state_tracking.py")
    with contextlib.redirect_stdout(io.StringIO()):
        results = module.main(task="s5", steps=20, eval_lengths=(16, 64), samples=64, device="cuda", out_dir=tmp_path)
    assert results["settings"]["device"].startswith("cuda") and results["settings"]["hidden_size"] == 256
    for name, result in results["models"].items():
        assert all(0 <= accuracy <= 1 for accuracy in result["eval_accuracy"].values()), name
        assert all(0 < loss < float("inf") for _, loss, _ in result["curve"]), name
    assert Path(results["length_generalisation_png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
