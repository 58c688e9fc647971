"""How fast one SM pulls a stream from DRAM, by copy engine: per-thread 16-byte cp.async into shared memory (the scan
kernels' staging), bulk copies (cp.async.bulk, the TMA engine: one thread issues whole chunks) and plain 16-byte
loads into registers. N blocks, one per SM (their shared memory keeps a second one off), each stream a contiguous
region of its own (`--mb-per-block`) in chunks of `--chunk-kb`, `--stages` chunks in flight; optionally every block
also writes a chunk's worth per chunk read (`--write-ratio`, like the scan's forward writing one array per two read).
Reports the aggregate and per-SM rate (median of CUDA-event timings) for N from a few SMs to all of them.

Usage: python benchmarks/load_engines_probe.py [--chunk-kb 32] [--stages 4] [--mb-per-block 1]
Writes load_engines_probe.{csv,md} to BENCH_RESULTS_DIR (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

import common

SOURCE = Path(__file__).resolve().parent / "kernels" / "load_engines.cu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunk-kb", type=int, default=32)
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--mb-per-block", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=256)
    parser.add_argument("--write-ratio", default="0,2", help="comma-separated: 0 no writes; w: one chunk written "
                        "per w read")
    args = parser.parse_args()
    common.require_cuda("load_engines_probe")
    import cupy  # after the check: CPU machines have no CuPy
    if args.stages < 1:
        parser.error(f"--stages must be at least 1, got {args.stages}")
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    chunk = args.chunk_kb * 1024
    if chunk * args.stages > props.shared_memory_per_block_optin:
        parser.error(f"{args.stages} chunks of {args.chunk_kb} KB exceed a block's shared memory "
                     f"({props.shared_memory_per_block_optin // 1024} KB): fewer --stages or a smaller --chunk-kb")
    per_block = int(args.mb_per_block * 2**20) // chunk * chunk
    module = cupy.RawModule(code=f"#define STAGES {args.stages}\n" + SOURCE.read_text(), options=("-std=c++17",),
                            backend="nvrtc")
    src = torch.randint(-2**31, 2**31 - 1, (sms * per_block // 4,), dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    flush = torch.rand(64 * 2**20, device="cuda")  # 256 MB, read (not written) to clear the L2
    # one block per SM: more shared memory than half an SM's
    smem = max(chunk * args.stages, props.shared_memory_per_multiprocessor // 2 + 1024)
    rows = []
    for name in ("per_thread", "bulk", "registers"):
        kernel = module.get_function(name)
        dyn = smem if name != "registers" else 0
        if dyn:
            kernel.max_dynamic_shared_size_bytes = dyn
        for writes in (int(w) for w in args.write_ratio.split(",")):
            for blocks in sorted({max(1, sms // 8), sms // 4, sms // 2, 3 * sms // 4, sms}):
                times = []
                for _ in range(7):
                    flush.sum()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    kernel((blocks,), (args.threads if name != "registers" else 512,),
                           (src.data_ptr(), dst.data_ptr(), cupy.int64(per_block), cupy.int32(chunk),
                            cupy.int32(writes)), shared_mem=dyn)
                    end.record()
                    torch.cuda.synchronize()
                    times.append(start.elapsed_time(end))
                ms = statistics.median(times[2:])
                moved = blocks * per_block * (1 + (1 / writes if writes else 0))
                rows.append({"engine": name, "writes per read": f"1/{writes}" if writes else "0", "SMs": blocks,
                             "us": ms * 1e3, "TB/s": moved / ms / 1e9, "GB/s per SM": moved / ms / 1e6 / blocks})
                print(rows[-1], flush=True)
    print(common.write_results(
        "load_engines_probe", rows, title="Streaming DRAM reads per SM: cp.async per thread, bulk copies, plain loads",
        notes=[f"One block per SM ({args.threads} threads; 512 for plain loads), each reading its own "
               f"{per_block / 2**20:.2f} MB in chunks of {args.chunk_kb} KB, {args.stages} chunks in flight; L2 "
               "flushed before each run; median of 5 timed runs. TB/s counts bytes read and written."]))


if __name__ == "__main__":
    main()
