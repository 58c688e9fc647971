// How a split lane's carries cross blocks (scan.cu): maps applied to states with products that meet a 0 dropped,
// the words segments publish for their look-backs, and the epochs that tag them in CUDA graphs. Included by
// scan.cu after its plan's defines.
#pragma once

// Products of decays above 1 may overflow fp32 where no step does (256 at every step of a thread's steps, 8 over a
// segment of a few hundred), and where such a product meets a state that is exactly 0 (a zero-padded start), inf * 0
// would give NaN where the step loop's states stay 0. So scan.cu's compositions drop a product whose other factor
// is 0: where that factor is known early (a published b, the segment's carry-in), by a select on the product; along a
// chain of rows, by a flag carried beside it (`zero`: the state, or a map's b, is exactly 0 so far, since every row
// since it was 0 added b = 0 to it, or reset it by a = 0), so that the chain itself stays one fmaf per row.
__device__ __forceinline__ float apply_map(float a, float x, float b) { return fmaf(x == 0.0f ? 0.0f : a, x, b); }

__device__ __forceinline__ bool stays_zero(bool zero, float a, float b) { return b == 0.0f && (zero || a == 0.0f); }

typedef unsigned long long word_t;

// A published value: its float bits low, its tag high: 2 * epoch + 1 for a segment's final state, 2 * epoch for the a
// and b of its map. Words from earlier launches carry older epochs (and zeroed words epoch 0), so they read as "not
// yet published": the workspace is zeroed only when it grows or the host's epoch counter wraps (launches captured into
// a CUDA graph: graph_epoch).
__device__ __forceinline__ void publish(word_t* p, float v, unsigned tag) {
    store_word_relaxed(p, (static_cast<word_t>(tag) << 32) | __float_as_uint(v));
}

// Whether a predecessor's words for one channel hold its final state or both halves of its map.
__device__ __forceinline__ bool published(word_t wa, word_t wb, unsigned map_tag) {
    const unsigned tb = static_cast<unsigned>(wb >> 32);
    return tb == map_tag + 1u || (tb == map_tag && static_cast<unsigned>(wa >> 32) == map_tag);
}

// The map of published words: a final state s as the constant map (0, s), else the map (a, b) itself.
__device__ __forceinline__ void published_map(word_t wa, word_t wb, unsigned map_tag, float& a, float& b) {
    a = static_cast<unsigned>(wb >> 32) == map_tag + 1u ? 0.0f : __uint_as_float(static_cast<unsigned>(wa));
    b = __uint_as_float(static_cast<unsigned>(wb));
}

// A launch captured into a CUDA graph replays its parameters, so it makes its epoch on the device instead, from its
// row of 32 launch counters (64-bit, zeroed before the graph's first replay). Block k reads counter k % 32 when it
// starts and adds 1 to it when it ends (count_launch): every launch adds the same count n (its blocks that map to the
// counter), and a block reads n times the earlier launches plus fewer than n of its own launch's ends, so the quotient
// by n is the same for all of a launch's blocks and one more than the previous launch's. No block waits on an atomic.
// A capture gives each of its launches on a stream a row `slot` < SCAN_GRAPH_SLOTS of one workspace, so that epochs
// differ between the launches that share the words (slot in the low bits) and between consecutive launches of one
// (the quotient, cycling in SCAN_GRAPH_CYCLE; a word is at most one replay old, since every replay writes all of its
// launches' words).
#define SCAN_GRAPH_SLOTS 16
#define SCAN_GRAPH_CYCLE ((1u << 26) - 1u)
__device__ __forceinline__ unsigned graph_epoch(const unsigned long long* counters, int slot) {
    const unsigned c = blockIdx.x & 31u, per_launch = (gridDim.x - c + 31u) >> 5;
    const unsigned long long launches = __ldcg(counters + c) / per_launch;
    return (static_cast<unsigned>(launches % SCAN_GRAPH_CYCLE) + 1u) * SCAN_GRAPH_SLOTS + static_cast<unsigned>(slot);
}

// The end of graph_epoch's block: after every thread of it has read the counter.
__device__ __forceinline__ void count_launch(unsigned long long* counters) {
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) atomicAdd(counters + (blockIdx.x & 31u), 1ull);
}
