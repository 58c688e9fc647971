// Persistent fused recurrent backward: the gate-gradient recurrence, all T steps in one launch, t = T-1 .. 0.
//
// Same grid and on-chip rule as the forward. Block `rank` owns hidden units [rank * ROWS_PER_BLOCK, +ROWS) as
// rows of R^T: per step its warps compute the recurrent gradient dh_rec[unit][batch] = sum_{g,o} R[g][o][unit]
// dx_g[o][batch] from the full gate-gradient vector of the previous iteration (shared memory, exchanged as the
// forward exchanges h), then run the cell's backward step for their units in registers
// (the gradients of the non-h states stay in registers) and publish their slice of dx. The saved gate values
// and states are staged by cp.async STAGES-1 steps ahead.
//
// Tensors (elements of elem_t unless noted; all contiguous):
//   r_scratch: L2-resident home of the GLOBAL_K_TILES fragments, plan.scratch_bytes(B) bytes (null when 0)
//   exchange_buf: zeroed, plan.exchange_bytes(B) bytes (null without GLOBAL_EXCHANGE)
//   R [G, NH, DH, DH]   states [S, B, NH, DH]   h_out [B, T, NH, DH]   gates_save fp32 [B, T, G, NH, DH]
//   states_save fp32 [S-1, B, T+1, NH, DH]   d_h [B, T, NH, DH] (gradient of h_out)
//   d_last [S, B, NH, DH] (gradient of the last states)
//   d_gates [B, T, G, NH, DH] (gradient of the pre-activations = of Wx, in the input dtype)   d_states [S, B, NH, DH]
//   h_prev [B, T, NH, DH]: h_{t-1} (h_0 at t = 0), the weight gradient's rows, copied from the staged inputs
//   d_bias_rows fp32 [B, G, NH, DH]: each batch row's sum over the steps of d_gates (as rounded)

#define K_DIM (GATES * HEAD_DIM)
#include "fused/engine.cuh"
#include "fused/backward_step.cuh"

static_assert(M_TILES == 1, "backward: a warp owns one 16-row tile of R^T");

// Shared memory layout (bytes): R^T fragments, dx double buffer, staged per-step inputs, k-split reduction.
#define SM_RFRAG 0
#define SM_V (SM_RFRAG + WARPS_M * WARPS_K * SMEM_K_TILES * M_TILES * 32 * 4 * A_REGS)
#define SM_STAGE (SM_V + VECTOR_BUFFERS * BATCH_TILE * V_STRIDE * (int)sizeof(elem_t))
#define SM_RED (SM_STAGE + STAGE_BYTES)
#define SM_BARS (SM_RED + (WARPS_K > 1 ? WARPS_K : 0) * WARPS_M * M_TILES * N_TILES * 4 * 32 * 4)
#define SM_TOTAL (SM_BARS + 16)  // VECTOR_BUFFERS <= 2 exchange mbarriers
static_assert(SM_BARS % 8 == 0, "mbarriers are 8-byte aligned");
static_assert(SM_TOTAL == PLAN_SMEM_BYTES, "shared memory layout differs from the plan");

extern "C" __global__ void CLUSTER_ATTRIBUTE __launch_bounds__(THREADS, BLOCKS_PER_SM)
flashrnn_fused_backward(FUSED_BACKWARD_PARAMETERS) {
    extern __shared__ __align__(16) unsigned char smem[];
    uint4* rfrag = reinterpret_cast<uint4*>(smem + SM_RFRAG);
    elem_t* V = reinterpret_cast<elem_t*>(smem + SM_V);
    float* red = reinterpret_cast<float*>(smem + SM_RED);
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem + SM_BARS);

    constexpr int G = GATES, S = STATES, DH = HEAD_DIM, NH = NUM_HEADS, ROWS = ROWS_PER_BLOCK;
    const int head = blockIdx.x / HEAD_BLOCKS, rank = blockIdx.x % HEAD_BLOCKS;
    const int b0 = blockIdx.y * BATCH_TILE, valid_b = min(BATCH_TILE, B - b0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp % WARPS_M, wk = warp / WARPS_M;
    const int u_block = rank * ROWS, u_warp = u_block + wm * 16, k_first = wk * K_TILES_PER_WARP * K_TILE;
    const size_t unit_stride = (size_t)NH * DH;

    // A[0][row][k = g*DH + o] = R[g][head][o][u_warp + row]
    RecurrentA A;
    uint4* scratch = r_scratch + (size_t)(blockIdx.y * gridDim.x + blockIdx.x) * WARPS_M * WARPS_K * GLOBAL_K_TILES *
                                       M_TILES * A_VECS * 32;
    A.load(rfrag, scratch, warp, k_first, [&](int, int row, int k) {
        const int g = k / DH, o = k - g * DH;
        return to_float(R[((size_t)(g * NH + head) * DH + o) * DH + u_warp + row]);
    });

    // Gradient w.r.t. each state after the step being processed, by owned slot, starting from the last states'.
    float dy[S][OWNED_SLOTS];
#pragma unroll
    for (int q = 0; q < OWNED_SLOTS; ++q) {
        int row, col;
        const bool present = owned_slot(q, wk, row, col) && col < valid_b;
#pragma unroll
        for (int k = 0; k < S; ++k)
            dy[k][q] = present ? to_float(d_last[((size_t)(k * B + b0 + col) * NH + head) * DH + u_warp + row]) : 0.f;
    }

    BackwardStep inputs;
    inputs.init(smem + SM_STAGE, states, h_out, d_h, gates_save, states_save, d_gates, h_prev, d_bias_rows, B, T,
                b0, valid_b, head, u_block);
    StepExchange exchange;  // the gate gradients of iterations 0 .. T-1 between the blocks of a head
    exchange.init(bars, exchange_buf, valid_b, G, DH, u_block, ROWS, 0, T - 1);
    cluster_barrier();

    // Iteration `it` processes step t = T-1-it with the recurrent gradient of dx_{t+1} (none at it = 0);
    // iteration T only adds R^T dx_0 to the initial state's gradient.
    for (int it = 0; it <= T; ++it) {
        const int cur = it & 1, t = T - 1 - it;
        inputs.stage_iteration(it + STAGES - 1);
        float acc[M_TILES][N_TILES][4];
        if (it > 0) {
            A.multiply(acc, SharedVectorB{V + VBUF(cur ^ 1) * BATCH_TILE * V_STRIDE, k_first});
#if WARPS_K > 1
            store_partials(acc, red, wm, wk);
            __syncthreads();
#endif
#if VECTOR_BUFFERS == 1
            cluster_barrier();  // every block of the cluster has read the vector before it is overwritten
#endif
        }
        // The recurrent gradient of slot q's element (none at it = 0).
        auto recurrent = [&](int q) {
            if (it == 0) return 0.f;
            float sum[M_TILES];
            owned_sums(acc, red, wm, q, wk, sum);
            return sum[0];
        };
        if (it == T) {
#pragma unroll
            for (int q = 0; q < OWNED_SLOTS; ++q) {
                int row, col;
                if (!owned_slot(q, wk, row, col) || col >= valid_b) continue;
                const float rec = recurrent(q);
#pragma unroll
                for (int k = 0; k < S; ++k)
                    d_states[((size_t)(k * B + b0 + col) * NH + head) * DH + u_warp + row] =
                        from_float<elem_t>(dy[k][q] + (k == 0 ? rec : 0.f));
            }
            break;
        }
        elem_t* Vn = V + VBUF(cur) * BATCH_TILE * V_STRIDE;
        // The cell's backward step of each owned element: one warp-uniform branch per slot.
#pragma unroll
        for (int q = 0; q < OWNED_SLOTS; ++q) {
            int row, col;
            if (!owned_slot(q, wk, row, col)) continue;
            const int r = wm * 16 + row;
            float d[S], dx[G];
#pragma unroll
            for (int k = 0; k < S; ++k) d[k] = dy[k][q];
            inputs.step(it % STAGES, r, col, recurrent(q), d, dx);
#pragma unroll
            for (int k = 0; k < S; ++k) dy[k][q] = d[k];
#pragma unroll
            for (int j = 0; j < G; ++j) Vn[col * V_STRIDE + j * DH + u_block + r] = from_float<elem_t>(dx[j]);
        }
        inputs.store_h_prev(it, t);  // before the barrier after which the next iteration refills its stage
        cp_async_wait_group<STAGES - 2>();  // inputs of the next iteration have landed
        __syncthreads();
#if HEAD_BLOCKS > 1
        exchange.push(Vn, it);
#endif
        inputs.store_gate_grads(t, Vn + u_block, V_STRIDE, DH);  // the block's slice stays put until its next writes
#if HEAD_BLOCKS > 1
        exchange.wait(Vn, it);
#endif
    }
    inputs.store_bias_sums();
}
