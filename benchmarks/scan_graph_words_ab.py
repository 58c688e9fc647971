"""Split-lane scans in CUDA graphs: look-back words from a spare with the epochs made on the device, against words of
the launch's own zeroed by a captured memset in every replay (the fallback, and the path of the cells outside
`function.GRAPH_CELLS`, which this script sets to every cell or none).

Each problem is timed through the public API as `bench_scan.py` times it (`common.time_graph`: 10 calls in one
graph), forward alone and forward + backward through autograd, the two variants in alternating rounds; whether both
variants' outputs are bitwise equal is reported (a split lane's look-back agrees to rounding only).
Writes scan_graph_words_ab.{csv,md}.
"""

from __future__ import annotations

import argparse
import statistics

import torch

import common
from flashrnn_kernels.scan import function, linear_scan, min_gru_scan, min_lstm_scan

OPS = {"linear": (linear_scan, 2), "min_gru": (min_gru_scan, 2), "min_lstm": (min_lstm_scan, 3)}
PROBLEMS = [("linear", (1, 65536, 64), torch.float32), ("linear", (1, 65536, 64), torch.bfloat16),
            ("linear", (1, 16384, 64), torch.bfloat16), ("linear", (2, 16384, 128), torch.float32),
            ("min_gru", (1, 65536, 64), torch.float32), ("min_gru", (1, 65536, 64), torch.bfloat16),
            ("min_lstm", (1, 65536, 64), torch.bfloat16)]


SHIPPED = function.GRAPH_CELLS


def use_spares(on: bool) -> None:
    """Spares for the next captures of every cell, or none: every captured launch zeroes its own words."""
    function.GRAPH_CELLS = tuple(OPS) if on else ()


def inputs(name: str, shape: tuple[int, int, int], dtype: torch.dtype) -> list[torch.Tensor]:
    xs = [torch.randn(*shape, device="cuda") for _ in range(OPS[name][1])]
    if name == "linear":
        xs[0] = torch.rand(*shape, device="cuda") * 0.5 + 0.5
    return [x.to(dtype).requires_grad_() for x in xs]


def calls(name: str, xs: list[torch.Tensor]):
    op = OPS[name][0]
    dy = torch.randn_like(xs[0])

    def forward():
        with torch.no_grad():
            return op(*xs)

    def pair():
        h = op(*xs)
        return (h, *torch.autograd.grad(h, xs, dy))

    return forward, pair


def captured_outputs(fn) -> list[torch.Tensor]:
    """fn's outputs from a replay of its capture (after a warm-up, as time_graph does)."""
    fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    graph.replay()
    torch.cuda.synchronize()
    return [o.clone() for o in (out if isinstance(out, tuple) else (out,))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    common.require_cuda("scan_graph_words_ab")
    rows = []
    for name, shape, dtype in PROBLEMS:
        xs = inputs(name, shape, dtype)
        for call, fn in zip(("forward", "forward+backward"), calls(name, xs)):
            outputs = {}
            for on in (True, False):
                use_spares(on)
                outputs[on] = captured_outputs(fn)
            same = all(torch.equal(a, b) for a, b in zip(outputs[True], outputs[False]))
            times = {True: [], False: []}
            for r in range(args.rounds):
                for on in ((True, False) if r % 2 == 0 else (False, True)):
                    use_spares(on)
                    times[on].append(1000 * common.time_graph(fn, calls=10, repeat=7))
            spare, memset = (statistics.median(times[on]) for on in (True, False))
            rows.append({"cell": name, "shape": common.format_dims(shape), "dtype": str(dtype).split(".")[-1],
                         "call": call, "spare_us": round(spare, 2), "memset_us": round(memset, 2),
                         "ratio": round(spare / memset, 4), "outputs_equal": same})
            print(rows[-1], flush=True)
    function.GRAPH_CELLS = SHIPPED
    print(common.write_results("scan_graph_words_ab", rows, title="Look-back words in CUDA graphs: spares with the "
                               "device's epoch against a captured memset per launch", notes=[
                                   "us per call, median of alternating rounds of common.time_graph (10 calls per "
                                   "graph). spare: the capture takes a workspace zeroed by an eager call and its "
                                   "launches advance the epoch on the device; memset: no spare, each captured launch "
                                   "zeroes words of its own in every replay. outputs_equal: both variants' replayed "
                                   "outputs bitwise equal."]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
