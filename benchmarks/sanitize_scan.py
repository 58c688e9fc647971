"""Small multi-chunk scans (linear, minGRU, minLSTM; forward + backward) for compute-sanitizer.

[B, T, D] = [3, 1000, 96] in bf16 and fp32 with h0: odd batch, a length of many chunks that is not a multiple of
the chunk, a hidden size that leaves a partial tile; its lanes are split into segments (look-back). [64, 200, 256]:
enough lanes that each block walks a whole lane. Exits 1 if any output or gradient is not finite or is far from
the float64 reference loop; run it as ``compute-sanitizer --tool racecheck python3 benchmarks/sanitize_scan.py``.
"""

from __future__ import annotations

import sys

import torch

import common
from flashrnn_kernels.scan import linear_scan, min_gru_scan, min_lstm_scan, reference
from flashrnn_kernels.scan.function import device_plan

SHAPES = ((3, 1000, 96), (64, 200, 256))
TOLERANCE = 2e-2  # a loose sanity bound; the GPU tests hold the kernels to the real tolerances
CASES = {"linear": (linear_scan, reference.linear_scan_loop, 2), "min_gru": (min_gru_scan, reference.min_gru_loop, 2),
         "min_lstm": (min_lstm_scan, reference.min_lstm_loop, 3)}


def main() -> int:
    if not torch.cuda.is_available():
        print("sanitize_scan: CUDA is not available; it needs a GPU.", file=sys.stderr)
        return 2
    failed = False
    for (B, T, D), dtype in [(shape, dtype) for shape in SHAPES for dtype in (torch.bfloat16, torch.float32)]:
        for name, (op, loop, n) in CASES.items():
            xs = [torch.randn(B, T, D, device="cuda") for _ in range(n)]
            if name == "linear":
                xs[0] = torch.rand(B, T, D, device="cuda") * 0.5 + 0.5
            inputs = [x.to(dtype).requires_grad_() for x in xs]
            h0 = torch.randn(B, D, device="cuda").to(dtype).requires_grad_()
            dy = torch.randn(B, T, D, device="cuda").to(dtype)
            h = op(*inputs, h0)
            grads = torch.autograd.grad(h, [*inputs, h0], dy)
            ref_inputs = [x.detach().cpu().double().requires_grad_() for x in [*inputs, h0]]  # few launches
            ref_h = loop(*ref_inputs)
            ref_grads = torch.autograd.grad(ref_h, ref_inputs, dy.cpu().double())
            for label, got, want in [("h", h, ref_h), *((f"grad{i}", g, r) for i, (g, r) in
                                                         enumerate(zip(grads, ref_grads)))]:
                err = common.relative_error(got.cpu(), want)
                ok = bool(torch.isfinite(got).all()) and err <= TOLERANCE
                failed |= not ok
                print(f"{name:8s} {B}x{T}x{D} split={device_plan(name, h, 'forward').split!s:5s} {str(dtype):15s} "
                      f"{label:6s} rel_err={err:.2e} {'ok' if ok else 'FAILED'}")
    torch.cuda.synchronize()
    print("sanitize_scan:", "FAILED" if failed else "passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
