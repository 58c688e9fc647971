// One recurrent step's tensor-core products, timed alone: per step every warp (or warpgroup) runs PRODUCT_TILES
// accumulators x GATES k-tiles of bf16 products with fp32 accumulation, then a block barrier, as the fused 1 x 768
// LSTM kernels do (6 x 4 per warp). Launched on 96 blocks (one per SM, as those kernels are); each block's thread 0
// writes the clock cycles of STEPS steps. Operands are fixed register / shared-memory values: only the rate matters.
//   step_mma_sync: mma.sync m16n8k16 per warp (what the kernels use);
//   step_wgmma:    wgmma m64n8k16 per warpgroup, A from registers, B from shared memory (sm_90a), the same work.
#include <cstdint>

#define PRODUCT_TILES 6
#define GATES 4

// Fixed A fragments and zeroed accumulators.
__device__ __forceinline__ void init_operands(unsigned (&a)[PRODUCT_TILES][GATES][4], float (&acc)[PRODUCT_TILES][4]) {
    for (int i = 0; i < PRODUCT_TILES; ++i) {
        for (int m = 0; m < GATES; ++m)
            for (int v = 0; v < 4; ++v) a[i][m][v] = 0x3c003c00u + threadIdx.x + i + m + v;
        for (int e = 0; e < 4; ++e) acc[i][e] = 0.f;
    }
}

// The accumulators to `sink` (so that the products are kept) and the block's cycles since t0.
__device__ __forceinline__ void finish(const float (&acc)[PRODUCT_TILES][4], unsigned long long t0,
                                       unsigned long long* cycles, float* sink) {
    const unsigned long long t1 = clock64();
    float sum = 0.f;
    for (int i = 0; i < PRODUCT_TILES; ++i)
        for (int e = 0; e < 4; ++e) sum += acc[i][e];
    sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

extern "C" __global__ void step_mma_sync(unsigned long long* cycles, int steps, float* sink) {
    unsigned a[PRODUCT_TILES][GATES][4], b[GATES][2];
    float acc[PRODUCT_TILES][4];
    init_operands(a, acc);
    for (int m = 0; m < GATES; ++m) b[m][0] = b[m][1] = 0x3c003c00u + m;
    __syncthreads();
    const unsigned long long t0 = clock64();
    for (int s = 0; s < steps; ++s) {
#pragma unroll
        for (int m = 0; m < GATES; ++m)
#pragma unroll
            for (int i = 0; i < PRODUCT_TILES; ++i)
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                             "{%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(acc[i][0]), "+f"(acc[i][1]), "+f"(acc[i][2]), "+f"(acc[i][3])
                             : "r"(a[i][m][0]), "r"(a[i][m][1]), "r"(a[i][m][2]), "r"(a[i][m][3]), "r"(b[m][0]),
                               "r"(b[m][1]));
        __syncthreads();
    }
    finish(acc, t0, cycles, sink);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Shared-memory matrix descriptor without swizzling: start address, leading and stride byte offsets (16-byte units).
__device__ __forceinline__ uint64_t smem_descriptor(const void* p) {
    const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    return (uint64_t)((address >> 4) & 0x3fff) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
}

extern "C" __global__ void step_wgmma(unsigned long long* cycles, int steps, float* sink) {
    __shared__ __align__(1024) unsigned short b_tiles[GATES][16 * 8 * 4];
    for (int i = threadIdx.x; i < GATES * 16 * 8 * 4; i += blockDim.x) (&b_tiles[0][0])[i] = 0x3c00 + (i & 7);
    unsigned a[PRODUCT_TILES][GATES][4];
    float acc[PRODUCT_TILES][4];
    uint64_t b[GATES];
    init_operands(a, acc);
    for (int m = 0; m < GATES; ++m) b[m] = smem_descriptor(b_tiles[m]);
    __syncthreads();
    const unsigned long long t0 = clock64();
    for (int s = 0; s < steps; ++s) {
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int m = 0; m < GATES; ++m)
#pragma unroll
            for (int i = 0; i < PRODUCT_TILES; ++i)
                asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                             "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, "
                             "p, 1, 1, 0;\n}"
                             : "+f"(acc[i][0]), "+f"(acc[i][1]), "+f"(acc[i][2]), "+f"(acc[i][3])
                             : "r"(a[i][m][0]), "r"(a[i][m][1]), "r"(a[i][m][2]), "r"(a[i][m][3]), "l"(b[m]), "r"(1));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        __syncthreads();
    }
    finish(acc, t0, cycles, sink);
}
#endif
