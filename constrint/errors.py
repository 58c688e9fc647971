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
    """A syntax error in model text, located by 1-based `line` and `column`; `message` says what is wrong."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.message = message
        self.line = line
        self.column = column


class Infeasible(ConstrintError):
    """The model has no solution; `core` is a list of the user's constraints that has none.

    `core` is minimal (dropping any one of its constraints leaves a satisfiable set) when `minimal` is True. It is
    False only when some subset test did not settle within its time budget: the core is still infeasible then.
    When something other than the constraints is to blame (an objective undefined wherever it is evaluated),
    `reason` says what, and `core` is empty; else `reason` is None.
    """

    def __init__(self, core: Sequence[object], minimal: bool = True, reason: str | None = None) -> None:
        self.core = list(core)
        self.minimal = minimal
        self.reason = reason
        names = "; ".join(str(c) for c in self.core) or "(the variable domains alone)"
        note = "" if minimal else " (not proven minimal: some subsets could not be settled in time)"
        super().__init__(f"no solution: {reason}" if reason else
                         f"no solution: these constraints cannot all hold{note}: {names}")


class TimeLimit(ConstrintError):
    """The search ran past its time limit before finishing.

    From `minimize` / `maximize`, `best` is the best solution found before the limit (its `objective` set), which
    is feasible but not proven optimal; None where no solution was found (and from every other call).
    """

    def __init__(self, message: str, best: object | None = None) -> None:
        super().__init__(message)
        self.best = best


class SolverBug(AssertionError):
    """Internal error: a candidate answer failed verification against the original constraints."""
