"""Host cost of one call: where the microseconds go between Python and the launch.

For a short scan (linear_scan [8, 256, 1536] fp32) and a fused LSTM forward (12 heads x 64, B=16, T=1024, bf16) it
reports the CUDA-event time of one call (what the benchmarks measure), the device time of its kernels (torch
profiler), and the host time of one call made on an idle GPU (so that a full launch queue cannot block it); the scan's
launch and its eager forward+backward also as programmatic dependent launches (cuLaunchKernelEx) against plain ones
(cuLaunchKernel); its forward+backward with the backward on the calling thread instead of autograd's device thread,
the launcher's two launches without autograd, autograd over torch's own a * b and accelerated-scan's warp kernel on
the same problem as reference points; then a cProfile of calls on an idle GPU (backwards on the calling thread, so
that it sees them), sorted by own time. Results: results/host_overhead.md and
host_overhead_profile.txt.
"""
from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time

import torch
from common import machine_line, require_cuda, results_dir, time_cuda, write_results

from flashrnn_kernels import flashrnn, linear_scan
from flashrnn_kernels.runtime import launch as launch_module
from flashrnn_kernels.runtime.launch import launch
from flashrnn_kernels.scan import function as scan_function
from flashrnn_kernels.scan.function import run_scan

CALLS = 200


def host_us(fn, calls: int = CALLS) -> float:
    """Median microseconds of host time of one call, each made after a synchronisation (idle GPU)."""
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        begin = time.perf_counter()
        fn()
        times.append((time.perf_counter() - begin) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def device_us(fn, calls: int = 50) -> float:
    """Microseconds of kernel time per call on the device (torch profiler, every kernel of the call)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in prof.key_averages() if e.device_time_total > 0 and e.count > 0
                and not e.key.startswith("ProfilerStep"))
    return total / calls


def plain_launches(fn):
    """`fn` with programmatic dependent launches turned off on the current device (every launch a plain one)."""
    index = torch.cuda.current_device()

    def call():
        launch_module._programmatic_available(index)
        kept = launch_module._programmatic_devices[index]
        launch_module._programmatic_devices[index] = False
        try:
            return fn()
        finally:
            launch_module._programmatic_devices[index] = kept
    return call


def one_thread(fn):
    """`fn` with autograd's backward run on the calling thread (torch.autograd.set_multithreading_enabled(False)), not
    handed to its device thread; the profile below then sees the backward's Python."""
    def call():
        with torch.autograd.set_multithreading_enabled(False):
            return fn()
    return call


def accelerated_scan_pair(a: torch.Tensor, b: torch.Tensor, dy: torch.Tensor) -> dict:
    """accelerated-scan 0.3.1's warp kernel, forward+backward on the same values in its [B, D, T] layout, where the
    package is importable (none otherwise)."""
    try:
        from accelerated_scan.warp import scan
    except ImportError:
        return {}
    gates, tokens = (t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (a, b))
    grad = dy.transpose(1, 2).contiguous()
    return {"accelerated-scan warp forward+backward (same problem)": lambda: torch.autograd.grad(
        scan(gates, tokens), (gates, tokens), grad)}


def scan_launch(*args, **kwargs) -> tuple[tuple, dict]:
    """The positional and keyword arguments of the launch() that run_scan(*args, **kwargs) makes (made here once,
    then not launched), so that the launch cases below pass the kernel exactly what the launcher does."""
    made = []
    kept = scan_function.launch
    scan_function.launch = lambda *a, **k: made.append((a, k))
    try:
        run_scan(*args, **kwargs)
    finally:
        scan_function.launch = kept
    (found,) = made
    return found


def cases() -> dict:
    a = torch.rand(8, 256, 1536, device="cuda") * 0.5 + 0.5
    b = torch.randn(8, 256, 1536, device="cuda")
    a_grad, b_grad, dy = a.clone().requires_grad_(), b.clone().requires_grad_(), torch.randn_like(b)
    B, T, NH, DH = 16, 1024, 12, 64
    Wx = torch.randn(B, T, 4, NH, DH, device="cuda", dtype=torch.bfloat16)
    R = (torch.randn(4, NH, DH, DH, device="cuda") / DH**0.5).to(torch.bfloat16)
    bias = torch.randn(4, NH, DH, device="cuda", dtype=torch.bfloat16) * 0.1
    empty = torch.empty(1, device="cuda")
    (kernel, grid, block, args), options = scan_launch("linear", "forward", (a, b), None)
    options = {**options, "programmatic": False}
    epochs = iter(range(1, 1 << 31))  # a fresh epoch per launch, as the workspace gives (the last argument)
    return {
        "linear_scan [8, 256, 1536] fp32": lambda: linear_scan(a, b),
        "run_scan (launcher, no checks or op)": lambda: run_scan("linear", "forward", (a, b), None),
        "launch() (driver call)": lambda: launch(kernel, grid, block, (*args[:-1], next(epochs)), **options),
        "launch() programmatic (cuLaunchKernelEx)": lambda: launch(kernel, grid, block, (*args[:-1], next(epochs)),
                                                                   **{**options, "programmatic": True}),
        "linear_scan forward+backward (programmatic backward)": lambda: torch.autograd.grad(
            linear_scan(a_grad, b_grad), (a_grad, b_grad), dy),
        "linear_scan forward+backward (plain launches)": plain_launches(lambda: torch.autograd.grad(
            linear_scan(a_grad, b_grad), (a_grad, b_grad), dy)),
        "linear_scan forward+backward, backward on the calling thread": one_thread(lambda: torch.autograd.grad(
            linear_scan(a_grad, b_grad), (a_grad, b_grad), dy)),
        "run_scan forward + backward (launcher, no autograd)": lambda: run_scan(
            "linear", "backward", (a, b), None, dy, run_scan("linear", "forward", (a, b), None)[0]),
        "autograd.grad of a * b (torch's own op, reference point)": lambda: torch.autograd.grad(
            a_grad * b_grad, (a_grad, b_grad), dy),
        **accelerated_scan_pair(a_grad, b_grad, dy),
        "fused LSTM 12x64 B=16 T=1024 bf16 forward": lambda: flashrnn(Wx, R, bias, backend="fused"),
        "torch.empty_like (reference point)": lambda: torch.empty_like(empty),
    }


def main() -> None:
    require_cuda("host_overhead")
    rows, profiles = [], []
    for name, fn in cases().items():
        event_ms = time_cuda(fn, warmup=20, repeat=200)
        rows.append({"call": name, "event ms (one call)": event_ms, "kernel us per call": device_us(fn),
                     "host us per call (idle GPU)": host_us(fn)})
        profiler, profiled = cProfile.Profile(), one_thread(fn)  # the backward's Python on this thread too
        for _ in range(CALLS):
            torch.cuda.synchronize()
            profiler.enable()
            profiled()
            profiler.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
        profiles.append(f"## {name}\n{text.getvalue()}")
    print(write_results("host_overhead", rows, title="Host cost per call",
                        notes=[machine_line(), f"host time: median of {CALLS} calls, each after a synchronisation"]))
    (results_dir() / "host_overhead_profile.txt").write_text("\n".join(profiles))
    print("\n".join(profiles))


if __name__ == "__main__":
    main()
