// The fused backward kernels' per-step inputs and cell step, shared by backward.cu (blocks own rows of R^T and
// gather the gate gradients) and backward_partials.cu (blocks own rows of R and reduce-scatter partial sums).
// A block owns hidden units [u_block, u_block + ROWS_PER_BLOCK) of one head and one batch tile; the saved gate values
// and states of a step are staged into shared memory by cp.async (16-byte rows, zero past the batch).
#pragma once

// The parameters of both backward kernels (fused/function.py launches either with the same arguments).
#define FUSED_BACKWARD_PARAMETERS                                                                                   \
    const elem_t *__restrict__ R, const elem_t *__restrict__ states, const elem_t *__restrict__ h_out,              \
        const float *__restrict__ gates_save, const float *__restrict__ states_save, const elem_t *__restrict__ d_h, \
        const elem_t *__restrict__ d_last, elem_t *__restrict__ d_gates, elem_t *__restrict__ d_states,             \
        elem_t *__restrict__ h_prev, float *__restrict__ d_bias_rows, uint4 *__restrict__ r_scratch,                \
        unsigned long long *__restrict__ exchange_buf, int B, int T

#define STAGE_F32_ROWS (GATES + 2 * (STATES - 1))  // a_g, s_k, y_k (k >= 1) per batch row, fp32
#define STAGE_ELEM_ROWS 3                          // s_h, y_h, d_h per batch row, elem_t
#define STAGE_F32_TILE (BATCH_TILE * STAGE_F32_ROWS * ROWS_PER_BLOCK)  // floats of one stage
#define STAGE_ELEM_TILE (BATCH_TILE * ROWS_PER_BLOCK)                  // elements of one staged elem_t row group
// Bytes of the STAGES-deep staging buffers: fp32 rows, then elem_t rows.
#define STAGE_BYTES (STAGES * (STAGE_F32_TILE * 4 + STAGE_ELEM_ROWS * STAGE_ELEM_TILE * (int)sizeof(elem_t)))

// What a step writes besides the recurrence: the gate gradients, h_{t-1} and the bias gradient's sum, as 16-byte
// runs of units spread over the threads (run i = (batch column, gate, run of units), the same runs every step).
#define RUN_ELEMS (16 / (int)sizeof(elem_t))
#define RUNS_PER_ROW (ROWS_PER_BLOCK / RUN_ELEMS)
#define GATE_RUNS (BATCH_TILE * GATES * RUNS_PER_ROW)
#define RUNS_PER_THREAD ((GATE_RUNS + THREADS - 1) / THREADS)
static_assert(ROWS_PER_BLOCK % RUN_ELEMS == 0, "a block's units are whole 16-byte runs");

struct BackwardStep {
    float* f32;    // [STAGES][STAGE_F32_ROWS groups][BATCH_TILE][ROWS] as laid out by stage()
    elem_t* elem;  // [STAGES][3][BATCH_TILE][ROWS]
    const elem_t *states, *h_out, *d_h;
    const float *gates_save, *states_save;
    elem_t *d_gates, *h_prev;
    float* d_bias_rows;
    int B, T, b0, valid_b;
    size_t col0, unit_stride;  // element offset of the block's first unit in a [.., NH, DH] row; NH * DH
    float bias_sum[RUNS_PER_THREAD][RUN_ELEMS];  // this thread's runs of the gate gradients, summed over the steps

    // Set up, then stage the first STAGES-1 iterations: this thread's copies of iteration 0 have landed on return
    // (the caller's next barrier makes everyone's visible).
    __device__ __forceinline__ void init(void* stage_smem, const elem_t* states_, const elem_t* h_out_,
                                         const elem_t* d_h_, const float* gates_save_, const float* states_save_,
                                         elem_t* d_gates_, elem_t* h_prev_, float* d_bias_rows_, int B_, int T_,
                                         int b0_, int valid_b_, int head, int u_block) {
        f32 = static_cast<float*>(stage_smem);
        elem = reinterpret_cast<elem_t*>(f32 + STAGES * STAGE_F32_TILE);
        states = states_; h_out = h_out_; d_h = d_h_; gates_save = gates_save_; states_save = states_save_;
        d_gates = d_gates_; h_prev = h_prev_; d_bias_rows = d_bias_rows_; B = B_; T = T_; b0 = b0_;
        valid_b = valid_b_;
        unit_stride = (size_t)NUM_HEADS * HEAD_DIM;
        col0 = (size_t)head * HEAD_DIM + u_block;
#pragma unroll
        for (int k = 0; k < RUNS_PER_THREAD; ++k)
#pragma unroll
            for (int e = 0; e < RUN_ELEMS; ++e) bias_sum[k][e] = 0.f;
#pragma unroll 1
        for (int it = 0; it < STAGES - 1; ++it) stage_iteration(it);
        cp_async_wait_group<STAGES - 2>();
    }

    // Stage the inputs of step t into buffer buf (one cp.async group per call, committed by the caller).
    __device__ __forceinline__ void stage(int t, int buf) const {
        constexpr int G = GATES, S = STATES, F32_ROW = ROWS_PER_BLOCK * 4;
        constexpr int ELEM_ROW = ROWS_PER_BLOCK * (int)sizeof(elem_t);
        const long long seq_b = (long long)T * unit_stride;  // elements between batches of h_out / d_h
        float* f = f32 + buf * STAGE_F32_TILE;
        elem_t* el = elem + buf * STAGE_ELEM_ROWS * STAGE_ELEM_TILE;
        stage_rows<G, F32_ROW>(f, gates_save + ((size_t)b0 * T + t) * G * unit_stride + col0, seq_b * G * 4,
                               unit_stride * 4, valid_b);
        const long long save_b = (long long)(T + 1) * unit_stride, save_k = (long long)B * save_b;
        const float* sv = states_save + (size_t)b0 * save_b + col0;
        stage_rows<S - 1, F32_ROW>(f + BATCH_TILE * G * ROWS_PER_BLOCK, sv + (size_t)t * unit_stride, save_b * 4,
                                   save_k * 4, valid_b);
        stage_rows<S - 1, F32_ROW>(f + BATCH_TILE * (G + S - 1) * ROWS_PER_BLOCK, sv + (size_t)(t + 1) * unit_stride,
                                   save_b * 4, save_k * 4, valid_b);
        if (t > 0)
            stage_rows<1, ELEM_ROW>(el, h_out + (size_t)b0 * seq_b + (size_t)(t - 1) * unit_stride + col0,
                                    seq_b * sizeof(elem_t), 0, valid_b);
        else
            stage_rows<1, ELEM_ROW>(el, states + (size_t)b0 * unit_stride + col0, unit_stride * sizeof(elem_t), 0,
                                    valid_b);
        stage_rows<1, ELEM_ROW>(el + STAGE_ELEM_TILE, h_out + (size_t)b0 * seq_b + (size_t)t * unit_stride + col0,
                                seq_b * sizeof(elem_t), 0, valid_b);
        stage_rows<1, ELEM_ROW>(el + 2 * STAGE_ELEM_TILE, d_h + (size_t)b0 * seq_b + (size_t)t * unit_stride + col0,
                                seq_b * sizeof(elem_t), 0, valid_b);
    }

    // Stage the inputs of iteration `it` (step T-1-it; nothing past the sequence) into buffer it % STAGES, as one
    // cp.async group. Iterations are staged STAGES-1 ahead of the one they serve.
    __device__ __forceinline__ void stage_iteration(int it) const {
        if (it < T) stage(T - 1 - it, it % STAGES);
        cp_async_commit();
    }

    // The cell's backward step for unit r (of the block's ROWS) and batch column col, inputs in stage buf:
    // dy holds the gradients of the states after the step and becomes those before it; dh_rec is the recurrent
    // part of h's gradient (R^T of the next step's gate gradients). The gate gradients come back in dx.
    __device__ __forceinline__ void step(int buf, int r, int col, float dh_rec, float (&dy)[STATES],
                                         float (&dx)[GATES]) const {
        constexpr int G = GATES, S = STATES, ROWS = ROWS_PER_BLOCK;
        const float* f = f32 + buf * STAGE_F32_TILE;
        const elem_t* el = elem + buf * STAGE_ELEM_ROWS * STAGE_ELEM_TILE;
        float a[G], s[S], y[S], d[S], ds[S];
#pragma unroll
        for (int j = 0; j < G; ++j) a[j] = f[(col * G + j) * ROWS + r];
        s[0] = to_float(el[col * ROWS + r]);
        y[0] = to_float(el[STAGE_ELEM_TILE + col * ROWS + r]);
        d[0] = dy[0] + dh_rec + to_float(el[2 * STAGE_ELEM_TILE + col * ROWS + r]);
#pragma unroll
        for (int k = 1; k < S; ++k) {
            s[k] = f[BATCH_TILE * G * ROWS + (col * (S - 1) + k - 1) * ROWS + r];
            y[k] = f[BATCH_TILE * (G + S - 1) * ROWS + (col * (S - 1) + k - 1) * ROWS + r];
            d[k] = dy[k];
        }
        cell_backward(a, s, y, d, dx, ds);
#pragma unroll
        for (int k = 0; k < S; ++k) dy[k] = ds[k];
    }

    // This thread's k-th run of the gate gradients: batch column col, gate g, run c of the block's units; false where
    // it has none (past the runs or the batch).
    __device__ __forceinline__ bool gate_run(int k, int& col, int& g, int& c) const {
        constexpr int PER_COL = GATES * RUNS_PER_ROW;
        const int i = k * THREADS + (int)threadIdx.x;
        col = i / PER_COL;
        const int rest = i - col * PER_COL;
        g = rest / RUNS_PER_ROW;
        c = rest - g * RUNS_PER_ROW;
        return (GATE_RUNS % THREADS == 0 || i < GATE_RUNS) && col < valid_b;
    }

    // The gate gradients of step t from shared memory, where the block's element (batch column col, gate g, unit r)
    // sits at dx[col * row_stride + g * gate_stride + r], added to this thread's bias sums as rounded (columns past
    // the batch are dropped). Call after the block barrier that follows their writes.
    __device__ __forceinline__ void store_gate_grads(int t, const elem_t* dx, int row_stride, int gate_stride) {
#pragma unroll
        for (int k = 0; k < RUNS_PER_THREAD; ++k) {
            int col, g, c;
            if (gate_run(k, col, g, c)) {
                const uint4 v = *reinterpret_cast<const uint4*>(dx + col * row_stride + g * gate_stride + c * RUN_ELEMS);
                *reinterpret_cast<uint4*>(d_gates + (((size_t)(b0 + col) * T + t) * GATES + g) * unit_stride + col0 +
                                          c * RUN_ELEMS) = v;
                const elem_t* e = reinterpret_cast<const elem_t*>(&v);
#pragma unroll
                for (int j = 0; j < RUN_ELEMS; ++j) bias_sum[k][j] += to_float(e[j]);
            }
        }
    }

    // h_{t-1} of the block's units, the rows of the weight gradient's GEMM, from the stage of iteration `it`
    // (step t): call before the block barrier after which that stage may be refilled.
    __device__ __forceinline__ void store_h_prev(int it, int t) const {
        const elem_t* s_h = elem + (it % STAGES) * STAGE_ELEM_ROWS * STAGE_ELEM_TILE;  // [BATCH_TILE][ROWS]
        constexpr int H_RUNS = BATCH_TILE * RUNS_PER_ROW;
#pragma unroll
        for (int i0 = 0; i0 < H_RUNS; i0 += THREADS) {
            const int i = i0 + (int)threadIdx.x, col = i / RUNS_PER_ROW, c = i - col * RUNS_PER_ROW;
            if ((H_RUNS % THREADS == 0 || i < H_RUNS) && col < valid_b)
                *reinterpret_cast<uint4*>(h_prev + ((size_t)(b0 + col) * T + t) * unit_stride + col0 + c * RUN_ELEMS) =
                    *reinterpret_cast<const uint4*>(s_h + col * ROWS_PER_BLOCK + c * RUN_ELEMS);
        }
    }

    // After the last step: each batch row's bias gradient, d_bias_rows[b][g][head][unit] (fp32, summed over b by
    // the host).
    __device__ __forceinline__ void store_bias_sums() const {
#pragma unroll
        for (int k = 0; k < RUNS_PER_THREAD; ++k) {
            int col, g, c;
            if (gate_run(k, col, g, c)) {
                float4* out = reinterpret_cast<float4*>(d_bias_rows + ((size_t)(b0 + col) * GATES + g) * unit_stride +
                                                        col0 + c * RUN_ELEMS);
#pragma unroll
                for (int j = 0; j < RUN_ELEMS / 4; ++j)
                    out[j] = make_float4(bias_sum[k][4 * j], bias_sum[k][4 * j + 1], bias_sum[k][4 * j + 2],
                                         bias_sum[k][4 * j + 3]);
            }
        }
    }
};
