"""Depth-first search over the user variables with propagation to a fixpoint at every node.

Branching is binary, x = v or x != v, where v is the end of x's domain in its preferred direction, so the
search undoes through the store's trail and never copies domains. Preferred variables are branched first, in
order (which makes the first solution the lexicographic optimum); the rest by first-fail (smallest domain).
With an objective, every solution tightens a bound on it (branch and bound) until the search space is empty.
"""
from __future__ import annotations

import time
from typing import Iterator

from .errors import TimeLimit
from .propagate import fixpoint
from .store import Conflict, Store

MIN, MAX = "min", "max"


class Search:
    """One search over a flattened model; `nodes` counts branching decisions taken so far."""

    def __init__(self, store: Store, props: list, n_user: int, prefer: list[tuple[int, str]],
                 objective: tuple[int, str] | None = None, time_limit: float | None = None) -> None:
        self.store, self.props, self.n_user = store, props, n_user
        self.prefer = prefer
        chosen = {i for i, _ in prefer}
        self.others = [i for i in range(n_user) if i not in chosen]
        self.objective = objective
        self.bound: int | None = None
        self.deadline = None if time_limit is None else time.perf_counter() + time_limit
        self.nodes = 0

    def _propagate(self) -> bool:
        s = self.store
        if self.bound is not None:
            obj, sense = self.objective  # type: ignore[misc]
            try:
                if sense == MIN:
                    s.set_hi(obj, self.bound)
                else:
                    s.set_lo(obj, self.bound)
            except Conflict:
                for p in s.queue:
                    s.queued[p] = False
                s.queue.clear()
                return False
        return fixpoint(s, self.props)

    def _choose(self) -> tuple[int, str]:
        lo, hi = self.store.lo, self.store.hi
        for i, d in self.prefer:
            if lo[i] != hi[i]:
                return i, d
        best, best_size = -1, 0
        vs, md = self.store.vs, self.store.md
        for i in self.others:
            if lo[i] != hi[i]:
                v = vs[i]
                size = len(v) if v is not None else (hi[i] - lo[i]) // md[i] + 1
                if best < 0 or size < best_size:
                    best, best_size = i, size
                    if size == 2:
                        break
        return best, MIN

    def run(self) -> Iterator[tuple[int, ...]]:
        """Yield each solution (values of the user variables, in order); with an objective, each improves."""
        s = self.store
        s.queue[:] = range(len(self.props))
        s.queued[:] = [True] * len(self.props)
        if not self._propagate():
            return
        stack: list[tuple[int, int, int, str]] = []
        lo, hi = s.lo, s.hi
        while True:
            var, direction = self._choose()
            if var >= 0:
                self.nodes += 1
                if self.deadline is not None and not self.nodes & 127 and time.perf_counter() > self.deadline:
                    raise TimeLimit(f"search stopped at its time limit after {self.nodes} nodes")
                v = lo[var] if direction == MIN else hi[var]
                stack.append((s.mark(), var, v, direction))
                s.fix(var, v)
                if self._propagate():
                    continue
            else:
                yield tuple(lo[: self.n_user])
                if self.objective is not None:
                    obj, sense = self.objective
                    self.bound = lo[obj] - 1 if sense == MIN else lo[obj] + 1
            while stack:  # backtrack: undo the latest choice x = v and take x != v instead
                mark, var, v, direction = stack.pop()
                s.undo(mark)
                if direction == MIN:
                    s.set_lo(var, v + 1)
                else:
                    s.set_hi(var, v - 1)
                if self._propagate():
                    break
            else:
                return
