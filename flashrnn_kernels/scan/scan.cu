// Single-pass chunked linear scan h_t = a_t * h_{t-1} + b_t over the time axis of [B, T, D] tensors, with the
// gates of minGRU / minLSTM computed on the fly from their projected inputs, and the backward as the same scan
// run in reverse (dh_t = dy_t + a_{t+1} * dh_{t+1}) followed by the gradient epilogue.
//
// Work split (all sizes below come from the ScanPlan as #defines; B, T, D are runtime arguments):
//   block   = SCAN_THREADS_D x SCAN_THREADS_T threads; threadIdx.x runs along D, each thread owning SCAN_VEC
//             consecutive channels (one access of up to 16 bytes), threadIdx.y along time.
//   chunk   = SCAN_THREADS_T * SCAN_STEPS consecutive steps (in scan order) of one lane; thread row ty holds
//             steps ty * SCAN_STEPS ... of the chunk.
//   lane    = (batch row, tile of SCAN_THREADS_D * SCAN_VEC channels); a sequence of chunks forms a chain.
// Blocks are persistent: each draws chunk tickets (chunk-major, so a chunk's predecessors were drawn earlier) until
// none is left, and stages the next chunk's inputs into shared memory with cp.async while it finishes the current
// one, so its loads stay in flight through the carry phases. Every input is read from memory once: each thread
// copies, and later reads back, exactly its own steps and channels, so the staging needs no block barrier.
// Carries: inside a block, rows combine their affine maps (A, B) through shared memory; across blocks, chunks of
// one lane chain by decoupled look-back on one status word per chunk (1: aggregate ready, 2: inclusive state
// ready). Warp 0 examines the 32 nearest predecessors at once and the block composes every aggregate up to the
// nearest inclusive state, so a look-back costs two memory round trips per 32 chunks it passes.
//
// Cells (SCAN_CELL): 0 linear (x1 = a, x2 = b); 1 minGRU (x1 = k, x2 = h_pre): z = sigmoid(k), a = 1 - z,
// b = z * g(h_pre); 2 minLSTM (x1 = f_pre, x2 = i_pre, x3 = h_pre): f = sigmoid(f_pre), i = sigmoid(i_pre),
// a = f / (f + i), b = i / (f + i) * g(h_pre). g(x) = x + 1/2 for x >= 0, sigmoid(x) otherwise.
#if !defined(SCAN_THREADS_D) || !defined(SCAN_THREADS_T) || !defined(SCAN_VEC) || !defined(SCAN_STEPS) || \
    !defined(SCAN_MIN_BLOCKS) || !defined(SCAN_CELL) || !defined(SCAN_REVERSE) || !defined(SCAN_DTYPE) || \
    !defined(SCAN_FAST)
#error "scan.cu needs every ScanPlan field: SCAN_THREADS_D/_T, SCAN_VEC, SCAN_STEPS, SCAN_MIN_BLOCKS, SCAN_CELL, ..."
#endif

#if SCAN_FAST
#define FLASHRNN_FAST_ACTIVATIONS 1  // cell_exp is the hardware ex2 approximation
#endif
#include "cells/ops.cuh"
#include "runtime/async_copy.cuh"

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
#define SCAN_STAGE (SCAN_INPUTS * SCAN_CHUNK * SCAN_TILE)                  // elements of one staged chunk

static_assert(SCAN_THREADS % 32 == 0, "a block is whole warps");
static_assert(SCAN_VEC * sizeof(elem_t) <= 16, "one access is at most 16 bytes");
static_assert(SCAN_THREADS >= 32, "warp 0 runs the look-back");
static_assert((SCAN_VEC & (SCAN_VEC - 1)) == 0, "SCAN_VEC is a power of two");
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
// cancellation). SCAN_FAST (bf16/fp16 storage, rounding 2^-8 / 2^-11) uses the hardware ex2 / rcp approximations
// (the exponential is cells/ops.cuh's cell_exp).
__device__ __forceinline__ float fast_or_exact_rcp(float x) {
#if SCAN_FAST
    return __fdividef(1.0f, x);
#else
    return __frcp_rn(x);
#endif
}

__device__ __forceinline__ void sigmoid_pair(float x, float& pos, float& neg) {
    const float e = cell_exp(-fabsf(x));  // in (0, 1]
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
    const float e = cell_exp(fminf(x, 0.0f));
    return x >= 0.0f ? x + 0.5f : e * fast_or_exact_rcp(1.0f + e);
}

__device__ __forceinline__ float candidate_grad(float x) {
    const float e = cell_exp(fminf(x, 0.0f)), r = fast_or_exact_rcp(1.0f + e);
    return x >= 0.0f ? 1.0f : e * r * r;
}

// minLSTM's normalised gates a = f / (f + i), i / (f + i) with f = sigmoid(x1), i = sigmoid(x2), as
// u2 / (u1 + u2) and u1 / (u1 + u2) with u = (1 + e^-x) e^-m, m = max(0, -x1, -x2): every term is positive and
// at most 2, so neither overflow nor 0 / 0 when both gates underflow.
__device__ __forceinline__ void lstm_gates(float x1, float x2, float& a, float& bi) {
    const float m = fmaxf(0.0f, -fminf(x1, x2));
    const float em = cell_exp(-m);
    const float u1 = em + cell_exp(-x1 - m), u2 = em + cell_exp(-x2 - m);
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

// Status words: ticket counter at flags[0] (zero on entry; the block drawing the last ticket puts it back to 0 for
// the next launch on the stream), then one word per (lane, chunk) holding epoch * 4 + state. A word from an
// earlier launch carries an older epoch and reads as "not ready", so the buffer is zeroed only when the host's
// epoch counter wraps.
__device__ __forceinline__ int load_status(const int* p, int epoch) {
    const int word = *reinterpret_cast<const volatile int*>(p);
    return (word >> 2) == epoch ? (word & 3) : 0;
}

__device__ __forceinline__ void store_status(int* p, int epoch, int state) {
    *reinterpret_cast<volatile int*>(p) = epoch * 4 + state;
}

// Every launch draws lanes * chunks + gridDim.x tickets: each block draws until it gets one past the last chunk.
// The final draw resets the counter.
__device__ __forceinline__ int draw_ticket(int* counter, int total) {
    const int ticket = atomicAdd(counter, 1);
    if (ticket == total + (int)gridDim.x - 1) atomicExch(counter, 0);
    return ticket;
}

// The staged copy of input k, step i of this thread (within its chunk), in buffer `buf`.
__device__ __forceinline__ elem_t* staged(elem_t* stage, int buf, int k, int i, int tx, int ty) {
    return stage + ((buf * SCAN_INPUTS + k) * SCAN_CHUNK + ty * SCAN_STEPS + i) * SCAN_TILE + tx * SCAN_VEC;
}

__device__ __forceinline__ void stage_copy(elem_t* dst, const elem_t* src) {
    if constexpr (SCAN_ACCESS == 16) {
        cp_async16(dst, src, true);
    } else if constexpr (SCAN_ACCESS == 8 || SCAN_ACCESS == 4) {
        cp_async_small<SCAN_ACCESS>(dst, src);
    } else {
        *dst = *src;  // a 2-byte access: a plain copy, visible to this thread when it reads the stage back
    }
}

// Where one chunk of one lane sits, from its ticket.
struct ChunkAt {
    int chunk, lane, batch, d, s0, t0;
    long long base;  // element offset of this thread's first step
    bool active;     // this thread's channels exist (d < D)
    int step;        // element offset from one step of this thread to the next (in scan order)

    __device__ __forceinline__ ChunkAt(int ticket, int lanes, int d_tiles, int T, int D) {
        chunk = ticket / lanes;
        lane = ticket - chunk * lanes;
        batch = lane / d_tiles;
        d = (lane - batch * d_tiles) * SCAN_TILE + threadIdx.x * SCAN_VEC;
        active = d < D;
        s0 = chunk * SCAN_CHUNK + threadIdx.y * SCAN_STEPS;  // first step of this thread, in scan order
        t0 = SCAN_REVERSE ? T - 1 - s0 : s0;
        base = ((long long)batch * T + t0) * D + d;
        step = SCAN_REVERSE ? -D : D;
    }
};

// Issue the copies of this thread's inputs of chunk `at` into buffer `buf`: forward x1, x2 (, x3) at each step;
// reverse dL/dh at each step and the next step's x1 (, x2) for a_{t+1} (absent at t = T - 1).
__device__ __forceinline__ void stage_chunk(elem_t* stage, int buf, const ChunkAt& at, int T, int D,
                                            const elem_t* x1, const elem_t* x2, const elem_t* x3,
                                            const elem_t* dy) {
    if (!at.active) return;
#pragma unroll
    for (int i = 0; i < SCAN_STEPS; ++i) {
        const int s = at.s0 + i;
        if (s >= T) break;
        const long long off = at.base + (long long)i * at.step;
#if SCAN_REVERSE
        stage_copy(staged(stage, buf, 1, i, threadIdx.x, threadIdx.y), dy + off);
        if (s > 0) {
            stage_copy(staged(stage, buf, 0, i, threadIdx.x, threadIdx.y), x1 + off + D);
#if SCAN_CELL == 2
            stage_copy(staged(stage, buf, 2, i, threadIdx.x, threadIdx.y), x2 + off + D);
#endif
        }
#else
        stage_copy(staged(stage, buf, 0, i, threadIdx.x, threadIdx.y), x1 + off);
        stage_copy(staged(stage, buf, 1, i, threadIdx.x, threadIdx.y), x2 + off);
#if SCAN_CELL == 2
        stage_copy(staged(stage, buf, 2, i, threadIdx.x, threadIdx.y), x3 + off);
#endif
#endif
    }
}

// x1, x2, x3: cell inputs [B, T, D] (x3 only for minLSTM); h0: [B, D] or null.
// Forward: y1 = h [B, T, D]. Reverse (backward): dy = dL/dh [B, T, D], h = forward states [B, T, D];
//   y1, y2 (, y3) = gradients of x1, x2 (, x3) [B, T, D]; grad_h0 (fp32 [B, D], or null) = a_0 * dh_0.
// agg_a, agg_b, incl: [lanes, chunks, SCAN_TILE] fp32 workspace; flags: [1 + lanes * chunks] int32 (see the
// status words above); epoch in [1, 2^29). Dynamic shared memory: 2 * SCAN_STAGE elements (two staged chunks).
extern "C" __global__ void __launch_bounds__(SCAN_THREADS, SCAN_MIN_BLOCKS) flashrnn_scan(
    const elem_t* __restrict__ x1, const elem_t* __restrict__ x2, const elem_t* __restrict__ x3,
    const elem_t* __restrict__ h0, const elem_t* __restrict__ dy, const elem_t* __restrict__ h,
    elem_t* __restrict__ y1, elem_t* __restrict__ y2, elem_t* __restrict__ y3, float* __restrict__ grad_h0,
    float* __restrict__ agg_a, float* __restrict__ agg_b, float* __restrict__ incl, int* __restrict__ flags,
    int T, int D, int d_tiles, int lanes, int chunks, int epoch) {
    extern __shared__ __align__(16) unsigned char s_raw[];
    elem_t* stage = reinterpret_cast<elem_t*>(s_raw);
    __shared__ float s_a[SCAN_THREADS_T][SCAN_TILE];
    __shared__ float s_b[SCAN_THREADS_T][SCAN_TILE];
    __shared__ int s_next, s_window, s_found;

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * SCAN_THREADS_D + tx;
    const int total = lanes * chunks;
    if (tid == 0) s_next = draw_ticket(flags, total);
    __syncthreads();
    int ticket = s_next;
    if (ticket < total) stage_chunk(stage, 0, ChunkAt(ticket, lanes, d_tiles, T, D), T, D, x1, x2, x3, dy);
    cp_async_commit();
    __syncthreads();  // every thread has read s_next
    if (tid == 0 && ticket < total) s_next = draw_ticket(flags, total);
    __syncthreads();

    for (int buf = 0; ticket < total; buf ^= 1) {
        const int next = s_next;  // drawn before the last barrier of the previous iteration (or the prologue)
        if (next < total) stage_chunk(stage, buf ^ 1, ChunkAt(next, lanes, d_tiles, T, D), T, D, x1, x2, x3, dy);
        cp_async_commit();
        cp_async_wait_group<1>();  // this thread's copies of the current chunk have landed
        const ChunkAt at(ticket, lanes, d_tiles, T, D);

        // Phase 1: the maps (a, b) of this thread's steps (steps past T: the identity), folded into one map
        // h -> A h + B per channel. The linear cell's maps are its inputs: phase 3 reads them from the stage again.
        // The other cells evaluate their gates once into registers.
#if SCAN_CELL == 0
#if SCAN_REVERSE  // dh_t gets a_{t+1} dh_{t+1}; nothing at t = T - 1 (s = 0)
#define MAP_A(i, j) (at.active && at.s0 + (i) < T ? (at.s0 + (i) > 0 ? to_float(staged(stage, buf, 0, i, tx, ty)[j]) \
                                                                      : 0.0f)                                 \
                                                 : 1.0f)
#else
#define MAP_A(i, j) (at.active && at.s0 + (i) < T ? to_float(staged(stage, buf, 0, i, tx, ty)[j]) : 1.0f)
#endif
#define MAP_B(i, j) (at.active && at.s0 + (i) < T ? to_float(staged(stage, buf, 1, i, tx, ty)[j]) : 0.0f)
#else
        float ma[SCAN_STEPS][SCAN_VEC], mb[SCAN_STEPS][SCAN_VEC];
#define MAP_A(i, j) ma[i][j]
#define MAP_B(i, j) mb[i][j]
#pragma unroll
        for (int i = 0; i < SCAN_STEPS; ++i) {
            const int s = at.s0 + i;
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
                float a = 1.0f, b = 0.0f;
                if (at.active && s < T) {
                    const float v1 = to_float(staged(stage, buf, 0, i, tx, ty)[j]);
                    const float v2 = to_float(staged(stage, buf, 1, i, tx, ty)[j]);
#if SCAN_REVERSE
                    a = 0.0f;  // dh_t gets a_{t+1} dh_{t+1}; nothing at t = T - 1
#if SCAN_CELL == 2
                    if (s > 0) a = gate_a(v1, to_float(staged(stage, buf, 2, i, tx, ty)[j]));
#else
                    if (s > 0) a = gate_a(v1, 0.0f);
#endif
                    b = v2;
#elif SCAN_CELL == 2
                    gates(v1, v2, to_float(staged(stage, buf, 2, i, tx, ty)[j]), a, b);
#else
                    gates(v1, v2, 0.0f, a, b);
#endif
                }
                ma[i][j] = a;
                mb[i][j] = b;
            }
        }
#endif
        {
            float fa[SCAN_VEC], fb[SCAN_VEC];
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
                fa[j] = MAP_A(0, j);
                fb[j] = MAP_B(0, j);
            }
#pragma unroll
            for (int i = 1; i < SCAN_STEPS; ++i) {
#pragma unroll
                for (int j = 0; j < SCAN_VEC; ++j) {
                    const float a = MAP_A(i, j);
                    fb[j] = fmaf(a, fb[j], MAP_B(i, j));
                    fa[j] = a * fa[j];
                }
            }
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
                s_a[ty][tx * SCAN_VEC + j] = fa[j];
                s_b[ty][tx * SCAN_VEC + j] = fb[j];
            }
        }
        __syncthreads();
        if (tid == 0 && next < total) s_next = draw_ticket(flags, total);  // read after the next barriers

        // Phase 2: the chunk's map per channel (rows combined), its carry-in (look back over earlier chunks of this
        // lane), then each row's carry-in, written over s_a. Thread (tx, ty) combines the channels
        // tx * SCAN_VEC + j with j = ty + k * SCAN_THREADS_T < SCAN_VEC.
        const long long slot0 = (long long)at.lane * chunks;  // status word / workspace row of chunk 0 of the lane
        float ca[SCAN_OWNED], cb[SCAN_OWNED], carry[SCAN_OWNED];
#pragma unroll
        for (int k = 0; k < SCAN_OWNED; ++k) {
            const int j = ty + k * SCAN_THREADS_T, c = tx * SCAN_VEC + j;
            ca[k] = 1.0f;
            cb[k] = 0.0f;
            carry[k] = 0.0f;
            if (j < SCAN_VEC && at.active) {
                for (int r = 0; r < SCAN_THREADS_T; ++r) {
                    const float a = s_a[r][c];
                    cb[k] = fmaf(a, cb[k], s_b[r][c]);
                    ca[k] = a * ca[k];
                }
                if (at.chunk == 0) {
                    if (!SCAN_REVERSE && h0 != nullptr) carry[k] = to_float(h0[(long long)at.batch * D + at.d + j]);
                } else {
                    agg_a[(slot0 + at.chunk) * SCAN_TILE + c] = ca[k];
                    agg_b[(slot0 + at.chunk) * SCAN_TILE + c] = cb[k];
                }
            }
        }
        if (at.chunk > 0) {  // block-uniform
            __threadfence();
            __syncthreads();  // every aggregate of the chunk is written and fenced
            if (tid == 0) store_status(flags + 1 + slot0 + at.chunk, epoch, 1);
            float la[SCAN_OWNED], lb[SCAN_OWNED];  // map of the chunks composed so far (nearest first)
#pragma unroll
            for (int k = 0; k < SCAN_OWNED; ++k) {
                la[k] = 1.0f;
                lb[k] = 0.0f;
            }
            for (int back = 1;; back += 32) {  // the window: chunks chunk - back - i, i < 32
                if (tid < 32) {
                    const int q = at.chunk - back - tid;
                    int state = 2;  // before chunk 0: never chosen, chunk 0 always holds its inclusive state
                    if (q >= 0) {
                        do {
                            state = load_status(flags + 1 + slot0 + q, epoch);
                        } while (state == 0);
                    }
                    const unsigned found = __ballot_sync(0xffffffffu, state == 2);
                    __threadfence();
                    if (tid == 0) {
                        s_window = found ? __ffs(found) - 1 : 32;  // aggregates to compose before the inclusive
                        s_found = found != 0;
                    }
                }
                __syncthreads();
                const int n = s_window;
                const bool found = s_found;
#pragma unroll
                for (int k = 0; k < SCAN_OWNED; ++k) {
                    const int j = ty + k * SCAN_THREADS_T, c = tx * SCAN_VEC + j;
                    if (j < SCAN_VEC && at.active) {
                        for (int i = 0; i < n; ++i) {
                            const long long q = slot0 + at.chunk - back - i;
                            lb[k] = fmaf(la[k], __ldcg(agg_b + q * SCAN_TILE + c), lb[k]);
                            la[k] = la[k] * __ldcg(agg_a + q * SCAN_TILE + c);
                        }
                        if (found) {
                            const long long q = slot0 + at.chunk - back - n;
                            carry[k] = fmaf(la[k], __ldcg(incl + q * SCAN_TILE + c), lb[k]);
                        }
                    }
                }
                if (found) break;
                __syncthreads();  // s_window is read by all before warp 0 writes the next window
            }
        }
        if (at.chunk + 1 < chunks) {  // block-uniform
#pragma unroll
            for (int k = 0; k < SCAN_OWNED; ++k) {
                const int j = ty + k * SCAN_THREADS_T, c = tx * SCAN_VEC + j;
                if (j < SCAN_VEC && at.active) incl[(slot0 + at.chunk) * SCAN_TILE + c] = fmaf(ca[k], carry[k], cb[k]);
            }
            __threadfence();
            __syncthreads();
            if (tid == 0) store_status(flags + 1 + slot0 + at.chunk, epoch, 2);
        }
#pragma unroll
        for (int k = 0; k < SCAN_OWNED; ++k) {
            const int j = ty + k * SCAN_THREADS_T, c = tx * SCAN_VEC + j;
            if (j < SCAN_VEC && at.active) {
                float cr = carry[k];
                for (int r = 0; r < SCAN_THREADS_T; ++r) {  // row r's carry-in replaces its map's a
                    const float a = s_a[r][c];
                    s_a[r][c] = cr;
                    cr = fmaf(a, cr, s_b[r][c]);
                }
            }
        }
        __syncthreads();

        // Phase 3: rescan this thread's steps from its maps and write the outputs.
        if (at.active) {
            float state[SCAN_VEC];
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) state[j] = s_a[ty][tx * SCAN_VEC + j];
#pragma unroll
            for (int i = 0; i < SCAN_STEPS; ++i) {
                const int s = at.s0 + i;
                if (s < T) {
#pragma unroll
                    for (int j = 0; j < SCAN_VEC; ++j) state[j] = fmaf(MAP_A(i, j), state[j], MAP_B(i, j));
                    const long long off = at.base + (long long)i * at.step;
#if SCAN_REVERSE
                    const int t = at.t0 - i;
                    const pack_t q1 = load_pack(x1 + off), q2 = load_pack(x2 + off);
#if SCAN_CELL == 2
                    const pack_t q3 = load_pack(x3 + off);
#endif
                    pack_t hp;
                    const bool has_prev = t > 0 || h0 != nullptr;
                    if (t > 0) hp = load_pack(h + off - D);
                    else if (h0 != nullptr) hp = load_pack(h0 + (long long)at.batch * D + at.d);
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
                        if (t == 0 && grad_h0 != nullptr) grad_h0[(long long)at.batch * D + at.d + j] = a_t * dh;
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
        __syncthreads();  // s_a is read before the next chunk's phase 1 writes it
        ticket = next;
    }
    cp_async_wait_group<0>();
}
#undef MAP_A
#undef MAP_B
