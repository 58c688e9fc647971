"""A small fused LSTM forward + backward for compute-sanitizer (memcheck, racecheck).

B=3, T=5, NH=2, DH=32 in bf16 (odd batch and length on purpose). Exits 1 if any output or gradient is
not finite or the result is far from the float64 reference; run it as
``compute-sanitizer --tool memcheck python3 benchmarks/sanitize_case.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch

import common

TOLERANCE = 5e-2  # a loose sanity bound; the GPU tests hold the kernels to the real tolerances


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=3)
    parser.add_argument("--seq", type=int, default=5)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--exchange", choices=("cluster", "global", "partials", "pairs"), default=None,
                        help="how a split head's blocks exchange a step (default: the planner's choice)")
    args = parser.parse_args(argv)
    common.require_cuda("sanitize_case")
    import flashrnn_kernels
    from flashrnn_kernels.fused import function

    function.EXCHANGE = args.exchange
    torch.manual_seed(0)
    B, T, NH, DH = args.batch, args.seq, args.heads, args.head_dim

    def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return common.randn(*shape, dtype=torch.bfloat16, device="cuda", scale=scale, requires_grad=True)

    inputs = (rand(B, T, 4, NH, DH), rand(4, NH, DH, DH, scale=DH**-0.5), rand(4, NH, DH, scale=0.5),
              rand(2, B, NH, DH, scale=0.5))
    upstream = (torch.randn(B, T, NH, DH, device="cuda").bfloat16(),
                torch.randn(2, B, NH, DH, device="cuda").bfloat16())
    outputs = flashrnn_kernels.flashrnn(*inputs, cell="lstm", backend="fused")
    grads = torch.autograd.grad(outputs, inputs, upstream)
    torch.cuda.synchronize()

    inputs64 = tuple(t.detach().double().requires_grad_() for t in inputs)
    expected = flashrnn_kernels.flashrnn(*inputs64, cell="lstm", backend="reference")
    expected_grads = torch.autograd.grad(expected, inputs64, tuple(u.double() for u in upstream))
    names = ("h", "last_states", "dWx", "dR", "db", "dstates")
    failed = False
    for name, got, want in zip(names, (*outputs, *grads), (*expected, *expected_grads)):
        finite = bool(torch.isfinite(got).all())
        error = common.relative_error(got, want)
        ok = finite and error <= TOLERANCE
        failed |= not ok
        print(f"{name:12s} shape {tuple(got.shape)} finite={finite} rel_err={error:.2e} {'ok' if ok else 'BAD'}")
    print("sanitize_case:", "FAILED" if failed else "passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
