// Persistent fused recurrent backward in the forward's tiling, for heads split over more blocks than a cluster holds:
// the gate-gradient recurrence, all T steps in one launch, t = T-1 .. 0.
//
// Block `rank` owns hidden units [rank * ROWS_PER_BLOCK, +ROWS) with all GATES gates of each, and holds the same
// slice of R as in the forward: R[g][o][:] for its units o. Per step it runs the cell's backward step for its own
// units (the recurrent gradient of h comes in as partial sums), keeps the gate gradients dx in shared memory, and
// multiplies them by its slice of R transposed: partial[u][b] = sum over its (g, o) of R[g][o][u] dx_g[o][b], for
// every unit u of the head. The fp32 partial sums travel to the owners of their units through global memory (a
// reduce-scatter), where the next step sums them. Nothing but partial sums is exchanged, and each block reads only
// its own units' share: HEAD_DIM x BATCH_TILE x WARPS_M words per step, where gathering the gate gradients would
// read GATES x HEAD_DIM x BATCH_TILE elements, tagged.
//
// Exchange: each (batch tile, head) owns two slots (fill f in slot f % 2) of HEAD_BLOCKS owner regions of SOURCES
// (one per 16-row group of a block) x ROWS x BATCH_TILE fp32 words (a lane stores its two adjacent batch columns of a
// unit with one 8-byte store). A word's two low mantissa bits carry the tag
// (f + 1) % 4, so a reader polls the data itself (one 16-byte load per 4 words; the buffer is zeroed before the
// launch, tag 0). A slot is rewritten two fills later, only after its writer has read the fill in between, which
// every reader wrote after reading this one (as in engine.cuh's GlobalExchange). Clearing the two low bits of the
// 23-bit mantissa changes a partial sum by less than 2^-21 relative. All blocks are co-resident (cooperative launch).
//
// Pairs (PAIR_BLOCKS 2, sm_90): the blocks of a head pair up in clusters of two that share their gate gradients: each
// block pushes its units' dx into its partner's shared memory (st.async, counted on the partner's mbarrier), and
// holds R[g][o][u] for the pair's units o and half of the units u. Its partial sums then cover the pair's units, so
// each unit gets HEAD_BLOCKS / 2 of them: half the bytes written to and read from L2 per step, for one exchange of
// BATCH_TILE x GATES x ROWS elements between the two blocks. The dx buffer is double buffered: a block pushes fill
// f + 2 into its partner only after it has received fill f + 1 from it, which the partner sent after reading fill f.
// The launch is cooperative and clustered (cuLaunchKernelEx).
//
// Tensors: as backward.cu; exchange_buf: zeroed, plan.exchange_bytes(B) bytes; r_scratch unused (R on chip).

#define K_DIM HEAD_DIM
#include "fused/engine.cuh"
#include "fused/backward_step.cuh"

static_assert(M_TILES == GATES, "partial sums: a warp holds all gates of its 16 units, as in the forward");
static_assert(GLOBAL_EXCHANGE && HEAD_BLOCKS > 1 && GLOBAL_K_TILES == 0 && VECTOR_BUFFERS == 1,
              "partial sums: a split head, R on chip, one local gate-gradient buffer, exchange through global memory");

static_assert(PAIR_BLOCKS == 1 || (PAIR_BLOCKS == 2 && HEAD_BLOCKS % 2 == 0), "pairs: an even number of blocks");
#if PAIR_BLOCKS > 1 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "pairs of blocks share their gate gradients through a cluster: sm_90 or newer"
#endif
#define PAIR_ROWS (PAIR_BLOCKS * ROWS_PER_BLOCK)    // units o whose gate gradients a block multiplies
#define K_SPAN (PAIR_BLOCKS * 16 / K_TILE)         // k-tiles of A per 16-unit m-tile of R^T: the pair's row groups
#define T_TILES (K_TILES_PER_WARP / K_SPAN)        // m16 tiles of R^T (units u) per warp
#define SOURCES (HEAD_BLOCKS / PAIR_BLOCKS * WARPS_M)  // partial sums per unit: one per 16-row group of a pair
#define DX_STRIDE (GATES * PAIR_ROWS + 16 / (int)sizeof(elem_t))  // dx[b][g * PAIR_ROWS + member * ROWS + r], padded
#define DX_BUFFERS (PAIR_BLOCKS > 1 ? 2 : 1)
#define DX_CHUNKS (BATCH_TILE * GATES * ROWS_PER_BLOCK * (int)sizeof(elem_t) / 16)  // 16-byte chunks of a block's dx
#define ELEMS ((ROWS_PER_BLOCK * BATCH_TILE + THREADS - 1) / THREADS)  // pointwise elements per thread
#define QPS (BATCH_TILE * ROWS_PER_BLOCK / 4)                        // 16-byte loads of one source's share
#define QUADS (SOURCES * QPS)                                         // 16-byte loads of a block's share
// Every load of a thread holds the same unit and batch columns (THREADS is a multiple of QPS): the thread sums its
// loads in registers, and PARTS partial sums per element are left to add.
#define PARTS (THREADS / QPS < SOURCES ? THREADS / QPS : SOURCES)
static_assert(THREADS % QPS == 0, "partial sums: the threads split into whole groups of one source's share");
static_assert(K_TILES_PER_WARP % K_SPAN == 0, "a warp's units cover whole 16-row tiles of R^T");

// Shared memory layout (bytes): R fragments, the step's dx (the pair's, double buffered, in pairs), staged per-step
// inputs, received partial sums, the pair's mbarriers.
#define SM_RFRAG 0
#define SM_DX (SM_RFRAG + WARPS_M * WARPS_K * SMEM_K_TILES * M_TILES * 32 * 4 * A_REGS)
#define SM_STAGE (SM_DX + DX_BUFFERS * BATCH_TILE * DX_STRIDE * (int)sizeof(elem_t))
#define SM_RECV (SM_STAGE + STAGE_BYTES)
#define SM_BARS (SM_RECV + PARTS * QPS * 16)  // pairs: one mbarrier per dx buffer
#define SM_TOTAL (SM_BARS + (PAIR_BLOCKS > 1 ? 16 : 0))
static_assert(SM_TOTAL == PLAN_SMEM_BYTES, "shared memory layout differs from the plan");

// Two adjacent words, each tagged.
__device__ __forceinline__ void store_tagged2(u32* p, float v0, float v1, u32 tag) {
    const u32 w0 = (__float_as_uint(v0) & ~3u) | tag, w1 = (__float_as_uint(v1) & ~3u) | tag;
    asm volatile("st.relaxed.gpu.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(w0), "r"(w1) : "memory");
}

__device__ __forceinline__ uint4 load_quad_relaxed(const u32* p) {
    uint4 v;
    asm volatile("ld.relaxed.gpu.global.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

__device__ __forceinline__ bool tagged(uint4 v, u32 tag) {
    return ((v.x & 3u) == tag) & ((v.y & 3u) == tag) & ((v.z & 3u) == tag) & ((v.w & 3u) == tag);
}

// acc[i] = (rows of R^T: the warp's units u_first + 16 i ..) . dx (the warp's 16-row group of each block of the pair,
// all gates). Slot (kt, m) of the fragments holds the transposed tile: units u of m-tile kt / K_SPAN, gate m, units o
// of k-tile kt % K_SPAN of the pair's groups (o_in below).
__device__ __forceinline__ void multiply_transposed(float (&acc)[T_TILES][N_TILES][4], const RecurrentA& A,
                                                    const elem_t* dx, int wm) {
    bfrag_t b[GATES][K_SPAN][N_TILES];
#pragma unroll
    for (int m = 0; m < GATES; ++m)
#pragma unroll
        for (int s = 0; s < K_SPAN; ++s)
#pragma unroll
            for (int n = 0; n < N_TILES; ++n)
                load_b_fragment(b[m][s][n], dx, DX_STRIDE, m * PAIR_ROWS + s * K_TILE / 16 * ROWS_PER_BLOCK +
                                                               wm * 16 + s * K_TILE % 16, n);
#pragma unroll
    for (int i = 0; i < T_TILES; ++i)
#pragma unroll
        for (int n = 0; n < N_TILES; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][n][e] = 0.f;
#pragma unroll
    for (int kt = 0; kt < K_TILES_PER_WARP; ++kt)
#pragma unroll
        for (int m = 0; m < GATES; ++m) {
            afrag_t a;
            if (kt < REG_K_TILES) {
#pragma unroll
                for (int v = 0; v < A_REGS; ++v) a[v] = A.reg[kt < REG_K_TILES ? kt : 0][m][v];
            } else {
                A.smem_fragment(a, kt - REG_K_TILES, m);
            }
#pragma unroll
            for (int n = 0; n < N_TILES; ++n) mma_tile(acc[kt / K_SPAN][n], a, b[m][kt % K_SPAN][n]);
        }
}

#if PAIR_BLOCKS > 1
#define PAIR_CLUSTER __cluster_dims__(PAIR_BLOCKS, 1, 1)
#else
#define PAIR_CLUSTER
#endif

extern "C" __global__ void PAIR_CLUSTER __launch_bounds__(THREADS, BLOCKS_PER_SM)
flashrnn_fused_backward(FUSED_BACKWARD_PARAMETERS) {
    extern __shared__ __align__(16) unsigned char smem[];
    elem_t* dxs = reinterpret_cast<elem_t*>(smem + SM_DX);
    float* recv = reinterpret_cast<float*>(smem + SM_RECV);  // [PARTS][ROWS][BATCH_TILE]

    constexpr int G = GATES, S = STATES, DH = HEAD_DIM, NH = NUM_HEADS, ROWS = ROWS_PER_BLOCK;
    const int head = blockIdx.x / HEAD_BLOCKS, rank = blockIdx.x % HEAD_BLOCKS;
    const int b0 = blockIdx.y * BATCH_TILE, valid_b = min(BATCH_TILE, B - b0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp % WARPS_M, wk = warp / WARPS_M;
    const int u_block = rank * ROWS, k_first = wk * K_TILES_PER_WARP * K_TILE;
    const int member = rank % PAIR_BLOCKS, pair_first = rank - member;  // place in the pair, its first block's rank
    const int u_first = member * (DH / PAIR_BLOCKS) + wk * T_TILES * 16;  // the warp's first unit u

    // Slot (kt, m) element (row, k) of the fragments, kk = k - k_first: R[m][head][o][u] with u = u_first +
    // 16 (kt / K_SPAN) + row and o the unit o_in = (kt % K_SPAN) * K_TILE + kk % K_TILE of the pair's row groups wm
    // (group o_in / 16 of the pair's blocks).
    RecurrentA A;
    A.load(reinterpret_cast<uint4*>(smem + SM_RFRAG), r_scratch, warp, k_first, [&](int m, int row, int k) {
        const int kk = k - k_first, kt = kk / K_TILE, o_in = kt % K_SPAN * K_TILE + kk % K_TILE;
        const int o = (pair_first + o_in / 16) * ROWS + wm * 16 + o_in % 16, u = u_first + 16 * (kt / K_SPAN) + row;
        return to_float(R[((size_t)(m * NH + head) * DH + o) * DH + u]);
    });

    // Pointwise element i = threadIdx.x + j * THREADS: unit r = i % ROWS, batch column i / ROWS. dy: the gradients
    // of the states after the step being processed, starting from the last states' gradient.
    float dy[ELEMS][S];
#pragma unroll
    for (int j = 0; j < ELEMS; ++j) {
        const int i = threadIdx.x + j * THREADS, r = i % ROWS, col = i / ROWS;
#pragma unroll
        for (int k = 0; k < S; ++k)
            dy[j][k] = col < valid_b && i < ROWS * BATCH_TILE
                           ? to_float(d_last[((size_t)(k * B + b0 + col) * NH + head) * DH + u_block + r])
                           : 0.f;
    }

    BackwardStep inputs;
    inputs.init(smem + SM_STAGE, states, h_out, d_h, gates_save, states_save, d_gates, h_prev, d_bias_rows, B, T,
                b0, valid_b, head, u_block);
#if PAIR_BLOCKS > 1
    // dx buffer f % 2 receives the partner's dx of iteration f; its mbarrier expects one arrival (this block's thread
    // 0, with the byte count) and the partner's bytes per phase. Fills 0 and 1 are expected before the cluster
    // barrier, after which the partner may push.
    const u32 bars = smem_addr(smem + SM_BARS);
    const int partner = member ^ 1;
    constexpr u32 DX_BYTES = DX_CHUNKS * 16;
    if (threadIdx.x == 0) init_cluster_mbarriers(bars, 2);
    __syncthreads();
    auto expect = [&](int fill) {
        if (threadIdx.x == 0 && fill < T) mbarrier_expect_bytes(bars + 8 * (fill & 1), DX_BYTES);
    };
    expect(0);
    expect(1);
    cluster_sync();
#else
    __syncthreads();
#endif

    constexpr int SLOT = HEAD_BLOCKS * SOURCES * BATCH_TILE * ROWS;  // words of one fill
    u32* slots = reinterpret_cast<u32*>(exchange_buf) + ((size_t)blockIdx.y * NH + head) * 2 * SLOT;
    const int source = rank / PAIR_BLOCKS * WARPS_M + wm;

    // Iteration `it` processes step t = T-1-it with the recurrent gradient summed from fill it-1 (none at it = 0);
    // iteration T only adds it to the initial state's gradient. What does not feed the next fill (staging inputs,
    // writing the gate gradients) is issued after this block's partial sums, while their round trip runs.
    for (int it = 0; it <= T; ++it) {
        const int t = T - 1 - it;
        elem_t* dx_it = dxs + (DX_BUFFERS > 1 ? it & 1 : 0) * BATCH_TILE * DX_STRIDE;  // this iteration's dx
        elem_t* dx_mine = dx_it + member * ROWS;                                       // this block's units
#pragma unroll
        for (int j = 0; j < ELEMS; ++j) {
            const int i = threadIdx.x + j * THREADS, r = i % ROWS, col = i / ROWS;
            if (ELEMS * THREADS != ROWS * BATCH_TILE && i >= ROWS * BATCH_TILE) break;
            float dh_rec = 0.f;
            if (it > 0)
#pragma unroll
                for (int p = 0; p < PARTS; ++p) dh_rec += recv[(p * ROWS + r) * BATCH_TILE + col];
            if (it == T) {
                if (col < valid_b)
#pragma unroll
                    for (int k = 0; k < S; ++k)
                        d_states[((size_t)(k * B + b0 + col) * NH + head) * DH + u_block + r] =
                            from_float<elem_t>(dy[j][k] + (k == 0 ? dh_rec : 0.f));
                continue;
            }
            float dx[G];
            inputs.step(it % STAGES, r, col, dh_rec, dy[j], dx);
#pragma unroll
            for (int g = 0; g < G; ++g) dx_mine[col * DX_STRIDE + g * PAIR_ROWS + r] = from_float<elem_t>(dx[g]);
        }
        if (it == T) break;
        __syncthreads();  // dx complete
#if PAIR_BLOCKS > 1
        {  // this block's dx to the same place in the partner's buffer, then the partner's dx from it
            const u32 bar = bars + 8 * (it & 1);
            constexpr int PER_ROW = ROWS * (int)sizeof(elem_t) / 16;  // chunks of one (column, gate) run
#pragma unroll
            for (int c = threadIdx.x; c < DX_CHUNKS; c += THREADS) {
                const int col = c / (G * PER_ROW), rest = c % (G * PER_ROW);
                store_async_remote(dx_mine + col * DX_STRIDE + rest / PER_ROW * PAIR_ROWS +
                                       rest % PER_ROW * (16 / (int)sizeof(elem_t)), partner, bar);
            }
            mbarrier_wait_cluster(bar, (u32)(it >> 1) & 1u);
            expect(it + 2);
        }
#endif

        // This warp's partial sums of R^T dx to the owners of their units. Tile i holds the 16 units from
        // u_first + 16 i (group g0 + i), all of one owner (ROWS is a multiple of 16); a lane stores units
        // lane / 4 and lane / 4 + 8 of it.
        float acc[T_TILES][N_TILES][4];
        multiply_transposed(acc, A, dx_it, wm);
        const u32 tag = (u32)(it + 1) & 3u;
        u32* fill = slots + (it & 1) * SLOT;
        const int g0 = u_first / 16, owner0 = g0 / WARPS_M, r00 = (g0 - owner0 * WARPS_M) * 16;
        u32* const p0 = fill + ((owner0 * SOURCES + source) * ROWS + r00) * BATCH_TILE + (lane >> 2) * BATCH_TILE +
                        2 * (lane & 3);
#pragma unroll
        for (int i = 0; i < T_TILES; ++i) {
            const int owner = (g0 + i) / WARPS_M, r0 = (g0 + i - owner * WARPS_M) * 16;
            u32* p = p0 + ((owner - owner0) * SOURCES * ROWS + r0 - r00) * BATCH_TILE;  // i * a constant: WARPS_M 1
#pragma unroll
            for (int n = 0; n < N_TILES; ++n)
#pragma unroll
                for (int h = 0; h < 2; ++h)  // elements 2h, 2h + 1: batch columns col, col + 1 of unit g + 8h
                    store_tagged2(p + 8 * h * BATCH_TILE + n * 8, acc[i][n][2 * h], acc[i][n][2 * h + 1], tag);
        }

        // Every source's partial sums of this block's units, as they arrive: each round issues its loads together,
        // then reloads the stale ones until all carry the fill's tag. The first round's loads are in flight while
        // the next inputs are staged and this step's gate gradients written.
        const u32* share = fill + (size_t)rank * SOURCES * BATCH_TILE * ROWS + 4 * threadIdx.x;
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int q0 = 0; q0 < QUADS; q0 += EXCHANGE_LOADS * THREADS) {
            auto present = [&](int l) {  // a constant except in a load that ends past the share
                return q0 + l * THREADS < QUADS &&
                       (q0 + (l + 1) * THREADS <= QUADS || q0 + l * THREADS + (int)threadIdx.x < QUADS);
            };
            uint4 w[EXCHANGE_LOADS];
#pragma unroll
            for (int l = 0; l < EXCHANGE_LOADS; ++l)
                if (present(l)) w[l] = load_quad_relaxed(share + 4 * (q0 + l * THREADS));
            if (q0 == 0) {
                inputs.stage_iteration(it + STAGES - 1);
                inputs.store_gate_grads(t, dx_mine, DX_STRIDE, PAIR_ROWS);
                inputs.store_h_prev(it, t);  // its stage is refilled after this iteration's last barrier
            }
            while (true) {
                bool all = true;
#pragma unroll
                for (int l = 0; l < EXCHANGE_LOADS; ++l)
                    if (present(l)) all &= tagged(w[l], tag);
                if (all) break;
#pragma unroll
                for (int l = 0; l < EXCHANGE_LOADS; ++l)
                    if (present(l) && !tagged(w[l], tag)) w[l] = load_quad_relaxed(share + 4 * (q0 + l * THREADS));
            }
#pragma unroll
            for (int l = 0; l < EXCHANGE_LOADS; ++l) {
                if (!present(l)) continue;
                sum.x += __uint_as_float(w[l].x & ~3u); sum.y += __uint_as_float(w[l].y & ~3u);
                sum.z += __uint_as_float(w[l].z & ~3u); sum.w += __uint_as_float(w[l].w & ~3u);
            }
        }
        if (threadIdx.x < PARTS * QPS) reinterpret_cast<float4*>(recv)[threadIdx.x] = sum;
        cp_async_wait_group<STAGES - 2>();  // inputs of the next iteration have landed
        __syncthreads();
    }
    inputs.store_bias_sums();
#if PAIR_BLOCKS > 1
    cluster_sync();  // no block leaves while its partner may still reach its shared memory
#endif
}
