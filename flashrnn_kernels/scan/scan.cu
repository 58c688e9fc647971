// Single-pass chunked linear scan h_t = a_t * h_{t-1} + b_t over the time axis of [B, T, D] tensors, with the
// gates of minGRU / minLSTM computed on the fly from their projected inputs, and the backward as the same scan
// run in reverse (dh_t = dy_t + a_{t+1} * dh_{t+1}) followed by the gradient epilogue.
//
// Work split (all sizes below come from the ScanPlan as #defines; B, T, D are runtime arguments):
//   block   = SCAN_THREADS_D x SCAN_THREADS_T threads; threadIdx.x runs along D, each thread owning SCAN_VEC
//             consecutive channels (one 16-byte access for 4 fp32 / 8 bf16), threadIdx.y along time.
//   chunk   = SCAN_THREADS_T * SCAN_STEPS consecutive steps (in scan order) of one lane; each thread keeps its
//             SCAN_STEPS steps in registers, so every input is read from memory once.
//   lane    = (batch row, tile of SCAN_THREADS_D * SCAN_VEC channels); a sequence of chunks forms a chain.
//   grid    = persistent: SCAN_MIN_BLOCKS blocks per SM (or fewer when there are fewer chunks); each block draws
//             chunk tickets in order and copies the inputs of its next SCAN_STAGES - 1 chunks into a shared-memory
//             ring (cp.async) while it finishes the current one, so loads stay in flight through the look-back
//             and the stores.
// Carries: inside a block, rows combine their affine maps (A, B) through shared memory; across blocks, chunks of
// one lane chain by decoupled look-back on one status word per chunk (1: aggregate ready, 2: inclusive state
// ready), read 32 chunks at a time by one warp; the maps between a chunk and the nearest inclusive state are
// composed by one warp per channel (a run per lane, then a shuffle tree).
//
// Cells (SCAN_CELL): 0 linear (x1 = a, x2 = b); 1 minGRU (x1 = k, x2 = h_pre): z = sigmoid(k), a = 1 - z,
// b = z * g(h_pre); 2 minLSTM (x1 = f_pre, x2 = i_pre, x3 = h_pre): f = sigmoid(f_pre), i = sigmoid(i_pre),
// a = f / (f + i), b = i / (f + i) * g(h_pre). g(x) = x + 1/2 for x >= 0, sigmoid(x) otherwise.
#include "cells/ops.cuh"
#include "runtime/cp_async.cuh"

#if !defined(SCAN_THREADS_D) || !defined(SCAN_THREADS_T) || !defined(SCAN_VEC) || !defined(SCAN_STEPS) || \
    !defined(SCAN_MIN_BLOCKS) || !defined(SCAN_CELL) || !defined(SCAN_REVERSE) || !defined(SCAN_DTYPE) || \
    !defined(SCAN_FAST) || !defined(SCAN_STAGES)
#error "scan.cu needs every ScanPlan field: SCAN_THREADS_D/_T, SCAN_VEC, SCAN_STEPS, SCAN_STAGES, SCAN_MIN_BLOCKS, ..."
#endif

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
#define SCAN_PER_THREAD ((SCAN_VEC + SCAN_THREADS_T - 1) / SCAN_THREADS_T)  // channels per thread in phase 2

static_assert(SCAN_THREADS % 32 == 0, "a block is whole warps");
static_assert(SCAN_VEC * sizeof(elem_t) <= 16, "one access is at most 16 bytes");
static_assert((SCAN_VEC & (SCAN_VEC - 1)) == 0, "SCAN_VEC is a power of two");
static_assert(SCAN_STAGES >= 2, "the input ring has at least two stages");
static_assert(SCAN_CELL >= 0 && SCAN_CELL <= 2, "SCAN_CELL is 0 (linear), 1 (minGRU) or 2 (minLSTM)");

struct __align__(SCAN_VEC * sizeof(elem_t)) pack_t {
    elem_t v[SCAN_VEC];
};

__device__ __forceinline__ pack_t load_pack(const elem_t* p) { return *reinterpret_cast<const pack_t*>(p); }

__device__ __forceinline__ void store_pack(elem_t* p, const float (&x)[SCAN_VEC]) {
    pack_t out;
#pragma unroll
    for (int j = 0; j < SCAN_VEC; ++j) out.v[j] = from_float<elem_t>(x[j]);
    *reinterpret_cast<pack_t*>(p) = out;
}

// sigma(x) and sigma(-x) from one exponential and one reciprocal, both accurate in relative terms (no 1 - p
// cancellation). SCAN_FAST (bf16/fp16 storage, rounding 2^-8 / 2^-11) uses the hardware ex2 / rcp approximations.
__device__ __forceinline__ float fast_or_exact_exp(float x) {
#if SCAN_FAST
    return __expf(x);
#else
    return expf(x);
#endif
}

__device__ __forceinline__ float fast_or_exact_rcp(float x) {
#if SCAN_FAST
    return __fdividef(1.0f, x);
#else
    return __frcp_rn(x);
#endif
}

__device__ __forceinline__ void sigmoid_pair(float x, float& pos, float& neg) {
    const float e = fast_or_exact_exp(-fabsf(x));  // in (0, 1]
    const float big = fast_or_exact_rcp(1.0f + e), small = e * big;
    pos = x >= 0.0f ? big : small;
    neg = x >= 0.0f ? small : big;
}

__device__ __forceinline__ float sigmoid_of_neg(float x) {
    float pos, neg;
    sigmoid_pair(x, pos, neg);
    return neg;
}

// g(x) = x + 1/2 for x >= 0, sigmoid(x) otherwise, and its derivative (1, or sigmoid(x) sigmoid(-x)).
__device__ __forceinline__ float candidate(float x) {
    const float e = fast_or_exact_exp(fminf(x, 0.0f));
    return x >= 0.0f ? x + 0.5f : e * fast_or_exact_rcp(1.0f + e);
}

__device__ __forceinline__ float candidate_grad(float x) {
    const float e = fast_or_exact_exp(fminf(x, 0.0f)), r = fast_or_exact_rcp(1.0f + e);
    return x >= 0.0f ? 1.0f : e * r * r;
}

// minLSTM's normalised gates a = f / (f + i), i / (f + i) with f = sigmoid(x1), i = sigmoid(x2), as
// u2 / (u1 + u2) and u1 / (u1 + u2) with u = (1 + e^-x) e^-m, m = max(0, -x1, -x2): every term is positive and
// at most 2, so neither overflow nor 0 / 0 when both gates underflow.
__device__ __forceinline__ void lstm_gates(float x1, float x2, float& a, float& bi) {
    const float m = fmaxf(0.0f, -fminf(x1, x2));
    const float em = fast_or_exact_exp(-m);
    const float u1 = em + fast_or_exact_exp(-x1 - m), u2 = em + fast_or_exact_exp(-x2 - m);
    const float r = fast_or_exact_rcp(u1 + u2);
    a = u2 * r;
    bi = u1 * r;
}

// (a, b) of one element from the cell's inputs (x3: minLSTM's candidate input).
__device__ __forceinline__ void gates(float x1, float x2, float x3, float& a, float& b) {
#if SCAN_CELL == 0
    a = x1;
    b = x2;
#elif SCAN_CELL == 1
    float z;
    sigmoid_pair(x1, z, a);
    b = z * candidate(x2);
#else
    float bi;
    lstm_gates(x1, x2, a, bi);
    b = bi * candidate(x3);
#endif
}

// a alone (the reverse pass multiplies dh_{t+1} by a_{t+1}).
__device__ __forceinline__ float gate_a(float x1, float x2) {
#if SCAN_CELL == 0
    return x1;
#elif SCAN_CELL == 1
    float z, a;
    sigmoid_pair(x1, z, a);
    return a;
#else
    float a, bi;
    lstm_gates(x1, x2, a, bi);
    return a;
#endif
}

// Workspace. flags[0] is the ticket counter and flags[1] counts finished blocks (both zero on entry: the last block
// to finish puts them back to 0 for the next launch on the stream); flags[2 + ticket] is the status word of one
// chunk, holding epoch * 4 + state (1: aggregate published, 2: inclusive state published). A word from an earlier
// launch carries an older epoch and reads as "not ready", so the words are zeroed only when the host's epoch
// counter wraps. agg_a, agg_b, incl: SCAN_TILE fp32 values per ticket (the chunk's map h -> A h + B, and its
// last state).
__device__ __forceinline__ int load_status(const int* p, int epoch) {
    const int word = *reinterpret_cast<const volatile int*>(p);
    return (word >> 2) == epoch ? (word & 3) : 0;
}

__device__ __forceinline__ void store_status(int* p, int epoch, int state) {
    *reinterpret_cast<volatile int*>(p) = epoch * 4 + state;
}

// Where one thread's chunk lives: step i sits at `base + i * step` elements (reverse: walking back in time).
struct Chunk {
    int chunk, lane, batch, d, s0, t0;
    bool active;
    long long base;
};

__device__ __forceinline__ Chunk locate(int ticket, int lanes, int d_tiles, int T, int D) {
    Chunk c;
    c.chunk = ticket / lanes;
    c.lane = ticket - c.chunk * lanes;
    c.batch = c.lane / d_tiles;
    c.d = (c.lane - c.batch * d_tiles) * SCAN_TILE + threadIdx.x * SCAN_VEC;
    c.active = c.d < D;
    c.s0 = c.chunk * SCAN_CHUNK + threadIdx.y * SCAN_STEPS;  // first step of this thread, in scan order
    c.t0 = SCAN_REVERSE ? T - 1 - c.s0 : c.s0;
    c.base = ((long long)c.batch * T + c.t0) * D + c.d;
    return c;
}

#define STEP (SCAN_REVERSE ? -D : D)

// One stage of the input ring: the chunk's operands as loaded, [input][row step][channel] in storage precision
// (input 0: a / the first gate input, or in reverse a's input one step later; 1: b / the second input, or dy;
// 2: minLSTM's third). A thread copies and later reads only its own SCAN_STEPS x SCAN_VEC elements of each input,
// so a cp.async wait (no block barrier) makes them visible.
#define STAGE_ELEMS (SCAN_INPUTS * SCAN_CHUNK * SCAN_TILE)
#define AT(input, i) (((input) * SCAN_CHUNK + threadIdx.y * SCAN_STEPS + (i)) * SCAN_TILE + threadIdx.x * SCAN_VEC)

__device__ __forceinline__ void stage_chunk(elem_t* stage, const Chunk& c, const elem_t* __restrict__ x1,
                                            const elem_t* __restrict__ x2, const elem_t* __restrict__ x3,
                                            const elem_t* __restrict__ dy, int T, int D) {
    constexpr int BYTES = SCAN_VEC * sizeof(elem_t);
#pragma unroll
    for (int i = 0; i < SCAN_STEPS; ++i) {
        const int s = c.s0 + i;
        const long long at = c.base + (long long)i * STEP;
        if (c.active && s < T) {
#if SCAN_REVERSE
            cp_async<BYTES>(stage + AT(1, i), dy + at);
            if (s > 0) {  // dh_t gets a_{t+1} dh_{t+1}
                cp_async<BYTES>(stage + AT(0, i), x1 + at + D);
#if SCAN_CELL == 2
                cp_async<BYTES>(stage + AT(2, i), x2 + at + D);
#endif
            }
#else
            cp_async<BYTES>(stage + AT(0, i), x1 + at);
            cp_async<BYTES>(stage + AT(1, i), x2 + at);
#if SCAN_CELL == 2
            cp_async<BYTES>(stage + AT(2, i), x3 + at);
#endif
#endif
        }
    }
}

// Maps (a, b) of every step of the thread's chunk from its staged operands; steps past T and padding channels
// get the identity map.
__device__ __forceinline__ void make_maps(const elem_t* stage, const Chunk& c, int T,
                                          float (&ma)[SCAN_STEPS][SCAN_VEC], float (&mb)[SCAN_STEPS][SCAN_VEC]) {
#pragma unroll
    for (int i = 0; i < SCAN_STEPS; ++i) {
        const int s = c.s0 + i;
        const bool in = c.active && s < T;
        pack_t p1, p2;
#if SCAN_CELL == 2
        pack_t p3;
#endif
        if (in) {
            p2 = load_pack(stage + AT(1, i));
            if (!SCAN_REVERSE || s > 0) {
                p1 = load_pack(stage + AT(0, i));
#if SCAN_CELL == 2
                p3 = load_pack(stage + AT(2, i));
#endif
            }
        }
#pragma unroll
        for (int j = 0; j < SCAN_VEC; ++j) {
            float a = 1.0f, b = 0.0f;
            if (in) {
#if SCAN_REVERSE
                a = 0.0f;
#if SCAN_CELL == 2
                if (s > 0) a = gate_a(to_float(p1.v[j]), to_float(p3.v[j]));
#else
                if (s > 0) a = gate_a(to_float(p1.v[j]), 0.0f);
#endif
                b = to_float(p2.v[j]);
#elif SCAN_CELL == 2
                gates(to_float(p1.v[j]), to_float(p2.v[j]), to_float(p3.v[j]), a, b);
#else
                gates(to_float(p1.v[j]), to_float(p2.v[j]), 0.0f, a, b);
#endif
            }
            ma[i][j] = a;
            mb[i][j] = b;
        }
    }
}

// x1, x2, x3: cell inputs [B, T, D] (x3 only for minLSTM); h0: [B, D] or null.
// Forward: y1 = h [B, T, D]. Reverse (backward): dy = dL/dh [B, T, D], h = forward states [B, T, D];
//   y1, y2 (, y3) = gradients of x1, x2 (, x3) [B, T, D]; grad_h0 (fp32 [B, D], or null) = a_0 * dh_0.
// Tickets: lanes * chunks, chunk-major (ticket = chunk * lanes + lane), drawn in order by persistent blocks. A
// block holds its current ticket and the SCAN_STAGES - 1 it is loading ahead, and only waits on the chunk before
// its current one, whose ticket is lower; so the lowest unfinished ticket always belongs to a block running it.
extern "C" __global__ void __launch_bounds__(SCAN_THREADS, SCAN_MIN_BLOCKS) flashrnn_scan(
    const elem_t* __restrict__ x1, const elem_t* __restrict__ x2, const elem_t* __restrict__ x3,
    const elem_t* __restrict__ h0, const elem_t* __restrict__ dy, const elem_t* __restrict__ h,
    elem_t* __restrict__ y1, elem_t* __restrict__ y2, elem_t* __restrict__ y3, float* __restrict__ grad_h0,
    float* __restrict__ agg_a, float* __restrict__ agg_b, float* __restrict__ incl, int* __restrict__ flags,
    int T, int D, int d_tiles, int lanes, int chunks, int epoch) {
    extern __shared__ __align__(16) unsigned char ring_bytes[];
    elem_t* ring = reinterpret_cast<elem_t*>(ring_bytes);
    __shared__ float s_a[SCAN_THREADS_T][SCAN_TILE];
    __shared__ float s_b[SCAN_THREADS_T][SCAN_TILE];
    __shared__ float s_carry[SCAN_TILE];
    __shared__ int s_tickets[SCAN_STAGES], s_from;

    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * SCAN_THREADS_D + tx;
    const int tickets = lanes * chunks;
    const bool chained = chunks > 1;
    int* const status = flags + 2;

    if (tid == 0)
        for (int k = 0; k < SCAN_STAGES - 1; ++k) s_tickets[k] = atomicAdd(flags, 1);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < SCAN_STAGES - 1; ++k) {
        if (s_tickets[k] < tickets)
            stage_chunk(ring + k * STAGE_ELEMS, locate(s_tickets[k], lanes, d_tiles, T, D), x1, x2, x3, dy, T, D);
        cp_async_commit();
    }

    for (int it = 0;; ++it) {
        const int ticket = s_tickets[it % SCAN_STAGES];
        if (ticket >= tickets) break;
        const Chunk c = locate(ticket, lanes, d_tiles, T, D);
        const int ahead = (it + SCAN_STAGES - 1) % SCAN_STAGES;
        if (tid == 0) s_tickets[ahead] = atomicAdd(flags, 1);
        __syncthreads();  // the new ticket is visible; the previous chunk is done with s_a and s_b
        const int next = s_tickets[ahead];
        if (next < tickets)
            stage_chunk(ring + ahead * STAGE_ELEMS, locate(next, lanes, d_tiles, T, D), x1, x2, x3, dy, T, D);
        cp_async_commit();
        cp_async_wait_group<SCAN_STAGES - 1>();  // this chunk's own copies have landed

        // Phase 1: maps from the staged inputs (the gates are evaluated once), folded into one map per row.
        float ma[SCAN_STEPS][SCAN_VEC], mb[SCAN_STEPS][SCAN_VEC];
        make_maps(ring + (it % SCAN_STAGES) * STAGE_ELEMS, c, T, ma, mb);
        {
            float fa[SCAN_VEC], fb[SCAN_VEC];
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
                fa[j] = ma[0][j];
                fb[j] = mb[0][j];
            }
#pragma unroll
            for (int i = 1; i < SCAN_STEPS; ++i)
#pragma unroll
                for (int j = 0; j < SCAN_VEC; ++j) {
                    fb[j] = fmaf(ma[i][j], fb[j], mb[i][j]);
                    fa[j] = ma[i][j] * fa[j];
                }
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
                s_a[ty][tx * SCAN_VEC + j] = fa[j];
                s_b[ty][tx * SCAN_VEC + j] = fb[j];
            }
        }
        __syncthreads();

        // Phase 2: the chunk's map per channel, published (chunk 0 publishes its inclusive state at once); then the
        // carry-in from the chunks before it, and each row's carry-in written over s_a. Channel ch of the tile is
        // handled by thread (ch / SCAN_VEC, j) with j = ch % SCAN_VEC + k * SCAN_THREADS_T.
        const long long slot0 = (long long)ticket * SCAN_TILE;
        float chunk_a[SCAN_PER_THREAD], chunk_b[SCAN_PER_THREAD], carry[SCAN_PER_THREAD];
#pragma unroll
        for (int k = 0; k < SCAN_PER_THREAD; ++k) {
            const int j = ty + k * SCAN_THREADS_T, ch = tx * SCAN_VEC + j;
            if (j >= SCAN_VEC) break;
            float ca = 1.0f, cb = 0.0f;
            for (int r = 0; r < SCAN_THREADS_T; ++r) {
                const float a = s_a[r][ch];
                cb = fmaf(a, cb, s_b[r][ch]);
                ca = a * ca;
            }
            chunk_a[k] = ca;
            chunk_b[k] = cb;
            carry[k] = 0.0f;
            if (c.chunk == 0) {
                if (!SCAN_REVERSE && h0 != nullptr && c.d + j < D) carry[k] = to_float(h0[(long long)c.batch * D + c.d + j]);
                if (chained) incl[slot0 + ch] = fmaf(ca, carry[k], cb);
            } else {
                agg_a[slot0 + ch] = ca;
                agg_b[slot0 + ch] = cb;
            }
        }
        if (chained) {
            __threadfence();
            __syncthreads();
            if (tid == 0) store_status(status + ticket, epoch, c.chunk == 0 ? 2 : 1);
        }
        if (c.chunk > 0) {
            // Look back: warp 0 reads the status of 32 earlier chunks of the lane at once and finds the nearest one
            // with an inclusive state; every chunk in between has published its aggregate.
            if (tid < 32) {
                int from = c.chunk - 1;
                for (;;) {
                    const int chunk_at = from - tid;
                    int state = 2;  // before chunk 0: never chosen, chunk 0 itself is always inclusive
                    if (chunk_at >= 0) {
                        do {
                            state = load_status(status + (long long)chunk_at * lanes + c.lane, epoch);
                        } while (state == 0);
                    }
                    const unsigned inclusive = __ballot_sync(0xffffffffu, state == 2);
                    if (inclusive != 0) {
                        from -= __ffs(inclusive) - 1;
                        break;
                    }
                    from -= 32;
                }
                if (tid == 0) s_from = from;
                __threadfence();
            }
            __syncthreads();
            // The carry-in per channel: incl[from] through the maps of chunks from+1 .. chunk-1, composed by one
            // warp per channel: lane l folds a contiguous run of those chunks, then the runs combine in order.
            const int from = s_from, between = c.chunk - 1 - from;
            const int per_lane = (between + 31) >> 5, lane_id = tid & 31;
            const int first = from + 1 + lane_id * per_lane, last = min(first + per_lane, c.chunk);
            for (int ch = tid >> 5; ch < SCAN_TILE; ch += SCAN_THREADS / 32) {
                float ra = 1.0f, rb = 0.0f;
#pragma unroll 4
                for (int at = first; at < last; ++at) {
                    const long long slot = ((long long)at * lanes + c.lane) * SCAN_TILE + ch;
                    const float a = __ldcg(agg_a + slot);
                    rb = fmaf(a, rb, __ldcg(agg_b + slot));
                    ra *= a;
                }
#pragma unroll
                for (int offset = 1; offset < 32; offset <<= 1) {  // lane l takes the runs of lanes l+1 .. after it
                    float la = __shfl_down_sync(0xffffffffu, ra, offset), lb = __shfl_down_sync(0xffffffffu, rb, offset);
                    if (lane_id + offset >= 32) la = 1.0f, lb = 0.0f;
                    rb = fmaf(la, rb, lb);
                    ra *= la;
                }
                if (lane_id == 0) s_carry[ch] = fmaf(ra, __ldcg(incl + ((long long)from * lanes + c.lane) * SCAN_TILE + ch), rb);
            }
            __syncthreads();
#pragma unroll
            for (int k = 0; k < SCAN_PER_THREAD; ++k) {
                const int j = ty + k * SCAN_THREADS_T, ch = tx * SCAN_VEC + j;
                if (j >= SCAN_VEC) break;
                carry[k] = s_carry[ch];
                if (c.chunk + 1 < chunks) incl[slot0 + ch] = fmaf(chunk_a[k], carry[k], chunk_b[k]);
            }
            if (c.chunk + 1 < chunks) {
                __threadfence();
                __syncthreads();
                if (tid == 0) store_status(status + ticket, epoch, 2);
            }
        }
#pragma unroll
        for (int k = 0; k < SCAN_PER_THREAD; ++k) {  // row r's carry-in replaces its map's a
            const int j = ty + k * SCAN_THREADS_T, ch = tx * SCAN_VEC + j;
            if (j >= SCAN_VEC) break;
            float v = carry[k];
            for (int r = 0; r < SCAN_THREADS_T; ++r) {
                const float a = s_a[r][ch];
                s_a[r][ch] = v;
                v = fmaf(a, v, s_b[r][ch]);
            }
        }
        __syncthreads();

        // Phase 3: rescan this thread's steps from the maps in registers and write the outputs.
        float state[SCAN_VEC];
#pragma unroll
        for (int j = 0; j < SCAN_VEC; ++j) state[j] = s_a[ty][tx * SCAN_VEC + j];
        if (c.active) {
#pragma unroll
            for (int i = 0; i < SCAN_STEPS; ++i) {
                const int s = c.s0 + i;
                if (s < T) {
#pragma unroll
                    for (int j = 0; j < SCAN_VEC; ++j) state[j] = fmaf(ma[i][j], state[j], mb[i][j]);
                    const long long off = c.base + (long long)i * STEP;
#if SCAN_REVERSE
                    const int t = c.t0 - i;
                    const pack_t q1 = load_pack(x1 + off), q2 = load_pack(x2 + off);
#if SCAN_CELL == 2
                    const pack_t q3 = load_pack(x3 + off);
#endif
                    pack_t hp;
                    const bool has_prev = t > 0 || h0 != nullptr;
                    if (t > 0) hp = load_pack(h + off - D);
                    else if (h0 != nullptr) hp = load_pack(h0 + (long long)c.batch * D + c.d);
                    float g1[SCAN_VEC], g2[SCAN_VEC];
#if SCAN_CELL == 2
                    float g3[SCAN_VEC];
#endif
#pragma unroll
                    for (int j = 0; j < SCAN_VEC; ++j) {
                        const float dh = state[j];
                        const float grad_a = has_prev ? dh * to_float(hp.v[j]) : 0.0f;
                        const float v1 = to_float(q1.v[j]), v2 = to_float(q2.v[j]);
                        float a_t;
#if SCAN_CELL == 0
                        a_t = v1;
                        g1[j] = grad_a;
                        g2[j] = dh;
#elif SCAN_CELL == 1
                        float z;  // z (1 - z) as sigmoid(k) sigmoid(-k): no cancellation near z = 1
                        sigmoid_pair(v1, z, a_t);
                        g1[j] = (dh * candidate(v2) - grad_a) * z * a_t;
                        g2[j] = dh * z * candidate_grad(v2);
#else
                        // a = f / (f + i), b = i / (f + i) g: da/df = -db/df = i / (f + i)^2, da/di = -db/di =
                        // -f / (f + i)^2, so with f' = f sigmoid(-x1): dL/dx1 = a bi (grad_a - dh g) sigmoid(-x1),
                        // dL/dx2 the negation with sigmoid(-x2).
                        const float v3 = to_float(q3.v[j]);
                        float bi;
                        lstm_gates(v1, v2, a_t, bi);
                        const float common = a_t * bi * (grad_a - dh * candidate(v3));
                        g1[j] = common * sigmoid_of_neg(v1);
                        g2[j] = -common * sigmoid_of_neg(v2);
                        g3[j] = dh * bi * candidate_grad(v3);
#endif
                        if (t == 0 && grad_h0 != nullptr) grad_h0[(long long)c.batch * D + c.d + j] = a_t * dh;
                    }
                    store_pack(y1 + off, g1);
                    store_pack(y2 + off, g2);
#if SCAN_CELL == 2
                    store_pack(y3 + off, g3);
#endif
#else
                    store_pack(y1 + off, state);
#endif
                }
            }
        }
    }
    cp_async_wait_group<0>();  // no copy may still target shared memory when the block exits
    // The last block to finish hands the counters back at 0 for the next launch on the stream.
    if (tid == 0) {
        __threadfence();
        if (atomicAdd(flags + 1, 1) == (int)gridDim.x - 1) {
            atomicExch(flags, 0);
            atomicExch(flags + 1, 0);
        }
    }
}
#undef STEP
#undef AT
