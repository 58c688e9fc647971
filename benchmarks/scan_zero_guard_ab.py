"""The scan kernels with and without the guard that keeps exact zero states out of overflowed decay products
(`apply_map` / `stays_zero`, now in scan/carries.cuh): the current scan.cu against an older copy given by --before,
each launch of the solver's plans timed as device time per call in a CUDA graph (common.time_graph), the two sources
taking turns over --rounds rounds in one process, on random inputs (decays in (0.5, 1)). Also the largest difference
between the two sources' outputs (the guard changes nothing where no product overflows).

Usage: git show c7b516f:flashrnn_kernels/scan/scan.cu > /tmp/before.cu  (the kernels just before the guard)
       python benchmarks/scan_zero_guard_ab.py --before /tmp/before.cu [--rounds 3]
Writes scan_zero_guard_ab.{csv,md} to BENCH_RESULTS_DIR (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import importlib
import statistics
from pathlib import Path

import torch

import common
from flashrnn_kernels.scan import function

scan_plan = importlib.import_module("flashrnn_kernels.scan.plan")  # the package's `plan` is the function

CASES = [("linear", (1, 65536, 64)), ("linear", (8, 4096, 1536)), ("min_gru", (1, 65536, 64))]
DTYPES = (torch.float32, torch.bfloat16)


def _use(source: Path) -> None:
    """Compile and launch from `source` from now on (the kernels and launches cached so far are dropped)."""
    scan_plan.SOURCE_PATH = source
    function._kernel.cache_clear()
    function._launches.clear()


def _inputs(cell: str, shape: tuple[int, int, int], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    if cell == "linear":
        return (torch.rand(shape, device="cuda") * 0.5 + 0.5).to(dtype), torch.randn(shape, device="cuda").to(dtype)
    return tuple(torch.randn(shape, device="cuda").to(dtype) for _ in range(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="scan.cu without the guard")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    common.require_cuda("scan_zero_guard_ab")
    sources = {"before": args.before.resolve(), "guard": scan_plan.SOURCE_PATH}
    rows = []
    for cell, shape in CASES:
        for dtype in DTYPES:
            inputs = _inputs(cell, shape, dtype)
            dy = torch.randn(shape, device="cuda").to(dtype)
            times: dict[tuple[str, str], list[float]] = {}
            outputs: dict[str, list[torch.Tensor]] = {}
            for _ in range(args.rounds):
                for name, source in sources.items():
                    _use(source)
                    (h,) = function.run_scan(cell, "forward", inputs, None)
                    grads = function.run_scan(cell, "backward", inputs, None, dy=dy, h=h)
                    outputs[name] = [h, *(g for g in grads if g is not None)]
                    fwd = common.time_graph(lambda: function.run_scan(cell, "forward", inputs, None))
                    bwd = common.time_graph(lambda: function.run_scan(cell, "backward", inputs, None, dy=dy, h=h))
                    times.setdefault((name, "forward"), []).append(fwd)
                    times.setdefault((name, "forward+backward"), []).append(fwd + bwd)
            diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(outputs["before"], outputs["guard"]))
            for call in ("forward", "forward+backward"):
                before = statistics.median(times[("before", call)]) * 1e3
                guard = statistics.median(times[("guard", call)]) * 1e3
                rows.append({"cell": cell, "shape": common.format_dims(shape), "dtype": str(dtype)[6:], "call": call,
                             "before_us": round(before, 2), "guard_us": round(guard, 2),
                             "ratio": round(guard / before, 4), "max_output_diff": f"{diff:.1e}"})
    _use(sources["guard"])
    print(common.write_results("scan_zero_guard_ab", rows, title="Scan kernels: the zero-state guard's cost",
                               notes=[f"Device time per call (us), median of {args.rounds} alternating rounds of "
                                      "common.time_graph (10 calls per graph), the solver's plans; ratio = guard / "
                                      "before. max_output_diff: largest difference of h and the gradients."]))


if __name__ == "__main__":
    main()
