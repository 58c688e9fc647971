"""CPU checks of the alternating backend: the rendered pointwise kernels compile with nvcc for sm_80 and sm_90
without spills or stack for every cell and dtype, and `choose` picks fused or alternating with a reason."""
from __future__ import annotations

import re
import subprocess

import pytest

import hwmodels
from flashrnn_kernels.alternating.choice import alternating_step_us, choose, fused_step_us
from flashrnn_kernels.alternating.source import KERNEL_NAMES, render
from flashrnn_kernels.cells import CELLS
from flashrnn_kernels.fused.plan import plan
from tests.nvcc import NVCC, RUNTIME_OPTIONS, requires_nvcc

H200 = "H200-SXM-141GB"


@requires_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("cell", sorted(CELLS))
def test_pointwise_source_compiles_without_spills(tmp_path, cell, dtype, arch):
    path = tmp_path / f"{cell}_{dtype}.cu"
    path.write_text(render(cell, dtype))
    result = subprocess.run([NVCC, "-cubin", f"-arch={arch}", "-Xptxas", "-v", *RUNTIME_OPTIONS,
                             "-o", str(path.with_suffix(".cubin")), str(path)],
                            check=False, capture_output=True, text=True)
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


@pytest.mark.parametrize("num_heads,head_dim,measured_us", [(12, 64, 5.077), (1, 1024, 6.558), (2, 1024, 7.703),
                                                             (1, 4096, 37.6)])
def test_alternating_model_meets_its_measurements(num_heads, head_dim, measured_us):
    # forward ms / 1024 steps on an H200, bf16, B=16 (alternating_crossover.md; 1x4096: alternating.md, 38.5 ms)
    predicted = alternating_step_us(num_heads, head_dim, 4, 2, hwmodels.load("H200"), "forward")
    assert abs(predicted - measured_us) <= 0.1 * measured_us


def test_choice_follows_the_predicted_step_times():
    fused = choose("lstm", 16, 1, 768, "bf16", gpu=H200)  # measured 2.06 ms fused, 6.15 ms alternating
    assert fused.backend == "fused" and "predicted" in fused.reason
    slow = choose("lstm", 16, 1, 1024, "fp32", gpu=H200)  # fp32 R of 16 MiB streamed from L2 every step
    assert slow.backend == "alternating" and "predicted" in slow.reason and "fused kernel's" in slow.reason
    # the fp32 fused kernel measured 33.7 ms forward at 1x1024 (B=16, T=1024): its predicted 50 us per step is of
    # that order, and the alternating backend's fixed cost plus R from L2 is far below it
    inference = choose("lstm", 16, 1, 1024, "fp32", gpu=H200, training=False)
    assert inference.backend == "alternating" and inference.forward_plan is None


def test_without_clusters_a_head_is_split_over_global_memory_only_where_one_block_cannot_hold_it():
    a100 = "A100-SXM4-80GB"
    assert not plan("lstm", 16, 6, 128, "bf16", gpu=a100).global_exchange  # one block holds a 128 head
    assert plan("lstm", 16, 3, 256, "bf16", gpu=a100).global_exchange
    p = choose("lstm", 16, 1, 768, "bf16", gpu=a100).forward_plan
    assert p.global_exchange and p.head_blocks == 48
    assert fused_step_us(p, hwmodels.load(a100)) == p.objective / hwmodels.load(a100).boost_clock_mhz
