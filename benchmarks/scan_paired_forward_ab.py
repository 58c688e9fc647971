"""linear_scan's forward plans for the two contexts a forward runs in: alone (inference, the plan for
ScanProblem.paired False) and followed by its backward (autograd, paired True), on the narrow problems whose two plans
differ. Each forward plan is timed alone and in a pair with the solver's backward, as device time per call in a CUDA
graph (common.time_graph), the two plans taking turns over --rounds rounds in one process, on random inputs (decays
in (0.5, 1)); the outputs and gradients of the two plans are compared (they differ only in rounding).

`--shapes`: instead, the paired plan against other chained block shapes (threads along D x thread rows x steps),
each in a pair and its forward alone (against the plan alone); a shape "F/B" sets the backward's too (either side
"plan": the solver's; "@N" after a side holds its launches to N blocks per SM, "~W" lets a segment load only once
the one W before it has published: a probe build; "+PROBE" after a side builds it as scan_probe_ab.py's probe
PROBE); `--problems` gives the problems (BxTxD:dtype; default the
list); writes scan_paired_forward_shapes.{csv,md}.

Usage: python benchmarks/scan_paired_forward_ab.py [--rounds 4] [--shapes 8x16x8,8x8x8,plan/16x8x16]
       [--problems 1x65536x64:fp32]
Writes scan_paired_forward_ab.{csv,md} to BENCH_RESULTS_DIR (default benchmarks/results).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch

import common
from flashrnn_kernels.runtime import compile
from flashrnn_kernels.runtime.device import device_gpu
from flashrnn_kernels.scan import function as scan_function
from flashrnn_kernels.scan.function import device_plan, run_scan
from flashrnn_kernels.scan.plan import ScanPlan, carry_plan
from scan_probe_ab import PROBES

PROBLEMS = [((1, 65536, 64), torch.float32), ((4, 16384, 64), torch.float32), ((2, 16384, 128), torch.float32),
            ((1, 16384, 256), torch.float32), ((8, 4096, 128), torch.float32), ((1, 65536, 128), torch.bfloat16),
            ((2, 65536, 64), torch.bfloat16), ((8, 16384, 64), torch.bfloat16), ((4, 16384, 128), torch.bfloat16),
            ((16, 4096, 128), torch.bfloat16)]

NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16"}


def _describe(p) -> str:
    return f"{p.carry} {p.threads_d}x{p.threads_t}x{p.steps}, {p.stages} st, {p.min_blocks}/SM"


CAPS: dict = {}
"""plan -> blocks per SM that its launches are held to (a shape's "@N"), by padding their dynamic shared memory."""


def window(w: int) -> list[tuple[str, str]]:
    """The patch of a window probe (a shape's "~W"): segment s of a split lane starts loading only once segment
    s - W has published (at most W segments of a lane load at once, in order)."""
    return [("        prologue(kept);", f"""        if (seg >= {w}) {{  // probe: segment seg - W has published
            const unsigned e = counters != nullptr ? graph_epoch(counters, epoch) : static_cast<unsigned>(epoch);
            if (threadIdx.x == 0 && threadIdx.y == 0) {{
                const word_t* w = seg_b + word0 + (long long)(seg - {w}) * SCAN_TILE;
                while (static_cast<unsigned>(load_word_relaxed(w) >> 33) != e) __nanosleep(32);
            }}
            __syncthreads();
        }}
""")]


def _chained(p, shape: str):
    """Plan p's problem solved with chained blocks of `shape` (threads along D x thread rows x steps); "plan": p. A
    suffix "@N" holds its launches to N blocks per SM (CAPS), "~W" builds it as the window probe (window), "+PROBE"
    as scan_probe_ab.PROBES[PROBE]."""
    shape, _, probe = shape.partition("+")
    if probe:
        return common.probe_plan(_chained(p, shape), PROBES[probe])
    shape, _, w = shape.partition("~")
    shape, _, cap = shape.partition("@")
    if shape != "plan":
        threads_d, threads_t, steps = common.parse_dims(shape)
        p = carry_plan(p.problem, device_gpu(0), "chained", threads_d=threads_d, threads_t=threads_t, steps=steps,
                       vec=p.vec)
    if cap or w:  # a plan of its own, the key of both its cap and its window
        p = common.probe_plan(p, window(int(w)) if w else ())
        if cap:
            CAPS[p] = int(cap)
    return p


def _capped_launch(p, B, T, D, element_size, device):
    """scan_function._launch_of, with the dynamic shared memory of a plan in CAPS padded so that no more than its
    cap of blocks fits on an SM."""
    run = SHIPPED_LAUNCH(p, B, T, D, element_size, device)
    cap = CAPS.get(p)
    if cap is None:
        return run
    gpu = device_gpu(device)
    share = gpu.smem_per_sm // (cap + 1) + 1  # cap + 1 blocks of this much do not fit
    padded = max(run.shared_mem, share - p.smem_bytes - gpu.smem_reserved_per_block)
    compile.allow_dynamic_smem(run.kernel, padded)
    return run._replace(shared_mem=padded)


SHIPPED_LAUNCH = scan_function._launch_of


def _forward(p, a, b):
    """The forward alone with plan p."""
    return lambda: run_scan("linear", "forward", (a, b), None, kernel_plan=p)


def _pair(p, a, b, dy, backward=None):
    """The forward with plan p, then the backward with plan `backward` (None: the solver's)."""
    def run():
        (h,) = run_scan("linear", "forward", (a, b), None, kernel_plan=p)
        return h, *run_scan("linear", "backward", (a, b), None, dy=dy, h=h, kernel_plan=backward)[:2]
    return run


def sweep(shapes: list[str], rounds: int, problems: list[str] | None = None) -> None:
    scan_function._launch_of = _capped_launch  # run_scan's launches of the plans in CAPS are held to their caps
    ScanPlan.source = common.probe_build_source(ScanPlan.source)  # and the window probes built as such
    rows = []
    dtypes = {name: dtype for dtype, name in NAMES.items()}
    chosen = PROBLEMS if problems is None else [
        (common.parse_dims(text.split(":")[0]), dtypes[text.split(":")[1]]) for text in problems]
    for shape, dtype in chosen:
        a = (torch.rand(shape, device="cuda") * 0.5 + 0.5).to(dtype)
        b, dy = (torch.randn(shape, device="cuda").to(dtype) for _ in range(2))
        paired = device_plan("linear", a, "forward", paired=True)
        backward = device_plan("linear", a, "backward")
        alone = device_plan("linear", a, "forward")
        plans = {"paired": (paired, None)}
        for s in shapes:
            forward_shape, _, backward_shape = s.partition("/")
            plans[s] = (_chained(paired, forward_shape), _chained(backward, backward_shape or "plan"))
        times: dict[tuple[str, str], list[float]] = {}
        expected = _pair(paired, a, b, dy)()
        for r in range(rounds):
            for name in (list(plans) if r % 2 == 0 else list(plans)[::-1]):
                pair = _pair(plans[name][0], a, b, dy, plans[name][1])
                times.setdefault((name, "pair"), []).append(common.time_graph(pair) * 1e3)
                times.setdefault((name, "alone"), []).append(common.time_graph(_forward(plans[name][0], a, b)) * 1e3)
            times.setdefault(("alone", "alone"), []).append(common.time_graph(_forward(alone, a, b)) * 1e3)
        us = {key: statistics.median(values) for key, values in times.items()}
        row = {"shape": common.format_dims(shape), "dtype": NAMES[dtype], "paired plan": _describe(paired),
               "backward plan": _describe(backward), "pair us": us["paired", "pair"],
               "plan alone": _describe(alone), "forward us": us["alone", "alone"]}
        for name in shapes:
            got = _pair(plans[name][0], a, b, dy, plans[name][1])()
            difference = max(common.relative_error(x, y) for x, y in zip(got, expected))
            row[f"{name} pair / paired"] = us[name, "pair"] / us["paired", "pair"]
            row[f"{name} forward / alone"] = us[name, "alone"] / us["alone", "alone"]
            row[f"{name} difference"] = difference
        rows.append(row)
    print(common.write_results("scan_paired_forward_shapes", rows, title="Paired linear_scan forwards: chained "
                               "block shapes in a forward + backward pair",
                               notes=[f"{rounds} alternating rounds; median device time per call (CUDA graphs of 10 "
                                      "calls) of the pair and of its forward alone, each shape's relative to the "
                                      "paired plan's pair and to the plan alone's forward."]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--shapes", help="comma-separated chained block shapes, threads_d x threads_t x steps, "
                        "or forward/backward shapes")
    parser.add_argument("--problems", help="with --shapes: comma-separated problems BxTxD:dtype (default PROBLEMS)")
    args = parser.parse_args()
    common.require_cuda("scan_paired_forward_ab")
    if args.shapes:
        sweep(args.shapes.split(","), args.rounds, args.problems.split(",") if args.problems else None)
        return
    rows = []
    for shape, dtype in PROBLEMS:
        a = (torch.rand(shape, device="cuda") * 0.5 + 0.5).to(dtype)
        b, dy = (torch.randn(shape, device="cuda").to(dtype) for _ in range(2))
        plans = {"alone": device_plan("linear", a, "forward"), "paired": device_plan("linear", a, "forward",
                                                                                     paired=True)}
        if dataclasses.replace(plans["paired"], problem=plans["alone"].problem) == plans["alone"]:
            raise SystemExit(f"{shape} {dtype}: the paired plan is the plan alone; this A/B needs problems where "
                             "they differ")
        outputs, times = {}, {}
        for r in range(args.rounds):
            for name in (list(plans) if r % 2 == 0 else list(plans)[::-1]):
                p = plans[name]

                pair = _pair(p, a, b, dy)
                outputs[name] = pair()
                times.setdefault((name, "alone"), []).append(common.time_graph(_forward(p, a, b)) * 1e3)
                times.setdefault((name, "pair"), []).append(common.time_graph(pair) * 1e3)
        difference = max(common.relative_error(x, y) for x, y in zip(outputs["paired"], outputs["alone"]))
        us = {key: statistics.median(values) for key, values in times.items()}
        rows.append({"shape": common.format_dims(shape), "dtype": NAMES[dtype],
                     "plan alone": _describe(plans["alone"]), "plan paired": _describe(plans["paired"]),
                     "forward us: alone plan": us["alone", "alone"], "forward us: paired plan": us["paired", "alone"],
                     "pair us: alone plan": us["alone", "pair"], "pair us: paired plan": us["paired", "pair"],
                     "pair ratio": us["paired", "pair"] / us["alone", "pair"],
                     "forward ratio": us["paired", "alone"] / us["alone", "alone"],
                     "outputs' relative difference": difference})
    ratios = [row["pair ratio"] for row in rows]
    print(common.write_results(
        "scan_paired_forward_ab", rows, title="linear_scan forward plans alone and paired with the backward",
        notes=[f"{args.rounds} alternating rounds; median device time per call (CUDA graphs of 10 calls); the pair is "
               "the forward with the given plan, then the solver's backward (dL/da, dL/db). Pairs with the paired "
               f"plan: {min(ratios):.3f}-{max(ratios):.3f}x the time (geometric mean "
               f"{statistics.geometric_mean(ratios):.3f})."]))


if __name__ == "__main__":
    main()
