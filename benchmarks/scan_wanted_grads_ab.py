"""linear_scan with a fixed `a` (no grad): the backward, compiled for the gradients autograd asks for (`run_scan`'s
`needs`), reads a and dy and writes db alone, against the same problem with `a` requiring grad (reads h too, writes
da), and with the time model's own optimum for the fixed-a backward instead of plan()'s every-gradient block shape.
Each problem timed through the public API as `bench_scan.py` times it (`common.time_graph`: 10 calls in one graph),
forward + backward through autograd, the three in alternating rounds. Writes scan_wanted_grads_ab.{csv,md}.
"""

from __future__ import annotations

import argparse
import importlib
import statistics

import torch

import common
from flashrnn_kernels.scan import function, linear_scan

scan_plan = importlib.import_module("flashrnn_kernels.scan.plan")  # the module (the package exports plan())

SHAPES = [(1, 65536, 64), (8, 1024, 1536), (8, 4096, 1536)]


def pair(shape: tuple[int, int, int], dtype: torch.dtype, a_grad: bool):
    """linear_scan forward + backward on fresh random inputs (decays in (0.5, 1)): the gradients of b, and of a where
    `a_grad`."""
    a = (torch.rand(*shape, device="cuda") * 0.5 + 0.5).to(dtype).requires_grad_(a_grad)
    b = torch.randn(*shape, device="cuda").to(dtype).requires_grad_()
    dy = torch.randn(*shape, device="cuda").to(dtype)
    leaves = [a, b] if a_grad else [b]

    def call():
        h = linear_scan(a, b)
        return (h, *torch.autograd.grad(h, leaves, dy))

    return call


SOLVED = function.plan


def own_optimum(problem, gpu):
    """The time model's optimum for the problem itself, where plan() takes the every-gradient block shape."""
    return scan_plan._plan(problem, gpu, scan_plan._solve(problem, gpu))


def use_plans(solver) -> None:
    function.plan = solver
    function._plans.clear()
    function._launches.clear()


def alternate(variants: dict, rounds: int) -> dict:
    """Median us per call of each variant (solver, function) over alternating rounds."""
    times = {k: [] for k in variants}
    for r in range(rounds):
        for k in (list(variants) if r % 2 == 0 else list(variants)[::-1]):
            solver, fn = variants[k]
            use_plans(solver)
            times[k].append(1000 * common.time_graph(fn, calls=10, repeat=7))
    use_plans(SOLVED)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    common.require_cuda("scan_wanted_grads_ab")
    rows = []
    for shape in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            fixed = pair(shape, dtype, False)
            t = alternate({"fixed": (SOLVED, fixed), "own": (own_optimum, fixed),
                           "trained": (SOLVED, pair(shape, dtype, True))}, args.rounds)
            rows.append({"shape": common.format_dims(shape), "dtype": str(dtype).split(".")[-1],
                         "fixed_a_us": round(t["fixed"], 2), "a_with_grad_us": round(t["trained"], 2),
                         "ratio": round(t["fixed"] / t["trained"], 4),
                         "fixed_a_own_optimum_us": round(t["own"], 2)})
            print(rows[-1], flush=True)
    print(common.write_results("scan_wanted_grads_ab", rows, title="linear_scan forward + backward with a fixed `a` "
                               "against `a` requiring grad", notes=[
                                   "us per forward + backward through autograd, median of alternating rounds of "
                                   "common.time_graph (10 calls per graph). fixed a: a.requires_grad False, the "
                                   "backward kernel compiled without da (reads a and dy, writes db); a with grad: "
                                   "reads h too and writes da and db. Both take the block shape and stages solved for "
                                   "every gradient; fixed_a_own_optimum: fixed a with the time model's optimum for "
                                   "its own bytes (deeper stages in bf16)."]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
