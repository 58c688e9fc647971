"""Recurrent cells as CellSpecs (pointwise math written once), and their registry."""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .base import FUNCTIONS, CellSpec, CellSpecError
from .elman import ELMAN
from .gru import GRU
from .lstm import LSTM
from .slstm import SLSTM

CELLS: Mapping[str, CellSpec] = MappingProxyType({cell.name: cell for cell in (LSTM, GRU, SLSTM, ELMAN)})
"""Known cells by name."""


def get_cell(name: str | CellSpec) -> CellSpec:
    """The CellSpec called `name` (a CellSpec is returned as is)."""
    if isinstance(name, CellSpec):
        return name
    try:
        return CELLS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown cell {name!r}; known cells: {sorted(CELLS)}") from None


__all__ = ["CELLS", "FUNCTIONS", "CellSpec", "CellSpecError", "get_cell"]
