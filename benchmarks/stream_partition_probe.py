"""How the split of [B, T, D] lanes over blocks sets a streaming kernel's bandwidth: out = a + b in fp32 over
[8, T, 1536] with the whole-lane scan's access pattern (blocks of 16 x 4 threads, a 64-channel lane of 256-byte
rows, chunks of 4 x STEPS steps staged by cp.async STAGES - 1 chunks ahead, as the solver's whole-lane fp32 plan:
4 steps, 4 stages), the lanes split over the blocks three ways:
- `lanes`: one block per lane (the scan's whole-lane plans: 192 blocks at D = 1536);
- `balanced P`: P blocks, each a contiguous run of the lane-major sequence of 64-step chunks (every block the same
  number of chunks, give or take one; a run may end inside a lane and the next block continue it);
- torch's own a + b, and a device-to-device copy of 2 GiB for the bandwidth reference.
Median of 20 launches (CUDA events) after 5 warm-up launches, best of 3 such medians. Checks every output.

Writes stream_partition_probe.{csv,md} to BENCH_RESULTS_DIR (default benchmarks/results).
"""
from __future__ import annotations

import argparse

import torch

import common

SOURCE = r"""
// Each thread streams its own 16-byte pieces through shared memory with cp.async, STAGES - 1 chunks ahead, and reads
// back only what it copied (no block barrier), as the whole-lane scan does.
__device__ __forceinline__ void copy16(void* dst, const void* src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
}

extern "C" __global__ void __launch_bounds__(64) add_lanes(const float4* a, const float4* b, float4* out,
                                                          int T, int lanes_per_row, long long total_chunks) {
    // lane = (batch row, 64-channel tile); chunk = 4 * STEPS steps of one lane (thread row ty: steps ty * STEPS ..);
    // block i of P takes the contiguous run [i * total / P, (i + 1) * total / P) of the lane-major chunk sequence
    // (P = lanes: one lane per block)
    __shared__ float4 stage[STAGES][2][STEPS][64];
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int chunks_per_lane = T / (4 * STEPS), d4 = lanes_per_row * 16;  // float4s per step
    const long long begin = blockIdx.x * total_chunks / gridDim.x, end = (blockIdx.x + 1) * total_chunks / gridDim.x;
    auto base_of = [&](long long c) {
        const long long lane = c / chunks_per_lane;
        const int chunk = (int)(c - lane * chunks_per_lane);
        const int row = (int)(lane / lanes_per_row), tile = (int)(lane - (long long)row * lanes_per_row);
        return ((long long)row * T + chunk * 4 * STEPS + ty * STEPS) * d4 + tile * 16 + tx;
    };
    auto issue = [&](long long c) {
        if (c < end) {
            const long long base = base_of(c);
            float4 (*st)[STEPS][64] = stage[c % STAGES];
#pragma unroll
            for (int i = 0; i < STEPS; ++i) {
                copy16(&st[0][i][threadIdx.x], a + base + (long long)i * d4);
                copy16(&st[1][i][threadIdx.x], b + base + (long long)i * d4);
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    for (int s = 0; s < STAGES - 1; ++s) issue(begin + s);
    for (long long c = begin; c < end; ++c) {
        issue(c + STAGES - 1);
        asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 1) : "memory");
        const long long base = base_of(c);
        float4 (*st)[STEPS][64] = stage[c % STAGES];
#pragma unroll
        for (int i = 0; i < STEPS; ++i) {
            const float4 x = st[0][i][threadIdx.x], y = st[1][i][threadIdx.x];
            out[base + (long long)i * d4] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
        }
    }
}
"""


def _best_median(fn, rounds: int = 3) -> float:
    return min(common.time_cuda(fn, warmup=5, repeat=20) for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--steps", type=int, default=4, help="steps per thread and chunk")
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--blocks", type=int, nargs="+", default=[132, 264, 396])
    args = parser.parse_args()
    common.require_cuda("stream_partition_probe")
    import cupy  # after the check: CPU machines have no CuPy
    options = (f"-DSTEPS={args.steps}", f"-DSTAGES={args.stages}")
    kernel = cupy.RawModule(code=SOURCE, options=options).get_function("add_lanes")
    big = torch.empty(2**29, device="cuda")
    big_out = torch.empty_like(big)
    copy_ms = _best_median(lambda: big_out.copy_(big))
    copy_tbs = 2 * big.numel() * 4 / copy_ms / 1e9
    rows = []
    for T in args.seq:
        B, D = 8, 1536
        a, b = torch.randn(B, T, D, device="cuda"), torch.randn(B, T, D, device="cuda")
        out = torch.empty_like(a)
        expected = a + b
        lanes_per_row = D // 64
        lanes = B * lanes_per_row
        total = lanes * (T // (4 * args.steps))
        stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream())

        def launcher(grid: int):
            def launch():
                kernel((grid,), (64,), (a.data_ptr(), b.data_ptr(), out.data_ptr(), cupy.int32(T),
                                        cupy.int32(lanes_per_row), cupy.int64(total)), stream=stream)
            return launch

        variants = {f"lanes ({lanes} blocks)": launcher(lanes)}
        for p in args.blocks:
            variants[f"balanced {p}"] = launcher(p)
        variants["torch a + b"] = lambda: torch.add(a, b, out=out)
        for name, fn in variants.items():
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            if not torch.equal(out, expected):
                raise AssertionError(f"{name}: wrong output at T={T}")
            ms = _best_median(fn)
            tbs = 3 * a.numel() * 4 / ms / 1e9
            rows.append({"T": T, "split": name, "ms": ms, "TB/s": tbs, "% of copy": 100 * tbs / copy_tbs})
    print(common.write_results("stream_partition_probe", rows, title="Streaming a + b over [8, T, 1536] fp32: the "
                               "split of lanes over blocks",
                               notes=[f"Copy of 2 GiB in this run: {copy_tbs:.3f} TB/s. Chunks of {4 * args.steps} "
                                      f"steps ({args.steps} per thread), {args.stages} stages."]))


if __name__ == "__main__":
    main()
