"""Where a linear_scan forward + backward pair's device time goes: the kernels of CUDA graphs of repeated pairs (the
graph that `bench_scan.py` times), traced by the PyTorch profiler (CUPTI records each kernel of a replayed graph),
beside accelerated-scan's warp kernel and a pair of elementwise kernels that move the same bytes (the floor).

Per implementation and problem: the median over the pairs of one replay of each kernel's duration, of the gaps
between consecutive kernels (forward -> backward, backward -> the next pair's forward), and of the pair's period (one
forward's start to the next one's), beside the pair's device time from `common.time_graph`. Our kernels run through
the public linear_scan; accelerated-scan's warp kernel (where importable) in its own [B, D, T] layout. Random inputs,
decays in (0.5, 1).

Usage: python benchmarks/scan_pair_timeline.py [--shapes 1x65536x64] [--dtypes fp32,bf16] [--pairs 10]
Writes scan_pair_timeline.{csv,md} to BENCH_RESULTS_DIR (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import importlib
import statistics

import torch
from torch.profiler import ProfilerActivity, profile

import common
from flashrnn_kernels.scan import linear_scan

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _elementwise_pair():
    """An op with the scan's traffic and none of its dependences, one Triton kernel per direction: forward reads a
    and b and writes h (a * 0.5 + b); backward reads a, dL/dh and h and writes two gradients (dL/dh * h, dL/dh * a)."""
    import triton
    import triton.language as tl

    @triton.jit
    def forward_kernel(a, b, h, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        keep = i < n
        tl.store(h + i, tl.load(a + i, mask=keep) * 0.5 + tl.load(b + i, mask=keep), mask=keep)

    @triton.jit
    def backward_kernel(a, g, h, da, db, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        keep = i < n
        dh = tl.load(g + i, mask=keep)
        tl.store(da + i, dh * tl.load(h + i, mask=keep), mask=keep)
        tl.store(db + i, dh * tl.load(a + i, mask=keep), mask=keep)

    block = 4096

    class Pair(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            h = torch.empty_like(a)
            forward_kernel[(triton.cdiv(a.numel(), block),)](a, b, h, a.numel(), BLOCK=block)
            ctx.save_for_backward(a, h)
            return h

        @staticmethod
        def backward(ctx, g):
            a, h = ctx.saved_tensors
            da, db = torch.empty_like(a), torch.empty_like(a)
            backward_kernel[(triton.cdiv(a.numel(), block),)](a, g.contiguous(), h, da, db, a.numel(), BLOCK=block)
            return da, db

    return Pair.apply


def _implementations() -> dict:
    """name -> (scan(a, b), whether it takes [B, D, T]); accelerated-scan's warp kernel where it imports, and the
    elementwise pair (the floor) where Triton does."""
    found = {"ours": (linear_scan, False)}
    try:
        found["elementwise floor"] = (_elementwise_pair(), False)
    except Exception as exc:  # noqa: BLE001 - no Triton: its rows are left out
        print(f"elementwise floor: {type(exc).__name__}: {exc}")
    try:
        found["accelerated-scan warp"] = (importlib.import_module("accelerated_scan.warp").scan, True)
    except Exception as exc:  # noqa: BLE001 - a missing package or a failed build: its rows are left out
        print(f"accelerated-scan warp: {type(exc).__name__}: {exc}")
    return found


def _kernels(prof) -> list[tuple[str, int, int]]:
    """(name, start ns, end ns) of every GPU kernel the profiler recorded, in start order."""
    found = []
    for event in prof.profiler.kineto_results.events():
        if event.device_type() == torch.autograd.DeviceType.CUDA and "memcpy" not in event.name().lower() \
                and "memset" not in event.name().lower():
            found.append((event.name(), event.start_ns(), event.start_ns() + event.duration_ns()))
    return sorted(found, key=lambda k: k[1])


def pair_graph(scan, a, b, dy, pairs: int):
    """(a CUDA graph of `pairs` forward + backward pairs of `scan` (torch.autograd.grad with dL/dh `dy`), one pair as a
    function), after three eager pairs."""
    def pair():
        return torch.autograd.grad(scan(a, b), (a, b), dy)

    for _ in range(3):
        pair()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(pairs):
            pair()
    return graph, pair


def timeline(scan, a, b, dy, pairs: int) -> dict:
    """The pair's kernels in one replay of a graph of `pairs` pairs (medians over the pairs, us)."""
    graph, pair = pair_graph(scan, a, b, dy, pairs)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = _kernels(prof)
    per_pair = len(kernels) // pairs
    if per_pair * pairs != len(kernels) or per_pair < 2:
        raise RuntimeError(f"expected {pairs} pairs of kernels, got {len(kernels)}: {[k[0] for k in kernels[:8]]}")
    names = [k[0][:40] for k in kernels[:per_pair]]
    firsts = [kernels[i * per_pair] for i in range(pairs)]
    lasts = [kernels[i * per_pair + per_pair - 1] for i in range(pairs)]
    us = 1e-3
    row = {"kernels per pair": per_pair, "names": " / ".join(names),
           "forward kernel us": statistics.median((k[2] - k[1]) * us for k in firsts),
           "backward kernel us": statistics.median((k[2] - k[1]) * us for k in lasts),
           "gap forward -> backward us": statistics.median(
               (kernels[i * per_pair + 1][1] - kernels[i * per_pair][2]) * us for i in range(pairs)),
           "gap backward -> forward us": statistics.median(
               (firsts[i + 1][1] - lasts[i][2]) * us for i in range(pairs - 1)),
           "period us": statistics.median((firsts[i + 1][1] - firsts[i][1]) * us for i in range(pairs - 1))}
    row["graph us per pair"] = 1e3 * common.time_graph(pair, calls=pairs, repeat=5)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=common.parse_dims_list, default="1x65536x64,8x4096x1536")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--pairs", type=int, default=10)
    args = parser.parse_args()
    common.require_cuda("scan_pair_timeline")
    rows = []
    for shape in args.shapes:
        shape_text = common.format_dims(shape)
        for dname in args.dtypes.split(","):
            dtype = DTYPES[dname]
            a = (torch.rand(shape, device="cuda") * 0.5 + 0.5).to(dtype)
            b, dy = (torch.randn(shape, device="cuda").to(dtype) for _ in range(2))
            for name, (scan, transposed) in _implementations().items():
                if transposed and dtype != torch.float32:
                    continue  # its bf16 kernel faulted at the thin shape (results/scan.md)
                x, y, g = ((t.transpose(1, 2).contiguous() for t in (a, b, dy)) if transposed else (a, b, dy))
                x, y = x.detach().requires_grad_(), y.detach().requires_grad_()
                try:
                    found = timeline(scan, x, y, g, args.pairs)
                except Exception as exc:  # noqa: BLE001 - one implementation's failure is its row
                    found = {"error": f"{type(exc).__name__}: {exc}"[:200]}
                rows.append({"impl": name, "shape": shape_text, "dtype": dname, **found})
                print(rows[-1], flush=True)
    print(common.write_results("scan_pair_timeline", rows, title="linear_scan forward + backward pairs: the kernels "
                               "of a CUDA graph", notes=[
                                   f"One replay of a graph of {args.pairs} pairs (torch.autograd.grad of the scan "
                                   "with a given dL/dh) under the PyTorch profiler; medians over its pairs, us. "
                                   "`graph us per pair`: common.time_graph of the same pairs, without the profiler."]))


if __name__ == "__main__":
    main()
