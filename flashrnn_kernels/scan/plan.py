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
import functools
from dataclasses import dataclass
from pathlib import Path

import constrint
import hwmodels

from .problem import ALL_GRADIENTS, CELLS, DTYPES, ScanProblem

SOURCE_PATH = Path(__file__).with_name("scan.cu")

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

LOOK_BACK_GROUP = 16
"""Segments per group of a split lane's look-back (at least; threads_t where that is more, ScanPlan.group): each
group's last segment also publishes its group's composed map, and a look-back composes the single maps of its nearest
segments, then whole groups (scan.cu): with 512 segments of 16 rows, at most 4 rounds instead of 32 where no final
state or product of decays ends a look-back early (decays near 1)."""

WORD_BYTES = 16
"""A segment publishes two 8-byte words per channel (its map's a and b, or its final state): written back to DRAM."""

CARRIES = ("whole", "resident", "chained")
"""How a lane's chunks map to blocks: one block walks the whole lane; resident segments (as many per lane as keep
every block resident, each streamed twice); or chained segments of one chunk each (any number of waves, the chunk
read once into shared memory). Chained segments only where even the narrowest tiles give fewer lanes than SMs: a
chained block loads, then works, while a whole lane's block overlaps the two, and with enough lanes that wins
(H200, linear_scan [8, 4096, 1536] bf16: the best chained block shape of a sweep 114 us, whole lanes 100 us; fp32
155 / 160 us), which the time model does not capture."""

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
    (see `objective`)."""
    chained_backward_elements: int
    """Where nonzero, a chained backward's preferred steps are as many as give each thread this many elements (steps
    x vec, at most STEP_CHOICES' largest steps) instead of chained_steps[1] (see preferred_steps)."""
    chained_max_rows: int
    """Thread rows (threads_t) per chained block at most (0: no bound)."""
    chained_off_ns: tuple[int, int]
    """A chained block's lifetime per halving or doubling of its steps per thread away from chained_steps, forward
    and backward."""
    prefer_occupancy: bool
    """Where the model ties, whether more resident blocks per SM win (see `objective`)."""
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
    """Where the model ties, whether blocks of fewer warps win (see `objective`)."""
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
    MIN_SEGMENT_WARPS for all with `few_warps` (see `build_model`)."""
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

    # the time model (module docstring)
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
