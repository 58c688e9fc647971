// How a thread stages its part of a chunk (scan.cu): the inputs of its steps copied into shared memory with
// cp.async, those of a chained forward's first SCAN_HELD steps loaded into registers. Included by scan.cu after
// its plan's defines and types, and last_use(k): whether the input of stage slot k is read for the last time.
#pragma once

// The inputs of a thread's first SCAN_HELD steps of its chunk, loaded into registers instead of the stage.
struct Held {
    pack_t v[SCAN_HELD > 0 ? SCAN_HELD : 1][SCAN_INPUTS];
};

// The staged copy of input k, step i >= SCAN_HELD of this thread (within its chunk), in buffer `buf`. Rows are
// step-major (row (i - SCAN_HELD) * SCAN_THREADS_T + ty), so at one step a warp's threads read consecutive 16-byte
// pieces: no bank conflicts.
__device__ __forceinline__ elem_t* staged(elem_t* stage, int buf, int k, int i, int tx, int ty) {
    return stage + ((buf * SCAN_STAGED + k) * SCAN_STAGED_ROWS + (i - SCAN_HELD) * SCAN_THREADS_T + ty) * SCAN_TILE +
           tx * SCAN_VEC;
}

// A copy of one thread's access into the stage; where `hinted`, its lines take the L2 eviction `policy` (4- to
// 16-byte accesses: a 2-byte access is a plain load and store, which takes no hint).
__device__ __forceinline__ void stage_copy(elem_t* dst, const elem_t* src, bool hinted, unsigned long long policy) {
    if constexpr (SCAN_ACCESS == 16) {
        if (hinted) cp_async16_hinted(dst, src, policy);
        else cp_async16(dst, src, true);
    } else if constexpr (SCAN_ACCESS == 8 || SCAN_ACCESS == 4) {
        if (hinted) cp_async_small_hinted<SCAN_ACCESS>(dst, src, policy);
        else cp_async_small<SCAN_ACCESS>(dst, src);
    } else {
        *dst = *src;  // a 2-byte access: a plain copy, visible to this thread when it reads the stage back
    }
}

// Where one chunk of one lane sits for this thread.
struct ChunkAt {
    int batch, d, s0, t0;
    long long base;  // element offset of this thread's first step
    bool active;     // this thread's channels exist (d < D)
    int step;        // element offset from one step of this thread to the next (in scan order)

    __device__ __forceinline__ ChunkAt(int chunk, int lane, int d_tiles, int T, int D) {
        batch = lane / d_tiles;
        d = (lane - batch * d_tiles) * SCAN_TILE + threadIdx.x * SCAN_VEC;
        active = d < D;
        s0 = chunk * SCAN_CHUNK + threadIdx.y * SCAN_STEPS;  // first step of this thread, in scan order
        t0 = SCAN_REVERSE ? T - 1 - s0 : s0;
        base = ((long long)batch * T + t0) * D + d;
        step = SCAN_REVERSE ? -D : D;
    }

    // every step of this thread's part of the chunk exists and so do its channels
    __device__ __forceinline__ bool complete(int T) const { return active && s0 + SCAN_STEPS <= T; }
};

// Which of a reverse chunk's copies stage_chunk issues: all, the cell inputs alone (x1, x2, x3) or the rest (dL/dh,
// h), so that a backward may stage its inputs before the previous kernel ends (scan.cu's `early`).
enum class StagePart { all, inputs, rest };

// f(k, i, src) for each input of this thread's part of chunk `at`, in the order stage_chunk issues them: slot k of
// the stage (staged(); a chained forward's held step i < SCAN_HELD: held.v[i][k]), step i, source address. Forward
// x1, x2 (, x3) at each step; reverse dL/dh at each step and the next step's x1 (, x2) for a_{t+1} (absent at
// t = T - 1), and with `all` what the gradients need besides (SCAN_STAGED; h_{t-1} where SCAN_READS_H; without `all`,
// the maps alone: pass A of a segment staged again for pass B); of those, the ones that PART names.
template <StagePart PART, typename F>
__device__ __forceinline__ void for_chunk_inputs(const ChunkAt& at, int T, int D, const elem_t* x1, const elem_t* x2,
                                                 const elem_t* x3, const elem_t* dy, const elem_t* h, bool all, F&& f) {
    if (!at.active) return;
#pragma unroll
    for (int i = 0; i < SCAN_STEPS; ++i) {
        const int s = at.s0 + i;
        if (s >= T) break;
        const long long off = at.base + (long long)i * at.step;
#if SCAN_REVERSE
        constexpr bool inputs = PART != StagePart::rest, rest = PART != StagePart::inputs;
        if (rest) f(1, i, dy + off);
        if (inputs && s > 0) {
            f(0, i, x1 + off + D);
#if SCAN_CELL == 2
            f(2, i, x2 + off + D);
#endif
        }
        if (all) {
            if (rest && SCAN_READS_H && s < T - 1) f(SCAN_SLOT_H, i, h + off - D);
#if SCAN_CELL != 0
            if (inputs) f(SCAN_SLOT_X, i, (SCAN_CELL == 1 ? x2 : x3) + off);
#endif
        }
#else
        f(0, i, x1 + off);
        f(1, i, x2 + off);
#if SCAN_CELL == 2
        f(2, i, x3 + off);
#endif
#endif
    }
}

// Issue the copies of this thread's inputs of chunk `at` into buffer `buf` (for_chunk_inputs' inputs; the first
// SCAN_HELD steps' loads into `held`), those read for the last time marked evict-first in L2.
template <StagePart PART>
__device__ __forceinline__ void stage_chunk(elem_t* stage, int buf, const ChunkAt& at, int T, int D,
                                            const elem_t* x1, const elem_t* x2, const elem_t* x3,
                                            const elem_t* dy, const elem_t* h, bool all, Held& held) {
    const unsigned long long evict_first = l2_evict_first();  // for the inputs read for the last time (last_use)
    for_chunk_inputs<PART>(at, T, D, x1, x2, x3, dy, h, all, [&](int k, int i, const elem_t* src) {
        if (!SCAN_REVERSE && i < SCAN_HELD) held.v[i][k] = load_pack(src);
        else stage_copy(staged(stage, buf, k, i, threadIdx.x, threadIdx.y), src, last_use(k), evict_first);
    });
}
