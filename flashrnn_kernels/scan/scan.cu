// Chunked linear scan h_t = a_t * h_{t-1} + b_t over the time axis of [B, T, D] tensors, with the
// gates of minGRU / minLSTM computed on the fly from their projected inputs, and the backward as the same scan
// run in reverse (dh_t = dy_t + a_{t+1} * dh_{t+1}) followed by the gradient epilogue.
//
// Work split (all sizes below come from the ScanPlan as #defines; B, T, D are runtime arguments):
//   block   = SCAN_THREADS_D x SCAN_THREADS_T threads; threadIdx.x runs along D, each thread owning SCAN_VEC
//             consecutive channels (one access of up to 16 bytes), threadIdx.y along time.
//   chunk   = SCAN_THREADS_T * SCAN_STEPS consecutive steps (in scan order) of one lane; thread row ty holds
//             steps ty * SCAN_STEPS ... of the chunk.
//   lane    = (batch row, tile of SCAN_THREADS_D * SCAN_VEC channels); its chunks form a chain.
// Per chunk: each thread folds its steps' maps (a, b) into one map (phase 1), the rows' maps are combined with the
// chunk's carry-in into each row's carry-in (phase 2), and each thread rescans its steps and writes the outputs
// (phase 3). Inputs are staged into shared memory with cp.async SCAN_STAGES - 1 chunks ahead; each thread copies,
// and in phases 1 and 3 reads back, exactly its own steps and channels, so the staging needs no block barrier of its
// own, and every input is read from memory once. The backward stages all that phase 3 reads too (SCAN_STAGED): read
// step by step from memory instead, h_{t-1} and the inputs at t made it latency-bound (the linear backward at
// [8, 4096, 1536] 2.6-2.8x slower on the H200).
//
// Blocks and carries: a lane is split into `segments` (a launch argument) runs of consecutive chunks, one block
// each (block = segment * lanes + lane). A block walks its chunks in order and keeps the carry in registers. With one
// segment per lane (enough lanes to fill the GPU) that is all: no inter-block communication; plans of whole lanes
// (SCAN_SPLIT 0) compile nothing else and are launched with one segment. With more (SCAN_SPLIT 1 resident segments,
// 2 chained segments of one chunk each), every segment
// first streams its inputs to fold them into its map h -> A h + B (pass A). Segment 0 then publishes its final state
// A h0 + B at once; every later one publishes its map and looks back (decoupled look-back: in rounds of
// SCAN_THREADS_T predecessors, nearest first, thread row ty reading one; the rows' maps are composed in shared
// memory, and a published final state ends the composition), then publishes its own final state A carry + B. The
// segments form groups of SCAN_GROUP: each group's last segment also publishes its group's map once its look-back has
// composed the group's earlier segments (without SCAN_DETERMINISTIC, later its own final state, the state at the
// group's end, in place of the map's B), and a look-back composes the single maps of its nearest segments (at least
// SCAN_THREADS_T of them, down to a group's first segment), then whole groups; so where no final state or product of
// decays ends it early (decays near 1), a look-back over 512 segments takes at most 4 rounds of 16 instead of 32, and
// where one ends it in its first round, it ends there as it would without groups. Each
// segment then walks its chunks again writing the outputs (pass B). Where a launch's segments are all at most
// SCAN_STAGES chunks long, they are still staged after pass A, so pass B reads them from shared memory (the chained
// plans: one chunk per segment, one pass over memory); there pass A also keeps each thread row's map from the
// segment's start, so that pass B rescans every row of every chunk from the segment's carry-in at once, without
// phases 1 and 2. Otherwise (most resident plans) every segment stages pass B again, mostly from L2, its first chunks
// during the look-back.
// Which final states a look-back finds depends on timing, and composing a map rounds otherwise than taking the final
// state it leads to, so carries agree to rounding from run to run. With SCAN_DETERMINISTIC only segment 0 publishes
// its final state, and every look-back composes the same maps in the same order (which ones depends on its segment's
// index alone; nearest first, until segment 0 or a product of decays that is 0), so reruns agree to the bit.
// A published value is one 64-bit word (value, tag) written and read with relaxed atomics, so it is valid exactly
// when its tag names this launch: no fences, no flags. A block waits only on lower-numbered blocks, which the GPU
// starts no later than it (blocks are dispatched in index order), so the waits always end.
//
// Cells (SCAN_CELL): 0 linear (x1 = a, x2 = b); 1 minGRU (x1 = k, x2 = h_pre): z = sigmoid(k), a = 1 - z,
// b = z * g(h_pre); 2 minLSTM (x1 = f_pre, x2 = i_pre, x3 = h_pre): f = sigmoid(f_pre), i = sigmoid(i_pre),
// a = f / (f + i), b = i / (f + i) * g(h_pre). g(x) = x + 1/2 for x >= 0, sigmoid(x) otherwise.
#if !defined(SCAN_THREADS_D) || !defined(SCAN_THREADS_T) || !defined(SCAN_VEC) || !defined(SCAN_STEPS) || \
    !defined(SCAN_MIN_BLOCKS) || !defined(SCAN_CELL) || !defined(SCAN_REVERSE) || !defined(SCAN_DTYPE) || \
    !defined(SCAN_FAST) || !defined(SCAN_STAGES) || !defined(SCAN_SPLIT) || !defined(SCAN_STAGE_BYTES) || \
    !defined(SCAN_WANTED) || !defined(SCAN_DETERMINISTIC) || !defined(SCAN_HELD) || !defined(SCAN_GROUP) ||      \
    !defined(SCAN_PAIRED) || !defined(SCAN_EVICT_FIRST)
#error "scan.cu needs every ScanPlan field: SCAN_THREADS_D/_T, SCAN_VEC, SCAN_STEPS, SCAN_STAGES, SCAN_CELL, ..."
#endif

#if SCAN_FAST
#define FLASHRNN_FAST_ACTIVATIONS 1  // cell_exp and reciprocal_1_to_4: the hardware approximations
#endif
#include "cells/ops.cuh"
#include "runtime/async_copy.cuh"
#include "runtime/relaxed_words.cuh"

#if SCAN_DTYPE == 0
typedef float elem_t;
#elif SCAN_DTYPE == 1
typedef __nv_bfloat16 elem_t;
#elif SCAN_DTYPE == 2
typedef __half elem_t;
#else
#error "SCAN_DTYPE must be 0 (fp32), 1 (bf16) or 2 (fp16)"
#endif

#define SCAN_THREADS (SCAN_THREADS_D * SCAN_THREADS_T)
#define SCAN_TILE (SCAN_THREADS_D * SCAN_VEC)
#define SCAN_CHUNK (SCAN_THREADS_T * SCAN_STEPS)
#define SCAN_INPUTS (SCAN_CELL == 2 ? 3 : 2)
#define SCAN_ACCESS (SCAN_VEC * (int)sizeof(elem_t))                      // bytes of one thread's access
#define SCAN_OWNED ((SCAN_VEC + SCAN_THREADS_T - 1) / SCAN_THREADS_T)      // channels a thread combines in phase 2
// The backward writes the gradient of input i (y_{i+1}) where bit i of SCAN_WANTED is set (ScanProblem.wanted), and
// reads h_{t-1} only where one of them needs it: x1's, and minLSTM's x2's (linear_scan with a fixed `a` reads a and dy
// and writes db alone).
#define SCAN_READS_H (SCAN_REVERSE && ((SCAN_WANTED & 1) != 0 || (SCAN_CELL == 2 && (SCAN_WANTED & 2) != 0)))
// Staged inputs per step. Forward: the cell's inputs. Reverse: a_{t+1}'s inputs (slot 0 x1, minLSTM's slot 2 x2),
// dL/dh_t (slot 1), then what the gradients at t need besides: h_{t-1} (SCAN_SLOT_H, where SCAN_READS_H) and the
// candidate's input (SCAN_SLOT_X: minGRU's x2, minLSTM's x3). x1 (minLSTM's x2) at t is step t - 1's slot 0 (2): see
// rescan.
#define SCAN_STAGED (SCAN_REVERSE ? SCAN_INPUTS + SCAN_READS_H + (SCAN_CELL != 0) : SCAN_INPUTS)
#define SCAN_SLOT_H SCAN_INPUTS
#define SCAN_SLOT_X (SCAN_INPUTS + SCAN_READS_H)
// A chained forward may hold its first SCAN_HELD steps per thread in registers instead of staging them: where a
// launch's inputs exceed the GPU's shared memory, that fits every block in one wave.
#define SCAN_STAGED_ROWS (SCAN_THREADS_T * (SCAN_STEPS - SCAN_HELD))      // staged rows of one chunk
#define SCAN_STAGE (SCAN_STAGED * SCAN_STAGED_ROWS * SCAN_TILE)            // elements of one staged chunk
#define SCAN_ROW (SCAN_TILE + 4)  // floats per row of s_a / s_b: padded so that the rows' 16-byte pieces spread
                                  // over all banks
#define SCAN_ROW_BATCH (SCAN_THREADS_T < 8 ? SCAN_THREADS_T : 8)  // rows of s_a / s_b read ahead (for_rows)
// Phase 2 reads ahead only where fewer threads own channels than there are rows (SCAN_THREADS_T > SCAN_VEC): there a
// few threads run long chains that wait on every load. Where every row owns a channel, phase 2 keeps all threads
// busy and reading ahead only adds shared-memory traffic (it made the bf16 whole lanes of [8, T, 1536] 1.2% slower).
#define SCAN_PHASE2_BATCH (SCAN_THREADS_T > SCAN_VEC ? SCAN_ROW_BATCH : 1)

static_assert(SCAN_THREADS % 32 == 0, "a block is whole warps");
static_assert(SCAN_GROUP >= SCAN_THREADS_T, "a look-back's first round reads single maps of one or two groups");
static_assert(SCAN_VEC * sizeof(elem_t) <= 16, "one access is at most 16 bytes");
static_assert(SCAN_THREADS >= 32, "a block is at least one warp");
static_assert((SCAN_VEC & (SCAN_VEC - 1)) == 0, "SCAN_VEC is a power of two");
static_assert(SCAN_THREADS_T % SCAN_ROW_BATCH == 0, "rows are read ahead in whole batches");
static_assert(SCAN_CELL >= 0 && SCAN_CELL <= 2, "SCAN_CELL is 0 (linear), 1 (minGRU) or 2 (minLSTM)");
static_assert(SCAN_HELD == 0 || (SCAN_SPLIT == 2 && !SCAN_REVERSE && SCAN_HELD < SCAN_STEPS),
              "only chained forwards hold steps in registers, and stage at least one");
static_assert(SCAN_STAGES * SCAN_STAGE * sizeof(elem_t) == SCAN_STAGE_BYTES,
              "the staged chunks fill exactly the dynamic shared memory the plan launches with");

struct __align__(SCAN_VEC * sizeof(elem_t)) pack_t {
    elem_t v[SCAN_VEC];
};

__device__ __forceinline__ pack_t load_pack(const elem_t* p) { return *reinterpret_cast<const pack_t*>(p); }

// A pack's values as floats. bf16 pairs take one instruction each (a shift, a mask) instead of the generic
// conversion's two for the upper half.
__device__ __forceinline__ void unpack(const pack_t& p, float (&x)[SCAN_VEC]) {
    constexpr bool bf16_pairs = SCAN_DTYPE == 1 && SCAN_VEC % 2 == 0;
    if constexpr (bf16_pairs) {
        const unsigned* w = reinterpret_cast<const unsigned*>(p.v);
#pragma unroll
        for (int k = 0; k < SCAN_VEC / 2; ++k) {
            x[2 * k] = __uint_as_float(w[k] << 16);
            x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
    } else {
#pragma unroll
        for (int j = 0; j < SCAN_VEC; ++j) x[j] = to_float(p.v[j]);
    }
}

// A compile-time row count for for_rows below.
template <int N>
struct Rows {
    static constexpr int value = N;
};

// A compile-time flag for the lambdas below: Flag<true> when every step of a thread's chunk exists (s < T) and its
// channels do (d < D), so the per-step bounds checks drop out.
template <bool V>
struct Flag {
    static constexpr bool value = V;
};

__device__ __forceinline__ void store_pack(elem_t* p, const float (&x)[SCAN_VEC]) {
    pack_t out;
#pragma unroll
    for (int j = 0; j < SCAN_VEC; ++j) out.v[j] = from_float<elem_t>(x[j]);
    *reinterpret_cast<pack_t*>(p) = out;
}

#include "scan/gate_cells.cuh"
#include "scan/carries.cuh"

// Whether a pair's staged input of slot k is read for the last time, in launches of split lanes whose pair's rereads
// fit in L2 (SCAN_EVICT_FIRST, plan.py): every input of a backward, and those of a forward that a backward follows
// (SCAN_PAIRED) which that backward does not read again (linear_scan's b; minGRU's and minLSTM's backwards read all
// their inputs). Their lines are marked evict-first in L2, so that what the pair reads again (a forward's outputs h
// and the inputs its backward reads) stays there instead: the thin and narrow pairs took 0.895-0.938x the time on an
// H100. Not a forward alone, nor whole lanes or pairs whose rereads L2 cannot hold (the [8, 4096, 1536] and
// [1, 65536, 256] fp32 pairs took 1.02x as long marked).
__device__ __forceinline__ constexpr bool last_use(int k) {
    return SCAN_EVICT_FIRST && (SCAN_REVERSE || (SCAN_PAIRED && SCAN_CELL == 0 && k == 1));
}

#include "scan/staging.cuh"

// x1, x2, x3: cell inputs [B, T, D] (x3 only for minLSTM); h0: [B, D] or null.
// Forward: y1 = h [B, T, D]. Reverse (backward): dy = dL/dh [B, T, D], h = forward states [B, T, D];
//   y1, y2 (, y3) = gradients of x1, x2 (, x3) [B, T, D], those that SCAN_WANTED names (the others may be null);
//   grad_h0 (fp32 [B, D], or null) = a_0 * dh_0.
// Grid: lanes * segments blocks (block = segment * lanes + lane), all resident when segments > 1.
// seg_a, seg_b: [lanes, segments, SCAN_TILE] published words of the segments, then [lanes, groups, SCAN_TILE] of the
// groups of SCAN_GROUP segments (ScanPlan.published_words; unused with one segment); epoch in [1, 2^31), or with
// counters (not null, launches captured into a CUDA graph) the launch's slot for graph_epoch.
// Grid order matters with more than one segment: a block waits on lower-numbered ones.
// Dynamic shared memory: SCAN_STAGES * SCAN_STAGE elements.
extern "C" __global__ void __launch_bounds__(SCAN_THREADS, SCAN_MIN_BLOCKS) flashrnn_scan(
    const elem_t* __restrict__ x1, const elem_t* __restrict__ x2, const elem_t* __restrict__ x3,
    const elem_t* __restrict__ h0, const elem_t* __restrict__ dy, const elem_t* __restrict__ h,
    elem_t* __restrict__ y1, elem_t* __restrict__ y2, elem_t* __restrict__ y3, float* __restrict__ grad_h0,
    word_t* __restrict__ seg_a, word_t* __restrict__ seg_b, unsigned long long* __restrict__ counters, int T, int D,
    int d_tiles, int lanes, int segments, int epoch, int settled) {
    // A programmatic dependent launch (function.py's of backwards and paired forwards, on sm_90 and newer) may start
    // while the previous kernel on the stream ends: every block waits for it before it touches what that kernel may
    // write, then lets the next launch start its blocks, which wait the same way (in a plain launch both return at
    // once). A backward of split lanes whose cell inputs are `settled` (saved by the forward, written by no kernel
    // since) stages them before the wait, while the previous kernel ends; everything else waits. Whole lanes never
    // do: with that path compiled in, the minGRU / minLSTM backwards at [8, 4096, 1536] took 1.04-1.05x as long.
    const bool early = SCAN_REVERSE && SCAN_SPLIT != 0 && settled != 0;
    auto await_previous = [] {
#if __CUDA_ARCH__ >= 900
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    };
    if (!early) await_previous();
    // The staged chunks start on a 128-byte boundary (plan.STAGE_ALIGN) whatever the size of the static rows below:
    // 16 bytes off it, the whole-lane linear scan at [8, 4096, 1536] took 23% (fp32) and 18% (bf16) longer on the H200.
    extern __shared__ __align__(128) unsigned char s_raw[];
    elem_t* stage = reinterpret_cast<elem_t*>(s_raw);
    __shared__ __align__(16) float s_a[SCAN_THREADS_T][SCAN_ROW];
    __shared__ __align__(16) float s_b[SCAN_THREADS_T][SCAN_ROW];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int lane = blockIdx.x % lanes, seg = blockIdx.x / lanes;
    const int chunks = (T + SCAN_CHUNK - 1) / SCAN_CHUNK;
    const int first = (int)((long long)seg * chunks / segments), end = (int)((long long)(seg + 1) * chunks / segments);
    Held held;                // a chained forward's first SCAN_HELD steps per thread
    float carry[SCAN_OWNED];  // carry-in of the current chunk for the channels this thread combines in phase 2
#if SCAN_CELL != 0
    float ma[SCAN_STEPS][SCAN_VEC], mb[SCAN_STEPS][SCAN_VEC];  // this thread's maps of the current chunk
#endif

    // This thread's SCAN_VEC values of row r of s_a or s_b (16-byte accesses where SCAN_VEC allows).
    auto store_row = [&](float (*rows)[SCAN_ROW], int r, const float (&v)[SCAN_VEC]) {
        float* dst = &rows[r][tx * SCAN_VEC];
        if constexpr (SCAN_VEC % 4 == 0) {
#pragma unroll
            for (int q = 0; q < SCAN_VEC; q += 4)
                *reinterpret_cast<float4*>(dst + q) = make_float4(v[q], v[q + 1], v[q + 2], v[q + 3]);
        } else {
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) dst[j] = v[j];
        }
    };
    auto load_row = [&](float (*rows)[SCAN_ROW], int r, float (&v)[SCAN_VEC]) {
        const float* src = &rows[r][tx * SCAN_VEC];
        if constexpr (SCAN_VEC % 4 == 0) {
#pragma unroll
            for (int q = 0; q < SCAN_VEC; q += 4) {
                const float4 f = *reinterpret_cast<const float4*>(src + q);
                v[q] = f.x;
                v[q + 1] = f.y;
                v[q + 2] = f.z;
                v[q + 3] = f.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) v[j] = src[j];
        }
    };

    // f(r, a, b) with row r's (a, b) of s_a / s_b at channel c, for r = 0 .. SCAN_THREADS_T - 1 in order (f may
    // overwrite the rows it is given). The rows are read `batch` (Rows<N>) at a time ahead of f, so a chain through f
    // waits on one shared-memory load per batch, not one per row.
    auto for_rows = [&](int c, auto batch, auto&& f) {
        constexpr int N = decltype(batch)::value;
#pragma unroll
        for (int r0 = 0; r0 < SCAN_THREADS_T; r0 += N) {
            float a[N], b[N];
#pragma unroll
            for (int i = 0; i < N; ++i) {
                a[i] = s_a[r0 + i][c];
                b[i] = s_b[r0 + i][c];
            }
#pragma unroll
            for (int i = 0; i < N; ++i) f(r0 + i, a[i], b[i]);
        }
    };

    // Phase 2 and the published words split a column's channels over its rows: this thread owns channel
    // j = ty + k * SCAN_THREADS_T < SCAN_VEC of its column, `c` within the tile.
    auto owned = [&](int k, int& c) {
        const int j = ty + k * SCAN_THREADS_T;
        c = tx * SCAN_VEC + j;
        return j < SCAN_VEC;
    };

    // The maps (a, b) of this thread's step i of chunk `at` from the staged inputs (steps past T: the identity).
    auto step_maps = [&](int buf, const ChunkAt& at, int i, float (&a)[SCAN_VEC], float (&b)[SCAN_VEC], auto full) {
        const int s = at.s0 + i;
        if (!decltype(full)::value && (!at.active || s >= T)) {
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
                a[j] = 1.0f;
                b[j] = 0.0f;
            }
            return;
        }
        float x1v[SCAN_VEC], x2v[SCAN_VEC], x3v[SCAN_VEC];
        if (i < SCAN_HELD) {
            unpack(held.v[i][0], x1v);
            unpack(held.v[i][1], x2v);
            if constexpr (SCAN_CELL == 2) unpack(held.v[i][SCAN_INPUTS - 1], x3v);
        } else {
            unpack(load_pack(staged(stage, buf, 0, i, tx, ty)), x1v);
            unpack(load_pack(staged(stage, buf, 1, i, tx, ty)), x2v);
#if SCAN_CELL == 2
            unpack(load_pack(staged(stage, buf, 2, i, tx, ty)), x3v);
#endif
        }
#pragma unroll
        for (int j = 0; j < SCAN_VEC; ++j) {
            const float v1 = x1v[j], v2 = x2v[j], v3 = SCAN_CELL == 2 ? x3v[j] : 0.0f;
#if SCAN_REVERSE
            // dh_t gets a_{t+1} dh_{t+1} (staged inputs 0 and 2 are step t + 1's); nothing at t = T - 1 (s = 0)
            a[j] = s > 0 ? gate_a(v1, v3) : 0.0f;
            b[j] = v2;
#else
            gates(v1, v2, v3, a[j], b[j]);
#endif
        }
    };

    // Phase 1: this thread's steps folded into one map per channel, into s_a / s_b row ty. The linear cell's maps
    // are its inputs (phase 3 reads them from the stage again); the other cells keep theirs in ma / mb.
    auto fold_steps = [&](int buf, const ChunkAt& at, auto full) {
        float fa[SCAN_VEC], fb[SCAN_VEC];
#pragma unroll
        for (int j = 0; j < SCAN_VEC; ++j) {
            fa[j] = 1.0f;
            fb[j] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < SCAN_STEPS; ++i) {
            float a[SCAN_VEC], b[SCAN_VEC];
            step_maps(buf, at, i, a, b, full);
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
#if SCAN_CELL != 0
                ma[i][j] = a[j];
                mb[i][j] = b[j];
#endif
                fb[j] = fmaf(a[j], fb[j], b[j]);
                fa[j] = a[j] * fa[j];
            }
        }
        store_row(s_a, ty, fa);
        store_row(s_b, ty, fb);
    };

    // Phase 3: this thread rescans its steps from its row's carry-in `state` and writes the outputs. The steps' maps
    // come from the staged inputs (the linear cell, or `staged`) or from ma / mb, which phase 1 of this chunk filled.
    auto rescan = [&](int buf, const ChunkAt& at, auto full, float (&state)[SCAN_VEC], auto staged_maps) {
#pragma unroll
        for (int i = 0; i < SCAN_STEPS; ++i) {
            const int s = at.s0 + i;
            if (decltype(full)::value || s < T) {
                if constexpr (SCAN_CELL == 0 || decltype(staged_maps)::value) {
                    float ma_i[SCAN_VEC], mb_i[SCAN_VEC];
                    step_maps(buf, at, i, ma_i, mb_i, full);
#pragma unroll
                    for (int j = 0; j < SCAN_VEC; ++j) state[j] = fmaf(ma_i[j], state[j], mb_i[j]);
                } else {
#if SCAN_CELL != 0
#pragma unroll
                    for (int j = 0; j < SCAN_VEC; ++j) state[j] = fmaf(ma[i][j], state[j], mb[i][j]);
#endif
                }
                const long long off = at.base + (long long)i * at.step;
#if SCAN_REVERSE
                const int t = at.t0 - i;
                // x1 (minLSTM: and x2) at t is staged as a_t's inputs by the next step in scan order (t - 1): this
                // row's step i + 1, or row ty + 1's first. The last row's last step reads it from memory (the next
                // chunk's), and so does t = 0. The linear cell's gradients do not need it.
                float v1s[SCAN_VEC], v2s[SCAN_VEC], v3s[SCAN_VEC], hs[SCAN_VEC];
#if SCAN_CELL != 0
                if (t > 0 && (i + 1 < SCAN_STEPS || ty + 1 < SCAN_THREADS_T)) {
                    const int ni = i + 1 < SCAN_STEPS ? i + 1 : 0, nty = i + 1 < SCAN_STEPS ? ty : ty + 1;
                    unpack(load_pack(staged(stage, buf, 0, ni, tx, nty)), v1s);
                    if constexpr (SCAN_CELL == 2) unpack(load_pack(staged(stage, buf, 2, ni, tx, nty)), v2s);
                } else {
                    unpack(load_pack(x1 + off), v1s);
                    if constexpr (SCAN_CELL == 2) unpack(load_pack(x2 + off), v2s);
                }
                unpack(load_pack(staged(stage, buf, SCAN_SLOT_X, i, tx, ty)), SCAN_CELL == 1 ? v2s : v3s);
#endif
                const bool has_prev = SCAN_READS_H && (t > 0 || h0 != nullptr);
                if (SCAN_READS_H && t > 0) unpack(load_pack(staged(stage, buf, SCAN_SLOT_H, i, tx, ty)), hs);
                else if (SCAN_READS_H && h0 != nullptr) unpack(load_pack(h0 + (long long)at.batch * D + at.d), hs);
                float g1[SCAN_VEC], g2[SCAN_VEC];
#if SCAN_CELL == 2
                float g3[SCAN_VEC];
#endif
#pragma unroll
                for (int j = 0; j < SCAN_VEC; ++j) {
                    const float dh = state[j];
                    const float grad_a = has_prev ? dh * hs[j] : 0.0f;
#if SCAN_CELL == 0
                    g1[j] = grad_a;
                    g2[j] = dh;
#else
                    const float v1 = v1s[j], v2 = v2s[j];
                    float a_t;
#if SCAN_CELL == 1
                    float z;  // z (1 - z) as sigmoid(k) sigmoid(-k): no cancellation near z = 1
                    sigmoid_pair(v1, z, a_t);
                    g1[j] = (dh * candidate(v2) - grad_a) * z * a_t;
                    g2[j] = dh * z * candidate_grad(v2);
#else
                    // a = f / (f + i), b = i / (f + i) g: da/df = -db/df = i / (f + i)^2, da/di = -db/di =
                    // -f / (f + i)^2, so with f' = f sigmoid(-x1): dL/dx1 = a bi (grad_a - dh g) sigmoid(-x1),
                    // dL/dx2 the negation with sigmoid(-x2).
                    const float v3 = v3s[j];
                    float bi;
                    lstm_gates(v1, v2, a_t, bi);
                    const float common = a_t * bi * (grad_a - dh * candidate(v3));
                    g1[j] = common * sigmoid_of_neg(v1);
                    g2[j] = -common * sigmoid_of_neg(v2);
                    g3[j] = dh * bi * candidate_grad(v3);
#endif
                    if (t == 0 && grad_h0 != nullptr) grad_h0[(long long)at.batch * D + at.d + j] = a_t * dh;
#endif
                }
                if constexpr ((SCAN_WANTED & 1) != 0) store_pack(y1 + off, g1);
                if constexpr ((SCAN_WANTED & 2) != 0) store_pack(y2 + off, g2);
#if SCAN_CELL == 2
                if constexpr ((SCAN_WANTED & 4) != 0) store_pack(y3 + off, g3);
#endif
#else
                store_pack(y1 + off, state);
#endif
            }
        }
#if SCAN_REVERSE && SCAN_CELL == 0
        // grad_h0 = a_0 dh_0. t = 0 is the scan's last step (s = T - 1): after it, `state` holds dh_0.
        if (grad_h0 != nullptr && at.s0 <= T - 1 && T - 1 < at.s0 + SCAN_STEPS) {
            float a0[SCAN_VEC];
            unpack(load_pack(x1 + (long long)at.batch * T * D + at.d), a0);
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) grad_h0[(long long)at.batch * D + at.d + j] = a0[j] * state[j];
        }
#endif
    };

    // One chunk with outputs: phase 1; phase 2, each row's carry-in from the chunk's (`carry`, which then holds the
    // chunk's final state), written over s_a by the threads owning channels tx * SCAN_VEC + j,
    // j = ty + k * SCAN_THREADS_T < SCAN_VEC; phase 3.
    auto scan_chunk = [&](int buf, const ChunkAt& at) {
        const bool full = at.complete(T);
        if (full) fold_steps(buf, at, Flag<true>());
        else fold_steps(buf, at, Flag<false>());
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SCAN_OWNED; ++k) {
            int c;
            if (owned(k, c) && at.active) {
                float cr = carry[k];
                bool zero = cr == 0.0f;
                for_rows(c, Rows<SCAN_PHASE2_BATCH>(), [&](int r, float a, float b) {  // row r's carry-in replaces its a
                    s_a[r][c] = cr;
                    cr = fmaf(zero ? 0.0f : a, cr, b);
                    zero = stays_zero(zero, a, b);
                });
                carry[k] = cr;
            }
        }
        __syncthreads();
        float state[SCAN_VEC];
        load_row(s_a, ty, state);
        if (full) rescan(buf, at, Flag<true>(), state, Flag<false>());
        else if (at.active) rescan(buf, at, Flag<false>(), state, Flag<false>());
        __syncthreads();  // s_a is read before the next chunk's phase 1 writes it
    };

    // One chunk of pass A: phase 1, then the owners fold the rows' maps into the segment's map so far. With `record`,
    // each row's map from the segment's start to the row (the owners' map so far, before the row's) goes into
    // (pre_a, pre_b) of the row's threads: in a segment that stays staged, pass B then needs neither phase 1 nor
    // phase 2, since a row's carry-in is pre_a * (the segment's carry-in) + pre_b.
    float acc_a[SCAN_OWNED], acc_b[SCAN_OWNED];  // per owned channel
    auto fold_chunk = [&](int buf, const ChunkAt& at, auto record, float (&pre_a)[SCAN_VEC],
                          float (&pre_b)[SCAN_VEC]) {
        if (at.complete(T)) fold_steps(buf, at, Flag<true>());
        else fold_steps(buf, at, Flag<false>());
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SCAN_OWNED; ++k) {
            int c;
            if (owned(k, c)) {
                bool zero = acc_b[k] == 0.0f;
                for_rows(c, Rows<SCAN_ROW_BATCH>(), [&](int r, float a, float b) {
                    if constexpr (decltype(record)::value) {
                        s_a[r][c] = acc_a[k];
                        s_b[r][c] = acc_b[k];
                    }
                    acc_b[k] = fmaf(zero ? 0.0f : a, acc_b[k], b);
                    acc_a[k] = a * acc_a[k];
                    zero = stays_zero(zero, a, b);
                });
            }
        }
        __syncthreads();
        if constexpr (decltype(record)::value) {  // this thread's own piece of row ty, which only it writes next
            load_row(s_a, ty, pre_a);
            load_row(s_b, ty, pre_b);
        }
    };

    // Stage the first SCAN_STAGES - 1 chunks of [first, end) (`all`: see stage_chunk); then walk them with `body`,
    // staging ahead. An early backward first stages the cell inputs of the first SCAN_STAGES chunks (the last of them
    // is the first walk's first `advance`), then waits for the previous kernel and stages the rest of them.
    bool inputs_staged = early;  // until that first advance: the chunk it stages has its inputs staged
    auto stage_part = [&](int buf, const ChunkAt& at, bool all) {
        if (inputs_staged) stage_chunk<StagePart::rest>(stage, buf, at, T, D, x1, x2, x3, dy, h, all, held);
        else stage_chunk<StagePart::all>(stage, buf, at, T, D, x1, x2, x3, dy, h, all, held);
    };
    auto prologue = [&](bool all) {
        if (early) {
#pragma unroll
            for (int c = 0; c < SCAN_STAGES; ++c)
                if (first + c < end)
                    stage_chunk<StagePart::inputs>(stage, c, ChunkAt(first + c, lane, d_tiles, T, D), T, D, x1, x2, x3,
                                                   dy, h, all, held);
            await_previous();  // the inputs' copies join the first chunk's group: it waits for more, never less
        }
#pragma unroll
        for (int c = 0; c < SCAN_STAGES - 1; ++c) {
            if (first + c < end) stage_part(c, ChunkAt(first + c, lane, d_tiles, T, D), all);
            cp_async_commit();
        }
    };
    // Chunk c's turn of a walk: stage chunk c + SCAN_STAGES - 1 ahead, wait for chunk c; its buffer.
    auto advance = [&](int c, bool all) {
        const int ahead = c + SCAN_STAGES - 1;
        if (ahead < end) stage_part((ahead - first) % SCAN_STAGES, ChunkAt(ahead, lane, d_tiles, T, D), all);
        inputs_staged = false;  // a later walk (pass B of a segment staged again) stages everything
        cp_async_commit();
        cp_async_wait_group<SCAN_STAGES - 1>();  // this thread's copies of chunk c have landed
        return (c - first) % SCAN_STAGES;
    };
    auto walk = [&](auto&& body, bool all) {
        for (int c = first; c < end; ++c) body(advance(c, all), ChunkAt(c, lane, d_tiles, T, D));
    };

    const ChunkAt lane_at(first, lane, d_tiles, T, D);  // for the lane's batch row and this thread's channels
    // the lane's initial state in this thread's owned channels: h0 (forward) or 0
    auto initial = [&](int k) {
        const int j = ty + k * SCAN_THREADS_T;
        if (!SCAN_REVERSE && h0 != nullptr && j < SCAN_VEC && lane_at.active)
            return to_float(h0[(long long)lane_at.batch * D + lane_at.d + j]);
        return 0.0f;
    };
    if (!SCAN_SPLIT || segments == 1) {  // a plan of whole lanes (SCAN_SPLIT 0) is launched with one segment
#pragma unroll
        for (int k = 0; k < SCAN_OWNED; ++k) carry[k] = initial(k);
        prologue(true);
        walk(scan_chunk, true);
    }
#if SCAN_SPLIT
    else {
        const long long word0 = (long long)lane * segments * SCAN_TILE;  // published words of the lane's segment 0
        const long long mine = word0 + (long long)seg * SCAN_TILE;       // this segment's words
        // pass A leaves all its chunks staged where the launch's longest segment fits the stages: every segment
        // takes the same path (in bf16, launches mixing staged segments of SCAN_STAGES chunks and restaged ones of one
        // more took 1.7-1.9x as long on the H200 as all restaged)
        const bool kept = SCAN_SPLIT == 2 || (chunks + segments - 1) / segments <= SCAN_STAGES;
        // pass A: the segment's map (segment 0 publishes its final state from it at once, so that the look-backs,
        // which all end at segment 0 or at a final state published after one, need not wait for its outputs)
#pragma unroll
        for (int k = 0; k < SCAN_OWNED; ++k) {
            acc_a[k] = 1.0f;
            acc_b[k] = 0.0f;
        }
        float pre_a[SCAN_STAGES][SCAN_VEC], pre_b[SCAN_STAGES][SCAN_VEC];  // per staged chunk: see fold_chunk
        prologue(kept);  // a segment staged again for pass B stages only the maps' inputs in pass A
        // a captured launch's epoch: its counter's load returns while the copies above are in flight
        const unsigned launch_epoch = counters != nullptr ? graph_epoch(counters, epoch) : static_cast<unsigned>(epoch);
        if (kept) {
#pragma unroll
            for (int q = 0; q < SCAN_STAGES; ++q)  // unrolled, so that pre_a / pre_b stay in registers
                if (first + q < end)
                    fold_chunk(advance(first + q, true), ChunkAt(first + q, lane, d_tiles, T, D), Flag<true>(), pre_a[q],
                               pre_b[q]);
            __syncthreads();  // the rows' reads of their maps end before the look-back writes s_a / s_b
        } else {
            walk([&](int buf, const ChunkAt& at) { fold_chunk(buf, at, Flag<false>(), pre_a[0], pre_b[0]); }, false);
        }
        const unsigned map_tag = 2u * launch_epoch, final_tag = map_tag + 1u;
        if (seg > 0) {
#pragma unroll
            for (int k = 0; k < SCAN_OWNED; ++k) {
                int c;
                if (owned(k, c)) {
                    publish(seg_a + mine + c, acc_a[k], map_tag);
                    publish(seg_b + mine + c, acc_b[k], map_tag);
                }
            }
        }
        if (!kept) prologue(true);  // pass B's first chunks load during the look-back

        // the carry-in la h + lb: segment 0's initial state; elsewhere the look-back, round by round, each row
        // taking one predecessor's words (a segment's or a group's); the owners compose the rows' maps, nearest first,
        // until la is 0 for all of them: a final state was reached (or the predecessors' a products reached 0, which
        // ends the dependence just as well)
        float la[SCAN_OWNED], lb[SCAN_OWNED];
#pragma unroll
        for (int k = 0; k < SCAN_OWNED; ++k) {
            la[k] = 1.0f;
            lb[k] = seg == 0 ? initial(k) : 0.0f;
        }
        // one round: this row reads the words from index w on (w < 0: the identity); whether any owned channel is still
        // open after it
        auto look_back_round = [&](long long w) -> bool {
            // the row's threads read the words at w together: thread tx channels 2 (tx + SCAN_THREADS_D i)
            // and the next, one 16-byte load per array each, so a warp's loads cover whole sectors (a thread's own
            // SCAN_VEC channels would take one 8-byte load each, four of them per sector); SCAN_VEC odd: its own
            constexpr int WIDTH = SCAN_VEC % 2 == 0 ? 2 : 1, LOADS = SCAN_VEC / WIDTH;
            auto channel = [&](int i, int e) {
                return WIDTH == 2 ? 2 * (tx + SCAN_THREADS_D * i) + e : tx * SCAN_VEC + i;
            };
            float ra[SCAN_VEC], rb[SCAN_VEC];  // element WIDTH i + e: channel(i, e)
            if (w >= 0) {
                // every unpublished load of the row is reissued in the same round, so the wait ends about one L2
                // round trip after the last of them lands (reloading one at a time would chain them)
                word_t wa[SCAN_VEC], wb[SCAN_VEC];
                unsigned stale = (1u << LOADS) - 1u;
                do {
#pragma unroll
                    for (int i = 0; i < LOADS; ++i) {
                        if (stale & (1u << i)) {
                            const long long at = w + channel(i, 0);
                            if constexpr (WIDTH == 2) {
                                const ulonglong2 vb = load_words_relaxed(seg_b + at);
                                const ulonglong2 va = load_words_relaxed(seg_a + at);
                                wb[2 * i] = vb.x;
                                wb[2 * i + 1] = vb.y;
                                wa[2 * i] = va.x;
                                wa[2 * i + 1] = va.y;
                            } else {
                                wb[i] = load_word_relaxed(seg_b + at);
                                wa[i] = load_word_relaxed(seg_a + at);
                            }
                        }
                    }
#pragma unroll
                    for (int i = 0; i < LOADS; ++i) {
                        bool ready = true;
#pragma unroll
                        for (int e = 0; e < WIDTH; ++e)
                            ready &= published(wa[WIDTH * i + e], wb[WIDTH * i + e], map_tag);
                        if (ready) stale &= ~(1u << i);
                    }
                } while (stale != 0);
#pragma unroll
                for (int j = 0; j < SCAN_VEC; ++j) published_map(wa[j], wb[j], map_tag, ra[j], rb[j]);
            } else {  // past the predecessors this round covers (segment 0 is always final): the identity
#pragma unroll
                for (int j = 0; j < SCAN_VEC; ++j) {
                    ra[j] = 1.0f;
                    rb[j] = 0.0f;
                }
            }
#pragma unroll
            for (int i = 0; i < LOADS; ++i) {
                if constexpr (WIDTH == 2) {  // a channel pair as one 8-byte store
                    *reinterpret_cast<float2*>(&s_a[ty][channel(i, 0)]) = make_float2(ra[2 * i], ra[2 * i + 1]);
                    *reinterpret_cast<float2*>(&s_b[ty][channel(i, 0)]) = make_float2(rb[2 * i], rb[2 * i + 1]);
                } else {
                    s_a[ty][channel(i, 0)] = ra[i];
                    s_b[ty][channel(i, 0)] = rb[i];
                }
            }
            __syncthreads();
            int open = 0;
#pragma unroll
            for (int k = 0; k < SCAN_OWNED; ++k) {
                int c;
                if (owned(k, c)) {
                    bool done = false;  // a final state (a = 0) was composed: the rows past it add nothing
                    for_rows(c, Rows<SCAN_ROW_BATCH>(), [&](int, float a, float b) {
                        lb[k] = fmaf(done || b == 0.0f ? 0.0f : la[k], b, lb[k]);
                        la[k] *= a;
                        done = done || a == 0.0f;
                    });
                    if (done) la[k] = 0.0f;  // so also where an overflowed product met the a = 0
                    open |= la[k] != 0.0f;
                }
            }
            // the barrier also ends the rows' reads before s_a / s_b are written again
            return __syncthreads_or(open);
        };
        // single maps down to segment `singles_end` (a group's last segment: its group's first; else the first of the
        // group before its own), then whole groups, nearest first; the rounds end where one leaves no channel open,
        // or at the round that reached segment or group 0 whatever la holds (a NaN input keeps it nonzero)
        const int group = seg / SCAN_GROUP, groups = (segments + SCAN_GROUP - 1) / SCAN_GROUP;
        const bool group_last = seg % SCAN_GROUP == SCAN_GROUP - 1;
        const int singles_end = (group_last || group == 0 ? group : group - 1) * SCAN_GROUP;
        bool any_open = true;
        for (int base = seg - 1; any_open && base >= singles_end; base -= SCAN_THREADS_T)
            any_open = look_back_round(base - ty >= singles_end ? word0 + (long long)(base - ty) * SCAN_TILE : -1);
        const long long group0 = ((long long)lanes * segments + (long long)lane * groups) * SCAN_TILE;
        const long long group_words = group0 + (long long)group * SCAN_TILE;  // this segment's group's words
        if (group_last) {  // the group's map: this segment's after the group's earlier ones
#pragma unroll
            for (int k = 0; k < SCAN_OWNED; ++k) {
                int c;
                if (owned(k, c)) {
                    publish(seg_a + group_words + c, la[k] == 0.0f ? 0.0f : acc_a[k] * la[k], map_tag);
                    publish(seg_b + group_words + c, apply_map(acc_a[k], lb[k], acc_b[k]), map_tag);
                }
            }
        }
        for (int base = singles_end / SCAN_GROUP - 1; any_open && base >= 0; base -= SCAN_THREADS_T)
            any_open = look_back_round(base - ty >= 0 ? group0 + (long long)(base - ty) * SCAN_TILE : -1);
#pragma unroll
        for (int k = 0; k < SCAN_OWNED; ++k) {
            int c;
            carry[k] = lb[k];
            if (owned(k, c)) {
                const float final_state = apply_map(acc_a[k], lb[k], acc_b[k]);
                if (!SCAN_DETERMINISTIC || seg == 0) publish(seg_b + mine + c, final_state, final_tag);
                // the state at the group's end, which ends a look-back at the group as the segment's own word does
                if (!SCAN_DETERMINISTIC && group_last)
                    publish(seg_b + group_words + c, final_state, final_tag);
            }
        }
        // pass B
        if (kept) {  // every row's carry-in straight from the segment's, lb, which the owners pass on in s_a row 0
#pragma unroll
            for (int k = 0; k < SCAN_OWNED; ++k) {
                int c;
                if (owned(k, c)) s_a[0][c] = lb[k];  // the barrier before the look-back, or its last, ended all reads
            }
            __syncthreads();
            float seg_in[SCAN_VEC];
            load_row(s_a, 0, seg_in);
#pragma unroll
            for (int q = 0; q < SCAN_STAGES; ++q) {
                if (first + q < end) {
                    const ChunkAt at(first + q, lane, d_tiles, T, D);
                    float state[SCAN_VEC];
#pragma unroll
                    for (int j = 0; j < SCAN_VEC; ++j) state[j] = apply_map(pre_a[q][j], seg_in[j], pre_b[q][j]);
                    // ma / mb hold the last chunk's maps: the only one where a segment is one chunk
                    if (at.complete(T)) rescan(q, at, Flag<true>(), state, Flag<(SCAN_STAGES > 1)>());
                    else if (at.active) rescan(q, at, Flag<false>(), state, Flag<(SCAN_STAGES > 1)>());
                }
            }
        } else {
            walk(scan_chunk, true);
        }
        if (counters != nullptr) count_launch(counters);
    }
#endif
    cp_async_wait_group<0>();
}
