"""The fused forwards whose split heads exchange h through global memory, timed with several copies of the package
side by side: this checkout ("this") and each --variant NAME=DIR (a directory holding another flashrnn_kernels, e.g.
a git worktree of an older commit, or a copy with a kernel change). results/fused_exchange_words_ab.md ran the shipped
words (4 payload bytes, a 4-byte tag) as "before" against results/fused_exchange_parity_words.diff applied (payload
alone, a parity bit in the last bit of each word's first element) as "after".

Each variant runs in its own process (the packages share a name), the variants taking turns over --rounds rounds
(the order reversed every other round); per round and case the time per call of the solver's plan (CUDA events,
median of 20 calls after 5 warm-up calls), forwards under torch.no_grad at T = 1024, and "fwd+bwd" rows a forward
and the backward through autograd. Each process also checks every case against the float64 reference at T = 64 on
fresh random inputs (largest relative error of the outputs, and of the gradients for fwd+bwd).

Usage: git worktree add /tmp/before <commit>;
       python benchmarks/fused_packages_ab.py --variant before=/tmp/before [--cases "lstm 1x768"] [--name NAME]
Writes NAME.{csv,md} (default fused_packages_ab) to BENCH_RESULTS_DIR (default benchmarks/results).
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


def _label(cell: str, batch: int, nh: int, dh: int, dtype: str, direction: str) -> str:
    return f"{cell} {nh}x{dh} B={batch} {dtype} {direction}"


def worker(out: Path, cases: list[tuple]) -> None:
    """Time and check `cases` with the flashrnn_kernels this process imports; JSON rows to `out`."""
    import flashrnn_kernels

    rows = []
    for cell, batch, nh, dh, dtype, direction in cases:
        backward = direction == "fwd+bwd"
        case = _case(cell, batch, nh, dh, dtype, 1024)
        args, grads = common.cell_inputs(case, "cuda", requires_grad=backward)
        forward, forward_backward = common.grad_closures(
            lambda *a, cell=cell: flashrnn_kernels.flashrnn(*a, cell=cell, backend="fused"), args, grads)
        ms = common.time_cuda(forward_backward if backward else forward, warmup=5, repeat=20)
        rows.append({"case": _label(cell, batch, nh, dh, dtype, direction), "ms": ms,
                     "error": _error(dataclasses.replace(case, seq=64), backward)})
    out.write_text(json.dumps(rows))


def _variant(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not (Path(path) / "flashrnn_kernels").is_dir():
        raise argparse.ArgumentTypeError(f"expected NAME=DIR with DIR/flashrnn_kernels, got {text!r}")
    return name, Path(path).resolve()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", type=_variant, action="append", default=[],
                        help="NAME=DIR: another copy of the package to time beside this checkout (repeatable)")
    parser.add_argument("--cases", default="", help="comma-separated runs of whole words of the case labels, e.g. "
                        "'1x768 B=16' or 'lstm 1x768 B=16 bf16 fwd': the cases whose label has one (default: all)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--name", default="fused_packages_ab", help="result file name")
    parser.add_argument("--worker-timeout", type=float, default=300.0,
                        help="seconds a variant's process may take (a kernel that hangs fails the run instead)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    common.require_cuda("fused_packages_ab")
    wanted = [w.strip() for w in args.cases.split(",") if w.strip()]
    cases = [c for c in CASES if not wanted or any(f" {w} " in f" {_label(*c)} " for w in wanted)]
    if args.worker:
        worker(args.worker, cases)
        return
    if not args.variant:
        parser.error("give at least one --variant NAME=DIR to time against this checkout")
    if not cases:
        parser.error(f"no case matches --cases {args.cases!r}")
    roots = {"this": REPO, **dict(args.variant)}
    times: dict[tuple[str, str], list[float]] = {}
    errors: dict[tuple[str, str], float] = {}
    for r in range(args.rounds):
        for name in (list(roots) if r % 2 == 0 else list(roots)[::-1]):
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(roots[name]), os.environ.get("PYTHONPATH", "")]))
                subprocess.run([sys.executable, __file__, "--worker", f.name, "--cases", args.cases], env=env,
                               check=True, timeout=args.worker_timeout)
                for row in json.loads(Path(f.name).read_text()):
                    print(f"round {r} {name}: {row['case']} {row['ms']:.4f} ms, error {row['error']:.2e}", flush=True)
                    times.setdefault((row["case"], name), []).append(row["ms"])
                    errors[(row["case"], name)] = max(errors.get((row["case"], name), 0.0), row["error"])
    rows = []
    for c in cases:
        label = _label(*c)
        row = {"case": label, "this ms": statistics.median(times[(label, "this")])}
        for name in roots:
            if name != "this":
                row[f"{name} ms"] = statistics.median(times[(label, name)])
                row[f"{name} / this"] = row[f"{name} ms"] / row["this ms"]
        row.update({f"error {name}": errors[(label, name)] for name in roots})
        rows.append(row)
    print(common.write_results(args.name, rows, title="Fused forwards through global memory: copies of the package "
                               "side by side",
                               notes=[f"{args.rounds} alternating rounds, one process per variant and round; "
                                      "median ms per call (CUDA events); T = 1024 (errors: T = 64, against float64). "
                                      f"Variants: {', '.join(f'{n} = {p}' for n, p in roots.items())}."]))


if __name__ == "__main__":
    main()
