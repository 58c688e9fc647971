"""plan(): every shipped GPU model over a grid of shapes; limits re-checked independently of the solver."""
from __future__ import annotations

import dataclasses
import json
import time

import pytest

import hwmodels
from flashrnn_kernels.cells import CELLS
from flashrnn_kernels.fused import plan as plan_module
from flashrnn_kernels.fused import tiling
from flashrnn_kernels.fused.plan import KernelPlan, PlanError, pinned_plan, plan
from flashrnn_kernels.fused.problem import HEAD_DIMS, FusedProblem

FUSED_GPUS = [name for name in hwmodels.available() if hwmodels.load(name).compute_capability >= (8, 0)]
SHAPES = [(1, 48, 16), (17, 6, 128), (64, 3, 256), (256, 2, 512), (16, 1, 768), (256, 48, 16)]
BENCH_SHAPES = [(16, 48), (32, 24), (64, 12), (128, 6), (256, 3), (768, 1)]  # (DH, NH), B=16


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHRNN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(plan_module, "_memory", {})


def check_limits(p: KernelPlan, gpu: hwmodels.GPUModel, batch: int) -> None:
    """The plan's launch fits the GPU: recomputed from its fields, not from the solver's model."""
    assert p.head_blocks * p.rows_per_block == p.head_dim
    assert p.rows_per_block % 16 == 0 and p.batch_tile % 8 == 0
    assert p.k_dim % (p.k_tile * p.warps_k) == 0 and 0 <= p.reg_k_tiles <= p.k_tiles_per_warp
    assert p.threads <= gpu.max_threads_per_block
    assert p.smem_bytes <= gpu.smem_per_block_optin
    assert p.predicted_registers <= p.register_budget <= gpu.max_regs_per_thread
    if p.global_exchange:  # every block resident at once (a cooperative launch)
        blocks = p.num_heads * p.head_blocks * p.batch_tiles(batch)
        assert p.head_blocks > 1 and blocks <= gpu.sm_count * p.blocks_per_sm
        # two fills per (batch tile, head): the tagged vector (8-byte words of 4 payload bytes), or every 16-row
        # group's (of a block, or of a pair of blocks) fp32 partial sum of every unit and batch column
        fill = (p.head_dim // 16 // p.pair_blocks * p.head_dim * p.batch_tile * 4 if p.partial_sums
                else p.batch_tile * p.k_dim * (2 if p.dtype != "fp32" else 4) * 2)
        assert p.exchange_bytes(batch) == p.batch_tiles(batch) * p.num_heads * 2 * fill
    else:
        assert p.exchange_bytes(batch) == 0 and not p.partial_sums
        assert p.head_blocks == 1 or (p.head_blocks <= gpu.cluster_max_nonportable and p.head_blocks & (
            p.head_blocks - 1) == 0)
    assert p.nonportable_cluster == (not p.global_exchange and p.head_blocks > gpu.cluster_max_portable)
    assert p.pair_blocks == 1 or (p.partial_sums and p.head_blocks % 2 == 0 and gpu.cluster_max_nonportable >= 2)
    occupancy = hwmodels.blocks_per_sm(gpu, p.threads, p.register_budget, p.smem_bytes)
    assert occupancy.blocks_per_sm >= p.blocks_per_sm >= 1
    assert p.batch_tiles(batch) * p.batch_tile >= batch > (p.batch_tiles(batch) - 1) * p.batch_tile
    assert p.grid(batch) == (p.num_heads * p.head_blocks, p.batch_tiles(batch), 1)


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("gpu_name", FUSED_GPUS)
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_plans_fit_every_gpu(cell, gpu_name, direction):
    gpu = hwmodels.load(gpu_name)
    solved = 0
    for batch, heads, head_dim in SHAPES:
        for dtype in ("bf16", "fp32") if head_dim != 128 else ("fp16",):
            start = time.perf_counter()
            try:
                p = plan(cell, batch, heads, head_dim, dtype, gpu=gpu, direction=direction)
            except PlanError as exc:
                assert "no fused-kernel tiling" in str(exc) and gpu.name in str(exc)
                continue
            assert time.perf_counter() - start < 5.0, "planning must stay fast (first call budget is 5 s)"
            assert (p.gpu, p.arch, p.direction, p.dtype, p.cell) == (gpu.name, gpu.arch, direction, dtype, cell)
            spec = CELLS[cell]
            assert (p.gates, p.states) == (spec.gate_count, spec.state_count)
            assert p.m_tiles == (spec.gate_count if direction == "forward" or p.partial_sums else 1)
            assert p.k_dim == p.head_dim * (1 if direction == "forward" or p.partial_sums else spec.gate_count)
            assert not p.partial_sums or (direction == "backward" and p.global_exchange and p.global_k_tiles == 0)
            check_limits(p, gpu, batch)
            solved += 1
    assert solved >= 4  # heads up to 256 units fit every sm_80+ GPU


@pytest.mark.parametrize("cell", sorted(CELLS))
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_every_cell_solves_the_benchmark_shapes_on_h200(cell, dtype, direction):
    gpu = hwmodels.load("H200")
    for head_dim, heads in BENCH_SHAPES:
        for batch in (1, 16, 17):
            check_limits(plan(cell, batch, heads, head_dim, dtype, gpu=gpu, direction=direction), gpu, batch)


@pytest.mark.parametrize("head_dim", [16, 64, 128, 256, 768])
def test_h200_bf16_forward_fits_up_to_768(head_dim):
    p = plan("lstm", 16, 1, head_dim, "bf16", gpu="H200")
    check_limits(p, hwmodels.load("H200"), 16)
    assert p.m_tiles == 4 and p.k_tile == 16


def test_single_block_when_a_head_fits_one_sm():
    p = plan("lstm", 16, 12, 64, "bf16", gpu="H200")
    assert p.head_blocks == 1 and p.reg_k_tiles == p.k_tiles_per_warp  # R of one head in registers


def test_large_head_splits_over_a_cluster_or_a_global_exchange():
    # H200, B=16, T=1024, bf16 (results/fused_model_refit_ab.md): 6 x 128 forwards in clusters of 8 took 0.65-0.73x
    # the time of one block per head; 3 x 256 through global memory 0.81-0.84x the time of clusters of 16
    h200 = plan("lstm", 16, 6, 128, "bf16", gpu="H200")
    assert h200.head_blocks == 8 and not h200.global_exchange and not h200.nonportable_cluster
    wide = plan("lstm", 16, 1, 256, "bf16", gpu="H200")
    assert wide.head_blocks == 16 and wide.global_exchange
    for gpu in ("H200", "A100-SXM4-80GB"):  # no cluster of 16 blocks holds 1x768's R: 48 blocks through L2
        p = plan("lstm", 16, 1, 768, "bf16", gpu=gpu)
        assert p.global_exchange and p.head_blocks == 48 and p.global_k_tiles == 0
    a100 = plan("lstm", 16, 1, 256, "bf16", gpu="A100-SXM4-80GB")  # no clusters on sm_80
    assert a100.head_blocks > 1 and a100.global_exchange
    forced = plan("lstm", 16, 1, 768, "bf16", gpu="H200", exchange="cluster")
    assert forced.head_blocks == 16 and not forced.global_exchange and forced.nonportable_cluster
    small = plan("lstm", 3, 2, 64, "fp32", gpu="H200", exchange="global")
    assert small.global_exchange and small.head_blocks > 1
    with pytest.raises(ValueError, match="exchange must be one of"):
        plan("lstm", 16, 1, 768, "bf16", gpu="H200", exchange="dsmem")


def test_infeasible_quotes_the_core_and_what_fits():
    with pytest.raises(PlanError) as info:  # 4 batch tiles x 64 blocks do not fit 108 SMs at once
        plan("lstm", 256, 1, 1024, "bf16", gpu="A100-SXM4-80GB", direction="backward")
    text = str(info.value)
    assert "head_dim=1024" in text and "A100-SXM4-80GB" in text
    assert "head_dim 1024 = head_blocks x warps_m x 16 rows" in text  # the core, in words
    assert "a smaller batch" in text and "backend='alternating'" in text
    assert isinstance(info.value.__cause__.core, list) and info.value.__cause__.core


def test_768_forward_in_a_cluster_keeps_r_on_chip_with_two_vector_buffers():
    # 1x768 bf16 forward on an H200 in clusters of 16 (B=16, T=1024, measured): R on chip 2.79-2.88 ms, part of R
    # streamed from L2 3.45 ms; with the earlier barrier-based exchange one vector buffer (a second cluster barrier
    # per step) took 3.76 ms against 3.32 ms with two.
    p = plan("lstm", 16, 1, 768, "bf16", gpu="H200", exchange="cluster")
    assert p.head_blocks == 16 and p.global_k_tiles == 0 and p.scratch_bytes(16) == 0
    assert p.vector_buffers == 2 and p.reg_k_tiles >= 8


def test_head_too_large_for_the_chips_streams_part_of_r_from_l2():
    p = plan("lstm", 16, 1, 1024, "bf16", gpu="H200", exchange="cluster")
    assert p.head_blocks == 16 and p.global_k_tiles > 0 and p.scratch_bytes(16) > 0
    assert plan("lstm", 16, 1, 1024, "bf16", gpu="H200").global_k_tiles == 0  # 64 blocks hold it
    assert plan("lstm", 16, 12, 64, "bf16", gpu="H200").global_k_tiles == 0


def test_pre_ampere_gpu_is_refused_clearly():
    with pytest.raises(PlanError, match="sm_80 or newer"):
        plan("lstm", 16, 1, 64, "bf16", gpu="V100-SXM2-32GB")


def test_plan_is_cached_in_memory_and_on_disk(tmp_path):
    first = plan("lstm", 16, 12, 64, "bf16", gpu="H200")
    assert plan("lstm", 16, 12, 64, "bf16", gpu="H200") is first
    files = list((tmp_path / "plans").glob("*.json"))
    assert len(files) == 1 and KernelPlan(**json.loads(files[0].read_text())) == first
    plan_module._memory.clear()
    assert plan("lstm", 16, 12, 64, "bf16", gpu="H200") == first


def test_cached_plans_depend_on_the_tiling_model_and_the_solver():
    names = {(path.parent.name, path.name) for path in plan_module.model_sources()}
    assert {("fused", "tiling.py"), ("fused", "plan.py"), ("constrint", "search.py"),
            ("constrint", "dual_bound.py")} <= names


def test_editing_the_tiling_model_retires_cached_plans(tmp_path, monkeypatch):
    plan("lstm", 16, 12, 64, "bf16", gpu="H200")
    monkeypatch.setattr(plan_module, "_MODEL_DIGEST", "another model")
    plan_module._memory.clear()
    plan("lstm", 16, 12, 64, "bf16", gpu="H200")
    assert len(list((tmp_path / "plans").glob("*.json"))) == 2  # solved again under a new key


def test_batch_size_changes_only_the_batch_tiling():
    a = plan("lstm", 16, 12, 64, "bf16", gpu="H200")
    b = plan("lstm", 13, 12, 64, "bf16", gpu="H200")
    assert dataclasses.replace(a, objective=0) == dataclasses.replace(b, objective=0) or a.batch_tile != b.batch_tile
    assert a.grid(16) == a.grid(9)


def test_dtype_spellings_and_bad_arguments():
    import torch

    assert plan("lstm", 4, 2, 32, torch.bfloat16, gpu="H200") == plan("lstm", 4, 2, 32, "bf16", gpu="H200")
    with pytest.raises(ValueError, match="head_dim 48"):
        plan("lstm", 4, 2, 48, "bf16", gpu="H200")
    with pytest.raises(ValueError, match="int8"):
        plan("lstm", 4, 2, 32, "int8", gpu="H200")
    with pytest.raises(ValueError, match="direction"):
        plan("lstm", 4, 2, 32, "bf16", gpu="H200", direction="sideways")
    with pytest.raises(ValueError, match="known cells"):
        plan("lsmt", 4, 2, 32, "bf16", gpu="H200")
    with pytest.raises(ValueError, match=r"gpu must be a hwmodels.GPUModel, a model name .* got 0"):
        plan("lstm", 4, 2, 32, "bf16", gpu=0)
    assert set(HEAD_DIMS) == {16, 32, 64, 128, 256, 512, 768, 1024}


def test_no_gpu_argument_means_torchs_current_device(monkeypatch):
    """gpu=None plans for the device torch calls current (not always device 0), detected once per device."""
    import torch

    from flashrnn_kernels.runtime import device

    detected = []
    device.device_gpu.cache_clear()
    monkeypatch.setattr(device.hwmodels, "detect",
                        lambda index=0: detected.append(index) or hwmodels.load("H100-SXM5-80GB"))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    try:
        first = plan("lstm", 16, 12, 64, "bf16")
        assert plan("lstm", 16, 12, 64, "bf16") == first and first.gpu == "H100-SXM5-80GB"
        assert detected == [1]
    finally:
        device.device_gpu.cache_clear()


def test_no_gpu_and_no_device_says_what_to_pass(monkeypatch):
    import torch

    def no_device():
        raise RuntimeError("Found no NVIDIA driver on your system")

    monkeypatch.setattr(torch.cuda, "current_device", no_device)
    with pytest.raises(PlanError, match="pass gpu= a hwmodels name"):
        plan("lstm", 16, 12, 64, "bf16")


def test_backward_of_a_head_past_the_cluster_limit_sums_partial_products():
    # 1x768 bf16 backward: the forward's tiling (48 blocks, R in registers) reduce-scattering partial sums, where
    # gathering the gate gradients needs a cluster of 16 streaming part of R from L2, or 48 blocks reading the whole
    # tagged vector of 4 x 768 gate gradients per step.
    gpu = hwmodels.load("H200")
    p = plan("lstm", 16, 1, 768, "bf16", gpu=gpu, direction="backward")
    assert p.partial_sums and p.global_exchange and p.head_blocks == 48 and p.global_k_tiles == 0
    assert p.m_tiles == 4 and p.k_dim == 768 and p.vector_buffers == 1 and p.kernel_source == "backward_partials.cu"
    check_limits(p, gpu, 16)
    gather = plan("lstm", 16, 1, 768, "bf16", gpu=gpu, direction="backward", exchange="cluster")
    assert not gather.partial_sums and p.objective < gather.objective
    # a head that a cluster holds sums partial products too (6 x 128: 0.88x the time of the gather, H200, B=16),
    # except a one-gate cell's, whose gather is a quarter of an LSTM's; the forward never sums partial products
    assert plan("lstm", 16, 6, 128, "bf16", gpu=gpu, direction="backward").partial_sums
    assert not plan("elman", 16, 3, 256, "bf16", gpu=gpu, direction="backward").partial_sums
    forced = plan("lstm", 3, 2, 64, "bf16", gpu=gpu, direction="backward", exchange="partials")
    assert forced.partial_sums and forced.head_blocks > 1
    check_limits(forced, gpu, 3)
    forward = plan("lstm", 3, 2, 64, "bf16", gpu=gpu, exchange="partials")
    assert forward.global_exchange and not forward.partial_sums and forward.kernel_source == "forward.cu"
    assert forward.pair_blocks == 1 and forced.pair_blocks == 1
    with pytest.raises(PlanError, match="no fused-kernel tiling.*fp32"):  # fp32 R of 9 MiB: not on 132 SMs at once
        plan("lstm", 16, 1, 768, "fp32", gpu=gpu, direction="backward", exchange="partials")


def test_block_pairs_halve_the_partial_sums_where_clusters_exist():
    # sm_90: the 1x768 backward's blocks pair up in clusters of two sharing their gate gradients, so each unit gets
    # 24 partial sums instead of 48 (half the exchange buffer); sm_80 has no clusters and keeps single blocks.
    h200 = hwmodels.load("H200")
    pairs = plan("lstm", 16, 1, 768, "bf16", gpu=h200, direction="backward")
    single = plan("lstm", 16, 1, 768, "bf16", gpu=h200, direction="backward", exchange="partials")
    assert pairs.pair_blocks == 2 and single.pair_blocks == 1 and pairs.objective < single.objective
    assert pairs.head_blocks % 2 == 0 and 2 * pairs.exchange_bytes(16) == single.exchange_bytes(16)
    check_limits(pairs, h200, 16)
    assert plan("lstm", 16, 1, 768, "bf16", gpu="A100-SXM4-80GB", direction="backward").pair_blocks == 1
    with pytest.raises(PlanError, match="clusters of 2.*sm_90"):
        plan("lstm", 16, 1, 768, "bf16", gpu="A100-SXM4-80GB", direction="backward", exchange="pairs")
    forward = plan("lstm", 16, 1, 768, "bf16", gpu=h200, exchange="pairs")  # the forward exchanges h as before
    assert forward.pair_blocks == 1 and forward.global_exchange and not forward.partial_sums


PLAN_FIELDS = ("n_tiles", "head_blocks", "global_exchange", "warps_m", "warps_k", "reg_k_tiles", "global_k_tiles",
               "blocks_per_sm", "vector_buffers", "stages", "clustered", "k_tiles_per_warp")


@pytest.mark.parametrize("exchange", ["cluster", "global"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("cell, batch, num_heads, head_dim", [("lstm", 1, 12, 64), ("gru", 3, 3, 256),
                                                              ("slstm", 16, 6, 128)])
def test_the_optimum_is_one_tiling(cell, batch, num_heads, head_dim, direction, exchange):
    """Every solution of least cost is the same tiling, so the plan is the model's, not the search's: blocks per SM
    had tied where one wave fits either way (the fewest now, as the search had picked on every tied model of a grid
    over both GPUs, cells, batches 1-64, six head shapes, both dtypes and directions)."""
    m, objective = tiling.build(FusedProblem(cell, batch, num_heads, head_dim, "bf16", direction),
                                hwmodels.load("H200-SXM-141GB"), exchange=exchange)
    best = m.minimize(objective)
    m.add(objective == best.objective)
    assert len({tuple(s[f] for f in PLAN_FIELDS) for s in m.solutions(limit=50)}) == 1


def test_pinned_plan_fixes_the_named_variables_and_says_when_none_fits():
    gpu = hwmodels.load("H200")
    chosen = plan("lstm", 16, 6, 128, "bf16", gpu=gpu)
    pinned = pinned_plan("lstm", 16, 6, 128, "bf16", gpu=gpu, exchange="global", head_blocks=4)
    assert pinned.global_exchange and pinned.head_blocks == 4 and pinned.objective >= chosen.objective
    check_limits(pinned, gpu, 16)
    pairs = pinned_plan("lstm", 16, 6, 128, "bf16", gpu=gpu, direction="backward", exchange="pairs")
    assert pairs.partial_sums and pairs.pair_blocks == 2
    assert (chosen.exchange, pinned.exchange, pairs.exchange) == ("cluster", "global", "pairs")
    forward = pinned_plan("lstm", 16, 6, 128, "bf16", gpu=gpu, exchange="pairs")  # the forward takes it as global
    assert forward.exchange == "global" and forward == plan("lstm", 16, 6, 128, "bf16", gpu=gpu, exchange="pairs")
    with pytest.raises(PlanError, match="pinned head_blocks = 3"):  # 3 does not divide the 8 row groups
        pinned_plan("lstm", 16, 6, 128, "bf16", gpu=gpu, exchange="global", head_blocks=3)


def test_pinned_plan_streams_r_from_l2_where_plan_does():
    # R of one 1 x 512 fp32 head (4 MiB) fits on no cluster's chips: plan() streams part of it from L2, and so does
    # a pinned tiling; without any pin the two agree
    gpu = hwmodels.load("H200")
    chosen = plan("lstm", 256, 1, 512, "fp32", gpu=gpu)
    assert chosen.global_k_tiles > 0
    assert pinned_plan("lstm", 256, 1, 512, "fp32", gpu=gpu) == chosen
    pinned = pinned_plan("lstm", 256, 1, 512, "fp32", gpu=gpu, head_blocks=8, warps_m=4)
    assert (pinned.head_blocks, pinned.warps_m) == (8, 4) and pinned.global_k_tiles > 0
    assert pinned.objective >= chosen.objective
    check_limits(pinned, gpu, 256)
