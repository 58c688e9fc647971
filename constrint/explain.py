"""Minimal infeasible cores by a deletion filter over the user's constraints."""
from __future__ import annotations

from typing import Callable, Sequence, TypeVar

C = TypeVar("C")


def minimal_core(constraints: Sequence[C], feasible: Callable[[list[C]], bool]) -> list[C]:
    """A subset of the infeasible `constraints` with no solution from which no constraint can be dropped.

    Each constraint in turn is left out; when the rest is still infeasible it stays out. Whatever remains is
    needed: dropping any one of them (from the final set, a subset of each tested set) makes it feasible.
    """
    core = list(constraints)
    i = 0
    while i < len(core):
        trial = core[:i] + core[i + 1 :]
        if feasible(trial):
            i += 1
        else:
            core = trial
    return core
