"""The fused planner against the H200 measurements in benchmarks/results/fused_plan_measurements.csv: every tiling
timed side by side for a problem (cell, batch, heads x head_dim, dtype, direction; T=1024), collected from
fused_plan_variants.md and the A/B runs of the refitted cost model (fused_model_refit_ab*.md). plan() must choose a
tiling that was measured for each problem, and its time against the fastest measured one is bounded. A change of
the cost model that moves a plan to an unmeasured tiling fails here until that tiling is measured."""
from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path

import pytest

from flashrnn_kernels.fused.plan import KernelPlan, plan

MEASUREMENTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "fused_plan_measurements.csv"
GPU = "H200-SXM-141GB"


def groups() -> dict[tuple, list[dict]]:
    """Measured tilings per problem and run (a backward is timed with its run's forward, so runs are not mixed)."""
    found = defaultdict(list)
    with open(MEASUREMENTS, newline="") as handle:
        for row in csv.DictReader(handle):
            key = (row["cell"], int(row["batch"]), row["shape"], row["dtype"], row["direction"], row["run"])
            found[key].append(row)
    return found


def matches(row: dict, p: KernelPlan) -> bool:
    """The measured row is `p`'s tiling (its batch tile where the row records one)."""
    return (row["exchange"], int(row["head_blocks"]), int(row["warps_m"]), int(row["warps_k"])) == (
        p.exchange, p.head_blocks, p.warps_m, p.warps_k) and row["batch_tile"] in ("", str(p.batch_tile))


def test_plans_are_measured_and_near_the_fastest_measured_tiling(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHRNN_CACHE_DIR", str(tmp_path))
    regrets, unmeasured = {}, []
    by_problem = defaultdict(dict)
    for (cell, batch, shape, dtype, direction, run), rows in groups().items():
        by_problem[(cell, batch, shape, dtype, direction)][run] = rows
    assert len(by_problem) >= 100
    for (cell, batch, shape, dtype, direction), runs in by_problem.items():
        heads, head_dim = map(int, shape.split("x"))
        p = plan(cell, batch, heads, head_dim, dtype, gpu=GPU, direction=direction)
        timed = [(min(float(r["ms"]) for r in rows), [float(r["ms"]) for r in rows if matches(r, p)])
                 for rows in runs.values()]
        timed = [(best, own[0]) for best, own in timed if own]
        if not timed:
            unmeasured.append(f"{cell} B={batch} {shape} {dtype} {direction}: {p}")
            continue
        best, own = timed[-1]
        regrets[(cell, batch, shape, dtype, direction)] = own / best
    assert not unmeasured, "plans on tilings never measured:\n" + "\n".join(unmeasured)
    geomean = math.exp(sum(map(math.log, regrets.values())) / len(regrets))
    assert geomean <= 1.025, f"plans take {geomean:.3f}x the fastest measured tiling's time (geometric mean)"
    slow = sorted((r, k) for k, r in regrets.items() if r > 1.25)
    assert not slow, f"plans over 1.25x the fastest measured tiling: {slow}"


@pytest.mark.parametrize("row", [{"exchange": "cluster", "head_blocks": "8", "warps_m": "1", "warps_k": "2",
                                  "batch_tile": ""}])
def test_a_measured_row_matches_its_tiling(row):
    p = plan("lstm", 16, 6, 128, "bf16", gpu=GPU)
    assert matches(row, p) and not matches({**row, "batch_tile": "16"}, p)
    assert not matches({**row, "head_blocks": "4"}, p)
