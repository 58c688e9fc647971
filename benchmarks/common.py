"""Shared benchmark plumbing: timing, machine description, result tables, plots and inputs.

Results go to ``benchmarks/results/`` unless the environment variable ``BENCH_RESULTS_DIR`` names
another directory. Scripts print the markdown that :func:`write_results` returns.
"""

from __future__ import annotations

import csv
import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

DEFAULT_RESULTS_DIR = Path(__file__).resolve().parent / "results"


def results_dir() -> Path:
    """The directory results are written to (``BENCH_RESULTS_DIR`` or ``benchmarks/results``), created."""
    path = Path(os.environ.get("BENCH_RESULTS_DIR") or DEFAULT_RESULTS_DIR)
    path.mkdir(parents=True, exist_ok=True)
    return path


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
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if by_series:
        ax.legend(fontsize="small")
    path = results_dir() / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


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
