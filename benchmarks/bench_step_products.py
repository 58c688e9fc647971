"""Tensor-core rate of one recurrent step's products, alone: mma.sync m16n8k16 (what the fused kernels use) against
wgmma m64n8k16 (sm_90a), both bf16 with fp32 accumulation on n = 8 batch columns.

Each warp (mma.sync) or warpgroup (wgmma) runs 6 accumulators x 4 gates of products per step, then a block barrier:
the 1 x 768 LSTM's per-step work of one warp (kernels/step_products.cu). 96 blocks, one per SM; the median over blocks
of clock cycles per step. The kernels are compiled with nvcc for the device (sm_90a on Hopper, where wgmma exists).
Results: results/step_products.md.
"""
from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from common import require_cuda, write_results

if TYPE_CHECKING:
    import cupy

SOURCE = Path(__file__).resolve().parent / "kernels" / "step_products.cu"
BLOCKS, STEPS = 96, 1024
PRODUCTS_PER_WARP = 6 * 4  # m16n8k16 products per warp and step
FMA_PER_PRODUCT = 16 * 8 * 16


def _module() -> tuple[cupy.RawModule, bool]:
    """The compiled kernels and whether step_wgmma is in them (Hopper, sm_90a)."""
    import cupy  # here, not at the top: main checks for a GPU first

    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    capability = cupy.cuda.Device().compute_capability  # e.g. "90"
    hopper = capability == "90"
    arch = "sm_90a" if hopper else f"sm_{capability}"
    cubin = Path(tempfile.mkdtemp()) / "step_products.cubin"
    subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-o", str(cubin), str(SOURCE)], check=True)
    return cupy.RawModule(path=str(cubin)), hopper


def cycles_per_step(kernel, threads: int) -> float:
    import cupy

    cycles = cupy.zeros(BLOCKS, dtype=cupy.uint64)
    sink = cupy.zeros(BLOCKS * threads, dtype=cupy.float32)
    kernel((BLOCKS,), (threads,), (cycles, cupy.int32(STEPS), sink))
    cupy.cuda.Device().synchronize()
    return statistics.median(int(c) for c in cycles.get()) / STEPS


def main() -> None:
    require_cuda("bench_step_products")
    module, hopper = _module()
    rows = []
    cases = [("mma.sync m16n8k16", "step_mma_sync", warps, 32 * warps) for warps in (4, 8, 12)]
    if hopper:
        cases += [("wgmma m64n8k16", "step_wgmma", 4 * groups, 128 * groups) for groups in (1, 2, 3)]
    for instruction, name, warps, threads in cases:
        cycles = cycles_per_step(module.get_function(name), threads)
        fma = warps * PRODUCTS_PER_WARP * FMA_PER_PRODUCT
        rows.append({"instruction": instruction, "warps per block": warps, "cycles per step": round(cycles, 1),
                     "FMA per clock per SM": round(fma / cycles)})
    print(write_results("step_products", rows, title="One step's tensor-core products, alone",
                        notes=[f"{BLOCKS} blocks (one per SM), {STEPS} steps; per warp and step 6 accumulators x 4 "
                               "gates of 16x8x16 bf16 products (fp32 accumulation), then a block barrier; median over "
                               "blocks of clock cycles per step."]))


if __name__ == "__main__":
    main()
