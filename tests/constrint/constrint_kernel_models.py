"""Generated kernel tile models in the style of a persistent RNN kernel planner (about 70 variables)."""
from __future__ import annotations

from constrint import Model

FREE = (1, 1 << 30)  # undeclared tile sizes range over all positive ints


def kernel_tile_model(head_dim: int = 768, gates: int = 4, batch: int = 16, sm_count: int = 132,
                      smem_bytes: int = 232448, min_blocks_per_head: int = 1,
                      passes: tuple[str, ...] = ("FW", "BW")) -> Model:
    """A forward + backward tile model: products, register / shared-memory bounds, divisibility."""
    m = Model()
    c = {}
    for name, value in dict(WARP_SIZE=32, MAX_THREADS=1024, SM_COUNT=sm_count, SMEM=smem_bytes,
                            REGS_PER_BLOCK=65536, MAX_REGS_PER_THREAD=255, GATES=gates, HEAD_DIM=head_dim,
                            BATCH=batch, DTYPE_BYTES=2, MMA_M=16, MMA_N=8, MMA_K=16,
                            MIN_BLOCKS=min_blocks_per_head).items():
        c[name] = m.int_var(value, value, name)
    for p in passes:
        v = {k: m.int_var(*FREE, f"{p}_{k}") for k in (
            "WARPS_GATE", "WARPS_HIDDEN", "WARPS", "THREADS", "TILE_GATE", "TILE_HIDDEN", "COUNT_GATE",
            "COUNT_HIDDEN", "BLOCKS", "BATCH_TILE", "BATCH_COUNT", "WARP_TILE_GATE", "WARP_TILE_HIDDEN",
            "LOOP_GATE", "LOOP_HIDDEN", "R_REG_TILE", "R_SMEM_TILE", "SMEM_USED", "REGS", "REG_ELEMS",
            "STATE_ELEMS", "STAGES")}
        m.add(v["WARPS"] == v["WARPS_GATE"] * v["WARPS_HIDDEN"])
        m.add(v["THREADS"] == v["WARPS"] * c["WARP_SIZE"])
        m.add(v["THREADS"] <= c["MAX_THREADS"])
        m.add(v["TILE_GATE"] * v["COUNT_GATE"] == c["HEAD_DIM"] * c["GATES"], name=f"{p} gate tiling")
        m.add(v["TILE_HIDDEN"] * v["COUNT_HIDDEN"] == c["HEAD_DIM"])
        m.add(v["WARP_TILE_GATE"] * v["WARPS_GATE"] == v["TILE_GATE"])
        m.add(v["WARP_TILE_HIDDEN"] * v["WARPS_HIDDEN"] == v["TILE_HIDDEN"])
        m.add(v["LOOP_GATE"] * c["MMA_N"] == v["WARP_TILE_GATE"])
        m.add(v["LOOP_HIDDEN"] * c["MMA_K"] == v["WARP_TILE_HIDDEN"])
        m.add(m.divides(c["MMA_M"], v["BATCH_TILE"] * 2))
        m.add(v["BATCH_TILE"] * v["BATCH_COUNT"] == c["BATCH"])
        m.add(v["BLOCKS"] == v["COUNT_GATE"] * v["COUNT_HIDDEN"] * v["BATCH_COUNT"])
        m.add(v["BLOCKS"] <= c["SM_COUNT"], name=f"{p} blocks fit the SMs")
        m.add(v["BLOCKS"] >= c["MIN_BLOCKS"])
        m.add(v["R_REG_TILE"] + v["R_SMEM_TILE"] == v["TILE_GATE"] * v["TILE_HIDDEN"])
        m.add(v["REG_ELEMS"] * v["THREADS"] == v["R_REG_TILE"] * 2)
        m.add(v["REGS"] == v["REG_ELEMS"] // c["DTYPE_BYTES"] + 48)
        m.add(v["REGS"] <= c["MAX_REGS_PER_THREAD"])
        m.add(v["REGS"] * v["THREADS"] <= c["REGS_PER_BLOCK"], name=f"{p} registers per block")
        m.add(v["STATE_ELEMS"] == v["BATCH_TILE"] * v["TILE_GATE"])
        m.add(v["STAGES"] <= 4)
        m.add(v["SMEM_USED"] == c["DTYPE_BYTES"] * (v["R_SMEM_TILE"] + v["STATE_ELEMS"] * v["STAGES"]
                                                    + v["BATCH_TILE"] * v["TILE_HIDDEN"]))
        m.add(v["SMEM_USED"] <= c["SMEM"], name=f"{p} shared memory")
        m.add(m.divides(v["TILE_HIDDEN"], c["HEAD_DIM"]))
        m.add(m.any_of([v["R_SMEM_TILE"] == 0, v["R_SMEM_TILE"] >= v["TILE_HIDDEN"] * c["MMA_N"]]))
    return m


PREFER = [("FW_BLOCKS", "min"), ("FW_WARPS", "max"), ("BW_BLOCKS", "min"), ("BW_WARPS", "max"),
          ("FW_STAGES", "max"), ("BW_STAGES", "max")]
