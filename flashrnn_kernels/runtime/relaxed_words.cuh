// Tagged 64-bit words between blocks through global memory, shared by the fused and scan kernels: a word carries its
// payload and a tag naming what it belongs to, and is written and read with relaxed atomics (an aligned 64-bit access
// is single-copy atomic), so a reader polls the data itself: no flag and no fence.
#pragma once

__device__ __forceinline__ void store_word_relaxed(unsigned long long* p, unsigned long long v) {
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long load_word_relaxed(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// Two adjacent words (16-byte aligned) with one load.
__device__ __forceinline__ ulonglong2 load_words_relaxed(const unsigned long long* p) {
    ulonglong2 v;
    asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p) : "memory");
    return v;
}
