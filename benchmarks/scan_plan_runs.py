"""Several kernel plans of one scan problem run side by side on the same random inputs: the launches, the largest
difference of their outputs, and their device times taken in turns. Shared by the scripts that compare plans
(scan_model_plans_ab, scan_occupancy_ab, bench_scan's gate sweep)."""
from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Mapping

import torch

from common import relative_error, time_graph
from flashrnn_kernels.scan import function
from flashrnn_kernels.scan.plan import ScanPlan

Run = Callable[[], tuple]


def plan_runs(cell: str, direction: str, shape: tuple[int, int, int], dtype: torch.dtype,
              plans: Mapping[str, ScanPlan]) -> dict[str, Run]:
    """One launch per plan (function.run_scan, no h0) on the same random CUDA inputs of `shape` and `dtype`:
    linear_scan's decays in [0, 1), the gate cells' pre-activations and a backward's dy from randn, and a backward's
    h from the solver's forward."""
    count = next(iter(plans.values())).problem.input_count
    draws = [torch.rand if cell == "linear" and i == 0 else torch.randn for i in range(count)]
    inputs = tuple(draw(shape, device="cuda").to(dtype) for draw in draws)
    extra = {}
    if direction == "backward":
        extra = {"dy": torch.randn(shape, device="cuda").to(dtype),
                 "h": function.run_scan(cell, "forward", inputs, None)[0]}
    return {name: functools.partial(function.run_scan, cell, direction, inputs, None, **extra, kernel_plan=p)
            for name, p in plans.items()}


def outputs(run: Run) -> list[torch.Tensor]:
    """A copy of what one launch returns: h, or the inputs' gradients."""
    return [t.clone() for t in run() if t is not None]


def largest_difference(runs: Mapping[str, Run]) -> float:
    """The largest relative difference between the first run's outputs and any other run's."""
    first, *others = (outputs(run) for run in runs.values())
    return max((relative_error(got, want) for other in others for got, want in zip(other, first)), default=0.0)


def alternating_us(runs: Mapping[str, Run], rounds: int) -> dict[str, float]:
    """Each run's device time per call in us (common.time_graph), the median of `rounds` rounds in which the runs
    take turns, so that a drift of the clocks reaches all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(time_graph(run))
    return {name: statistics.median(ms) * 1e3 for name, ms in times.items()}
