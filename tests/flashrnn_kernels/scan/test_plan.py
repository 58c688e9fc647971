"""Scan plans: valid for several GPU models (every named constraint holds, hwmodels' occupancy admits the block
with the promised min_blocks at the register need, enough resident warps), the carry mode the time model finds
fastest, chunks that cover any T, and every rendered source (each carry mode) compiles with nvcc for sm_80 and sm_90
with no spills, at most the plan's register estimate and the plan's static shared memory; the fp32 gate kernels
divide without IEEE-rounded division (a slow-path branch in SASS)."""
from __future__ import annotations

import dataclasses
import itertools
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import constrint
import hwmodels
import pytest

from flashrnn_kernels.scan.cost_model import (STAGE_ALIGN, WORK_MODELS, min_resident_warps, preferred_steps,
                                              register_cap, register_need)
from flashrnn_kernels.scan.plan import CARRIES, build_model, carry_plan, estimate_ns, objective, plan
from flashrnn_kernels.scan.problem import ALL_GRADIENTS, CELLS, DTYPES, ScanProblem, bucket
from tests.nvcc import NVCC, RUNTIME_OPTIONS, assert_divides_without_slow_paths, compile_ptx, requires_nvcc

GPUS = ("H200-SXM-141GB", "H100-SXM5-80GB", "A100-SXM4-80GB", "L4", "RTX-4090", "V100-SXM2-32GB")


SHAPES = ((8, 4096), (1, 65536), (2, 1000))  # (B, T)


def _problems(dims=(1536, 64, 500), shapes=SHAPES):
    return [ScanProblem.for_shape(cell, B, T, dim, dtype, direction) for cell in CELLS for dtype in DTYPES
            for dim in dims for B, T in shapes for direction in ("forward", "backward")]


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
        need = register_need(p.problem, p.steps, p.vec, p.stages, p.carry, p.held)
        occupancy = hwmodels.blocks_per_sm(gpu, p.threads, need, p.smem_bytes + p.stage_bytes)
        assert occupancy.blocks_per_sm == p.min_blocks >= 1
        # the warps resident per SM: the full minimum, or fewer only where no block shape has it
        few_warps = p.min_blocks * p.threads < min_resident_warps(p.carry, p.problem.direction) * gpu.warp_size
        if few_warps:
            with pytest.raises(constrint.Infeasible):
                build_model(problem, gpu).solve()
        assert p.min_blocks * p.threads >= min_resident_warps(p.carry, p.problem.direction, few_warps) * gpu.warp_size
        # the register cap the launch bounds give ptxas covers the need, and is the plan's estimate
        assert p.regs_estimate == register_cap(gpu, p.threads, p.min_blocks) >= need
        assert p.regs_estimate * p.threads * p.min_blocks <= gpu.regs_per_sm
        m = build_model(problem, gpu, few_warps)
        sol = m.minimize(objective(m))
        assert all(c.holds(sol) for c in m.constraints)
        assert sol["time_ns"] == p.estimate_ns == estimate_ns(p, gpu)
        if problem.hidden_dim % (16 // problem.element_bytes) == 0:
            assert p.vec * problem.element_bytes == 16, "16-byte accesses whenever D allows them"
        work = WORK_MODELS[problem.cell]
        widest = 1 << (problem.hidden_dim.bit_length() - 1)  # channels: the largest power of two within D
        assert p.tile * problem.element_bytes >= work.min_row_bytes or p.tile >= widest, "rows span whole lines"
        assert p.threads_d in work.threads_d


def test_carry_mode_is_the_fastest_modelled():
    """The plan's carry mode has the least modelled time; segments only where they beat whole lanes outright;
    chained segments only where even the narrowest tiles leave SMs without a lane."""
    gpu = hwmodels.load("H200-SXM-141GB")
    for problem in _problems(dims=(1536, 64)):
        p = plan(problem, gpu)
        best = {}
        for carry in CARRIES:
            try:
                best[carry] = carry_plan(problem, gpu, carry)
            except constrint.Infeasible as exc:
                if carry == "resident" and not WORK_MODELS[problem.cell].resident[problem.direction == "backward"]:
                    assert "no_resident_segments_for_the_cell_and_direction" in str(exc)
                    continue
                assert carry == "chained" and "chained_only_when_lanes_leave_sms_idle" in str(exc)
                assert problem.batch * problem.hidden_dim // (64 // problem.element_bytes) >= gpu.sm_count
        assert all(b.carry == carry for carry, b in best.items())
        assert p.estimate_ns == min(b.estimate_ns for b in best.values())
        assert p.carry == "whole" or best[p.carry].estimate_ns < best["whole"].estimate_ns
        assert (p.stages == 1) == (p.carry == "chained"), "a chained block stages its one chunk, the others stage ahead"
    with pytest.raises(ValueError, match="chained"):
        carry_plan(problem, gpu, "split")


def test_segments_per_carry_mode():
    """[1, 65536, 64] has too few lanes to fill the GPU: its lanes are split, into at least one block per SM;
    resident segments fit the slots, chained ones are one chunk each. Short wide scans
    ([8, 256, 1536] bf16) fill the GPU with whole lanes, one segment each."""
    gpu = hwmodels.load("H200-SXM-141GB")
    problem = ScanProblem.for_shape("linear", 1, 65536, 64, "float32")
    thin = plan(problem, gpu)
    lanes, chunks = thin.d_tiles(64), thin.chunks(65536)
    assert thin.carry != "whole" and lanes * thin.segments(lanes, chunks) >= gpu.sm_count
    resident = carry_plan(problem, gpu, "resident")
    lanes, chunks = resident.d_tiles(64), resident.chunks(65536)
    assert gpu.sm_count <= lanes * resident.segments(lanes, chunks) <= resident.slots
    chained = carry_plan(problem, gpu, "chained")
    lanes, chunks = chained.d_tiles(64), chained.chunks(65536)
    assert chained.segments(lanes, chunks) == chunks
    shape = (8, 32, 8) if (chained.threads_t, chained.steps) != (32, 8) else (8, 16, 16)  # another block shape
    pinned = carry_plan(problem, gpu, "chained", threads_d=shape[0], threads_t=shape[1], steps=shape[2])
    assert (pinned.carry, pinned.threads_d, pinned.threads_t, pinned.steps) == ("chained", *shape) != (
        chained.carry, chained.threads_d, chained.threads_t, chained.steps)
    short = plan(ScanProblem.for_shape("min_gru", 8, 256, 1536, "bfloat16"), gpu)
    assert short.carry == "whole" and short.segments(8 * short.d_tiles(1536), short.chunks(256)) == 1
    assert 8 * short.d_tiles(1536) >= gpu.sm_count


def test_thin_plans_follow_the_measured_carries():
    """[1, 65536, 64] on an H200 (scan_thin_sweep.csv, scan_carry_choice.md, scan_backward_carry_context.md,
    scan_forward_in_l2_ab.md, scan_held_alone_ab_h100.md): the linear_scan forward in chained blocks holding 5 of 21
    steps in registers in fp32 (0.80x the time of the resident segments planned before) and of 8 steps,
    5 per SM, in bf16 (whose 25 MB of traffic fit in L2), its backward in chained one-chunk segments of 64 elements per
    thread, 16 steps of 4 channels in fp32 and 8 of 8 in bf16 (never resident: measured after a forward, 1.15x / 1.5x
    the chained time in fp32 / bf16; scan_backward_elements_ab_h100.md), minGRU / minLSTM
    in chained one-chunk segments (never resident), their backward with at most 4 steps per thread (8 measured
    1.4-2.6x slower), their forward with 4 (2 and 8 measured up to 1.4x slower) in at most 16 thread rows (the error
    with decays near 1 grew with the rows: 2.7e-5 at 32)."""
    gpu = hwmodels.load("H200-SXM-141GB")
    for dtype in ("float32", "bfloat16"):
        for direction in ("forward", "backward"):
            linear = plan(ScanProblem.for_shape("linear", 1, 65536, 64, dtype, direction), gpu)
            if direction == "forward":
                assert (linear.carry, linear.steps, linear.held) == ("chained", 21, 5) if dtype == "float32" else (
                    linear.carry == "chained" and linear.steps == 8 and linear.min_blocks == 5), linear
            else:
                assert linear.carry == "chained" and linear.steps * linear.vec == 64
                with pytest.raises(constrint.Infeasible, match="no_resident_segments_for_the_cell_and_direction"):
                    carry_plan(linear.problem, gpu, "resident")
            for cell in ("min_gru", "min_lstm"):
                p = plan(ScanProblem.for_shape(cell, 1, 65536, 64, dtype, direction), gpu)
                assert p.carry == "chained"
                assert direction == "forward" or p.steps <= 4
                assert direction == "backward" or (p.steps == 4 and p.threads_t <= 16)
                with pytest.raises(constrint.Infeasible, match="no_resident_segments_for_the_cell_and_direction"):
                    carry_plan(p.problem, gpu, "resident")


def test_more_resident_blocks_win_ties_only_where_blocks_share_an_sm():
    """The linear scan's tie-break of more resident blocks per SM: at [8, T, 1536] the fp32 forward's 192 lanes share
    SMs, and 6 blocks of 4 steps in 4 stages win (H200, 146.7 us against 161.3 us for 4 blocks of 8 steps in 3); the
    bf16 backward's 96 lanes are alone on their SMs, and on the H100 the tie goes to fewer stages, 8 steps in 2
    (0.72-0.75x the time of 2 steps in 4 stages at 3 per SM, scan_model_plans_h100.log)."""
    h200, h100 = hwmodels.load("H200-SXM-141GB"), hwmodels.load("H100-SXM5-80GB")
    fp32 = plan(ScanProblem.for_shape("linear", 8, 4096, 1536, "float32", "forward"), h200)
    assert (fp32.carry, fp32.steps, fp32.stages, fp32.min_blocks) == ("whole", 4, 4, 6)
    for T in (1024, 4096, 16384):
        bf16 = plan(ScanProblem.for_shape("linear", 8, T, 1536, "bfloat16", "backward"), h100)
        assert (bf16.carry, bf16.threads_d, bf16.threads_t, bf16.steps, bf16.stages) == ("whole", 16, 8, 8, 2), bf16
        assert 8 * bf16.d_tiles(1536) < h100.sm_count


@pytest.mark.parametrize("gpu_name", ["H200-SXM-141GB", "H100-SXM5-80GB"])
def test_chained_segments_need_fewer_registers(gpu_name):
    """Chained segments plan the occupancy their kernels compile into without spills (scan_occupancy_ab_h100.md:
    one block per SM more took 0.84-0.91x the time): the thin 16-bit forwards 3 blocks of 128 threads per SM (a cap of
    168 registers, where whole lanes' need of their 32 map values is 192 / 208), the fp16 backwards a cap of 128 (whole
    lanes' need 144); whole lanes keep their need."""
    gpu = hwmodels.load(gpu_name)
    for cell, dtype in itertools.product(("min_gru", "min_lstm"), ("bfloat16", "float16")):
        forward = plan(ScanProblem.for_shape(cell, 1, 65536, 64, dtype, "forward"), gpu)
        assert (forward.carry, forward.threads, forward.min_blocks, forward.regs_estimate) == ("chained", 128, 3, 168)
        assert forward.steps * forward.vec == 32
        assert register_need(forward.problem, forward.steps, forward.vec, 1, "whole") == (
            192 if dtype == "bfloat16" else 208)
        backward = plan(ScanProblem.for_shape(cell, 1, 65536, 64, dtype, "backward"), gpu)
        assert backward.carry == "chained" and backward.regs_estimate == 128
        assert register_need(backward.problem, backward.steps, backward.vec, 1, "whole") == (
            128 if dtype == "bfloat16" else 144)


@pytest.mark.parametrize("gpu_name", ["H200-SXM-141GB", "H100-SXM5-80GB", "A100-SXM4-80GB", "B200"])
def test_gate_cell_chained_forwards_share_their_sm(gpu_name):
    """minGRU / minLSTM chained forwards run at least 2 blocks per SM: alone on its SM, a block took 1.01-1.30x the
    forward time of the plans that replaced it (scan_lone_chained_ab_h100.md), where the time model without
    chained_solo_ns had tied them; the H100's thin fp32 minLSTM forward, alone before, runs 2 blocks of 4 steps."""
    gpu, chained = hwmodels.load(gpu_name), 0
    for cell, dtype, shape in itertools.product(("min_gru", "min_lstm"), ("float32", "bfloat16", "float16"),
                                                ((1, 65536, 64), (2, 32768, 128), (1, 65536, 256), (4, 8192, 128),
                                                 (1, 262144, 64))):
        for paired in (False, True):
            p = plan(ScanProblem.for_shape(cell, *shape, dtype, "forward", paired=paired), gpu)
            chained += p.carry == "chained"
            assert p.carry != "chained" or p.min_blocks >= 2, p
    assert chained >= 40
    if gpu_name == "H100-SXM5-80GB":
        p = plan(ScanProblem.for_shape("min_lstm", 1, 65536, 64, "float32", "forward"), gpu)
        assert (p.threads_d, p.threads_t, p.steps, p.min_blocks) == (16, 16, 4, 2), p


@pytest.mark.parametrize("case", [((1, 32768, 64), "float32"), ((2, 16384, 64), "float32"), ((1, 5000, 256), "float32"),
                                  ((16, 1000, 128), "float32"), ((4, 8192, 128), "bfloat16"),
                                  ((16, 1000, 256), "bfloat16"), ((8, 5000, 64), "bfloat16")])
def test_linear_forwards_in_l2_run_chained_blocks_of_5_per_sm(case):
    """Forwards whose whole traffic fits in three quarters of the H200's L2 ran as chained blocks of 8 x 16 threads, 8
    steps, 5 per SM in 0.73-1.00x the time of the resident segments planned before, 0.68-0.99x in a forward+backward
    pair (23 problems of scan_forward_in_l2_model_ab.md); blocks of 2 per SM lost alone by up to 1.08x
    (scan_forward_in_l2_ab.md). The thin fp32 forward's 50 MB do not fit: its chained blocks hold steps instead."""
    shape, dtype = case
    p = plan(ScanProblem.for_shape("linear", *shape, dtype, "forward"), hwmodels.load("H200-SXM-141GB"))
    assert (p.carry, p.threads_d, p.threads_t, p.steps, p.min_blocks) == ("chained", 8, 16, 8, 5), p


@pytest.mark.parametrize("shape", [(1, 16384, 64), (2, 32768, 128), (4, 8192, 128), (1, 65536, 256)])
def test_linear_backward_runs_chained_blocks_of_64_elements_per_thread(shape):
    """The linear backward's thin problems timed after a forward (scan_backward_carry_context.md, H200): chained
    one-chunk segments (the plans of resident segments, and of chained ones of 2 steps, or of 16 in bf16, took
    1.02-1.54x the best measured time), 64 elements per thread: 8 steps of 8 channels in bf16, 16 of 4 in fp32
    (0.991-1.0x the pairs' time of 8 steps; scan_backward_elements_ab_h100.md)."""
    gpu = hwmodels.load("H200-SXM-141GB")
    for dtype in ("float32", "bfloat16"):
        p = plan(ScanProblem.for_shape("linear", *shape, dtype, "backward"), gpu)
        assert (p.carry, p.steps * p.vec, p.stages) == ("chained", 64, 1), p


@pytest.mark.parametrize("case", [((1, 65536, 64), "float32", "backward"), ((2, 32768, 128), "bfloat16", "backward"),
                                  ((1, 65536, 256), "float32", "backward"), ((1, 16384, 1536), "float32", "backward"),
                                  ((1, 262144, 64), "float32", "forward"), ((1, 65536, 256), "float32", "forward"),
                                  ((2, 16384, 1536), "float32", "forward"), ((1, 65536, 1536), "bfloat16", "forward")])
def test_linear_chained_blocks_share_their_sm(case):
    """Chained blocks alone on their SM took 1.05-1.41x the time of the plans now chosen (scan_chained_solo_ab.md,
    H200; the thin [1, 65536, 64] fp32 backward level, 0.99-1.01x): the linear scan's chained plans run two or more
    blocks per SM, the forward's at 8 or 16 steps per thread (4 steps at [1, 16384, 1536] fp32 took 1.17x as long)."""
    shape, dtype, direction = case
    p = plan(ScanProblem.for_shape("linear", *shape, dtype, direction), hwmodels.load("H200-SXM-141GB"))
    assert p.carry == "chained" and p.min_blocks >= 2, p
    assert direction == "backward" or p.steps in (8, 16), p


@pytest.mark.parametrize("case", [((1, 65536, 64), "float32"), ((4, 16384, 64), "float32"),
                                  ((1, 65536, 128), "bfloat16"), ((2, 65536, 64), "bfloat16"),
                                  ((8, 16384, 64), "bfloat16")])
def test_paired_linear_forwards_run_chained_blocks(case):
    """A forward that a backward follows reads its inputs from memory, not from the L2 that repeated forwards leave
    them in: there the thin and narrow forwards' chained blocks of 8 x 16 threads, 16 steps, 2 per SM made the pairs
    0.73-0.98x as long as the resident segments planned for the forward alone, which alone run up to 1.24x faster
    (scan_thin_forward_context.md, H200). So each context has its plan. Their 512 blocks of 16 staged steps exceed a
    wave, so in fp32 (HELD_DTYPES) each thread holds 5 more steps in registers: 392 blocks, 3 per SM, one wave
    (scan_held_ab_h100.md). Such a launch also runs faster alone than resident segments (0.785-0.834x on eight
    problems of up to 32 lanes; scan_held_alone_ab_h100.md): there the fp32 forward alone takes the paired plan."""
    shape, dtype = case
    gpu = hwmodels.load("H200-SXM-141GB")
    alone = plan(ScanProblem.for_shape("linear", *shape, dtype, "forward"), gpu)
    paired = plan(ScanProblem.for_shape("linear", *shape, dtype, "forward", paired=True), gpu)
    assert alone.carry == "resident" if dtype == "bfloat16" else alone == dataclasses.replace(
        paired, problem=alone.problem), alone
    held = (21, 5, 3) if dtype == "float32" else (16, 0, 2)
    assert (paired.carry, paired.threads_d, paired.threads_t, paired.steps, paired.held, paired.min_blocks) == (
        "chained", 8, 16, *held), paired


@pytest.mark.parametrize("gpu_name", ["H200-SXM-141GB", "H100-SXM5-80GB"])
def test_held_steps_are_the_fewest_that_fit_one_wave(gpu_name):
    """The solver holds steps in registers only in linear chained forwards whose blocks of staged steps alone exceed
    one wave, and holds the fewest that put the launch in one wave; elsewhere (several waves either way, or one
    without them, backwards, the gate cells, dtypes outside HELD_DTYPES) it holds none."""
    gpu = hwmodels.load(gpu_name)
    held_somewhere = False
    for cell in CELLS:
        for dtype in ("float32", "bfloat16"):
            for B, T, D in ((1, 65536, 64), (4, 16384, 64), (2, 32768, 128), (1, 262144, 64), (1, 16384, 64)):
                for direction, paired in (("forward", True), ("forward", False), ("backward", False)):
                    p = plan(ScanProblem.for_shape(cell, B, T, D, dtype, direction, paired=paired), gpu)
                    if not p.held:
                        continue
                    held_somewhere = True
                    assert (cell, direction, p.carry, dtype) == ("linear", "forward", "chained", "float32"), p
                    lanes = B * p.d_tiles(D)
                    assert lanes * p.chunks(T) <= p.slots, p
                    assert lanes * -(-T // (p.threads_t * (p.steps - 1))) > p.slots, p
                    assert p.steps - p.held == WORK_MODELS["linear"].chained_steps[0]
    assert held_somewhere


def test_pairing_moves_no_other_plan():
    """Wide linear forwards (whole lanes) and the gate cells' forwards (chained_ns 0 either way) keep their plans."""
    gpu = hwmodels.load("H200-SXM-141GB")
    for problem in _problems(dims=(1536, 64)):
        if problem.direction == "backward" or (problem.cell == "linear" and problem.batch == 1):
            continue
        alone, paired = plan(problem, gpu), plan(dataclasses.replace(problem, paired=True), gpu)
        assert dataclasses.replace(paired, problem=problem) == alone, (alone, paired)


def test_look_back_groups_and_their_words():
    """A split lane's look-back groups its segments by 16, or by threads_t where that is more (its first round reads
    single maps of at most two groups), and a launch publishes words for every segment, then for every group."""
    gpu = hwmodels.load("h100")
    problem = ScanProblem.for_shape("linear", 1, 65536, 64, "float32", "forward")
    rows16 = carry_plan(problem, gpu, "chained", threads_d=8, threads_t=16, steps=8)
    rows32 = carry_plan(problem, gpu, "chained", threads_d=8, threads_t=32, steps=8)
    rows8 = carry_plan(problem, gpu, "chained", threads_d=8, threads_t=8, steps=8)
    assert [p.group for p in (rows8, rows16, rows32)] == [16, 16, 32]
    assert all(p.defines()["SCAN_GROUP"] == p.group for p in (rows8, rows16, rows32))
    assert rows16.tile == 32
    assert rows16.published_words(2, 40) == 2 * (40 + 3) * 32  # 3 groups, the last one partial
    assert rows32.published_words(1, 64) == (64 + 2) * 32
    assert rows16.published_words(4, 1) == 0  # whole lanes publish nothing


def test_deterministic_plans_keep_the_block_shape():
    """torch.use_deterministic_algorithms: split lanes keep their plan's block shape, compiled with
    SCAN_DETERMINISTIC (only segment 0 publishes its final state); whole lanes, deterministic as they are, keep the
    plan itself, so both modes share its kernel."""
    gpu = hwmodels.load("H200-SXM-141GB")
    carries = set()
    for problem in _problems(dims=(1536, 64)):
        for paired in ((False, True) if problem.direction == "forward" else (False,)):
            default = plan(dataclasses.replace(problem, paired=paired), gpu)
            deterministic = plan(dataclasses.replace(problem, paired=paired, deterministic=True), gpu)
            carries.add(default.carry)
            if default.carry == "whole":
                assert deterministic is default
            else:
                assert deterministic.problem.deterministic and deterministic.defines()["SCAN_DETERMINISTIC"] == 1
                assert dataclasses.replace(deterministic, problem=default.problem) == default
                assert deterministic.source() != default.source()
            assert default.defines()["SCAN_DETERMINISTIC"] == 0
    assert carries == set(CARRIES)


def test_wide_gate_plans_follow_the_gate_sweep():
    """[64, 4096, 512] and [8, 4096, 1536] on an H200 (`bench_scan.py --gate-sweep`, scan_gate_cells_ab.md): the
    minGRU / minLSTM kernels run whole lanes in blocks of 4 warps whose threads handle at most 2,048 elements (the
    earlier plans' threads of 8,192 at [64, 4096, 512] took 1.7-2.6x as long)."""
    gpu = hwmodels.load("H200-SXM-141GB")
    for cell in ("min_gru", "min_lstm"):
        for dtype in ("float32", "bfloat16"):
            for direction in ("forward", "backward"):
                for B, T, D in ((64, 4096, 512), (8, 4096, 1536)):
                    p = plan(ScanProblem.for_shape(cell, B, T, D, dtype, direction), gpu)
                    assert p.carry == "whole" and p.threads == 128
                    assert T * p.vec // p.threads_t <= 2048


@pytest.mark.parametrize("case", [("min_gru", "bfloat16", "backward"), ("min_gru", "float32", "forward"),
                                  ("min_lstm", "bfloat16", "forward"), ("linear", "bfloat16", "backward")])
def test_ties_of_the_time_model_are_broken_by_the_objective(case):
    """The plan is the objective's only optimum, not whichever of equal plans a search meets first: at [8, 4096,
    1536] on an H200 the time model ties blocks that differ only in stages (and so in blocks per SM), or in steps
    and stages; fewer stages won where measured (minGRU / minLSTM at T = 4,096 0.88-0.97x the time with 2 stages
    instead of 3-4; linear bf16 backward: 4 steps and 3 stages took 1.29x as long as 8 and 2;
    results/scan_plan_ties_ab.md)."""
    cell, dtype, direction = case
    problem = ScanProblem.for_shape(cell, 8, 4096, 1536, dtype, direction)
    m = build_model(problem, hwmodels.load("H200-SXM-141GB"))
    best = m.minimize(objective(m))
    m.add(objective(m) == best.objective)
    assert m.count() == 1
    assert best["stages"] == 2 and (cell != "linear" or best["steps"] == 8)


@pytest.mark.parametrize("dtype, shape, other", [("bfloat16", (8, 32, 8), (8, 16, 16)),
                                                 ("float32", (8, 16, 16), (8, 32, 8))])
def test_tied_chained_backwards_take_the_preferred_steps(dtype, shape, other):
    """On an H100 the waves' bandwidth bound hides the chained backward's chained_off_ns, so the time model ties 8 x 32
    threads of 8 steps with 8 x 16 of 16; the objective takes the steps nearer the preferred ones, 64 elements per
    thread (preferred_steps), before fewer rows: 8 x 32 x 8 took 0.79-0.90x the bf16 pairs' time there
    (results/scan_backward_plans_h100.md), and in fp32 8 x 16 x 16 took 0.991-1.0x the time of 8 x 32 x 8 in five
    pairs (results/scan_backward_elements_ab_h100.md)."""
    gpu = hwmodels.load("H100-SXM5-80GB")
    problem = ScanProblem.for_shape("linear", 1, 65536, 64, dtype, "backward")
    p = plan(problem, gpu)
    assert (p.carry, p.threads_d, p.threads_t, p.steps) == ("chained", *shape)
    assert p.steps == preferred_steps(problem) == WORK_MODELS["linear"].chained_backward_elements // p.vec
    tied = carry_plan(problem, gpu, "chained", threads_d=other[0], threads_t=other[1], steps=other[2], vec=p.vec)
    assert tied.estimate_ns == p.estimate_ns  # a tie of the time model, which the objective breaks


def test_tiny_hidden_sizes_have_plans():
    """D of a few channels (an 8-channel fp32 row is 2 threads of 4): fewer than four warps, the rows at their
    most."""
    gpu = hwmodels.load("H200-SXM-141GB")
    for problem in _problems(dims=(1, 2, 3, 8, 12), shapes=((2, 6), (1, 65536))):
        p = plan(problem, gpu)
        assert p.tile <= problem.hidden_dim
        assert p.min_blocks * p.threads >= min_resident_warps(p.carry, p.problem.direction) * gpu.warp_size


def test_buckets_round_up_to_powers_of_two():
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 1000, 1024, 1025, 65537)] == [1, 2, 4, 4, 8, 1024, 1024, 2048,
                                                                            131072]
    assert ScanProblem.for_shape("linear", 3, 1000, 64, "float32") == ScanProblem("linear", 64, "float32", 4, 1024)


def test_chunks_cover_any_t():
    p = plan(ScanProblem.for_shape("linear", 8, 4096, 1536, "float32"), hwmodels.load("H200-SXM-141GB"))
    for T in (1, 3, p.chunk_len, p.chunk_len + 1, 65537):
        assert (p.chunks(T) - 1) * p.chunk_len < T <= p.chunks(T) * p.chunk_len


def test_bad_problem_names_the_choices():
    with pytest.raises(ValueError, match="min_gru"):
        ScanProblem("gru", 64, "float32", 1, 1)
    with pytest.raises(ValueError, match="bfloat16"):
        ScanProblem("linear", 64, "float64", 1, 1)
    with pytest.raises(ValueError, match="hidden_dim"):
        ScanProblem("linear", 0, "float32", 1, 1)
    with pytest.raises(ValueError, match="seq_len"):
        ScanProblem("linear", 64, "float32", 1, 0)
    with pytest.raises(ValueError, match="forwards only"):
        ScanProblem("linear", 64, "float32", 1, 1, "backward", paired=True)
    with pytest.raises(ValueError, match="paired"):
        ScanProblem("linear", 64, "float32", 1, 1, paired=1)
    with pytest.raises(ValueError, match="deterministic"):
        ScanProblem("linear", 64, "float32", 1, 1, deterministic=None)


def _plan_or_none(problem, gpu, carry):
    try:
        return carry_plan(problem, gpu, carry)
    except constrint.Infeasible:  # no chained plans for lanes that fill the GPU
        return None


def _ptxas(source: str, arch: str, tmp: Path) -> str:
    path = tmp / f"scan_{abs(hash(source))}_{arch}.cu"
    path.write_text(source)
    out = subprocess.run([NVCC, "-cubin", f"-arch={arch}", *RUNTIME_OPTIONS, "-Xptxas", "-v",
                          "-o", str(path.with_suffix(".cubin")), str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stderr


def _static_smem(ptxas_log: str) -> int:
    return int(re.search(r"(\d+) bytes smem", ptxas_log).group(1))


@requires_nvcc
@pytest.mark.parametrize("arch,gpu_name", [("sm_80", "A100-SXM4-80GB"), ("sm_90", "H200-SXM-141GB")])
def test_every_rendered_source_compiles_without_spills(arch, gpu_name, tmp_path):
    gpu = hwmodels.load(gpu_name)
    plans = {}
    for p in (_plan_or_none(pr, gpu, carry) for pr in _problems(dims=(1536, 64)) for carry in CARRIES):
        if p is not None:
            plans[p.source()] = p
            if p.problem.cell == "linear" and p.problem.direction == "backward":
                q = p.for_gradients(ALL_GRADIENTS & ~1)  # a fixed: db alone, no h staged
                plans[q.source()] = q
    for pr in _problems(dims=(1536, 64, 128)):  # the forwards' plans for a forward + backward pair
        if pr.direction == "forward":
            q = plan(dataclasses.replace(pr, paired=True), gpu)
            plans.setdefault(q.source(), q)
    _assert_compile_within_plans(plans, arch, gpu, tmp_path)


def _assert_compile_within_plans(plans: dict, arch: str, gpu, tmp: Path) -> None:
    """Each plan's source (plans: source -> plan) compiles for `arch` without spills, within the plan's register
    estimate and static shared memory."""
    with ThreadPoolExecutor(4) as pool:
        logs = list(pool.map(lambda s: _ptxas(s, arch, tmp), plans))
    for (source, p), log in zip(plans.items(), logs):
        spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
        assert spills and not any(spills), f"{p}: {log}"
        regs = int(re.search(r"Used (\d+) registers", log).group(1))
        assert regs <= p.regs_estimate, f"{p}: ptxas used {regs} registers, above the estimate"
        assert regs * p.threads * p.min_blocks <= gpu.regs_per_sm, f"{p}: {regs} registers"
        # the plan's static shared memory is what ptxas lays out, the staged chunks starting 128-byte aligned after it
        smem = _static_smem(log)
        assert smem == p.smem_bytes and smem % STAGE_ALIGN == 0, f"{p}: ptxas laid out {smem} bytes of static smem"


@requires_nvcc
@pytest.mark.parametrize("arch,gpu_name", [("sm_80", "A100-SXM4-80GB"), ("sm_90", "H200-SXM-141GB")])
def test_deterministic_split_lanes_compile_without_spills(arch, gpu_name, tmp_path):
    """The plans of torch's deterministic mode for the thin shape, whose lanes are split (chained segments, and
    resident ones where the GPU's plans take them; every cell, direction and dtype, and the paired forwards):
    compiled with SCAN_DETERMINISTIC, each within its plan's budget (the define drops a store, so the default
    plans' check covers the rest)."""
    gpu = hwmodels.load(gpu_name)
    plans = {}
    for problem in _problems(dims=(64,), shapes=((1, 65536),)):
        for paired in ((False, True) if problem.direction == "forward" else (False,)):
            p = plan(dataclasses.replace(problem, paired=paired, deterministic=True), gpu)
            if p.carry != "whole":
                plans.setdefault(p.source(), p)
    assert len(plans) >= 12 and "chained" in {p.carry for p in plans.values()}
    _assert_compile_within_plans(plans, arch, gpu, tmp_path)


def _thin_held_plans(gpu) -> dict:
    """The thin linear_scan's paired forwards (fp32, bf16) holding 4 and 5 of 21 steps per thread in registers at 3
    blocks per SM: fp32 [1, 65536, 64] in one wave of 392 blocks (scan_probe_ab.py's held21x4@3, held21x5@3)."""
    plans = {}
    for dtype in ("float32", "bfloat16"):
        p = plan(ScanProblem.for_shape("linear", 1, 65536, 64, dtype, "forward", paired=True), gpu)
        for held in (4, 5):
            q = p.holding(gpu, 21, held, 3)
            plans[q.source()] = q
    return plans


@requires_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_held_steps_compile_without_spills(arch, tmp_path):
    """Chained forwards holding their first steps in registers (SCAN_HELD) compile within their budget (the H200's
    plans, for both architectures)."""
    gpu = hwmodels.load("H200-SXM-141GB")
    _assert_compile_within_plans(_thin_held_plans(gpu), arch, gpu, tmp_path)


def test_held_steps_leave_the_stage_and_fit_one_wave():
    """Held steps are not staged; the fp32 thin forward's 392 blocks of 21 steps per thread fit 3 per SM on the H200
    (its inputs, 33.5 MB, exceed the 132 SMs' shared memory)."""
    gpu = hwmodels.load("H200-SXM-141GB")
    for p in _thin_held_plans(gpu).values():
        assert p.stage_bytes == p.problem.staged_count * p.threads_t * (p.steps - p.held) * p.tile * \
            p.problem.element_bytes
        if p.problem.dtype == "float32":
            per_block = p.stage_bytes + p.smem_bytes + gpu.smem_reserved_per_block
            assert 3 * per_block <= gpu.smem_per_sm and 2 * p.chunks(65536) <= 3 * gpu.sm_count


def test_held_steps_only_in_chained_forwards():
    gpu = hwmodels.load("H200-SXM-141GB")
    forward = plan(ScanProblem.for_shape("linear", 1, 65536, 64, "float32", "forward", paired=True), gpu)
    backward = plan(ScanProblem.for_shape("linear", 1, 65536, 64, "float32", "backward"), gpu)
    resident = carry_plan(ScanProblem.for_shape("linear", 1, 65536, 64, "float32", "forward"), gpu, "resident")
    assert forward.carry == "chained" and resident.carry == "resident"
    with pytest.raises(ValueError, match="only a chained forward holds steps"):
        backward.holding(gpu, 8, 2, 2)
    with pytest.raises(ValueError, match="only a chained forward holds steps"):
        resident.holding(gpu, 16, 2, 2)
    with pytest.raises(ValueError, match="fewer than its 21 steps"):
        dataclasses.replace(forward, held=21)


@requires_nvcc
def test_stage_starts_128_byte_aligned_after_rows_that_end_off_it(tmp_path):
    """Rows of 2 x 260 fp32 maps end 64 bytes past a 128-byte boundary: the plan counts the padding that ptxas lays
    out before the staged chunks (16 bytes off the boundary, the whole-lane scans ran 18-23% slower on the H200)."""
    gpu = hwmodels.load("H200-SXM-141GB")
    p = dataclasses.replace(plan(ScanProblem.for_shape("min_lstm", 64, 4096, 512, "float32", "backward"), gpu),
                            threads_d=64, threads_t=2)
    assert 8 * p.threads_t * (p.tile + 4) % 128 == 64
    assert _static_smem(_ptxas(p.source(), "sm_90", tmp_path)) == p.smem_bytes == 4224


@requires_nvcc
def test_fp32_gate_kernels_divide_without_slow_paths(tmp_path):
    """The fp32 minGRU / minLSTM kernels take their reciprocals as rcp.approx refined by a Newton step. ptxas wraps an
    IEEE-rounded division or reciprocal (div.rn / rcp.rn) in a branch to a slow path, which kept the elements' math
    from interleaving: the kernels ran 1.3-1.7x slower (H200, scan_gate_cells_ab.md)."""
    gpu = hwmodels.load("H200-SXM-141GB")
    for cell in ("min_gru", "min_lstm"):
        for direction in ("forward", "backward"):
            source = plan(ScanProblem.for_shape(cell, 8, 4096, 1536, "float32", direction), gpu).source()
            assert_divides_without_slow_paths(source, tmp_path / f"{cell}_{direction}.cu")


def test_resident_plans_on_fewer_sms_split_lanes_into_longer_segments():
    gpu = hwmodels.load("H200-SXM-141GB")
    p = carry_plan(ScanProblem.for_shape("linear", 3, 4000, 96, "float32"), gpu, "resident")
    lanes, chunks = 3 * p.d_tiles(96), p.chunks(4000)
    assert -(-chunks // p.segments(lanes, chunks)) == 1
    for per_segment in (2, 3, 4):
        q = p.on_fewer_sms(lanes, chunks, per_segment)
        assert -(-chunks // q.segments(lanes, chunks)) == per_segment
        assert q.source() == p.source()  # the same kernel, launched with fewer segments
    with pytest.raises(ValueError, match="resident"):
        carry_plan(ScanProblem.for_shape("linear", 3, 4000, 96, "float32"), gpu, "whole").on_fewer_sms(3, 8, 2)


def test_a_backward_without_some_gradients_stages_and_moves_less():
    """ScanProblem.wanted: linear_scan with a fixed `a` stages a and dy (not h) and moves a, dy and db; a minLSTM
    backward wanting only the candidate's gradient needs no h either; the planner models the fewer bytes."""
    full = ScanProblem.for_shape("linear", 8, 4096, 1536, "float32", "backward")
    fixed = ScanProblem.for_shape("linear", 8, 4096, 1536, "float32", "backward", ALL_GRADIENTS & ~1)
    assert (full.staged_count, full.traffic_elements, full.reads_h) == (3, 5, True)
    assert (fixed.staged_count, fixed.traffic_elements, fixed.reads_h) == (2, 3, False)
    candidate = ScanProblem.for_shape("min_lstm", 1, 65536, 64, "bfloat16", "backward", 4)
    assert (candidate.staged_count, candidate.traffic_elements, candidate.reads_h) == (4, 5, False)
    gpu = hwmodels.load("H200-SXM-141GB")
    fixed_plan, full_plan = plan(fixed, gpu), plan(full, gpu)
    same_shape = dataclasses.replace(full_plan.for_gradients(fixed.wanted), estimate_ns=fixed_plan.estimate_ns)
    assert fixed_plan == same_shape  # the block shape and stages solved for every gradient
    assert fixed_plan.stage_bytes == full_plan.stage_bytes * 2 // 3 and fixed_plan.estimate_ns < full_plan.estimate_ns
    assert ScanProblem.for_shape("linear", 1, 16, 64, "float32", "backward", 4).traffic_elements == 2  # h0's alone
    for cell, direction, wanted in (("linear", "backward", 8), ("linear", "backward", -1), ("min_gru", "forward", 1)):
        with pytest.raises(ValueError, match="wanted must be a bit set"):
            ScanProblem.for_shape(cell, 1, 16, 64, "float32", direction, wanted)


@pytest.mark.parametrize("gpu_name", ["H200-SXM-141GB", "H100-SXM5-80GB"])
def test_held_forwards_alone_only_against_split_lanes(gpu_name):
    """Alone, the held fp32 forwards took 0.785-0.834x the time of the resident segments planned before where the
    narrowest tiles give 2-32 lanes, but 1.086-1.094x at 128 lanes, where resident segments are whole lanes
    (scan_held_alone_ab_h100.md): the model gives a held launch the paired fixed time only where lanes are split."""
    gpu = hwmodels.load(gpu_name)
    for shape in ((1, 65536, 64), (2, 16384, 128), (2, 4096, 512), (16, 4096, 64), (8, 4096, 128)):
        assert plan(ScanProblem.for_shape("linear", *shape, "float32", "forward"), gpu).held > 0, shape
    for shape in ((8, 1024, 512), (16, 1024, 256)):
        assert plan(ScanProblem.for_shape("linear", *shape, "float32", "forward"), gpu).carry == "resident", shape


@requires_nvcc
def test_pairs_of_split_lanes_mark_last_reads_evict_first(tmp_path):
    """Staged copies marked evict-first in L2 (cp.async ... L2::cache_hint): every one of a split-lane backward, a
    paired linear forward's copies of b alone (its backward reads a again; minGRU's reads every input again), none of a
    forward alone, of whole lanes or of split lanes whose pair's rereads do not fit in L2."""
    gpu = hwmodels.load("H200-SXM-141GB")

    def copies(cell, shape, dtype, direction, paired=False):
        p = plan(ScanProblem.for_shape(cell, *shape, dtype, direction, paired=paired), gpu)
        name = f"{cell}_{direction}_{int(paired)}_{shape[-1]}.cu"
        ptx = compile_ptx(p.source(), tmp_path / name, "sm_90").read_text()
        hinted = len(re.findall(r"cp\.async\.c[ag]\.shared\.global\.L2::cache_hint", ptx))
        return p, hinted, len(re.findall(r"cp\.async\.c[ag]\.shared\.global", ptx))

    thin, wide = (1, 65536, 64), (8, 4096, 1536)
    p, hinted, total = copies("linear", thin, "float32", "backward")
    assert p.carry != "whole" and hinted == total > 0
    p, hinted, total = copies("linear", thin, "float32", "forward", paired=True)
    assert p.carry != "whole" and 2 * hinted == total > 0, "b's copies, not a's"
    assert copies("min_gru", thin, "bfloat16", "forward", paired=True)[1] == 0
    assert copies("linear", thin, "float32", "forward")[1] == 0
    p, hinted, total = copies("linear", wide, "float32", "backward")
    assert p.carry == "whole" and hinted == 0 and total > 0
    for cell, shape, dtype in [("linear", (1, 65536, 256), "float32"), ("linear", (1, 262144, 64), "bfloat16"),
                               ("min_gru", thin, "float32")]:
        p, hinted, total = copies(cell, shape, dtype, "backward")
        rereads = p.problem.tensor_bytes * (3 if cell == "min_gru" else 2)
        assert p.carry != "whole" and rereads > 0.75 * gpu.l2_bytes and hinted == 0 and total > 0, (cell, shape)
    p, hinted, total = copies("min_gru", thin, "bfloat16", "backward")
    assert p.carry != "whole" and hinted == total > 0


@requires_nvcc
def test_only_split_lane_backwards_read_settled(tmp_path):
    """The kernel's last parameter, `settled` (stage the cell inputs before the previous kernel ends), is read by the
    backwards of split lanes alone: compiled into whole-lane backwards, that path made the minGRU / minLSTM backwards
    at [8, 4096, 1536] 1.04-1.05x slower on the H200."""
    gpu = hwmodels.load("H200-SXM-141GB")

    def reads_settled(cell, shape, dtype, direction):
        p = plan(ScanProblem.for_shape(cell, *shape, dtype, direction), gpu)
        ptx = compile_ptx(p.source(), tmp_path / f"{cell}_{direction}_{shape[-1]}_{dtype}.cu", "sm_90").read_text()
        params = re.findall(r"\.param \.\w+ (flashrnn_scan_param_\d+)", ptx)
        return p.carry, bool(re.search(rf"ld\.param\.\w+\s+%\w+, \[{params[-1]}\]", ptx))

    for cell, dtype in [("min_lstm", "float32"), ("min_gru", "bfloat16"), ("linear", "float32")]:
        assert reads_settled(cell, (8, 4096, 1536), dtype, "backward") == ("whole", False), cell
        carry, read = reads_settled(cell, (1, 65536, 64), dtype, "backward")
        assert carry != "whole" and read, cell
    assert reads_settled("min_lstm", (1, 65536, 64), "float32", "forward")[1] is False
