"""plan(): solve the tiling of a fused recurrent launch on a GPU model -> frozen KernelPlan (cached).

The plan is the whole compile-time half of a launch: codegen renders its kernel fields as #defines, and every
launch dimension is derived from it here (batch size and sequence length are runtime arguments).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import constrint
import hwmodels
from constrint import Infeasible, Model, Solution

from ..runtime.device import current_gpu
from . import tiling
from .problem import FusedProblem, dtype_name

VERSION = "fused-11"
"""Bumped whenever the kernels' layout changes: old disk-cached plans are then ignored."""


def model_sources() -> list[Path]:
    """The files a plan depends on besides the problem and the GPU: the constraint model, cost model and solve order,
    and the solver's own source (a change of its search may pick another of equally good tilings)."""
    return [Path(tiling.__file__), Path(__file__), *sorted(Path(constrint.__file__).parent.glob("*.py"))]


_MODEL_DIGEST = hashlib.sha256(b"".join(path.read_bytes() for path in model_sources())).hexdigest()
"""Their digest: any edit to them retires the disk-cached plans."""

_memory: dict[str, KernelPlan] = {}


class PlanError(ValueError):
    """No tiling of the problem fits the GPU; the message quotes the violated limits and what would fit."""


@dataclass(frozen=True)
class KernelPlan:
    """Tile sizes and launch shape of one fused kernel. Fields marked (kernel) become #defines."""

    cell: str
    direction: str
    dtype: str  # (kernel) "bf16" | "fp16" | "fp32"
    gpu: str  # hwmodels GPUModel name the plan was solved for
    arch: str
    num_heads: int  # (kernel)
    head_dim: int  # (kernel)
    gates: int  # (kernel)
    states: int  # (kernel)
    batch_tile: int  # (kernel) batch columns per block, multiple of 8
    head_blocks: int  # (kernel) blocks sharing one head (a thread-block cluster when > 1, unless global_exchange)
    global_exchange: bool  # (kernel) the head's blocks exchange the step vector through global memory (cooperative)
    partial_sums: bool  # backward in the forward's tiling, reduce-scattering partial sums (backward_partials.cu)
    pair_blocks: int  # (kernel) 2: partial sums of pairs of blocks sharing their gate gradients in a cluster; else 1
    warps_m: int  # (kernel) 16-row groups per block
    warps_k: int  # (kernel) warps splitting K
    k_tile: int  # (kernel) 16 (bf16/fp16 m16n8k16) or 8 (fp32 via tf32 m16n8k8)
    m_tiles: int  # (kernel) m16 tiles per warp
    reg_k_tiles: int  # (kernel) k-tiles of A fragments in registers per warp
    global_k_tiles: int  # (kernel) k-tiles per warp streamed from an L2-resident scratch copy
    blocks_per_sm: int  # (kernel) co-resident blocks assumed by the register cap
    vector_buffers: int  # (kernel) 2: double-buffered step vector; 1: single buffer, two barriers per step
    stages: int  # (kernel) depth of the per-step input pipeline
    nonportable_cluster: bool  # the cluster is larger than the GPU's portable size (needs a launch opt-in)
    register_budget: int  # registers per thread the launch bounds allow
    predicted_registers: int
    fast_activations: bool  # (kernel) hardware tanh for bf16/fp16 storage
    objective: int  # predicted cycles per recurrent step of the whole grid
    version: str = VERSION

    @property
    def problem(self) -> FusedProblem:
        return FusedProblem(self.cell, self.batch_tile, self.num_heads, self.head_dim, self.dtype, self.direction)

    @property
    def exchange(self) -> str:
        """How a step's values cross the blocks of a head: "block" (one block per head), "cluster", "global", or the
        backward's partial sums of single blocks ("partials") or of pairs ("pairs"); tiling.EXCHANGES."""
        if self.pair_blocks > 1:
            return "pairs"
        if self.partial_sums:
            return "partials"
        return "global" if self.global_exchange else "cluster" if self.head_blocks > 1 else "block"

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_k

    @property
    def rows_per_block(self) -> int:
        return 16 * self.warps_m

    @property
    def k_dim(self) -> int:
        return tiling.k_dim(self.problem, self.partial_sums)

    @property
    def k_tiles_per_warp(self) -> int:
        return self.k_dim // self.k_tile // self.warps_k

    @property
    def smem_k_tiles(self) -> int:
        return self.k_tiles_per_warp - self.reg_k_tiles - self.global_k_tiles

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per block."""
        return tiling.smem_bytes(self.problem, self.warps_m, self.warps_k, self.batch_tile // 8, self.smem_k_tiles,
                                 self.vector_buffers, self.stages, self.partial_sums,
                                 global_exchange=int(self.global_exchange), pair_blocks=self.pair_blocks)

    @property
    def kernel_name(self) -> str:
        return f"flashrnn_fused_{self.direction}"

    @property
    def kernel_source(self) -> str:
        """The kernel body's file in fused/."""
        return f"{self.direction}{'_partials' if self.partial_sums else ''}.cu"

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.threads, 1, 1)

    def scratch_bytes(self, batch: int) -> int:
        """Global scratch for the L2-streamed fragments of every block (0 when all of R is on chip)."""
        blocks = self.num_heads * self.head_blocks * self.batch_tiles(batch)
        fragment = 32 * 4 * tiling.fragment_registers(self.problem)
        return blocks * self.warps_m * self.warps_k * self.global_k_tiles * self.m_tiles * fragment

    def exchange_bytes(self, batch: int) -> int:
        """The global exchange's zeroed buffer: two fills of tagged words per (batch tile, head); 0 without it."""
        if not self.global_exchange:
            return 0
        fill = tiling.exchange_bytes(self.problem, self.batch_tile // 8, self.partial_sums, self.pair_blocks)
        return self.batch_tiles(batch) * self.num_heads * 2 * fill

    def batch_tiles(self, batch: int) -> int:
        return -(-batch // self.batch_tile)

    def grid(self, batch: int) -> tuple[int, int, int]:
        """Blocks for a batch of `batch` sequences: x = head x block rank within the head, y = batch tile."""
        return (self.num_heads * self.head_blocks, self.batch_tiles(batch), 1)



def plan(cell: str, batch: int, num_heads: int, head_dim: int, dtype: Any, gpu: Any = None,
         direction: str = "forward", exchange: str | None = None) -> KernelPlan:
    """The cheapest feasible tiling of the fused kernel for this problem on `gpu` (a GPUModel, a name, or None
    for the current device). `exchange` fixes how the blocks of a split head exchange a step (tiling.EXCHANGES:
    "cluster", "global", "partials" or "pairs", the last two of which the forward takes as "global"); None lets the
    cost model choose.
    Raises PlanError naming the limits that no tiling meets."""
    if exchange not in (None, *tiling.EXCHANGES):
        raise ValueError(f"exchange must be one of {tiling.EXCHANGES} or None, not {exchange!r}")
    model = gpu_model(gpu)
    problem = FusedProblem(cell, batch, num_heads, head_dim, dtype_name(dtype), direction)
    key = _key(problem, model, exchange)
    found = _memory.get(key)
    if found is None:
        found = _load(key)
        if found is None:
            found = _solve(problem, model, exchange)
            _store(key, found)
        _memory[key] = found
    return found


def gpu_model(gpu: Any) -> Any:
    """The hwmodels GPUModel of `gpu`: a GPUModel, a name, or None for the current device (PlanError if unknown)."""
    if gpu is None:
        try:
            return current_gpu()
        except Exception as exc:  # no driver, no device, or an unknown device
            raise PlanError(f"cannot detect the current GPU ({exc}); pass gpu= a hwmodels name such as "
                            f"'H100-SXM5-80GB' (known: {', '.join(hwmodels.available())})") from exc
    if isinstance(gpu, str):
        return hwmodels.load(gpu)
    if not isinstance(gpu, hwmodels.GPUModel):
        raise PlanError(f"gpu must be a hwmodels.GPUModel, a model name such as 'H100-SXM5-80GB' (hwmodels list), or "
                        f"None for the current device; got {gpu!r}")
    return gpu


def _key(problem: FusedProblem, gpu: Any, exchange: str | None) -> str:
    text = json.dumps([VERSION, _MODEL_DIGEST, dataclasses.astuple(problem), gpu.name, repr(gpu), exchange],
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _check_architecture(problem: FusedProblem, gpu: Any) -> None:
    mma = "tf32" if problem.dtype == "fp32" else {"bf16": "bf16", "fp16": "f16"}[problem.dtype]
    shape = (16, 8, tiling.k_tile(problem))
    if gpu.compute_capability < (8, 0) or shape not in gpu.mma_shapes.get(mma, ()):
        raise PlanError(f"the fused kernel needs sm_80 or newer (cp.async and mma.sync {mma} m16n8k{shape[2]}); "
                        f"{gpu.name} is {gpu.arch}; use backend='reference' there")


def _solve(problem: FusedProblem, gpu: Any, exchange: str | None = None) -> KernelPlan:
    _check_architecture(problem, gpu)
    forced = exchange in ("partials", "pairs") and problem.direction == "backward"
    pair_sizes = {"partials": (1,), "pairs": (2,)}.get(exchange, (1, 2))
    exchange = _vector_exchange(exchange)
    sol = None if forced else _solve_vector_exchange(problem, gpu, exchange)
    partials, pair_blocks = False, 1
    split_past_cluster = sol is not None and (sol["global_exchange"] or sol["global_k_tiles"] > 0)
    split = sol is not None and sol["head_blocks"] > 1 and problem.gates > 1
    if problem.direction == "backward" and (forced or (exchange is None and (split or split_past_cluster))):
        # a split head: summing partial products through global memory may beat gathering the step vector (or
        # streaming part of R from L2); pairs of blocks only where clusters exist. Not for a one-gate cell whose
        # cluster holds the head: Elman's partial sums took 1.07-1.22x the time of its clusters or single blocks at
        # 12 x 64 to 1 x 512 on the H200 (bf16 and fp32, B=16 and 64), where the other cells' took 0.52-0.97x
        # (results/fused_plan_variants.md, fused_model_refit_ab.md)
        for pairs in pair_sizes:
            if pairs > 1 and gpu.cluster_max_nonportable < pairs and not forced:
                continue
            model, objective = tiling.build(problem, gpu, exchange=exchange, partial_sums=True, pair_blocks=pairs)
            found = _minimize(model, objective)
            if found is None and forced:
                _raise_infeasible(problem, gpu, model)
            if found is not None and (sol is None or found.objective < sol.objective):
                sol, partials, pair_blocks = found, True, pairs
    return _plan_from(problem, gpu, sol, partials, pair_blocks)


def pinned_plan(cell: str, batch: int, num_heads: int, head_dim: int, dtype: Any, gpu: Any = None,
                direction: str = "forward", exchange: str | None = None, **pins: int) -> KernelPlan:
    """The cheapest tiling with some of tiling.build's variables fixed (`pins`, e.g. head_blocks=48, warps_k=8), for
    benchmarks that time the alternatives to plan()'s choice; not cached. A backward pinned to exchange "partials"
    or "pairs" takes the partial-sum form, a forward takes them as "global" (as plan() does). Raises PlanError when the
    pinned model has no solution."""
    model_gpu = gpu_model(gpu)
    problem = FusedProblem(cell, batch, num_heads, head_dim, dtype_name(dtype), direction)
    _check_architecture(problem, model_gpu)
    partials = exchange in ("partials", "pairs") and direction == "backward"
    pair_blocks = 2 if exchange == "pairs" and partials else 1
    vector_exchange = _vector_exchange(exchange)
    model, objective = tiling.build(problem, model_gpu, exchange=vector_exchange, partial_sums=partials,
                                    pair_blocks=pair_blocks)
    found = _minimize_pinned(model, objective, pins)
    if found is None and not partials:  # as plan(): where no tiling keeps R on chip, part of it streams from L2
        found = _minimize_pinned(*tiling.build(problem, model_gpu, stream_from_l2=True, exchange=vector_exchange), pins)
    if found is None:
        _raise_infeasible(problem, model_gpu, model)
    return _plan_from(problem, model_gpu, found, partials, pair_blocks)


def _vector_exchange(exchange: str | None) -> str | None:
    """How the step vector travels for `exchange`: partial sums ("partials", "pairs") go through global memory, which
    is also the forward's exchange for them."""
    return "global" if exchange in ("partials", "pairs") else exchange


def _minimize_pinned(model: Any, objective: Any, pins: dict[str, int]) -> Solution | None:
    for name, value in pins.items():
        model.add(model.var(name) == value, name=f"pinned {name} = {value}")
    return _minimize(model, objective)


def _plan_from(problem: FusedProblem, gpu: Any, sol: Solution, partials: bool, pair_blocks: int) -> KernelPlan:
    return KernelPlan(
        cell=problem.cell, direction=problem.direction, dtype=problem.dtype, gpu=gpu.name, arch=gpu.arch,
        num_heads=problem.num_heads, head_dim=problem.head_dim, gates=problem.gates, states=problem.states,
        batch_tile=8 * sol["n_tiles"], head_blocks=sol["head_blocks"],
        global_exchange=bool(sol["global_exchange"]), partial_sums=partials, pair_blocks=pair_blocks,
        warps_m=sol["warps_m"], warps_k=sol["warps_k"], k_tile=tiling.k_tile(problem),
        m_tiles=tiling.m_tiles(problem, partials),
        reg_k_tiles=sol["reg_k_tiles"], global_k_tiles=sol["global_k_tiles"], blocks_per_sm=sol["blocks_per_sm"],
        vector_buffers=sol["vector_buffers"], stages=sol["stages"],
        nonportable_cluster=bool(sol["clustered"]) and sol["head_blocks"] > gpu.cluster_max_portable,
        register_budget=_register_budget(gpu, 32 * sol["warps_m"] * sol["warps_k"], sol["blocks_per_sm"]),
        predicted_registers=tiling.predicted_registers(problem, sol["n_tiles"], sol["reg_k_tiles"], partials,
                                                       sol["k_tiles_per_warp"], sol["warps_k"], pair_blocks),
        fast_activations=problem.dtype != "fp32", objective=sol.objective,
    )


def _solve_vector_exchange(problem: FusedProblem, gpu: Any, exchange: str | None) -> Solution:
    """The least-cost tiling that exchanges the step vector (raises PlanError when there is none)."""
    sol = None
    if exchange is None and gpu.cluster_max_nonportable == 1:
        # without clusters, through global memory only where one block cannot hold R on chip (the global exchange's
        # gains over single blocks were measured on sm_90 only)
        sol = _minimize(*tiling.build(problem, gpu, exchange="cluster"))
    if sol is None:
        sol = _minimize(*tiling.build(problem, gpu, exchange=exchange))
    if sol is not None and sol["global_exchange"] and exchange is None and gpu.cluster_max_nonportable > 1:
        # a cluster streaming part of R from L2 may still be faster than the exchange through global memory
        streamed = _minimize(*tiling.build(problem, gpu, stream_from_l2=True, exchange="cluster"))
        if streamed is not None and streamed.objective < sol.objective:
            sol = streamed
    if sol is None:  # R does not fit on chip: stream part of it from L2 each step
        model, objective = tiling.build(problem, gpu, stream_from_l2=True, exchange=exchange)
        sol = _minimize(model, objective)
        if sol is None:
            _raise_infeasible(problem, gpu, model)
    return sol


def _raise_infeasible(problem: FusedProblem, gpu: Any, model: Model) -> NoReturn:
    """PlanError quoting the minimal core that the solver finds for the infeasible `model`."""
    try:
        model.solve()
    except Infeasible as exc:
        raise PlanError(_explain(problem, gpu, exc)) from exc
    raise AssertionError("_raise_infeasible called on a feasible model")


def _minimize(model: Model, objective: Any) -> Solution | None:
    """The least-cost solution (its `.objective` is the predicted per-step cycles), or None when there is none
    (without the minimal-core search that an Infeasible from `minimize` would run)."""
    if next(iter(model.solutions(limit=1)), None) is None:
        return None
    return model.minimize(objective)


def _register_budget(gpu: Any, threads: int, blocks_per_sm: int) -> int:
    """The per-thread register cap that `__launch_bounds__(threads, blocks_per_sm)` gives ptxas: the register file
    shared by `blocks_per_sm` blocks of `threads` threads, in steps of 8, at most the architecture's limit."""
    warps = -(-threads // gpu.warp_size)
    per_thread = gpu.regs_per_sm // (warps * gpu.warp_size * blocks_per_sm)
    return min(gpu.max_regs_per_thread, per_thread // 8 * 8)


def _explain(problem: FusedProblem, gpu: Any, exc: Infeasible) -> str:
    reasons = "; ".join(str(c) for c in exc.core)
    advice = (f"one head's R takes {problem.recurrent_bytes // 1024} KiB in {problem.dtype}; use bf16/fp16, a smaller "
              f"head_dim or a smaller batch, or backend='alternating' (R from memory, one GEMM per step)")
    return f"no fused-kernel tiling of {problem} fits {gpu.name}: {reasons}. {advice}"


def _cache_dir() -> Path:
    return Path(os.environ.get("FLASHRNN_CACHE_DIR", Path.home() / ".cache" / "flashrnn_kernels")) / "plans"


def _load(key: str) -> KernelPlan | None:
    path = _cache_dir() / f"{key}.json"
    try:
        data = json.loads(path.read_text())
        found = KernelPlan(**data)
    except (OSError, ValueError, TypeError):
        return None
    return found if found.version == VERSION else None


def _store(key: str, found: KernelPlan) -> None:
    from filelock import FileLock

    directory = _cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with FileLock(str(directory / f"{key}.lock")):
            tmp = directory / f"{key}.json.tmp"
            tmp.write_text(json.dumps(dataclasses.asdict(found), indent=1))
            tmp.replace(directory / f"{key}.json")
    except OSError:
        return  # a read-only home: the in-memory cache still serves this process
