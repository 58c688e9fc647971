"""What a scan kernel's block shape needs and costs, for the constraint model of plan.py: register needs,
shared memory, warps per SM, and the time model's constants and per-cell WorkModels, each fitted to the
measurements its docstring names. plan.build_model states both models below as constrint constraints.

Registers: the minGRU / minLSTM kernels keep their steps' maps (a, b), 2 * steps * vec fp32 values, in registers
from the gates to the outputs; the need is REG_OVERHEAD (less in chained segments) + REG_PER_MAP_FLOAT per value.
The linear kernel reads its maps back from the staged inputs and needs LINEAR_REGISTERS (LINEAR_REGISTERS_16 at 16
steps). The launch bounds cap ptxas at regs_per_sm / (threads * min_blocks), so the model admits min_blocks only
where that cap covers the need, and the cap is the plan's `regs_estimate`; the nvcc test checks every rendered plan
compiles under it without spills.

Time model (ns), the objective: B * ceil(D / tile) lanes times `segments` blocks; ceil(blocks / slots) waves (one for
resident segments), each as long as the slowest of: a block's DRAM bytes (with its published words) at its share of the
bandwidth (the active blocks share it, and the blocks of the busiest SM get at most the cell's WorkModel.sm_share times
that SM's even share), the bytes through the SM per bytes in flight ((stages - 1) staged chunks, a chained block's one
chunk) per LATENCY_NS, its chunks' work (WorkModel: per chunk, row and element), and a chained block's lifetime (its
load, two passes over the chunk, one look-back round, WorkModel.chained_step_ns per step of a thread). A chained launch
adds WorkModel.chained_ns, and each wave of chained blocks alone on their SMs WorkModel.chained_solo_ns; a forward whose
whole traffic fits in L2_REREAD_SHARE of L2 adds chained_ns_in_l2 instead, and per wave chained_sparse_ns for each
chained block per SM below CHAINED_FULL_BLOCKS (results/scan_forward_in_l2_ab.md), and a paired forward (one that a
backward follows) WorkModel.chained_ns_paired, as does a forward holding steps where resident segments would split
lanes (results/scan_held_alone_ab_h100.md). A resident segment streams its inputs twice (pass A, then pass B with the
outputs); the second read comes from L2 when all inputs fit in three quarters of it, else from DRAM; where its lane has
several segments, its phase 2 adds ROW_CHAIN_NS per thread row and chunk of each pass; and its look-back adds
LOOKBACK_NS plus ROUND_NS per round of threads_t predecessors. The resident constants were fitted side by side on the
H200 (results/scan_resident_model_ab.md: 128 problems whose plans they changed, 0.905x the time in geometric mean).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import hwmodels

from .problem import ScanProblem

REG_OVERHEAD = 64
REG_PER_MAP_FLOAT = 2
MIN_MAP_FLOATS = 16
REG_FP16 = 16
CHAINED_FORWARD_OVERHEAD = 40
"""Register need of the minGRU / minLSTM kernels: REG_OVERHEAD + REG_PER_MAP_FLOAT * (2 * steps * vec), at least
MIN_MAP_FLOATS map values, plus REG_FP16 in fp16 whole lanes and resident segments (their fp16 conversions keep more
temporaries than bf16's shifts: the minGRU fp16 backward of 2 steps of 8 channels takes 135 registers unbounded).
Chained segments need less: their forwards CHAINED_FORWARD_OVERHEAD in place of REG_OVERHEAD and both directions no
REG_FP16. The smallest spill-free caps (nvcc 13, sm_90, H200 plans of five shapes): chained forwards 104 at 16 map
values (fp32), 152-168 at 32 (bf16, fp16), chained fp16 backwards 120 at 16; and on an H100 the chained forwards took
0.84-0.90x the time at the block per SM more that this gives, the fp16 backwards 0.87-0.91x
(results/scan_occupancy_ab_h100.md); whole lanes no faster forward and up to 1.11x slower backward. Every cell, dtype,
direction and carry of the test grid compiles under its need without spills (ptxas -v, nvcc 13, sm_80 and sm_90: the
nvcc test)."""

LINEAR_REGISTERS = 96
"""The linear kernel's need up to 8 steps per thread: capped at 80, ptxas (nvcc 13, sm_80) spilled 24 bytes for a
forward of 2-step rows; 96 compiles every dtype, direction and block shape of the test grid without spills."""

LINEAR_REGISTERS_16 = 184
"""The linear kernel's need at 16 steps per thread: the fp32 backward (vec 4) takes 180 registers unbounded and
spilled under a cap of 168 (nvcc 13, sm_90)."""

LINEAR_HELD_REGISTERS = 168
"""The linear kernel's need in a chained forward holding steps in registers (at most MAX_HELD over 16 staged steps):
under a cap of 168 (3 blocks of 128 threads per SM) the fp32 and bf16 forwards of 16 + 4 and 16 + 5 steps compile
without spills (nvcc 13, sm_90 and sm_80; 16 + 8 on sm_90), though unbounded they take 196-254 registers: ptxas moves
the held loads nearer their use. So the model holds steps only where the launch bounds cap ptxas at this need."""

MAX_HELD = 8
"""Steps per thread a chained forward holds in registers at most (ScanPlan.held)."""

HELD_DTYPES = ("float32",)
"""The dtypes whose forwards the model lets hold steps: fp32, whose thin pairs took 0.95-0.96x as long with them on an
H100; the bf16 ones the model would move took 1.01x (scan_held_solver_ab_h100.md), so bf16 and fp16 keep their staged
plans. ScanPlan.holding builds held plans of any dtype."""

LATENCY_NS = 1000
"""Loaded DRAM latency the bytes in flight must cover (0.6-2 us on A100/H100-class parts under full load). On the
H200 a linear_scan block of 2 warps with 24 KB in flight streamed 21 GB/s (fp32 [8, 4096, 1536], 192 lanes at 96%
of copy): at most 1.1 us."""

LOOKBACK_NS = 1500
"""A resident segment's look-back, besides its rounds: the wait for the last predecessor's map (the segments' pass
A times differ), publishing, two barriers."""

ROUND_NS = 100
"""One round of a resident segment's look-back: each thread row loads one predecessor's word pairs (an L2 round
trip), one barrier. On the H200 (linear_scan [1, 65536, 64] fp32, decays in (0.999, 1), where every look-back runs to
segment 0) rounds took 70-145 ns: against decays in (0.5, 1), whose look-backs end after one round, 33 rounds added
2.2 us (blocks of 16 x 8 threads, 16 steps), 99 rounds 7.8 us (16 x 4) and 50 rounds 7.2 us (8 x 8, 8 steps)."""

ROW_CHAIN_NS = 10
"""A resident segment's phase 2 per thread row and chunk of each pass, which its streaming does not hide (where its
lane has several segments; a lane of one segment walks its chunks once, as a whole lane does): on the H200
(linear_scan [1, 65536, 64] fp32 forward, 4 chunks per segment) blocks of 32 rows took 2.3-2.8 us longer than the
time model without it, blocks of 16 rows 0.7-1.6 us, blocks of 8 rows -0.3-0 us. With it the plan there went from
8 x 32 threads, 8 steps (19.05 us) to 8 x 16, 16 steps (16.55 us)."""

L2_REREAD_SHARE = (3, 4)
"""A resident segment's second read of its inputs comes from L2 when all inputs fit in this share of it: on the H200
(60 MiB of L2) the 33.5 MB of fp32 inputs of linear_scan [1, 65536, 64] streamed as fast whether pass B read 4 chunks
of a segment again or 1 (results/scan_resident_keep_staged_ab.md)."""

CHAINED_FULL_BLOCKS = 5
"""Chained blocks per SM from which WorkModel.chained_sparse_ns no longer applies."""

CHAINED_ROUND_NS = 800
"""A chained block's look-back within its lifetime: the wait for its nearest predecessor's words, one barrier."""

STAGE_ALIGN = 128
"""Bytes to whose multiple scan.cu aligns its staged chunks (`extern __shared__ __align__(128)`), after the static
rows: starting 16 bytes off, the whole-lane linear scan at [8, 4096, 1536] ran 18-23% slower on the H200."""

WORD_BYTES = 16
"""A segment publishes two 8-byte words per channel (its map's a and b, or its final state): written back to DRAM."""

MIN_CHUNK = 16
"""Steps per chunk at least: shorter chunks spend more on their barriers and phase 2 than on their data."""

MIN_RESIDENT_WARPS = 8
"""Warps resident per SM at least, so that one block's phases overlap another's (MIN_SEGMENT_WARPS for the forward's
resident segments)."""

MIN_SEGMENT_WARPS = 4
"""Warps resident per SM at least for the forward's resident segments: their blocks of 2 and 4 warps, 1-3 per SM,
streamed linear_scan [1, 65536, 64] faster than blocks of 8 warps (H200, fp32 forward, decays in (0.5, 1): 8 x 16
threads, 16 steps, 16.6 us; 8 x 8, 16 steps, 2 blocks per SM 15.7 us; 8 x 32, 8 steps, 18.2-18.7 us). Whole lanes
and chained segments keep MIN_RESIDENT_WARPS (the backward's resident segments, since withdrawn, measured with it when
their rescan loaded h_{t-1} and the inputs at t from memory step by step: fp32 [8, 1024, 500] took 57.1 us with one
block of 4 warps per SM, 8 x 16 threads, 8 steps, 4 stages, and 43.1 us with one of 8, 8 x 32, 4 steps)."""

STEP_CHOICES = (2, 4, 8, 16)
STAGE_CHOICES = (1, 2, 3, 4)
"""1 only for chained segments (one chunk, nothing to stage ahead)."""
POW2 = tuple(2**k for k in range(11))
POW2_ROWS = tuple(v for v in POW2 if v <= 32)
"""Thread rows per block: phase 2 combines them one after another."""
POW2_AND_THREES = tuple(sorted(set(POW2) | {3 * v for v in POW2}))
"""Powers of two and three times them (a tile of 96 channels splits 1536 = 3 * 512 into 16 lanes per batch row:
128 lanes for B = 8 on 132 SMs)."""


@dataclass(frozen=True)
class WorkModel:
    """How a cell's block shapes are modelled (see WORK_MODELS)."""

    min_row_bytes: int
    """A tile's row (its channels at one step) spans at least this many bytes (or the largest power of two of
    channels within D)."""
    whole_row_bytes: int
    """Whole lanes' rows span exactly this many bytes where D has that many (0: any width)."""
    threads_d: tuple[int, ...]
    """Choices of threads along D."""
    min_warps: int
    """Warps per block at least (unless its rows are at most POW2_ROWS' largest)."""
    busy_warps: int
    """Warps the blocks on the busiest SM run together at least (0: no bound; unless rows are at most)."""
    sm_share: tuple[int, int]
    """An SM streams at most sm_share[0] / sm_share[1] times its even share of the bandwidth."""
    chunk_ns: int
    """A block's own work per chunk besides its rows and elements: barriers and loop, without memory waits."""
    row_ns: int
    """Phase 2 combines the thread rows' maps one after another: per row and chunk."""
    element_ns: tuple[int, int]
    """Per element (step x channel) each thread handles per chunk, forward and backward, in full-precision math: a
    warp runs the phases as one dependent instruction stream, so a block with more elements per thread waits
    longer, however many warps share its SM."""
    fast_element_ns: tuple[int, int]
    """element_ns with the hardware approximations (ScanProblem.fast_math)."""
    chained_ns: int
    """A chained launch's fixed time besides its waves."""
    chained_ns_paired: int
    """chained_ns of a paired forward (ScanProblem.paired: a backward follows, so its inputs come from memory)."""
    chained_step_ns: tuple[int, int]
    """A chained block's lifetime per step each thread handles (its chunk's two passes and the chain of look-backs
    it waits on), forward and backward."""
    chained_steps: tuple[int, int]
    """Steps per thread a chained block runs best at, forward and backward: it prefers them where the model ties
    (see plan.objective)."""
    chained_backward_elements: int
    """Where nonzero, a chained backward's preferred steps are as many as give each thread this many elements (steps
    x vec, at most STEP_CHOICES' largest steps) instead of chained_steps[1] (see preferred_steps)."""
    chained_max_rows: int
    """Thread rows (threads_t) per chained block at most (0: no bound)."""
    chained_off_ns: tuple[int, int]
    """A chained block's lifetime per halving or doubling of its steps per thread away from chained_steps, forward
    and backward."""
    prefer_occupancy: bool
    """Where the model ties, whether more resident blocks per SM win (see plan.objective)."""
    chained_solo_ns: tuple[int, int]
    """A wave's extra time where a chained block is alone on its SM (nothing overlaps its load, scan and store),
    forward and backward."""
    chained_ns_in_l2: int
    """chained_ns of a forward whose whole traffic (inputs and output) fits in L2_REREAD_SHARE of L2."""
    chained_sparse_ns: int
    """Such a forward's extra time per wave and per chained block per SM below CHAINED_FULL_BLOCKS: its blocks' loads,
    scans and stores overlap one another less the fewer share an SM (0.92-1.00x the resident time at 5 per SM, up to
    1.08x at 2; results/scan_forward_in_l2_ab.md)."""
    prefer_small_blocks: bool
    """Where the model ties, whether blocks of fewer warps win (see plan.objective)."""
    resident: tuple[bool, bool]
    """Whether lanes may be split into resident segments (each streams its inputs twice and runs its chunks' work
    twice), forward and backward."""


WORK_MODELS = {
    "linear": WorkModel(min_row_bytes=128, whole_row_bytes=256, threads_d=POW2_AND_THREES, min_warps=2, busy_warps=4,
                        sm_share=(5, 4), chunk_ns=150, row_ns=30, element_ns=(10, 10),
                        fast_element_ns=(10, 10), chained_ns=12000, chained_ns_paired=4000,
                        chained_step_ns=(0, 0), chained_steps=(16, 8), chained_backward_elements=64,
                        chained_max_rows=0,
                        chained_off_ns=(1000, 7000), prefer_occupancy=True, chained_solo_ns=(600, 600),
                        chained_ns_in_l2=3000, chained_sparse_ns=500,
                        prefer_small_blocks=False, resident=(True, False)),
    "min_gru": WorkModel(min_row_bytes=64, whole_row_bytes=0, threads_d=POW2, min_warps=4, busy_warps=0,
                         sm_share=(1, 1), chunk_ns=400, row_ns=0, element_ns=(100, 290),
                         fast_element_ns=(50, 200), chained_ns=0, chained_ns_paired=0,
                         chained_step_ns=(0, 3000), chained_steps=(4, 4), chained_backward_elements=0,
                         chained_max_rows=16,
                         chained_off_ns=(2000, 0), prefer_occupancy=False, chained_solo_ns=(2000, 0),
                         chained_ns_in_l2=0, chained_sparse_ns=0,
                         prefer_small_blocks=True, resident=(False, False)),
}
WORK_MODELS["min_lstm"] = dataclasses.replace(WORK_MODELS["min_gru"], element_ns=(130, 400), fast_element_ns=(60, 260))
"""Per cell, fitted to H200 measurements of the kernel (linear_scan / min_gru / min_lstm, whole lanes of [8, T, 1536]).
The linear scan's whole lanes, timed side by side (`bench_scan.py --sweep` and alternating rounds of the best shapes,
2026-11-30, T = 4,096 / 16,384 / 65,536): rows of 256 bytes streamed best in both dtypes (fp32 16 x 4 threads, 4 steps,
4 stages: 95.9 / 97.2 / 96.5% of copy; bf16 16 x 8, 8 steps, 3 stages: 92.3 / 98.4 / 99.0%), against the earlier plans'
rows of 384 bytes (fp32 24 x 8: 86.5 / 89.6 / 92.3%) and 192 bytes (bf16 12 x 32: 84.7 / 84.5 / 86.1%); 128-byte bf16
rows reached at most 78%, 512-byte rows 94-96% (fp32) and 41% (bf16: 48 lanes); blocks with fewer than 4 warps on their
SM fell behind (bf16 16 x 4: 57-60%). Hence whole_row_bytes and busy_warps; chunk_ns and LATENCY_NS were refitted so
that the model ranks those shapes first. Earlier sweeps: rows of 64 bytes streamed at most 66% (fp32) / 77% (bf16) of
copy, rows of 128-256 bytes 88-96% / 85-98%; 96 lanes on 96 SMs reached 88% (bf16); with one block of 8 rows per SM, 2,
4 and 8 steps per thread streamed at 41%, 68% and 93-98% (bf16), which chunk_ns, row_ns and element_ns fit. The plans
before (bf16 tiles of 96 channels, fp32 of 96) measured 85-87% (bf16) and 88-93% (fp32) of copy for T = 4,096 to 65,536,
against 55-64% (bf16) for the 64-byte rows of the minGRU / minLSTM model. Its chained launches at [1, 65536, 64] took
21-25 us at every block shape of 8 or 16 steps per thread (fp32 forward, two waves; `scan_thin_sweep.csv`), about 12 us
more than the waves' model (chained_ns), while resident segments measured within 10% of the model; with chained_ns the
planner takes resident segments for [1, 65536, 64] (H200, against the chained plans: fp32 forward 19.4 / 23.4 us,
backward 60.3 / 56.0 us; bf16 12.8 / 13.5 and 25.8 / 35.9 us) and for the short [3, 1000, 96] and [1, 5000, 64] (forward
0.83-1.13x, backward 1.6-2.0x the chained plans' speed). The chained forwards have got faster since (bf16 9.4 us at
[1, 65536, 64] against 17.3 modelled) and win in a forward+backward pair (0.73-0.98x its time), but a smaller
chained_ns also moves the fp32 forwards, which then take 1.21-1.24x as long alone
(results/scan_thin_forward_context.md). So a forward is planned for its context: under autograd, where a backward
follows (ScanProblem.paired), with chained_ns_paired, 4 us, which moved the thin and narrow forwards timed there to
chained blocks (pairs 0.73-0.98x the time); alone, with chained_ns. The minGRU / minLSTM kernels compute exponentials
and reciprocals per element and run faster with more, narrower lanes (more warps per SM): under the linear scan's model
their plans took 10-70% longer (min_gru fp32 [8, 65536, 1536] 7.3 ms against 4.4 ms). Their whole lanes are latency-
bound per thread: in every whole-lane block shape of `bench_scan.py --gate-sweep` (H200, 2026-12-01, [64, 4096, 512] and
[8, 4096, 1536], fp32 and bf16, both directions, 22-38 shapes each) the time fell with the elements each thread handles,
not with the block's width: at [64, 4096, 512] threads of 8,192 elements (the earlier plans: one block of 4 warps per
SM) took 2.0-2.6x as long as threads of 2,048 (minGRU fp32 backward 2.36 ms against 0.99 ms). element_ns and
fast_element_ns are those threads' time per element (latency-bound, 4 warps per SM); chunk_ns stays per chunk. On the
thin [1, 65536, 64] (chained segments; `bench_scan.py --thin-sweep`, 2026-11-30) a minGRU / minLSTM chained block lives
longer the more steps each thread handles, in the backward most: fp32 backward with 2 / 4 / 8 steps per thread 67 / 66 /
93 us (minGRU) and 84 / 98 / 220 us (minLSTM) at one chunk per block; chained_step_ns = 3000 backward picks 4 steps
there. The forward runs best at 4 steps per thread in both dtypes (H200, 2026-12-01, `--thin-sweep min_gru,min_lstm
--thin-dtypes fp32,bf16`: fp32 minGRU 2 / 4 / 8 steps at best 45.3 / 40.0 / 45.8 us, minLSTM 50.3 / 47.6 / 67.7; bf16
minGRU 36.8 / 29.5 / -, minLSTM 44.5 / 37.6 / -), which the waves' model does not see (every shape there streams the
same elements per SM and wave), so a forward chained block's lifetime grows by chained_off_ns per halving or doubling
away from chained_steps (the plans of 8 steps had taken 53.7 / 67.7 us). Its thread rows are capped (chained_max_rows):
with decays near 1 (minGRU, k ~ -12, [2, 20000, 64] fp32) the forward's error against fp64 grew with them, 7.7e-6 /
1.4e-5 / 2.7e-5 at 8 / 16 / 32 rows of 4 steps, where the sequential fp32 loop's is 0.8-1.3e-5. Resident segments run
their chunks' gate math twice: measured 1.2-2.6x slower than chained ones for these cells (fp32 forward and backward,
bf16 backward), so they are not offered. A chained forward alone on its SM (one block of 8 or 16 warps) ran slower
than the same work at 2 or more blocks per SM, which the waves' model tied or ranked 1% apart: on an H100 the plans
moved off one block per SM took 0.77-0.99x the forward's time and 0.91-0.98x the pair's in CUDA graphs (minLSTM fp32
[1, 65536, 64] forward 45.0 -> 38.6 us, bf16 [2, 32768, 128] 55.7 -> 43.0, fp16 [1, 65536, 256] 105 -> 82; minGRU
fp32 [2, 32768, 128] 63.0 -> 56.9; results/scan_lone_chained_ab_h100.md, 2 alternating rounds). Hence their forwards'
chained_solo_ns, 2000 per wave, as for the linear scan's lone blocks.

The linear scan's backward is not offered resident segments either, and its chained blocks run best at 8 steps per
thread: timed where it runs, right after the forward (a CUDA graph of the forward, solver's plan, and the backward,
less the forward alone; results/scan_backward_carry_context.md, H200, 2026-12-03), its best chained block shape beat
its best resident one on every thin problem (fp32 and bf16, [1, 16384 / 65536 / 262144, 64], [2, 32768, 128],
[4, 8192, 128], [1, 65536, 256]; by 1.03-1.35x), and the plans then chosen (resident, or chained of 2 or 16 steps per
thread) took 1.02-1.54x the best shape's time. Timed alone, the resident plans read their inputs from L2 across
repeated calls (the thin bf16 backward's 25 MB), which made them look 1.1-1.9x faster than they run after a forward.
In bf16, chained blocks of 16 steps per thread took 1.2-1.5x as long as blocks of 8 (184 registers against 96-144),
in fp32 within 5% of them; 2 steps per thread took 1.5x as long as 16 ([1, 65536, 256] fp32, 134 against 88 us),
where the waves' model saw them equal.
Hence chained_steps (16, 8), and the backward's chained_off_ns, 7000: large enough to outweigh the waves' bandwidth
bound of a single wave, so that 8 steps win on time, not only where the model ties; the plans chosen took 1.00-1.10x the
best measured shape's time on those 12 problems. Where they ran one block per SM (16 x 32 threads), blocks of half the
width at two per SM, which the waves' model saw equal, took 0.895-0.996x their time (same problems, alternating rounds,
H200, 2026-12-03), and the long forwards' chained blocks of 8 x 32 threads, one per SM, took 1.05-1.09x as long as
8 x 16 at two per SM in fp32 (levels in bf16; [1, 262144, 64], [1, 65536, 256], [2, 32768, 128]): a lone block's load,
scan and store follow one another with nothing to overlap them. Hence chained_solo_ns (600, 600) per wave of lone
chained blocks, about the difference measured per wave, and the forward's chained_off_ns, 1000: without it, the
forward at [1, 16384, 1536] fp32 took 4 steps per thread and 1.17x the earlier plan's time
(results/scan_chained_solo_ab.md). The backward's 8 steps were measured with 8 channels per thread (bf16); what a
thread holds is its steps times its channels, so the backward prefers 64 elements per thread
(chained_backward_elements): 16 steps of 4 channels in fp32, where 8 x 16 threads of 16 steps took 0.991-1.0x the
pair's time of 8 x 32 of 8 on five problems ([1, 65536, 64] to [1, 65536, 256]; H100, 8 alternating rounds,
results/scan_backward_elements_ab_h100.md) and 0.990x at [1, 65536, 64] on the H200
(results/scan_pair_shapes_h200.md), the time model tying them."""


def min_resident_warps(carry: str, direction: str, few_warps: bool = False) -> int:
    """Warps resident per SM at least for plans of `carry` in `direction` (MIN_RESIDENT_WARPS, MIN_SEGMENT_WARPS);
    MIN_SEGMENT_WARPS for all with `few_warps` (see plan.build_model)."""
    few = few_warps or (carry == "resident" and direction == "forward")
    return MIN_SEGMENT_WARPS if few else MIN_RESIDENT_WARPS


def preferred_steps(problem: ScanProblem) -> int:
    """Steps per thread a chained block of `problem` runs best at (WorkModel.chained_steps,
    chained_backward_elements)."""
    work = WORK_MODELS[problem.cell]
    if problem.direction == "backward" and work.chained_backward_elements:
        return min(max(STEP_CHOICES), work.chained_backward_elements // widest_vec(problem))
    return work.chained_steps[problem.direction == "backward"]


def linear_register_need(steps):
    """The linear kernel's need: LINEAR_REGISTERS up to 8 steps, LINEAR_REGISTERS_16 at 16 (steps an int or a
    model variable of STEP_CHOICES)."""
    return LINEAR_REGISTERS + (LINEAR_REGISTERS_16 - LINEAR_REGISTERS) * (steps // 16)


def prefix_register_need(stages, vec):
    """Registers of a split lane's row maps from its segment's start, kept from pass A to pass B (scan.cu,
    fold_chunk): 2 * stages * vec fp32 values, in whole allocation units of 8 (ints or model variables)."""
    return (2 * stages * vec + 7) // 8 * 8


def register_need(problem: ScanProblem, steps: int, vec: int, stages: int, carry: str, held: int = 0) -> int:
    """Registers per thread the kernel compiles into without spills (see REG_OVERHEAD; split lanes add
    prefix_register_need; a linear forward holding steps needs LINEAR_HELD_REGISTERS)."""
    prefix = prefix_register_need(stages, vec) if carry == "resident" else 0
    if problem.cell == "linear":
        return (LINEAR_HELD_REGISTERS if held else linear_register_need(steps)) + prefix
    return map_register_need(problem, max(MIN_MAP_FLOATS // 2, steps * vec), int(carry == "chained")) + prefix


def map_register_need(problem: ScanProblem, map_values, chained):
    """The minGRU / minLSTM kernels' need for `map_values` = steps * vec maps (a, b) per thread, in chained segments
    where `chained` is 1 (each an int or a model expression; see REG_OVERHEAD)."""
    fp16 = REG_FP16 if problem.dtype == "float16" else 0
    saved = fp16 + (REG_OVERHEAD - CHAINED_FORWARD_OVERHEAD if problem.direction == "forward" else 0)
    return REG_OVERHEAD + fp16 + REG_PER_MAP_FLOAT * 2 * map_values - saved * chained


def static_smem(threads_t: int, tile: int) -> int:
    """Bytes of the kernel's static shared memory: the rows' maps s_a, s_b (fp32 [threads_t][tile + 4]), rounded up to
    STAGE_ALIGN, where the staged chunks start."""
    return -(-8 * threads_t * (tile + 4) // STAGE_ALIGN) * STAGE_ALIGN


def stage_bytes(problem: ScanProblem, chunk_len: int, tile: int, stages: int) -> int:
    """Bytes of the staged chunks (dynamic shared memory)."""
    return stages * problem.staged_count * chunk_len * tile * problem.element_bytes


def register_cap(gpu: hwmodels.GPUModel, threads: int, min_blocks: int) -> int:
    """Registers per thread ptxas may use under __launch_bounds__(threads, min_blocks): a multiple of 8."""
    return min(gpu.max_regs_per_thread, gpu.regs_per_sm // (threads * min_blocks)) // 8 * 8


def widest_vec(problem: ScanProblem) -> int:
    """Channels per access: the largest power of two of at most 16 bytes that divides D."""
    vec = 16 // problem.element_bytes
    while problem.hidden_dim % vec:
        vec //= 2
    return vec
