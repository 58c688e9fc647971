"""GPUModel: one GPU's limits and sizes, as a frozen value.

Units: memory sizes in bytes, bandwidth in bytes per second, clocks in MHz, register counts in 32-bit
registers, thread-block cluster sizes in blocks. Tensor-core shapes are (m, n, k) triples per operand dtype.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

from .errors import HwModelError, ModelFieldError

if TYPE_CHECKING:
    from .occupancy import Occupancy

Shape = tuple[int, int, int]

#: Operand dtypes a tensor-core table may name.
MMA_DTYPES = ("f16", "bf16", "tf32", "f64", "int8", "fp8")

#: Integer fields that must be strictly positive.
POSITIVE_INT_FIELDS = (
    "sm_count", "warp_size", "max_threads_per_block", "max_threads_per_sm", "max_blocks_per_sm",
    "max_warps_per_sm", "regs_per_sm", "regs_per_block", "max_regs_per_thread", "reg_alloc_unit",
    "register_file_partitions", "smem_per_sm", "smem_per_block", "smem_per_block_optin",
    "smem_alloc_granularity", "l1_bytes_per_sm", "l2_bytes", "memory_bytes", "memory_bandwidth",
    "boost_clock_mhz", "cluster_max_portable", "cluster_max_nonportable",
)
#: Integer fields that may be zero (sm_70 reserves no shared memory per block).
NONNEGATIVE_INT_FIELDS = ("smem_reserved_per_block",)
REG_ALLOC_GRANULARITIES = ("warp",)


@dataclass(frozen=True)
class GPUModel:
    """Limits of one GPU model, as the CUDA programming guide's compute-capability table and the
    vendor datasheet give them. Every field is required; see the module docstring for units."""

    name: str
    aliases: tuple[str, ...]
    compute_capability: tuple[int, int]
    sm_count: int
    warp_size: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_warps_per_sm: int
    regs_per_sm: int
    regs_per_block: int
    max_regs_per_thread: int
    reg_alloc_unit: int  # registers given to a warp in one allocation step (256 on sm_50+)
    reg_alloc_granularity: str  # "warp": registers are allocated per warp
    register_file_partitions: int  # SM sub-partitions; each holds 1/N of the register file
    smem_per_sm: int  # bytes, the largest shared-memory carveout
    smem_per_block: int  # bytes a block gets without opting in (48 KiB)
    smem_per_block_optin: int  # bytes a block may use after opting in
    smem_reserved_per_block: int  # bytes the driver reserves per resident block (1 KiB on sm_80+)
    smem_alloc_granularity: int  # bytes; a block's shared memory is rounded up to this
    l1_bytes_per_sm: int  # bytes of the unified L1 data cache / shared memory array per SM
    l2_bytes: int
    memory_bytes: int
    memory_bandwidth: int  # bytes per second
    boost_clock_mhz: int
    mma_shapes: Mapping[str, tuple[Shape, ...]] = field(hash=False)  # warp-level mma.sync
    wgmma_shapes: Mapping[str, tuple[Shape, ...]] = field(hash=False)  # warpgroup wgmma (sm_90)
    cluster_max_portable: int  # blocks per thread-block cluster any launch may use (1: no clusters)
    cluster_max_nonportable: int  # blocks per cluster with the non-portable opt-in
    cooperative_launch: bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "aliases", tuple(self.aliases))
        object.__setattr__(self, "compute_capability", tuple(self.compute_capability))
        for name in ("mma_shapes", "wgmma_shapes"):
            table = {k: tuple(tuple(s) for s in v) for k, v in dict(getattr(self, name)).items()}
            object.__setattr__(self, name, MappingProxyType(table))
        _validate(self)

    @property
    def arch(self) -> str:
        """The nvcc/NVRTC architecture name, e.g. "sm_90"."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def max_smem_per_block(self) -> int:
        """Bytes of shared memory one block may use (the opt-in maximum)."""
        return self.smem_per_block_optin

    def tensor_shapes(self, dtype: str, warpgroup: bool = False) -> tuple[Shape, ...]:
        """(m, n, k) shapes of mma.sync (wgmma with `warpgroup=True`) for `dtype`, preferred first."""
        table = self.wgmma_shapes if warpgroup else self.mma_shapes
        if dtype not in table:
            instruction = "wgmma" if warpgroup else "mma.sync"
            raise HwModelError(f"{self.name} ({self.arch}) has no {instruction} shapes for {dtype!r}; "
                               f"it has: {', '.join(table) or 'none'}")
        return table[dtype]

    def blocks_per_sm(self, threads_per_block: int, registers_per_thread: int,
                      shared_bytes_per_block: int = 0) -> Occupancy:
        """Resident blocks per SM for a launch; see `hwmodels.occupancy.blocks_per_sm`."""
        from .occupancy import blocks_per_sm

        return blocks_per_sm(self, threads_per_block, registers_per_thread, shared_bytes_per_block)


def _validate(m: GPUModel) -> None:
    _check_types(m)
    for key in POSITIVE_INT_FIELDS:
        if getattr(m, key) <= 0:
            raise ModelFieldError(key, f"must be a positive integer, got {getattr(m, key)}")
    for key in NONNEGATIVE_INT_FIELDS:
        if getattr(m, key) < 0:
            raise ModelFieldError(key, f"must be >= 0, got {getattr(m, key)}")
    if m.compute_capability[0] < 1 or m.compute_capability[1] < 0:
        raise ModelFieldError("compute_capability", f"must be [major >= 1, minor >= 0], got "
                              f"{list(m.compute_capability)}")
    if m.reg_alloc_granularity not in REG_ALLOC_GRANULARITIES:
        raise ModelFieldError("reg_alloc_granularity", f"must be one of {REG_ALLOC_GRANULARITIES}, "
                              f"got {m.reg_alloc_granularity!r}")
    _check_consistency(m)
    for table in ("mma_shapes", "wgmma_shapes"):
        for dtype, shapes in getattr(m, table).items():
            if dtype not in MMA_DTYPES:
                raise ModelFieldError(f"{table}.{dtype}", f"unknown dtype; use one of {MMA_DTYPES}")
            for shape in shapes:
                if len(shape) != 3 or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0
                                          for d in shape):
                    raise ModelFieldError(f"{table}.{dtype}", f"shape {list(shape)} is not three "
                                          "positive integers [m, n, k]")


def _check_types(m: GPUModel) -> None:
    if not isinstance(m.name, str) or not m.name:
        raise ModelFieldError("name", f"must be a non-empty string, got {m.name!r}")
    if not all(isinstance(a, str) and a for a in m.aliases):
        raise ModelFieldError("aliases", f"must be a list of non-empty strings, got {list(m.aliases)}")
    cc = m.compute_capability
    if len(cc) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in cc):
        raise ModelFieldError("compute_capability", f"must be [major, minor] integers, got {list(cc)}")
    for key in POSITIVE_INT_FIELDS + NONNEGATIVE_INT_FIELDS:
        value = getattr(m, key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelFieldError(key, f"must be an integer, got {type(value).__name__} {value!r}")
    if not isinstance(m.reg_alloc_granularity, str):
        raise ModelFieldError("reg_alloc_granularity", f"must be a string such as \"warp\", got "
                              f"{m.reg_alloc_granularity!r}")
    if not isinstance(m.cooperative_launch, bool):
        raise ModelFieldError("cooperative_launch", f"must be true or false, got {m.cooperative_launch!r}")


def _check_consistency(m: GPUModel) -> None:
    rules = (
        ("max_threads_per_sm", m.max_threads_per_sm == m.max_warps_per_sm * m.warp_size,
         f"must equal max_warps_per_sm * warp_size = {m.max_warps_per_sm * m.warp_size}"),
        ("max_threads_per_block", m.max_threads_per_block <= m.max_threads_per_sm,
         f"exceeds max_threads_per_sm = {m.max_threads_per_sm}"),
        ("max_threads_per_block", m.max_threads_per_block % m.warp_size == 0,
         f"must be a multiple of warp_size = {m.warp_size}"),
        ("regs_per_block", m.regs_per_block <= m.regs_per_sm, f"exceeds regs_per_sm = {m.regs_per_sm}"),
        ("max_regs_per_thread", m.max_regs_per_thread * m.warp_size <= m.regs_per_block,
         f"one warp at this count would exceed regs_per_block = {m.regs_per_block}"),
        ("regs_per_sm", m.regs_per_sm % (m.reg_alloc_unit * m.register_file_partitions) == 0,
         "must be a multiple of reg_alloc_unit * register_file_partitions"),
        ("smem_per_block", m.smem_per_block <= m.smem_per_block_optin,
         f"exceeds smem_per_block_optin = {m.smem_per_block_optin}"),
        ("smem_per_block_optin", m.smem_per_block_optin + m.smem_reserved_per_block <= m.smem_per_sm,
         f"plus smem_reserved_per_block ({m.smem_reserved_per_block}) exceeds smem_per_sm = "
         f"{m.smem_per_sm}"),
        ("smem_per_sm", m.smem_per_sm % m.smem_alloc_granularity == 0,
         f"must be a multiple of smem_alloc_granularity = {m.smem_alloc_granularity}"),
        ("smem_per_sm", m.smem_per_sm <= m.l1_bytes_per_sm,
         f"exceeds the unified L1/shared array l1_bytes_per_sm = {m.l1_bytes_per_sm}"),
        ("cluster_max_portable", m.cluster_max_portable <= m.cluster_max_nonportable,
         f"exceeds cluster_max_nonportable = {m.cluster_max_nonportable}"),
    )
    for key, ok, reason in rules:
        if not ok:
            raise ModelFieldError(key, f"{getattr(m, key)} {reason}")
