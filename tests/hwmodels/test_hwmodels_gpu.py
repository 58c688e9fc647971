"""On a real GPU: detect() matches the GPU's file, and the occupancy calculator agrees with the driver's
cuOccupancyMaxActiveBlocksPerMultiprocessor for real compiled kernels."""
from __future__ import annotations

import ctypes

import pytest

import hwmodels

pytestmark = pytest.mark.gpu

# CUfunction_attribute values
NUM_REGS, SHARED_SIZE_BYTES, MAX_DYNAMIC_SHARED_SIZE_BYTES = 4, 1, 8

SOURCE = r"""
extern "C" __global__ void busy(const float* __restrict__ x, float* __restrict__ y, int n) {
    extern __shared__ float dynamic_smem[];
    __shared__ float static_smem[STATIC_FLOATS];
    float acc[ACC];
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = x[(threadIdx.x * ACC + i) % n];
    for (int it = 0; it < n; ++it) {
#pragma unroll
        for (int i = 0; i < ACC; ++i) acc[i] = fmaf(acc[i], acc[(i + 1) % ACC], x[(it + i) % n]);
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < ACC; ++i) s += acc[i];
    static_smem[threadIdx.x % STATIC_FLOATS] = s;
    dynamic_smem[threadIdx.x] = s;
    __syncthreads();
    y[blockIdx.x * blockDim.x + threadIdx.x] =
        dynamic_smem[(threadIdx.x + 1) % blockDim.x] + static_smem[(threadIdx.x + 3) % STATIC_FLOATS];
}
"""
# (accumulators, static shared floats, extra options): register counts from a few to 255
VARIANTS = [(2, 1, ()), (16, 100, ()), (24, 10, ("--maxrregcount=40",)), (48, 1000, ()),
            (96, 4, ("--maxrregcount=168",)), (200, 64, ())]
BLOCK_SIZES = list(range(32, 1025, 32)) + [1, 33, 100, 1000]
DYNAMIC_SMEM = [0, 1, 1000, 4096, 19460, 32276, 40000, 49152, 50000, 65536, 77777, 100000, 116000, 150000]


def _driver_blocks(cupy, func_ptr: int, block: int, dynamic: int) -> int:
    """Blocks per SM from the CUDA driver (CuPy's wrapper, or libcuda directly).
    A configuration the driver refuses outright (an error rather than a count) counts as 0 blocks."""
    occupancy = getattr(cupy.cuda.driver, "occupancyMaxActiveBlocksPerMultiprocessor", None)
    if occupancy is not None:
        try:
            return occupancy(func_ptr, block, dynamic)
        except cupy.cuda.driver.CUDADriverError:
            return 0
    libcuda = ctypes.CDLL("libcuda.so.1")
    blocks = ctypes.c_int()
    status = libcuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        ctypes.byref(blocks), ctypes.c_void_p(func_ptr), ctypes.c_int(block), ctypes.c_size_t(dynamic))
    return blocks.value if status == 0 else 0


def test_detect_matches_the_gpus_file():
    report = hwmodels.detect_report(0)
    assert report.matched_file is not None, report.describe()
    assert report.mismatches == (), report.describe()
    if report.live_name == "NVIDIA H200":
        assert report.matched_file == "H200-SXM-141GB"


def test_occupancy_agrees_with_the_driver():
    import cupy

    gpu = hwmodels.detect()
    driver = cupy.cuda.driver
    disagreements, compared, register_counts = [], 0, []
    for acc, static_floats, options in VARIANTS:
        module = cupy.RawModule(code=SOURCE, options=(f"-DACC={acc}", f"-DSTATIC_FLOATS={static_floats}",
                                                      *options))
        kernel = module.get_function("busy")
        ptr = getattr(kernel, "kernel", kernel).ptr
        regs = driver.funcGetAttribute(NUM_REGS, ptr)
        static = driver.funcGetAttribute(SHARED_SIZE_BYTES, ptr)
        assert static >= 4 * static_floats
        driver.funcSetAttribute(ptr, MAX_DYNAMIC_SHARED_SIZE_BYTES, gpu.smem_per_block_optin - static)
        register_counts.append(regs)
        for dynamic in DYNAMIC_SMEM + [gpu.smem_per_block_optin - static]:
            if static + dynamic > gpu.smem_per_block_optin:
                continue
            for block in BLOCK_SIZES:
                expected = _driver_blocks(cupy, ptr, block, dynamic)
                try:
                    ours = hwmodels.blocks_per_sm(gpu, block, regs, static + dynamic).blocks_per_sm
                except hwmodels.LaunchConfigError:
                    ours = 0
                compared += 1
                if ours != expected:
                    disagreements.append((regs, block, static + dynamic, ours, expected))
    assert len(set(register_counts)) >= 4, f"kernels should span register counts, got {register_counts}"
    assert max(register_counts) >= 128, register_counts
    assert not disagreements, (f"{len(disagreements)} of {compared} disagree (regs, threads, smem, ours, "
                               f"driver): {disagreements[:25]}")
