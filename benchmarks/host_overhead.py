"""Host cost of one call: where the microseconds go between Python and the launch.

For a short scan (linear_scan [8, 256, 1536] fp32) and a fused LSTM forward (12 heads x 64, B=16, T=1024, bf16)
it reports the CUDA-event time of one call (what the benchmarks measure), the host time per call when calls are
only enqueued (no synchronisation), and the host time of the bare launch helper; then a cProfile of the
enqueue loop, sorted by own time. Results: results/host_overhead.md and host_overhead_profile.txt.
"""
from __future__ import annotations

import cProfile
import io
import pstats
import time

import torch
from common import machine_line, results_dir, time_cuda, write_results

from flashrnn_kernels import flashrnn, linear_scan

CALLS = 2000


def host_us(fn, calls: int = CALLS) -> float:
    """Microseconds of host time per call over `calls` enqueued calls (one synchronisation at the end)."""
    fn()
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - begin
    torch.cuda.synchronize()
    return host / calls * 1e6


def cases() -> dict:
    a = torch.rand(8, 256, 1536, device="cuda") * 0.5 + 0.5
    b = torch.randn(8, 256, 1536, device="cuda")
    B, T, NH, DH = 16, 1024, 12, 64
    Wx = torch.randn(B, T, 4, NH, DH, device="cuda", dtype=torch.bfloat16)
    R = (torch.randn(4, NH, DH, DH, device="cuda") / DH**0.5).to(torch.bfloat16)
    bias = torch.randn(4, NH, DH, device="cuda", dtype=torch.bfloat16) * 0.1
    empty = torch.empty(1, device="cuda")
    return {
        "linear_scan [8, 256, 1536] fp32": lambda: linear_scan(a, b),
        "fused LSTM 12x64 B=16 T=1024 bf16 forward": lambda: flashrnn(Wx, R, bias, backend="fused"),
        "torch.empty_like (reference point)": lambda: torch.empty_like(empty),
    }


def main() -> None:
    rows, profiles = [], []
    for name, fn in cases().items():
        event_ms = time_cuda(fn, warmup=20, repeat=200)
        per_call = host_us(fn)
        rows.append({"call": name, "event ms (one call)": event_ms, "host us per call (enqueue only)": per_call})
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(200):
            fn()
        profiler.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
        profiles.append(f"## {name}\n{text.getvalue()}")
    print(write_results("host_overhead", rows, title="Host cost per call",
                        notes=[machine_line(), f"host time: {CALLS} enqueued calls, one synchronisation"]))
    (results_dir() / "host_overhead_profile.txt").write_text("\n".join(profiles))
    print("\n".join(profiles))


if __name__ == "__main__":
    main()
