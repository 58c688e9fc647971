"""Where the blocks of a linear_scan forward + backward pair spend their time, in the pair's own context (a CUDA graph
of repeated pairs, so each forward follows a backward, as in `bench_scan.py`'s forward+backward rows).

A probe build of each planned kernel (the source patched here, not the shipped one) records `%globaltimer` on thread
(0, 0) of every block at five points: its start, its staged copies landed (that thread's last wait for a chunk's
cp.async copies: pass A's in the chained plans, pass B's where a resident segment stages its chunks again; held steps
load later, where the fold reads them), pass A folded (before its map is published), the look-back done (before its
final state is published), and its end; and the SM it ran on. After the graph's replays the stamps of its last pair
are read back and summarised per round of blocks (blocks in start order, one round per the GPU's resident slots): us
from the kernel's first block start, medians and maxima.

Usage: python benchmarks/scan_pair_stamps.py [--shapes 1x65536x64] [--dtypes fp32,bf16]
Writes scan_pair_stamps.{csv,md} to BENCH_RESULTS_DIR (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch

import common
from flashrnn_kernels.runtime.compile import load_module
from flashrnn_kernels.scan import linear_scan
from flashrnn_kernels.scan import function as scan_function
from flashrnn_kernels.scan.plan import ScanPlan
from scan_pair_timeline import DTYPES

POINTS = ("start", "staged copies landed", "pass A folded", "look-back done", "end")
STAMPS = len(POINTS) + 1  # per block: the points, then the SM
PATCHES = [  # (anchor in scan.cu, text inserted before it)
    ('extern "C" __global__', "__device__ unsigned long long scan_stamps[%d];\n" % (STAMPS * 65536)),
    ("    const int lane = blockIdx.x % lanes,",
     "    auto stamp = [&](int k) {\n"
     "        if (threadIdx.x == 0 && threadIdx.y == 0) {\n"
     "            unsigned long long g;\n"
     "            asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(g));\n"
     f"            scan_stamps[(size_t)blockIdx.x * {STAMPS} + k] = g;\n"
     "            if (k == 0) { unsigned sm; asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(sm));\n"
     f"                          scan_stamps[(size_t)blockIdx.x * {STAMPS} + {STAMPS - 1}] = sm; }}\n"
     "        }\n"
     "    };\n"
     "    stamp(0);\n"),
    ("        return (c - first) % SCAN_STAGES;\n", "        stamp(1);\n"),
    ("        const unsigned map_tag = 2u * launch_epoch", "        stamp(2);\n"),
    ("        // pass B\n", "        stamp(3);\n"),
    ("        if (counters != nullptr) count_launch(counters);", f"        stamp({len(POINTS) - 1});\n"),
]


SHIPPED_SOURCE = ScanPlan.source


def probe_source(plan: ScanPlan) -> str:
    """`plan`'s kernel source with the stamps (PATCHES)."""
    return common.probe_source(SHIPPED_SOURCE(plan), PATCHES)


def summary(name: str, stamps: np.ndarray, slots: int) -> list[dict]:
    """Rows per round of `slots` blocks in start order: us from the first start, median / max per point."""
    order = np.argsort(stamps[:, 0], kind="stable")
    t0 = stamps[:, 0].min()
    rows = []
    for first in range(0, len(order), slots):
        group = stamps[order[first:first + slots]]
        row = {"kernel": name, "blocks (by start)": f"{first}-{first + len(group) - 1}",
               "SMs": len(set(group[:, STAMPS - 1].tolist()))}
        for k, point in enumerate(POINTS):
            values = (group[:, k] - t0) * 1e-3
            row[f"{point} us"] = f"{statistics.median(values):.2f} / {values.max():.2f}"
        rows.append(row)
    span = (stamps[:, len(POINTS) - 1].max() - t0) * 1e-3
    rows.append({"kernel": name, "blocks (by start)": f"all {len(stamps)}", "end us": f"span {span:.2f}"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=common.parse_dims_list, default="1x65536x64")
    parser.add_argument("--dtypes", default="fp32,bf16")
    args = parser.parse_args()
    common.require_cuda("scan_pair_stamps")
    import cupy  # after the check: CPU machines have no CuPy
    ScanPlan.source = probe_source  # every scan kernel compiled from here on is the probe build
    scan_function._kernel.cache_clear()
    scan_function._launches.clear()
    rows = []
    slots_of = {}
    for shape in args.shapes:
        shape_text = common.format_dims(shape)
        for dname in args.dtypes.split(","):
            dtype = DTYPES[dname]
            a = (torch.rand(shape, device="cuda") * 0.5 + 0.5).to(dtype).requires_grad_()
            b = torch.randn(shape, device="cuda").to(dtype).requires_grad_()
            dy = torch.randn(shape, device="cuda").to(dtype)

            def pair():
                return torch.autograd.grad(linear_scan(a, b), (a, b), dy)

            pair_us = 1e3 * common.time_graph(pair, calls=10, repeat=5)
            B, T, D = shape
            for direction, paired in (("forward", True), ("backward", False)):
                plan = scan_function.device_plan("linear", a, direction, paired=paired)
                run = scan_function._launch_of(plan, B, T, D, a.element_size(), a.device.index)
                blocks = run.grid[0]
                pointer = load_module(probe_source(plan)).get_global("scan_stamps")
                table = cupy.ndarray((blocks * STAMPS,), dtype=cupy.uint64, memptr=pointer)
                stamps = cupy.asnumpy(table).reshape(blocks, STAMPS).astype(np.int64)
                slots = plan.min_blocks * torch.cuda.get_device_properties(0).multi_processor_count
                slots_of[direction] = slots
                label = (f"{shape_text} {dname} {direction}: {plan.carry} {plan.threads_d}x{plan.threads_t}x"
                         f"{plan.steps}, {blocks} blocks, {plan.min_blocks}/SM planned")
                rows += summary(label, stamps, slots)
            rows.append({"kernel": f"{shape_text} {dname} pair", "blocks (by start)": f"graph {pair_us:.2f} us"})
            print(rows[-1], flush=True)
    print(common.write_results("scan_pair_stamps", rows, title="linear_scan pairs: the blocks' clock stamps",
                               notes=["Probe build (stamps on thread (0, 0) of every block); the last pair of a CUDA "
                                      "graph of 10 pairs; us from the kernel's first block start, median / max over "
                                      "each round of blocks (rounds: blocks per SM planned x SMs, in start order). "
                                      "`graph`: the pair's device time in the probe build."]))


if __name__ == "__main__":
    main()
