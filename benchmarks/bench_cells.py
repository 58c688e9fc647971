"""GRU, sLSTM and Elman on the fused kernel against cuDNN (torch.nn.GRU / nn.RNN) and the flashrnn package.

B=16, T=1024, every (DH, NH) with NH * DH = 768, bf16 and fp16, forward and forward+backward. Each
measurement runs in a worker process, so a crashing or hanging kernel costs one row, not the run. Writes
``fused_cells.{csv,md}`` and one PNG per cell and direction.

    python benchmarks/bench_cells.py                 # everything (GPU)
    python benchmarks/bench_cells.py --quick         # small GPU run; on CPU, a plumbing check only
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence

import torch

import common
from anchors import flashrnn_pkg

CELLS = ("gru", "slstm", "elman")
SHAPES = ((16, 48), (32, 24), (64, 12), (128, 6), (256, 3), (768, 1))  # (DH, NH)
CHECK_SEQ = 64  # correctness is checked against the float64 reference at this length
TORCH_IMPLS = ("cudnn_fp16", "cudnn_fp16_in8", "cudnn_bf16", "cudnn_fp32")
TORCH_MODULES = {"gru": "GRU", "elman": "RNN"}  # torch.nn twins (cuDNN); sLSTM has none
FLASHRNN_CELLS = ("gru", "slstm")  # flashrnn 1.0.8 runs its GRU on its per-step backend (no fused GRU)
TARGETS_MS = {("gru", 768, 1): {"fwd": 1.5, "fwd+bwd": 5.0}}
SPEEDUP_TARGET = 1.5


# ---------------------------------------------------------------------------------------------- worker side


def torch_callables(cell: str, hidden: int, input_size: int, batch: int, seq: int, dtype: torch.dtype,
                    device: torch.device) -> tuple[Callable[[], object], Callable[[], object]]:
    """``(forward, forward_backward)`` of torch.nn.GRU / nn.RNN(tanh): one layer, batch_first, flat weights;
    gradients of the input, the initial state and every parameter."""
    if cell == "gru":
        module = torch.nn.GRU(input_size, hidden, num_layers=1, batch_first=True)
    else:
        module = torch.nn.RNN(input_size, hidden, num_layers=1, nonlinearity="tanh", batch_first=True)
    module = module.to(device=device, dtype=dtype)
    module.flatten_parameters()
    x = torch.randn(batch, seq, input_size, device=device).to(dtype).requires_grad_()
    h0 = torch.randn(1, batch, hidden, device=device).to(dtype).requires_grad_()
    grads = (torch.randn(batch, seq, hidden, device=device).to(dtype),
             torch.randn(1, batch, hidden, device=device).to(dtype))
    wrt = (x, h0, *module.parameters())

    def forward() -> object:
        with torch.no_grad():
            return module(x, h0)

    def forward_backward() -> object:
        return torch.autograd.grad(module(x, h0), wrt, grads)

    return forward, forward_backward


def flashrnn_runner(cell: str) -> Callable:
    """flashrnn 1.0.8's ``cuda_fused`` backend on our layout. Its GRU takes Wx gates (r, z, n), R gates
    (hn, r, z) and biases (hn, r, z, n): the same cell as ours with R[n] and Wx[hn] left out."""
    flashrnn = flashrnn_pkg.load()
    names = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}

    def run(Wx, R, b, states):
        if cell == "gru":
            Wx, R, b = Wx[:, :, :3], R[[3, 0, 1]], b[[3, 0, 1, 2]]
        all_states, last = flashrnn(Wx.contiguous(), R.contiguous(), b.contiguous(), states.unsqueeze(2),
                                    function=cell, backend="cuda_fused", dtype=names[Wx.dtype])
        return all_states[0], last[:, :, 0]

    return run


def _ours(cell: str) -> Callable:
    import flashrnn_kernels

    def run(Wx, R, b, states):
        return flashrnn_kernels.flashrnn(Wx, R, b, states, cell=cell, backend="fused")

    return run


def _reference(cell: str) -> Callable:
    import flashrnn_kernels

    def run(Wx, R, b, states):
        return flashrnn_kernels.flashrnn(Wx, R, b, states, cell=cell, backend="reference")

    return run


def check(run: Callable, case: common.Case, device: str) -> tuple[float, float]:
    """(forward, gradient) max relative errors of ``run`` against the float64 reference at T <= CHECK_SEQ."""
    small = dataclasses.replace(case, seq=min(case.seq, CHECK_SEQ))
    args, grads = common.cell_inputs(small, device, requires_grad=True)
    if case.cell == "slstm" and args[0].dtype != torch.float32:
        # c, n, m carry exp(-m) of the running maximum m: a loss on them has kinks that rounding of h moves
        # elements across (h itself does not depend on m), so the gradient check loads only h and the last h
        grads = (grads[0], torch.cat([grads[1][:1], torch.zeros_like(grads[1][1:])]))
    h, last = run(*args)
    got = torch.autograd.grad((h, last), args, grads)
    args64 = tuple(a.detach().double().requires_grad_() for a in args)
    out64 = _reference(case.cell)(*args64)
    grads64 = torch.autograd.grad(out64, args64, tuple(g.double() for g in grads))
    fwd_err = max(common.relative_error(a, e) for a, e in zip((h, last), out64))
    grad_err = max(common.relative_error(a, e) for a, e in zip(got, grads64))
    return fwd_err, grad_err


def run_job(job: dict, opts: dict) -> dict:
    """Measure one implementation on one case: forward and forward+backward (plus first call and check)."""
    case, impl = common.Case(**job["case"]), job["impl"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    errors: list[str] = []
    result: dict = {"errors": errors}
    torch.manual_seed(job["seed"])
    run = None
    if impl in TORCH_IMPLS:
        input_size = 8 if impl.endswith("_in8") else case.hidden
        fns = common.attempt(f"{impl} build", lambda: torch_callables(
            case.cell, case.hidden, input_size, case.batch, case.seq, common.DTYPES[impl.split("_")[1]],
            torch.device(device)), errors)
    else:
        if impl == "ours":
            run = _reference(case.cell) if opts["stand_in"] else _ours(case.cell)
        else:
            run = common.attempt(f"{impl} import", lambda: flashrnn_runner(case.cell), errors)
        args = common.attempt(f"{impl} inputs", lambda: common.cell_inputs(case, device, requires_grad=True), errors)
        fns = common.grad_closures(run, *args) if run is not None and args is not None else None
    if fns is None:
        return result
    return common.measure_directions(result, impl, fns, first_call=job["first_call"],
                                     check=(lambda: check(run, case, device)) if job["check"] else None,
                                     budget_ms=opts["budget_ms"])


# ---------------------------------------------------------------------------------------------- parent side


def _job(impl: str, case: common.Case, *, check: bool = False, first_call: bool = False) -> dict:
    return {"impl": impl, "case": dataclasses.asdict(case), "check": check, "first_call": first_call,
            "seed": len(impl) * 1000 + case.batch + case.seq + case.head_dim + CELLS.index(case.cell)}


def plan_jobs(args: argparse.Namespace) -> tuple[list[common.Case], list[dict]]:
    """The cases and the jobs measuring them (a torch anchor of one hidden size is measured once per cell)."""
    cases = [common.Case(cell, args.batch, args.seq, dh, nh, dt) for cell in args.cells for dt in args.dtypes
             for dh, nh in args.shapes]
    jobs: list[dict] = []
    anchor_keys: set[tuple] = set()
    for case in cases:
        key = (case.cell, case.hidden)
        if "cudnn" in args.impls and case.cell in TORCH_MODULES and key not in anchor_keys:
            anchor_keys.add(key)
            jobs += [_job(impl, common.Case(case.cell, case.batch, case.seq, case.hidden, 1, impl.split("_")[1]))
                     for impl in TORCH_IMPLS]
    if "ours" in args.impls:
        jobs += [_job("ours", case, check=True, first_call=True) for case in cases]
    if "flashrnn" in args.impls:
        jobs += [_job("flashrnn", case, first_call=True) for case in cases
                 if case.cell in FLASHRNN_CELLS and (case.head_dim, case.num_heads) in args.flashrnn_shapes
                 and case.dtype in args.flashrnn_dtypes]
    return cases, jobs


def build_rows(cases: list[common.Case], jobs: list[dict], results: dict[int, dict]) -> list[dict]:
    """One wide row per (case, direction): every implementation's time, errors, best anchor, targets."""
    found: dict[tuple, dict] = {}
    for index, job in enumerate(jobs):
        c = job["case"]
        key = (job["impl"], c["cell"]) + ((c["head_dim"] * c["num_heads"],) if job["impl"] in TORCH_IMPLS
                                          else (c["head_dim"], c["num_heads"], c["dtype"]))
        found[key] = results.get(index, {"errors": ["pending"]})
    impls = ("ours", "flashrnn", *TORCH_IMPLS)
    rows = []
    for case in cases:
        for direction in common.DIRECTIONS:
            row: dict = {"cell": case.cell, "dtype": case.dtype, "B": case.batch, "T": case.seq,
                         "DH": case.head_dim, "NH": case.num_heads, "direction": direction}
            errors, anchors = [], {}
            for impl in impls:
                key = (impl, case.cell) + ((case.hidden,) if impl in TORCH_IMPLS
                                           else (case.head_dim, case.num_heads, case.dtype))
                res = found.get(key)
                if res is None:
                    continue
                # cuDNN expresses only a single head (NH=1); with NH > 1 it solves a larger, dense problem.
                common.add_result(row, impl, res, direction, errors, anchors,
                                  is_anchor=impl != "ours" and (impl not in TORCH_IMPLS or case.num_heads == 1))
            common.rank_anchors(row, anchors)
            common.judge_targets(row, TARGETS_MS.get((case.cell, case.head_dim, case.num_heads), {}).get(direction),
                                 SPEEDUP_TARGET)
            row["errors"] = "; ".join(sorted(set(errors)))
            rows.append(row)
    return rows


NOTES = (
    "Median milliseconds over CUDA-event-timed calls after warm-up. `fwd` runs under torch.no_grad "
    "(inference); `fwd+bwd` is a forward with autograd plus torch.autograd.grad of h and the last states "
    "(random upstream gradients) with respect to every input and weight.",
    "`ours` = flashrnn_kernels.flashrnn(..., cell=..., backend=\"fused\"); `ours_first_s` = its first call in the "
    "process (plan + compile). `*_err` = max relative error (max |diff| / max |ref|) against the float64 "
    f"reference at T={CHECK_SEQ}, same B and shape: fwd rows h and last states, fwd+bwd rows the gradients of "
    "Wx, R, b and the initial states. Inputs: R ~ N(0, 1/DH) (Elman: half that standard deviation), Wx ~ N(0, 1), "
    "b ~ N(0, 0.25); sLSTM's initial normaliser n >= 1.",
    "cuDNN = torch.nn.GRU (GRU) or torch.nn.RNN(tanh) (Elman), one layer, batch_first, flattened weights, hidden = "
    "NH*DH in the dtype of its column, input_size = hidden (its own input GEMM included); `cudnn_fp16_in8` uses "
    "input_size = 8, almost only the recurrence. cuDNN counts as an anchor only for NH = 1 (it cannot express "
    "block-diagonal heads). `flashrnn` = the flashrnn 1.0.8 package called with backend cuda_fused: its sLSTM "
    "runs fused, its GRU falls back to its per-step kernels. It is timed on the same inputs converted to its "
    "layout (its GRU leaves out our blocks R[n] and Wx[hn]; its sLSTM clamps the normaliser at 1), so its error "
    "against our reference is not reported.",
    f"Targets: GRU DH=768 NH=1 fwd <= 1.5 ms, fwd+bwd <= 5 ms; speedup = best anchor / ours >= {SPEEDUP_TARGET}.",
)


def _parse_shapes(text: str) -> tuple[tuple[int, int], ...]:
    return common.parse_shapes(text, SHAPES)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes; on a CPU-only torch a plumbing check")
    p.add_argument("--cells", type=common.parse_names(CELLS), default=CELLS)
    p.add_argument("--dtypes", type=common.parse_names(tuple(common.DTYPES)), default=("bf16", "fp16"))
    p.add_argument("--shapes", type=_parse_shapes, default=SHAPES, help="DH:NH pairs, e.g. 64:12,768:1")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--flashrnn-shapes", type=_parse_shapes, default=None, help="default 64:12,768:1 ('none' to skip)")
    p.add_argument("--flashrnn-dtypes", type=common.parse_names(tuple(common.DTYPES)), default=("bf16",))
    impls = ("ours", "cudnn", "flashrnn")
    p.add_argument("--impls", type=common.parse_names(impls), default=impls)
    p.add_argument("--budget-ms", type=float, default=1500.0, help="timed milliseconds per measurement")
    p.add_argument("--job-timeout-s", type=float, default=240.0, help="kill a measurement running longer")
    p.add_argument("--budget-s", type=float, default=None, help="skip jobs not started after this many seconds")
    p.add_argument("--name", default=None, help="results file stem (default fused_cells[_quick])")
    p.add_argument("--worker", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        return common.worker_loop(args.worker[0], args.worker[1], run_job)
    cpu = common.plumbing_check("bench_cells", args.quick, "the pure-PyTorch reference")
    if args.quick:
        quick = {"--dtypes": ("bf16",), "--seq": 256, "--budget-ms": 300.0, "--shapes": ((64, 12), (768, 1))}
        if cpu:  # tiny sizes: the pure-PyTorch reference stands in for the kernel, nothing here is a measurement
            quick.update({"--seq": 8, "--batch": 2, "--budget-ms": 5.0, "--shapes": ((16, 2), (32, 1))})
        common.apply_quick(args, argv, quick)
    if args.flashrnn_shapes is None:
        args.flashrnn_shapes = () if args.quick or cpu else ((64, 12), (768, 1))
    name = args.name or ("fused_cells_plumbing" if cpu else "fused_cells_quick" if args.quick else "fused_cells")
    if cpu:
        if "--impls" not in {a.split("=")[0] for a in argv}:
            args.impls = ("ours",)  # cuDNN anchors need CUDA
    title = "Fused GRU, sLSTM and Elman" + (common.PLUMBING_TITLE if cpu else "")
    opts = {"budget_ms": args.budget_ms, "stand_in": cpu}
    cases, jobs = plan_jobs(args)

    def save(results: dict[int, dict]) -> str:
        return common.write_results(name, build_rows(cases, jobs, results), title=title, notes=NOTES)

    print(f"== {len(cases)} cases, {len(jobs)} jobs", flush=True)
    results = common.run_isolated(os.path.abspath(__file__), jobs, opts, job_timeout_s=args.job_timeout_s,
                                  budget_s=args.budget_s, on_result=save)
    markdown = save(results)
    rows = build_rows(cases, jobs, results)
    plot_errors: list[str] = []
    for cell in args.cells:
        for direction in common.DIRECTIONS:
            stem = f"{name}_{cell}_{direction.replace('+', '')}"
            title = f"{cell} {direction}, B={args.batch}, T={args.seq}{' (CPU plumbing check)' if cpu else ''}"
            long_rows = common.timing_series(rows, "DH:NH", cell=cell, direction=direction)
            common.attempt(f"plot {stem}", lambda stem=stem, long_rows=long_rows, title=title: common.plot(
                stem, long_rows, x="DH:NH", y="ms", series="impl", title=title, logy=True), plot_errors)
    print(f"results in {common.results_dir()}" + (f"; plots failed: {plot_errors}" if plot_errors else ""))
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
