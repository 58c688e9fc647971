// Asynchronous global -> shared copies (cp.async, sm_80+), shared by the fused and scan kernels.
#pragma once

__device__ __forceinline__ unsigned int smem_addr(const void* p) {
    return static_cast<unsigned int>(__cvta_generic_to_shared(p));
}

// 16 bytes from src to dst (shared); with valid == false the destination is zero-filled and src is not read.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}

// An L2 eviction policy that marks the lines an access touches evict-first: for data read for the last time, so that
// what will be read again stays in L2 (createpolicy has no side effects: the compiler may compute it once).
__device__ __forceinline__ unsigned long long l2_evict_first() {
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

// cp_async16 of a valid source whose lines take the L2 eviction `policy`.
__device__ __forceinline__ void cp_async16_hinted(void* dst, const void* src, unsigned long long policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "l"(policy));
}

// BYTES (4 or 8) from src to dst (shared), through L1.
template <int BYTES>
__device__ __forceinline__ void cp_async_small(void* dst, const void* src) {
    static_assert(BYTES == 4 || BYTES == 8, "cp.async.ca copies 4, 8 or 16 bytes");
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_addr(dst)), "l"(src), "n"(BYTES));
}

// cp_async_small whose lines take the L2 eviction `policy`.
template <int BYTES>
__device__ __forceinline__ void cp_async_small_hinted(void* dst, const void* src, unsigned long long policy) {
    static_assert(BYTES == 4 || BYTES == 8, "cp.async.ca copies 4, 8 or 16 bytes");
    asm volatile("cp.async.ca.shared.global.L2::cache_hint [%0], [%1], %2, %3;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "n"(BYTES), "l"(policy));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most N of this thread's committed groups are pending (the older ones have landed). The memory
// clobber keeps the compiler from moving this thread's reads of the landed data above the wait.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
