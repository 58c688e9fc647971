"""ScanPlan: the scan kernel's compile-time shape, chosen by a constrint model from a ScanProblem and a GPUModel.

Primary fields: `threads_d` (threads along D), `threads_t` (thread rows along time), `vec` (channels per thread,
one 16-byte access at most), `steps` (time steps each thread holds in registers) and `min_blocks` (resident blocks
per SM the launch bounds promise). Everything else (threads, chunk length, tile, shared memory) is derived here;
scan.cu re-checks the block shape by static_assert (whole warps, accesses of at most 16 bytes). Neither T nor B enters the model: a chunk is `chunk_len` steps, and
the number of chunks, ceil(T / chunk_len), is a launch-time quantity.

Cost: the model asks for 16-byte accesses where D allows, a warp row of at least 128 bytes, at least two resident
blocks per SM, enough bytes in flight per SM to cover memory latency at full bandwidth (Little's law, from the
GPU's bandwidth and SM count), a chunk long enough that the look-back traffic stays under 1/16 of the data, and,
among those, the shortest chunk (most parallelism at short T and thin shapes), the least padding along D, the
fewest rows (each row folds the rows before it) and larger blocks (fewer tickets and look-backs). The model has no
arithmetic term: on the H200 the fused bf16 gates made the kernel slower than gates-then-scan (benchmarks/results).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import constrint
import hwmodels

from .problem import CELLS, DTYPES, ScanProblem

SOURCE_PATH = Path(__file__).with_name("scan.cu")

REG_BASE = 112
"""Registers a thread needs besides its held steps: calibrated with nvcc 13 for sm_90 on 32 x 8 blocks without a
cap, where usage stayed at most REG_BASE + steps * input_count * vec for every cell, dtype and direction; the nvcc
test checks every rendered plan for spills."""

LATENCY_NS = 1500
"""Memory latency the bytes in flight must cover (loaded DRAM latency on A100/H100-class parts is 0.6-1.5 us)."""

LOOKBACK_BYTES = 16
"""Workspace bytes per channel and chunk of the look-back (aggregate a, b; inclusive state; status share)."""

MIN_BLOCKS_PER_SM = 2
"""Resident blocks per SM at least, so one block's loads overlap another's look-back and carry phases."""

POW2 = tuple(2**k for k in range(11))


@dataclass(frozen=True)
class ScanPlan:
    """Compile-time shape of one scan kernel; see the module docstring."""

    problem: ScanProblem
    arch: str
    threads_d: int
    threads_t: int
    vec: int
    steps: int
    min_blocks: int
    regs_estimate: int

    @property
    def threads(self) -> int:
        return self.threads_d * self.threads_t

    @property
    def tile(self) -> int:
        """Channels one block covers."""
        return self.threads_d * self.vec

    @property
    def chunk_len(self) -> int:
        """Time steps one block covers."""
        return self.threads_t * self.steps

    @property
    def smem_bytes(self) -> int:
        """Static shared memory: per-row maps (a, b) and the carry, fp32, plus the ticket."""
        return 4 * (2 * self.threads_t + 1) * self.tile + 4

    def d_tiles(self, hidden_dim: int) -> int:
        return -(-hidden_dim // self.tile)

    def chunks(self, seq_len: int) -> int:
        return max(1, -(-seq_len // self.chunk_len))

    def defines(self) -> dict[str, int]:
        """The #defines scan.cu needs, from the plan's fields only."""
        return {
            "SCAN_THREADS_D": self.threads_d,
            "SCAN_THREADS_T": self.threads_t,
            "SCAN_VEC": self.vec,
            "SCAN_STEPS": self.steps,
            "SCAN_MIN_BLOCKS": self.min_blocks,
            "SCAN_CELL": CELLS.index(self.problem.cell),
            "SCAN_REVERSE": int(self.problem.direction == "backward"),
            "SCAN_DTYPE": list(DTYPES).index(self.problem.dtype),
        }

    def source(self) -> str:
        """The complete CUDA source of this plan's kernel (`flashrnn_scan`)."""
        header = "".join(f"#define {k} {v}\n" for k, v in self.defines().items())
        return header + SOURCE_PATH.read_text()


def build_model(problem: ScanProblem, gpu: hwmodels.GPUModel) -> constrint.Model:
    """The constrint model of a scan kernel's shape on `gpu`; its objective is `objective(model)`."""
    m = constrint.Model()
    esize, inputs, dim = problem.element_bytes, problem.input_count, problem.hidden_dim
    td = m.int_var(values=[v for v in POW2 if v <= gpu.max_threads_per_block], name="threads_d")
    tt = m.int_var(values=[v for v in POW2 if v <= 64], name="threads_t")
    vec = m.int_var(values=[v for v in POW2 if v * esize <= 16], name="vec")
    steps = m.int_var(values=[1, 2, 4, 8], name="steps")
    occ = m.int_var(MIN_BLOCKS_PER_SM, gpu.max_blocks_per_sm, "occupancy")
    d_tiles = m.int_var(1, dim, "d_tiles")
    m.int_var(esize, esize, "access_bytes_per_element")
    threads, tile, chunk = td * tt, td * vec, tt * steps
    regs = (REG_BASE + steps * inputs * vec + 7) // 8 * 8
    smem = 4 * (2 * tt + 1) * tile + 4 + gpu.smem_reserved_per_block
    m.add(m.divides(gpu.warp_size, threads), name="whole_warps")
    m.add(threads <= gpu.max_threads_per_block, name="max_threads_per_block")
    m.add(m.divides(vec, dim), name="vec_divides_hidden_dim")
    m.add(tile <= dim, name="tile_within_hidden_dim")
    m.add(tile * esize >= min(128, dim * esize), name="warp_row_covers_128_bytes")
    m.add(d_tiles * tile >= dim, name="tiles_cover_hidden_dim")
    m.add((d_tiles - 1) * tile < dim, name="no_empty_tile")
    m.add(regs <= gpu.max_regs_per_thread, name="max_regs_per_thread")
    m.add(regs * threads <= gpu.regs_per_block, name="regs_per_block")
    m.add(smem <= gpu.smem_per_block, name="static_smem_per_block")
    m.add(chunk * (inputs + 1) * esize >= 16 * LOOKBACK_BYTES, name="lookback_under_1_16")
    m.add(occ * threads <= gpu.max_threads_per_sm, name="occupancy_threads")
    m.add(occ * regs * threads <= gpu.regs_per_sm, name="occupancy_registers")
    m.add(occ * smem <= gpu.smem_per_sm, name="occupancy_smem")
    target_kib = gpu.memory_bandwidth // gpu.sm_count * LATENCY_NS // 10**9 // 1024 + 1
    shortfall = m.int_var(0, target_kib, "shortfall_kib")
    in_flight = occ * threads * steps * inputs * 16  # bytes of loads issued before the first use, per SM
    m.add(shortfall * 1024 >= target_kib * 1024 - in_flight, name="shortfall_definition")
    return m


def objective(m: constrint.Model):
    """Bytes-in-flight shortfall first, then narrow accesses, chunk length, padding along D, rows, small blocks."""
    v = m.var
    access_bytes = v("vec") * (v("access_bytes_per_element"))
    waste = v("d_tiles") * v("threads_d") * v("vec")
    return (4096 * v("shortfall_kib") + 256 * (16 - access_bytes) + 4 * v("threads_t") * v("steps") + waste // 16
            + v("threads_t") + 1024 // (v("threads_d") * v("threads_t")))


@functools.lru_cache(maxsize=256)
def plan(problem: ScanProblem, gpu: hwmodels.GPUModel) -> ScanPlan:
    """The scan plan for `problem` on `gpu` (pure; cached). Raises constrint.Infeasible with the conflict."""
    m = build_model(problem, gpu)
    sol = m.minimize(objective(m))
    threads = sol["threads_d"] * sol["threads_t"]
    regs = (REG_BASE + sol["steps"] * problem.input_count * sol["vec"] + 7) // 8 * 8
    smem = 4 * (2 * sol["threads_t"] + 1) * sol["threads_d"] * sol["vec"] + 4
    occupancy = hwmodels.blocks_per_sm(gpu, threads, regs, smem)
    return ScanPlan(problem=problem, arch=gpu.arch, threads_d=sol["threads_d"], threads_t=sol["threads_t"],
                    vec=sol["vec"], steps=sol["steps"], min_blocks=occupancy.blocks_per_sm, regs_estimate=regs)
