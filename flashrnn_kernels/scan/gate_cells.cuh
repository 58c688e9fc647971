// The minGRU and minLSTM cells' gates (scan.cu): (a, b) of h_t = a_t h_{t-1} + b_t from an element's inputs, a
// alone for the backward's decays, and the derivatives the backward chains through. Included by scan.cu after its
// plan's defines (SCAN_CELL) and cells/ops.cuh.
#pragma once

__device__ __forceinline__ float sigmoid_of_neg(float x) {
    float pos, neg;
    sigmoid_pair(x, pos, neg);
    return neg;
}

// g(x) = x + 1/2 for x >= 0, sigmoid(x) otherwise, and its derivative (1, or sigmoid(x) sigmoid(-x)).
__device__ __forceinline__ float candidate(float x) {
    const float e = cell_exp(fminf(x, 0.0f));
    return x >= 0.0f ? x + 0.5f : e * reciprocal_1_to_4(1.0f + e);
}

__device__ __forceinline__ float candidate_grad(float x) {
    const float e = cell_exp(fminf(x, 0.0f)), r = reciprocal_1_to_4(1.0f + e);
    return x >= 0.0f ? 1.0f : e * r * r;
}

// minLSTM's normalised gates a = f / (f + i), i / (f + i) with f = sigmoid(x1), i = sigmoid(x2), as
// u2 / (u1 + u2) and u1 / (u1 + u2) with u = (1 + e^-x) e^-m, m = max(0, -x1, -x2): every term is positive and
// at most 2, so neither overflow nor 0 / 0 when both gates underflow.
__device__ __forceinline__ void lstm_gates(float x1, float x2, float& a, float& bi) {
    const float m = fmaxf(0.0f, -fminf(x1, x2));
    const float em = cell_exp(-m);
    const float u1 = em + cell_exp(-x1 - m), u2 = em + cell_exp(-x2 - m);
    const float r = reciprocal_1_to_4(u1 + u2);
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
