"""Fused LSTM benchmark: flashrnn_kernels' fused kernel against cuDNN, a PyTorch loop and the flashrnn package.

Sections: ``shapes`` (B=16, T=1024, every (DH, NH) with NH * DH = 768, bf16 and fp16), ``batch`` (B from 2
to 256) and ``length`` (T from 64 to 16384) for one mid shape. Each measurement runs in a worker process,
so a crashing or hanging kernel costs one row, not the run. Writes ``fused_lstm*.{csv,md,png}``.

    python benchmarks/bench_fused.py                 # everything (GPU)
    python benchmarks/bench_fused.py --quick         # small GPU run; on CPU, a plumbing check only
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence

import torch

import common
from anchors import cudnn, flashrnn_pkg
from anchors.vanilla import lstm_loop

SHAPES = ((16, 48), (32, 24), (64, 12), (128, 6), (256, 3), (768, 1))  # (DH, NH)
BATCHES = (2, 4, 8, 16, 32, 64, 128, 256)
LENGTHS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
CHECK_SEQ = 64  # correctness is checked against the float64 reference at this length
CUDNN_IMPLS = ("cudnn_fp16", "cudnn_fp16_in8", "cudnn_bf16", "cudnn_fp32")
TARGETS_MS = {(64, 12): {"fwd": 0.7, "fwd+bwd": 2.5}, (768, 1): {"fwd": 1.0, "fwd+bwd": 3.5}}
SPEEDUP_TARGET = 1.5


# ---------------------------------------------------------------------------------------------- worker side


def _reference_run(Wx, R, b, states):
    import flashrnn_kernels

    return flashrnn_kernels.flashrnn(Wx, R, b, states, cell="lstm", backend="reference")


def check(run: Callable, case: common.Case, device: str, notes: list[str]) -> tuple[float, float]:
    """(forward, gradient) relative errors of ``run`` against the float64 reference at T <= CHECK_SEQ.

    The reference is ``flashrnn_kernels.flashrnn(..., backend="reference")`` cross-checked against the
    plain loop; if the reference fails, the loop serves alone and ``notes`` says so.
    """
    small = dataclasses.replace(case, seq=min(case.seq, CHECK_SEQ))
    args, grads = common.cell_inputs(small, device, requires_grad=True)
    h, last = run(*args)
    got = torch.autograd.grad((h, last), args, grads)

    def in_float64(oracle: Callable) -> tuple:
        args64 = tuple(a.detach().double().requires_grad_() for a in args)
        out64 = oracle(*args64)
        return out64, torch.autograd.grad(out64, args64, tuple(g.double() for g in grads))

    loop_out, loop_grads = in_float64(lstm_loop)
    reference = common.attempt("reference", lambda: in_float64(_reference_run), notes)
    if reference is None:
        notes.append("float64 loop used as the oracle")
        expected_out, expected_grads = loop_out, loop_grads
    else:
        expected_out, expected_grads = reference
        disagreement = max(common.relative_error(a, e) for a, e in zip((*loop_out, *loop_grads),
                                                                       (*expected_out, *expected_grads)))
        if disagreement > 1e-9:
            notes.append(f"reference and float64 loop disagree: {disagreement:.2e}")
    fwd_err = max(common.relative_error(a, e) for a, e in zip((h, last), expected_out))
    grad_err = max(common.relative_error(a, e) for a, e in zip(got, expected_grads))
    return fwd_err, grad_err


def _runner(impl: str, stand_in: bool) -> Callable:
    if impl == "vanilla" or (impl == "ours" and stand_in):
        return lstm_loop
    if impl == "flashrnn":
        return flashrnn_pkg.make_runner("cuda_fused")
    if impl == "ours":
        import flashrnn_kernels

        def ours(Wx, R, b, states):
            return flashrnn_kernels.flashrnn(Wx, R, b, states, cell="lstm", backend="fused")

        return ours
    raise ValueError(f"unknown implementation {impl!r}; expected ours, flashrnn, vanilla or one of {CUDNN_IMPLS}")


def run_job(job: dict, opts: dict) -> dict:
    """Measure one implementation on one case: forward and forward+backward (plus first call and check)."""
    case, impl = common.Case(**job["case"]), job["impl"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    budget = opts["budget_ms"] * (0.3 if impl == "vanilla" else 1.0)
    errors: list[str] = []
    result: dict = {"errors": errors}
    torch.manual_seed(job["seed"])
    if impl in CUDNN_IMPLS:
        input_size = 8 if impl.endswith("_in8") else case.hidden
        spec = cudnn.CudnnCase(case.hidden, input_size, case.batch, case.seq, common.DTYPES[impl.split("_")[1]])
        fns = common.attempt(f"{impl} build", lambda: cudnn.callables(spec, torch.device(device)), errors)
    else:
        run = common.attempt(f"{impl} import", lambda: _runner(impl, opts["stand_in"]), errors)
        args = common.attempt(f"{impl} inputs", lambda: common.cell_inputs(case, device, requires_grad=True), errors)
        fns = common.grad_closures(run, *args) if run is not None and args is not None else None
    if fns is None:
        return result
    return common.measure_directions(result, impl, fns, first_call=job["first_call"],
                                     check=(lambda: check(run, case, device, errors)) if job["check"] else None,
                                     budget_ms=budget)


# ---------------------------------------------------------------------------------------------- parent side


def _job(impl: str, case: common.Case, *, check: bool = False, first_call: bool = False) -> dict:
    return {"impl": impl, "case": dataclasses.asdict(case), "check": check, "first_call": first_call,
            "seed": len(impl) * 1000 + case.batch + case.seq + case.head_dim}


def plan_jobs(section: str, args: argparse.Namespace) -> tuple[list[common.Case], list[dict]]:
    """The cases of ``section`` and the jobs measuring them (anchors shared by cases are measured once)."""
    if section == "shapes":
        cases = [common.Case("lstm", args.batch, args.seq, dh, nh, dt) for dt in args.dtypes for dh, nh in args.shapes]
    else:
        dh, nh = args.mid_shape
        values = args.batches if section == "batch" else args.lengths
        cases = [common.Case("lstm", v, args.seq, dh, nh, dt) if section == "batch"
                 else common.Case("lstm", args.batch, v, dh, nh, dt)
                 for dt in args.sweep_dtypes for v in values]
    jobs: list[dict] = []
    anchor_keys: set[tuple] = set()
    cudnn_impls = CUDNN_IMPLS if section == "shapes" else ("cudnn_fp16",)
    for case in cases:
        key = (case.batch, case.seq, case.hidden)
        if key not in anchor_keys and "cudnn" in args.impls:
            anchor_keys.add(key)
            jobs += [_job(impl, common.Case("lstm", case.batch, case.seq, case.hidden, 1, impl.split("_")[1]))
                     for impl in cudnn_impls]
    if "ours" in args.impls:
        jobs += [_job("ours", case, check=section != "length" or case.seq == args.seq, first_call=True)
                 for case in cases]
    flash_ok = section == "length" or args.flashrnn_sweeps
    for case in cases:
        if "flashrnn" in args.impls and (case.head_dim, case.num_heads) in args.flashrnn_shapes \
                and case.dtype in args.flashrnn_dtypes and (section == "shapes" or flash_ok):
            jobs.append(_job("flashrnn", case, check=section == "shapes", first_call=True))
        if section == "shapes" and "vanilla" in args.impls and (case.head_dim, case.num_heads) in args.vanilla_shapes \
                and case.dtype in args.vanilla_dtypes:
            jobs.append(_job("vanilla", case))
    return cases, jobs


def build_rows(section: str, cases: list[common.Case], jobs: list[dict], results: dict[int, dict]) -> list[dict]:
    """One wide row per (case, direction): every implementation's time, errors, best anchor, targets."""
    found: dict[tuple, dict] = {}
    for index, job in enumerate(jobs):
        c = job["case"]
        key = (job["impl"], c["batch"], c["seq"]) + ((c["head_dim"] * c["num_heads"],) if job["impl"] in
                                                      CUDNN_IMPLS else (c["head_dim"], c["num_heads"], c["dtype"]))
        found[key] = results.get(index, {"errors": ["pending"]})
    impls = sorted({job["impl"] for job in jobs}, key=lambda i: ("ours", "flashrnn", *CUDNN_IMPLS, "vanilla").index(i))
    rows = []
    for case in cases:
        for direction in common.DIRECTIONS:
            row: dict = {"dtype": case.dtype, "B": case.batch, "T": case.seq, "DH": case.head_dim,
                         "NH": case.num_heads, "direction": direction}
            errors, anchors = [], {}
            for impl in impls:
                if impl in CUDNN_IMPLS:
                    res = found.get((impl, case.batch, case.seq, case.hidden))
                else:
                    res = found.get((impl, case.batch, case.seq, case.head_dim, case.num_heads, case.dtype))
                if res is None:
                    continue
                # cuDNN expresses only a single head (NH=1); with NH > 1 it solves a larger, dense problem.
                common.add_result(row, impl, res, direction, errors, anchors,
                                  is_anchor=impl != "ours" and (impl not in CUDNN_IMPLS or case.num_heads == 1))
            common.rank_anchors(row, anchors)
            if section == "shapes":
                common.judge_targets(row, TARGETS_MS.get((case.head_dim, case.num_heads), {}).get(direction),
                                     SPEEDUP_TARGET)
            row["errors"] = "; ".join(sorted(set(errors)))
            rows.append(row)
    return rows


NOTES = (
    "Median milliseconds over CUDA-event-timed calls after warm-up, all in one process run per row group. "
    "`fwd` runs under torch.no_grad (inference); `fwd+bwd` is a forward with autograd plus torch.autograd.grad "
    "of h and the last states (random upstream gradients) with respect to every input and weight.",
    "`ours` = flashrnn_kernels.flashrnn(..., backend=\"fused\"); `ours_first_s` = its first call in the process "
    "(fwd row: plan + compile of the forward; fwd+bwd row: then the first forward+backward). `*_err` = max "
    f"relative error (max |diff| / max |ref|) against the float64 reference at T={CHECK_SEQ}, same B and shape: "
    "fwd rows h and last states, fwd+bwd rows the gradients of Wx, R, b and the initial states.",
    "cuDNN = torch.nn.LSTM (one layer, batch_first, flatten_parameters) with hidden = NH*DH in the dtype of its "
    "column, timed as is with input_size = hidden (its own input GEMM included); `cudnn_fp16_in8` uses "
    "input_size = 8, i.e. almost only the recurrence, the fair match for our precomputed Wx. cuDNN counts as an "
    "anchor only for NH = 1 (it cannot express block-diagonal heads); for NH > 1 its columns show the dense LSTM "
    "of the same hidden size for context. `flashrnn` = the flashrnn 1.0.8 package's cuda_fused backend "
    "(first call includes its solve + compile). `vanilla` = a Python loop of bmm + pointwise ops.",
    f"Targets: DH=64 NH=12 fwd <= 0.7 ms, fwd+bwd <= 2.5 ms; DH=768 NH=1 <= 1.0 / 3.5 ms; speedup = best "
    f"anchor / ours >= {SPEEDUP_TARGET} on every row.",
)


def _parse_shapes(text: str) -> tuple[tuple[int, int], ...]:
    return common.parse_shapes(text, SHAPES)


def _parse_ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as '2,16,256', got {text!r}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sections", default="shapes,batch,length", help="comma list of shapes, batch, length")
    p.add_argument("--quick", action="store_true", help="small sizes; on a CPU-only torch a plumbing check")
    p.add_argument("--dtypes", type=common.parse_names(tuple(common.DTYPES)), default=("bf16", "fp16"))
    p.add_argument("--shapes", type=_parse_shapes, default=SHAPES, help="DH:NH pairs, e.g. 64:12,768:1")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--mid-shape", type=_parse_shapes, default=((64, 12),), help="DH:NH of the sweeps")
    p.add_argument("--sweep-dtypes", type=common.parse_names(tuple(common.DTYPES)), default=("bf16",))
    p.add_argument("--batches", type=_parse_ints, default=BATCHES)
    p.add_argument("--lengths", type=_parse_ints, default=LENGTHS)
    p.add_argument("--flashrnn-shapes", type=_parse_shapes, default=None, help="default 64:12,768:1 ('none' to skip)")
    p.add_argument("--flashrnn-dtypes", type=common.parse_names(tuple(common.DTYPES)), default=("bf16",))
    p.add_argument("--flashrnn-sweeps", action="store_true", help="also run flashrnn in the batch sweep "
                   "(it compiles again for every batch size)")
    p.add_argument("--vanilla-shapes", type=_parse_shapes, default=None, help="default 64:12,768:1")
    p.add_argument("--vanilla-dtypes", type=common.parse_names(tuple(common.DTYPES)), default=("bf16",))
    p.add_argument("--impls", default="ours,cudnn,flashrnn,vanilla", help="comma list of implementations to run")
    p.add_argument("--budget-ms", type=float, default=1500.0, help="timed milliseconds per measurement")
    p.add_argument("--job-timeout-s", type=float, default=240.0, help="kill a measurement running longer")
    p.add_argument("--budget-s", type=float, default=None, help="skip jobs not started after this many seconds")
    p.add_argument("--name", default=None, help="results file stem (default fused_lstm[_quick])")
    p.add_argument("--worker", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    bad = [s for s in args.sections if s not in ("shapes", "batch", "length")]
    if bad:
        p.error(f"unknown section(s) {bad}; choose from shapes, batch, length")
    args.impls = [i for i in args.impls.split(",") if i]
    bad = [i for i in args.impls if i not in ("ours", "cudnn", "flashrnn", "vanilla")]
    if bad:
        p.error(f"unknown implementation(s) {bad}; choose from ours, cudnn, flashrnn, vanilla")
    if len(args.mid_shape) != 1:
        p.error(f"--mid-shape takes one DH:NH pair, got {args.mid_shape}")
    args.mid_shape = args.mid_shape[0]
    return args


def _apply_quick(args: argparse.Namespace, argv: Sequence[str], cpu: bool) -> None:
    defaults = {"--dtypes": ("bf16",), "--seq": 256, "--budget-ms": 300.0, "--batches": (8, 16, 64),
                "--lengths": (256, 1024, 4096), "--shapes": ((64, 12), (768, 1))}
    if cpu:  # tiny sizes: the pure-PyTorch loop stands in for the kernel, nothing here is a measurement
        defaults.update({"--seq": 8, "--batch": 2, "--budget-ms": 5.0, "--batches": (2, 3), "--lengths": (4, 8),
                         "--shapes": ((8, 2), (16, 1)), "--mid-shape": (8, 2)})
    common.apply_quick(args, argv, defaults)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        return common.worker_loop(args.worker[0], args.worker[1], run_job)
    cpu = common.plumbing_check("bench_fused", args.quick, "the pure-PyTorch loop")
    if args.quick:
        _apply_quick(args, argv, cpu)
    if args.flashrnn_shapes is None:
        args.flashrnn_shapes = () if args.quick or cpu else ((64, 12), (768, 1))
    if args.vanilla_shapes is None:
        args.vanilla_shapes = ((8, 2),) if cpu else ((64, 12),) if args.quick else ((64, 12), (768, 1))
    name = args.name or ("fused_lstm_plumbing" if cpu else "fused_lstm_quick" if args.quick else "fused_lstm")
    title_extra = common.PLUMBING_TITLE if cpu else ""
    opts = {"budget_ms": args.budget_ms, "stand_in": cpu}
    script = os.path.abspath(__file__)
    markdown, plot_errors = [], []
    for section in args.sections:
        stem = name if section == "shapes" else f"{name}_{section}"
        cases, jobs = plan_jobs(section, args)
        if not cases:
            print(f"== section {section}: no cases selected, skipped", flush=True)
            continue
        title = f"Fused LSTM, {section}{title_extra}"

        def save(results: dict[int, dict], stem=stem, cases=cases, jobs=jobs, title=title, section=section) -> str:
            return common.write_results(stem, build_rows(section, cases, jobs, results), title=title, notes=NOTES)

        print(f"== section {section}: {len(cases)} cases, {len(jobs)} jobs", flush=True)
        results = common.run_isolated(script, jobs, opts, job_timeout_s=args.job_timeout_s,
                                      budget_s=args.budget_s, on_result=save)
        markdown.append(save(results))
        rows = build_rows(section, cases, jobs, results)
        for direction in common.DIRECTIONS:
            x = {"shapes": "DH:NH", "batch": "B", "length": "T"}[section]
            suffix = direction.replace("+", "")
            long_rows = common.timing_series(rows, x, direction=direction)
            plot_title = f"LSTM {direction}, {section}{' (CPU plumbing check)' if cpu else ''}"
            common.attempt(f"plot {stem} {direction}", lambda: common.plot(
                f"{stem}_{suffix}", long_rows, x=x, y="ms", series="impl", title=plot_title,
                logx=section != "shapes", logy=True), plot_errors)
    print(f"results in {common.results_dir()}" + (f"; plots failed: {plot_errors}" if plot_errors else ""))
    print("\n".join(markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
