"""Every distinct rendered source of a representative plan set, for every cell, compiles with nvcc for sm_80,
sm_89, sm_90 and sm_100, without spills, within the plan's register budget and shared-memory size (ptxas -v); the
fp32 LSTM and GRU forwards divide without IEEE-rounded division."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from flashrnn_kernels.cells import CELLS
from flashrnn_kernels.fused import plan as plan_module
from flashrnn_kernels.fused.plan import KernelPlan, PlanError, plan
from flashrnn_kernels.runtime.codegen import render
from tests.nvcc import NVCC, RUNTIME_OPTIONS, assert_divides_without_slow_paths, requires_nvcc

pytestmark = requires_nvcc

GPUS = {"sm_80": "A100-SXM4-80GB", "sm_89": "L40S", "sm_90": "H200-SXM-141GB", "sm_100": "B200"}
CASES = [  # (batch, heads, head_dim, dtype, direction)
    (16, 48, 16, "bf16", "forward"), (16, 48, 16, "fp32", "backward"),
    (16, 12, 64, "bf16", "forward"), (16, 12, 64, "bf16", "backward"), (16, 12, 64, "fp16", "forward"),
    (16, 12, 64, "fp32", "forward"), (16, 12, 64, "fp32", "backward"),
    (64, 6, 128, "bf16", "forward"), (16, 6, 128, "bf16", "backward"),
    (16, 3, 256, "bf16", "forward"), (16, 3, 256, "fp16", "backward"),
    (16, 1, 768, "bf16", "forward"), (16, 1, 768, "bf16", "backward"), (256, 1, 512, "bf16", "forward"),
    (256, 2, 512, "fp32", "forward"), (256, 48, 16, "bf16", "backward"),  # large batch tiles
]


def _plans() -> list[KernelPlan]:
    saved = dict(plan_module._memory)
    found = {}
    for cell in CELLS:
        for arch, gpu in GPUS.items():
            for batch, heads, head_dim, dtype, direction in CASES:
                try:
                    p = plan(cell, batch, heads, head_dim, dtype, gpu=gpu, direction=direction)
                except PlanError:
                    continue
                found[hashlib.sha256((render(p) + arch).encode()).hexdigest()] = p
    plan_module._memory.clear()
    plan_module._memory.update(saved)
    return list(found.values())


def _compile(p: KernelPlan, directory: Path) -> tuple[KernelPlan, str, int]:
    source = render(p)
    path = directory / f"{hashlib.sha256(source.encode()).hexdigest()[:16]}_{p.arch}.cu"
    path.write_text(source)
    cmd = [NVCC, "-cubin", f"-arch={p.arch}", "-Xptxas", "-v", *RUNTIME_OPTIONS, "-o", str(path.with_suffix(".cubin")),
           str(path)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    return p, result.stdout + result.stderr, result.returncode


def test_generated_sources_compile_without_spills(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHRNN_CACHE_DIR", str(tmp_path))
    plans = _plans()
    assert {p.arch for p in plans} == set(GPUS) and len(plans) >= 24 * len(CELLS)
    for cell in CELLS:
        assert {(p.arch, p.direction) for p in plans if p.cell == cell} == {
            (arch, direction) for arch in GPUS for direction in ("forward", "backward")}
    assert any(p.head_blocks > 1 and not p.global_exchange for p in plans) and any(p.warps_k > 1 for p in plans)
    assert {p.arch for p in plans if p.global_exchange} >= {"sm_80", "sm_90"}
    assert {p.arch for p in plans if p.partial_sums} >= {"sm_80", "sm_90"}  # the 1x768 bf16 backward
    assert {p.arch for p in plans if p.pair_blocks > 1} == {"sm_90", "sm_100"}  # pairs in clusters of two
    assert any(p.smem_k_tiles > 0 for p in plans) and any(p.global_k_tiles > 0 for p in plans)
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = list(pool.map(lambda p: _compile(p, tmp_path), plans))
    problems = []
    for p, log, rc in results:
        where = f"{p.cell} {p.direction} {p.dtype} DH={p.head_dim} {p.arch} (plan {p})"
        if rc != 0:
            problems.append(f"{where}: nvcc failed\n{log}")
            continue
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
        regs = int(re.search(r"Used (\d+) registers", log).group(1))
        if spills is None or spills.groups() != ("0", "0") or not re.search(r"\b0 bytes stack frame", log):
            problems.append(f"{where}: spills or stack\n{log}")
        if regs > p.register_budget:
            problems.append(f"{where}: {regs} registers > budget {p.register_budget}")
        smem = re.search(r"(\d+) bytes smem", log)
        if smem is not None and int(smem.group(1)) != 0:
            problems.append(f"{where}: unexpected static shared memory\n{log}")
    assert not problems, "\n".join(problems)


def test_missing_plan_field_hits_error(tmp_path):
    p = plan("lstm", 16, 12, 64, "bf16", gpu="H200")
    source = render(p).replace("#define WARPS_K", "#define NOT_WARPS_K", 1)
    path = tmp_path / "broken.cu"
    path.write_text(source)
    result = subprocess.run([NVCC, "-cubin", "-arch=sm_90", *RUNTIME_OPTIONS, "-o",
                             str(tmp_path / "broken.cubin"), str(path)], capture_output=True, text=True)
    assert result.returncode != 0 and "a plan field is missing" in result.stderr


def test_dividing_cells_divide_without_slow_paths(tmp_path, monkeypatch):
    """The sigmoid and every `/` of a cell (ops.cuh's cell_div) divide through rcp.approx: ptxas wraps an
    IEEE-rounded division (div.rn / rcp.rn) in a branch to a slow path on the step's critical path (H200, 12 heads x
    64: fp32 LSTM / GRU forwards 1.24x / 1.14x faster without it, fused_fp32_sigmoid_ab.md; the bf16 sLSTM forward
    1.6x, fused_slstm_division_ab.md)."""
    monkeypatch.setenv("FLASHRNN_CACHE_DIR", str(tmp_path))
    cases = [(cell, dtype, "forward") for cell in ("lstm", "gru", "slstm") for dtype in ("fp32", "bf16")]
    cases += [("slstm", dtype, "backward") for dtype in ("fp32", "bf16")]  # y_c / y_n and dn's / (y_n * y_n)
    for cell, dtype, direction in cases:
        source = render(plan(cell, 16, 12, 64, dtype, gpu="H200-SXM-141GB", direction=direction))
        # bf16 sigmoids go through tanh.approx; every fp32 case and the bf16 sLSTM's divisions take rcp.approx
        reciprocal = dtype == "fp32" or cell == "slstm"
        assert_divides_without_slow_paths(source, tmp_path / f"{cell}_{dtype}_{direction}.cu", reciprocal)
