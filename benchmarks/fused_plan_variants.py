"""The fused kernels' planned tilings against the other ways of splitting a head, to check the cost model.

For each cell, shape (DH x NH), dtype, batch and direction at T=1024: plan()'s choice, then the cheapest tiling of
each other exchange (`plan.pinned_plan`; forward: a cluster, or global memory; backward: a cluster, partial sums of
single blocks or of pairs). A variant replaces the plan of its direction only; "fwd" rows time the forward under
torch.no_grad, "fwd+bwd" rows a forward and the backward through autograd. Variants run in alternating rounds (CUDA
events, median), and each is checked against the float64 reference at T=64 (forward outputs, and every gradient for
a backward variant) on fresh random inputs. Writes <name>.{csv,md} (default fused_plan_variants).

`--against FILE` times plan()'s choice against given plans instead (an A/B of a cost-model change): FILE is JSON,
a list of KernelPlan fields (dataclasses.asdict), each the "previous" plan of its problem (the batch in its
"batch" key), for example written by the previous version of the model.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics

import torch

import common
import flashrnn_kernels
from flashrnn_kernels.fused import function
from flashrnn_kernels.fused.plan import KernelPlan, PlanError, pinned_plan

PLANNED = function.plan
EXCHANGES = {"forward": {"cluster": ("cluster", dict(clustered=1)), "global": ("global", {})},
             "backward": {"cluster": ("cluster", dict(clustered=1)), "pairs": ("pairs", {}),
                          "partials": ("partials", {})}}
"""The alternatives timed per direction: name -> (plan.pinned_plan's exchange, pins); a cluster is pinned by
variable, since exchange "cluster" also admits one block per head."""


def variants(cell: str, batch: int, nh: int, dh: int, dtype: torch.dtype, direction: str) -> dict:
    """{"planned": plan()'s choice, then each of EXCHANGES that has a tiling and differs from it}."""
    planned = PLANNED(cell, batch, nh, dh, dtype, direction=direction)
    found = {"planned": planned}
    for name, (exchange, pins) in EXCHANGES[direction].items():
        try:
            alternative = pinned_plan(cell, batch, nh, dh, dtype, direction=direction, exchange=exchange, **pins)
        except PlanError:  # no such tiling (a head too small to split, too large for a cluster)
            continue
        if alternative != planned:
            found[name] = alternative
    return found


def use(variant) -> None:
    """Launch `variant` (a KernelPlan, or None for plan()'s choice) for its direction from now on."""
    if variant is None:
        function.plan = PLANNED
    else:
        def pinned(cell, B, NH, DH, dtype, gpu=None, direction="forward", exchange=None):
            if direction == variant.direction:
                return variant
            return PLANNED(cell, B, NH, DH, dtype, gpu=gpu, direction=direction, exchange=exchange)
        function.plan = pinned
    function._cached_launch.cache_clear()


def errors(case: common.Case, backward: bool) -> float:
    """Largest relative error against the float64 reference at T=64: forward outputs, and gradients if `backward`."""
    small = dataclasses.replace(case, seq=64)
    args, grads = common.cell_inputs(small, "cuda", requires_grad=True)

    def run(inputs, backend):
        out = flashrnn_kernels.flashrnn(*inputs, cell=case.cell, backend=backend)
        return (*out, *torch.autograd.grad(out, inputs, [g.to(out[0].dtype) for g in grads])) if backward else out

    got = run(args, "fused")
    expected = run(tuple(a.detach().double().requires_grad_() for a in args), "reference")
    return max(common.relative_error(a, e) for a, e in zip(got, expected))


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cells", default="lstm,gru,slstm,elman")
    parser.add_argument("--shapes", default="128x6,256x3,512x1,768x1,1024x1", help="DHxNH, comma-separated")
    parser.add_argument("--dtypes", default="bf16")
    parser.add_argument("--batches", default="16")
    parser.add_argument("--directions", default="forward,backward")
    parser.add_argument("--name", default="fused_plan_variants", help="results file name")
    parser.add_argument("--against", help="JSON list of previous plans (with a batch key) to time plan() against")
    args = parser.parse_args()
    common.require_cuda("fused_plan_variants")
    rows = []
    if args.against:  # the problems of the previous plans
        for fields in json.loads(open(args.against).read()):
            batch = fields.pop("batch")
            previous = KernelPlan(**fields)
            rows += measure(previous.cell, batch, previous.num_heads, previous.head_dim, previous.dtype,
                            previous.direction, args.rounds, previous)
    else:
        for dname, batch, shape, cell, direction in itertools.product(
                args.dtypes.split(","), _ints(args.batches), args.shapes.split(","), args.cells.split(","),
                args.directions.split(",")):
            dh, nh = map(int, shape.split("x"))
            rows += measure(cell, batch, nh, dh, dname, direction, args.rounds)
    print(common.write_results(args.name, rows, title="Fused kernels: planned tilings against the other exchanges",
                               notes=[
                                   "T=1024. ms: median over alternating rounds of CUDA-event-timed calls (fwd: "
                                   "forward under no_grad; fwd+bwd: forward and backward through autograd, the "
                                   "variant replacing the backward's plan only). objective: the cost model's "
                                   "predicted cycles per step. error: largest relative error against the float64 "
                                   "reference at T=64 (fwd: outputs; fwd+bwd: every gradient)."]))
    return 0


def measure(cell: str, batch: int, nh: int, dh: int, dname: str, direction: str, rounds: int,
            previous: KernelPlan | None = None) -> list[dict]:
    """The rows of one problem: plan()'s choice and each other exchange (variants), or the `previous` plan, timed in
    alternating rounds."""
    dtype = common.DTYPES[dname]
    try:
        found = ({"planned": PLANNED(cell, batch, nh, dh, dtype, direction=direction), "previous": previous}
                 if previous else variants(cell, batch, nh, dh, dtype, direction))
    except PlanError as exc:  # no tiling at all on this GPU
        print(f"{cell} {nh}x{dh} {dname} B={batch} {direction}: {exc}", flush=True)
        return []
    if len(found) == 1:
        return []  # nothing to compare (one block per head, no split possible)
    case = common.Case(cell, batch, 1024, dh, nh, dname)
    inputs, grads = common.cell_inputs(case, "cuda", requires_grad=True)
    forward, forward_backward = common.grad_closures(
        lambda *a: flashrnn_kernels.flashrnn(*a, cell=cell, backend="fused"), inputs, grads)
    fn = forward if direction == "forward" else forward_backward
    checks, times, runnable = {}, {label: [] for label in found}, []
    for label, variant in found.items():
        use(variant)
        try:
            checks[label] = f"{errors(case, direction == 'backward'):.2e}"
            fn()
            runnable.append(label)
        except Exception as exc:
            checks[label] = f"{type(exc).__name__}: {exc}"[:200]
    for r in range(rounds):
        for label in (runnable if r % 2 == 0 else runnable[::-1]):
            use(found[label])
            times[label].append(common.time_cuda(fn, warmup=3, repeat=15))
    use(None)
    base = statistics.median(times["planned"]) if times["planned"] else float("nan")
    rows = []
    for label, variant in found.items():
        ms = statistics.median(times[label]) if times[label] else float("nan")
        rows.append({"cell": cell, "shape": f"{nh}x{dh}", "dtype": dname, "batch": batch,
                     "timed": "fwd" if direction == "forward" else "fwd+bwd", "variant": label,
                     "exchange": variant.exchange, "ms": round(ms, 4), "vs_planned": round(ms / base, 4),
                     "head_blocks": variant.head_blocks, "warps_m": variant.warps_m, "warps_k": variant.warps_k,
                     "batch_tile": variant.batch_tile,
                     "reg_k_tiles": variant.reg_k_tiles, "objective": variant.objective, "error": checks[label]})
        print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
