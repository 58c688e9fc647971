// The recurrent matrix engine shared by the fused forward and backward kernels.
//
// Every step computes, per warp, acc[M_TILES][N_TILES] = A[rows x K-slice] . V[K-slice x BATCH_TILE], where A is
// the direction's view of R (held on chip for the whole sequence: REG_K_TILES k-tiles of fragments in registers,
// the rest of the warp's K slice as pre-swizzled fragments in shared memory) and V is the recurrent vector of the
// step (h forward, the gate gradients backward) in shared memory, batch-major: V[batch][k] with a padded row.
//
// bf16/fp16: mma.sync m16n8k16 (fp32 accumulate), V fragments by ldmatrix.
// fp32: mma.sync m16n8k8 tf32 in the split form a*b ~ ah*bh + ah*bl + al*bh (hi = tf32 rounding, lo = residue),
//       which keeps products to about fp32 accuracy; single tf32 would lose 3 decimal digits.
// Accumulator element e of tile (m, n) sits at row (lane/4 + 8*(e/2)), batch column (2*(lane%4) + e%2).
//
// Plan macros used (rendered by runtime/codegen.py): DTYPE_*, WARPS_M, WARPS_K, M_TILES, BATCH_TILE, K_TILE,
// REG_K_TILES, GLOBAL_K_TILES, HEAD_BLOCKS, GLOBAL_EXCHANGE, STAGES; the including kernel defines K_DIM and passes
// RecurrentA::load a functor a_value(m_tile, row, k) reading its view of R.
#pragma once

#if !defined(HEAD_DIM) || !defined(NUM_HEADS) || !defined(GATES) || !defined(STATES) || !defined(BATCH_TILE) || \
    !defined(HEAD_BLOCKS) || !defined(WARPS_M) || !defined(WARPS_K) || !defined(K_TILE) ||                   \
    !defined(REG_K_TILES) || !defined(M_TILES) || !defined(BLOCKS_PER_SM) || !defined(VECTOR_BUFFERS) ||         \
    !defined(STAGES) || !defined(GLOBAL_K_TILES) || !defined(GLOBAL_EXCHANGE) || !defined(PLAN_THREADS) ||       \
    !defined(PLAN_SMEM_BYTES)
#error "a plan field is missing: render this kernel through flashrnn_kernels.runtime.codegen.render"
#endif

#include "cells/ops.cuh"
#include "runtime/async_copy.cuh"
#include "runtime/relaxed_words.cuh"

typedef unsigned int u32;

#if !defined(DTYPE_BF16) && !defined(DTYPE_FP16) && !defined(DTYPE_FP32)
#error "the plan must define one of DTYPE_BF16, DTYPE_FP16, DTYPE_FP32"
#endif

#define N_TILES (BATCH_TILE / 8)
#define THREADS (32 * WARPS_M * WARPS_K)
#define ROWS_PER_BLOCK (16 * WARPS_M)
#define K_TILES_PER_WARP (K_DIM / K_TILE / WARPS_K)
#define SMEM_K_TILES (K_TILES_PER_WARP - REG_K_TILES - GLOBAL_K_TILES)
#define VBUF(i) (VECTOR_BUFFERS == 2 ? (i) : 0)  // which step-vector buffer: two alternate, one is reused
// The blocks of a head form a thread-block cluster (sm_90) unless they exchange the step vector through global
// memory (GLOBAL_EXCHANGE: any GPU, all blocks co-resident by a cooperative launch).
#define CLUSTERED (HEAD_BLOCKS > 1 && !GLOBAL_EXCHANGE)
#if CLUSTERED
#define CLUSTER_ATTRIBUTE __cluster_dims__(HEAD_BLOCKS, 1, 1)
#else
#define CLUSTER_ATTRIBUTE
#endif
// V rows are padded by 16 bytes: ldmatrix rows and tf32 fragment words then fall in distinct banks.
#define V_STRIDE (K_DIM + 16 / (int)sizeof(elem_t))

#if defined(DTYPE_FP32)
static_assert(K_TILE == 8, "fp32 uses m16n8k8 tf32 tiles: K_TILE must be 8");
#else
static_assert(K_TILE == 16, "bf16/fp16 use m16n8k16 tiles: K_TILE must be 16");
#endif
static_assert(K_DIM % (K_TILE * WARPS_K) == 0, "K must split evenly into k-tiles over WARPS_K warps");
static_assert(REG_K_TILES >= 0 && GLOBAL_K_TILES >= 0 && SMEM_K_TILES >= 0, "k-tile split out of range");
static_assert(BATCH_TILE % 8 == 0, "BATCH_TILE must be a multiple of the mma n=8");
static_assert(HEAD_DIM == HEAD_BLOCKS * ROWS_PER_BLOCK, "rows must split evenly over the blocks of a head");
static_assert(THREADS == PLAN_THREADS, "thread count differs from the plan");
static_assert(STAGES >= 2, "per-step inputs are staged at least one step ahead");
static_assert(VECTOR_BUFFERS == 1 || VECTOR_BUFFERS == 2, "VECTOR_BUFFERS is 1 or 2");

// FRAGMENT_EXCHANGE (set by the forward kernel): h_t travels between the blocks of a head as B fragments in global
// memory (FragmentExchange below). The k-tile loops over A fragments in shared and global memory then unroll fully,
// so that the fragments held in registers are indexed by constants; otherwise they unroll partly.
#ifndef FRAGMENT_EXCHANGE
#define FRAGMENT_EXCHANGE 0
#endif
static_assert(!FRAGMENT_EXCHANGE || GLOBAL_EXCHANGE, "the fragment exchange goes through global memory");
#define PRAGMA(x) _Pragma(#x)
#if FRAGMENT_EXCHANGE
#define UNROLL_PARTLY(n) PRAGMA(unroll)
#else
#define UNROLL_PARTLY(n) PRAGMA(unroll n)
#endif

#if defined(DTYPE_FP32)
#define A_REGS 8  // tf32 hi[0..3] and lo[4..7] of the four A elements a lane holds
#else
#define A_REGS 4  // four pairs of bf16/fp16
#endif
#define A_VECS (A_REGS / 4)  // 16-byte vectors per lane of a fragment in shared memory
typedef u32 afrag_t[A_REGS];

#if defined(DTYPE_FP32)
__device__ __forceinline__ u32 tf32_round(float x) {
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void split_tf32(float x, u32& hi, u32& lo) {
    hi = tf32_round(x);
    lo = tf32_round(x - __uint_as_float(hi));
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const u32* a, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#else
__device__ __forceinline__ u32 pack2(float lo, float hi) {
#if defined(DTYPE_BF16)
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
#else
    __half2 v = __floats2half2_rn(lo, hi);
#endif
    return *reinterpret_cast<u32*>(&v);
}
#endif

// The A fragment of m-tile `m`, k-tile starting at k0 (rows relative to the warp's 16-row group).
template <typename AValue>
__device__ __forceinline__ void load_a_fragment(afrag_t& f, int m, int k0, AValue a_value) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#if defined(DTYPE_FP32)
    split_tf32(a_value(m, g, k0 + t), f[0], f[4]);
    split_tf32(a_value(m, g + 8, k0 + t), f[1], f[5]);
    split_tf32(a_value(m, g, k0 + t + 4), f[2], f[6]);
    split_tf32(a_value(m, g + 8, k0 + t + 4), f[3], f[7]);
#else
    f[0] = pack2(a_value(m, g, k0 + 2 * t), a_value(m, g, k0 + 2 * t + 1));
    f[1] = pack2(a_value(m, g + 8, k0 + 2 * t), a_value(m, g + 8, k0 + 2 * t + 1));
    f[2] = pack2(a_value(m, g, k0 + 2 * t + 8), a_value(m, g, k0 + 2 * t + 9));
    f[3] = pack2(a_value(m, g + 8, k0 + 2 * t + 8), a_value(m, g + 8, k0 + 2 * t + 9));
#endif
}

#if defined(DTYPE_FP32)
#define B_REGS 4  // tf32 hi[0..1] and lo[2..3] of the two B elements a lane holds
#else
#define B_REGS 2  // two pairs of bf16/fp16
#endif
typedef u32 bfrag_t[B_REGS];

// The B fragment of k-tile k0 and n-tile n of a batch-major vector V (row stride `stride` elements).
__device__ __forceinline__ void load_b_fragment(bfrag_t& b, const elem_t* V, int stride, int k0, int n) {
    const int lane = threadIdx.x & 31;
#if defined(DTYPE_FP32)
    const float* row = V + (n * 8 + (lane >> 2)) * stride + k0;
    split_tf32(row[lane & 3], b[0], b[2]);
    split_tf32(row[(lane & 3) + 4], b[1], b[3]);
#else
    // ldmatrix.x2: lanes 0-7 address k0..k0+7 of batch rows n*8..n*8+7, lanes 8-15 k0+8..k0+15.
    const elem_t* p = V + (n * 8 + (lane & 7)) * stride + k0 + ((lane >> 3) & 1) * 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(smem_addr(p)));
#endif
}

// c += a . b for one m16 x n8 x k-tile (fp32: the three tf32 products of the split form, small terms first).
__device__ __forceinline__ void mma_tile(float (&c)[4], const afrag_t& a, const bfrag_t& b) {
#if defined(DTYPE_FP32)
    mma_tf32(c, a + 4, b[0], b[1]);
    mma_tf32(c, a, b[2], b[3]);
    mma_tf32(c, a, b[0], b[1]);
#else
#if defined(DTYPE_BF16)
#define MMA_AB_TYPE "bf16"
#else
#define MMA_AB_TYPE "f16"
#endif
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32." MMA_AB_TYPE "." MMA_AB_TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// The B fragments of the step vector V in shared memory (batch-major, V_STRIDE) for the k-tiles of a warp's K slice
// starting at k_first: b_of(b, kt, n) loads k-tile kt of the slice, n-tile n.
struct SharedVectorB {
    const elem_t* V;
    int k_first;
    __device__ __forceinline__ void operator()(bfrag_t& b, int kt, int n) const {
        load_b_fragment(b, V, V_STRIDE, k_first + kt * K_TILE, n);
    }
};

// One k-tile (kt of the warp's slice) of the warp's product for every (m-tile, n-tile).
template <typename BSource>
__device__ __forceinline__ void mma_k_tile(float (&acc)[M_TILES][N_TILES][4], const afrag_t (&a)[M_TILES],
                                           const BSource& b_of, int kt) {
#pragma unroll
    for (int n = 0; n < N_TILES; ++n) {
        bfrag_t b;
        b_of(b, kt, n);
#pragma unroll
        for (int m = 0; m < M_TILES; ++m) mma_tile(acc[m][n], a[m], b);
    }
}

// R held by one warp for the whole sequence, k-tile by k-tile: the first REG_K_TILES as register fragments, the
// next SMEM_K_TILES as pre-swizzled fragments in shared memory (16-byte vectors per lane, conflict free), the last
// GLOBAL_K_TILES (only where a head is too large for its cluster's chips) as the same vectors in a global scratch
// buffer that stays L2-resident. A stored fragment is read back only by the lane that wrote it.
struct RecurrentA {
    afrag_t reg[REG_K_TILES > 0 ? REG_K_TILES : 1][M_TILES];
    const uint4* smem;  // this warp's [SMEM_K_TILES][M_TILES][A_VECS][32] vectors
    const uint4* gmem;  // this warp's [GLOBAL_K_TILES][M_TILES][A_VECS][32] vectors

    template <typename AValue>
    __device__ __forceinline__ void load(uint4* smem_all, uint4* gmem_block, int warp, int k_first, AValue a_value) {
        const int lane = threadIdx.x & 31;
        uint4* s_mine = smem_all + (size_t)warp * SMEM_K_TILES * M_TILES * A_VECS * 32;
        uint4* g_mine = gmem_block + (size_t)warp * GLOBAL_K_TILES * M_TILES * A_VECS * 32;
        smem = s_mine;
        gmem = g_mine;
#pragma unroll 1
        for (int kt = REG_K_TILES; kt < K_TILES_PER_WARP; ++kt) {
            const bool shared = kt < REG_K_TILES + SMEM_K_TILES;
            uint4* dst = shared ? s_mine + (kt - REG_K_TILES) * M_TILES * A_VECS * 32
                                : g_mine + (kt - REG_K_TILES - SMEM_K_TILES) * M_TILES * A_VECS * 32;
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) {
                afrag_t f;
                load_a_fragment(f, m, k_first + kt * K_TILE, a_value);
#pragma unroll
                for (int v = 0; v < A_VECS; ++v)
                    dst[(m * A_VECS + v) * 32 + lane] = make_uint4(f[4 * v], f[4 * v + 1], f[4 * v + 2], f[4 * v + 3]);
            }
        }
#pragma unroll
        for (int kt = 0; kt < REG_K_TILES; ++kt)
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) load_a_fragment(reg[kt][m], m, k_first + kt * K_TILE, a_value);
    }

    // Fragment (kt, m) of the shared-memory k-tiles (kt counted from the first of them).
    __device__ __forceinline__ void smem_fragment(afrag_t& a, int kt, int m) const {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int v = 0; v < A_VECS; ++v) {
            const uint4 x = smem[((kt * M_TILES + m) * A_VECS + v) * 32 + lane];
            a[4 * v] = x.x; a[4 * v + 1] = x.y; a[4 * v + 2] = x.z; a[4 * v + 3] = x.w;
        }
    }

    // acc = A . V over this warp's K slice; b_of(b, kt, n) gives V's B fragment of k-tile kt of the slice.
    template <typename BSource>
    __device__ __forceinline__ void multiply(float (&acc)[M_TILES][N_TILES][4], const BSource& b_of) const {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int m = 0; m < M_TILES; ++m)
#pragma unroll
            for (int n = 0; n < N_TILES; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;
#pragma unroll
        for (int kt = 0; kt < REG_K_TILES; ++kt) mma_k_tile(acc, reg[kt], b_of, kt);
        UNROLL_PARTLY(2)
        for (int kt = 0; kt < SMEM_K_TILES; ++kt) {
            afrag_t a[M_TILES];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) smem_fragment(a[m], kt, m);
            mma_k_tile(acc, a, b_of, REG_K_TILES + kt);
        }
        UNROLL_PARTLY(4)
        for (int kt = 0; kt < GLOBAL_K_TILES; ++kt) {
            afrag_t a[M_TILES];
#pragma unroll
            for (int m = 0; m < M_TILES; ++m)
#pragma unroll
                for (int v = 0; v < A_VECS; ++v) {
                    const uint4 x = __ldcg(gmem + ((kt * M_TILES + m) * A_VECS + v) * 32 + lane);
                    a[m][4 * v] = x.x; a[m][4 * v + 1] = x.y; a[m][4 * v + 2] = x.z; a[m][4 * v + 3] = x.w;
                }
            mma_k_tile(acc, a, b_of, REG_K_TILES + SMEM_K_TILES + kt);
        }
    }
};

// Accumulator elements (n-tile n, element e) are shared out over the WARPS_K warps of a row group for the
// pointwise step: element i = 4n + e belongs to warp i % WARPS_K, as its slot i / WARPS_K, and that warp keeps its
// states for the whole sequence.
#define OWNED_SLOTS ((4 * N_TILES + WARPS_K - 1) / WARPS_K)  // elements a warp owns at most
// Warps wk < OWNER_WARPS_K of a row group own an element; with more warps along K than elements, the rest own none.
#define OWNER_WARPS_K (WARPS_K < 4 * N_TILES ? WARPS_K : 4 * N_TILES)

// The element of slot q of warp wk (4 * N_TILES or more: the warp owns no element there). A constant where
// WARPS_K == 1, so that the slots' loops index registers with constants.
__device__ __forceinline__ int owned_element(int q, int wk) { return WARPS_K == 1 ? q : wk + q * WARPS_K; }

// Where slot q's element of warp wk sits in its row group's 16 x 8 * N_TILES accumulator tile: `row` (0..15) and
// batch column `col`; false where the warp owns no element in that slot (the same for the whole warp). Where WARPS_K
// divides the 4 * N_TILES elements, every slot of every warp holds one: the answer is a constant, so that no branch
// separates the slots' cell steps (which then interleave).
__device__ __forceinline__ bool owned_slot(int q, int wk, int& row, int& col) {
    const int i = owned_element(q, wk), e = i & 3, lane = threadIdx.x & 31;
    row = (lane >> 2) + 8 * (e >> 1);
    col = (i >> 2) * 8 + 2 * (lane & 3) + (e & 1);
    constexpr bool every_slot = WARPS_K <= 4 * N_TILES && (4 * N_TILES) % WARPS_K == 0;
    return every_slot || i < 4 * N_TILES;
}

// Where element i's M_TILES partial sums of warp w of row group wm sit in `red`, laid out [warp][n][e][lane][m]: a
// warp stores, and an owner loads from each warp, the M_TILES values of an element together (one 16-byte access
// where M_TILES is 4).
__device__ __forceinline__ float* partials_at(float* red, int w, int wm, int i) {
    return red + (size_t)(w * WARPS_M + wm) * (N_TILES * 4 * 32 * M_TILES) + (i * 32 + (threadIdx.x & 31)) * M_TILES;
}

// Each warp's partial products of its row group into `red` (the k-split reduction's first half; a block barrier
// must follow before `sum_partials`).
__device__ __forceinline__ void store_partials(const float (&acc)[M_TILES][N_TILES][4], float* red, int wm, int wk) {
#pragma unroll
    for (int n = 0; n < N_TILES; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float* mine = partials_at(red, wk, wm, n * 4 + e);
            if constexpr (M_TILES == 4) {
                *reinterpret_cast<float4*>(mine) = make_float4(acc[0][n][e], acc[1][n][e], acc[2][n][e], acc[3][n][e]);
            } else {
#pragma unroll
                for (int m = 0; m < M_TILES; ++m) mine[m] = acc[m][n][e];
            }
        }
}

// The sum over the WARPS_K warps of element i's partial products (its owner calls it after the barrier): every
// warp's values loaded first, then added pairwise (a chain of log2(WARPS_K) additions instead of WARPS_K).
__device__ __forceinline__ void sum_partials(float* red, int wm, int i, float (&sum)[M_TILES]) {
    float part[WARPS_K][M_TILES];
#pragma unroll
    for (int w = 0; w < WARPS_K; ++w) {
        const float* theirs = partials_at(red, w, wm, i);
        if constexpr (M_TILES == 4) {
            const float4 v = *reinterpret_cast<const float4*>(theirs);
            part[w][0] = v.x; part[w][1] = v.y; part[w][2] = v.z; part[w][3] = v.w;
        } else {
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) part[w][m] = theirs[m];
        }
    }
#pragma unroll
    for (int span = 1; span < WARPS_K; span *= 2)
#pragma unroll
        for (int w = 0; w + span < WARPS_K; w += 2 * span)
#pragma unroll
            for (int m = 0; m < M_TILES; ++m) part[w][m] += part[w + span][m];
#pragma unroll
    for (int m = 0; m < M_TILES; ++m) sum[m] = part[0][m];
}

// The full products of slot q's element of warp wk: summed over the row group's warps from `red` (after
// store_partials and a block barrier), or the warp's own accumulators where it is the only one (WARPS_K == 1).
__device__ __forceinline__ void owned_sums(const float (&acc)[M_TILES][N_TILES][4], float* red, int wm, int q, int wk,
                                           float (&sum)[M_TILES]) {
#if WARPS_K > 1
    sum_partials(red, wm, owned_element(q, wk), sum);
#else
#pragma unroll
    for (int m = 0; m < M_TILES; ++m) sum[m] = acc[m][q >> 2][q & 3];  // q is a constant in the slots' loops
#endif
}

// ---- asynchronous staging of per-step inputs (global -> shared, 16-byte chunks, zero fill past the batch) ----

// dst[b][j][0:ROW_BYTES] <- src + b*stride_b + j*stride_j (bytes), for b < BATCH_TILE; rows b >= valid_b are zero.
// The sizes are compile-time so that the loop unrolls into straight-line address arithmetic (it runs every step).
// `thread`: this thread's place in the copy (a kernel may rotate it to keep the copies off some warps).
template <int J_COUNT, int ROW_BYTES>
__device__ __forceinline__ void stage_rows(void* dst, const void* src, long long stride_b, long long stride_j,
                                           int valid_b, int thread = (int)threadIdx.x) {
    static_assert(ROW_BYTES % 16 == 0, "staged rows are whole 16-byte chunks");
    constexpr int CHUNKS = ROW_BYTES / 16, PER_B = J_COUNT * CHUNKS > 0 ? J_COUNT * CHUNKS : 1;
    constexpr int TOTAL = BATCH_TILE * J_COUNT * CHUNKS;
#pragma unroll
    for (int i0 = 0; i0 < TOTAL; i0 += THREADS) {
        const int i = i0 + thread;
        if (TOTAL % THREADS != 0 && i >= TOTAL) break;
        const int b = i / PER_B, rest = i - b * PER_B, j = rest / CHUNKS, c = rest - j * CHUNKS;
        const bool valid = b < valid_b;
        const char* s = static_cast<const char*>(src) + (valid ? b * stride_b + j * stride_j + c * 16 : 0);
        cp_async16(static_cast<char*>(dst) + (b * J_COUNT + j) * ROW_BYTES + c * 16, s, valid);
    }
}

// ---- block / cluster synchronisation and the exchange of a block's slice of the recurrent vector ----

// Every thread of every block of the cluster arrives, then waits for all (sm_90).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The barrier of the blocks that read each other's shared memory: the cluster's, else the block's.
__device__ __forceinline__ void cluster_barrier() {
#if CLUSTERED
    cluster_sync();
#else
    __syncthreads();
#endif
}

// The address in cluster block `rank`'s shared memory of this block's shared address `local` (sm_90).
__device__ __forceinline__ u32 cluster_shared_address(u32 local, int rank) {
    u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    return remote;
}

// Set up `count` mbarriers 8 bytes apart from `bars` for one local arrival per phase (plus the bytes that cluster blocks
// count on them), visible to the cluster's blocks; thread 0 calls it. A block barrier must follow before the first
// arrival: without one, compute-sanitizer's racecheck reports the two as a shared-memory hazard.
__device__ __forceinline__ void init_cluster_mbarriers(u32 bars, int count) {
    for (int i = 0; i < count; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bars + 8 * i) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// This block's arrival on its mbarrier at `bar` for the current phase, which then also waits for `bytes` to land.
__device__ __forceinline__ void mbarrier_expect_bytes(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Wait until this block's mbarrier at `bar` completes its phase of parity `parity`, acquiring what the cluster's
// blocks wrote and counted on it (sm_90: the warp is suspended inside try_wait).
__device__ __forceinline__ void mbarrier_wait_cluster(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done)
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
}

__device__ __forceinline__ int cluster_rank() {
#if CLUSTERED
    u32 r;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return (int)r;
#else
    return 0;
#endif
}

// The 16 bytes at `p` in this block's shared memory to the same place in cluster block `rank`'s, counted as bytes
// arriving on that block's mbarrier at this block's address `bar` (st.async, sm_90).
__device__ __forceinline__ void store_async_remote(const void* p, int rank, u32 bar) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1,%2,%3,%4}, [%5];"
                 ::"r"(cluster_shared_address(smem_addr(p), rank)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w),
                 "r"(cluster_shared_address(bar, rank))
                 : "memory");
}

// The cluster's exchange of the step vector. Fill f of the vector (h_f forward; the gate gradients of iteration f
// backward) lives in buffer VBUF(f) of every block; each block computes the slice [col0, col0 + cols) of every
// batch row (j_count groups of columns j_stride apart) and pushes it to its peers with st.async, which counts the
// bytes on the peer's mbarrier of that buffer. A block then waits on its own mbarrier only: no cluster-wide
// barrier per step, and no release fence that would also wait for the step's global stores.
// Buffer reuse is safe without a barrier: a block pushes fill f + VECTOR_BUFFERS into a peer only after it has
// received fill f + VECTOR_BUFFERS - 1 from that peer, which the peer sent after reading fill f (with one buffer,
// the kernels keep a cluster barrier between the read and the write).
//
// Both exchanges share one interface: init(smem_bars, global_buffer, valid_b, j_count, j_stride, col0, cols, first,
// last) fixes the block's slice and the fills first .. last (each exchange reads the arguments it needs), then
// push(V, fill) and wait(V, fill) once per fill.
struct ClusterExchange {
    u32 bars;    // shared address of VECTOR_BUFFERS mbarriers, 8 bytes apart
    u32 parity;  // bit i: the phase parity of buffer i's next completion
    u32 bytes;   // bytes one fill brings from the peers
    int j_count, j_stride, col0, cols, last;

    // Set up the mbarriers (thread 0) and expect fills first .. first + VECTOR_BUFFERS - 1 up to `last`; every
    // thread calls it. The caller's next cluster barrier publishes them to the peers before any push.
    __device__ __forceinline__ void init(unsigned long long* smem_bars, unsigned long long*, int, int j_count_,
                                         int j_stride_, int col0_, int cols_, int first, int last_) {
        bars = smem_addr(smem_bars);
        parity = 0;
        j_count = j_count_;
        j_stride = j_stride_;
        col0 = col0_;
        cols = cols_;
        last = last_;
        bytes = (u32)((HEAD_BLOCKS - 1) * BATCH_TILE * j_count * cols * (int)sizeof(elem_t));
#if CLUSTERED
        if (threadIdx.x == 0) init_cluster_mbarriers(bars, VECTOR_BUFFERS);
        __syncthreads();
        for (int f = first; f < first + VECTOR_BUFFERS && f <= last; ++f) expect(f);
#endif
    }

    __device__ __forceinline__ void expect(int fill) const {
#if CLUSTERED
        if (threadIdx.x == 0) mbarrier_expect_bytes(bars + 8 * VBUF(fill & 1), bytes);
#endif
    }

    // Send this block's slice of `fill` (V: its buffer) to every peer. Call after a block barrier that follows
    // the slice's writes.
    __device__ __forceinline__ void push(const elem_t* V, int fill) const {
#if CLUSTERED
        const int rank = cluster_rank();
        const int chunks = cols * (int)sizeof(elem_t) / 16, per_b = j_count * chunks;
        const int total = BATCH_TILE * per_b;
        const u32 bar = bars + 8 * VBUF(fill & 1);
        for (int i = threadIdx.x; i < total * (HEAD_BLOCKS - 1); i += THREADS) {
            const int r = i / total, rest = i - r * total;
            const int target = r < rank ? r : r + 1;
            const int b = rest / per_b, jc = rest - b * per_b, j = jc / chunks, c = jc - j * chunks;
            const elem_t* p = V + b * V_STRIDE + j * j_stride + col0 + c * (16 / (int)sizeof(elem_t));
            store_async_remote(p, target, bar);
        }
#endif
    }

    // Wait until every peer's slice of `fill` has landed, then expect the next fill of the same buffer.
    __device__ __forceinline__ void wait(elem_t*, int fill) {
#if CLUSTERED
        const int buf = VBUF(fill & 1);
        mbarrier_wait_cluster(bars + 8 * buf, (parity >> buf) & 1);
        parity ^= 1u << buf;
        if (fill + VECTOR_BUFFERS <= last) expect(fill + VECTOR_BUFFERS);
#endif
    }
};

#if GLOBAL_EXCHANGE
// The backward's exchange of the step vector (gate gradients) through global memory, for blocks that share no
// cluster (the forward's is FragmentExchange below). Every (batch tile, head) owns two slots of BATCH_TILE x
// ROW_WORDS 64-bit words; fill f lives in slot f % 2. A word carries 4 bytes of the vector (two bf16/fp16 elements
// or one fp32) in its low half and the tag f + 1 in its high half, so a reader polls the data itself: one L2 round
// trip per step, no flag and no fence (an aligned 64-bit access is single-copy atomic). The buffer is zeroed before
// the launch (tag 0: no fill yet).
// Slot reuse is safe without a barrier: a block writes fill f + 2 only after it has read every block's slice of
// fill f + 1, which each block wrote after it had read fill f (its loads returned before its block barrier).
#define PAYLOAD_ELEMS (4 / (int)sizeof(elem_t))
#define ROW_WORDS (K_DIM / PAYLOAD_ELEMS)
#define EXCHANGE_LOADS 8  // 16-byte loads (two words) per thread in flight while polling (tiling.EXCHANGE_LOADS)
static_assert(ROW_WORDS % 2 == 0, "word pairs do not straddle batch rows");

struct GlobalExchange {
    unsigned long long* slots;  // this (batch tile, head)'s two slots
    int valid_b, j_count, j_stride, col0, cols;

    __device__ __forceinline__ void init(unsigned long long*, unsigned long long* buffer, int valid_b_, int j_count_,
                                         int j_stride_, int col0_, int cols_, int, int) {
        const int head = blockIdx.x / HEAD_BLOCKS;
        slots = buffer + ((size_t)blockIdx.y * NUM_HEADS + head) * 2 * BATCH_TILE * ROW_WORDS;
        valid_b = valid_b_;
        j_count = j_count_;
        j_stride = j_stride_;
        col0 = col0_;
        cols = cols_;
    }

    // This block's columns: [col0, col0 + cols) of every group of j_stride columns (of the row when j_stride is 0).
    __device__ __forceinline__ bool own(int k) const {
        const int c = (j_stride > 0 ? k % j_stride : k) - col0;
        return c >= 0 && c < cols;
    }

    // Publish this block's slice of `fill` (V: its buffer). Call after a block barrier that follows the writes.
    __device__ __forceinline__ void push(const elem_t* V, int fill) const {
        unsigned long long* dst = slots + (fill & 1) * BATCH_TILE * ROW_WORDS;
        const unsigned long long tag = (unsigned long long)(fill + 1) << 32;
        const int per_j = cols / PAYLOAD_ELEMS, per_b = j_count * per_j;
        for (int i = threadIdx.x; i < valid_b * per_b; i += THREADS) {
            const int b = i / per_b, rest = i - b * per_b, j = rest / per_j, c = rest - j * per_j;
            const int k = j * j_stride + col0 + c * PAYLOAD_ELEMS;
            const u32 payload = *reinterpret_cast<const u32*>(V + b * V_STRIDE + k);
            store_word_relaxed(dst + b * ROW_WORDS + k / PAYLOAD_ELEMS, tag | payload);
        }
    }

    // Copy the other blocks' slices of `fill` into V (this block's buffer of the fill) as their words arrive;
    // batch rows past valid_b become zero. Each thread polls its words in rounds: every stale word of the batch is
    // reloaded at once, so a thread waits about one L2 round trip after the last of them lands (reloading one word
    // at a time would queue a round trip per word). Ends with a block barrier.
    __device__ __forceinline__ void wait(elem_t* V, int fill) const {
        const unsigned long long* src = slots + (fill & 1) * BATCH_TILE * ROW_WORDS;
        const u32 tag = (u32)fill + 1;
        constexpr int PAIRS = BATCH_TILE * ROW_WORDS / 2;
#pragma unroll 1
        for (int p0 = 0; p0 < PAIRS; p0 += EXCHANGE_LOADS * THREADS) {
            ulonglong2 w[EXCHANGE_LOADS];
            u32 stale = 0;  // bit r: pair r is still to be read
#pragma unroll
            for (int r = 0; r < EXCHANGE_LOADS; ++r) {
                const int p = p0 + r * THREADS + (int)threadIdx.x, b = 2 * p / ROW_WORDS;
                w[r] = make_ulonglong2(0, 0);
                if (p < PAIRS && b < valid_b && !own((2 * p - b * ROW_WORDS) * PAYLOAD_ELEMS)) stale |= 1u << r;
            }
            while (stale != 0) {
#pragma unroll
                for (int r = 0; r < EXCHANGE_LOADS; ++r)
                    if (stale & (1u << r)) w[r] = load_words_relaxed(src + 2 * (p0 + r * THREADS + (int)threadIdx.x));
#pragma unroll
                for (int r = 0; r < EXCHANGE_LOADS; ++r)
                    if ((u32)(w[r].x >> 32) == tag && (u32)(w[r].y >> 32) == tag) stale &= ~(1u << r);
            }
#pragma unroll
            for (int r = 0; r < EXCHANGE_LOADS; ++r) {
                const int p = p0 + r * THREADS + (int)threadIdx.x, b = 2 * p / ROW_WORDS;
                const int k = (2 * p - b * ROW_WORDS) * PAYLOAD_ELEMS;
                if (p >= PAIRS || own(k)) continue;
                u32* dst = reinterpret_cast<u32*>(V + b * V_STRIDE + k);
                dst[0] = (u32)w[r].x;  // zero for batch rows past valid_b
                dst[1] = (u32)w[r].y;
            }
        }
        __syncthreads();
    }
};
#if FRAGMENT_EXCHANGE
// The forward's exchange of h_t through global memory as ready-made mma B fragments: nothing passes through shared
// memory and no block barrier guards it. Words are GlobalExchange's (4 payload bytes, tag f + 1 in the high half,
// fill f in slot f % 2, zeroed buffer), in fragment order: for k-tile KT of the head and n-tile n, lane l's words for
// its b[0] and b[1] are adjacent, so a warp polls each of its fragments with one coalesced 16-byte load per lane and
// starts its products as soon as its own K slice has arrived. Each owner of an element of h publishes it from
// registers (bf16/fp16: pairs of units joined by a shuffle).
// Slot reuse is safe as in GlobalExchange: a block writes fill f + 2 after its barrier of step f + 1, when its warps
// (whose K slices together cover every block) have read every block's part of fill f + 1, which each block wrote
// after its own barrier of step f, after all its reads of fill f.
#define WORDS_PER_K_TILE (K_TILE / PAYLOAD_ELEMS)
#define FRAGMENT_LOADS (K_TILES_PER_WARP * N_TILES)  // 16-byte loads per lane and step
static_assert(WORDS_PER_K_TILE == 8, "a k-tile's B fragment is two words per lane");
static_assert(FRAGMENT_LOADS <= 32, "a lane polls at most 32 fragments per step (tiling: k_tiles_per_warp x n_tiles)");

typedef ulonglong2 fragment_words_t[K_TILES_PER_WARP][N_TILES];

struct FragmentExchange {
    unsigned long long* slots;  // this (batch tile, head)'s two slots

    __device__ __forceinline__ void init(unsigned long long* buffer) {
        const int head = blockIdx.x / HEAD_BLOCKS;
        slots = buffer + ((size_t)blockIdx.y * NUM_HEADS + head) * 2 * BATCH_TILE * ROW_WORDS;
    }

    // Publish h of unit o (even units pair with o + 1 for bf16/fp16), batch column col, as part of `fill`. Every lane
    // of the warp calls it for the same (n-tile, element) of its accumulators.
    __device__ __forceinline__ void publish(int fill, int o, int col, elem_t h) const {
        u32 payload;
#if defined(DTYPE_FP32)
        payload = __float_as_uint(h);
        const int w = o;
#else
        const u32 bits = *reinterpret_cast<const unsigned short*>(&h);
        payload = bits | (__shfl_down_sync(0xffffffffu, bits, 4) << 16);  // unit o + 1 sits 4 lanes on
        if (o & 1) return;
        const int w = o >> 1;
#endif
        const int position = ((((w >> 3) * N_TILES + (col >> 3)) * 32 + (col & 7) * 4 + (w & 3)) << 1) | ((w >> 2) & 1);
        store_word_relaxed(slots + (fill & 1) * BATCH_TILE * ROW_WORDS + position,
                           (unsigned long long)(fill + 1) << 32 | payload);
    }

    // This warp's fragments of `fill` for the k-tiles of its K slice (from k_first), polled until all carry its tag.
    __device__ __forceinline__ void fetch(fragment_words_t& w, int fill, int k_first) const {
        const int lane = threadIdx.x & 31;
        const unsigned long long* src = slots + (fill & 1) * BATCH_TILE * ROW_WORDS +
                                        (size_t)(k_first / K_TILE) * N_TILES * 64 + 2 * lane;
        const u32 tag = (u32)fill + 1;
        u32 stale = FRAGMENT_LOADS == 32 ? 0xffffffffu : (1u << FRAGMENT_LOADS) - 1;
        do {
#pragma unroll
            for (int i = 0; i < FRAGMENT_LOADS; ++i)
                if (stale & (1u << i)) w[i / N_TILES][i % N_TILES] = load_words_relaxed(src + 64 * i);
#pragma unroll
            for (int i = 0; i < FRAGMENT_LOADS; ++i) {
                const ulonglong2 v = w[i / N_TILES][i % N_TILES];
                if ((u32)(v.x >> 32) == tag && (u32)(v.y >> 32) == tag) stale &= ~(1u << i);
            }
        } while (stale != 0);
    }
};

// B fragments from the fetched words.
struct FragmentWordsB {
    const fragment_words_t& w;
    __device__ __forceinline__ void operator()(bfrag_t& b, int kt, int n) const {
#if defined(DTYPE_FP32)
        split_tf32(__uint_as_float((u32)w[kt][n].x), b[0], b[2]);
        split_tf32(__uint_as_float((u32)w[kt][n].y), b[1], b[3]);
#else
        b[0] = (u32)w[kt][n].x;
        b[1] = (u32)w[kt][n].y;
#endif
    }
};
#endif  // FRAGMENT_EXCHANGE
typedef GlobalExchange StepExchange;
#else
typedef ClusterExchange StepExchange;
#endif
