// Device helpers called by the cells' rendered pointwise steps (cells/base.py maps each expression function to
// one helper here) and dtype conversions for the kernels. Compiles under NVRTC and nvcc.
//
// Accuracy: by default every helper uses the full-precision CUDA math library (expf, tanhf, logf, log1pf: at
// most 2 ulp), reciprocals within 1 ulp (reciprocal_1_to_4) and divisions within 2 ulp (cell_div), so a step agrees
// with an fp32 reference to about 1e-6 relative. Defining FLASHRNN_FAST_ACTIVATIONS (meant for bf16/fp16 storage, whose rounding is 2^-8 / 2^-11)
// switches tanh and sigmoid to the hardware tanh.approx.f32 (sm_75+, relative error about 2^-11), exp/log to
// __expf/__logf, reciprocals to __fdividef and divisions to the hardware reciprocal times the dividend.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#if defined(FLASHRNN_FAST_ACTIVATIONS) && defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 750)
#define FLASHRNN_USE_TANH_APPROX 1
#else
#define FLASHRNN_USE_TANH_APPROX 0
#endif

#if FLASHRNN_USE_TANH_APPROX
__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif

__device__ __forceinline__ float cell_tanh(float x) {
#if FLASHRNN_USE_TANH_APPROX
    return tanh_approx(x);
#else
    return tanhf(x);
#endif
}

__device__ __forceinline__ float cell_exp(float x) {
#ifdef FLASHRNN_FAST_ACTIVATIONS
    return __expf(x);
#else
    return expf(x);
#endif
}

// The hardware reciprocal (at most 1 ulp off; 1 / 0 = inf, 1 / inf = 0; subnormal operands count as zero).
__device__ __forceinline__ float rcp_approx(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// 1 / x for x in [1, 4] (1 + e^-|x| and sums of such terms). FLASHRNN_FAST_ACTIVATIONS: the hardware approximation.
// Otherwise the approximation (at most 1 ulp off) refined by one Newton step, branch-free: ptxas wraps an IEEE-rounded
// division or __frcp_rn in a branch to a slow path for special operands, and the branches kept it from interleaving
// independent elements' math (sm_90: the fp32 minGRU / minLSTM scans ran 1.3-1.7x slower with __frcp_rn).
__device__ __forceinline__ float reciprocal_1_to_4(float x) {
#ifdef FLASHRNN_FAST_ACTIVATIONS
    return __fdividef(1.0f, x);
#else
    const float r = rcp_approx(x);
    return fmaf(r, fmaf(-x, r, 1.0f), r);
#endif
}

// sigmoid(x) and sigmoid(-x) from e = e^-|x| in (0, 1] and one reciprocal: 1 / (1 + e) and e / (1 + e), both
// accurate in relative terms (no 1 - p cancellation; exactly 0 once e underflows).
__device__ __forceinline__ void sigmoid_pair(float x, float& pos, float& neg) {
    const float e = cell_exp(-fabsf(x));
    const float big = reciprocal_1_to_4(1.0f + e), small = e * big;
    pos = x >= 0.0f ? big : small;
    neg = x >= 0.0f ? small : big;
}

__device__ __forceinline__ float sigmoid(float x) {
#if FLASHRNN_USE_TANH_APPROX
    return fmaf(0.5f, tanh_approx(0.5f * x), 0.5f);
#else
    float pos, neg;
    sigmoid_pair(x, pos, neg);
    return pos;
#endif
}

__device__ __forceinline__ float cell_log(float x) {
#ifdef FLASHRNN_FAST_ACTIVATIONS
    return __logf(x);
#else
    return logf(x);
#endif
}

// log(sigmoid(x)) = min(x, 0) - log(1 + e^-|x|), stable for any x. FLASHRNN_FAST_ACTIVATIONS: __logf(1 + e), whose
// absolute error (about 2^-21 on [1, 2]) is what the sum needs, instead of log1pf's call of the math library.
__device__ __forceinline__ float cell_logsigmoid(float x) {
#ifdef FLASHRNN_FAST_ACTIVATIONS
    return fminf(x, 0.0f) - __logf(1.0f + cell_exp(-fabsf(x)));
#else
    return fminf(x, 0.0f) - log1pf(cell_exp(-fabsf(x)));
#endif
}

// a / b (every `/` of a cell renders as cell_div) without the IEEE division's branch to its slow path, which ptxas
// places around every division and which keeps independent elements' math from interleaving. Divisors above 2^100
// are scaled down with their dividend (by an exact power of two) so that the hardware reciprocal stays a normal
// number; then, unless FLASHRNN_FAST_ACTIVATIONS, one correction of the quotient (within 2 ulp of IEEE's). Zero,
// infinite and NaN operands and overflowing quotients give IEEE's results. As everything CuPy compiles (it adds
// -ftz=true), subnormal operands and results count as zero.
__device__ __forceinline__ float cell_div(float a, float b) {
    const float scale = fabsf(b) > 0x1p100f ? 0x1p-100f : 1.0f;
    a *= scale;
    b *= scale;
    const float r = rcp_approx(b), q = a * r;
#ifdef FLASHRNN_FAST_ACTIVATIONS
    return q;
#else
    const float refined = fmaf(r, fmaf(-b, q, a), q);
    return isfinite(refined) ? refined : q;  // a zero or infinite divisor, or an overflow: q is IEEE's value
#endif
}

__device__ __forceinline__ float cell_maximum(float a, float b) { return fmaxf(a, b); }

// 1 where x > 0, else 0: the derivative of maximum(a, b) with respect to a is heaviside(a - b).
__device__ __forceinline__ float cell_heaviside(float x) { return x > 0.0f ? 1.0f : 0.0f; }

// The storage type of the kernels rendered with DTYPE_BF16 / DTYPE_FP16 / DTYPE_FP32 (fused and alternating; they
// require one of them); the scan kernel chooses its own from SCAN_DTYPE.
#if defined(DTYPE_BF16)
typedef __nv_bfloat16 elem_t;
#elif defined(DTYPE_FP16)
typedef __half elem_t;
#elif defined(DTYPE_FP32)
typedef float elem_t;
#endif

// Storage <-> fp32 compute conversions (round to nearest even on the way back).
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// x rounded to the storage type T, also returned widened back to fp32 in `value` (a state that later steps read as it
// was stored). bf16 rounds with the packing cvt and a zero upper half: from __float2bfloat16_rn and the widening,
// ptxas fuses the pair into one F2F.BF16.F32 of the conversion pipe instead of the ALU's F2FP (sm_90, nvcc 13).
template <typename T>
__device__ __forceinline__ T round_to_storage(float x, float& value) {
    const T r = from_float<T>(x);
    value = to_float(r);
    return r;
}
template <>
__device__ __forceinline__ __nv_bfloat16 round_to_storage<__nv_bfloat16>(float x, float& value) {
    unsigned pair;
    asm("cvt.rn.bf16x2.f32 %0, 0f00000000, %1;" : "=r"(pair) : "f"(x));
    value = __uint_as_float(pair << 16);
    return __ushort_as_bfloat16(static_cast<unsigned short>(pair));
}
