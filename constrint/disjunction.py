"""The disjunction propagator: at least one of several constraints holds.

Each disjunct is judged on the bounds of the user variables with interval arithmetic over its original
expression (exact once its variables are fixed), so partial operations inside one disjunct (x // y with y
possibly 0) never constrain the model as a whole.
"""
from __future__ import annotations

from .expr import interval
from .store import Conflict, Store


class AnyOf:
    """At least one disjunct holds; each disjunct is judged on the bounds of the user variables.

    A disjunct is impossible when interval reasoning (exact once its variables are fixed) rules it out.
    When one disjunct is left and it compiled to propagators over user variables, they run.
    """

    __slots__ = ("items", "direct", "vars")

    def __init__(self, items: list, direct: list, xs: list[int]) -> None:
        self.items, self.direct, self.vars = items, direct, tuple(xs)

    def propagate(self, s: Store) -> None:
        alive = [k for k, c in enumerate(self.items) if possible(c, s.lo, s.hi)]
        if not alive:
            raise Conflict
        if len(alive) == 1:
            for p in self.direct[alive[0]]:
                p.propagate(s)


def possible(c, lo: list[int], hi: list[int]) -> bool:
    """False when constraint `c` cannot hold for any values within the bounds."""
    kind = type(c).__name__
    if kind == "Compare":
        a = interval(c.lhs, lo, hi)
        b = interval(c.rhs, lo, hi)
        if a is None or b is None:
            return False
        op = c.op
        if op == "==":
            return a[0] <= b[1] and b[0] <= a[1]
        if op == "!=":
            return not (a[0] == a[1] == b[0] == b[1])
        if op == "<=":
            return a[0] <= b[1]
        if op == "<":
            return a[0] < b[1]
        if op == ">=":
            return a[1] >= b[0]
        return a[1] > b[0]
    if kind == "AnyOf":
        return any(possible(d, lo, hi) for d in c.items)
    if kind == "Divides":
        d = interval(c.divisor, lo, hi)
        n = interval(c.multiple, lo, hi)
        if d is None or n is None or d == (0, 0):
            return False
        return not (d[0] == d[1] and n[0] == n[1] and n[0] % d[0])
    fixed = [interval(x, lo, hi) for x in c.items]  # AllDifferent
    if any(r is None for r in fixed):
        return False
    vals = [r[0] for r in fixed if r[0] == r[1]]
    return len(set(vals)) == len(vals)
