"""ScanPlan: the scan kernel's compile-time shape and how it splits lanes, chosen by a constrint model from a
ScanProblem and a GPUModel.

Primary fields: `threads_d` (threads along D), `threads_t` (thread rows along time), `vec` (channels per thread, one
access of at most 16 bytes), `steps` (time steps per thread and chunk), `stages` (chunks staged in shared memory),
`min_blocks` (resident blocks per SM the launch bounds promise) and `carry` (how a lane's chunks are split over
blocks, see scan.cu and CARRIES); `held` (a linear chained forward's steps per thread loaded into registers instead of
staged, over WorkModel.chained_steps staged ones: the model holds the fewest that put a launch in one wave where its
staged steps alone need more, in HELD_DTYPES; ScanPlan.holding builds any such plan). Everything else (threads, chunk
length, tile, shared memory, the register cap the launch bounds give ptxas) is derived here; scan.cu re-checks the block
shape by static_assert. The problem carries B and T rounded up to powers of two (ScanProblem.for_shape), so one plan
serves every shape of its bucket; the number of segments is chosen at launch (`segments`).

The register and time models the solver minimises over live in cost_model.py.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

import constrint
import hwmodels

from .cost_model import (CHAINED_FULL_BLOCKS, CHAINED_ROUND_NS, HELD_DTYPES, L2_REREAD_SHARE, LATENCY_NS,
                         LINEAR_HELD_REGISTERS, LOOKBACK_NS, MAX_HELD, MIN_CHUNK, MIN_MAP_FLOATS, POW2, POW2_ROWS,
                         ROUND_NS, ROW_CHAIN_NS, STAGE_CHOICES, STEP_CHOICES, WORD_BYTES, WORK_MODELS,
                         linear_register_need, map_register_need, min_resident_warps, preferred_steps,
                         prefix_register_need, register_cap, register_need, stage_bytes, static_smem, widest_vec)
from .problem import ALL_GRADIENTS, CELLS, DTYPES, ScanProblem

SOURCE_PATH = Path(__file__).with_name("scan.cu")

LOOK_BACK_GROUP = 16
"""Segments per group of a split lane's look-back (at least; threads_t where that is more, ScanPlan.group): each
group's last segment also publishes its group's composed map, and a look-back composes the single maps of its nearest
segments, then whole groups (scan.cu): with 512 segments of 16 rows, at most 4 rounds instead of 32 where no final
state or product of decays ends a look-back early (decays near 1)."""

CARRIES = ("whole", "resident", "chained")
"""How a lane's chunks map to blocks: one block walks the whole lane; resident segments (as many per lane as keep
every block resident, each streamed twice); or chained segments of one chunk each (any number of waves, the chunk
read once into shared memory). Chained segments only where even the narrowest tiles give fewer lanes than SMs: a
chained block loads, then works, while a whole lane's block overlaps the two, and with enough lanes that wins
(H200, linear_scan [8, 4096, 1536] bf16: the best chained block shape of a sweep 114 us, whole lanes 100 us; fp32
155 / 160 us), which the time model does not capture."""


@dataclass(frozen=True)
class ScanPlan:
    """Compile-time shape and carry mode of one scan kernel; see the module docstring."""

    problem: ScanProblem
    arch: str
    threads_d: int
    threads_t: int
    vec: int
    steps: int
    stages: int
    min_blocks: int
    carry: str
    """One of CARRIES."""
    sm_count: int
    regs_estimate: int
    """Registers per thread ptxas may use: the cap __launch_bounds__(threads, min_blocks) gives it."""
    estimate_ns: int
    """The time model's value for the problem's bucket (B, T)."""
    held: int = 0
    """Steps per thread a chained forward loads into registers instead of staging them (scan.cu, SCAN_HELD; `steps`
    counts them): where a launch's inputs exceed the GPU's shared memory, that fits its blocks in one wave."""
    evict_first: bool = False
    """Whether the staged copies that a pair of split lanes reads for the last time are marked evict-first in L2
    (scan.cu's last_use): where what the pair's backward reads again fits in L2 (ScanProblem.pair_reread_elements;
    the thin fp32 pair took 0.94x the time on an H100), not where it does not ([1, 65536, 256] fp32: 1.02x)."""

    def __post_init__(self) -> None:
        chained_forward = self.carry == "chained" and self.problem.direction == "forward"
        if self.held and not (chained_forward and 0 < self.held < self.steps):
            raise ValueError(f"held={self.held!r}: only a chained forward holds steps in registers, fewer than its "
                             f"{self.steps} steps per thread (this plan: carry={self.carry!r}, "
                             f"{self.problem.direction}); use held=0")

    @property
    def slots(self) -> int:
        """Blocks resident at once on the GPU."""
        return self.min_blocks * self.sm_count

    @property
    def threads(self) -> int:
        return self.threads_d * self.threads_t

    @property
    def tile(self) -> int:
        """Channels one block covers."""
        return self.threads_d * self.vec

    @property
    def chunk_len(self) -> int:
        """Time steps one block covers per chunk."""
        return self.threads_t * self.steps

    @property
    def smem_bytes(self) -> int:
        """Static shared memory (see static_smem)."""
        return static_smem(self.threads_t, self.tile)

    @property
    def stage_bytes(self) -> int:
        """Dynamic shared memory: `stages` staged chunks of inputs."""
        return stage_bytes(self.problem, self.threads_t * (self.steps - self.held), self.tile, self.stages)

    def segments(self, lanes: int, chunks: int) -> int:
        """Segments per lane at launch: one for whole lanes; one per chunk when chained; else as many as keep every
        block resident (and no more than the lane's chunks)."""
        if self.carry == "whole":
            return 1
        if self.carry == "chained":
            return chunks
        return max(1, min(chunks, self.slots // lanes))

    def on_fewer_sms(self, lanes: int, chunks: int, chunks_per_segment: int) -> ScanPlan:
        """This plan of resident segments on a GPU with as few SMs as split `lanes` of `chunks` into segments of at
        most `chunks_per_segment` chunks (tests and compute-sanitizer reach both forms of pass B with it: segments
        that stay staged after pass A, and longer ones)."""
        if self.carry != "resident":
            raise ValueError(f"only resident segments run on fewer SMs, not carry={self.carry!r}")
        segments = -(-chunks // chunks_per_segment)
        return dataclasses.replace(self, sm_count=-(-segments * lanes // self.min_blocks))

    @property
    def group(self) -> int:
        """Segments per group of the look-back (LOOK_BACK_GROUP)."""
        return max(LOOK_BACK_GROUP, self.threads_t)

    def published_words(self, lanes: int, segments: int) -> int:
        """Words per array that a launch of `segments` segments per lane publishes: every segment's, then every
        group's (none for one segment per lane)."""
        return lanes * (segments + -(-segments // self.group)) * self.tile if segments > 1 else 0

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
            "SCAN_STAGES": self.stages,
            "SCAN_MIN_BLOCKS": self.min_blocks,
            "SCAN_CELL": CELLS.index(self.problem.cell),
            "SCAN_REVERSE": int(self.problem.direction == "backward"),
            "SCAN_DTYPE": list(DTYPES).index(self.problem.dtype),
            "SCAN_FAST": int(self.problem.fast_math),
            "SCAN_SPLIT": CARRIES.index(self.carry),  # 0 whole lanes, 1 resident, 2 chained segments
            "SCAN_STAGE_BYTES": self.stage_bytes,  # the dynamic shared memory of a launch: scan.cu checks its layout
            "SCAN_WANTED": self.problem.wanted,  # the backward's gradients (bit i: input i)
            "SCAN_HELD": self.held,
            "SCAN_DETERMINISTIC": int(self.problem.deterministic),  # split lanes: segment 0 alone publishes a state
            "SCAN_GROUP": self.group,
            "SCAN_PAIRED": int(self.problem.paired),  # a backward follows: the inputs it does not read evict first
            "SCAN_EVICT_FIRST": int(self.evict_first),  # last reads marked evict-first in L2 (scan.cu's last_use)
        }

    def source(self) -> str:
        """The complete CUDA source of this plan's kernel (`flashrnn_scan`)."""
        header = "".join(f"#define {k} {v}\n" for k, v in self.defines().items())
        return header + SOURCE_PATH.read_text()

    def for_gradients(self, wanted: int) -> ScanPlan:
        """This backward plan's block shape writing the gradients `wanted` (ScanProblem.wanted): its stage holds
        fewer values where h is not read."""
        return dataclasses.replace(self, problem=dataclasses.replace(self.problem, wanted=wanted))

    def holding(self, gpu: hwmodels.GPUModel, steps: int, held: int, min_blocks: int) -> ScanPlan:
        """This chained forward's block shape with `steps` steps per thread, the first `held` of them loaded into
        registers, `min_blocks` blocks per SM (and the register cap that gives)."""
        return dataclasses.replace(self, steps=steps, held=held, min_blocks=min_blocks,
                                   regs_estimate=register_cap(gpu, self.threads, min_blocks))

    def deterministic_variant(self) -> ScanPlan:
        """This plan's block shape for its problem under torch.use_deterministic_algorithms (ScanProblem.deterministic:
        compiled with SCAN_DETERMINISTIC)."""
        return dataclasses.replace(self, problem=dataclasses.replace(self.problem, deterministic=True))


def _fits_l2(gpu: hwmodels.GPUModel, nbytes: int) -> bool:
    """Whether `nbytes` fit in L2_REREAD_SHARE of the GPU's L2."""
    return nbytes * L2_REREAD_SHARE[1] <= gpu.l2_bytes * L2_REREAD_SHARE[0]


def _min_of(m: constrint.Model, a, b, hi: int, name: str):
    """A variable equal to min(a, b)."""
    v = m.int_var(1, hi, name)
    m.add(v <= a, name=f"{name}_at_most_first")
    m.add(v <= b, name=f"{name}_at_most_second")
    m.add(m.any_of([v == a, v == b]), name=f"{name}_is_one_of_them")
    return v


def _ceil_div(a, b):
    """ceil(a / b) as an expression (a >= 0, b > 0)."""
    return (a + b - 1) // b


def _ceil_count(m: constrint.Model, total, per, hi: int, name: str):
    """A variable equal to ceil(total / per)."""
    v = m.int_var(1, hi, name)
    m.add(v * per >= total, name=f"{name}_covers")
    m.add((v - 1) * per < total, name=f"{name}_no_extra")
    return v


def build_model(problem: ScanProblem, gpu: hwmodels.GPUModel, few_warps: bool = False) -> constrint.Model:
    """The constrint model of a scan kernel on `gpu`; minimise `objective(model)`. `few_warps` lowers the warps
    resident per SM to MIN_SEGMENT_WARPS for every carry: `plan` falls back to it where no block shape keeps
    MIN_RESIDENT_WARPS (shared memory too small for that many warps' staged chunks: the minLSTM backward stages five
    values per step, and on a V100's 96 KB per SM its 16-byte bf16 accesses leave room for fewer than 8 warps)."""
    m = constrint.Model()
    esize, inputs, dim = problem.element_bytes, problem.input_count, problem.hidden_dim
    B, T = problem.batch, problem.seq_len
    work = WORK_MODELS[problem.cell]
    td = m.int_var(values=[v for v in work.threads_d if v <= min(256, gpu.max_threads_per_block)], name="threads_d")
    tt = m.int_var(values=list(POW2_ROWS), name="threads_t")
    vec = m.int_var(values=[v for v in POW2 if v * esize <= 16], name="vec")
    staged_steps = m.int_var(values=list(STEP_CHOICES), name="staged_steps")
    held = m.int_var(0, MAX_HELD, "held")
    steps = m.int_var(values=sorted({s + h for s in STEP_CHOICES for h in range(MAX_HELD + 1)}), name="steps")
    m.add(steps == staged_steps + held, name="steps_staged_and_held")
    stages = m.int_var(values=list(STAGE_CHOICES), name="stages")
    occ = m.int_var(1, min(16, gpu.max_blocks_per_sm), "occupancy")
    d_tiles = m.int_var(1, dim, "d_tiles")
    resident, chained = m.int_var(0, 1, "resident"), m.int_var(0, 1, "chained")
    carry = m.int_var(0, len(CARRIES) - 1, "carry")  # index into CARRIES
    m.add(carry == resident + 2 * chained, name="carry_is_one_mode")
    m.add(resident + chained <= 1, name="carry_modes_exclusive")
    backward = problem.direction == "backward"  # indexes WorkModel's (forward, backward) pairs
    if not work.resident[backward]:
        m.add(resident == 0, name="no_resident_segments_for_the_cell_and_direction")
    m.add(m.any_of([chained == 1, stages >= 2]), name="stages_ahead_unless_chained")
    if work.chained_max_rows:
        m.add(m.any_of([chained == 0, tt <= work.chained_max_rows]), name="chained_rows_at_most")
    m.add(m.any_of([chained == 0, stages == 1]), name="chained_stages_one_chunk")
    if problem.cell == "linear" and not backward and problem.dtype in HELD_DTYPES:  # held steps (ScanPlan.held)
        m.add(held <= MAX_HELD * chained, name="held_steps_only_when_chained")
        m.add(m.any_of([held == 0, staged_steps == work.chained_steps[0]]), name="held_over_preferred_steps")
    else:
        m.add(held == 0, name="held_steps_only_in_linear_forwards_of_held_dtypes")
    split = resident + chained  # lanes split into segments
    threads, tile, chunk = td * tt, td * vec, tt * steps
    smem = (static_smem(tt, tile) + stage_bytes(problem, tt * staged_steps, tile, 1) * stages
            + gpu.smem_reserved_per_block)
    m.add(m.divides(gpu.warp_size, threads), name="whole_warps")
    m.add(threads <= gpu.max_threads_per_block, name="max_threads_per_block")
    m.add(m.any_of([threads >= work.min_warps * gpu.warp_size, tt == max(POW2_ROWS)]),
          name="min_warps_unless_rows_are_at_most")
    m.add(chunk >= MIN_CHUNK, name="chunk_at_least_min")
    block_warps = m.int_var(0, gpu.max_threads_per_block // gpu.warp_size, "preferred_block_warps")  # a tie-break
    m.add(block_warps * gpu.warp_size == (threads * (1 - split) if work.prefer_small_blocks else 0),
          name="preferred_block_warps_definition")
    m.add(vec == widest_vec(problem), name="widest_access_dividing_hidden_dim")
    m.add(tile <= dim, name="tile_within_hidden_dim")
    min_tile = min(work.min_row_bytes // esize, 1 << (dim.bit_length() - 1))
    narrowest_lanes = B * -(-dim // min_tile)  # lanes of the narrowest tiles
    m.add(tile >= min_tile, name="row_spans_min_row_bytes")
    m.add(d_tiles * tile >= dim, name="tiles_cover_hidden_dim")
    m.add((d_tiles - 1) * tile < dim, name="no_empty_tile")
    holds = 0  # a launch holding steps (ScanPlan.held)
    if problem.cell == "linear":
        holds = m.int_var(0, 1, "holds_steps")
        m.add(holds <= held, name="holds_steps_if_held")
        m.add(held <= MAX_HELD * holds, name="held_steps_if_holds")
        need = linear_register_need(staged_steps) * (1 - holds) + LINEAR_HELD_REGISTERS * holds
        # where the launch bounds leave more registers, ptxas takes them for the held loads (250 for 256 threads)
        m.add(m.any_of([holds == 0, occ * threads * (LINEAR_HELD_REGISTERS + 8) > gpu.regs_per_sm]),
              name="held_steps_capped_at_their_need")
    else:
        need = map_register_need(problem, steps * vec, chained)
        m.add(2 * steps * vec >= MIN_MAP_FLOATS, name="map_floats_at_least_min")
    need = need + resident * prefix_register_need(stages, vec)
    m.add(need <= gpu.max_regs_per_thread, name="max_regs_per_thread")
    m.add(need * threads <= gpu.regs_per_block, name="regs_per_block")
    m.add(smem <= gpu.smem_per_block_optin, name="smem_per_block")
    m.add(static_smem(tt, tile) <= gpu.smem_per_block, name="static_smem_per_block")
    m.add(occ * threads <= gpu.max_threads_per_sm, name="occupancy_threads")
    # registers go to warps, each warp's from one of the register file's partitions (as hwmodels.blocks_per_sm
    # counts them); need is a multiple of 8, so a warp's need is whole allocation units
    parts, warp_regs = gpu.register_file_partitions, need * gpu.warp_size
    reg_warps = m.int_var(0, gpu.max_warps_per_sm, "warps_per_partition_by_registers")
    m.add(reg_warps * warp_regs <= gpu.regs_per_sm // parts, name="partition_registers")
    m.add((reg_warps + 1) * warp_regs > gpu.regs_per_sm // parts, name="partition_registers_all_used")
    m.add(occ * threads <= parts * reg_warps * gpu.warp_size, name="occupancy_registers")  # launch-bound cap >= need
    m.add(occ * smem <= gpu.smem_per_sm, name="occupancy_smem")
    m.add(m.any_of([occ == min(16, gpu.max_blocks_per_sm), (occ + 1) * threads > gpu.max_threads_per_sm,
                    (occ + 1) * threads > parts * reg_warps * gpu.warp_size, (occ + 1) * smem > gpu.smem_per_sm]),
          name="occupancy_is_the_most_that_fits")
    whole_warps = min_resident_warps("whole", problem.direction, few_warps)
    segment_warps = min_resident_warps("resident", problem.direction, few_warps)
    m.add(occ * threads >= (whole_warps - (whole_warps - segment_warps) * resident) * gpu.warp_size,
          name="resident_warps")
    solo = m.int_var(0, 1, "chained_solo")  # a chained plan of one block per SM
    m.add(m.any_of([occ >= 2, solo == chained]), name="chained_solo_at_one_block")
    m.add(m.any_of([occ == 1, solo == 0]), name="chained_solo_only_at_one_block")
    # how far a chained block's steps per thread are from its preferred ones: |log2(steps / preferred)|
    best_steps = preferred_steps(problem)
    steps_off = m.int_var(0, len(STEP_CHOICES), "steps_from_preferred")
    for choice in STEP_CHOICES:
        m.add(m.any_of([staged_steps != choice,
                        steps_off == abs(choice.bit_length() - best_steps.bit_length())]),
              name=f"steps_from_preferred_at_{choice}")

    # the time model (cost_model's docstring)
    bw = gpu.memory_bandwidth // 10**9  # bytes per ns
    lanes = B * d_tiles
    slots = occ * gpu.sm_count
    chunks = _ceil_count(m, T, chunk, T, "chunks")
    segments = m.int_var(1, T, "segments")  # per lane, as `ScanPlan.segments` chooses them at launch
    m.add(segments <= 1 + split * T, name="one_segment_for_whole_lanes")
    looked_back = m.int_var(0, 1, "segments_look_back")  # more than one segment: pass A, look-back, pass B
    m.add(segments <= 1 + looked_back * T, name="segments_look_back_if_several")
    m.add(segments >= 1 + looked_back, name="segments_look_back_only_if_several")
    m.add(m.any_of([resident == 0, segments * lanes <= slots]), name="segments_resident")
    m.add(m.any_of([resident == 0, segments == chunks, (segments + 1) * lanes > slots]),
          name="segments_as_many_as_fit")
    m.add(m.any_of([chained == 0, segments == chunks]), name="chained_segment_per_chunk")
    if narrowest_lanes >= gpu.sm_count:  # the narrowest tiles give every SM a lane
        m.add(chained == 0, name="chained_only_when_lanes_leave_sms_idle")
    m.add(segments <= chunks, name="segments_within_chunks")
    blocks = lanes * segments
    waves = _ceil_count(m, blocks, slots, B * dim * T, "waves")
    m.add(m.any_of([resident == 0, waves == 1]), name="resident_segments_one_wave")
    # held steps: the fewest that put the launch in one wave (one step fewer per thread would not fit in it)
    fewer_chunks = _ceil_count(m, T, tt * (steps - 1), T, "chunks_of_one_step_fewer")
    m.add(m.any_of([held == 0, waves == 1]), name="held_steps_fit_one_wave")
    m.add(m.any_of([held == 0, lanes * fewer_chunks > slots]), name="held_steps_the_fewest_for_one_wave")
    active = _min_of(m, blocks, slots, B * dim * T, "active_blocks")
    per_sm = _ceil_count(m, active, gpu.sm_count, B * dim * T, "blocks_on_busiest_sm")
    m.add(m.any_of([per_sm * threads >= work.busy_warps * gpu.warp_size, tt == max(POW2_ROWS)]),
          name="warps_on_busiest_sm_unless_rows_are_at_most")
    # the objective's tie-break of more resident blocks, where blocks share an SM (a block alone on its SM gains
    # nothing from room for more)
    preferred = m.int_var(0, min(16, gpu.max_blocks_per_sm), "preferred_occupancy")
    if work.prefer_occupancy:
        m.add(m.any_of([per_sm == 1, preferred == occ]), name="preferred_occupancy_where_blocks_share_an_sm")
        m.add(m.any_of([per_sm >= 2, preferred == 0]), name="no_preferred_occupancy_for_blocks_alone")
    else:
        m.add(preferred == 0, name="no_preferred_occupancy")
    if work.whole_row_bytes and dim * esize >= work.whole_row_bytes:
        m.add(m.any_of([split == 1, tile * esize == work.whole_row_bytes]), name="whole_lane_row_bytes")
    seg_chunks = _ceil_count(m, chunks, segments, T, "chunks_per_segment")
    reread = 0 if _fits_l2(gpu, inputs * problem.tensor_bytes) else inputs * esize
    dram_per_elem = problem.traffic_elements * esize + resident * reread  # DRAM bytes per element of [B, T, D]
    sm_per_elem = problem.traffic_elements * esize + resident * inputs * esize  # bytes through the SM
    # staged bytes per block not yet consumed (a chained block loads its one chunk at once)
    in_flight = (stages - 1 + chained) * problem.staged_count * chunk * tile * esize
    seg_elems = seg_chunks * chunk * tile  # elements of one block
    element_ns = (work.fast_element_ns if problem.fast_math else work.element_ns)[backward]
    # each bound on a wave's time, rounded up to whole ns; the wave takes the largest (so every variable of the
    # model is fixed by the block shape, and the search only branches on that)
    bounds = {
        "wave_bandwidth": _ceil_div((seg_elems * dram_per_elem + split * WORD_BYTES * tile) * active, bw),
        "wave_sm_share": _ceil_div(seg_elems * sm_per_elem * per_sm * gpu.sm_count * work.sm_share[1],
                                   bw * work.sm_share[0]),
        "wave_latency": _ceil_div(seg_elems * sm_per_elem * LATENCY_NS, in_flight),
        # (a chained block's elements are in its lifetime, chained_step_ns, fitted without them)
        "wave_work": seg_chunks * (1 + split) * (work.chunk_ns + work.row_ns * tt
                                                 + (1 - chained) * element_ns * steps * vec),
        "wave_chained_block": chained * (LATENCY_NS + 2 * work.chunk_ns + CHAINED_ROUND_NS
                                         + work.chained_step_ns[backward] * steps
                                         + work.chained_off_ns[backward] * steps_off),
    }
    wave = m.int_var(1, 10**12, "wave_ns")
    for name, bound in bounds.items():
        m.add(wave >= bound, name=name)
    m.add(m.any_of([wave == bound for bound in bounds.values()]), name="wave_is_its_largest_bound")
    # a resident segment's look-back: at most segments - 1 predecessors, threads_t per round (a chained block's one
    # round is in its lifetime)
    rounds = resident * _ceil_div(segments - 1, tt)
    # a forward whose whole traffic fits in L2 (WorkModel.chained_ns_in_l2, chained_sparse_ns)
    in_l2_forward = not backward and _fits_l2(gpu, problem.traffic_elements * problem.tensor_bytes)
    chained_ns = (work.chained_ns_in_l2 if in_l2_forward else work.chained_ns_paired if problem.paired
                  else work.chained_ns)
    # a held launch (one wave) pays a paired forward's fixed time alone too, against resident segments that split lanes
    # (the narrowest tiles leave at least two SMs per lane; results/scan_held_alone_ab_h100.md)
    held_saving = max(0, chained_ns - work.chained_ns_paired) if 2 * narrowest_lanes <= gpu.sm_count else 0
    sparse = 0
    if in_l2_forward and work.chained_sparse_ns:
        sparse = work.chained_sparse_ns * (
            CHAINED_FULL_BLOCKS - _min_of(m, occ, CHAINED_FULL_BLOCKS, CHAINED_FULL_BLOCKS, "blocks_up_to_full"))
    time = m.int_var(1, 10**13, "time_ns")
    m.add(time == waves * wave + resident * LOOKBACK_NS + looked_back * resident * 2 * seg_chunks * tt * ROW_CHAIN_NS
          + rounds * ROUND_NS + chained * chained_ns - holds * held_saving
          + solo * waves * work.chained_solo_ns[backward] + chained * waves * sparse,
          name="time_definition")
    return m


def objective(m: constrint.Model):
    """The modelled time, then whole lanes, then for the minGRU / minLSTM kernels' whole lanes
    (WorkModel.prefer_small_blocks) blocks of fewer warps (H200, 2026-12-01, `bench_scan.py --gate-sweep`, 16 kernels:
    blocks of 4 warps were the fastest in 13 and within 1.1% of it in the other 3; the best blocks of 8 warps took up to
    1.29x as long, of 16 warps up to 1.78x), for chained segments steps per thread nearer WorkModel.chained_steps
    (measured faster where the model ties: H200, linear_scan [1, 65536, 64] bf16 chained forward, 16 steps 14.6 us, 8
    steps 16.6 us; the gate cells' forward above; on the H100, whose bandwidth bound hides the backward's
    chained_off_ns, the linear backward's 8 steps in 8 x 32 threads took 0.79-0.90x the bf16 pairs' time of 16 steps in
    8 x 16 and 0.99-1.01x the fp32 ones', results/scan_backward_plans_h100.md), then fewer rows (shorter phase 2), more
    threads along D, then, for the linear scan (WorkModel.prefer_occupancy), more resident blocks per SM where blocks
    share an SM (H200, linear_scan [8, 4096, 1536] fp32, blocks of 16 x 4 threads: 4 steps and 4 stages, 6 blocks per
    SM, 146.7 us; 8 steps and 3 stages, 4 blocks, 161.3 us; where each block is alone on its SM, as the 96 lanes of a
    bf16 [8, T, 1536] backward, room for more gains nothing: on the H100 its tie went to 2 steps in 4 stages at 3 per
    SM, 1.33-1.39x the time of 8 steps in 2 stages at T = 1,024-16,384, results/scan_model_plans_h100.log), then
    fewer stages (less shared memory, so more blocks per SM where it limits them; for resident segments also fewer
    registers: prefix_register_need), then fewer steps per thread, then fewer threads along D (where the term above
    no longer tells them apart: chained blocks half as wide at two per SM took 0.895-0.996x the time,
    results/scan_chained_solo_ab.md). These last three make the plan the model's alone, not whichever of equal
    plans a search meets first (H200, against the plans met first before: linear_scan bf16 backward at [8, 4096,
    1536] 8 steps and 2 stages, 135 us, where 4 steps and 3 stages take 175 us; minGRU bf16 backward, minGRU fp32
    forward and minLSTM bf16 forward at [8, T, 1536] 0.877-1.022x the time with 2 stages instead of 3-4, geometric
    mean 0.969 over T = 256, 4,096, 65,536; results/scan_plan_ties_ab.md). Each term's weight exceeds the sum of the
    later ones (blocks of fewer warps count for whole lanes only and steps for chained segments only, so those two
    never meet)."""
    v = m.var
    ties = (8192 * (v("resident") + v("chained")) + 65 * v("preferred_block_warps")
            + 65 * v("chained") * v("steps_from_preferred") + v("threads_t") + 32 // v("threads_d"))
    return (2**35 * v("time_ns") + 2**20 * ties + 2**15 * (16 - v("preferred_occupancy"))
            + 2**9 * (16 * (v("stages") - 1) + v("steps") - 2) + v("threads_d"))


def _solve(problem: ScanProblem, gpu: hwmodels.GPUModel, given: dict[str, int] | None = None,
           goal=objective) -> dict:
    """The model's solution minimising `goal(model)` with the variables of `given` fixed; the `few_warps` model where
    the full one has none (build_model)."""
    for few_warps in (False, True):
        m = build_model(problem, gpu, few_warps)
        for name, value in (given or {}).items():
            m.add(m.var(name) == value, name=f"given_{name}")
        try:
            return m.minimize(goal(m))
        except constrint.Infeasible:
            if few_warps:
                raise


def estimate_ns(p: ScanPlan, gpu: hwmodels.GPUModel) -> int:
    """The time model's value for plan `p` (any block shape and carry, not only the optimum) on its problem."""
    given = {name: getattr(p, name) for name in ("threads_d", "threads_t", "vec", "steps", "stages", "held")}
    return _solve(p.problem, gpu, {**given, "carry": CARRIES.index(p.carry)}, lambda m: m.var("time_ns"))["time_ns"]


def _plan(problem: ScanProblem, gpu: hwmodels.GPUModel, sol: dict) -> ScanPlan:
    threads = sol["threads_d"] * sol["threads_t"]
    need = register_need(problem, sol["steps"], sol["vec"], sol["stages"], CARRIES[sol["carry"]], sol["held"])
    tile, chunk = sol["threads_d"] * sol["vec"], sol["threads_t"] * sol["staged_steps"]
    smem = static_smem(sol["threads_t"], tile) + stage_bytes(problem, chunk, tile, sol["stages"])
    blocks = hwmodels.blocks_per_sm(gpu, threads, need, smem).blocks_per_sm
    reread = problem.pair_reread_elements * problem.tensor_bytes
    return ScanPlan(problem=problem, arch=gpu.arch, threads_d=sol["threads_d"], threads_t=sol["threads_t"],
                    vec=sol["vec"], steps=sol["steps"], stages=sol["stages"], min_blocks=blocks,
                    carry=CARRIES[sol["carry"]], sm_count=gpu.sm_count, held=sol["held"],
                    regs_estimate=register_cap(gpu, threads, blocks), estimate_ns=sol["time_ns"],
                    evict_first=CARRIES[sol["carry"]] != "whole" and _fits_l2(gpu, reread))


def carry_plan(problem: ScanProblem, gpu: hwmodels.GPUModel, carry: str, **pins: int) -> ScanPlan:
    """The best plan with the given carry mode, one of CARRIES, and the model's variables in `pins` fixed (block
    shapes: threads_d, threads_t, vec, steps, stages): benchmarks and tests compare them. Raises constrint.Infeasible
    where nothing fits."""
    if carry not in CARRIES:
        raise ValueError(f"carry must be one of {CARRIES}, got {carry!r}")
    return _plan(problem, gpu, _solve(problem, gpu, {**pins, "carry": CARRIES.index(carry)}))


def kernel_plan_for_carry(problem: ScanProblem, gpu: hwmodels.GPUModel, carry: str) -> ScanPlan:
    """`carry_plan`, or where the model offers no plan of that carry mode for the problem (chained segments where
    lanes fill the GPU, resident ones for cells without them), the best whole-lane block shape run in that mode:
    the kernel runs any block shape in any mode (tests and compute-sanitizer cover every mode this way)."""
    try:
        return carry_plan(problem, gpu, carry)
    except constrint.Infeasible:
        whole = carry_plan(problem, gpu, "whole")
        return dataclasses.replace(whole, carry=carry, stages=1 if carry == "chained" else whole.stages)


@functools.lru_cache(maxsize=256)
def plan(problem: ScanProblem, gpu: hwmodels.GPUModel) -> ScanPlan:
    """The scan plan for `problem` on `gpu` (pure; cached). Raises constrint.Infeasible with the conflict.

    A backward writing fewer gradients (ScanProblem.wanted) takes the block shape and stages solved for every
    gradient, with its smaller stage and the model's time for it: the model's own optimum stages deeper there, which
    took 1.02-1.04x as long in bf16 and 0.99-1.0x in fp32 on the H200 (results/scan_wanted_grads_ab.md).

    A deterministic problem takes the plan of the same problem without it: for split lanes that plan's block shape
    compiled with SCAN_DETERMINISTIC (its look-backs may run deeper, which the time model does not count); whole lanes
    are deterministic as they are, and keep the plan itself (one kernel for both)."""
    if problem.deterministic:
        found = plan(dataclasses.replace(problem, deterministic=False), gpu)
        return found if found.carry == "whole" else found.deterministic_variant()
    if problem.wanted != ALL_GRADIENTS:
        found = plan(dataclasses.replace(problem, wanted=ALL_GRADIENTS), gpu).for_gradients(problem.wanted)
        return dataclasses.replace(found, estimate_ns=estimate_ns(found, gpu))
    return _plan(problem, gpu, _solve(problem, gpu))
