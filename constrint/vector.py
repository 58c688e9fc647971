"""Original constraints compiled to numpy checks over blocks of candidate assignments.

A block gives each unfixed variable its own axis: position i of the values is an int64 array shaped to
broadcast along axis k (1 elsewhere), and a fixed variable is a plain int. A compiled check returns where its
constraint holds, broadcast over the axes of the variables it reads only (a bool when it reads none), so each
constraint costs the size of its own variables' grid, not the block's.

Checks follow `Constraint.holds` exactly: numpy's // and % on int64 floor as Python does, and an undefined
x // 0 or x % 0 makes the constraint containing it false. Divisors that cannot be 0 within the bounds given at
compile time (bounds only shrink later) are used as they are; the others are tested for zeros. The caller
makes sure every subexpression fits in int64 (`check.constraint_fits`) before it evaluates a block.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .check import int64_interval
from .constraints import AllDifferent, AnyOf, Compare, Constraint, Divides
from .expr import IntVar, Neg, Operand

BlockCheck = Callable[[list], Any]


def _nonzero(d: Any, bad: list) -> Any:
    """d with zeros replaced by 1; where it was 0 is appended to `bad`."""
    zero = np.equal(d, 0)
    if not zero.any():
        return d
    bad.append(zero)
    return np.where(zero, 1, d)


class _Source:
    """Numpy source of expressions over `v`, testing only the divisors that may be 0 within [lo, hi]."""

    def __init__(self, lo: list[int], hi: list[int]) -> None:
        self.lo, self.hi = lo, hi
        self.tests_zero = False

    def divisor(self, e: Operand) -> str:
        r = int64_interval(e, self.lo, self.hi)
        if r and (r[0] > 0 or r[1] < 0):
            return self.expr(e)
        self.tests_zero = True
        return f"_nonzero({self.expr(e)}, bad)"

    def expr(self, e: Operand) -> str:
        if isinstance(e, int):
            return f"({e!r})"
        if isinstance(e, IntVar):
            return f"v[{e.index}]"
        if isinstance(e, Neg):
            return f"(-{self.expr(e.a)})"
        op = e.op  # type: ignore[attr-defined]
        b = self.divisor(e.b) if op in ("//", "%") else self.expr(e.b)  # type: ignore[attr-defined]
        return f"({self.expr(e.a)} {op} {b})"  # type: ignore[attr-defined]


def _function(name: str, body: str, src: _Source) -> str:
    if not src.tests_zero:
        return f"def {name}(v):\n    return {body}\n"
    return (f"def {name}(v):\n    bad = []\n    r = {body}\n"
            "    for z in bad:\n        r = r & ~z\n    return r\n")


def _compile(sources: list[str], scope: dict) -> dict:
    scope["_nonzero"] = _nonzero
    exec(compile("".join(sources), "<constrint block checks>", "exec"), scope)
    return scope


def block_checks(constraints: Sequence[Constraint], lo: list[int], hi: list[int]) -> list[BlockCheck]:
    """Checks for variables within [lo, hi]: values -> where the constraints hold. Constraints that read
    the same set of variables share one check (their conjunction), so a block evaluates one per set."""
    sources: list[str] = []

    def add(cs: list[Constraint]) -> str:
        """A function over v that is true where all of `cs` hold; returns its name."""
        name = f"c{id(cs[0])}"
        src = _Source(lo, hi)
        bodies = []
        for c in cs:
            if isinstance(c, Compare):
                bodies.append(f"({src.expr(c.lhs)} {c.op} {src.expr(c.rhs)})")
            elif isinstance(c, Divides):
                bodies.append(f"({src.expr(c.multiple)} % {src.divisor(c.divisor)} == 0)")
            elif isinstance(c, AllDifferent):
                items = [src.expr(x) for x in c.items]
                bodies += [f"({items[i]} != {items[j]})" for i in range(len(items)) for j in range(i)]
            elif isinstance(c, AnyOf):  # each disjunct separately: an undefined one is false, not the whole
                bodies.append("(" + (" | ".join(f"{add([d])}(v)" for d in c.items) or "False") + ")")
            else:
                raise TypeError(f"no numpy form for {c!r}")
        sources.append(_function(name, " & ".join(bodies) or "True", src))
        return name

    groups: dict[frozenset, list[Constraint]] = {}
    for c in constraints:
        groups.setdefault(frozenset(v.index for v in c.variables().values()), []).append(c)
    names = [add(cs) for cs in groups.values()]
    scope = _compile(sources, {})
    return [scope[n] for n in names]


def block_value(e: Operand, lo: list[int], hi: list[int]) -> BlockCheck:
    """values -> e, for variables within [lo, hi]; a zero divisor counts as 1 (callers check definedness)."""
    src = _Source(lo, hi)
    body = src.expr(e)
    code = f"def value(v):\n    bad = []\n    return {body}\n" if src.tests_zero else _function("value", body, src)
    return _compile([code], {})["value"]
