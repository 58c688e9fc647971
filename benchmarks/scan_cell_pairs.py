"""The fused minGRU / minLSTM kernels of several checkouts side by side: forward alone, backward alone and the
forward + backward pair, so that a slower pair can be traced to a commit (git worktree or `git archive` trees).

Each round runs every tree in a worker process of its own (common.run_isolated; that tree's packages first on
sys.path), the trees taking turns; a tree's run times, per case, the forward (no grad), the backward (autograd.grad
of one saved forward, retain_graph) and the pair (autograd.grad of a fresh forward) as the median of
CUDA-event-timed calls ("ev": what a caller sees), and the pair and the forward in CUDA graphs of 10 calls ("graph":
device time). Inputs are random (pre-activations from randn), fresh per tree.

Usage: python benchmarks/scan_cell_pairs.py --trees OLD NEW [--rounds 2] [--cases min_gru:1x65536x64:bfloat16,...]
                                           [--name scan_cell_pairs] [--note TEXT]
       python benchmarks/scan_cell_pairs.py --table LOG [--note TEXT]   (the table of a saved log of such a run)
Writes {name}.log, .csv and .md to BENCH_RESULTS_DIR (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import common

CASES = [("min_lstm", (8, 4096, 1536), "float32"), ("min_lstm", (8, 4096, 1536), "bfloat16"),
         ("min_gru", (8, 4096, 1536), "bfloat16"), ("min_lstm", (8, 256, 1536), "float32"),
         ("min_gru", (1, 65536, 64), "bfloat16")]
CASES_NOTE = ("ev: median of CUDA-event-timed calls; graph: device time per call in CUDA graphs of 10 calls; bwd: "
              "autograd.grad of one saved forward; pair: a fresh forward and its backward")
LINE = re.compile(r"round (\d+) tree (\S+) (RESULT|FAILED) (.*)")


def parse_cases(text: str) -> list[tuple[str, tuple[int, ...], str]]:
    """Cases from "cell:BxTxD:dtype,...", e.g. "min_gru:1x65536x64:bfloat16"."""
    cases = []
    for item in text.split(","):
        parts = item.split(":")
        if (len(parts) != 3 or parts[0] not in ("min_gru", "min_lstm") or parts[2] not in ("float32", "bfloat16",
                                                                                          "float16")
                or not re.fullmatch(r"[1-9]\d*x[1-9]\d*x[1-9]\d*", parts[1])):
            raise ValueError(f"bad case {item!r}: give cell:BxTxD:dtype, cell min_gru or min_lstm, dtype float32, "
                             "bfloat16 or float16")
        cases.append((parts[0], common.parse_dims(parts[1]), parts[2]))
    return cases


def measure_tree(cases: list) -> dict[str, float | str]:
    """This process's checkout: every case's times in ms (or the error that stopped one)."""
    import torch
    from flashrnn_kernels.scan import min_gru_scan, min_lstm_scan

    out: dict[str, float | str] = {}
    gen = torch.Generator(device="cuda").manual_seed(1)
    for cell, shape, dtype in cases:
        fn = min_lstm_scan if cell == "min_lstm" else min_gru_scan

        def randn():
            return torch.randn(*shape, device="cuda", generator=gen).to(getattr(torch, dtype))
        xs = [randn().requires_grad_() for _ in range(3 if cell == "min_lstm" else 2)]
        dy, kept = randn(), []

        def forward():
            with torch.no_grad():
                return fn(*xs)

        def pair():
            return torch.autograd.grad(fn(*xs), xs, dy)

        def kept_backward():
            # the kept forward's autograd graph holds the AccumulateGrad nodes of xs, bound to the stream they were
            # made on, and while they live torch cannot capture a backward into xs on another stream ("operation
            # would make the legacy stream depend on a capturing blocking stream"): made after the captures
            if not kept:
                kept.append(fn(*xs))
            return torch.autograd.grad(kept[0], xs, dy, retain_graph=True)
        key = f"{cell} {'x'.join(map(str, shape))} {dtype}"
        for name, run, timer in (("fwd ev", forward, common.time_cuda), ("pair ev", pair, common.time_cuda),
                                 ("pair graph", pair, common.time_graph), ("fwd graph", forward, common.time_graph),
                                 ("bwd ev", kept_backward, common.time_cuda)):
            try:
                out[f"{key} {name}"] = timer(run)
            except Exception as exc:  # a failed measurement is a row, not the end of the run
                out[f"{key} {name}"] = f"{type(exc).__name__}: {exc}"[:80]
    return out


def run_job(job: dict, opts: dict) -> dict[str, float | str]:
    """One worker's job: the tree at job["path"] measured."""
    sys.path.insert(0, job["path"])
    return measure_tree([(cell, tuple(shape), dtype) for cell, shape, dtype in job["cases"]])


def table(lines: list[str]) -> list[dict]:
    """Rows (one per measurement, a column per tree: its medians over rounds in us) from a log's lines; a tree none of
    whose rounds measured a row reads "failed" there."""
    times: dict[str, dict[str, list[float]]] = {}
    trees: list[str] = []
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        tree, result = m.group(2), json.loads(m.group(4)) if m.group(3) == "RESULT" else {}
        trees += [tree] if tree not in trees else []
        for key, value in result.items():
            times.setdefault(key, {}).setdefault(tree, []).extend([value] if isinstance(value, float) else [])
    return [{"measurement": key, **{t: round(1000 * statistics.median(v[t]), 1) if v.get(t) else "failed"
                                    for t in trees}} for key, v in times.items()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", help="checkouts to compare (each holding flashrnn_kernels/)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cases", help="cell:BxTxD:dtype,... (default: CASES)")
    parser.add_argument("--name", default="scan_cell_pairs")
    parser.add_argument("--table", help="tabulate this saved log instead of measuring")
    parser.add_argument("--note", action="append", default=[], help="a paragraph for the table (what the trees are)")
    parser.add_argument("--job-timeout-s", type=float, default=600.0, help="a tree's run is stopped after this")
    parser.add_argument("--worker", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        cases = parse_cases(args.cases) if args.cases else CASES
    except ValueError as exc:
        parser.error(str(exc))
    if args.worker:
        sys.exit(common.worker_loop(args.worker[0], args.worker[1], run_job))
    if args.table:
        lines = Path(args.table).read_text().splitlines()
        log = args.table
    else:
        if not args.trees:
            parser.error("give --trees (or --table LOG)")
        common.require_cuda("scan_cell_pairs")
        lines, log = [f"measured on: {common.machine_line()}"], common.results_dir() / f"{args.name}.log"
        log.write_text(lines[0] + "\n")
        for r in range(1, args.rounds + 1):
            for tree in args.trees:
                job = {"path": str(Path(tree).resolve()), "cases": cases}
                result = common.run_isolated(str(Path(__file__).resolve()), [job], {},
                                             job_timeout_s=args.job_timeout_s)[0]
                outcome = (f"FAILED {'; '.join(result['errors'])}" if "errors" in result
                           else f"RESULT {json.dumps(result)}")
                lines.append(f"round {r} tree {Path(job['path']).name} {outcome}")
                with log.open("a") as out:  # line by line: a run cut short keeps its rounds so far (--table)
                    out.write(lines[-1] + "\n")
                print(lines[-1][:200], flush=True)
    measured = next((x for x in lines if x.startswith("measured on: ")), "measured on: (not in the log)")
    notes = [f"M{measured[1:]}; the table from {Path(log).name} ({CASES_NOTE}).", *args.note]
    print(common.write_results(args.name, table(lines), title="minGRU / minLSTM fused kernels of several checkouts: "
                               "forward, backward and pair (us, median over rounds)", notes=notes))


if __name__ == "__main__":
    main()
