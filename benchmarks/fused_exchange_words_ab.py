"""The fused forwards whose split heads exchange h through global memory, with this package's kernels against another
copy of the package (--before: a directory holding its flashrnn_kernels). results/fused_exchange_words_ab.md ran the
shipped words (4 payload bytes, a 4-byte tag) as "before" against results/fused_exchange_parity_words.diff applied
(payload alone, a parity bit in the last bit of each word's first element) as "after".

Each variant runs in its own process (the two packages share a name), the variants taking turns over --rounds
rounds; per round and case the time per call of the solver's plan (CUDA events, median of 20 calls after 5 warm-up
calls), forwards under torch.no_grad at T = 1024, and "fwd+bwd" rows a forward and the backward through autograd.
Each process also checks every case against the float64 reference at T = 64 on fresh random inputs (largest relative
error of the outputs, and of the gradients for fwd+bwd).

Usage: git worktree add /tmp/before <commit>; python benchmarks/fused_exchange_words_ab.py --before /tmp/before
Writes fused_exchange_words_ab.{csv,md} to BENCH_RESULTS_DIR (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import common

REPO = Path(__file__).resolve().parent.parent
# (cell, batch, heads, head_dim, dtype, direction)
CASES = [
    ("lstm", 16, 1, 768, "bf16", "fwd"), ("gru", 16, 1, 768, "bf16", "fwd"), ("slstm", 16, 1, 768, "bf16", "fwd"),
    ("elman", 16, 1, 768, "bf16", "fwd"), ("lstm", 16, 1, 768, "fp16", "fwd"), ("lstm", 16, 1, 512, "bf16", "fwd"),
    ("lstm", 16, 1, 1024, "bf16", "fwd"), ("lstm", 16, 3, 256, "bf16", "fwd"), ("lstm", 16, 3, 256, "fp32", "fwd"),
    ("elman", 16, 1, 768, "fp32", "fwd"), ("gru", 64, 1, 768, "bf16", "fwd"), ("lstm", 64, 2, 512, "bf16", "fwd"),
    ("lstm", 16, 1, 768, "bf16", "fwd+bwd"),
]


def _case(cell: str, batch: int, nh: int, dh: int, dtype: str, seq: int) -> common.Case:
    return common.Case(cell=cell, batch=batch, seq=seq, head_dim=dh, num_heads=nh, dtype=dtype)


def _error(case: common.Case, backward: bool) -> float:
    import flashrnn_kernels

    args, grads = common.cell_inputs(case, "cuda", requires_grad=backward)

    def run(inputs, backend):
        out = flashrnn_kernels.flashrnn(*inputs, cell=case.cell, backend=backend)
        return (*out, *torch.autograd.grad(out, inputs, [g.to(out[0].dtype) for g in grads])) if backward else out

    got = run(args, "fused")
    expected = run(tuple(a.detach().double().requires_grad_(backward) for a in args), "reference")
    return max(common.relative_error(a, e) for a, e in zip(got, expected))


def worker(out: Path) -> None:
    """Time and check every case with the flashrnn_kernels this process imports; JSON rows to `out`."""
    import flashrnn_kernels

    rows = []
    for cell, batch, nh, dh, dtype, direction in CASES:
        backward = direction == "fwd+bwd"
        case = _case(cell, batch, nh, dh, dtype, 1024)
        args, grads = common.cell_inputs(case, "cuda", requires_grad=backward)
        forward, forward_backward = common.grad_closures(
            lambda *a, cell=cell: flashrnn_kernels.flashrnn(*a, cell=cell, backend="fused"), args, grads)
        ms = common.time_cuda(forward_backward if backward else forward, warmup=5, repeat=20)
        rows.append({"case": f"{cell} {nh}x{dh} B={batch} {dtype} {direction}", "ms": ms,
                     "error": _error(dataclasses.replace(case, seq=64), backward)})
    out.write_text(json.dumps(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="directory holding the older flashrnn_kernels")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if args.before is None:
        parser.error("--before DIR is required")
    roots = {"before": args.before.resolve(), "after": REPO}
    times: dict[tuple[str, str], list[float]] = {}
    errors: dict[tuple[str, str], float] = {}
    for r in range(args.rounds):
        for name in (list(roots) if r % 2 == 0 else list(roots)[::-1]):
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(roots[name]), os.environ.get("PYTHONPATH", "")]))
                subprocess.run([sys.executable, __file__, "--worker", f.name], env=env, check=True)
                for row in json.loads(Path(f.name).read_text()):
                    times.setdefault((row["case"], name), []).append(row["ms"])
                    errors[(row["case"], name)] = max(errors.get((row["case"], name), 0.0), row["error"])
    rows = []
    for cell, batch, nh, dh, dtype, direction in CASES:
        case = f"{cell} {nh}x{dh} B={batch} {dtype} {direction}"
        before, after = (statistics.median(times[(case, n)]) for n in roots)
        rows.append({"case": case, "before ms": before, "after ms": after, "after / before": after / before,
                     "error before": errors[(case, "before")], "error after": errors[(case, "after")]})
    print(common.write_results("fused_exchange_words_ab", rows, title="Fused forwards through global memory: "
                               "exchange words, before and after",
                               notes=[f"{args.rounds} alternating rounds, one process per variant and round; "
                                      "median ms per call (CUDA events); T = 1024 (errors: T = 64, "
                                      "against float64)."]))


if __name__ == "__main__":
    main()
