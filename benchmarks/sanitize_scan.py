"""Small multi-chunk scans (linear, minGRU, minLSTM; forward + backward) for compute-sanitizer, in each carry mode.

[B, T, D] = [3, 1000, 96] in bf16 and fp32 with h0: odd batch, a length of many chunks that is not a multiple of
the chunk, a hidden size that leaves a partial tile; each is run with the best plan of every carry mode (whole
lanes; resident segments and chained one-chunk segments, both with the look-back; resident segments of several
chunks, see `plans`). Exits 1 if any output or gradient is not finite or is far from the float64 reference loop;
run it as
``compute-sanitizer --tool racecheck python3 benchmarks/sanitize_scan.py``.
"""

from __future__ import annotations

import sys

import torch

import common
from flashrnn_kernels.scan import reference
from flashrnn_kernels.scan.function import TORCH_DTYPES, _device_gpu, run_scan
from flashrnn_kernels.scan.plan import CARRIES, kernel_plan_for_carry
from flashrnn_kernels.scan.problem import ScanProblem

B, T, D = 3, 1000, 96
TOLERANCE = 2e-2  # a loose sanity bound; the GPU tests hold the kernels to the real tolerances
CASES = {"linear": (reference.linear_scan_loop, 2), "min_gru": (reference.min_gru_loop, 2),
         "min_lstm": (reference.min_lstm_loop, 3)}


def plans(name: str, dtype: torch.dtype, gpu) -> list:
    """(label, forward plan, backward plan): the best plan of every carry mode, then the resident plans on fewer SMs,
    so that their segments hold up to `stages` chunks (pass B rescans them from shared memory) and one more (pass B
    stages them again)."""
    pairs = [(carry, *(kernel_plan_for_carry(ScanProblem.for_shape(name, B, T, D, TORCH_DTYPES[dtype], d), gpu, carry)
                       for d in ("forward", "backward"))) for carry in CARRIES]
    resident = next(pair[1:] for pair in pairs if pair[0] == "resident")
    for extra in (0, 1):
        fewer = [p.on_fewer_sms(B * p.d_tiles(D), p.chunks(T), p.stages + extra) for p in resident]
        pairs.append((f"resident stages+{extra}", *fewer))
    return pairs


def main() -> int:
    if not torch.cuda.is_available():
        print("sanitize_scan: CUDA is not available; it needs a GPU.", file=sys.stderr)
        return 2
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
            for carry, fwd, bwd in plans(name, dtype, gpu):
                (h,) = run_scan(name, "forward", inputs, h0, kernel_plan=fwd)
                grads = run_scan(name, "backward", inputs, h0, dy=dy, h=h, kernel_plan=bwd)
                for label, got, want in [("h", h, ref_h), *((f"grad{i}", g, r) for i, (g, r) in
                                                             enumerate(zip(grads, ref_grads)))]:
                    err = common.relative_error(got.cpu(), want)
                    ok = bool(torch.isfinite(got).all()) and err <= TOLERANCE
                    failed |= not ok
                    print(f"{name:8s} {B}x{T}x{D} {carry:20s} {str(dtype):15s} {label:6s} rel_err={err:.2e} "
                          f"{'ok' if ok else 'FAILED'}")
    torch.cuda.synchronize()
    print("sanitize_scan:", "FAILED" if failed else "passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
