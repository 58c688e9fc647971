"""Original constraints compiled to fast Python predicates over value tuples, and int64 range checks.

The predicates follow `Constraint.holds` exactly (Python floor semantics; an undefined x // 0 or x % 0 makes
the constraint containing it false) and read variable i of the model as position i of the values.
The Python form is generated source, built only from variable indices, ints and operators.
"""
from __future__ import annotations

from typing import Callable, Sequence

from .errors import SolverBug
from .constraints import AllDifferent, AnyOf, Compare, Constraint, Divides
from .expr import IntVar, Neg, Operand, binary_interval, pow_interval, sum_terms

Predicate = Callable[[Sequence[int]], bool]
INT64_SAFE = 1 << 62
TOO_DEEP = (SyntaxError, RecursionError)  # what compiling source nested too deeply raises (over 200 parentheses)


class ExprSource:
    """Python source of expressions over `v` (the values); x // 0 and x % 0 raise ZeroDivisionError natively.

    Subclasses change how a divisor of // and % is written (`divisor`)."""

    def divisor(self, e: Operand) -> str:
        return self.expr(e)

    def expr(self, e: Operand) -> str:
        if isinstance(e, int):
            return f"({e!r})"
        if isinstance(e, IntVar):
            return f"v[{e.index}]"
        if isinstance(e, Neg):
            return f"(-{self.expr(e.a)})"
        terms = sum_terms(e)
        if len(terms) > 2:  # one flat call: Python's compiler recurses once per nested operator
            parts = [self.expr(t) if sign > 0 else f"(-{self.expr(t)})" for sign, t in terms]
            return f"sum(({', '.join(parts)}))"
        op = e.op  # type: ignore[attr-defined]
        b = self.divisor(e.b) if op in ("//", "%") else self.expr(e.b)  # type: ignore[attr-defined]
        return f"({self.expr(e.a)} {op} {b})"  # type: ignore[attr-defined]


_source = ExprSource().expr


def _body(c: Constraint, helpers: list) -> str:
    if isinstance(c, Compare):
        return f"({_source(c.lhs)} {c.op} {_source(c.rhs)})"
    if isinstance(c, Divides):
        return f"({_source(c.multiple)} % {_source(c.divisor)} == 0)"
    if isinstance(c, AllDifferent):
        return f"(len({{{', '.join(_source(x) for x in c.items)}}}) == {len(c.items)})"
    if isinstance(c, AnyOf):  # each disjunct separately: an undefined one is false, not the whole
        checks = predicates(c.items)
        helpers.extend(checks[id(d)] for d in c.items)
        return "(" + " or ".join(f"_h{len(helpers) - len(c.items) + k}(v)" for k in range(len(c.items))) + ")"
    raise TypeError(f"no source form for {c!r}")


def predicates(constraints: Sequence[Constraint]) -> dict[int, Predicate]:
    """id(constraint) -> its check, all compiled at once (else through `holds`, where Python cannot compile the
    source: nested too deeply); each check's __doc__ is the constraint's text."""
    helpers: list = []
    try:
        lines = [f"def c{k}(v):\n    try:\n        return {_body(c, helpers)}\n"
                 "    except ZeroDivisionError:\n        return False\n" for k, c in enumerate(constraints)]
        scope: dict = {f"_h{k}": h for k, h in enumerate(helpers)}
        exec(compile("".join(lines), "<constrint checks>", "exec"), scope)
        checks = [scope[f"c{k}"] for k in range(len(constraints))]
    except TOO_DEEP:
        checks = [_interpreted([c], ()) for c in constraints]
    out = {}
    for f, c in zip(checks, constraints):
        f.__doc__ = c.text()
        out[id(c)] = f
    return out


def conjunction(constraints: Sequence[Constraint], domains: Sequence[tuple[int, int, frozenset | None]]) -> Predicate:
    """One function values -> bool: every value within its domain (lo, hi, allowed) and every constraint holds.

    An undefined operation raises ZeroDivisionError, which makes the conjunction false, as `holds` does. Where
    Python cannot compile the source (nested too deeply), the function checks through `holds` instead.
    """
    helpers: list = []
    scope: dict = {}
    parts = []
    for i, (lo, hi, allowed) in enumerate(domains):
        if allowed is not None:
            scope[f"_d{i}"] = allowed
            parts.append(f"v[{i}] in _d{i}")
        else:
            parts.append(f"{lo!r} <= v[{i}] <= {hi!r}")
    try:
        parts += [_body(c, helpers) for c in constraints]
        scope.update({f"_h{k}": h for k, h in enumerate(helpers)})
        code = f"def check(v):\n    try:\n        return {' and '.join(parts) or 'True'}\n" \
               "    except ZeroDivisionError:\n        return False\n"
        exec(compile(code, "<constrint check>", "exec"), scope)
    except TOO_DEEP:
        return _interpreted(constraints, domains)
    return scope["check"]


def _interpreted(constraints: Sequence[Constraint], domains: Sequence[tuple[int, int, frozenset | None]]) -> Predicate:
    """The function of `conjunction`, through `holds`: no compiling, slower per candidate."""
    index = {name: v.index for c in constraints for name, v in c.variables().items()}

    def check(values: Sequence[int]) -> bool:
        if not all(lo <= x <= hi and (allowed is None or x in allowed)
                   for x, (lo, hi, allowed) in zip(values, domains)):
            return False
        assignment = {name: values[i] for name, i in index.items()}
        return all(c.holds(assignment) for c in constraints)

    return check


def fits_int64(e: Operand, lo: list[int], hi: list[int]) -> bool:
    """True when every subexpression of `e` stays within +-2**62 for variables within [lo, hi]."""
    return int64_interval(e, lo, hi) is not False


def int64_interval(e: Operand, lo: list[int], hi: list[int]):
    """Interval of e, None if undefined everywhere, False if some subexpression may overflow int64."""
    if isinstance(e, int):
        r = (e, e)
    elif isinstance(e, IntVar):
        r = (lo[e.index], hi[e.index])
    elif isinstance(e, Neg):
        r = int64_interval(e.a, lo, hi)
        if not r:
            return r
        r = (-r[1], -r[0])
    elif e.op in ("+", "-"):  # type: ignore[attr-defined]
        r = (0, 0)
        for sign, t in sum_terms(e):  # each partial sum is a subexpression
            rt = int64_interval(t, lo, hi)
            if not rt:
                return rt
            r = (r[0] + rt[0], r[1] + rt[1]) if sign > 0 else (r[0] - rt[1], r[1] - rt[0])
            if not (-INT64_SAFE < r[0] and r[1] < INT64_SAFE):
                return False
    else:
        ra = int64_interval(e.a, lo, hi)  # type: ignore[attr-defined]
        if not ra:
            return ra
        if e.op == "**":  # type: ignore[attr-defined]
            r = pow_interval(ra[0], ra[1], e.b)  # type: ignore[attr-defined]
        else:
            rb = int64_interval(e.b, lo, hi)  # type: ignore[attr-defined]
            if not rb:
                return rb
            r = binary_interval(e.op, ra[0], ra[1], rb[0], rb[1])  # type: ignore[attr-defined]
            if r is None:
                return None
    return r if -INT64_SAFE < r[0] and r[1] < INT64_SAFE else False


def constraint_fits(c: Constraint, lo: list[int], hi: list[int]) -> bool:
    if isinstance(c, Compare):
        return fits_int64(c.lhs, lo, hi) and fits_int64(c.rhs, lo, hi)
    if isinstance(c, Divides):
        return fits_int64(c.divisor, lo, hi) and fits_int64(c.multiple, lo, hi)
    return all(constraint_fits(d, lo, hi) if isinstance(d, Constraint) else fits_int64(d, lo, hi)
               for d in c.items)  # type: ignore[attr-defined]


def verifier(constraints: Sequence[Constraint], domains: Sequence[tuple[int, int, frozenset | None]],
             compiled: bool = True):
    """A function that raises SolverBug unless a candidate (values in variable order) lies in its domains
    and satisfies every constraint: compiled (`conjunction`, at the first candidate) for many candidates,
    else through `holds`."""
    if compiled:
        def check(values: Sequence[int]) -> bool:
            nonlocal check
            check = conjunction(constraints, domains)
            return check(values)
    else:
        check = _interpreted(constraints, domains)

    def verify(values: Sequence[int]) -> None:
        if not check(values):
            raise SolverBug(f"candidate {tuple(values)} violates one of {[c.text() for c in constraints]} "
                            "or a variable domain")

    return verify
