"""Original constraints compiled to numpy checks over blocks of candidate assignments.

A block gives each unfixed variable its own axis: position i of the values is an int64 array shaped to
broadcast along axis k (1 elsewhere), and a fixed variable is a plain int. A compiled check returns where its
constraints hold, one mask per set of variables read, broadcast over the axes of those variables only (a bool
when they are all fixed), so each constraint costs the size of its own variables' grid, not the block's.

Checks follow `Constraint.holds` exactly: numpy's // and % on int64 floor as Python does, and an undefined
x // 0 or x % 0 makes the constraint containing it false. Divisors that cannot be 0 within the bounds given at
compile time (bounds only shrink later) are used as they are; the others are tested for zeros. The caller
makes sure every subexpression fits in int64 (`check.constraint_fits`) before it evaluates a block.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .check import ExprSource, int64_interval
from .constraints import AllDifferent, AnyOf, Compare, Constraint, Divides
from .expr import Operand

BlockCheck = Callable[[list], Any]


def _nonzero(d: Any, bad: list) -> Any:
    """d with zeros replaced by 1; where it was 0 is appended to `bad`."""
    zero = np.equal(d, 0)
    if not zero.any():
        return d
    bad.append(zero)
    return np.where(zero, 1, d)


class _Source(ExprSource):
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


def _function(name: str, body: str, src: _Source) -> str:
    if not src.tests_zero:
        return f"def {name}(v):\n    return {body}\n"
    return (f"def {name}(v):\n    bad = []\n    r = {body}\n"
            "    for z in bad:\n        r = r & ~z\n    return r\n")


def _compile(sources: list[str], scope: dict) -> dict:
    scope["_nonzero"] = _nonzero
    exec(compile("".join(sources), "<constrint block checks>", "exec"), scope)
    return scope


def block_check(constraints: Sequence[Constraint], lo: list[int], hi: list[int]) -> BlockCheck:
    """For variables within [lo, hi]: values -> a tuple with one mask per set of variables that some
    constraints read, where all of those constraints hold. One call evaluates a whole block."""
    sources: list[str] = []

    def term(cs: list[Constraint]) -> str:
        """Source of where all of `cs` hold (a call of a helper function when it tests divisors)."""
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
                bodies.append("(" + (" | ".join(term([d]) for d in c.items) or "False") + ")")
            else:
                raise TypeError(f"no numpy form for {c!r}")
        body = " & ".join(bodies) or "True"
        if not src.tests_zero:
            return f"({body})"
        name = f"_t{len(sources)}"
        sources.append(_function(name, body, src))
        return f"{name}(v)"

    groups: dict[frozenset, list[Constraint]] = {}
    for c in constraints:
        groups.setdefault(frozenset(v.index for v in c.variables().values()), []).append(c)
    terms = [term(cs) for cs in groups.values()]
    sources.append("def check(v):\n    return (" + "".join(t + ", " for t in terms) + ")\n")
    return _compile(sources, {})["check"]


def block_value(e: Operand, lo: list[int], hi: list[int]) -> BlockCheck:
    """values -> (e, where e is defined), for variables within [lo, hi]: a zero divisor leaves e undefined there
    (True: defined everywhere), and its value there is meaningless."""
    src = _Source(lo, hi)
    body = src.expr(e)
    if not src.tests_zero:
        code = f"def value(v):\n    return {body}, True\n"
    else:
        code = (f"def value(v):\n    bad = []\n    r = {body}\n    defined = True\n"
                "    for z in bad:\n        defined = defined & ~z\n    return r, defined\n")
    return _compile([code], {})["value"]
