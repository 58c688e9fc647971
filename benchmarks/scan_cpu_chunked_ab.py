"""The scan ops on a CPU: the chunked scan (scan.reference.linear_scan_chunked, the kernels' three passes in about
2 sqrt(2 T) steps) against the step loop the CPU path ran before (T steps; the backward's reverse scan on flipped
copies). Each problem through the public API, forward under no_grad and forward + backward through autograd, on
random inputs (decays in (0.5, 1)), both forms in alternating rounds in one process: median milliseconds of the
calls after one warm-up, and the largest relative difference between the two forms' outputs and gradients.
Writes scan_cpu_chunked_ab.{csv,md} to BENCH_RESULTS_DIR (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch

import common
from flashrnn_kernels import library, linear_scan
from flashrnn_kernels.scan import min_gru_scan
from flashrnn_kernels.scan import reference

SHAPES = [(1, 65536, 64), (8, 4096, 1536), (16, 1024, 256), (4, 256, 64), (2, 64, 8), (2, 8, 8)]
OPS = {"linear_scan": (linear_scan, 2), "min_gru": (min_gru_scan, 2)}


def _loop_scan(cell, inputs, h0=None):
    return library.SCAN_LOOPS[cell](*inputs, h0)


def _loop_chunked(a, b, h0=None, chunk_len=None, reverse=False):
    if reverse:
        return reference.linear_scan_loop(a.flip(1), b.flip(1), h0).flip(1)
    return reference.linear_scan_loop(a, b, h0)


@contextlib.contextmanager
def step_loop():
    """The CPU ops as they were: the step loop forward, and in the backward's reverse scan."""
    saved = reference.cell_scan, reference.linear_scan_chunked
    reference.cell_scan, reference.linear_scan_chunked = _loop_scan, _loop_chunked
    try:
        yield
    finally:
        reference.cell_scan, reference.linear_scan_chunked = saved


def _inputs(op, shape, dtype):
    n = OPS[op][1]
    first = torch.rand(*shape) * 0.5 + 0.5 if op == "linear_scan" else torch.randn(*shape)
    return [t.to(dtype).requires_grad_() for t in [first] + [torch.randn(*shape) for _ in range(n - 1)]]


def _calls(op, inputs, dy):
    fn = OPS[op][0]

    def forward():
        with torch.no_grad():
            return (fn(*inputs),)

    def pair():
        h = fn(*inputs)
        return (h, *torch.autograd.grad(h, inputs, dy))

    return {"forward": forward, "forward+backward": pair}


def _relative(got, want):
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def _ms(fn, repeat):
    times = []
    for _ in range(repeat):
        begin = time.perf_counter()
        fn()
        times.append((time.perf_counter() - begin) * 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for op in OPS:
        for dtype in (torch.float32, torch.bfloat16):
            for shape in SHAPES:
                torch.manual_seed(0)
                inputs = _inputs(op, shape, dtype)
                dy = torch.randn(*shape).to(dtype)
                big = shape[0] * shape[1] * shape[2] > 1e6
                repeat = 2 if big else 5
                for pass_, call in _calls(op, inputs, dy).items():
                    with step_loop():
                        loop_out = call()
                    chunked_out = call()  # warm-ups, and the two forms' results
                    diff = max(_relative(c, l) for c, l in zip(chunked_out, loop_out))
                    times = {"loop": [], "chunked": []}
                    for _ in range(args.rounds):
                        with step_loop():
                            times["loop"] += _ms(call, repeat)
                        times["chunked"] += _ms(call, repeat)
                    loop_ms, chunked_ms = (statistics.median(times[k]) for k in ("loop", "chunked"))
                    rows.append({"op": op, "dtype": str(dtype).removeprefix("torch."),
                                 "shape": common.format_dims(shape), "pass": pass_, "loop ms": loop_ms,
                                 "chunked ms": chunked_ms, "speedup": loop_ms / chunked_ms,
                                 "max rel diff": diff})
                    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                   for k, v in rows[-1].items()), flush=True)
    common.write_results("scan_cpu_chunked_ab", rows, title=f"CPU scan: chunked against the step loop "
                         f"({args.threads} threads)", notes=[__doc__.replace("\n", " ").strip()])


if __name__ == "__main__":
    main()
