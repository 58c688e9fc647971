"""CPU checks of the alternating backend: the rendered pointwise kernels compile with nvcc for sm_80 and sm_90
without spills or stack for every cell and dtype, and `choose` picks fused or alternating with a reason."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flashrnn_kernels.alternating.choice import choose
from flashrnn_kernels.alternating.source import KERNEL_NAMES, render
from flashrnn_kernels.cells import CELLS
from flashrnn_kernels.runtime.compile import KERNEL_DIR

NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)
H200 = "H200-SXM-141GB"


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("cell", sorted(CELLS))
def test_pointwise_source_compiles_without_spills(tmp_path, cell, dtype, arch):
    path = tmp_path / f"{cell}_{dtype}.cu"
    path.write_text(render(cell, dtype))
    result = subprocess.run([NVCC, "-cubin", f"-arch={arch}", "-Xptxas", "-v", "-std=c++17", f"-I{KERNEL_DIR}",
                             "-o", str(path.with_suffix(".cubin")), str(path)], check=False, capture_output=True, text=True)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    for name in KERNEL_NAMES.values():
        assert f"Compiling entry function '{name}'" in log, log
    spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(spills) == 2 and all(found == ("0", "0", "0") for found in spills), log


def test_source_depends_on_cell_and_dtype_only():
    assert render("lstm", "bf16") == render("lstm", "bfloat16")
    assert render("lstm", "bf16") != render("gru", "bf16") != render("gru", "fp32")
    assert "FLASHRNN_FAST_ACTIVATIONS" not in render("lstm", "fp32")
    with pytest.raises(ValueError, match="known cells"):
        render("lsmt", "bf16")


@pytest.mark.parametrize("head_dim", [2048, 4096, 1000])
def test_head_dims_without_fused_kernel_choose_alternating(head_dim):
    choice = choose("lstm", 16, 1, head_dim, "bf16", gpu=H200)
    assert choice.backend == "alternating" and f"got {head_dim}" in choice.reason
    assert choice.forward_plan is None


def test_fitting_problem_chooses_fused_with_both_plans():
    choice = choose("lstm", 16, 12, 64, "bf16", gpu=H200)
    assert choice.backend == "fused" and "H200" in choice.reason
    assert choice.forward_plan.direction == "forward" and choice.backward_plan.direction == "backward"
    inference = choose("lstm", 16, 12, 64, "bf16", gpu=H200, training=False)
    assert inference.backend == "fused" and inference.backward_plan is None


def test_cell_outside_fused_cells_chooses_alternating():
    choice = choose("gru", 16, 12, 64, "bf16", gpu=H200, fused_cells={"lstm"})
    assert choice.backend == "alternating" and "'gru'" in choice.reason
    assert choose("lstm", 16, 12, 64, "bf16", gpu=H200, fused_cells={"lstm"}).backend == "fused"


def test_plan_error_becomes_the_reason():
    # sm_70 has no mma.sync bf16: the fused planner refuses, the alternating backend takes over
    choice = choose("lstm", 16, 12, 64, "bf16", gpu="V100-SXM2-32GB")
    assert choice.backend == "alternating" and "no fused forward tiling" in choice.reason and "sm_80" in choice.reason


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="batch must be a positive int"):
        choose("lstm", 0, 1, 64, "bf16", gpu=H200)
    with pytest.raises(ValueError, match="not supported"):
        choose("lstm", 1, 1, 64, "int8", gpu=H200)
