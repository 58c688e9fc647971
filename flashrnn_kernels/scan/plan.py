"""ScanPlan: the scan kernel's compile-time shape, chosen by a constrint model from a ScanProblem and a GPUModel.

Primary fields: `threads_d` (threads along D), `threads_t` (thread rows along time), `vec` (channels per thread,
one 16-byte access at most), `steps` (time steps each thread holds in registers) and `min_blocks` (resident blocks
per SM the launch bounds promise). Everything else (threads, chunk length, tile, shared memory, the register cap
the launch bounds give ptxas) is derived here; scan.cu re-checks the block shape by static_assert. Neither T nor B
enters the model: a chunk is `chunk_len` steps, and the number of chunks, ceil(T / chunk_len), is a launch-time
quantity.

Registers: a thread holds its steps' maps (a, b), 2 * steps * vec values, from the loads to the output; the need
is REG_OVERHEAD + REG_PER_MAP_FLOAT per value (measured with ptxas -v, see below). The launch bounds cap ptxas at
regs_per_sm / (threads * min_blocks), so the model admits min_blocks only where that cap covers the need, and the
cap is the plan's `regs_estimate`; the nvcc test checks every rendered plan compiles under it without spills.

Cost, in order: enough bytes in flight per SM to cover loaded memory latency at full bandwidth (Little's law from
the GPU's bandwidth and SM count), enough resident warps that one block's look-back and stores overlap other
blocks' loads, 16-byte accesses, then the shortest chunk (most parallelism at short T and thin shapes), the least
padding along D, the fewest rows and larger blocks. A chunk must be long enough that the look-back traffic stays
under 1/16 of the data.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import constrint
import hwmodels

from .problem import CELLS, DTYPES, ScanProblem

SOURCE_PATH = Path(__file__).with_name("scan.cu")

REG_OVERHEAD = 64
REG_PER_MAP_FLOAT = 2
MIN_MAP_FLOATS = 16
"""Register need: REG_OVERHEAD + REG_PER_MAP_FLOAT * (2 * steps * vec), the maps a thread holds being 2 * steps *
vec values, at least MIN_MAP_FLOATS of them (need >= 96). Measured with nvcc 13 for sm_90 on 32 x 4 blocks under
caps of 64 / 80 / 96 / 128 registers for every cell, dtype and direction: 32 map values compiled without spills
at 128 (the forward at 96; bf16 2-step reverses needed 128, 80 spilled), and uncapped ptxas stayed under this need
for 64 values."""

LATENCY_NS = 2000
"""Memory latency the bytes in flight must cover (loaded DRAM latency on A100/H100-class parts is 0.6-2 us)."""

TARGET_WARPS = 16
"""Resident warps per SM required, so that blocks in their look-back or store phase overlap blocks still loading."""

LOOKBACK_BYTES = 16
"""Workspace bytes per channel and chunk of the look-back (aggregate a, b; inclusive state; status share)."""

MIN_BLOCKS_PER_SM = 2
"""Resident blocks per SM at least, so one block's loads overlap another's look-back and carry phases."""

STEP_CHOICES = (2, 4, 8)

POW2 = tuple(2**k for k in range(11))


def register_need(steps: int, vec: int) -> int:
    """Registers per thread the kernel compiles into without spills (see REG_OVERHEAD)."""
    return REG_OVERHEAD + REG_PER_MAP_FLOAT * 2 * steps * vec


def register_cap(gpu: hwmodels.GPUModel, threads: int, min_blocks: int) -> int:
    """Registers per thread ptxas may use under __launch_bounds__(threads, min_blocks): a multiple of 8."""
    return min(gpu.max_regs_per_thread, gpu.regs_per_sm // (threads * min_blocks)) // 8 * 8


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
    """Registers per thread ptxas may use: the cap __launch_bounds__(threads, min_blocks) gives it."""

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
        """Static shared memory: per-row maps (a, b), fp32, plus the ticket."""
        return 4 * 2 * self.threads_t * self.tile + 4

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
            "SCAN_FAST": int(self.problem.dtype != "float32"),
        }

    def source(self) -> str:
        """The complete CUDA source of this plan's kernel (`flashrnn_scan`)."""
        header = "".join(f"#define {k} {v}\n" for k, v in self.defines().items())
        return header + SOURCE_PATH.read_text()


def build_model(problem: ScanProblem, gpu: hwmodels.GPUModel) -> constrint.Model:
    """The constrint model of a scan kernel's shape on `gpu`; its objective is `objective(model)`."""
    m = constrint.Model()
    esize, inputs, dim = problem.element_bytes, problem.input_count, problem.hidden_dim
    td = m.int_var(values=[v for v in POW2 if v <= min(256, gpu.max_threads_per_block)], name="threads_d")
    tt = m.int_var(values=[v for v in POW2 if v <= 32], name="threads_t")
    vec = m.int_var(values=[v for v in POW2 if v * esize <= 16], name="vec")
    steps = m.int_var(values=list(STEP_CHOICES), name="steps")
    occ = m.int_var(MIN_BLOCKS_PER_SM, min(16, gpu.max_blocks_per_sm), "occupancy")
    d_tiles = m.int_var(1, dim, "d_tiles")
    m.int_var(esize, esize, "access_bytes_per_element")
    threads, tile, chunk = td * tt, td * vec, tt * steps
    smem = 4 * 2 * tt * tile + 4 + gpu.smem_reserved_per_block
    m.add(m.divides(gpu.warp_size, threads), name="whole_warps")
    m.add(threads <= gpu.max_threads_per_block, name="max_threads_per_block")
    m.add(m.divides(vec, dim), name="vec_divides_hidden_dim")
    m.add(tile <= dim, name="tile_within_hidden_dim")
    m.add(tile * esize >= min(128, dim * esize), name="warp_row_covers_128_bytes")
    m.add(d_tiles * tile >= dim, name="tiles_cover_hidden_dim")
    m.add((d_tiles - 1) * tile < dim, name="no_empty_tile")
    need = REG_OVERHEAD + REG_PER_MAP_FLOAT * 2 * steps * vec
    m.add(2 * steps * vec >= MIN_MAP_FLOATS, name="map_floats_at_least_min")
    m.add(need <= gpu.max_regs_per_thread, name="max_regs_per_thread")
    m.add(need * threads <= gpu.regs_per_block, name="regs_per_block")
    m.add(smem <= gpu.smem_per_block, name="static_smem_per_block")
    m.add(chunk * (inputs + 1) * esize >= 16 * LOOKBACK_BYTES, name="lookback_under_1_16")
    m.add(occ * threads <= gpu.max_threads_per_sm, name="occupancy_threads")
    m.add(occ * need * threads <= gpu.regs_per_sm, name="occupancy_registers")  # launch-bound cap >= need
    m.add(occ * smem <= gpu.smem_per_sm, name="occupancy_smem")
    target_kib = gpu.memory_bandwidth // gpu.sm_count * LATENCY_NS // 10**9 // 1024 + 1
    shortfall = m.int_var(0, target_kib, "shortfall_kib")
    in_flight = occ * threads * steps * inputs * 16  # bytes of loads issued before the first use, per SM
    m.add(shortfall * 1024 >= target_kib * 1024 - in_flight, name="shortfall_definition")
    m.add(occ * threads >= TARGET_WARPS * gpu.warp_size, name="resident_warps")
    return m


def objective(m: constrint.Model):
    """Bytes-in-flight shortfall first, then narrow accesses, chunk length, padding along D, rows,
    small blocks, registers."""
    v = m.var
    access_bytes = v("vec") * (v("access_bytes_per_element"))
    waste = v("d_tiles") * v("threads_d") * v("vec")
    return (1024 * v("shortfall_kib") + 8192 * (16 - access_bytes)
            + 4 * v("threads_t") * v("steps") + waste // 16 + v("threads_t") + 1024 // (v("threads_d") * v("threads_t"))
            + v("steps") * v("vec") // 4)


@functools.lru_cache(maxsize=256)
def plan(problem: ScanProblem, gpu: hwmodels.GPUModel) -> ScanPlan:
    """The scan plan for `problem` on `gpu` (pure; cached). Raises constrint.Infeasible with the conflict."""
    m = build_model(problem, gpu)
    sol = m.minimize(objective(m))
    threads = sol["threads_d"] * sol["threads_t"]
    need = register_need(sol["steps"], sol["vec"])
    smem = 4 * 2 * sol["threads_t"] * sol["threads_d"] * sol["vec"] + 4
    blocks = hwmodels.blocks_per_sm(gpu, threads, need, smem).blocks_per_sm
    return ScanPlan(problem=problem, arch=gpu.arch, threads_d=sol["threads_d"], threads_t=sol["threads_t"],
                    vec=sol["vec"], steps=sol["steps"], min_blocks=blocks,
                    regs_estimate=register_cap(gpu, threads, blocks))
