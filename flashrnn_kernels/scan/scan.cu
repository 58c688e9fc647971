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
// one lane chain by decoupled look-back on per-thread status words (1: aggregate ready, 2: inclusive state
// ready). Blocks take chunks in ticket order (chunk-major), so a block only ever waits on blocks already running.
//
// Cells (SCAN_CELL): 0 linear (x1 = a, x2 = b); 1 minGRU (x1 = k, x2 = h_pre): z = sigmoid(k), a = 1 - z,
// b = z * g(h_pre); 2 minLSTM (x1 = f_pre, x2 = i_pre, x3 = h_pre): f = sigmoid(f_pre), i = sigmoid(i_pre),
// a = f / (f + i), b = i / (f + i) * g(h_pre). g(x) = x + 1/2 for x >= 0, sigmoid(x) otherwise.
#include "cells/ops.cuh"

#if !defined(SCAN_THREADS_D) || !defined(SCAN_THREADS_T) || !defined(SCAN_VEC) || !defined(SCAN_STEPS) || \
    !defined(SCAN_MIN_BLOCKS) || !defined(SCAN_CELL) || !defined(SCAN_REVERSE) || !defined(SCAN_DTYPE)
#error "scan.cu needs every ScanPlan field: SCAN_THREADS_D/_T, SCAN_VEC, SCAN_STEPS, SCAN_MIN_BLOCKS, SCAN_CELL, ..."
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

__device__ __forceinline__ float candidate(float x) { return x >= 0.0f ? x + 0.5f : sigmoid(x); }

__device__ __forceinline__ float candidate_grad(float x) {
    if (x >= 0.0f) return 1.0f;
    return sigmoid(x) * sigmoid(-x);
}

// (a, b) of one element from the cell's inputs; b is skipped (reverse pass: only a is needed).
__device__ __forceinline__ float gate_a(float x1, float x2) {
#if SCAN_CELL == 0
    return x1;
#elif SCAN_CELL == 1
    return sigmoid(-x1);
#else
    const float f = sigmoid(x1), i = sigmoid(x2);
    return f / (f + i);
#endif
}

__device__ __forceinline__ float gate_b(float x1, float x2, float x3) {
#if SCAN_CELL == 0
    return x2;
#elif SCAN_CELL == 1
    return sigmoid(x1) * candidate(x2);
#else
    const float f = sigmoid(x1), i = sigmoid(x2);
    return i / (f + i) * candidate(x3);
#endif
}

// Status words: ticket counter at flags[0], then one word per (lane, chunk, threadIdx.x).
__device__ __forceinline__ int load_status(const int* p) { return *reinterpret_cast<const volatile int*>(p); }

__device__ __forceinline__ void store_status(int* p, int value) {
    __threadfence();
    *reinterpret_cast<volatile int*>(p) = value;
}

// x1, x2, x3: cell inputs [B, T, D] (x3 only for minLSTM); h0: [B, D] or null.
// Forward: y1 = h [B, T, D]. Reverse (backward): dy = dL/dh [B, T, D], h = forward states [B, T, D];
//   y1, y2 (, y3) = gradients of x1, x2 (, x3) [B, T, D]; grad_h0 (fp32 [B, D], or null) = a_0 * dh_0.
// agg_a, agg_b, incl: [lanes, chunks, SCAN_TILE] fp32 workspace; flags: [1 + lanes * chunks * SCAN_THREADS_D]
// int32, zero on entry.
extern "C" __global__ void __launch_bounds__(SCAN_THREADS, SCAN_MIN_BLOCKS) flashrnn_scan(
    const elem_t* __restrict__ x1, const elem_t* __restrict__ x2, const elem_t* __restrict__ x3,
    const elem_t* __restrict__ h0, const elem_t* __restrict__ dy, const elem_t* __restrict__ h,
    elem_t* __restrict__ y1, elem_t* __restrict__ y2, elem_t* __restrict__ y3, float* __restrict__ grad_h0,
    float* __restrict__ agg_a, float* __restrict__ agg_b, float* __restrict__ incl, int* __restrict__ flags,
    int T, int D, int d_tiles, int lanes, int chunks) {
    __shared__ float s_a[SCAN_THREADS_T][SCAN_TILE];
    __shared__ float s_b[SCAN_THREADS_T][SCAN_TILE];
    __shared__ float s_carry[SCAN_TILE];
    __shared__ int s_ticket;

    const int tx = threadIdx.x, ty = threadIdx.y;
    if (tx == 0 && ty == 0) s_ticket = atomicAdd(flags, 1);
    __syncthreads();
    const int ticket = s_ticket;
    const int chunk = ticket / lanes;
    const int lane = ticket - chunk * lanes;
    const int batch = lane / d_tiles;
    const int d = (lane - batch * d_tiles) * SCAN_TILE + tx * SCAN_VEC;
    const bool active = d < D;
    const long long row = (long long)batch * T;
    const int s0 = chunk * SCAN_CHUNK + ty * SCAN_STEPS;  // first step of this thread, in scan order

    // Phase 1: load this thread's steps and fold them into one affine map h -> A h + B per channel.
    pack_t r1[SCAN_STEPS], r2[SCAN_STEPS];
#if SCAN_REVERSE
    pack_t rg[SCAN_STEPS];
#endif
#if SCAN_CELL == 2 && !SCAN_REVERSE
    pack_t r3[SCAN_STEPS];
#endif
#pragma unroll
    for (int i = 0; i < SCAN_STEPS; ++i) {
        const int s = s0 + i;
        if (active && s < T) {
#if SCAN_REVERSE
            const int t = T - 1 - s;
            rg[i] = load_pack(dy + (row + t) * D + d);
            if (t + 1 < T) {  // the map of step t multiplies dh_{t+1} by a_{t+1}
                r1[i] = load_pack(x1 + (row + t + 1) * D + d);
#if SCAN_CELL == 2
                r2[i] = load_pack(x2 + (row + t + 1) * D + d);
#endif
            }
#else
            const long long off = (row + s) * D + d;
            r1[i] = load_pack(x1 + off);
            r2[i] = load_pack(x2 + off);
#if SCAN_CELL == 2
            r3[i] = load_pack(x3 + off);
#endif
#endif
        }
    }

    float fa[SCAN_VEC], fb[SCAN_VEC];
#pragma unroll
    for (int j = 0; j < SCAN_VEC; ++j) {
        fa[j] = 1.0f;
        fb[j] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < SCAN_STEPS; ++i) {
        const int s = s0 + i;
        if (active && s < T) {
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
                float a, b;
#if SCAN_REVERSE
                a = (s > 0) ? gate_a(to_float(r1[i].v[j]), to_float(r2[i].v[j])) : 0.0f;
                b = to_float(rg[i].v[j]);
#elif SCAN_CELL == 2
                a = gate_a(to_float(r1[i].v[j]), to_float(r2[i].v[j]));
                b = gate_b(to_float(r1[i].v[j]), to_float(r2[i].v[j]), to_float(r3[i].v[j]));
#else
                a = gate_a(to_float(r1[i].v[j]), to_float(r2[i].v[j]));
                b = gate_b(to_float(r1[i].v[j]), to_float(r2[i].v[j]), 0.0f);
#endif
                fa[j] = a * fa[j];
                fb[j] = fmaf(a, fb[j], b);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < SCAN_VEC; ++j) {
        s_a[ty][tx * SCAN_VEC + j] = fa[j];
        s_b[ty][tx * SCAN_VEC + j] = fb[j];
    }
    __syncthreads();

    // Phase 2: the block's carry-in (row 0: look back over earlier chunks of this lane), and each row's
    // exclusive prefix inside the block.
    if (ty == 0 && active) {
        float carry[SCAN_VEC], ca[SCAN_VEC], cb[SCAN_VEC];
#pragma unroll
        for (int j = 0; j < SCAN_VEC; ++j) {
            ca[j] = 1.0f;
            cb[j] = 0.0f;
        }
        for (int r = 0; r < SCAN_THREADS_T; ++r) {
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
                const float a = s_a[r][tx * SCAN_VEC + j];
                cb[j] = fmaf(a, cb[j], s_b[r][tx * SCAN_VEC + j]);
                ca[j] = a * ca[j];
            }
        }
        const long long slot = ((long long)lane * chunks + chunk) * SCAN_TILE + tx * SCAN_VEC;
        int* status = flags + 1 + ((long long)lane * chunks + chunk) * SCAN_THREADS_D + tx;
        if (chunk == 0) {
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j)
                carry[j] = (!SCAN_REVERSE && h0 != nullptr) ? to_float(h0[(long long)batch * D + d + j]) : 0.0f;
        } else {
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
                agg_a[slot + j] = ca[j];
                agg_b[slot + j] = cb[j];
            }
            store_status(status, 1);
            float la[SCAN_VEC], lb[SCAN_VEC];  // map of the chunks between the one examined and this one
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
                la[j] = 1.0f;
                lb[j] = 0.0f;
            }
            for (int prev = chunk - 1;; --prev) {
                const int* prev_status = status - (long long)(chunk - prev) * SCAN_THREADS_D;
                int state;
                do {
                    state = load_status(prev_status);
                } while (state == 0);
                __threadfence();
                const long long prev_slot = slot - (long long)(chunk - prev) * SCAN_TILE;
                if (state == 2) {
#pragma unroll
                    for (int j = 0; j < SCAN_VEC; ++j) carry[j] = fmaf(la[j], __ldcg(incl + prev_slot + j), lb[j]);
                    break;
                }
#pragma unroll
                for (int j = 0; j < SCAN_VEC; ++j) {
                    const float a = __ldcg(agg_a + prev_slot + j);
                    lb[j] = fmaf(la[j], __ldcg(agg_b + prev_slot + j), lb[j]);
                    la[j] = la[j] * a;
                }
            }
        }
        if (chunks > 1 && chunk + 1 < chunks) {
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) incl[slot + j] = fmaf(ca[j], carry[j], cb[j]);
            store_status(status, 2);
        }
#pragma unroll
        for (int j = 0; j < SCAN_VEC; ++j) s_carry[tx * SCAN_VEC + j] = carry[j];
    }
    __syncthreads();
    if (!active) return;

    float state[SCAN_VEC];
#pragma unroll
    for (int j = 0; j < SCAN_VEC; ++j) state[j] = s_carry[tx * SCAN_VEC + j];
    for (int r = 0; r < ty; ++r) {
#pragma unroll
        for (int j = 0; j < SCAN_VEC; ++j)
            state[j] = fmaf(s_a[r][tx * SCAN_VEC + j], state[j], s_b[r][tx * SCAN_VEC + j]);
    }

    // Phase 3: rescan this thread's steps from registers and write the outputs.
#pragma unroll
    for (int i = 0; i < SCAN_STEPS; ++i) {
        const int s = s0 + i;
        if (s < T) {
#if SCAN_REVERSE
            const int t = T - 1 - s;
            const long long off = (row + t) * D + d;
            const pack_t p1 = load_pack(x1 + off), p2 = load_pack(x2 + off);
#if SCAN_CELL == 2
            const pack_t p3 = load_pack(x3 + off);
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
                const float a = (t + 1 < T) ? gate_a(to_float(r1[i].v[j]), to_float(r2[i].v[j])) : 0.0f;
                state[j] = fmaf(a, state[j], to_float(rg[i].v[j]));
                const float dh = state[j];
                const float grad_a = has_prev ? dh * to_float(hp.v[j]) : 0.0f;
                const float v1 = to_float(p1.v[j]), v2 = to_float(p2.v[j]);
#if SCAN_CELL == 0
                g1[j] = grad_a;
                g2[j] = dh;
#elif SCAN_CELL == 1
                const float z = sigmoid(v1);  // z (1 - z) as sigmoid(k) sigmoid(-k): no cancellation near z = 1
                g1[j] = (dh * candidate(v2) - grad_a) * z * sigmoid(-v1);
                g2[j] = dh * z * candidate_grad(v2);
#else
                const float v3 = to_float(p3.v[j]);
                const float f = sigmoid(v1), ig = sigmoid(v2), sum = f + ig;
                const float common = (grad_a - dh * candidate(v3)) / (sum * sum);
                g1[j] = ig * common * f * sigmoid(-v1);
                g2[j] = -f * common * ig * sigmoid(-v2);
                g3[j] = dh * ig / sum * candidate_grad(v3);
#endif
                if (t == 0 && grad_h0 != nullptr) grad_h0[(long long)batch * D + d + j] = gate_a(v1, v2) * dh;
            }
            store_pack(y1 + off, g1);
            store_pack(y2 + off, g2);
#if SCAN_CELL == 2
            store_pack(y3 + off, g3);
#endif
#else
            const long long off = (row + s) * D + d;
#pragma unroll
            for (int j = 0; j < SCAN_VEC; ++j) {
                const float v1 = to_float(r1[i].v[j]), v2 = to_float(r2[i].v[j]);
#if SCAN_CELL == 2
                const float v3 = to_float(r3[i].v[j]);
#else
                const float v3 = 0.0f;
#endif
                state[j] = fmaf(gate_a(v1, v2), state[j], gate_b(v1, v2, v3));
            }
            store_pack(y1 + off, state);
#endif
        }
    }
}
