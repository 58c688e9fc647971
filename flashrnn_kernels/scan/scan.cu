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
// Carries: inside a block, rows combine their affine maps (A, B) through shared memory; across blocks, chunks of
// one lane chain by decoupled look-back on per-channel status words (1: aggregate ready, 2: inclusive state
// ready). Blocks take chunks in ticket order (chunk-major), so a block only ever waits on blocks already running.
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

static_assert(SCAN_THREADS % 32 == 0, "a block is whole warps");
static_assert(SCAN_VEC * sizeof(elem_t) <= 16, "one access is at most 16 bytes");
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
// the next launch on the stream), then one word per (lane, chunk, channel of the tile) holding epoch * 4 + state.
// A word from an earlier launch carries an older epoch and reads as "not ready", so the buffer is zeroed only when
// the host's epoch counter wraps.
__device__ __forceinline__ int load_status(const int* p, int epoch) {
    const int word = *reinterpret_cast<const volatile int*>(p);
    return (word >> 2) == epoch ? (word & 3) : 0;
}

__device__ __forceinline__ void store_status(int* p, int epoch, int state) {
    __threadfence();
    *reinterpret_cast<volatile int*>(p) = epoch * 4 + state;
}

// x1, x2, x3: cell inputs [B, T, D] (x3 only for minLSTM); h0: [B, D] or null.
// Forward: y1 = h [B, T, D]. Reverse (backward): dy = dL/dh [B, T, D], h = forward states [B, T, D];
//   y1, y2 (, y3) = gradients of x1, x2 (, x3) [B, T, D]; grad_h0 (fp32 [B, D], or null) = a_0 * dh_0.
// agg_a, agg_b, incl: [lanes, chunks, SCAN_TILE] fp32 workspace; flags: [1 + lanes * chunks * SCAN_TILE]
// int32 (see the status words above); epoch in [1, 2^29).
extern "C" __global__ void __launch_bounds__(SCAN_THREADS, SCAN_MIN_BLOCKS) flashrnn_scan(
    const elem_t* __restrict__ x1, const elem_t* __restrict__ x2, const elem_t* __restrict__ x3,
    const elem_t* __restrict__ h0, const elem_t* __restrict__ dy, const elem_t* __restrict__ h,
    elem_t* __restrict__ y1, elem_t* __restrict__ y2, elem_t* __restrict__ y3, float* __restrict__ grad_h0,
    float* __restrict__ agg_a, float* __restrict__ agg_b, float* __restrict__ incl, int* __restrict__ flags,
    int T, int D, int d_tiles, int lanes, int chunks, int epoch) {
    __shared__ float s_a[SCAN_THREADS_T][SCAN_TILE];
    __shared__ float s_b[SCAN_THREADS_T][SCAN_TILE];
    __shared__ int s_ticket;

    const int tx = threadIdx.x, ty = threadIdx.y;
    if (tx == 0 && ty == 0) {
        const int ticket = atomicAdd(flags, 1);
        if (ticket == lanes * chunks - 1) atomicExch(flags, 0);  // every ticket is drawn: reset for the next launch
        s_ticket = ticket;
    }
    __syncthreads();
    const int ticket = s_ticket;
    const int chunk = ticket / lanes;
    const int lane = ticket - chunk * lanes;
    const int batch = lane / d_tiles;
    const int d = (lane - batch * d_tiles) * SCAN_TILE + tx * SCAN_VEC;
    const bool active = d < D;
    const long long row = (long long)batch * T;
    const int s0 = chunk * SCAN_CHUNK + ty * SCAN_STEPS;  // first step of this thread, in scan order

    // Phase 1: issue every load of this thread's steps, then turn them into the maps (a, b) kept in registers for
    // phase 3 (the gates are evaluated once) and fold them into one map h -> A h + B per channel. Steps past T
    // get the identity map. The linear cell's maps are its inputs: they stay in storage precision (half the
    // registers for bf16/fp16). Step i of this thread sits at `base + i * step` in memory.
    const int t0 = SCAN_REVERSE ? T - 1 - s0 : s0;
    const long long base = (row + t0) * D + d;
    const int step = SCAN_REVERSE ? -D : D;
#if SCAN_CELL == 0
    pack_t ma[SCAN_STEPS], mb[SCAN_STEPS];
#define MAP_A(i, j) to_float(ma[i].v[j])
#define MAP_B(i, j) to_float(mb[i].v[j])
    {
        pack_t one, zero;
#pragma unroll
        for (int j = 0; j < SCAN_VEC; ++j) {
            one.v[j] = from_float<elem_t>(1.0f);
            zero.v[j] = from_float<elem_t>(0.0f);
        }
#pragma unroll
        for (int i = 0; i < SCAN_STEPS; ++i) {
            const int s = s0 + i;
            ma[i] = one;
            mb[i] = zero;
            if (active && s < T) {
#if SCAN_REVERSE
                mb[i] = load_pack(dy + base + i * step);
                ma[i] = s > 0 ? load_pack(x1 + base + i * step + D) : zero;  // dh_t gets a_{t+1} dh_{t+1}
#else
                ma[i] = load_pack(x1 + base + i * step);
                mb[i] = load_pack(x2 + base + i * step);
#endif
            }
        }
    }
#else
    float ma[SCAN_STEPS][SCAN_VEC], mb[SCAN_STEPS][SCAN_VEC];
#define MAP_A(i, j) ma[i][j]
#define MAP_B(i, j) mb[i][j]
    {
        pack_t p1[SCAN_STEPS], p2[SCAN_STEPS];
#if SCAN_CELL == 2
        pack_t p3[SCAN_STEPS];
#endif
#pragma unroll
        for (int i = 0; i < SCAN_STEPS; ++i) {
            const int s = s0 + i;
            if (active && s < T) {
                const elem_t* at = x1 + base + i * step;
#if SCAN_REVERSE
                p2[i] = load_pack(dy + base + i * step);
                if (s > 0) {  // dh_t gets a_{t+1} dh_{t+1}
                    p1[i] = load_pack(at + D);
#if SCAN_CELL == 2
                    p3[i] = load_pack(x2 + base + i * step + D);
#endif
                }
#else
                p1[i] = load_pack(at);
                p2[i] = load_pack(x2 + base + i * step);
#if SCAN_CELL == 2
                p3[i] = load_pack(x3 + base + i * step);
#endif
#endif
            }
        }
#pragma unroll
        for (int i = 0; i < SCAN_STEPS; ++i) {
            const int s = s0 + i;
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
                float a = 1.0f, b = 0.0f;
                if (active && s < T) {
#if SCAN_REVERSE
                    a = 0.0f;
#if SCAN_CELL == 2
                    if (s > 0) a = gate_a(to_float(p1[i].v[j]), to_float(p3[i].v[j]));
#else
                    if (s > 0) a = gate_a(to_float(p1[i].v[j]), 0.0f);
#endif
                    b = to_float(p2[i].v[j]);
#elif SCAN_CELL == 2
                    gates(to_float(p1[i].v[j]), to_float(p2[i].v[j]), to_float(p3[i].v[j]), a, b);
#else
                    gates(to_float(p1[i].v[j]), to_float(p2[i].v[j]), 0.0f, a, b);
#endif
                }
                ma[i][j] = a;
                mb[i][j] = b;
            }
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
                fb[j] = fmaf(MAP_A(i, j), fb[j], MAP_B(i, j));
                fa[j] = MAP_A(i, j) * fa[j];
            }
        }
#pragma unroll
        for (int j = 0; j < SCAN_VEC; ++j) {
            s_a[ty][tx * SCAN_VEC + j] = fa[j];
            s_b[ty][tx * SCAN_VEC + j] = fb[j];
        }
    }
    __syncthreads();

    // Phase 2: the block's carry-in per channel (look back over earlier chunks of this lane), then each row's
    // carry-in, written over s_a. Spread over the block: thread (tx, ty) takes the channels tx * SCAN_VEC + j
    // with j = ty, ty + SCAN_THREADS_T, ... so the look-back needs a few scalar registers while the maps stay in
    // registers.
    if (active) {
        for (int j = ty; j < SCAN_VEC; j += SCAN_THREADS_T) {
            const int c = tx * SCAN_VEC + j;
            float ca = 1.0f, cb = 0.0f;
            for (int r = 0; r < SCAN_THREADS_T; ++r) {
                const float a = s_a[r][c];
                cb = fmaf(a, cb, s_b[r][c]);
                ca = a * ca;
            }
            const long long slot = ((long long)lane * chunks + chunk) * SCAN_TILE + c;
            int* status = flags + 1 + slot;
            float carry;
            if (chunk == 0) {
                carry = (!SCAN_REVERSE && h0 != nullptr) ? to_float(h0[(long long)batch * D + d + j]) : 0.0f;
            } else {
                agg_a[slot] = ca;
                agg_b[slot] = cb;
                store_status(status, epoch, 1);
                float la = 1.0f, lb = 0.0f;  // map of the chunks between the one examined and this one
                for (int back = SCAN_TILE;; back += SCAN_TILE) {
                    int state;
                    do {
                        state = load_status(status - back, epoch);
                    } while (state == 0);
                    __threadfence();
                    if (state == 2) {
                        carry = fmaf(la, __ldcg(incl + slot - back), lb);
                        break;
                    }
                    lb = fmaf(la, __ldcg(agg_b + slot - back), lb);
                    la = la * __ldcg(agg_a + slot - back);
                }
            }
            if (chunk + 1 < chunks) {
                incl[slot] = fmaf(ca, carry, cb);
                store_status(status, epoch, 2);
            }
            for (int r = 0; r < SCAN_THREADS_T; ++r) {  // row r's carry-in replaces its map's a
                const float a = s_a[r][c];
                s_a[r][c] = carry;
                carry = fmaf(a, carry, s_b[r][c]);
            }
        }
    }
    __syncthreads();
    if (!active) return;

    float state[SCAN_VEC];
#pragma unroll
    for (int j = 0; j < SCAN_VEC; ++j) state[j] = s_a[ty][tx * SCAN_VEC + j];

    // Phase 3: rescan this thread's steps from the maps in registers and write the outputs.
#pragma unroll
    for (int i = 0; i < SCAN_STEPS; ++i) {
        const int s = s0 + i;
        if (s < T) {
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) state[j] = fmaf(MAP_A(i, j), state[j], MAP_B(i, j));
            const long long off = base + i * step;
#if SCAN_REVERSE
            const int t = t0 - i;
            const pack_t q1 = load_pack(x1 + off), q2 = load_pack(x2 + off);
#if SCAN_CELL == 2
            const pack_t q3 = load_pack(x3 + off);
#endif
            pack_t hp;
            const bool has_prev = t > 0 || h0 != nullptr;
            if (t > 0) hp = load_pack(h + off - D);
            else if (h0 != nullptr) hp = load_pack(h0 + (long long)batch * D + d);
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
                // a = f / (f + i), b = i / (f + i) g: da/df = -db/df = i / (f + i)^2, da/di = -db/di = -f / (f + i)^2,
                // so with f' = f sigmoid(-x1): dL/dx1 = a bi (grad_a - dh g) sigmoid(-x1), dL/dx2 the negation
                // with sigmoid(-x2).
                const float v3 = to_float(q3.v[j]);
                float bi;
                lstm_gates(v1, v2, a_t, bi);
                const float common = a_t * bi * (grad_a - dh * candidate(v3));
                g1[j] = common * sigmoid_of_neg(v1);
                g2[j] = -common * sigmoid_of_neg(v2);
                g3[j] = dh * bi * candidate_grad(v3);
#endif
                if (t == 0 && grad_h0 != nullptr) grad_h0[(long long)batch * D + d + j] = a_t * dh;
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
#undef MAP_A
#undef MAP_B
