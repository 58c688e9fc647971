"""Alternating backend benchmark: one head of 2048 and 4096 (LSTM, B=16, T=1024, bf16/fp16/fp32), forward and
forward+backward, against torch.nn.LSTM (cuDNN) in the same run. Writes ``alternating.{csv,md}``; the crossover
section times the fused kernel and the alternating backend where both run (bf16 and fp32) and records what `choose`
picks: ``alternating_crossover.{csv,md}``. ``--sections crossover`` runs only that section.

cuDNN is timed twice: with ``input_size = hidden`` (as used, its input projection included) and with
``input_size = 8`` (the recurrence alone, comparable to our precomputed Wx). Each problem is first checked against
the float64 reference at T = CHECK_SEQ (relative error = max abs error / max abs value).

    python benchmarks/bench_alternating.py             # the full run (GPU)
    python benchmarks/bench_alternating.py --quick     # H = 256, T = 64: a plumbing check
    python benchmarks/bench_alternating.py --sections crossover --dtypes fp32   # choose()'s fp32 picks
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import common
import torch
from anchors import cudnn

HIDDEN = (2048, 4096)
BATCH, SEQ, CHECK_SEQ = 16, 1024, 32
TARGET_HIDDEN = 4096  # target: no slower than cuDNN (recurrence alone) here
SECTIONS = ("cudnn", "crossover")
CROSSOVER = ((64, 12), (256, 3), (512, 1), (768, 1), (1024, 1), (1024, 2))  # (DH, NH), both backends run


def _inputs(hidden: int, batch: int, seq: int, dtype: torch.dtype, device: str):
    args = (common.randn(batch, seq, 4, 1, hidden, dtype=dtype, device=device, requires_grad=True),
            common.randn(4, 1, hidden, hidden, dtype=dtype, device=device, scale=hidden**-0.5, requires_grad=True),
            common.randn(4, 1, hidden, dtype=dtype, device=device, scale=0.5, requires_grad=True),
            common.randn(2, batch, 1, hidden, dtype=dtype, device=device, scale=0.5, requires_grad=True))
    grads = (common.randn(batch, seq, 1, hidden, dtype=dtype, device=device),
             common.randn(2, batch, 1, hidden, dtype=dtype, device=device))
    return args, grads


def _ours(Wx, R, b, states):
    from flashrnn_kernels.alternating import flashrnn_alternating

    return flashrnn_alternating(Wx, R, b, states, "lstm")


def check(hidden: int, dtype: torch.dtype, device: str) -> tuple[float, float]:
    """(forward, gradient) relative errors against the float64 reference at T = CHECK_SEQ."""
    from flashrnn_kernels.fused.reference import flashrnn_reference

    args, grads = _inputs(hidden, BATCH, CHECK_SEQ, dtype, device)
    out = _ours(*args)
    got = torch.autograd.grad(out, args, grads)
    args64 = tuple(a.detach().double().requires_grad_() for a in args)
    out64 = flashrnn_reference(*args64, "lstm")
    want = torch.autograd.grad(out64, args64, tuple(g.double() for g in grads))
    fwd = max(common.relative_error(a, e) for a, e in zip(out, out64))
    return fwd, max(common.relative_error(a, e) for a, e in zip(got, want))


def closures(hidden: int, dtype: torch.dtype, seq: int, device: str) -> tuple[Callable, Callable]:
    args, grads = _inputs(hidden, BATCH, seq, dtype, device)
    return common.grad_closures(_ours, args, grads)


def _with_tf32(fn: Callable, allow: bool) -> Callable:
    """`fn` called with TF32 allowed (or not) for both cuBLAS and cuDNN fp32 work."""

    def call() -> object:
        saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allow
        try:
            return fn()
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved

    return call


def _free(device: str) -> None:
    """Drop the alternating backend's captured graphs and buffers between problems."""
    if device == "cuda":
        from flashrnn_kernels.alternating import clear_graphs

        clear_graphs()
        torch.cuda.empty_cache()


def run(hiddens: Sequence[int], dtypes: Sequence[str], seq: int, repeat: int) -> list[dict]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for hidden in hiddens:
        for name in dtypes:
            dtype, errors = common.DTYPES[name], []
            row: dict = {"hidden": hidden, "dtype": name, "B": BATCH, "T": seq}
            checked = common.attempt("check", lambda h=hidden, d=dtype: check(h, d, device), errors)
            if checked is not None:
                row["fwd_rel_err"], row["grad_rel_err"] = checked
            impls = {"alternating": (lambda h=hidden, d=dtype: closures(h, d, seq, device), None)}
            for input_size in (hidden, 8):
                case = cudnn.CudnnCase(hidden, input_size, BATCH, seq, dtype)
                impls[f"cudnn_in{input_size if input_size != hidden else 'H'}"] = (
                    lambda case=case: cudnn.callables(case, torch.device(device)), None)
            if name == "fp32":  # torch's defaults: cuDNN fp32 runs on TF32 tensor cores, cuBLAS fp32 does not
                impls["alternating_tf32"] = (impls["alternating"][0], True)
                impls["cudnn_in8_notf32"] = (impls["cudnn_in8"][0], False)
            for impl, (make, tf32) in impls.items():
                made = common.attempt(impl, make, errors)
                if made is None:
                    continue
                for direction, fn in zip(("fwd", "fwd+bwd"), made):
                    fn = fn if tf32 is None else _with_tf32(fn, tf32)
                    row[f"{impl} {direction} ms"] = common.attempt(
                        f"{impl} {direction}", lambda fn=fn: common.time_cuda(fn, warmup=3, repeat=repeat), errors)
                del made
            _free(device)
            pairs = [("alternating", "cudnn_in8")]  # same precision: TF32 on both, or on neither
            if name == "fp32":
                pairs = [("alternating_tf32", "cudnn_in8"), ("alternating", "cudnn_in8_notf32")]
            for direction in ("fwd", "fwd+bwd"):
                for ours_name, base_name in pairs:
                    ours, base = row.get(f"{ours_name} {direction} ms"), row.get(f"{base_name} {direction} ms")
                    if ours and base:
                        row[f"speedup {ours_name} vs {base_name} {direction}"] = base / ours
            row["errors"] = "; ".join(errors)
            rows.append(row)
            print(row, flush=True)
    return rows


def crossover(shapes: Sequence[tuple[int, int]], seq: int, repeat: int, dtypes: Sequence[str]) -> list[dict]:
    """Fused vs alternating (LSTM, B = BATCH) in each of `dtypes` where the fused kernel has a plan, and `choose`'s
    pick (which it makes from predicted times: the rows check it)."""
    from flashrnn_kernels.alternating import choose, flashrnn_alternating
    from flashrnn_kernels.fused.function import flashrnn_fused

    rows = []
    for (head_dim, num_heads), name in ((shape, name) for name in dtypes for shape in shapes):
        dtype = common.DTYPES[name]
        errors: list[str] = []
        args = (common.randn(BATCH, seq, 4, num_heads, head_dim, dtype=dtype, device="cuda", requires_grad=True),
                common.randn(4, num_heads, head_dim, head_dim, dtype=dtype, device="cuda",
                             scale=head_dim**-0.5, requires_grad=True),
                common.randn(4, num_heads, head_dim, dtype=dtype, device="cuda", scale=0.5, requires_grad=True),
                common.randn(2, BATCH, num_heads, head_dim, dtype=dtype, device="cuda", scale=0.5,
                             requires_grad=True))
        grads = (common.randn(BATCH, seq, num_heads, head_dim, dtype=dtype, device="cuda"),
                 common.randn(2, BATCH, num_heads, head_dim, dtype=dtype, device="cuda"))
        choice = choose("lstm", BATCH, num_heads, head_dim, dtype)
        row: dict = {"dtype": name, "head_dim": head_dim, "num_heads": num_heads, "B": BATCH, "T": seq,
                     "choose": choice.backend}
        for impl, op in (("fused", flashrnn_fused), ("alternating", flashrnn_alternating)):
            fns = common.grad_closures(lambda *tensors, op=op: op(*tensors, "lstm"), args, grads)
            for direction, fn in zip(("fwd", "fwd+bwd"), fns):
                row[f"{impl} {direction} ms"] = common.attempt(
                    f"{impl} {direction}", lambda fn=fn: common.time_cuda(fn, warmup=3, repeat=repeat), errors)
        row["errors"] = "; ".join(errors)
        rows.append(row)
        print(row, flush=True)
        _free("cuda")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="H = 256, T = 64, bf16 only")
    p.add_argument("--dtypes", type=common.parse_names(tuple(common.DTYPES)), default=("bf16", "fp16", "fp32"))
    p.add_argument("--repeat", type=int, default=10, help="timed calls per measurement (median reported)")
    p.add_argument("--sections", type=common.parse_names(SECTIONS), default=SECTIONS,
                   help="comma-separated: 'cudnn' (one head of 2048 / 4096 vs cuDNN), "
                        "'crossover' (vs the fused kernel)")
    args = p.parse_args(argv)
    if "cudnn" in args.sections:
        _cudnn_section(args)
    if "crossover" in args.sections and torch.cuda.is_available():
        dtypes = ("bf16",) if args.quick else tuple(d for d in args.dtypes if d in ("bf16", "fp32"))
        shapes = CROSSOVER[:2] if args.quick else CROSSOVER
        rows = crossover(shapes, 64 if args.quick else SEQ, 3 if args.quick else args.repeat, dtypes)
        notes = [("LSTM: the fused kernel and the alternating backend where both run; `choose` is "
                  "flashrnn_kernels.alternating.choose (fused unless the alternating backend is predicted much "
                  "faster).")]
        print(common.write_results("alternating_crossover_quick" if args.quick else "alternating_crossover", rows,
                                   title="Fused kernel vs alternating backend", notes=notes))
    return 0


def _cudnn_section(args: argparse.Namespace) -> None:
    if args.quick:
        rows = run((256,), ("bf16",), 64, 3)
    else:
        rows = run(HIDDEN, args.dtypes, SEQ, args.repeat)
    notes = [(f"LSTM, one head, B={BATCH}; alternating = per-step cuBLAS GEMM + pointwise kernel replayed from a CUDA "
             "graph (Wx precomputed). cudnn_inH: torch.nn.LSTM with input_size = hidden (its input projection "
             "included); cudnn_in8: input_size = 8 (the recurrence alone). fp32 with torch's defaults: cuDNN uses TF32 "
             "tensor cores, our cuBLAS GEMMs strict fp32; the _tf32 / _notf32 columns flip that. "
             "Median of CUDA-event-timed calls after "
             f"warm-up; target: alternating no slower than cuDNN for H = {TARGET_HIDDEN}.")]
    print(common.write_results("alternating_quick" if args.quick else "alternating", rows,
                               title="Alternating backend vs cuDNN", notes=notes))


if __name__ == "__main__":
    sys.exit(main())
