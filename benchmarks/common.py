"""Shared benchmark plumbing: timing, machine description, result tables, plots and inputs.

Results go to ``benchmarks/results/`` unless the environment variable ``BENCH_RESULTS_DIR`` names
another directory. Scripts print the markdown that :func:`write_results` returns.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import faulthandler
import itertools
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

DEFAULT_RESULTS_DIR = Path(__file__).resolve().parent / "results"


def results_dir() -> Path:
    """The directory results are written to (``BENCH_RESULTS_DIR`` or ``benchmarks/results``), created."""
    path = Path(os.environ.get("BENCH_RESULTS_DIR") or DEFAULT_RESULTS_DIR)
    path.mkdir(parents=True, exist_ok=True)
    return path


def require_cuda(script: str) -> None:
    """Exit with a message naming `script` where torch sees no CUDA GPU (the GPU-only benchmarks and probes)."""
    if not torch.cuda.is_available():
        raise SystemExit(f"{script}: CUDA is not available (torch.cuda.is_available() is False); it needs an NVIDIA "
                         f"GPU and a CUDA build of torch")


PLUMBING_TITLE = " — PLUMBING CHECK on CPU, stand-in implementation, not measurements"
"""Appended to the title of tables that a CPU plumbing check writes."""


def plumbing_check(script: str, quick: bool, stand_in: str) -> bool:
    """Whether this run checks a benchmark's table plumbing on a CPU instead of measuring.

    With a CUDA GPU: False. Without one, --quick (`quick`) is such a check, with `stand_in` (what runs in place of the
    kernel, named in the message) at tiny sizes and the results in a temporary folder unless ``BENCH_RESULTS_DIR``
    names one; any other run exits with a message naming `script`.
    """
    if torch.cuda.is_available():
        return False
    if not quick:
        raise SystemExit(f"{script}: CUDA is not available (torch.cuda.is_available() is False); the benchmark needs "
                         f"a CUDA GPU. Use --quick for a CPU check of the table plumbing.")
    print(f"{script}: CUDA is not available, so nothing is measured. Checking the table plumbing with {stand_in} "
          f"standing in for the fused kernel at tiny sizes.", flush=True)
    if not os.environ.get("BENCH_RESULTS_DIR"):
        os.environ["BENCH_RESULTS_DIR"] = tempfile.mkdtemp(prefix=f"{script}_plumbing_")
    return True


def time_cuda(fn: Callable[[], Any], *, warmup: int = 10, repeat: int = 50) -> float:
    """Median milliseconds of ``fn()`` over ``repeat`` calls after ``warmup`` untimed calls.

    On a CUDA build with a visible GPU each call is bracketed by a pair of CUDA events on the current
    stream and the device is synchronised once at the end; otherwise ``time.perf_counter`` times each call.
    """
    if warmup < 0 or repeat < 1:
        raise ValueError(f"time_cuda needs warmup >= 0 and repeat >= 1, got warmup={warmup}, repeat={repeat}")
    for _ in range(warmup):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        pairs = []
        for _ in range(repeat):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in pairs)
    return time_host(fn, repeat=repeat)


def time_graph(fn: Callable[[], Any], *, calls: int = 10, repeat: int = 5) -> float:
    """Median device milliseconds per call of ``fn()``: ``calls`` calls captured into one CUDA graph, the graph
    replayed ``repeat`` times between CUDA events. Host work (Python, argument handling, launch calls) is not in
    this time, so it is the measure of a kernel's own speed; ``time_cuda`` gives the time a caller sees."""
    if calls < 1 or repeat < 1:
        raise ValueError(f"time_graph needs calls >= 1 and repeat >= 1, got calls={calls}, repeat={repeat}")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    ms = statistics.median(start.elapsed_time(end) for start, end in pairs) / calls
    del graph
    return ms


def time_host(fn: Callable[[], Any], *, repeat: int = 3) -> float:
    """Median wall-clock milliseconds of ``repeat`` calls of ``fn()`` (host work, no warm-up)."""
    times = []
    for _ in range(repeat):
        begin = time.perf_counter()
        fn()
        times.append((time.perf_counter() - begin) * 1e3)
    return statistics.median(times)


def time_once(fn: Callable[[], Any]) -> float:
    """Wall-clock milliseconds of one call of ``fn()`` including device completion (e.g. plan + compile)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    begin = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - begin) * 1e3


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    """One line naming the device (GPU or CPU model), torch / CuPy / CUDA versions and the UTC date."""
    if torch.cuda.is_available():
        device = torch.cuda.get_device_name()
    else:
        device = f"CPU {_cpu_model()} (no CUDA)"
    try:
        import cupy

        cupy_version = cupy.__version__
    except Exception as exc:  # an absent or broken CuPy is reported, not fatal
        cupy_version = f"unavailable ({type(exc).__name__})"
    cuda_version = torch.version.cuda or "none"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"{device} · torch {torch.__version__} · CuPy {cupy_version} · CUDA {cuda_version} · {date}"


def _columns(rows: Sequence[dict]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    return columns


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if value != value:  # NaN
            return "nan"
        if value == 0 or 1e-3 <= abs(value) < 1e5:
            return f"{value:.4g}"
        return f"{value:.3e}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    """A markdown table of ``rows`` (dicts; missing keys become empty cells)."""
    columns = list(columns) if columns is not None else _columns(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(col)) for col in columns) + " |")
    return "\n".join(lines)


def write_results(name: str, rows: list[dict], *, title: str, notes: Sequence[str] = ()) -> str:
    """Write ``<results>/<name>.csv`` and ``<name>.md`` and return the markdown.

    The markdown starts with ``title``, the :func:`machine_line`, then ``notes`` (one paragraph each)
    and the table.
    """
    if not rows:
        raise ValueError(f"write_results({name!r}) got no rows; pass at least one result row")
    out = results_dir()
    columns = _columns(rows)
    with open(out / f"{name}.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    parts = [f"## {title}", f"Machine: {machine_line()}", *notes, markdown_table(rows, columns)]
    markdown = "\n\n".join(parts) + "\n"
    (out / f"{name}.md").write_text(markdown, encoding="utf-8")
    return markdown


def plot(
    name: str,
    rows: list[dict],
    *,
    x: str,
    y: str,
    series: str,
    title: str,
    logx: bool = False,
    logy: bool = False,
) -> Path:
    """Line plot of ``y`` against ``x``, one line per distinct ``series`` value; saved as ``<name>.png``.

    Rows whose ``y`` is missing or not a number (failed runs) are left out. ``x`` values that are not
    numbers are placed at evenly spaced positions in order of first appearance, labelled as given.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    usable = [r for r in rows if isinstance(r.get(y), (int, float)) and r.get(y) == r.get(y)]
    labels: list[Any] = []
    for row in rows:
        if row.get(x) not in labels:
            labels.append(row.get(x))
    numeric_x = all(isinstance(v, (int, float)) for v in labels)
    fig, ax = plt.subplots(figsize=(8, 5))
    by_series: dict[Any, list[dict]] = {}
    for row in usable:
        by_series.setdefault(row.get(series), []).append(row)
    for key, group in by_series.items():
        if numeric_x:
            points = sorted((r[x], r[y]) for r in group)
        else:
            points = sorted((labels.index(r.get(x)), r[y]) for r in group)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=str(key))
    if not numeric_x:
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels([str(v) for v in labels])
    if logx:
        ax.set_xscale("log", base=2)
    if numeric_x and labels:
        ax.set_xticks(sorted(labels))
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title, fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    if by_series:
        ax.legend(fontsize="small")
    path = results_dir() / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def grad_closures(run: Callable[..., Any], args: tuple, grads: tuple) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """``(forward, forward_backward)``: ``run(*args)`` under torch.no_grad, and ``run(*args)`` with autograd plus
    the gradients of ``args`` for the upstream ``grads``."""
    def forward() -> Any:
        with torch.no_grad():
            return run(*args)

    def forward_backward() -> Any:
        return torch.autograd.grad(run(*args), args, grads)

    return forward, forward_backward


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DIRECTIONS = ("fwd", "fwd+bwd")


@dataclass(frozen=True)
class Case:
    """One recurrent problem: ``cell`` over ``batch`` x ``seq`` steps of ``num_heads`` heads of ``head_dim``
    in ``dtype``."""

    cell: str
    batch: int
    seq: int
    head_dim: int
    num_heads: int
    dtype: str

    @property
    def hidden(self) -> int:
        return self.head_dim * self.num_heads


def cell_inputs(case: Case, device: str, *, requires_grad: bool) -> tuple[tuple[torch.Tensor, ...], tuple]:
    """Random ``(Wx, R, b, states)`` in the head-wise layout and upstream gradients ``(grad_h, grad_last)``.

    Scales as in the GPU tests: R ~ N(0, 1/DH) (Elman: half that standard deviation); sLSTM's initial
    normaliser n >= 1.
    """
    from flashrnn_kernels.cells import get_cell

    spec = get_cell(case.cell)
    G, S = spec.gate_count, spec.state_count
    dtype = DTYPES[case.dtype]
    B, T, NH, DH = case.batch, case.seq, case.num_heads, case.head_dim
    r_scale = (0.5 if case.cell == "elman" else 1.0) * DH**-0.5
    states = torch.randn(S, B, NH, DH, device=device) * 0.5
    if case.cell == "slstm":  # states h, c, n, m
        states[2] = 1.0 + states[2].abs()

    def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return randn(*shape, dtype=dtype, device=device, scale=scale, requires_grad=requires_grad)

    args = (rand(B, T, G, NH, DH), rand(G, NH, DH, DH, scale=r_scale), rand(G, NH, DH, scale=0.5),
            states.to(dtype).requires_grad_(requires_grad))
    grads = (randn(B, T, NH, DH, dtype=dtype, device=device),
             randn(S, B, NH, DH, dtype=dtype, device=device))
    return args, grads


def measure_directions(result: dict, impl: str, fns: Sequence[Callable[[], Any]], *, first_call: bool,
                       check: Callable[[], tuple[float, float]] | None, budget_ms: float) -> dict:
    """Fill ``result`` (its ``"errors"`` list included) for the ``(forward, forward_backward)`` closures ``fns``:
    each direction's first-call seconds when ``first_call``, the ``(fwd, fwd+bwd)`` errors of ``check()``, and
    the median milliseconds. A direction whose first call failed is not retried (a failing build can take a
    minute), and the check needs the forward+backward to have run."""
    errors = result["errors"]
    failed = set()
    if first_call:
        for direction, fn in zip(DIRECTIONS, fns):
            result[f"{direction}_first_s"] = attempt(
                f"{impl} {direction} first call", lambda fn=fn: time_once(fn) / 1e3, errors)
            if result[f"{direction}_first_s"] is None:
                failed.add(direction)
    if check is not None and "fwd+bwd" not in failed:
        errs = attempt(f"{impl} check", check, errors)
        if errs is not None:
            result["fwd_err"], result["fwd+bwd_err"] = errs
    for direction, fn in zip(DIRECTIONS, fns):
        if direction not in failed:
            result[f"{direction}_ms"] = attempt(
                f"{impl} {direction}", lambda fn=fn: measure(fn, budget_ms=budget_ms), errors)
    return result


def add_result(row: dict, impl: str, result: dict, direction: str, errors: list[str], anchors: dict[str, float],
               *, is_anchor: bool) -> None:
    """Copy ``impl``'s ``direction`` columns from its job ``result`` into ``row`` (time; first call and error for
    ours and flashrnn), its errors into ``errors`` and, when it is an anchor of the row, its time into ``anchors``."""
    ms = result.get(f"{direction}_ms")
    row[f"{impl}_ms"] = ms
    if impl in ("ours", "flashrnn"):
        row[f"{impl}_first_s"] = result.get(f"{direction}_first_s")
        row[f"{impl}_err"] = result.get(f"{direction}_err")
    errors += [f"{impl}: {e}" for e in result.get("errors", [])]
    if is_anchor and ms is not None:
        anchors[impl] = ms


def rank_anchors(row: dict, anchors: dict[str, float]) -> None:
    """The fastest of ``anchors`` (name -> ms) as the row's best anchor, and its speedup over ``row["ours_ms"]``."""
    if anchors:
        best = min(anchors, key=anchors.get)
        ours = row.get("ours_ms")
        row["best_anchor"], row["best_anchor_ms"] = best, anchors[best]
        row["speedup"] = anchors[best] / ours if ours else None


def judge_targets(row: dict, limit_ms: float | None, speedup_target: float) -> None:
    """pass / FAIL / n/a columns: ``ours_ms`` against ``limit_ms`` (when there is one) and the speedup target."""
    ours = row.get("ours_ms")
    if limit_ms is not None:
        row["target_ms"] = limit_ms
        row["target"] = "n/a" if ours is None else ("pass" if ours <= limit_ms else "FAIL")
    speedup = row.get("speedup")
    row[f"speedup>={speedup_target}"] = "n/a" if speedup is None else (
        "pass" if speedup >= speedup_target else "FAIL")


def timing_series(rows: Sequence[dict], x: str, **match: Any) -> list[dict]:
    """The ``*_ms`` columns of the fused benchmarks' rows whose fields equal ``match``, one record per (series, x)
    for ``plot``: series "<impl> <dtype>" (cuDNN's columns name their dtype already), x the row's ``x`` field, or
    "DH:NH" for the head shape; the first row of each pair wins."""
    out, seen = [], set()
    for row in rows:
        if any(row[key] != value for key, value in match.items()):
            continue
        for key, value in row.items():
            if not key.endswith("_ms") or key in ("best_anchor_ms", "target_ms") or value is None:
                continue
            impl = key[: -len("_ms")]
            series = impl.replace("_", " ") if impl.startswith("cudnn") else f"{impl} {row['dtype']}"
            xval = f"{row['DH']}:{row['NH']}" if x == "DH:NH" else row[x]
            if (series, xval) not in seen:
                seen.add((series, xval))
                out.append({x: xval, "ms": value, "impl": series})
    return out


def parse_names(choices: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: comma-separated names, each one of ``choices``."""
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(v for v in text.split(",") if v)
        bad = [v for v in names if v not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown value(s) {bad}; choose from {list(choices)}")
        return names

    return parse


def apply_quick(args: argparse.Namespace, argv: Sequence[str], settings: dict[str, Any]) -> None:
    """Set each ``--flag: value`` of ``settings`` on ``args`` unless the flag was given on the command line."""
    given = {a.split("=")[0] for a in argv}
    for flag, value in settings.items():
        if flag not in given:
            setattr(args, flag[2:].replace("-", "_"), value)


def parse_shapes(text: str, every: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """``DH:NH`` pairs from ``'64:12,768:1'``; ``'all'`` gives ``every``, ``''`` or ``'none'`` nothing."""
    if text.strip().lower() in ("", "none"):
        return ()
    if text.strip().lower() == "all":
        return every
    try:
        return tuple((int(dh), int(nh)) for dh, nh in (item.split(":") for item in text.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shapes must look like '64:12,768:1' (DH:NH pairs) or 'all', got {text!r}")


def parse_dims(text: str, count: int = 3) -> tuple[int, ...]:
    """``'8x4096x1536'`` -> ``(8, 4096, 1536)``: ``count`` positive integers joined by ``x`` (an argparse type)."""
    try:
        dims = tuple(int(v) for v in text.split("x"))
    except ValueError:
        dims = ()
    if len(dims) != count or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"expected {count} positive integers joined by 'x' (e.g. 8x4096x1536), "
                                         f"got {text!r}")
    return dims


def format_dims(dims: Sequence[int]) -> str:
    """``(8, 4096, 1536)`` -> ``'8x4096x1536'``: the inverse of :func:`parse_dims`."""
    return "x".join(map(str, dims))


def parse_dims_list(text: str) -> list[tuple[int, ...]]:
    """Comma-separated :func:`parse_dims`: ``'1x65536x64,8x4096x1536'`` (an argparse type)."""
    return [parse_dims(item) for item in text.split(",")]


def probe_source(source: str, patches: Sequence[tuple[str, str]]) -> str:
    """A kernel source for a probe build: each (anchor, text) of `patches` inserts text before its anchor, which must
    occur exactly once (a changed kernel source fails loudly instead of building an unpatched probe)."""
    for anchor, text in patches:
        if source.count(anchor) != 1:
            raise RuntimeError(f"the probe's anchor {anchor!r} occurs {source.count(anchor)} times in the source")
        source = source.replace(anchor, text + anchor)
    return source


_NUDGES = itertools.count(1)


def distinct_plan(plan: Any) -> Any:
    """`plan` (a dataclass with an `estimate_ns`) as a plan of its own for a probe, since kernels and launches are
    cached per plan: its estimate_ns raised by a count that no other call returns, so that two probes of one plan (a
    cap of 1 and one of 2, windows of 33 and 66) never share a key."""
    return dataclasses.replace(plan, estimate_ns=plan.estimate_ns + next(_NUDGES))


PROBE_PATCHES: dict = {}
"""plan -> the (anchor, text) patches of its probe build (probe_plan)."""


def probe_plan(plan: Any, patches: Sequence[tuple[str, str]] = ()) -> Any:
    """`plan` as a plan of its own (distinct_plan), built from its kernel source with `patches` (probe_source; none:
    the shipped source) wherever its class's `source` is probe_build_source."""
    probe = distinct_plan(plan)
    if patches:
        PROBE_PATCHES[probe] = list(patches)
    return probe


def probe_build_source(shipped: Callable[[Any], str]) -> Callable[[Any], str]:
    """A `source` for a plan class whose shipped one is `shipped`: the plans of probe_plan get their patched source
    (a script sets, e.g., ScanPlan.source = probe_build_source(ScanPlan.source))."""
    def source(plan: Any) -> str:
        text = shipped(plan)
        return probe_source(text, PROBE_PATCHES[plan]) if plan in PROBE_PATCHES else text
    return source


def randn(*shape: int, dtype: torch.dtype, device: str | torch.device, scale: float = 1.0,
          requires_grad: bool = False) -> torch.Tensor:
    """Random normal tensor times ``scale`` (never zeros), created in float32 then cast to ``dtype``."""
    tensor = (torch.randn(*shape, device=device, dtype=torch.float32) * scale).to(dtype)
    return tensor.requires_grad_(requires_grad)


def poison_(tensor: torch.Tensor) -> torch.Tensor:
    """Fill ``tensor`` in place with NaN (floating types) so unwritten outputs show up; returns it."""
    if not tensor.is_floating_point():
        raise TypeError(f"poison_ needs a floating-point tensor, got dtype {tensor.dtype}")
    with torch.no_grad():
        tensor.fill_(float("nan"))
    return tensor


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| / max |expected|, computed in float64 (NaN anywhere gives NaN)."""
    a = actual.detach().to(torch.float64).cpu()
    e = expected.detach().to(torch.float64).cpu()
    if a.shape != e.shape:
        raise ValueError(f"relative_error needs equal shapes, got {tuple(a.shape)} and {tuple(e.shape)}")
    denom = e.abs().max().item()
    diff = (a - e).abs().max().item()
    return diff / denom if denom > 0 else diff


def measure(fn: Callable[[], Any], *, budget_ms: float = 1500.0, max_repeat: int = 50) -> float:
    """Median milliseconds of ``fn()`` with the repeat count chosen so the timed calls take about ``budget_ms``.

    One untimed probe call sizes the run (at least 3, at most ``max_repeat`` timed calls, a fifth as
    many warm-up calls), so slow anchors cost seconds rather than minutes.
    """
    probe = time_once(fn)
    repeat = int(min(max_repeat, max(3, budget_ms / max(probe, 1e-3))))
    return time_cuda(fn, warmup=min(10, max(1, repeat // 5)), repeat=repeat)


def attempt(label: str, fn: Callable[[], Any], errors: list[str]) -> Any:
    """``fn()``, or None after printing its traceback to stderr and appending ``"label: error"`` to ``errors``.

    Benchmarks keep going past a failing implementation and record why it failed in their table.
    """
    try:
        return fn()
    except Exception as exc:  # every failure is reported in the row and the log, then the run continues
        print(f"[{label}] failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        errors.append(f"{label}: {type(exc).__name__}: {message[:160]}")
        return None


def cuda_context_alive() -> bool:
    """False when the CUDA context is unusable (a sticky error such as an illegal address); True on CPU."""
    if not torch.cuda.is_available():
        return True
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return True
    except Exception:  # a sticky CUDA error: only a new process can recover
        traceback.print_exc()
        return False


def worker_loop(spec_path: str, out_path: str, run_job: Callable[[dict, dict], dict]) -> int:
    """Run the jobs listed in ``spec_path`` (JSON ``{"opts": {...}, "jobs": [[id, job], ...]}``) in order.

    Appends one JSON line ``{"start": id}`` before and ``{"done": id, "result": {...}}`` after each job to
    ``out_path``. Returns 3 (so the parent starts a fresh process) as soon as the CUDA context is lost.
    A fatal signal (a crash, or the parent's SIGABRT on a timeout) prints the Python stack to stderr.
    """
    faulthandler.enable()
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    with open(out_path, "a", encoding="utf-8") as out:
        for job_id, job in spec["jobs"]:
            out.write(json.dumps({"start": job_id}) + "\n")
            out.flush()
            errors: list[str] = []
            result = attempt(f"job {job_id}", lambda: run_job(job, spec["opts"]), errors)
            if result is None:
                result = {"errors": errors}
            out.write(json.dumps({"done": job_id, "result": result}) + "\n")
            out.flush()
            if not cuda_context_alive():
                return 3
    return 0


def run_isolated(
    script: str,
    jobs: list[dict],
    opts: dict,
    *,
    job_timeout_s: float,
    budget_s: float | None = None,
    on_result: Callable[[dict[int, dict]], None] | None = None,
) -> dict[int, dict]:
    """Run ``jobs`` in worker processes (``python script --worker SPEC OUT``), restarting after a crash.

    A job that kills its worker, or runs past ``job_timeout_s``, gets an error result and the next
    worker continues with the following job; once ``budget_s`` seconds have passed, jobs not yet
    started are skipped with an error result. ``on_result`` sees all results after each finished job.
    Returns ``{job index: result dict}`` for every job.
    """
    import subprocess
    import tempfile

    results: dict[int, dict] = {}
    begin = time.monotonic()
    pending = list(range(len(jobs)))
    with tempfile.TemporaryDirectory(prefix="bench_jobs_") as tmp:
        attempt_no = 0
        while pending:
            if budget_s is not None and time.monotonic() - begin > budget_s:
                for index in pending:
                    results[index] = {"errors": [f"skipped: time budget of {budget_s:.0f} s used up"]}
                break
            attempt_no += 1
            spec_path, out_path = f"{tmp}/spec{attempt_no}.json", f"{tmp}/out{attempt_no}.jsonl"
            with open(spec_path, "w", encoding="utf-8") as handle:
                json.dump({"opts": opts, "jobs": [[i, jobs[i]] for i in pending]}, handle)
            open(out_path, "w", encoding="utf-8").close()
            proc = subprocess.Popen([sys.executable, script, "--worker", spec_path, out_path])
            current, current_since, consumed, reason = None, time.monotonic(), 0, None
            while True:
                finished = proc.poll() is not None
                with open(out_path, encoding="utf-8") as handle:
                    lines = handle.read().splitlines()
                for line in lines[consumed:]:
                    try:
                        event = json.loads(line)
                    except json.JSONDecodeError:
                        break  # a line still being written; read it on the next poll
                    consumed += 1
                    if "start" in event:
                        current, current_since = event["start"], time.monotonic()
                    else:
                        results[event["done"]] = event["result"]
                        current = None
                        if on_result is not None:
                            on_result(results)
                if finished:
                    reason = f"worker exited with code {proc.returncode}"
                    break
                if current is not None and time.monotonic() - current_since > job_timeout_s:
                    proc.send_signal(signal.SIGABRT)  # the worker's faulthandler prints where it was stuck
                    try:
                        proc.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                    reason = f"timed out after {job_timeout_s:.0f} s (worker aborted)"
                    break
                time.sleep(0.5)
            unresolved = [i for i in pending if i not in results]
            if current is not None and current in unresolved:
                results[current] = {"errors": [f"{reason} during this job; see the log for its traceback"]}
            elif unresolved and proc.returncode not in (3,):
                for index in unresolved:
                    results[index] = {"errors": [f"not run: {reason} before starting it"]}
            if on_result is not None:
                on_result(results)
            pending = [i for i in pending if i not in results]
    return results
