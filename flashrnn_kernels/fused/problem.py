"""FusedProblem: what one fused recurrent launch computes, without the sequence length (a runtime argument)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..cells import CellSpec, get_cell

DTYPES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}
"""Supported storage dtypes and their element sizes in bytes."""
HEAD_DIMS: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 768, 1024)
DIRECTIONS: tuple[str, ...] = ("forward", "backward")

_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}


def dtype_name(dtype: Any) -> str:
    """"bf16", "fp16" or "fp32" from a torch dtype or one of those strings (or their long names)."""
    text = str(dtype).removeprefix("torch.")
    name = _DTYPE_ALIASES.get(text, text)
    if name not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported by the fused kernel; use one of {sorted(DTYPES)}")
    return name


@dataclass(frozen=True)
class FusedProblem:
    """One fused LSTM-family launch: `batch` sequences of `num_heads` heads of `head_dim` units each.

    The batch size is part of the problem because it steers the batch tiling; the kernel takes B at run time.
    """

    cell: str
    batch: int
    num_heads: int
    head_dim: int
    dtype: str
    direction: str = "forward"

    def __post_init__(self) -> None:
        get_cell(self.cell)
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        for name in ("batch", "num_heads", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.head_dim not in HEAD_DIMS:
            raise ValueError(f"head_dim {self.head_dim} is not supported by the fused kernel; use one of {HEAD_DIMS}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")

    @property
    def spec(self) -> CellSpec:
        return get_cell(self.cell)

    @property
    def gates(self) -> int:
        return self.spec.gate_count

    @property
    def states(self) -> int:
        return self.spec.state_count

    @property
    def elem_bytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def recurrent_bytes(self) -> int:
        """Bytes of one head's R in the storage dtype."""
        return self.gates * self.head_dim * self.head_dim * self.elem_bytes
