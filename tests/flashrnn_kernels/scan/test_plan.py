"""Scan plans: valid for several GPU models (every named constraint holds, hwmodels' occupancy admits the block
with the promised min_blocks at the register need, at least 16 resident warps), independent of T, and every
rendered source compiles with nvcc for sm_80 and sm_90 with no spills and at most the plan's register estimate."""
from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import hwmodels
import pytest

from flashrnn_kernels.runtime.compile import KERNEL_DIR
from flashrnn_kernels.scan.plan import TARGET_WARPS, build_model, objective, plan, register_cap, register_need
from flashrnn_kernels.scan.problem import CELLS, DTYPES, ScanProblem

GPUS = ("H200-SXM-141GB", "H100-SXM5-80GB", "A100-SXM4-80GB", "L4", "RTX-4090", "V100-SXM2-32GB")
NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)


def _problems(dims=(1536, 64, 500)):
    return [ScanProblem(cell, dim, dtype, direction) for cell in CELLS for dtype in DTYPES for dim in dims
            for direction in ("forward", "backward")]


@pytest.mark.parametrize("gpu_name", GPUS)
def test_plans_are_valid_on_each_gpu(gpu_name):
    gpu = hwmodels.load(gpu_name)
    for problem in _problems():
        p = plan(problem, gpu)
        assert p.threads % gpu.warp_size == 0 and p.threads <= gpu.max_threads_per_block
        assert p.vec * problem.element_bytes <= 16 and problem.hidden_dim % p.vec == 0
        assert p.tile <= problem.hidden_dim
        assert p.regs_estimate <= gpu.max_regs_per_thread and p.smem_bytes <= gpu.smem_per_block
        assert p.smem_bytes + p.stage_bytes <= gpu.smem_per_block_optin
        need = register_need(p.problem.cell, p.steps, p.vec)
        occupancy = hwmodels.blocks_per_sm(gpu, p.threads, need, p.smem_bytes + p.stage_bytes)
        assert occupancy.blocks_per_sm == p.min_blocks >= 2
        # a GPU with little shared memory per SM (L4: 100 KiB) cannot stage enough steps for the warp target
        assert p.min_blocks * p.threads >= TARGET_WARPS * gpu.warp_size or gpu.smem_per_sm < 128 * 1024
        # the register cap the launch bounds give ptxas covers the need, and is the plan's estimate
        assert p.regs_estimate == register_cap(gpu, p.threads, p.min_blocks) >= need
        assert p.regs_estimate * p.threads * p.min_blocks <= gpu.regs_per_sm
        m = build_model(problem, gpu)
        sol = m.minimize(objective(m))
        assert all(c.holds(sol) for c in m.constraints)
        if problem.input_count == 2 and problem.hidden_dim % (16 // problem.element_bytes) == 0:
            assert p.vec * problem.element_bytes == 16, "16-byte accesses whenever D allows them"


def test_plan_has_no_sequence_length_and_chunks_cover_any_t():
    p = plan(ScanProblem("linear", 1536, "float32"), hwmodels.load("H200-SXM-141GB"))
    assert "T" not in p.defines() and not any("SEQ" in k for k in p.defines())
    for T in (1, 3, p.chunk_len, p.chunk_len + 1, 65537):
        assert (p.chunks(T) - 1) * p.chunk_len < T <= p.chunks(T) * p.chunk_len


def test_bad_problem_names_the_choices():
    with pytest.raises(ValueError, match="min_gru"):
        ScanProblem("gru", 64, "float32")
    with pytest.raises(ValueError, match="bfloat16"):
        ScanProblem("linear", 64, "float64")
    with pytest.raises(ValueError, match="hidden_dim"):
        ScanProblem("linear", 0, "float32")


def _ptxas(source: str, arch: str, tmp: Path) -> str:
    path = tmp / f"scan_{abs(hash(source))}_{arch}.cu"
    path.write_text(source)
    out = subprocess.run([NVCC, "-cubin", f"-arch={arch}", "-std=c++17", f"-I{KERNEL_DIR}", "-Xptxas", "-v",
                          "-o", str(path.with_suffix(".cubin")), str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stderr


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("arch,gpu_name", [("sm_80", "A100-SXM4-80GB"), ("sm_90", "H200-SXM-141GB")])
def test_every_rendered_source_compiles_without_spills(arch, gpu_name, tmp_path):
    gpu = hwmodels.load(gpu_name)
    plans = {p.source(): p for p in (plan(pr, gpu) for pr in _problems(dims=(1536, 64)))}
    with ThreadPoolExecutor(4) as pool:
        logs = list(pool.map(lambda s: _ptxas(s, arch, tmp_path), plans))
    for (source, p), log in zip(plans.items(), logs):
        spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
        assert spills and not any(spills), f"{p}: {log}"
        regs = int(re.search(r"Used (\d+) registers", log).group(1))
        assert regs <= p.regs_estimate, f"{p}: ptxas used {regs} registers, above the estimate"
        assert regs * p.threads * p.min_blocks <= gpu.regs_per_sm, f"{p}: {regs} registers"
