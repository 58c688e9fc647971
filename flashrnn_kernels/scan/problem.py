"""ScanProblem: what a scan kernel computes, without the sequence length or batch size (both are runtime)."""
from __future__ import annotations

from dataclasses import dataclass

CELLS = ("linear", "min_gru", "min_lstm")
"""Cell names; their order gives the kernel's SCAN_CELL code."""

DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
"""Storage dtypes and their sizes in bytes; the dict order gives the kernel's SCAN_DTYPE code."""

DIRECTIONS = ("forward", "backward")


@dataclass(frozen=True)
class ScanProblem:
    """One scan kernel: `cell` over `hidden_dim` channels stored as `dtype`, run `direction`.

    The backward is the same scan run in reverse (dh_t = dy_t + a_{t+1} dh_{t+1}) with the gradient epilogue.
    """

    cell: str
    hidden_dim: int
    dtype: str
    direction: str = "forward"

    def __post_init__(self) -> None:
        if self.cell not in CELLS:
            raise ValueError(f"unknown scan cell {self.cell!r}; use one of {CELLS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unsupported scan dtype {self.dtype!r}; use one of {tuple(DTYPES)}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {self.direction!r}; use one of {DIRECTIONS}")
        if isinstance(self.hidden_dim, bool) or not isinstance(self.hidden_dim, int) or self.hidden_dim < 1:
            raise ValueError(f"hidden_dim must be a positive int, got {self.hidden_dim!r}")

    @property
    def input_count(self) -> int:
        """[B, T, D] inputs the cell reads per step (linear: a, b; minGRU: k, h_pre; minLSTM: f, i, h_pre)."""
        return 3 if self.cell == "min_lstm" else 2

    @property
    def element_bytes(self) -> int:
        return DTYPES[self.dtype]
