"""The scan plans two GPU models make for the same problems, timed on this GPU: where the models' time estimates tie
or differ, which block shape runs faster here. Each pair of plans is timed as device time per call in a CUDA graph
(common.time_graph), taking turns over --rounds rounds in one process, on random inputs; rows give both block shapes
and the largest relative difference of their outputs (nonzero where the chunking, and so the rounding, differs).

Usage: python benchmarks/scan_model_plans_ab.py [--models H100-SXM5-80GB,H200-SXM-141GB] [--cells linear]
                                                [--shapes 8x4096x1536] [--dtypes bfloat16,float32] [--rounds 3]
Writes scan_model_plans_ab.{csv,md} to BENCH_RESULTS_DIR (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import functools
import itertools
import statistics

import hwmodels
import torch

import common
from flashrnn_kernels.runtime.compile import precompile
from flashrnn_kernels.scan import function
from flashrnn_kernels.scan.plan import ScanPlan, plan
from flashrnn_kernels.scan.problem import ScanProblem


def describe(p: ScanPlan) -> str:
    """A plan's block shape: carry, threads_d x threads_t x steps, vec, stages, blocks per SM."""
    return f"{p.carry} {p.threads_d}x{p.threads_t}x{p.steps} vec {p.vec} stages {p.stages} blocks {p.min_blocks}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="H100-SXM5-80GB,H200-SXM-141GB", help="two hwmodels names")
    parser.add_argument("--cells", default="linear")
    parser.add_argument("--shapes", default="8x1024x1536,8x4096x1536,8x16384x1536", help="comma-separated BxTxD")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    names = args.models.split(",")
    if len(names) != 2:
        parser.error(f"--models takes two GPU model names, got {args.models!r}")
    models = {name: hwmodels.load(name) for name in names}
    common.require_cuda("scan_model_plans_ab")
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    jobs = []
    for cell, dtype, direction, shape in itertools.product(args.cells.split(","), args.dtypes.split(","),
                                                           ("forward", "backward"), shapes):
        plans = {name: plan(ScanProblem.for_shape(cell, *shape, dtype, direction), gpu)
                 for name, gpu in models.items()}
        jobs.append((cell, dtype, direction, shape, plans))
    precompile([q.source() for *_, plans in jobs for q in plans.values()])
    rows = []
    for cell, dtype, direction, shape, plans in jobs:
        torch_dtype, count = getattr(torch, dtype), next(iter(plans.values())).problem.input_count
        # linear_scan's decays a in [0, 1); the gate cells' pre-activations from randn
        draws = [torch.rand if cell == "linear" and i == 0 else torch.randn for i in range(count)]
        inputs = tuple(draw(shape, device="cuda").to(torch_dtype) for draw in draws)
        extra = {}
        if direction == "backward":
            extra = {"dy": torch.randn(shape, device="cuda").to(torch_dtype),
                     "h": function.run_scan(cell, "forward", inputs, None)[0]}
        runs = {name: functools.partial(function.run_scan, cell, direction, inputs, None, **extra, kernel_plan=q)
                for name, q in plans.items()}
        outputs = {name: [t.clone() for t in run() if t is not None] for name, run in runs.items()}
        diff = max(common.relative_error(a, b) for a, b in zip(*outputs.values()))
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():
                times[name].append(common.time_graph(run))
        us = [statistics.median(times[name]) * 1e3 for name in names]
        rows.append({"cell": cell, "dtype": dtype, "direction": direction, "shape": "x".join(map(str, shape)),
                     **{f"{name} plan": describe(plans[name]) for name in names},
                     **{f"{name} us": round(t, 2) for name, t in zip(names, us)},
                     "ratio": round(us[1] / us[0], 4), "rel diff": f"{diff:.1e}"})
        print(rows[-1], flush=True)
    print(common.write_results("scan_model_plans_ab", rows, title=f"Scan plans of {names[0]} and {names[1]}",
                               notes=[f"Device time per call (us), median of {args.rounds} alternating rounds of "
                                      f"common.time_graph (10 calls per graph); ratio = {names[1]} / {names[0]}."]))


if __name__ == "__main__":
    main()
