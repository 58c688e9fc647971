"""Scan benchmark: linear_scan, minGRU and minLSTM kernels against the baselines, as bandwidth vs a copy.

Shapes are [B, T, D] (the `shape` column is B x T x D): [8, T, 1536] for T from 256 to 65,536 and the thin
[1, 65536, 64].

Rows: our linear_scan (also under torch.use_deterministic_algorithms, `ours (deterministic)`, whose split lanes run
the plans built to rerun to the bit) and the public accelerated-scan kernels (warp CUDA, Triton) on the same data in
their [B, D, T] layout, forward and forward + backward (each accelerated-scan kernel in its own process: a fault
there costs only its own rows); fused minGRU / minLSTM (forward, forward + backward) against our unfused version
(gates by torch, then linear_scan), the PyTorch log-space form, the sequential reference loop on GPU and CPU (short T
only), and the ops' own CPU path (the chunked scan; problems up to CPU_MAX_ELEMENTS).
Two times per row: `call ms`, the median of CUDA-event-timed single calls (what a caller sees, host work
included), and `ms`, the device time per call from a CUDA graph of repeated calls (no host work: the kernels' own
speed). Bandwidth and the kernel targets use the device time; "faster than the CPU" uses the call time, against the
faster CPU form.
Bandwidth counts each input read once and each output written once, against device-to-device copies measured in
the same run: `% of copy` against one copy of 2 GiB (call time), `% of same-size copy` against a copy that moves the
row's own bytes (half read, half written), timed as the kernels are (device time, CUDA graph). For small problems
(the thin shape moves 25-50 MB) the large copy's bandwidth is out of reach of any kernel, a copy included.
Each measurement's repeat count is cut to about 200 ms of device time, so the default run takes a
few minutes at most, most of it compiling and allocating; every T here is a power of two, as accelerated-scan
requires. `--quick` measures linear_scan alone at [B, T, D] = [8, 4096, 1536] and [1, 65536, 64];
`--plans` times the best plan of each carry mode (whole, resident, chained lanes) and their neighbours next to
the time model (results/scan_plans.*); `--sweep` every whole-lane block shape of a grid
(results/scan_block_sweep.*); `--thin-sweep` every chained (and resident) block shape of every scan kernel at
[1, 65536, 64] (`--thin-dtypes`, `--thin-directions`; results/scan_thin_sweep.*); `--gate-sweep` every whole-lane
block shape of the minGRU / minLSTM kernels at [64, 4096, 512] and [8, 4096, 1536] (same dtype and direction
options; results/scan_gate_sweep.*), the kernels compiled in parallel first; `--backward-context` the linear_scan
backward's block shapes at thin problems, each timed after a forward (results/scan_backward_carry_context_sweep.*).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import itertools
import json
import math
import statistics
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import hwmodels
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (format_dims, parse_dims_list, plot, relative_error, require_cuda, time_cuda, time_graph,  # noqa: E402
                    time_host, write_results)
from flashrnn_kernels.scan import linear_scan, min_gru_scan, min_lstm_scan, reference  # noqa: E402
from flashrnn_kernels.runtime.compile import precompile  # noqa: E402
from flashrnn_kernels.scan.function import _device_gpu, device_plan, run_scan  # noqa: E402
from flashrnn_kernels.scan.cost_model import MIN_CHUNK, WORK_MODELS, register_cap, register_need  # noqa: E402
from flashrnn_kernels.scan.plan import CARRIES, carry_plan, estimate_ns, kernel_plan_for_carry  # noqa: E402
from scan_plan_runs import outputs, plan_runs  # noqa: E402

WIDE_T = (256, 1024, 4096, 16384, 65536)
SEQUENTIAL_MAX_T = 1024
CPU_MAX_ELEMENTS = 2**26
"""The CPU rows (fp32, the host's threads) run up to this many elements per input: [8, 4096, 1536] and the thin
shape, not [8, 65536, 1536]."""
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
THIN_DTYPES = {**DTYPES, "fp16": torch.float16}


def copy_bandwidth() -> float:
    """Bytes per second of a device-to-device copy (read + write) of 2 GiB."""
    src = torch.randn(512 * 1024 * 1024, device="cuda")
    dst = torch.empty_like(src)
    ms = time_cuda(lambda: dst.copy_(src), warmup=5, repeat=20)
    return 2 * src.numel() * 4 / (ms * 1e-3)


def accelerated_scan_kernels() -> dict:
    """name -> scan(gates, tokens) for [B, D, T] tensors, or name -> error text."""
    found = {}
    for name, module in (("accelerated-scan warp", "accelerated_scan.warp"),
                         ("accelerated-scan triton", "accelerated_scan.triton"),
                         ("accelerated-scan triton", "accelerated_scan.scalar")):
        if name in found and callable(found[name]):
            continue
        try:
            found[name] = importlib.import_module(module).scan
        except Exception as exc:  # a missing package or a failed build becomes an error row
            found[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
    return found


@functools.lru_cache(maxsize=None)
def same_size_copy_bw(moved_bytes: int) -> float:
    """Bytes per second (read + write) of a device-to-device copy that moves `moved_bytes` in all (`moved_bytes // 2`
    read, as many written), timed as `_time` times the kernels: its device time, or the call time where the graph
    timing fails. NaN where nothing is moved or the copy cannot be timed (e.g. out of memory).

    The copy is an elementwise kernel (a multiply by one), not `copy_`: captured into a graph, `copy_`s of 1.125 and
    2.25 GiB ran at 2.77 TB/s on the H200, the kernel at 4.25 TB/s (results/same_size_copy_graph.md)."""
    half = moved_bytes // 2
    if half < 1:
        return float("nan")
    try:
        if half % 4 == 0:
            src = torch.randn(half // 4, device="cuda")
        else:
            src = torch.randint(0, 256, (half,), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
    except Exception:  # no room for the copy next to the benchmark's tensors
        return float("nan")
    (call_ms, ms), _ = _time(lambda: torch.mul(src, 1, out=dst))
    ms = ms if ms == ms else call_ms
    return 2 * half / (ms * 1e-3) if ms == ms and ms > 0 else float("nan")


def _same_size_pct(moved, bw):
    """100 * `bw` / the bandwidth of a copy that moves `moved` bytes (NaN where `bw` is NaN)."""
    return 100 * bw / same_size_copy_bw(moved) if bw == bw else float("nan")


def _row(op, impl, shape, dtype, times, moved, copy_bw, **extra):
    """A result row; `times` is (call ms, device ms) from `_time`, bandwidth from the device time."""
    call_ms, ms = times
    bw = moved / (ms * 1e-3) if ms == ms else float("nan")
    return {"op": op, "impl": impl, "shape": format_dims(shape), "T": shape[1], "dtype": dtype,
            "call ms": call_ms, "ms": ms, "TB/s": bw / 1e12, "% of copy": 100 * bw / copy_bw,
            "% of same-size copy": _same_size_pct(moved, bw), **extra}


NAN = (float("nan"), float("nan"))


def _time(fn, repeat=20, budget_ms=200.0, graph=True):
    """((call ms, device ms), error): the median of event-timed calls, with the repeat count cut so that one
    measurement takes about `budget_ms` of device time (at least 3 timed calls), and the device time per call from a
    CUDA graph (`graph=False`: the call time again, for code that cannot be captured)."""
    try:
        first = time_cuda(fn, warmup=1, repeat=1)
        repeat = max(3, min(repeat, int(budget_ms / max(first, 1e-3))))
        call_ms = time_cuda(fn, warmup=2, repeat=repeat)
    except Exception as exc:  # recorded as an error row, the run goes on
        return NAN, f"{type(exc).__name__}: {exc}"[:160]
    if not graph:
        return (call_ms, call_ms), None
    try:
        calls = max(1, min(20, int(budget_ms / 4 / max(call_ms, 1e-3))))
        return (call_ms, time_graph(fn, calls=calls, repeat=4)), None
    except Exception as exc:
        return (call_ms, float("nan")), f"graph capture: {type(exc).__name__}: {exc}"[:160]


DETERMINISTIC = "ours (deterministic)"
"""linear_scan under torch.use_deterministic_algorithms: split lanes run the plans built to rerun to the bit."""


@contextlib.contextmanager
def deterministic_kernels():
    """torch.use_deterministic_algorithms inside, without torch's fill of new tensors (the kernels' cost alone)."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.utils.deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.utils.deterministic.fill_uninitialized_memory = saved[2]


def _mode_of(impl, fn):
    """`fn` in the mode that `impl` runs in (DETERMINISTIC: deterministic_kernels)."""
    if impl != DETERMINISTIC:
        return fn

    def run():
        with deterministic_kernels():
            return fn()
    return run


def bench_linear(shape, dname, copy_bw, impl):
    """The linear_scan rows of `impl` ("ours", DETERMINISTIC or an accelerated-scan kernel's name), one at a time:
    forward, then forward + backward (the gradients of a and b through autograd)."""
    B, T, D = shape
    dtype = DTYPES[dname]
    a = (torch.rand(B, T, D, device="cuda") * 0.5 + 0.5).to(dtype)
    b = torch.randn(B, T, D, device="cuda").to(dtype)
    dy = torch.randn(B, T, D, device="cuda").to(dtype)
    if impl in ("ours", DETERMINISTIC):
        scan = linear_scan
    else:  # accelerated-scan's layout is [B, D, T]
        scan = accelerated_scan_kernels()[impl]
        a, b, dy = (t.transpose(1, 2).contiguous() for t in (a, b, dy))
    # minimum traffic: forward a, b in, h out; backward a, h, dy in, the gradients of a and b out
    size = a.numel() * a.element_size()
    if not callable(scan):
        for p in ("forward", "forward+backward"):
            yield _row("linear_scan", impl, shape, dname, NAN, size, copy_bw, pass_=p, error=scan)
        return
    a.requires_grad_(), b.requires_grad_()
    with torch.no_grad():
        ms, err = _time(_mode_of(impl, lambda: scan(a, b)))
    yield _row("linear_scan", impl, shape, dname, ms, 3 * size, copy_bw, pass_="forward", error=err)
    ms, err = _time(_mode_of(impl, lambda: torch.autograd.grad(scan(a, b), (a, b), dy)))
    yield _row("linear_scan", impl, shape, dname, ms, 8 * size, copy_bw, pass_="forward+backward", error=err)


def _launchable(trial, gpu, hidden_dim):
    """`trial` with the occupancy and register cap its block shape gets on `gpu`, or None where it cannot launch."""
    need = register_need(trial.problem, trial.steps, trial.vec, trial.stages, trial.carry, trial.held)
    smem = trial.smem_bytes + trial.stage_bytes
    if trial.threads % 32 or trial.threads > 1024 or trial.tile > hidden_dim or smem > gpu.smem_per_block_optin:
        return None
    try:
        occupancy = hwmodels.blocks_per_sm(gpu, trial.threads, need, smem).blocks_per_sm
    except hwmodels.LaunchConfigError:  # this block cannot launch with that many registers
        return None
    if occupancy == 0:
        return None
    return dataclasses.replace(trial, min_blocks=occupancy, regs_estimate=register_cap(gpu, trial.threads, occupancy))


def _grid_trials(base, grid, gpu, hidden_dim):
    """(the grid's values, launchable trial) for every block shape of `grid` applied to `base` with at least 2 warps
    and MIN_CHUNK steps per chunk."""
    for values in itertools.product(*grid.values()):
        shape = dict(zip(grid, values))
        trial = _launchable(dataclasses.replace(base, **shape), gpu, hidden_dim)
        if trial is not None and trial.threads >= 64 and trial.chunk_len >= MIN_CHUNK:
            yield shape, trial


def _model_us(trial, gpu) -> float:
    """The time model's estimate of `trial` in us (NaN outside the model's constraints, e.g. fewer warps than it
    admits)."""
    try:
        return estimate_ns(trial, gpu) / 1e3
    except Exception:
        return float("nan")


SWEEP_GRID = {"threads_d": (8, 12, 16, 24), "threads_t": (4, 8, 16, 32), "steps": (2, 4, 8), "stages": (2, 3, 4)}
SWEEP_MIN_IN_FLIGHT = 32 * 1024
"""Block shapes whose resident blocks keep fewer staged bytes in flight per SM are left out (memory-latency bound)."""


def block_sweep(copy_bw) -> list[dict]:
    """linear_scan forward with every whole-lane block shape of SWEEP_GRID (at least 2 warps and 16 steps per chunk)
    at [8, T, 1536], T = 4,096 and 16,384: each shape's output checked against the solver's plan's, then timed."""
    rows = []
    D = 1536
    for dname, dtype in DTYPES.items():
        data = {}
        for T in (4096, 16384):
            data[T] = ((torch.rand(8, T, D, device="cuda") * 0.5 + 0.5).to(dtype),
                       torch.randn(8, T, D, device="cuda").to(dtype))
        a, b = data[4096]
        chosen = device_plan("linear", a, "forward")
        expected = run_scan("linear", "forward", (a, b), None, kernel_plan=chosen)[0]
        gpu = _device_gpu(a.device.index or 0)
        base = carry_plan(chosen.problem, gpu, "whole")
        for shape, trial in _grid_trials(base, SWEEP_GRID, gpu, D):
            if trial.min_blocks * (trial.stages - 1) * trial.stage_bytes // trial.stages < SWEEP_MIN_IN_FLIGHT:
                continue
            got = run_scan("linear", "forward", (a, b), None, kernel_plan=trial)[0]
            row = {"dtype": dname, **shape, "min_blocks": trial.min_blocks,
                   "row bytes": trial.tile * a.element_size(), "lanes": 8 * trial.d_tiles(D),
                   "solver's plan": trial == chosen,
                   "rel err vs solver's plan": relative_error(got, expected)}
            errors = []
            for T, (x, y) in data.items():
                (_, ms), err = _time(lambda x=x, y=y, trial=trial: run_scan("linear", "forward", (x, y), None,
                                                                          kernel_plan=trial))
                row[f"% of copy T={T}"] = 100 * 3 * x.numel() * x.element_size() / (ms * 1e-3) / copy_bw
                errors += [f"T={T}: {err}"] if err else []
            row["error"] = "; ".join(errors)
            rows.append(row)
            print(row, flush=True)
        del data, a, b
    return rows


THIN_GRID = {"threads_d": (4, 8, 16), "threads_t": (4, 8, 16, 32), "steps": (2, 4, 8, 16)}
THIN_KERNELS = (("linear", "forward"), ("linear", "backward"), ("min_gru", "forward"), ("min_gru", "backward"),
                ("min_lstm", "forward"), ("min_lstm", "backward"))


THIN_DECAYS = {"half": (0.5, 1.0), "near-one": (0.999, 1.0)}
"""linear_scan decays of the thin sweep, uniform in these bounds: near 1 no look-back ends early (a product of decays
reaching 0 ends one, as a published final state does)."""


def _thin_data(cell, shape, dtype, decays="half"):
    """(inputs, dy, h) of `cell` at `shape`: random inputs (linear: decays uniform in THIN_DECAYS[decays]), h from
    the forward."""
    n = 2 if cell != "min_lstm" else 3
    inputs = [torch.randn(*shape, device="cuda").to(dtype) for _ in range(n)]
    if cell == "linear":
        lo, hi = THIN_DECAYS[decays]
        inputs[0] = (torch.rand(*shape, device="cuda") * (hi - lo) + lo).to(dtype)
    h = run_scan(cell, "forward", tuple(inputs), None)[0]
    return tuple(inputs), torch.randn(*shape, device="cuda").to(dtype), h


def thin_sweep(copy_bw, cells=("linear", "min_gru", "min_lstm"), dnames=("fp32",),
               directions=("forward", "backward"), decays="half") -> list[dict]:
    """Every chained block shape of THIN_GRID (at least 2 warps, 16 steps per chunk) for each kernel of THIN_KERNELS
    of `cells` and `directions` at [1, 65536, 64] in each dtype of `dnames` (linear_scan's decays: THIN_DECAYS), and
    for cells that offer resident segments every resident one with 2 or 3 stages: each checked against the solver's
    plan's outputs, then timed (device time, CUDA graph)."""
    shape, rows = (1, 65536, 64), []
    kernels = [(cell, direction, dname) for dname in dnames for cell, direction in THIN_KERNELS
               if cell in cells and direction in directions]
    for cell, direction, dname in kernels:
        dtype = THIN_DTYPES[dname]
        inputs, dy, h = _thin_data(cell, shape, dtype, decays)
        extra = {"dy": dy, "h": h} if direction == "backward" else {}
        chosen = device_plan(cell, inputs[0], direction)
        gpu = _device_gpu(inputs[0].device.index or 0)
        expected = run_scan(cell, direction, inputs, None, **extra, kernel_plan=chosen)[:len(inputs)]
        moved = chosen.problem.traffic_elements * dy.numel() * dy.element_size()
        for carry in ("chained", "resident") if WORK_MODELS[cell].resident[direction == "backward"] else ("chained",):
            base = carry_plan(chosen.problem, gpu, carry)
            grid = THIN_GRID if carry == "chained" else {**THIN_GRID, "stages": (2, 3)}
            for values, trial in _grid_trials(base, grid, gpu, shape[2]):
                shape_of = {"carry": carry, **values}
                run = functools.partial(run_scan, cell, direction, inputs, None, **extra, kernel_plan=trial)
                try:
                    got = run()[:len(inputs)]
                    err = max(relative_error(g, e) for g, e in zip(got, expected))
                except Exception as exc:  # a shape that does not compile or launch: recorded, the sweep goes on
                    rows.append({"cell": cell, "direction": direction, **shape_of,
                                 "error": f"{type(exc).__name__}: {exc}"[:160]})
                    continue
                (_, ms), terr = _time(run)
                bw = moved / (ms * 1e-3)
                lanes, chunks = trial.d_tiles(shape[2]), trial.chunks(shape[1])
                rows.append({"cell": cell, "direction": direction, "dtype": dname,
                             "decays": decays if cell == "linear" else "", **shape_of,
                             "stages": trial.stages, "min_blocks": trial.min_blocks,
                             "blocks": lanes * trial.segments(lanes, chunks), "solver's plan": trial == chosen,
                             "us": 1e3 * ms, "model us": _model_us(trial, gpu),
                             "% of copy": 100 * bw / copy_bw, "% of same-size copy": _same_size_pct(moved, bw),
                             "rel err vs solver's plan": err, "error": terr or ""})
                print(rows[-1], flush=True)
        del inputs, dy, h
    return rows


CONTEXT_SHAPES = ((1, 65536, 64), (1, 16384, 64), (2, 32768, 128), (1, 65536, 256), (4, 8192, 128),
                  (1, 262144, 64))
CONTEXT_GRIDS = {"chained": {"threads_d": (8, 16), "threads_t": (8, 16, 32), "steps": (8, 16)},
                 "resident": {"threads_d": (8, 16), "threads_t": (8, 16, 32), "steps": (2, 8)}}


def backward_context_sweep(shapes=CONTEXT_SHAPES, dnames=("fp32", "bf16")) -> list[dict]:
    """linear_scan backward block shapes (the solver's plan, the best of each split carry mode and CONTEXT_GRIDS'
    shapes) timed after a forward, as they run in training: a CUDA graph of the forward (solver's plan) then the
    backward, less the forward alone (its median, timed after every shape). Timed alone, a backward re-reads inputs
    that repeated calls leave in L2. Each shape's gradients are checked against the plan's."""
    rows = []
    for shape in shapes:
        for dname in dnames:
            (a, b), dy, h = _thin_data("linear", shape, THIN_DTYPES[dname])
            forward = functools.partial(run_scan, "linear", "forward", (a, b), None)
            chosen = device_plan("linear", a, "backward")
            gpu = _device_gpu(a.device.index or 0)
            trials = {chosen: None}
            for carry, grid in CONTEXT_GRIDS.items():
                base = kernel_plan_for_carry(chosen.problem, gpu, carry)  # (resident: no longer the model's)
                trials.setdefault(base, None)
                for _, trial in _grid_trials(base, grid, gpu, shape[2]):
                    trials.setdefault(trial, None)
            expected = run_scan("linear", "backward", (a, b), None, dy=dy, h=h, kernel_plan=chosen)[:2]
            forward_us, shape_rows = [], []
            for trial in trials:
                got = run_scan("linear", "backward", (a, b), None, dy=dy, h=h, kernel_plan=trial)[:2]
                err = max(relative_error(g, e) for g, e in zip(got, expected))
                both = 1e3 * time_graph(lambda t=trial, x=(a, b), dy=dy: run_scan(
                    "linear", "backward", x, None, dy=dy, h=forward()[0], kernel_plan=t), calls=10, repeat=5)
                forward_us.append(1e3 * time_graph(forward, calls=10, repeat=5))
                shape_rows.append({"shape": format_dims(shape), "dtype": dname, "carry": trial.carry,
                                   "threads_d": trial.threads_d, "threads_t": trial.threads_t, "steps": trial.steps,
                                   "stages": trial.stages, "min_blocks": trial.min_blocks,
                                   "solver's plan": trial == chosen, "forward + backward us": both,
                                   "model us": _model_us(trial, gpu), "rel err vs solver's plan": err})
                print(shape_rows[-1], flush=True)
            fwd = statistics.median(forward_us)
            for row in shape_rows:
                row["backward us (less the forward alone)"] = row["forward + backward us"] - fwd
                row["forward us"] = fwd
            rows += shape_rows
            del a, b, dy, h
    return rows


GATE_GRID = {"threads_d": (4, 8, 16, 32, 64), "threads_t": (2, 4, 8, 16, 32), "steps": (2, 4, 8)}
GATE_SHAPES = ((64, 4096, 512), (8, 4096, 1536))


def gate_sweep(copy_bw, cells=("min_gru", "min_lstm"), dnames=("fp32",), directions=("forward", "backward"),
               shapes=GATE_SHAPES) -> list[dict]:
    """Every whole-lane block shape of GATE_GRID (the solver's plan's stages and vec; at least 2 warps and 16 steps
    per chunk) for the minGRU / minLSTM kernels of `cells`, `dnames` and `directions` at each of `shapes`: each
    checked against the solver's plan's outputs, then timed next to the time model's estimate. The kernels are
    compiled first, in parallel."""
    jobs = []
    for cell, dname, direction, shape in itertools.product(cells, dnames, directions, shapes):
        like = torch.empty(shape, device="cuda", dtype=THIN_DTYPES[dname])
        chosen = device_plan(cell, like, direction)
        gpu = _device_gpu(like.device.index or 0)
        base = carry_plan(chosen.problem, gpu, "whole")
        trials = [trial for _, trial in _grid_trials(base, GATE_GRID, gpu, shape[2])]
        jobs.append((cell, dname, direction, shape, chosen, gpu, [chosen] + [t for t in trials if t != chosen]))
    precompile([trial.source() for *_, trials in jobs for trial in trials])
    rows = []
    for cell, dname, direction, shape, chosen, gpu, trials in jobs:
        runs = plan_runs(cell, direction, shape, THIN_DTYPES[dname], dict(enumerate(trials)))
        moved = chosen.problem.traffic_elements * math.prod(shape) * THIN_DTYPES[dname].itemsize
        expected = None
        for trial, run in zip(trials, runs.values()):  # the solver's plan first
            got = outputs(run)
            expected = got if expected is None else expected
            err = max(relative_error(g, e) for g, e in zip(got, expected))
            (_, ms), terr = _time(run)
            rows.append({"cell": cell, "direction": direction, "dtype": dname, "shape": format_dims(shape),
                         "threads_d": trial.threads_d, "threads_t": trial.threads_t, "vec": trial.vec,
                         "steps": trial.steps, "stages": trial.stages, "min_blocks": trial.min_blocks,
                         "lanes": shape[0] * trial.d_tiles(shape[2]), "solver's plan": trial == chosen,
                         "us": 1e3 * ms, "model us": _model_us(trial, gpu),
                         "% of copy": 100 * moved / (ms * 1e-3) / copy_bw,
                         "rel err vs solver's plan": err, "error": terr or ""})
            print(rows[-1], flush=True)
        del runs
    return rows


def _neighbours(base):
    """`base` and the plans one step away from it in one field (threads_d, threads_t, steps: halved or doubled;
    stages, except for chained plans, which stage one chunk: one more or fewer, at least two)."""
    out = [base]
    fields = [("threads_d", (base.threads_d // 2, base.threads_d * 2)),
              ("threads_t", (base.threads_t // 2, base.threads_t * 2)),
              ("steps", (base.steps // 2, base.steps * 2))]
    if base.carry != "chained":
        fields.append(("stages", (base.stages - 1, base.stages + 1)))
    for field, values in fields:
        out += [dataclasses.replace(base, **{field: v}) for v in values if v >= (2 if field == "stages" else 1)]
    return out


def plan_sweep(copy_bw) -> list[dict]:
    """linear_scan forward with the best plan of each carry mode and their neighbours, measured next to the time
    model's estimate, to check the model (and its choice of carry) against measurement."""
    rows = []
    for dname, dtype in DTYPES.items():
        for shape in ((8, 4096, 1536), (8, 256, 1536), (1, 65536, 64)):  # [B, T, D]
            B, T, D = shape
            a = (torch.rand(*shape, device="cuda") * 0.5 + 0.5).to(dtype)
            b = torch.randn(*shape, device="cuda").to(dtype)
            chosen = device_plan("linear", a, "forward")
            gpu = _device_gpu(a.device.index or 0)
            for carry in CARRIES:
                try:
                    base = carry_plan(chosen.problem, gpu, carry)
                except Exception as exc:
                    print(f"no {carry} plan for {shape} {dname}: {exc}")
                    continue
                for trial in _neighbours(base):
                    trial = _launchable(trial, gpu, D)
                    if trial is None:
                        continue
                    ms, err = _time(lambda a=a, b=b, trial=trial: run_scan("linear", "forward", (a, b), None,
                                                                             kernel_plan=trial))
                    label = ("solver's plan" if trial == chosen
                             else "best of its kind" if trial == base else "neighbour")
                    rows.append(_row("linear_scan", label, shape, dname, ms, 3 * a.numel() * a.element_size(),
                                     copy_bw, carry=carry, threads_d=trial.threads_d,
                                     threads_t=trial.threads_t, steps=trial.steps, stages=trial.stages,
                                     vec=trial.vec, min_blocks=trial.min_blocks, model_us=_model_us(trial, gpu),
                                     error=err))
            del a, b
    return rows


def _unfused(cell):
    gates = reference.min_gru_gates if cell == "min_gru" else reference.min_lstm_gates
    return lambda *xs: linear_scan(*(t.contiguous() for t in gates(*xs)))


def bench_cell(cell, shape, dname, copy_bw, cpu):
    B, T, D = shape
    dtype = DTYPES[dname]
    n = 2 if cell == "min_gru" else 3
    inputs = [torch.randn(B, T, D, device="cuda").to(dtype).requires_grad_() for _ in range(n)]
    dy = torch.randn(B, T, D, device="cuda").to(dtype)
    esize = dy.element_size()
    fused = min_gru_scan if cell == "min_gru" else min_lstm_scan
    log_space = reference.min_gru_log_space if cell == "min_gru" else reference.min_lstm_log_space
    loop = reference.min_gru_loop if cell == "min_gru" else reference.min_lstm_loop
    impls = {"fused": fused, "unfused (gates, then linear_scan)": _unfused(cell), "torch log-space": log_space}
    if T <= SEQUENTIAL_MAX_T:
        impls["sequential loop (GPU)"] = loop
    # minimum traffic of the fused kernels: forward n in + h out; backward n in + h + dy in, n grads out
    moved = {"forward": (n + 1) * dy.numel() * esize, "forward+backward": (3 * n + 3) * dy.numel() * esize}
    rows = []
    for impl, fn in impls.items():
        repeat = 3 if "sequential" in impl else 20
        graph = "sequential" not in impl  # thousands of launches per call: the call time is the device time
        with torch.no_grad():
            ms, err = _time(lambda: fn(*inputs), repeat, graph=graph)
        rows.append(_row(cell, impl, shape, dname, ms, moved["forward"], copy_bw, pass_="forward", error=err))
        ms, err = _time(lambda: torch.autograd.grad(fn(*inputs), inputs, dy), repeat, graph=graph)
        rows.append(_row(cell, impl, shape, dname, ms, moved["forward+backward"], copy_bw,
                         pass_="forward+backward", error=err))
    cpu_inputs = [t.detach().float().cpu() for t in inputs] if cpu and B * T * D <= CPU_MAX_ELEMENTS else None
    cpu_impls = {"CPU path (chunked scan)": fused}
    if T <= SEQUENTIAL_MAX_T:
        cpu_impls["sequential loop (CPU)"] = loop
    for impl, fn in cpu_impls.items() if cpu_inputs is not None else ():
        with torch.no_grad():
            ms = time_host(lambda: fn(*cpu_inputs))
        rows.append(_row(cell, impl, shape, dname, (ms, ms), moved["forward"], copy_bw, pass_="forward"))
    return rows


def judge(rows):
    """Target verdicts added to the rows in place; returns the summary lines."""
    def find(op, impl, shape, dtype, pass_=None):
        for r in rows:
            if (r["op"], r["impl"], r["shape"], r["dtype"]) == (op, impl, shape, dtype) and r.get("pass_") == pass_:
                return r
        return None

    lines = []
    for r in rows:
        if r["op"] == "linear_scan" and r["impl"] == "ours":
            others = [o["ms"] for o in rows if o["op"] == "linear_scan" and o["impl"].startswith("accelerated-scan")
                      and (o["shape"], o["dtype"], o.get("pass_")) == (r["shape"], r["dtype"], r.get("pass_"))
                      and o["ms"] == o["ms"]]
            if r["T"] >= 4096 and r.get("pass_") == "forward":
                r["target >=95% copy"] = "pass" if r["% of copy"] >= 95 else "FAIL"
            if others:
                best = min(others)
                r["speedup vs best accelerated-scan"] = best / r["ms"]
                need = 2.0 if r["shape"] == "1x65536x64" else 1.0
                r["target vs accelerated-scan"] = "pass" if best / r["ms"] >= need else "FAIL"
        if r["op"] in ("min_gru", "min_lstm") and r["impl"] == "fused":
            unfused = find(r["op"], "unfused (gates, then linear_scan)", r["shape"], r["dtype"], r.get("pass_"))
            if unfused and unfused["ms"] == unfused["ms"]:
                r["speedup vs unfused"] = unfused["ms"] / r["ms"]
                r["target >=1.8x unfused"] = "pass" if unfused["ms"] / r["ms"] >= 1.8 else "FAIL"
            cpus = [find(r["op"], impl, r["shape"], r["dtype"], "forward")
                    for impl in ("CPU path (chunked scan)", "sequential loop (CPU)")]
            cpu_ms = min((c["ms"] for c in cpus if c), default=None)
            if cpu_ms is not None and r.get("pass_") == "forward":  # against the faster CPU form
                r["target faster than CPU"] = "pass" if cpu_ms > r["call ms"] else "FAIL"
    for r in rows:
        verdicts = [f"{k}={v}" for k, v in r.items() if k.startswith("target")]
        if verdicts:
            lines.append(f"{r['op']:11s} {r['impl']:6s} {r['shape']:14s} {r['dtype']} {r.get('pass_') or '':16s} "
                         f"{r['ms']:.4g} ms {r['% of copy']:.0f}% copy " + " ".join(verdicts))
    return lines


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="linear_scan at [B, T, D] = [8, 4096, 1536] and [1, 65536, 64] only")
    parser.add_argument("--plans", action="store_true", help="only the plan sweep (solver's plan vs neighbours)")
    parser.add_argument("--sweep", action="store_true", help="only the block-shape sweep of whole lanes (SWEEP_GRID)")
    parser.add_argument("--thin-sweep", nargs="?", const="linear,min_gru,min_lstm", metavar="CELLS",
                        help="only the chained / resident block-shape sweep at [1, 65536, 64] of these cells' kernels "
                             "(comma-separated; default all)")
    parser.add_argument("--thin-dtypes", default="fp32", help="dtypes of --thin-sweep (fp32,bf16,fp16)")
    parser.add_argument("--thin-directions", default="forward,backward", help="directions of --thin-sweep")
    parser.add_argument("--thin-decays", choices=tuple(THIN_DECAYS), default="half",
                        help="linear_scan decays of --thin-sweep: uniform in (0.5, 1) or in (0.999, 1)")
    parser.add_argument("--backward-context", action="store_true",
                        help="only the linear_scan backward's block shapes timed after a forward (CONTEXT_SHAPES)")
    parser.add_argument("--gate-sweep", nargs="?", const="min_gru,min_lstm", metavar="CELLS",
                        help="only the whole-lane block-shape sweep (GATE_GRID) of these minGRU / minLSTM kernels at "
                             "GATE_SHAPES or --shapes (--thin-dtypes, --thin-directions choose dtypes and directions)")
    parser.add_argument("--shapes", type=parse_dims_list,
                        help="comma-separated BxTxD shapes instead of the default set (e.g. 1x65536x64)")
    parser.add_argument("--group", help=argparse.SUPPRESS)  # internal: one (shape, dtype) in a child process
    args = parser.parse_args(argv)
    if args.group:
        shape, dname, part, copy_bw, quick, out = json.loads(args.group)
        return _group_rows(tuple(shape), dname, part, copy_bw, quick,
                           flush=lambda rows: Path(out).write_text(json.dumps(rows)))
    require_cuda("bench_scan")
    copy_bw = copy_bandwidth()
    if args.plans:
        rows = plan_sweep(copy_bw)
        print(write_results("scan_plans", rows, title="linear_scan forward: the solver's plan and its neighbours",
                            notes=[f"Device-to-device copy in this run: {copy_bw / 1e12:.3f} TB/s."]))
        return rows
    if args.thin_sweep:
        rows = thin_sweep(copy_bw, tuple(args.thin_sweep.split(",")), tuple(args.thin_dtypes.split(",")),
                          tuple(args.thin_directions.split(",")), args.thin_decays)
        print(write_results("scan_thin_sweep" + ("" if args.thin_decays == "half" else f"_{args.thin_decays}"), rows,
                            title=f"scan kernels at [1, 65536, 64] ({args.thin_dtypes}; linear_scan decays "
                                  f"{THIN_DECAYS[args.thin_decays]}): chained and resident block shapes",
                            notes=[f"Device-to-device copy in this run: {copy_bw / 1e12:.3f} TB/s."]))
        return rows
    if args.backward_context:
        rows = backward_context_sweep()
        print(write_results("scan_backward_carry_context_sweep", rows,
                            title="linear_scan backward after a forward: chained and resident block shapes"))
        return rows
    if args.gate_sweep:
        rows = gate_sweep(copy_bw, tuple(args.gate_sweep.split(",")), tuple(args.thin_dtypes.split(",")),
                          tuple(args.thin_directions.split(",")), args.shapes or GATE_SHAPES)
        print(write_results("scan_gate_sweep", rows, title="minGRU / minLSTM kernels: whole-lane block shapes",
                            notes=[f"Device-to-device copy in this run: {copy_bw / 1e12:.3f} TB/s."]))
        return rows
    if args.sweep:
        rows = block_sweep(copy_bw)
        print(write_results("scan_block_sweep", rows, title="linear_scan forward: whole-lane block shapes",
                            notes=[f"Device-to-device copy in this run: {copy_bw / 1e12:.3f} TB/s."]))
        return rows
    thin = (1, 65536, 64)  # shapes are [B, T, D]: the issue's [8, 1536, T] and [1, 64, 65536] in (B, D, T) order
    wide = [(8, T, 1536) for T in ((4096,) if args.quick else WIDE_T)]
    shapes = args.shapes or [thin] + wide
    rows = []
    for shape in shapes:
        for dname in DTYPES:
            for part in ("ours", "accelerated-scan triton", "accelerated-scan warp"):
                rows += _run_group(shape, dname, part, copy_bw, args.quick)
        _write(args, rows, copy_bw, judged=False)  # partial results survive an interrupted run
    return _write(args, rows, copy_bw, judged=True)


def _group_rows(shape, dname, part, copy_bw, quick, flush=lambda rows: None) -> list[dict]:
    """The rows of one (shape, dtype) and `part`: "ours" (linear_scan and the cells with their unfused, log-space and
    loop versions) or one of accelerated-scan's kernels. Each timing ends with a device synchronisation, so a fault
    is reported in the row of the implementation that caused it; `flush` gets the rows so far after each pass."""
    rows = []
    for impl in (part, DETERMINISTIC) if part == "ours" else (part,):
        for row in bench_linear(shape, dname, copy_bw, impl):
            rows.append(row)
            flush(rows)
    if part == "ours" and not quick:
        for cell in ("min_gru", "min_lstm"):
            try:
                rows += bench_cell(cell, shape, dname, copy_bw, cpu=True)
            except Exception:
                rows.append(_row(cell, "all", shape, dname, NAN, 1, copy_bw,
                                 error=traceback.format_exc().splitlines()[-1][:160]))
            flush(rows)
    return rows


def _run_group(shape, dname, part, copy_bw, quick) -> list[dict]:
    """`_group_rows` in a child process: a kernel fault (which leaves the CUDA context unusable) costs the rows of
    its group not yet written, not the run's. (accelerated-scan 0.3.1's warp kernel faults in bf16 at most of these
    shapes.)"""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        cmd = [sys.executable, __file__, "--group", json.dumps([shape, dname, part, copy_bw, quick, str(out)])]
        done = subprocess.run(cmd, capture_output=True, text=True)
        sys.stdout.write(done.stdout[-4000:])
        rows = json.loads(out.read_text()) if out.exists() else []
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:160]
            rows.append(_row("linear_scan", part, shape, dname, NAN, 1, copy_bw,
                             error=f"group process exited with {done.returncode} after {len(rows)} rows: {tail}"))
        return rows


def _write(args, rows, copy_bw, judged):
    rows = [dict(r) for r in rows]
    summary = judge(rows)
    for r in rows:
        r["pass"] = r.pop("pass_", None)
    name = "scan_quick" if args.quick else ("scan_shapes" if args.shapes else "scan")
    notes = [f"Device-to-device copy in this run: {copy_bw / 1e12:.3f} TB/s (bytes read + written).",
             "Bandwidth counts each input read once and each output written once (minimum traffic).",
             "`% of same-size copy`: against a copy kernel that moves the row's own bytes, timed as the kernels are (a "
             "CUDA graph of repeated calls); the target column stays on the 2 GiB copy."]
    markdown = write_results(name, rows, title="Scan kernels: linear_scan, minGRU, minLSTM", notes=notes)
    if not judged:
        return rows
    print(markdown)
    linear = [r for r in rows if r["op"] == "linear_scan" and r["shape"].startswith("8x")]
    if linear:
        for r in linear:
            r["series"] = f"{r['impl']} {r['pass']}"
        plot(f"{name}_linear", linear, x="T", y="% of copy", series="series", title="linear_scan [8, 1536, T]",
             logx=True)
    cells = [r for r in rows if r["op"] != "linear_scan" and r["shape"].startswith("8x") and r["dtype"] == "bf16"]
    if cells:
        for r in cells:
            r["series"] = f"{r['op']} {r['impl']} {r['pass']}"
        plot(f"{name}_cells", cells, x="T", y="ms", series="series", title="minGRU / minLSTM [8, 1536, T] bf16",
             logx=True, logy=True)
    print(f"copy {copy_bw / 1e12:.3f} TB/s")
    print("\n".join(summary))
    return rows


if __name__ == "__main__":
    main()
