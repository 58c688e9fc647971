"""Minimal infeasible cores by a deletion filter over the user's constraints."""
from __future__ import annotations

from typing import Callable, Sequence, TypeVar

C = TypeVar("C")


def minimal_core(constraints: Sequence[C], feasible: Callable[[list[C]], bool]) -> list[C]:
    """A subset of the infeasible `constraints` with no solution from which no constraint can be dropped.

    A deletion filter over chunks: a run of constraints is left out when the rest stays infeasible; when the
    rest becomes feasible the run is halved, down to single constraints, which are kept if needed. Each kept
    constraint was needed by a superset of the final core, so it is needed by the core: the core is minimal.
    """
    core = list(constraints)
    i, k = 0, max(1, len(core) // 2)
    while i < len(core):
        trial = core[:i] + core[i + k :]
        if not feasible(trial):
            core = trial
        elif k > 1:
            k //= 2
        else:
            i += 1
    return core
