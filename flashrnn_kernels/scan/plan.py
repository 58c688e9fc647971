"""ScanPlan: the scan kernel's compile-time shape, chosen by a constrint model from a ScanProblem and a GPUModel.

Primary fields: `threads_d` (threads along D), `threads_t` (thread rows along time), `vec` (channels per thread,
one 16-byte access at most), `steps` (time steps each thread holds in registers) and `min_blocks` (resident blocks
per SM the launch bounds promise). Everything else (threads, chunk length, tile, shared memory, the register cap
the launch bounds give ptxas) is derived here; scan.cu re-checks the block shape by static_assert. Neither T nor B
enters the model: a chunk is `chunk_len` steps, and the number of chunks, ceil(T / chunk_len), is a launch-time
quantity.

Registers: the minGRU / minLSTM kernels keep their steps' maps (a, b), 2 * steps * vec fp32 values, in registers
from the gates to the outputs; the need is REG_OVERHEAD + REG_PER_MAP_FLOAT per value (measured with ptxas -v,
see below). The linear kernel reads its maps back from the staged inputs and needs LINEAR_REGISTERS whatever the
shape. The launch bounds cap ptxas at regs_per_sm / (threads * min_blocks), so the model admits min_blocks only
where that cap covers the need, and the cap is the plan's `regs_estimate`; the nvcc test checks every rendered plan
compiles under it without spills.

Shared memory: two staged chunks of inputs (dynamic) plus the per-row maps (static).

Cost, in order: enough input bytes staged per SM to cover the time a chunk spends in flight and in its carry
phases at full bandwidth (Little's law from the GPU's bandwidth and SM count), enough resident warps that one
block's look-back and stores overlap other blocks' loads, 16-byte accesses, then the shortest chunk (most
parallelism at short T and thin shapes), the least padding along D, the fewest rows and larger blocks. A chunk
must be long enough that the look-back traffic stays under 1/16 of the data.
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

LINEAR_REGISTERS = 80
"""The linear kernel's need: ptxas -v (nvcc 13, sm_90) gave 62-72 registers for every dtype, direction and block
shape of the test grid."""

LATENCY_NS = 3000
"""Time the staged bytes must cover: a chunk's loads are in flight for the loaded DRAM latency (0.6-2 us on
A100/H100-class parts) plus its look-back (two L2 round trips) and fences."""

TARGET_WARPS = 16
"""Resident warps per SM required, so that blocks in their look-back or store phase overlap blocks still loading."""

LOOKBACK_BYTES = 16
"""Workspace bytes per channel and chunk of the look-back (aggregate a, b; inclusive state; status share)."""

MIN_BLOCKS_PER_SM = 2
"""Resident blocks per SM at least, so one block's loads overlap another's look-back and carry phases."""

STEP_CHOICES = (2, 4, 8)

POW2 = tuple(2**k for k in range(11))


def register_need(cell: str, steps: int, vec: int) -> int:
    """Registers per thread the kernel compiles into without spills (see REG_OVERHEAD)."""
    if cell == "linear":
        return LINEAR_REGISTERS
    return REG_OVERHEAD + REG_PER_MAP_FLOAT * 2 * max(MIN_MAP_FLOATS // 2, steps * vec)


def static_smem(threads_t: int, tile: int) -> int:
    """Bytes of the kernel's static shared memory: s_a, s_b (fp32 [threads_t][tile]) and three ints."""
    return 4 * 2 * threads_t * tile + 12


def stage_bytes(problem: ScanProblem, chunk_len: int, tile: int) -> int:
    """Bytes of the two staged chunks (dynamic shared memory)."""
    return 2 * problem.input_count * chunk_len * tile * problem.element_bytes


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
    sm_count: int
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
        """Static shared memory: per-row maps (a, b), fp32, plus the ticket and look-back words."""
        return static_smem(self.threads_t, self.tile)

    @property
    def stage_bytes(self) -> int:
        """Dynamic shared memory: two staged chunks of inputs (the current one and the next)."""
        return stage_bytes(self.problem, self.chunk_len, self.tile)

    def grid(self, tickets: int) -> int:
        """Persistent blocks for `tickets` chunks: at most one resident wave."""
        return max(1, min(tickets, self.min_blocks * self.sm_count))

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
    smem = static_smem(tt, tile) + stage_bytes(problem, chunk, tile) + gpu.smem_reserved_per_block
    m.add(m.divides(gpu.warp_size, threads), name="whole_warps")
    m.add(threads <= gpu.max_threads_per_block, name="max_threads_per_block")
    m.add(m.divides(vec, dim), name="vec_divides_hidden_dim")
    m.add(tile <= dim, name="tile_within_hidden_dim")
    m.add(tile * esize >= min(128, dim * esize), name="warp_row_covers_128_bytes")
    m.add(d_tiles * tile >= dim, name="tiles_cover_hidden_dim")
    m.add((d_tiles - 1) * tile < dim, name="no_empty_tile")
    if problem.cell == "linear":
        need = m.int_var(LINEAR_REGISTERS, LINEAR_REGISTERS, "register_need")
    else:
        need = REG_OVERHEAD + REG_PER_MAP_FLOAT * 2 * steps * vec
        m.add(2 * steps * vec >= MIN_MAP_FLOATS, name="map_floats_at_least_min")
    m.add(need <= gpu.max_regs_per_thread, name="max_regs_per_thread")
    m.add(need * threads <= gpu.regs_per_block, name="regs_per_block")
    m.add(smem <= gpu.smem_per_block_optin, name="smem_per_block")
    m.add(chunk * (inputs + 1) * esize >= 16 * LOOKBACK_BYTES, name="lookback_under_1_16")
    m.add(occ * threads <= gpu.max_threads_per_sm, name="occupancy_threads")
    m.add(occ * need * threads <= gpu.regs_per_sm, name="occupancy_registers")  # launch-bound cap >= need
    m.add(occ * smem <= gpu.smem_per_sm, name="occupancy_smem")
    target_kib = gpu.memory_bandwidth // gpu.sm_count * LATENCY_NS // 10**9 // 1024 + 1
    shortfall = m.int_var(0, target_kib, "shortfall_kib")
    in_flight = occ * threads * steps * inputs * vec * esize  # bytes of one staged chunk per block, per SM
    m.add(shortfall * 1024 >= target_kib * 1024 - in_flight, name="shortfall_definition")
    warps_short = m.int_var(0, TARGET_WARPS, "resident_warps_shortfall")
    m.add(warps_short * gpu.warp_size >= TARGET_WARPS * gpu.warp_size - occ * threads,
          name="resident_warps_shortfall_definition")
    return m


def objective(m: constrint.Model):
    """Bytes-in-flight and resident-warp shortfalls first, then narrow accesses, chunk length, padding along D, rows,
    small blocks, registers."""
    v = m.var
    access_bytes = v("vec") * (v("access_bytes_per_element"))
    waste = v("d_tiles") * v("threads_d") * v("vec")
    return (1024 * v("shortfall_kib") + 4096 * v("resident_warps_shortfall") + 8192 * (16 - access_bytes)
            + 4 * v("threads_t") * v("steps") + waste // 16 + v("threads_t") + 1024 // (v("threads_d") * v("threads_t"))
            + v("steps") * v("vec") // 4)


@functools.lru_cache(maxsize=256)
def plan(problem: ScanProblem, gpu: hwmodels.GPUModel) -> ScanPlan:
    """The scan plan for `problem` on `gpu` (pure; cached). Raises constrint.Infeasible with the conflict."""
    m = build_model(problem, gpu)
    sol = m.minimize(objective(m))
    threads = sol["threads_d"] * sol["threads_t"]
    need = register_need(problem.cell, sol["steps"], sol["vec"])
    tile, chunk = sol["threads_d"] * sol["vec"], sol["threads_t"] * sol["steps"]
    smem = static_smem(sol["threads_t"], tile) + stage_bytes(problem, chunk, tile)
    blocks = hwmodels.blocks_per_sm(gpu, threads, need, smem).blocks_per_sm
    return ScanPlan(problem=problem, arch=gpu.arch, threads_d=sol["threads_d"], threads_t=sol["threads_t"],
                    vec=sol["vec"], steps=sol["steps"], min_blocks=blocks, sm_count=gpu.sm_count,
                    regs_estimate=register_cap(gpu, threads, blocks))
