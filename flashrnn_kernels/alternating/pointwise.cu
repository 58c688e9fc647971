// Alternating backend: the per-step pointwise kernels. The recurrent products (R h forward, R^T dx backward) run
// in cuBLAS between them; one thread owns one (batch, head, unit) element and all of its gates and states.
// Rendered by alternating/source.py after the cell's `cell_forward` / `cell_backward` (runtime/codegen.py).
//
// Element (b, n, o), unit = n * DH + o, U = NH * DH. Per-head matrices are [NH, B, G * DH] (row g * DH + o).
// Forward step t:
//   pre fp32 [NH, B, G*DH] (R h_{t-1})   wx: Wx[:, t] (b stride wx_sb)   bias [G, NH, DH]
//   h_prev elem (b stride h_prev_sb)   s_in / s_out fp32 non-h states (b stride s_sb, state stride s_sk; may alias)
//   h_out elem (b stride h_out_sb)   gates_save fp32 a_g (b stride save_sb; null for inference)
// Backward step t (reverse order):
//   a fp32 gates of step t   h_prev / h_new elem (b stride h_sb)   s_prev / s_new fp32 non-h states of t, t+1
//   dh elem: upstream gradient of h_t (b stride dh_sb)   dh_rec fp32 [NH, B, DH]: R^T dx_{t+1}
//   ds fp32 [S, B, NH, DH]: in, the pointwise gradient to each state of step t from step t+1 (plus the last
//   states' gradient); out, the same for step t-1 (read and written by the same thread)
//   dpre elem: dx_g of step t in per-head layout (head stride dpre_sn, b stride dpre_sb)
#if !defined(GATES) || !defined(STATES) || !defined(THREADS)
#error "a plan field is missing: render this kernel through flashrnn_kernels.alternating.source.render"
#endif

#include "cells/ops.cuh"

#if !defined(DTYPE_BF16) && !defined(DTYPE_FP16) && !defined(DTYPE_FP32)
#error "define one of DTYPE_BF16, DTYPE_FP16, DTYPE_FP32"
#endif

typedef long long i64;

extern "C" __global__ void __launch_bounds__(THREADS)
alternating_forward(const float* __restrict__ pre, const elem_t* __restrict__ wx, const elem_t* __restrict__ bias,
                    const elem_t* __restrict__ h_prev, const float* s_in, elem_t* __restrict__ h_out, float* s_out,
                    float* __restrict__ gates_save, i64 wx_sb, i64 h_prev_sb, i64 h_out_sb, i64 s_sb, i64 s_sk,
                    i64 save_sb, int B, int NH, int DH) {
    const i64 U = (i64)NH * DH;
    const i64 i = (i64)blockIdx.x * THREADS + threadIdx.x;
    if (i >= B * U) return;
    const i64 b = i / U, unit = i - b * U, n = unit / DH, o = unit - n * DH;
    const float* pre_row = pre + (n * B + b) * GATES * DH + o;
    float x[GATES], s[STATES], y[STATES], a[GATES];
#pragma unroll
    for (int g = 0; g < GATES; ++g)
        x[g] = pre_row[g * DH] + to_float(wx[b * wx_sb + g * U + unit]) + to_float(bias[g * U + unit]);
    s[0] = to_float(h_prev[b * h_prev_sb + unit]);
#pragma unroll
    for (int k = 1; k < STATES; ++k) s[k] = s_in[(k - 1) * s_sk + b * s_sb + unit];
    cell_forward(x, s, y, a);
    h_out[b * h_out_sb + unit] = from_float<elem_t>(y[0]);
#pragma unroll
    for (int k = 1; k < STATES; ++k) s_out[(k - 1) * s_sk + b * s_sb + unit] = y[k];
    if (gates_save != nullptr) {
#pragma unroll
        for (int g = 0; g < GATES; ++g) gates_save[b * save_sb + g * U + unit] = a[g];
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
alternating_backward(const float* __restrict__ a_save, const elem_t* __restrict__ h_prev,
                     const elem_t* __restrict__ h_new, const float* __restrict__ s_prev,
                     const float* __restrict__ s_new, const elem_t* __restrict__ dh, const float* __restrict__ dh_rec,
                     float* ds, elem_t* __restrict__ dpre, i64 save_sb, i64 h_sb, i64 s_sb, i64 s_sk, i64 dh_sb,
                     i64 dpre_sn, i64 dpre_sb, int B, int NH, int DH) {
    const i64 U = (i64)NH * DH;
    const i64 i = (i64)blockIdx.x * THREADS + threadIdx.x;
    if (i >= B * U) return;
    const i64 b = i / U, unit = i - b * U, n = unit / DH, o = unit - n * DH;
    const i64 at = b * U + unit;  // index in [B, NH, DH]
    float a[GATES], s[STATES], y[STATES], dy[STATES], dx[GATES], dsp[STATES];
#pragma unroll
    for (int g = 0; g < GATES; ++g) a[g] = a_save[b * save_sb + g * U + unit];
    s[0] = to_float(h_prev[b * h_sb + unit]);
    y[0] = to_float(h_new[b * h_sb + unit]);
    dy[0] = ds[at] + to_float(dh[b * dh_sb + unit]) + dh_rec[(n * B + b) * DH + o];
#pragma unroll
    for (int k = 1; k < STATES; ++k) {
        s[k] = s_prev[(k - 1) * s_sk + b * s_sb + unit];
        y[k] = s_new[(k - 1) * s_sk + b * s_sb + unit];
        dy[k] = ds[k * B * U + at];
    }
    cell_backward(a, s, y, dy, dx, dsp);
#pragma unroll
    for (int k = 0; k < STATES; ++k) ds[k * B * U + at] = dsp[k];
    elem_t* dpre_row = dpre + n * dpre_sn + b * dpre_sb + o;
#pragma unroll
    for (int g = 0; g < GATES; ++g) dpre_row[g * DH] = from_float<elem_t>(dx[g]);
}
