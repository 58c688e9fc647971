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
import itertools

import hwmodels
import torch

import common
import scan_plan_runs
from flashrnn_kernels.runtime.compile import precompile
from flashrnn_kernels.scan.plan import ScanPlan, plan
from flashrnn_kernels.scan.problem import ScanProblem


def describe(p: ScanPlan) -> str:
    """A plan's block shape: carry, threads_d x threads_t x steps, vec, stages, blocks per SM."""
    return f"{p.carry} {p.threads_d}x{p.threads_t}x{p.steps} vec {p.vec} stages {p.stages} blocks {p.min_blocks}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="H100-SXM5-80GB,H200-SXM-141GB", help="two hwmodels names")
    parser.add_argument("--cells", default="linear")
    parser.add_argument("--shapes", type=common.parse_dims_list, default="8x1024x1536,8x4096x1536,8x16384x1536",
                        help="comma-separated BxTxD")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    names = args.models.split(",")
    if len(names) != 2:
        parser.error(f"--models takes two GPU model names, got {args.models!r}")
    models = {name: hwmodels.load(name) for name in names}
    common.require_cuda("scan_model_plans_ab")
    jobs = []
    for cell, dtype, direction, shape in itertools.product(args.cells.split(","), args.dtypes.split(","),
                                                           ("forward", "backward"), args.shapes):
        plans = {name: plan(ScanProblem.for_shape(cell, *shape, dtype, direction), gpu)
                 for name, gpu in models.items()}
        jobs.append((cell, dtype, direction, shape, plans))
    precompile([q.source() for *_, plans in jobs for q in plans.values()])
    rows = []
    for cell, dtype, direction, shape, plans in jobs:
        runs = scan_plan_runs.plan_runs(cell, direction, shape, getattr(torch, dtype), plans)
        diff = scan_plan_runs.largest_difference(runs)
        times = scan_plan_runs.alternating_us(runs, args.rounds)
        us = [times[name] for name in names]
        rows.append({"cell": cell, "dtype": dtype, "direction": direction, "shape": common.format_dims(shape),
                     **{f"{name} plan": describe(plans[name]) for name in names},
                     **{f"{name} us": round(t, 2) for name, t in zip(names, us)},
                     "ratio": round(us[1] / us[0], 4), "rel diff": f"{diff:.1e}"})
        print(rows[-1], flush=True)
    print(common.write_results("scan_model_plans_ab", rows, title=f"Scan plans of {names[0]} and {names[1]}",
                               notes=[f"Device time per call (us), median of {args.rounds} alternating rounds of "
                                      f"common.time_graph (10 calls per graph); ratio = {names[1]} / {names[0]}."]))


if __name__ == "__main__":
    main()
