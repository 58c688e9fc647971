"""Occupancy calculator: how many blocks of a launch fit on one SM, and which resource binds.

The rules are those the CUDA runtime's occupancy API applies:
- a block occupies ceil(threads / warp_size) warps;
- registers are allocated per warp, rounded up to `reg_alloc_unit` (256); the register file is split
  evenly over `register_file_partitions` (4) sub-partitions and a warp's registers come from one of them,
  so warps per SM by registers = partitions * floor(regs_per_sm / partitions / regs_per_warp);
- a launch is refused when regs_per_warp * (warps rounded up to the partition count) exceeds
  regs_per_block (the hardware's per-block check);
- a block's shared memory is its static + dynamic bytes plus the driver's per-block reserve, rounded up
  to `smem_alloc_granularity`, drawn from `smem_per_sm` (the largest carveout);
- at most `max_blocks_per_sm` blocks and `max_warps_per_sm` warps are resident.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from .errors import LaunchConfigError
from .model import GPUModel

#: Reporting order when several limits allow the same (smallest) number of blocks.
LIMITS = ("blocks", "warps", "registers", "shared_memory")


@dataclass(frozen=True)
class Occupancy:
    """Result of `blocks_per_sm`.

    blocks_per_sm: resident blocks per SM (>= 1); binding_limit: the first of LIMITS that allows only
    that many; limits: blocks per SM each resource alone would allow; active_warps: warps resident per
    SM; occupancy: active_warps / max_warps_per_sm; regs_per_block / smem_per_block: what one block is
    allocated (registers; bytes including the reserve and rounding).
    """

    blocks_per_sm: int
    binding_limit: str
    limits: Mapping[str, int] = field(hash=False)
    active_warps: int
    occupancy: float
    warps_per_block: int
    regs_per_block: int
    smem_per_block: int


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def blocks_per_sm(gpu: GPUModel, threads_per_block: int, registers_per_thread: int,
                  shared_bytes_per_block: int = 0) -> Occupancy:
    """Resident blocks per SM of `gpu` for blocks of `threads_per_block` threads using
    `registers_per_thread` registers and `shared_bytes_per_block` bytes of shared memory (static plus
    dynamic); any integers (NumPy's too). Raises LaunchConfigError, saying what would fit, for a block that can never
    launch."""
    threads_per_block, registers_per_thread, shared_bytes_per_block = _check_request(
        gpu, threads_per_block, registers_per_thread, shared_bytes_per_block)
    parts = gpu.register_file_partitions
    warps = -(-threads_per_block // gpu.warp_size)
    regs_per_warp = _round_up(registers_per_thread * gpu.warp_size, gpu.reg_alloc_unit)
    if regs_per_warp * _round_up(warps, parts) > gpu.regs_per_block:
        raise LaunchConfigError(_register_advice(gpu, threads_per_block, registers_per_thread))
    smem = _round_up(shared_bytes_per_block + gpu.smem_reserved_per_block, gpu.smem_alloc_granularity)
    warps_by_regs = parts * ((gpu.regs_per_sm // parts) // regs_per_warp)
    limits = {
        "blocks": gpu.max_blocks_per_sm,
        "warps": gpu.max_warps_per_sm // warps,
        "registers": warps_by_regs // warps,
        "shared_memory": gpu.smem_per_sm // smem if smem else gpu.max_blocks_per_sm,
    }
    blocks = min(limits.values())
    binding = next(name for name in LIMITS if limits[name] == blocks)
    return Occupancy(
        blocks_per_sm=blocks,
        binding_limit=binding,
        limits=MappingProxyType(limits),
        active_warps=blocks * warps,
        occupancy=blocks * warps / gpu.max_warps_per_sm,
        warps_per_block=warps,
        regs_per_block=regs_per_warp * warps,
        smem_per_block=smem,
    )


def _integer(name: str, value) -> int:
    """`value` as a Python int: any integer type but bool."""
    try:
        if not isinstance(value, bool):
            return operator.index(value)
    except TypeError:
        pass
    raise LaunchConfigError(f"{name} must be an integer, got {value!r}")


def _check_request(gpu: GPUModel, threads, regs, smem) -> tuple[int, int, int]:
    """(threads, regs, smem) as ints, checked against the GPU's limits."""
    if not isinstance(gpu, GPUModel):
        raise TypeError(f"gpu must be a hwmodels.GPUModel (hwmodels.load(name) gives one), got {gpu!r}")
    threads, regs, smem = (_integer(name, value) for name, value in (
        ("threads_per_block", threads), ("registers_per_thread", regs), ("shared_bytes_per_block", smem)))
    if not 1 <= threads <= gpu.max_threads_per_block:
        raise LaunchConfigError(f"threads_per_block={threads} is outside 1..{gpu.max_threads_per_block}"
                                f" (max_threads_per_block of {gpu.name})")
    if not 1 <= regs <= gpu.max_regs_per_thread:
        raise LaunchConfigError(f"registers_per_thread={regs} is outside 1..{gpu.max_regs_per_thread}"
                                f" (max_regs_per_thread of {gpu.name})")
    if not 0 <= smem <= gpu.smem_per_block_optin:
        raise LaunchConfigError(f"shared_bytes_per_block={smem} is outside 0..{gpu.smem_per_block_optin}"
                                f" (smem_per_block_optin of {gpu.name}, "
                                f"{gpu.smem_per_block_optin // 1024} KiB)")
    return threads, regs, smem


def _register_advice(gpu: GPUModel, threads: int, regs: int) -> str:
    parts = gpu.register_file_partitions
    regs_per_warp = _round_up(regs * gpu.warp_size, gpu.reg_alloc_unit)
    max_warps = (gpu.regs_per_block // regs_per_warp) // parts * parts
    max_threads = min(max_warps * gpu.warp_size, gpu.max_threads_per_block)
    warps = _round_up(-(-threads // gpu.warp_size), parts)
    budget = gpu.regs_per_block // warps // gpu.reg_alloc_unit * gpu.reg_alloc_unit
    max_regs = min(gpu.max_regs_per_thread, budget // gpu.warp_size)
    return (f"{threads} threads x {regs} registers do not fit the {gpu.regs_per_block} registers per "
            f"block of {gpu.name} (registers go to warps in units of {gpu.reg_alloc_unit}, warps counted "
            f"in groups of {parts}): use at most {max_threads} threads with {regs} registers, or at most "
            f"{max_regs} registers per thread with {threads} threads")
