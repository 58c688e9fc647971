"""Exceptions of constrint: every one is a `ConstrintError`, itself a `ValueError`."""
from __future__ import annotations

from typing import Sequence


class ConstrintError(ValueError):
    """Bad input to the solver: the message names the bad value and what would work."""


class UnknownVariable(ConstrintError, KeyError):
    """A variable name that the model does not have (also a KeyError, as a failed lookup)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ParseError(ConstrintError):
    """A syntax error in model text, located by 1-based `line` and `column`."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.line = line
        self.column = column


class Infeasible(ConstrintError):
    """The model has no solution; `core` is a minimal list of the user's constraints without one."""

    def __init__(self, core: Sequence[object]) -> None:
        self.core = list(core)
        names = "; ".join(str(c) for c in self.core) or "(the variable domains alone)"
        super().__init__(f"no solution: these constraints cannot all hold: {names}")


class TimeLimit(ConstrintError):
    """The search ran past its time limit before finishing."""


class SolverBug(AssertionError):
    """Internal error: a candidate answer failed verification against the original constraints."""
