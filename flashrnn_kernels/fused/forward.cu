// Persistent fused recurrent forward: one launch runs all T steps.
//
// Grid: x = head * HEAD_BLOCKS + rank, y = batch tile. The HEAD_BLOCKS blocks of a (head, batch tile) share it;
// block `rank` owns hidden units [rank * ROWS_PER_BLOCK, +ROWS_PER_BLOCK) with all GATES gates of each, so its
// warps' accumulators hold every gate of the same (unit, batch) elements and the cell step runs in registers.
// R stays on chip for the whole sequence; every state stays in the registers of the lane that owns it. h_t reaches the
// products through shared memory (double buffered: one barrier per step): inside a cluster each block pushes its
// slice to the others with st.async and waits on its own mbarrier (engine.cuh's ClusterExchange). With
// GLOBAL_EXCHANGE, h_t travels through global memory as ready-made B fragments that each warp polls for its own K
// slice (FragmentExchange): no shared memory and one block barrier per step (the k-split reduction's).
// Wx of step t+1 is staged by cp.async STAGES-1 steps ahead. Each lane writes its h_t elements to global memory
// from registers.
//
// Tensors (elements of elem_t unless noted; all contiguous):
//   r_scratch: L2-resident home of the GLOBAL_K_TILES fragments, plan.scratch_bytes(B) bytes (null when 0)
//   exchange_buf: zeroed, plan.exchange_bytes(B) bytes (null without GLOBAL_EXCHANGE)
//   Wx [B, T, G, NH, DH]   R [G, NH, DH, DH] (gate, head, out, in)   bias [G, NH, DH]   states [S, B, NH, DH]
//   h_out [B, T, NH, DH]   last_states [S, B, NH, DH]
//   gates_save fp32 [B, T, G, NH, DH] and states_save fp32 [S-1, B, T+1, NH, DH] (index 0: initial states):
//   what the backward pass reads; both null for inference.

#define K_DIM HEAD_DIM
#define FRAGMENT_EXCHANGE GLOBAL_EXCHANGE  // through global memory, h_t travels as B fragments
#include "fused/engine.cuh"

static_assert(M_TILES == GATES, "forward: a warp owns all gates of its 16 hidden units (M_TILES == GATES)");

// Shared memory layout (bytes). Through global memory: no step vector, and the k-split partial sums double
// buffered (no barrier separates one step's reads of them from the next step's writes).
#define SM_RFRAG 0
#define SM_V (SM_RFRAG + WARPS_M * WARPS_K * SMEM_K_TILES * M_TILES * 32 * 4 * A_REGS)
#define SM_WX (SM_V + (FRAGMENT_EXCHANGE ? 0 : VECTOR_BUFFERS) * BATCH_TILE * V_STRIDE * (int)sizeof(elem_t))
#define SM_RED (SM_WX + STAGES * BATCH_TILE * GATES * ROWS_PER_BLOCK * (int)sizeof(elem_t))
#define RED_FLOATS ((WARPS_K > 1 ? WARPS_K : 0) * WARPS_M * M_TILES * N_TILES * 4 * 32)
#define SM_BARS (SM_RED + (FRAGMENT_EXCHANGE ? 2 : 1) * RED_FLOATS * 4)
#define SM_TOTAL (SM_BARS + 16)  // VECTOR_BUFFERS <= 2 exchange mbarriers, or the owners' mbarrier (OWNER_GATE)
static_assert(SM_BARS % 8 == 0, "mbarriers are 8-byte aligned");
static_assert(SM_TOTAL == PLAN_SMEM_BYTES, "shared memory layout differs from the plan");
// Through global memory with more warps along K than accumulator elements per lane, some warps own no element: each
// step they wait on an mbarrier until every owner warp has published h_t (the owners only arrive), since polls for
// it issued earlier would find stale words.
#define OWNER_GATE (FRAGMENT_EXCHANGE && WARPS_K > OWNER_WARPS_K)
// A warp with a single owned slot reads bias + Wx of step t before the step's barrier, while its polls are in flight,
// instead of after it next to the partial sums (those 2-byte loads conflict on shared-memory banks): Wx of step t+1
// is then awaited before the barrier of step t. Through global memory only (the slot's cell step follows the barrier).
#define WX_BEFORE_BARRIER (FRAGMENT_EXCHANGE && OWNED_SLOTS == 1 && STAGES >= 3)

extern "C" __global__ void CLUSTER_ATTRIBUTE __launch_bounds__(THREADS, BLOCKS_PER_SM)
flashrnn_fused_forward(const elem_t* __restrict__ Wx, const elem_t* __restrict__ R, const elem_t* __restrict__ bias,
                       const elem_t* __restrict__ states, elem_t* __restrict__ h_out,
                       elem_t* __restrict__ last_states, float* __restrict__ gates_save,
                       float* __restrict__ states_save, uint4* __restrict__ r_scratch,
                       unsigned long long* __restrict__ exchange_buf, int B, int T) {
    extern __shared__ __align__(16) unsigned char smem[];
    uint4* rfrag = reinterpret_cast<uint4*>(smem + SM_RFRAG);
    elem_t* wx_stage = reinterpret_cast<elem_t*>(smem + SM_WX);
    float* red = reinterpret_cast<float*>(smem + SM_RED);
#if !FRAGMENT_EXCHANGE
    elem_t* V = reinterpret_cast<elem_t*>(smem + SM_V);
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem + SM_BARS);
#endif

    constexpr int G = GATES, S = STATES, DH = HEAD_DIM, NH = NUM_HEADS, ROWS = ROWS_PER_BLOCK;
    const int head = blockIdx.x / HEAD_BLOCKS, rank = blockIdx.x % HEAD_BLOCKS;
    const int b0 = blockIdx.y * BATCH_TILE, valid_b = min(BATCH_TILE, B - b0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp % WARPS_M, wk = warp / WARPS_M;
    const int o_block = rank * ROWS, o_warp = o_block + wm * 16, k_first = wk * K_TILES_PER_WARP * K_TILE;
    const size_t unit_stride = (size_t)NH * DH;  // elements between gates / states at one (b, t)

    // A[m][row][k] = R[gate m][head][o_warp + row][k]
    RecurrentA A;
    uint4* scratch = r_scratch + (size_t)(blockIdx.y * gridDim.x + blockIdx.x) * WARPS_M * WARPS_K * GLOBAL_K_TILES *
                                       M_TILES * A_VECS * 32;
    A.load(rfrag, scratch, warp, k_first, [&](int m, int row, int k) {
        return to_float(R[((size_t)(m * NH + head) * DH + o_warp + row) * DH + k]);
    });

    float bias_r[G][2];
    float st[S][OWNED_SLOTS];  // the states of the warp's owned elements (h as rounded to elem_t), by slot
#pragma unroll
    for (int j = 0; j < G; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) bias_r[j][h] = to_float(bias[(size_t)(j * NH + head) * DH + o_warp + (lane >> 2) + 8 * h]);
    // Where slot q's element sits: unit o (half h of the bias rows) and batch column col; false where the warp owns
    // no element in that slot.
    auto slot_at = [&](int q, int& o, int& h, int& col) {
        int row;
        const bool mine = owned_slot(q, wk, row, col);
        h = (owned_element(q, wk) & 3) >> 1;  // row >> 3, as a constant where WARPS_K == 1
        o = o_warp + row;
        return mine;
    };
#pragma unroll
    for (int q = 0; q < OWNED_SLOTS; ++q) {
        int o, h, col;
        const bool mine = slot_at(q, o, h, col);
#pragma unroll
        for (int k = 0; k < S; ++k) {
            const bool present = mine && col < valid_b;
            const float v = present ? to_float(states[((size_t)(k * B + b0 + col) * NH + head) * DH + o]) : 0.f;
            st[k][q] = v;
            if (k > 0 && states_save != nullptr && present)
                states_save[(((size_t)(k - 1) * B + b0 + col) * (T + 1)) * unit_stride + (size_t)head * DH + o] = v;
        }
    }
#if FRAGMENT_EXCHANGE
    // h_0 as fill 0 of the exchange: each owner publishes its elements (padding batches are zero).
    FragmentExchange exchange;
    exchange.init(exchange_buf);
#if OWNER_GATE
    const u32 gate = smem_addr(smem + SM_BARS);  // one arrival per owner warp and step; used after the next barrier
    if (threadIdx.x == 0)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(gate), "n"(OWNER_WARPS_K * WARPS_M) : "memory");
#endif
#pragma unroll
    for (int q = 0; q < OWNED_SLOTS; ++q) {
        int o, h, col;
        if (slot_at(q, o, h, col)) exchange.publish(0, o, col, from_float<elem_t>(st[0][q]));
    }
#else
    // h_0 -> V[0] (every block of a cluster reads the whole vector); padding batches are zero.
    for (int i = threadIdx.x; i < BATCH_TILE * DH; i += THREADS) {
        const int b = i / DH, k = i - b * DH;
        V[b * V_STRIDE + k] = b < valid_b ? states[((size_t)(b0 + b) * NH + head) * DH + k] : from_float<elem_t>(0.f);
    }
#endif

    const long long wx_stride_b = (long long)T * G * unit_stride * sizeof(elem_t);
    constexpr int WX_ROW_BYTES = ROWS * (int)sizeof(elem_t);
    const elem_t* wx_base = Wx + ((size_t)b0 * T * G) * unit_stride + (size_t)head * DH + o_block;
    constexpr int WX_TILE = BATCH_TILE * G * ROWS;
    // Wx of step t lives in stage t % STAGES; steps are staged STAGES-1 ahead (one commit group per step). The copies
    // start at the first warp that owns no accumulator element (warps_k > 4 n-tiles), off the pointwise step's path.
    constexpr int IDLE_FROM = WARPS_K > OWNER_WARPS_K ? OWNER_WARPS_K * WARPS_M * 32 : 0;
    const int stage_thread = ((int)threadIdx.x + THREADS - IDLE_FROM) % THREADS;
    auto stage_wx = [&](int t) {
        if (t < T)
            stage_rows<G, WX_ROW_BYTES>(wx_stage + (t % STAGES) * WX_TILE, wx_base + (size_t)t * G * unit_stride,
                                        wx_stride_b, unit_stride * sizeof(elem_t), valid_b, stage_thread);
        cp_async_commit();
    };
#pragma unroll 1
    for (int t = 0; t < STAGES - 1; ++t) stage_wx(t);
    cp_async_wait_group<WX_BEFORE_BARRIER ? STAGES - 3 : STAGES - 2>();
#if !FRAGMENT_EXCHANGE
    ClusterExchange exchange;  // h_1 .. h_T between the blocks of a head
    exchange.init(bars, exchange_buf, valid_b, 1, 0, o_block, ROWS, 1, T);
#endif
    cluster_barrier();

    const size_t h_stride_b = (size_t)T * unit_stride;
    for (int t = 0; t < T; ++t) {
        const elem_t* wx = wx_stage + (t % STAGES) * WX_TILE;
        float acc[M_TILES][N_TILES][4];
        float wx_bias[G];  // bias + Wx of the single owned slot (WX_BEFORE_BARRIER)
        auto bias_plus_wx = [&](int j, int h, int col, int row) {
            return (h ? bias_r[j][1] : bias_r[j][0]) + to_float(wx[(col * G + j) * ROWS + wm * 16 + row]);
        };
#if WX_BEFORE_BARRIER
        {
            int o, h, col;
            if (slot_at(0, o, h, col))
#pragma unroll
                for (int j = 0; j < G; ++j) wx_bias[j] = bias_plus_wx(j, h, col, o - o_warp);
        }
#endif
#if FRAGMENT_EXCHANGE
        {
            fragment_words_t words;
            exchange.fetch(words, t, k_first);
#if !WX_BEFORE_BARRIER
            cp_async_wait_group<STAGES - 2>();  // Wx of step t has landed (visible to all after the next barrier)
#endif
            A.multiply(acc, FragmentWordsB{words});
        }
        float* partials = red + (t & 1) * RED_FLOATS;
#if WARPS_K > 1
        store_partials(acc, partials, wm, wk);
#endif
#if WX_BEFORE_BARRIER
        cp_async_wait_group<STAGES - 3>();  // Wx of step t+1 has landed (visible to all after the barrier)
#endif
        __syncthreads();  // the partial sums are stored; every thread has read Wx of step t-1
        stage_wx(t + STAGES - 1);  // into the stage of step t-1
#else
        const int cur = t & 1;
        const elem_t* Vc = V + VBUF(cur) * BATCH_TILE * V_STRIDE;
        elem_t* Vn = V + VBUF(cur ^ 1) * BATCH_TILE * V_STRIDE;
        float* partials = red;
        stage_wx(t + STAGES - 1);
        A.multiply(acc, SharedVectorB{Vc, k_first});
#if WARPS_K > 1
        store_partials(acc, partials, wm, wk);
        __syncthreads();
#endif
#if VECTOR_BUFFERS == 1
        cluster_barrier();  // every block of the cluster has read the vector before it is overwritten
#endif
#endif

        // The pre-activations of owned slot q (products + bias + Wx) into x[q]. With several slots, all of them are
        // computed before any cell step: loads that follow a slot's stores of h into shared memory would wait for
        // them, which chained the slots one after another. A single slot keeps them inside its branch (split out,
        // the 1 x 768 forward took 1-3% longer).
        float x[OWNED_SLOTS][G];
        auto pre_activations = [&](int q) {
            int o, h, col;
            if (!slot_at(q, o, h, col)) return;
            const int row = o - o_warp;
            float sum[M_TILES];
            owned_sums(acc, partials, wm, q, wk, sum);
#pragma unroll
            for (int j = 0; j < G; ++j)  // bias + Wx first: that addition need not wait for the sums
                x[q][j] = sum[j] + (WX_BEFORE_BARRIER ? wx_bias[j] : bias_plus_wx(j, h, col, row));
        };
        if constexpr (OWNED_SLOTS > 1)
#pragma unroll
            for (int q = 0; q < OWNED_SLOTS; ++q) pre_activations(q);
        // The pointwise step of each owned element: one branch per slot (the slot's element is warp-uniform).
#pragma unroll
        for (int q = 0; q < OWNED_SLOTS; ++q) {
            int o, h, col;
            if (!slot_at(q, o, h, col)) continue;
            if constexpr (OWNED_SLOTS == 1) pre_activations(q);
            float s[S], y[S], a[G];
#pragma unroll
            for (int k = 0; k < S; ++k) s[k] = st[k][q];
            cell_forward(x[q], s, y, a);
            const elem_t h_new = round_to_storage<elem_t>(y[0], y[0]);
#pragma unroll
            for (int k = 0; k < S; ++k) st[k][q] = y[k];
#if FRAGMENT_EXCHANGE
            if (t + 1 < T) exchange.publish(t + 1, o, col, h_new);
#else
            Vn[col * V_STRIDE + o] = h_new;
#endif
            // h_t straight from registers: no shared-memory read-back on the step's critical path
            if (col < valid_b)
                h_out[(size_t)(b0 + col) * h_stride_b + (size_t)t * unit_stride + head * DH + o] = h_new;
            if (gates_save != nullptr && col < valid_b) {
                const size_t bt = (size_t)(b0 + col) * T + t;
#pragma unroll
                for (int j = 0; j < G; ++j) gates_save[(bt * G + j) * unit_stride + (size_t)head * DH + o] = a[j];
#pragma unroll
                for (int k = 1; k < S; ++k) {
                    const size_t row_bt = ((size_t)(k - 1) * B + b0 + col) * (T + 1) + t + 1;
                    states_save[row_bt * unit_stride + (size_t)head * DH + o] = y[k];
                }
            }
        }
#if OWNER_GATE
        if (wk < OWNER_WARPS_K) {
            if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(gate) : "memory");
        } else {
            u32 done = 0;
            while (!done)  // sm_90 suspends the warp inside try_wait; sm_80 has the non-blocking test_wait
                asm volatile("{\n.reg .pred p;\n"
#if __CUDA_ARCH__ >= 900
                             "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
#else
                             "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
#endif
                             "selp.u32 %0, 1, 0, p;\n}"
                             : "=r"(done)
                             : "r"(gate), "r"((u32)t & 1u)
                             : "memory");
        }
#endif
#if !FRAGMENT_EXCHANGE
        cp_async_wait_group<STAGES - 2>();  // Wx of step t+1 has landed
        __syncthreads();
#if HEAD_BLOCKS > 1
        exchange.push(Vn, t + 1);
        exchange.wait(Vn, t + 1);
#endif
#endif
    }

    // The last states, from the registers of their owners.
#pragma unroll
    for (int q = 0; q < OWNED_SLOTS; ++q) {
        int o, h, col;
        if (!slot_at(q, o, h, col) || col >= valid_b) continue;
#pragma unroll
        for (int k = 0; k < S; ++k)
            last_states[((size_t)(k * B + b0 + col) * NH + head) * DH + o] = from_float<elem_t>(st[k][q]);
    }
}
