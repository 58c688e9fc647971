"""Occupancy cases derived by hand from the CUDA occupancy rules (see hwmodels/occupancy.py).

H100 (sm_90): 65536 registers in 4 partitions of 16384, allocated per warp in units of 256; 228 KiB
(233472 B) shared memory per SM, 1 KiB reserved per block, 128 B granularity; 32 blocks, 64 warps per SM.
"""
from __future__ import annotations

import pytest

import hwmodels
from hwmodels import LaunchConfigError

H100 = hwmodels.load("H100-SXM5-80GB")
RTX3090 = hwmodels.load("RTX-3090")
V100 = hwmodels.load("V100-SXM2-32GB")
A100 = hwmodels.load("A100-SXM4-80GB")

CASES = [
    # gpu, threads, regs, smem bytes -> blocks, binding, active warps
    # 1 warp/block, 32 regs (1024/warp: 16 warps per partition -> 64 warps), smem 1 KiB reserve -> 228:
    # blocks 32, warps 64, registers 64, shared 228 -> the 32-block cap binds.
    (H100, 32, 32, 0, 32, "blocks", 32),
    # 8 warps, 24 regs -> 768/warp: floor(16384/768)=21 per partition -> 84 warps -> 10 blocks;
    # warps 64/8 = 8 -> warps bind, 64 warps active.
    (H100, 256, 24, 0, 8, "warps", 64),
    # 3 warps, 33 regs -> 33*32=1056 rounds up to 1280/warp; floor(16384/1280)=12 per partition -> 48 warps
    # -> 16 blocks (without the per-warp rounding it would be 60 warps -> 20; without partitions 51 -> 17).
    (H100, 96, 33, 0, 16, "registers", 48),
    # 8 warps, 40 regs -> 1280/warp -> 48 warps -> 6 blocks; warps allow 8.
    (H100, 256, 40, 0, 6, "registers", 48),
    # 4 warps, 32 regs; 48 KiB + 1 KiB reserve = 50176 B -> floor(233472/50176) = 4 blocks.
    (H100, 128, 32, 48 * 1024, 4, "shared_memory", 16),
    # 32276 B + 1024 = 33300 -> rounded to 128: 33408 -> floor(233472/33408) = 6
    # (7 blocks if neither the reserve nor the rounding were applied: 7*32276 = 225932).
    (H100, 128, 32, 32276, 6, "shared_memory", 24),
    # 255 regs -> 8160 rounds to 8192/warp: 2 warps per partition -> 8 warps; a 256-thread block
    # (8 warps, 8*8192 = 65536 <= regs_per_block) fits once.
    (H100, 256, 255, 0, 1, "registers", 8),
    # opt-in maximum: 227 KiB + 1 KiB = 228 KiB -> exactly one block (warps would allow 64/32 = 2).
    (H100, 1024, 32, 227 * 1024, 1, "shared_memory", 32),
    # RTX 3090 (sm_86): 16 blocks and 48 warps per SM.
    (RTX3090, 32, 16, 0, 16, "blocks", 16),
    # 16 warps/block: warps 48/16 = 3; registers 64/16 = 4.
    (RTX3090, 512, 32, 0, 3, "warps", 48),
    # 99 KiB + 1 KiB = 100 KiB -> one block per SM.
    (RTX3090, 64, 32, 99 * 1024, 1, "shared_memory", 2),
    # V100 (sm_70): no reserve, 256 B granularity: 19460 -> 19712 -> floor(98304/19712) = 4
    # (128 B granularity would give 19584 -> 5).
    (V100, 64, 32, 19460, 4, "shared_memory", 8),
    # V100 without shared memory: nothing is allocated, the 32-block cap binds.
    (V100, 32, 32, 0, 32, "blocks", 32),
    # A100: 163 KiB opt-in + 1 KiB = 164 KiB -> one block.
    (A100, 128, 64, 163 * 1024, 1, "shared_memory", 4),
    # A100, 2 KiB + 1 KiB = 3 KiB -> 54 by shared memory; 2 warps, 64 regs -> 2048/warp: 8 per partition
    # -> 32 warps -> 16 blocks.
    (A100, 64, 64, 2048, 16, "registers", 32),
]


@pytest.mark.parametrize("gpu, threads, regs, smem, blocks, binding, warps", CASES,
                         ids=[f"{c[0].name}-{c[1]}t-{c[2]}r-{c[3]}B" for c in CASES])
def test_hand_derived_cases(gpu, threads, regs, smem, blocks, binding, warps):
    occ = hwmodels.blocks_per_sm(gpu, threads, regs, smem)
    assert (occ.blocks_per_sm, occ.binding_limit, occ.active_warps) == (blocks, binding, warps)
    assert occ.occupancy == warps / gpu.max_warps_per_sm
    assert occ.limits[binding] == blocks and min(occ.limits.values()) == blocks
    assert gpu.blocks_per_sm(threads, regs, smem) == occ


def test_result_details():
    occ = H100.blocks_per_sm(96, 33, 1000)
    assert occ.warps_per_block == 3
    assert occ.regs_per_block == 3 * 1280
    assert occ.smem_per_block == 2048  # 1000 + 1024 reserve, rounded to 128
    assert dict(occ.limits) == {"blocks": 32, "warps": 21, "registers": 16, "shared_memory": 114}


def test_any_integer_type_is_taken():
    numpy = pytest.importorskip("numpy")
    assert H100.blocks_per_sm(numpy.int64(96), numpy.int32(33), numpy.uint16(1000)) == H100.blocks_per_sm(96, 33, 1000)


def test_partial_warp_counts_as_a_whole_warp():
    # 33 threads occupy 2 warps: 64 warps / 2 = 32 blocks, the same as 64 threads.
    assert H100.blocks_per_sm(33, 32).warps_per_block == 2
    assert RTX3090.blocks_per_sm(33, 32).limits["warps"] == 24


@pytest.mark.parametrize("args, words", [
    ((1025, 32, 0), ["threads_per_block=1025", "1..1024"]),
    ((0, 32, 0), ["threads_per_block=0"]),
    ((128, 256, 0), ["registers_per_thread=256", "1..255"]),
    ((128, 0, 0), ["registers_per_thread=0"]),
    ((128, 32, 227 * 1024 + 1), ["shared_bytes_per_block=232449", "0..232448", "227 KiB"]),
    ((128, 32, -1), ["shared_bytes_per_block=-1"]),
    ((128.0, 32, 0), ["threads_per_block must be an integer"]),
    ((128, True, 0), ["registers_per_thread must be an integer"]),
    # 1024 threads x 72 regs: 2304/warp x 32 warps = 73728 > 65536. 65536 // 2304 = 28 warps -> 896 threads;
    # with 32 warps: 65536 / 32 = 2048 per warp -> 64 registers.
    ((1024, 72, 0), ["896 threads with 72 registers", "64 registers per thread with 1024 threads"]),
    # The per-block check counts warps in groups of 4: 10 warps x 200 regs (6400/warp) = 64000 fits the
    # block in principle, but 12 x 6400 = 76800 > 65536; 65536 // 6400 = 10 -> 8 warps -> 256 threads;
    # 12 warps: 65536 / 12 = 5461 -> 5376 per warp -> 168 registers.
    ((320, 200, 0), ["256 threads with 200 registers", "168 registers per thread with 320 threads"]),
])
def test_impossible_launches_say_what_fits(args, words):
    with pytest.raises(LaunchConfigError) as err:
        hwmodels.blocks_per_sm(H100, *args)
    for word in words:
        assert word in str(err.value)


def test_advice_is_itself_launchable():
    assert H100.blocks_per_sm(896, 72).blocks_per_sm == 1
    assert H100.blocks_per_sm(1024, 64).blocks_per_sm == 1
    assert H100.blocks_per_sm(256, 200).blocks_per_sm == 1
    assert H100.blocks_per_sm(320, 168).blocks_per_sm == 1


def test_blocks_never_exceed_any_limit():
    for gpu in (H100, RTX3090, V100):
        for threads in range(32, gpu.max_threads_per_block + 1, 96):
            for regs in (16, 40, 96, 168):
                try:
                    occ = gpu.blocks_per_sm(threads, regs, 10_000)
                except LaunchConfigError:
                    continue
                warps = occ.warps_per_block
                assert 1 <= occ.blocks_per_sm <= gpu.max_blocks_per_sm
                assert occ.active_warps <= gpu.max_warps_per_sm
                assert occ.blocks_per_sm * occ.regs_per_block <= gpu.regs_per_sm
                assert occ.blocks_per_sm * occ.smem_per_block <= gpu.smem_per_sm
                assert occ.active_warps == occ.blocks_per_sm * warps


def test_a_model_name_is_not_a_model():
    with pytest.raises(TypeError, match=r"hwmodels.load\(name\) gives one"):
        hwmodels.blocks_per_sm("H100-SXM5-80GB", 256, 32)
