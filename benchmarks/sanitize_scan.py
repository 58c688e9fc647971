"""Small multi-chunk scans (linear, minGRU, minLSTM; forward + backward) for compute-sanitizer, in each carry mode.

[B, T, D] = [3, 1000, 96] in bf16 and fp32 with h0: odd batch, a length of many chunks that is not a multiple of the
chunk, a hidden size that leaves a partial tile; each is run with the best plan of every carry mode (whole lanes;
resident segments and chained one-chunk segments, both with the look-back; resident segments of several chunks, a
chained forward holding steps in registers, and the split-lane plans of torch's deterministic mode, see `plans`;
--only LABEL keeps the pairs whose label contains LABEL; --length T another length, e.g. 5000 for lanes of more
segments than a group of deterministic look-backs holds), and its backward once more asked for the last
input's gradient alone (`grad<i>*`); every backward launches with its inputs settled (run_scan's `settled`, as
autograd launches it: it stages them before it waits for the forward). With --graphs, the split-lane pairs
instead, captured into a CUDA graph and replayed with the epochs that the launches make on the device cycling (the
look-back words of a spare, `function.GraphWorkspaces`); capture needs torch's caching allocator, so run that
without PYTORCH_NO_CUDA_MEMORY_CACHING. Exits 1 if any output or gradient is not finite or is far from the float64
reference loop; run it as
``compute-sanitizer --tool racecheck python3 benchmarks/sanitize_scan.py``.
"""

from __future__ import annotations

import argparse
import sys

import torch

import common
from flashrnn_kernels.scan import function, reference
from flashrnn_kernels.scan.function import TORCH_DTYPES, _device_gpu, run_scan
from flashrnn_kernels.scan.plan import CARRIES, kernel_plan_for_carry
from flashrnn_kernels.scan.problem import ScanProblem

B, LENGTH, D = 3, 1000, 96
TOLERANCE = 2e-2  # a loose sanity bound; the GPU tests hold the kernels to the real tolerances
CASES = {"linear": (reference.linear_scan_loop, 2), "min_gru": (reference.min_gru_loop, 2),
         "min_lstm": (reference.min_lstm_loop, 3)}


def plans(name: str, dtype: torch.dtype, gpu, T: int = LENGTH) -> list:
    """(label, forward plan, backward plan): the best plan of every carry mode, then the resident plans on fewer SMs,
    so that their segments hold up to `stages` chunks (pass B rescans them from shared memory) and one more (pass B
    stages them again), the chained forward holding 4 of 21 steps per thread in registers (SCAN_HELD), then the
    split-lane plans of torch's deterministic mode (SCAN_DETERMINISTIC)."""
    pairs = [(carry, *(kernel_plan_for_carry(ScanProblem.for_shape(name, B, T, D, TORCH_DTYPES[dtype], d), gpu, carry)
                       for d in ("forward", "backward"))) for carry in CARRIES]
    resident = next(pair[1:] for pair in pairs if pair[0] == "resident")
    for extra in (0, 1):
        fewer = [p.on_fewer_sms(B * p.d_tiles(D), p.chunks(T), p.stages + extra) for p in resident]
        pairs.append((f"resident stages+{extra}", *fewer))
    forward, backward = next(pair[1:] for pair in pairs if pair[0] == "chained")
    pairs.append(("chained held 4 of 21", forward.holding(gpu, 21, 4, forward.min_blocks), backward))
    for carry, *split in [pair for pair in pairs if pair[0] in ("resident", "chained")]:
        pairs.append((f"{carry} deterministic", *(p.deterministic_variant() for p in split)))
    return pairs


def run_pair(name: str, inputs: tuple, h0: torch.Tensor, dy: torch.Tensor, fwd, bwd, graph: bool) -> list:
    """[h, *grads] from one forward and one backward launch; with `graph`, captured into a CUDA graph (after eager
    calls, which keep a spare workspace for it) and replayed three times, the launch counts set after the first so
    that the epochs cycle back to the first between the other two."""
    def pair():
        (h,) = run_scan(name, "forward", inputs, h0, kernel_plan=fwd)
        return [h, *run_scan(name, "backward", inputs, h0, dy=dy, h=h, kernel_plan=bwd, settled=True)]

    if not graph:
        return pair()
    pair()
    held = function._device_graph_workspaces(inputs[0].device).held
    before = len(held)
    captured = torch.cuda.CUDAGraph()
    with torch.cuda.graph(captured):
        outputs = pair()
    captured.replay()
    if len(held) > before:  # a spare (function.GRAPH_CELLS), else the captured memset's words
        held[-1].counters.mul_(function.GRAPH_CYCLE - 1)
    for _ in range(2):
        captured.replay()
    torch.cuda.synchronize()
    return outputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", action="store_true", help="the split-lane pairs captured into CUDA graphs")
    parser.add_argument("--only", default="", help="run only the pairs whose label contains this (e.g. held)")
    parser.add_argument("--length", type=int, default=LENGTH, help="time steps T")
    args = parser.parse_args()
    graphs, T = args.graphs, args.length
    common.require_cuda("sanitize_scan")
    gpu = _device_gpu(torch.cuda.current_device())
    failed = False
    for dtype in (torch.bfloat16, torch.float32):
        for name, (loop, n) in CASES.items():
            xs = [torch.randn(B, T, D, device="cuda") for _ in range(n)]
            if name == "linear":
                xs[0] = torch.rand(B, T, D, device="cuda") * 0.5 + 0.5
            inputs = tuple(x.to(dtype) for x in xs)
            h0 = torch.randn(B, D, device="cuda").to(dtype)
            dy = torch.randn(B, T, D, device="cuda").to(dtype)
            ref_inputs = [x.cpu().double().requires_grad_() for x in [*inputs, h0]]  # few launches
            ref_h = loop(*ref_inputs)
            ref_grads = torch.autograd.grad(ref_h, ref_inputs, dy.cpu().double())
            for carry, fwd, bwd in plans(name, dtype, gpu, T):
                if args.only not in carry:
                    continue
                if graphs and fwd.carry == bwd.carry == "whole":
                    continue  # whole lanes publish nothing
                h, *grads = run_pair(name, inputs, h0, dy, fwd, bwd, graph=graphs)
                checks = [("h", h, ref_h), *((f"grad{i}", g, r) for i, (g, r) in enumerate(zip(grads, ref_grads)))]
                if not graphs:  # the last input's gradient alone: no h_{t-1} read, no other gradient written
                    needs = (False,) * (n - 1) + (True, False)
                    alone = run_scan(name, "backward", inputs, h0, dy=dy, h=h, kernel_plan=bwd, needs=needs,
                                     settled=True)[n - 1]
                    checks.append((f"grad{n - 1}*", alone, ref_grads[n - 1]))
                for label, got, want in checks:
                    err = common.relative_error(got.cpu(), want)
                    ok = bool(torch.isfinite(got).all()) and err <= TOLERANCE
                    failed |= not ok
                    print(f"{name:8s} {B}x{T}x{D} {carry:20s} {str(dtype):15s} {label:6s} rel_err={err:.2e} "
                          f"{'ok' if ok else 'FAILED'}")
    torch.cuda.synchronize()
    print("sanitize_scan" + (" --graphs" if graphs else "") + ":", "FAILED" if failed else "passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
