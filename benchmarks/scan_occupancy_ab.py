"""The minGRU / minLSTM kernels at one block per SM more than the solver's plan promises: the plan against the same
block shape compiled under __launch_bounds__(threads, min_blocks + 1) (`one_block_more`, where the SM holds that many
blocks), each launch timed as device time per call in a CUDA graph (common.time_graph), the two plans taking turns
over --rounds rounds in one process, on random inputs. Rows give both kernels' registers and local memory (ptxas'
spills show as local bytes) and the largest relative difference of their outputs: whether the register model
(scan/cost_model.py, REG_OVERHEAD) holds a kernel at fewer blocks per SM than it runs best at.

Usage: python benchmarks/scan_occupancy_ab.py [--rounds 3] [--shapes 1x65536x64,8x4096x1536]
Writes scan_occupancy_ab.{csv,md} to BENCH_RESULTS_DIR (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools

import hwmodels
import torch

import common
import scan_plan_runs
from flashrnn_kernels.runtime.compile import precompile
from flashrnn_kernels.scan import function
from flashrnn_kernels.scan.cost_model import register_cap
from flashrnn_kernels.scan.plan import ScanPlan

SHAPES = ((1, 65536, 64), (2, 32768, 128), (1, 65536, 256), (8, 4096, 1536), (64, 4096, 512))
CELLS = ("min_gru", "min_lstm")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
DIRECTIONS = ("forward", "backward")


def one_block_more(p: ScanPlan, gpu: hwmodels.GPUModel) -> ScanPlan | None:
    """`p` with min_blocks + 1 (and the register cap that gives), or None where the SM does not hold that many blocks
    at that cap (hwmodels.blocks_per_sm: blocks, warps, registers, shared memory) or the cap falls below 64."""
    blocks = p.min_blocks + 1
    cap = register_cap(gpu, p.threads, blocks)
    if cap < 64 or hwmodels.blocks_per_sm(gpu, p.threads, cap, p.smem_bytes + p.stage_bytes).blocks_per_sm < blocks:
        return None
    return dataclasses.replace(p, min_blocks=blocks, regs_estimate=cap)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", type=common.parse_dims_list, help="comma-separated BxTxD (default: SHAPES)")
    args = parser.parse_args()
    common.require_cuda("scan_occupancy_ab")
    shapes = args.shapes or SHAPES
    gpu = function._device_gpu(torch.cuda.current_device())
    jobs = []
    for cell, dtype, direction, shape in itertools.product(CELLS, DTYPES, DIRECTIONS, shapes):
        p = function.device_plan(cell, torch.empty(shape, device="cuda", dtype=dtype), direction)
        more = one_block_more(p, gpu)
        if more is not None:
            jobs.append((cell, dtype, direction, shape, {"solver": p, "one more": more}))
    precompile([q.source() for *_, plans in jobs for q in plans.values()])
    rows = []
    for cell, dtype, direction, shape, plans in jobs:
        runs = scan_plan_runs.plan_runs(cell, direction, shape, dtype, plans)
        diff = scan_plan_runs.largest_difference(runs)
        times = scan_plan_runs.alternating_us(runs, args.rounds)
        solver, more = times["solver"], times["one more"]
        kernels = {name: function._kernel(q, torch.cuda.current_device()) for name, q in plans.items()}
        rows.append({"cell": cell, "dtype": str(dtype)[6:], "direction": direction, "shape": common.format_dims(shape),
                     "carry": plans["solver"].carry, "threads": plans["solver"].threads,
                     "blocks per SM": f"{plans['solver'].min_blocks} -> {plans['one more'].min_blocks}",
                     "registers": f"{kernels['solver'].num_regs} -> {kernels['one more'].num_regs}",
                     "local bytes": f"{kernels['solver'].local_size_bytes} -> {kernels['one more'].local_size_bytes}",
                     "solver us": round(solver, 2), "one more us": round(more, 2), "ratio": round(more / solver, 4),
                     "rel diff": f"{diff:.1e}"})
        print(rows[-1], flush=True)
    print(common.write_results("scan_occupancy_ab", rows, title="minGRU / minLSTM kernels at one block per SM more",
                               notes=[f"Device time per call (us), median of {args.rounds} alternating rounds of "
                                      "common.time_graph (10 calls per graph); ratio = one more / solver. rel diff: "
                                      "largest relative difference of the outputs (h, or the gradients)."]))


if __name__ == "__main__":
    main()
