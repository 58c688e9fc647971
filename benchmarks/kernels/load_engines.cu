// Streaming reads by copy engine, for benchmarks/load_engines_probe.py: each block streams its own region of
// `per_block` bytes in chunks of `chunk` bytes into shared memory (bulk copies, per-thread cp.async) or registers,
// optionally writing one chunk per `writes` read. STAGES (compile time): chunks in flight.
#ifndef STAGES
#error "load_engines.cu needs STAGES (chunks in flight)"
#endif
#include <cuda_runtime.h>
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bar_init(unsigned long long* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(bar)));
}
__device__ __forceinline__ void bar_expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned long long* bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
}

// thread 0 issues each chunk as one bulk copy, STAGES chunks ahead; every thread waits for a chunk, writes its
// share where the chunk is one of those written, and the block frees the buffer
extern "C" __global__ void bulk(const char* src, char* dst, long long per_block, int chunk, int writes) {
    extern __shared__ __align__(128) char smem[];
    __shared__ unsigned long long bars[STAGES];
    const char* base = src + (long long)blockIdx.x * per_block;
    char* out = dst + (long long)blockIdx.x * per_block;
    const int n = (int)(per_block / chunk);
    auto issue = [&](int i) {
        const int s = i % STAGES;
        bar_expect(&bars[s], chunk);
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(smem_addr(smem + (long long)s * chunk)), "l"(base + (long long)i * chunk), "r"(chunk),
                        "r"(smem_addr(&bars[s])) : "memory");
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) bar_init(&bars[s]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int i = 0; i < STAGES && i < n; ++i) issue(i);
    for (int c = 0; c < n; ++c) {
        const int s = c % STAGES;
        bar_wait(&bars[s], (c / STAGES) & 1);
        if (writes && c % writes == 0)
            for (int o = threadIdx.x * 16; o < chunk; o += blockDim.x * 16)
                *reinterpret_cast<int4*>(out + (long long)(c / writes) * chunk + o) =
                    *reinterpret_cast<const int4*>(smem + (long long)s * chunk + o);
        __syncthreads();
        if (threadIdx.x == 0 && c + STAGES < n) issue(c + STAGES);
    }
}

// every thread copies 16-byte pieces of each chunk with cp.async (commit groups, STAGES - 1 chunks ahead)
extern "C" __global__ void per_thread(const char* src, char* dst, long long per_block, int chunk, int writes) {
    extern __shared__ __align__(128) char smem[];
    const char* base = src + (long long)blockIdx.x * per_block;
    char* out = dst + (long long)blockIdx.x * per_block;
    const int n = (int)(per_block / chunk);
    for (int i = 0; i < n + STAGES - 1; ++i) {
        if (i < n) {
            const int s = i % STAGES;
            for (int o = threadIdx.x * 16; o < chunk; o += blockDim.x * 16)
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                             :: "r"(smem_addr(smem + (long long)s * chunk + o)), "l"(base + (long long)i * chunk + o)
                             : "memory");
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
        if (i >= STAGES - 1) {
            // this thread's copies of chunk i - STAGES + 1 have landed
            asm volatile("cp.async.wait_group %0;" :: "n"(STAGES - 1) : "memory");
            if (writes && ((i - (STAGES - 1)) % writes) == 0) {
                const int c = i - (STAGES - 1), s = c % STAGES;
                for (int o = threadIdx.x * 16; o < chunk; o += blockDim.x * 16)
                    *reinterpret_cast<int4*>(out + (long long)(c / writes) * chunk + o) =
                        *reinterpret_cast<const int4*>(smem + (long long)s * chunk + o);
            }
        }
    }
}

// plain 16-byte loads into registers, 8 in flight per thread, folded into one word per thread
extern "C" __global__ void registers(const char* src, char* dst, long long per_block, int chunk, int writes) {
    const int4* base = reinterpret_cast<const int4*>(src + (long long)blockIdx.x * per_block);
    const long long n = per_block / 16;
    int acc = 0;
    for (long long o = threadIdx.x; o < n; o += 8ll * blockDim.x) {
        int4 v[8];
#pragma unroll
        for (int k = 0; k < 8; ++k)
            v[k] = o + k * blockDim.x < n ? __ldcg(base + o + k * blockDim.x) : int4{0, 0, 0, 0};
#pragma unroll
        for (int k = 0; k < 8; ++k) acc ^= v[k].x ^ v[k].w;
        if (writes) {
            int4* out = reinterpret_cast<int4*>(dst + (long long)blockIdx.x * per_block);
            if ((o / blockDim.x) % (8 * writes) == 0)
#pragma unroll
                for (int k = 0; k < 8; ++k)
                    if (o + k * blockDim.x < n) out[o + k * blockDim.x] = v[k];
        }
    }
    if (acc == 0x7fffffff) dst[threadIdx.x] = 1;  // keeps the loads
}
