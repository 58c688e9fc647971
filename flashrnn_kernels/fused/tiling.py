"""The constraint model of a fused launch: tile sizes, on-chip footprints, GPU limits and per-step cost.

Footprint functions take plain ints or constrint expressions alike, so the solver's constraints and the
KernelPlan's derived sizes come from the same formulas (the kernels re-check them with static_assert).

Decision variables (per block of the cluster that owns one head and one batch tile):
  head_blocks     blocks sharing a head: a thread-block cluster (a power of two up to the GPU's cluster limit), or
                  any divisor of head_dim / 16 exchanging the step vector through global memory (global_exchange)
  global_exchange 1: the blocks of a head exchange the step vector as tagged words in global memory (L2), all
                  co-resident (one wave, cooperative launch); on GPUs without clusters the only way to split a head
  warps_m         16-row groups of the block's rows (forward and partial sums: hidden units with all gates;
                  backward otherwise: rows of R^T)
  warps_k         warps splitting the reduction dimension K (partial sums reduced through shared memory)
  n_tiles         batch tile / 8 (mma n dimension)
  reg_k_tiles     k-tiles of each warp's A fragments kept in registers; the rest live in shared memory...
  global_k_tiles  ...except these, streamed each step from an L2-resident scratch copy (heads too large for chips)
  blocks_per_sm   co-resident blocks per SM assumed by the register cap (__launch_bounds__)
  vector_buffers  2: double-buffered step vector, one barrier per step; 1: half the buffer, two barriers (a forward
                  exchanging through global memory keeps no step vector on chip: 2, its slots are double buffered)
  stages          depth of the cp.async pipeline of per-step inputs (staged stages-1 steps ahead)

The backward has two forms. It gathers the gate gradients (the step vector, G x head_dim per batch column) and
multiplies them by its rows of R^T; or, with partial_sums (a split head exchanging through global memory), it keeps
the forward's tiling of R, multiplies its own units' gate gradients by its slice of R transposed, and the blocks
reduce-scatter the fp32 partial sums (backward_partials.cu): each block reads head_dim x batch tile x warps_m words
per step instead of the tagged G x head_dim x batch tile vector. With pair_blocks 2 (sm_90 clusters of two) the
blocks of a pair share their gate gradients through distributed shared memory and each multiplies the pair's units
by half of R^T's rows: half the partial sums, for one exchange inside the pair per step.

Cost: predicted cycles of one recurrent step for the whole grid (waves x per-step latency): the mma chain over
the warp's k-tiles, shared-memory traffic for A fragments in shared memory and for the step's vector, the
k-split reduction, the pointwise cell step, synchronisation (block barrier ~0.04 us; the cluster's exchange of the
step vector, ~0.3 us forward in clusters of up to 8 blocks and ~0.8 us in 16, plus the slice each block pushes to the
others; a second cluster barrier per step with one vector buffer ~0.45 us; the global exchange: reading the whole
tagged vector from L2, in rounds of polled loads backward and as each warp's polled B fragments forward; split-head
blocks sharing an SM), and the step's HBM traffic. The synchronisation costs come from H200 measurements and are
coarse; results/fused_plan_measurements.csv holds the tilings timed side by side, and a CPU test holds plan() to it.
"""
from __future__ import annotations

from typing import Any

from constrint import Model

from .problem import FusedProblem

BASE_REGISTERS = {"forward": 48, "backward": 80}  # addresses, loop state, pointwise temporaries (ptxas -v)
REGISTER_MARGIN = 16  # headroom for the scheduler (sm_80 code needs a few more registers than sm_90)
REGISTER_MARGIN_SM100 = 80  # sm_100 forward code needs up to ~72 registers beyond the model, sm_90 16 (ptxas -v)
STREAM_REGISTERS = 32  # per n-tile: fragments of the unrolled L2 stream in flight (ptxas -v -ftz=true, as CuPy
# compiles: the sm_90 fp32 2 x 512 forwards at 3 blocks per SM fill their 168 registers, and sLSTM spilled with 16)
MMA_LATENCY = 33  # cycles of a dependent mma.sync chain link
MMA_ISSUE = {"bf16": 8, "fp16": 8, "fp32": 30}  # cycles per mma tile and sub-partition (fp32: 3 tf32 mmas)
SMEM_BYTES_PER_CYCLE = 128
EXCHANGE_BARRIER_BYTES = 16  # the mbarriers of the cluster's step-vector exchange (one per vector buffer)
L2_BYTES_PER_CYCLE = 24  # per SM with every SM streaming (~5.5 TB/s L2 over 132 SMs at ~1.9 GHz), shared by the SM's
# co-resident blocks: charged per block alone, heads streamed at 2-4 blocks per SM were planned into batch tiles of 8
# and 4 blocks per SM that took 2.1x the time of the tilings the shared rate picks (H200, B=256: LSTM / GRU 1 x 1024
# bf16, 1 x 512 and 2 x 512 fp32; results/fused_l2_stream_ab.md)
BLOCK_BARRIER = 80  # cycles (0.04 us at ~2 GHz)
CLUSTER_EXCHANGE = {"forward": 600, "backward": 980}  # cycles: the cluster's exchange of the step vector (st.async +
# mbarrier wait), and what a cluster larger than the portable size adds to the forward's (WIDE_CLUSTER_EXCHANGE). Fitted
# on an H200 (B=16, T=1024, bf16; results/fused_plan_variants.md): forwards in clusters of 8 took 0.51-0.81 us per step
# (6 x 128), 0.64x the time of one block per head and 0.77-0.83x of 8 blocks exchanging through global memory;
# forwards in clusters of 16 took 1.01-1.22x (3 x 256) and 1.25-1.68x (1 x 512 and larger) the global exchange's time
WIDE_CLUSTER_EXCHANGE = {"forward": 980, "backward": 0}
CLUSTER_PUSH = 100  # cycles per further block of a forward's cluster and per further 16 x 8 tile of the h slice each
# block pushes to it (16 rows x 8 batch columns): clusters of 8 blocks of two row groups took 1.08-1.17x the time of
# the global exchange (LSTM, GRU, sLSTM 3 x 256 bf16, B=16), of four groups 1.4x (Elman 1 x 512), where clusters of 8
# single-group blocks took 0.77-0.83x its time (6 x 128); clusters of 16 with batch tiles of 32 took 1.32-1.53x the
# time of tiles of 8 (sLSTM and Elman 1 x 512 / 2 x 512, B=256)
SHARED_SM_SPLIT = 300  # cycles per further block of a split head's forward on the same SM (H200 forwards at B=64: 6 x
# 128 bf16 in clusters of 8 at three blocks per SM 0.96-1.05x the time of one block per head, 12 x 64 fp32 in four
# blocks per head 1.12-1.21x, where at B=16, one block per SM, they took 0.65-0.73x and 0.69-0.81x; 1 x 512 bf16 at
# two blocks per SM through global memory 0.46x the time of clusters of 16)
CLUSTER_BARRIER_IN_STEP = 900  # cycles: a second cluster barrier per step waits for the slowest block (~0.45 us)
GLOBAL_EXCHANGE = 150  # cycles per step of the global exchange besides its rounds and bytes (the three terms fitted
# to an H200, B=16, T=1024, bf16, per step: 1x768 forward 2.14 us in 48 blocks, 1x768 backward 8.2 us in 48 blocks,
# 1x1024 forward 2.07 us and backward 10.2 us in 64 blocks)
EXCHANGE_LOADS = 8  # 16-byte loads (two tagged words) a thread keeps in flight while polling (engine.cuh)
EXCHANGE_ROUND = 1500  # cycles per further round of EXCHANGE_LOADS loads per thread (the backward's vector exchange;
# fitted when the forward read the vector the same way: 2.17 / 2.93 / 4.07 us per step of the 1x768 bf16 forward
# with 1 / 2 / 3 rounds, 256 / 128 / 64 threads)
EXCHANGE_REGISTERS = 32  # the polled words in flight
FRAGMENT_LOADS = 32  # the forward's B fragments a lane polls per step, at most (engine.cuh's FragmentExchange)
FRAGMENT_LOAD = 120  # cycles per fragment a lane polls, fitted together with the k-split term: the 1x768 bf16 forward
# on an H200 (B=16, T=1024) measured 1.57 us per step with 8 warps polling 6 fragments each, 1.65 us with 4 x 12
FRAGMENT_L2_BYTES_PER_CYCLE = 38  # per SM, the forward's polled B fragments (the global exchange's forwards of 3 x 256
# to 1 x 1024 on the H200 took 0.77-1.11 us per step, about 0.8 cycles more per element of K, results/
# fused_plan_variants.md)
EXCHANGE_L2_BYTES_PER_CYCLE = 12  # per SM reading the tagged vector: every block reads the same lines (half the
# streaming rate; fitted so that the 1x768 backward, measured 7.8 us per step through global memory against 7.3 in
# clusters of 16, stays in clusters)
STAGE_LATENCY = 600  # cycles of HBM latency left exposed per missing stage of the 4-deep input pipeline
POINTWISE_PER_GATE = 14  # instructions per element and gate, plus a fixed part
POINTWISE_FIXED = 24
# Dependent latency per element a thread processes in the pointwise step. Measured on an H200 (B=16, T=1024):
# charging it backward (many staged inputs per element) made the backward faster, forward plans got slower.
POINTWISE_CHAIN = {"forward": 0, "backward": 200}
PAIR_EXCHANGE = 1200  # cycles per step: a block's gate gradients pushed into its partner's shared memory (st.async)
# and the partner's awaited on an mbarrier. Fitted on an H200 (B=16, T=1024, bf16): pairs took 0.93x the time of
# single blocks on the 1x768 LSTM backward (0.90x on 1x1024), where halving the L2 terms alone predicts 0.79x


def fragment_registers(p: FusedProblem) -> int:
    """Registers per lane of one A fragment (m16 x k-tile): 4 bf16/fp16 pairs, or tf32 hi and lo of 4 values."""
    return 8 if p.dtype == "fp32" else 4


def fragment_bytes(p: FusedProblem) -> int:
    return 32 * 4 * fragment_registers(p)


def forward_tiling(p: FusedProblem, partial_sums: bool = False) -> bool:
    """Whether the launch tiles R as the forward does: 16-unit row groups with all gates (forward, partial sums)."""
    return p.direction == "forward" or partial_sums


def m_tiles(p: FusedProblem, partial_sums: bool = False) -> int:
    """m16 tiles per warp: all gates of 16 units in the forward's tiling, else one 16-row tile of R^T."""
    return p.gates if forward_tiling(p, partial_sums) else 1


def k_tile(p: FusedProblem) -> int:
    return 8 if p.dtype == "fp32" else 16


def k_dim(p: FusedProblem, partial_sums: bool = False) -> int:
    return p.head_dim if forward_tiling(p, partial_sums) else p.gates * p.head_dim


def v_stride(p: FusedProblem) -> int:
    """Elements per batch row of the step's vector buffer (16 bytes of padding against bank conflicts)."""
    return k_dim(p) + 16 // p.elem_bytes


def partial_words(p: FusedProblem, warps_m: Any, n_tiles: Any, pair_blocks: int = 1) -> Any:
    """fp32 partial sums a block of the partial-sum backward reads per step: one per (16-row group of a pair of
    blocks, or of a block, batch column, own unit)."""
    return p.head_dim // pair_blocks * 8 * n_tiles * warps_m


def partial_parts(p: FusedProblem, warps_k: int, n_tiles: int, pair_blocks: int = 1) -> int:
    """Partial sums per element left in shared memory after each thread has summed its loads: the block's threads
    form warps_k / n_tiles groups, one per source share they read (at most head_dim / 16 / pair_blocks sources)."""
    return min(warps_k // n_tiles, p.head_dim // 16 // pair_blocks)


def backward_stage_bytes(p: FusedProblem, batch_tile: Any, rows: Any, stages: Any) -> Any:
    """The backward's staged per-step inputs (backward_step.cuh): a_g, s_k, y_k (k >= 1) in fp32, then s_h, y_h,
    dh in the storage dtype, per batch row and unit, `stages` deep."""
    return stages * batch_tile * ((p.gates + 2 * (p.states - 1)) * rows * 4 + 3 * rows * p.elem_bytes)


def smem_bytes(p: FusedProblem, warps_m: Any, warps_k: Any, n_tiles: Any, smem_k_tiles: Any, vector_buffers: Any,
               stages: Any, partial_sums: bool = False, sums_left: Any = None, global_exchange: Any = 0,
               pair_blocks: int = 1) -> Any:
    """Dynamic shared memory of one block (the layout of forward.cu / backward.cu / backward_partials.cu, in that
    order). `sums_left`: partial_parts (computed when None). A forward exchanging through global memory
    (`global_exchange` 1) holds no step vector and double-buffers its k-split partial sums."""
    batch_tile, rows, e = 8 * n_tiles, 16 * warps_m, p.elem_bytes
    mt = m_tiles(p, partial_sums)
    size = warps_m * warps_k * smem_k_tiles * mt * fragment_bytes(p)  # A fragments
    if partial_sums:  # the pair's gate gradients (double buffered in pairs), staged inputs, received partial sums
        dx_buffers = 2 if pair_blocks > 1 else 1
        size = size + dx_buffers * batch_tile * (p.gates * rows * pair_blocks + 16 // e) * e
        size = size + backward_stage_bytes(p, batch_tile, rows, stages)
        if sums_left is None:
            sums_left = partial_parts(p, warps_k, n_tiles, pair_blocks)
        return size + sums_left * batch_tile * rows * 4 + (16 if pair_blocks > 1 else 0)  # + the pair's mbarriers
    fragments_only = global_exchange if p.direction == "forward" else 0
    buffers = vector_buffers - vector_buffers * fragments_only
    size = size + buffers * batch_tile * v_stride(p) * e  # the step's vector (double buffered or not)
    if p.direction == "forward":
        size = size + stages * batch_tile * p.gates * rows * e  # Wx staging
    else:
        size = size + backward_stage_bytes(p, batch_tile, rows, stages)
    slots = warps_k * ((2 * warps_k - 2) // warps_k)  # warps_k partial sums when warps_k > 1, else none
    size = size + (1 + fragments_only) * slots * warps_m * mt * n_tiles * 4 * 32 * 4  # k-split partial sums
    return size + EXCHANGE_BARRIER_BYTES


def predicted_registers(p: FusedProblem, n_tiles: Any, reg_k_tiles: Any, partial_sums: bool = False,
                        k_tiles_per_warp: Any = 0, warps_k: Any = 1, pair_blocks: int = 1) -> Any:
    """Registers per thread: A fragments (plus 2 per unrolled k-tile for the V fragments the scheduler keeps in
    flight where one V fragment serves a single m-tile), accumulators, per-element state, fixed part. Calibrated
    against ptxas -v: the sm_90 1x768 bf16 forward holds 12 register k-tiles in 6 warps, or 6 in 12 warps, without
    spills; the sm_80 DH=128 backward spills at 32 k-tiles without the V term."""
    if partial_sums:  # the forward's A fragments; accumulators of the warp's units; all B fragments; dy
        span = 16 // k_tile(p) * pair_blocks
        b_regs = (4 if p.dtype == "fp32" else 2) * p.gates * span * n_tiles
        elems = (4 * n_tiles + warps_k - 1) // warps_k
        return (fragment_registers(p) * p.gates * reg_k_tiles + 4 * n_tiles * k_tiles_per_warp // span + b_regs
                + p.states * elems + BASE_REGISTERS["backward"])
    mt = m_tiles(p)
    v_regs = 2 if mt == 1 else 0
    regs = (fragment_registers(p) * mt + v_regs) * reg_k_tiles + 4 * mt * n_tiles + BASE_REGISTERS[p.direction]
    if p.direction == "forward":
        regs = regs + 4 * (p.states - 1) * n_tiles + 2 * p.gates
    else:
        regs = regs + 4 * p.states * n_tiles
    if p.dtype == "fp32":
        regs = regs + 8 * mt + 8  # fragments streamed from shared memory and the split V values
    return regs


EXCHANGES = ("cluster", "global", "partials", "pairs")
"""How the blocks of a split head exchange a step: the step vector inside a cluster or through global memory, or
(backward only; the forward exchanges through global memory then) partial sums through global memory, of single
blocks ("partials") or of pairs of blocks sharing their gate gradients in a cluster of two ("pairs", sm_90)."""


def exchange_bytes(p: FusedProblem, n_tiles: Any, partial_sums: bool = False, pair_blocks: int = 1) -> Any:
    """Bytes of one fill of the global exchange for a batch tile: the tagged step vector (4 payload bytes per 8-byte
    word), or every block's fp32 partial sums of every unit (head_dim / 16 / pair_blocks sources per unit)."""
    if partial_sums:
        return p.head_dim // 16 // pair_blocks * p.head_dim * 8 * n_tiles * 4
    return 8 * n_tiles * k_dim(p) * p.elem_bytes * 2


def build(p: FusedProblem, gpu: Any, stream_from_l2: bool = False, exchange: str | None = None,
          partial_sums: bool = False, pair_blocks: int = 1) -> tuple[Model, Any]:
    """The constraint model of `p` on `gpu` and its objective (per-step cycles of the whole grid).

    `stream_from_l2` admits k-tiles streamed from L2 each step (global_k_tiles > 0): the planner asks for it only
    when no tiling keeps all of R on chip, which also keeps the search small for every other problem.
    `exchange` ("cluster" or "global") restricts how the blocks of a split head exchange the step vector; None
    leaves it to the objective. "cluster" includes the unsplit head (one block per head). `partial_sums` models the
    partial-sum backward (a split head, through global memory; with exchange None only past the cluster limit),
    `pair_blocks` 2 its pairs of blocks sharing their gate gradients (clusters of two)."""
    if partial_sums and (p.direction != "backward" or stream_from_l2 or exchange == "cluster"):
        raise ValueError("partial sums are a backward exchanging through global memory with R on chip")
    if pair_blocks not in (1, 2) or (pair_blocks == 2 and not partial_sums):
        raise ValueError("pair_blocks is 1, or 2 for the partial-sum backward")
    m = Model()
    mt, kt_total = m_tiles(p, partial_sums), k_dim(p, partial_sums) // k_tile(p)
    max_warps = gpu.max_threads_per_block // gpu.warp_size
    cluster_limit = gpu.cluster_max_nonportable
    if exchange not in (None, "cluster", "global"):
        raise ValueError(f"exchange must be 'cluster', 'global' or None, not {exchange!r}")
    cluster_sizes = [c for c in (1, 2, 4, 8, 16) if c <= cluster_limit]
    units = p.head_dim // 16
    splits = [d for d in range(2, min(units, gpu.sm_count) + 1) if units % d == 0]
    cb = m.int_var(values=sorted(set(cluster_sizes) | set(splits)), name="head_blocks")
    clustered = m.int_var(0, 1 if cluster_limit > 1 and exchange != "global" and not partial_sums else 0, "clustered")
    # Streaming part of R from L2 as well as exchanging through it only where no cluster can take the head: the fp32
    # 1x768 backward on an H200 measured 53 us per step that way against 26 us in clusters of 16.
    offer_global = exchange == "global" or (exchange is None and not (stream_from_l2 and cluster_limit > 1))
    glob = m.int_var(1 if exchange == "global" or partial_sums else 0, 1 if offer_global else 0, "global_exchange")
    wm = m.int_var(1, max_warps, "warps_m")
    wk = m.int_var(values=[w for w in (1, 2, 4, 8, 16) if w <= max_warps], name="warps_k")
    kt_w = m.int_var(1, kt_total, "k_tiles_per_warp")
    nt = m.int_var(1, max(1, min(8, -(-p.batch // 8))), "n_tiles")
    reg_kt = m.int_var(0, kt_total, "reg_k_tiles")
    glob_kt = m.int_var(0, kt_total if stream_from_l2 else 0, "global_k_tiles")
    per_sm = m.int_var(1, min(4, gpu.max_blocks_per_sm), "blocks_per_sm")
    budget = m.int_var(values=range(8, gpu.max_regs_per_thread + 1, 8), name="register_budget")
    parts = gpu.register_file_partitions
    warp_groups = m.int_var(1, -(-max_warps // parts), "warp_groups")  # warps rounded up to the partitions
    tiles = m.int_var(1, -(-p.batch // 8), "batch_tiles")
    vb = m.int_var(values=[1] if partial_sums else [1, 2], name="vector_buffers")
    stages = m.int_var(2, 4, "stages")
    max_tiles = -(-p.batch // 8)
    waves = m.int_var(1, -(-p.num_heads * max(cluster_sizes + splits) * max_tiles // gpu.sm_count), "waves")

    m.add(cb * wm * 16 == p.head_dim,
          name=f"head_dim {p.head_dim} = head_blocks x warps_m x 16 rows (each block owns whole 16-row tiles)")
    m.add(kt_w * wk == kt_total, name=f"the {kt_total} k-tiles of K={k_dim(p)} split evenly over warps_k warps")
    m.add(reg_kt + glob_kt <= kt_w, name="register and L2-streamed k-tiles <= k-tiles per warp")
    if pair_blocks > 1:
        pairs = m.int_var(0, units, "pairs")
        m.add(cb == pair_blocks * pairs, name="pairs: an even number of blocks per head")
        m.add(pairs * pair_blocks <= (units if cluster_limit >= pair_blocks else 0),
              name=f"pairs share their gate gradients in clusters of {pair_blocks}: {gpu.name} has "
                   f"{'clusters' if cluster_limit > 1 else 'none (sm_90 or newer)'}")
    warps = wm * wk
    m.add(warps * gpu.warp_size <= gpu.max_threads_per_block,
          name=f"threads per block <= {gpu.max_threads_per_block}")
    m.add(warp_groups * parts >= warps, name="warps counted in whole register-file partitions")
    regs = predicted_registers(p, nt, reg_kt, partial_sums, kt_w, wk, pair_blocks)
    stream_regs = STREAM_REGISTERS * nt if stream_from_l2 else 0
    margin = REGISTER_MARGIN_SM100 if gpu.compute_capability >= (10, 0) else REGISTER_MARGIN
    if p.direction == "forward":  # the fetched B fragments: one 16-byte load per k-tile and n-tile, all in flight
        exchange_regs = 4 * kt_w * nt * glob
        m.add(glob * kt_w * nt <= FRAGMENT_LOADS, name=f"a forward through global memory polls at most "
                                                       f"{FRAGMENT_LOADS} fragments per lane (k-tiles x n-tiles)")
        m.add(vb >= 1 + glob, name="a forward through global memory double-buffers its slots")
    else:
        exchange_regs = EXCHANGE_REGISTERS * glob
    m.add(regs + margin + stream_regs + exchange_regs <= budget,
          name="predicted registers per thread (+ margin) <= the register budget")
    m.add(budget * gpu.warp_size * parts * warp_groups * per_sm <= gpu.regs_per_sm,
          name=f"registers of the co-resident blocks <= {gpu.regs_per_sm} per SM")
    sums_left = None  # partial_parts as a variable (min is not a model expression)
    if partial_sums:
        sources = p.head_dim // 16 // pair_blocks
        sums_left = m.int_var(1, min(16, sources), "partial_parts")
        m.add(m.any_of([sums_left * nt == wk, sums_left == sources]), name="partial sums left per element")
        m.add(sums_left * nt <= wk, name="one partial sum per group of threads")
    smem = smem_bytes(p, wm, wk, nt, kt_w - reg_kt - glob_kt, vb, stages, partial_sums, sums_left, glob, pair_blocks)
    m.add(smem <= gpu.smem_per_block_optin,
          name=f"shared memory per block <= {gpu.smem_per_block_optin} bytes (R slice, h buffers, staging)")
    m.add(per_sm * (smem + gpu.smem_reserved_per_block + gpu.smem_alloc_granularity) <= gpu.smem_per_sm,
          name=f"shared memory of the co-resident blocks <= {gpu.smem_per_sm} bytes per SM")
    m.add(per_sm * warps * gpu.warp_size <= gpu.max_threads_per_sm, name="threads per SM")
    if p.direction == "forward" and (p.dtype == "fp32" or gpu.compute_capability >= (10, 0)):
        m.add(nt == 1, name="fp32 or sm_100 forward: one n-tile per block (larger batch tiles spill far beyond the "
                            "register model there, ptxas -v)")
    if partial_sums:
        if k_tile(p) < 16 * pair_blocks:
            m.add(kt_w * k_tile(p) % (16 * pair_blocks) == 0,
                  name="partial sums: a warp's units cover whole 16-row tiles of R^T (for each of the pair's groups)")
        m.add(wk % nt == 0, name="partial sums: the threads split into whole groups of one source's share")
    m.add(tiles * 8 * nt >= p.batch, name=f"batch tiles cover batch {p.batch}")
    m.add((tiles - 1) * 8 * nt < p.batch, name="no empty batch tile")
    m.add(waves * gpu.sm_count * per_sm >= p.num_heads * cb * tiles, name="waves of blocks over the SMs")
    m.add(m.any_of([per_sm == 1, waves * gpu.sm_count * (per_sm - 1) < p.num_heads * cb * tiles]),
          name="blocks per SM: the fewest that hold a wave (the largest register cap of __launch_bounds__), so that "
               "equal costs do not leave the choice to the search")

    m.add(cb <= 1 + units * (clustered + glob), name="a split head is a cluster or exchanges through global memory")
    m.add(clustered + glob + 1 <= cb, name="neither a cluster nor a global exchange for an unsplit head")
    m.add(clustered + glob <= 1, name="one way of exchanging the step vector")
    m.add(m.any_of([glob == 1] + [cb == c for c in cluster_sizes]),
          name=f"a cluster has {'/'.join(map(str, cluster_sizes))} blocks on {gpu.name}")
    if exchange is None and cluster_limit > 1 and p.direction == "backward" and not partial_sums:
        m.add(glob * cb >= glob * (cluster_limit + 1),
              name="a backward gathers the gate gradients through global memory only for a head split over more "
                   "blocks than a cluster holds (below it, a cluster gathers them or the blocks sum partial products)")
    m.add(glob * p.num_heads * cb * tiles <= gpu.sm_count * per_sm,
          name=f"a global exchange needs every block resident at once (<= {gpu.sm_count} SMs x blocks per SM)")
    link = m.int_var(MMA_LATENCY, 1 << 16, "mma_link_cycles")
    m.add(link >= warp_groups * mt * nt * MMA_ISSUE[p.dtype], name="mma issue per k-tile and sub-partition")
    e = p.elem_bytes
    elems = (4 * nt + wk - 1) // wk  # accumulator elements per thread in the pointwise step
    step = (
        kt_w * link
        + warps * (kt_w - reg_kt - glob_kt) * mt * fragment_bytes(p) // SMEM_BYTES_PER_CYCLE
        + per_sm * warps * glob_kt * mt * fragment_bytes(p) // L2_BYTES_PER_CYCLE
        + warps * kt_w * nt * 256 // SMEM_BYTES_PER_CYCLE
        + (0 if partial_sums else (wk - 1) * (BLOCK_BARRIER + mt * nt * 16))
        + (warps + 3) // 4 * elems * (p.gates * POINTWISE_PER_GATE + POINTWISE_FIXED)
        + elems * POINTWISE_CHAIN[p.direction]
        + BLOCK_BARRIER
        + (2 - vb) * BLOCK_BARRIER
        + (4 - stages) * STAGE_LATENCY
    )
    if cluster_limit > 1:  # cluster terms only where clusters exist (they would be constant zero otherwise)
        step = step + clustered * CLUSTER_EXCHANGE[p.direction] + (2 - vb) * clustered * CLUSTER_BARRIER_IN_STEP
        if p.direction == "forward":
            step = step + clustered * (cb - 1) * (wm * nt - 1) * CLUSTER_PUSH
        if cluster_limit > gpu.cluster_max_portable and WIDE_CLUSTER_EXCHANGE[p.direction]:
            wide = m.int_var(0, 1, "wide_cluster")
            m.add(clustered * cb <= gpu.cluster_max_portable + cluster_limit * wide,
                  name=f"a cluster of more than {gpu.cluster_max_portable} blocks is a wide one")
            step = step + wide * WIDE_CLUSTER_EXCHANGE[p.direction]
    if partial_sums:  # read this block's share of every block's partial sums, write its own for every unit
        # (1x768 bf16 on an H200, B=16, T=1024: 4494 cycles predicted, about 2.9 us per step measured, against
        # 11772 and 7.3 us for clusters of 16 gathering the gate gradients)
        exchange_read = partial_words(p, wm, nt, pair_blocks) * 4 // EXCHANGE_L2_BYTES_PER_CYCLE
        exchange_read = exchange_read + p.head_dim // pair_blocks * 8 * nt * 4 // L2_BYTES_PER_CYCLE
        exchange_read = exchange_read + (PAIR_EXCHANGE if pair_blocks > 1 else 0)
        loads = partial_words(p, wm, nt, pair_blocks) // 4  # 16-byte loads of the share
    else:  # read the whole tagged vector
        rate = FRAGMENT_L2_BYTES_PER_CYCLE if p.direction == "forward" else EXCHANGE_L2_BYTES_PER_CYCLE
        exchange_read = nt * (exchange_bytes(p, 1) // rate)
        loads = glob * nt * k_dim(p) * e  # pairs of words of a fill
    step = step + (cb - 1) * nt * wm * e + glob * (GLOBAL_EXCHANGE + exchange_read)
    if p.direction == "forward":  # each warp polls the fragments of its K slice; split heads sharing an SM
        step = step + glob * kt_w * nt * FRAGMENT_LOAD + (per_sm - 1) * (clustered + glob) * SHARED_SM_SPLIT
    elif exchange != "cluster":  # rounds of polled loads: every thread reads its share
        most = p.head_dim * 8 // 128 if partial_sums else -(-max_tiles * k_dim(p) * e // (EXCHANGE_LOADS * 32))
        rounds = m.int_var(0, max(1, most), "exchange_rounds")
        m.add(rounds * EXCHANGE_LOADS * 32 * warps >= loads,
              name="the global exchange's 16-byte loads in rounds over the block's threads")
        step = step + (rounds - glob) * EXCHANGE_ROUND
    bytes_per_cycle = gpu.memory_bandwidth // (gpu.boost_clock_mhz * 1_000_000)
    traffic = p.num_heads * tiles * 8 * nt * p.head_dim * (p.gates + 1) * e // bytes_per_cycle
    return m, waves * step + traffic
