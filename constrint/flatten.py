"""Flatten user constraints, once per solve, into a store of variables and primitive propagators.

Linear parts (sums, differences, constant multiples, negation) stay as coefficient maps; every other node
(x * y, x // y, x % y, x ** k) becomes an auxiliary variable defined by a primitive propagator. Identical
subexpressions share one auxiliary variable. `e % d == 0` becomes a Divides propagator directly.
"""
from __future__ import annotations

from math import gcd

from .constraints import AllDifferent, AnyOf, Compare, Constraint, Divides
from .disjunction import AnyOf as AnyOfProp
from .expr import BinOp, IntVar, Neg, Operand, binary_interval, pow_interval, sum_terms
from .propagate import EQ, LE, NE
from .propagate import AllDifferent as AllDifferentProp
from .propagate import Divides as DividesProp
from .propagate import FloorDiv, Linear, Mod, Power, Times
from .store import Store

Lin = tuple[dict[int, int], int]


class Flattener:
    """Builds `store` (user variables first, in model order) and `props` from constraints."""

    def __init__(self, variables: list[IntVar]) -> None:
        self.store = Store()
        self.props: list = []
        self.n_user = len(variables)
        for v in variables:
            d = v.domain
            self.store.new_var(d.lo, d.hi, d.values)
        self._aux: dict[tuple, int] = {}

    def register(self, prop) -> None:
        pid = len(self.props)
        self.props.append(prop)
        self.store.queued.append(False)
        for x in set(prop.vars):
            self.store.watch[x].append(pid)

    def add(self, c: Constraint) -> None:
        if isinstance(c, Compare):
            div = _divisibility(c)
            if div is not None:
                self.register(DividesProp(self.var_of(div[0]), self.var_of(div[1])))
            else:
                self.register(self.compare(c))
        elif isinstance(c, Divides):
            self.register(DividesProp(self.var_of(c.divisor), self.var_of(c.multiple)))
        elif isinstance(c, AllDifferent):
            self.register(AllDifferentProp([self.var_of(x) for x in c.items]))
        elif isinstance(c, AnyOf):
            direct = [self._direct(d) for d in c.items]
            xs = [v.index for v in c.variables().values()]
            self.register(AnyOfProp(list(c.items), direct, xs))
        else:
            raise TypeError(f"not a constraint: {c!r}")

    def _direct(self, c: Constraint) -> list:
        """Propagators enforcing disjunct `c` without auxiliary variables, or [] when it needs them."""
        if isinstance(c, Compare) and _is_linear(c.lhs) and _is_linear(c.rhs):
            return [self.compare(c)]
        if isinstance(c, Divides) and isinstance(c.divisor, (int, IntVar)) and isinstance(c.multiple, (int, IntVar)):
            return [DividesProp(self.var_of(c.divisor), self.var_of(c.multiple))]
        return []

    def compare(self, c: Compare) -> Linear:
        (ta, ca), (tb, cb) = self.linear(c.lhs), self.linear(c.rhs)
        op = c.op
        if op in (">=", ">"):
            (ta, ca), (tb, cb) = (tb, cb), (ta, ca)
        terms = dict(ta)
        for x, k in tb.items():
            terms[x] = terms.get(x, 0) - k
        const = ca - cb + (1 if op in ("<", ">") else 0)
        pairs = [(k, x) for x, k in terms.items() if k]
        kind = EQ if op == "==" else NE if op == "!=" else LE
        g = 0
        for k, _ in pairs:
            g = gcd(g, k)
        if g > 1:
            if kind == LE:
                const = -((-const) // g)  # sum(k/g * x) <= -const/g, rounded toward feasibility
            elif const % g:
                return Linear([], 1, kind)  # 1 != 0 always holds (NE); 1 == 0 never does (EQ)
            else:
                const //= g
            pairs = [(k // g, x) for k, x in pairs]
        return Linear(pairs, const, kind)

    def linear(self, e: Operand) -> Lin:
        if isinstance(e, int):
            return {}, e
        if isinstance(e, IntVar):
            d = e.domain
            return ({}, d.lo) if d.lo == d.hi else ({e.index: 1}, 0)
        if isinstance(e, Neg):
            t, c = self.linear(e.a)
            return {x: -k for x, k in t.items()}, -c
        if isinstance(e, BinOp) and e.op in ("+", "-"):
            terms: dict[int, int] = {}
            const = 0
            for sign, part in sum_terms(e):
                t, c = self.linear(part)
                for x, k in t.items():
                    terms[x] = terms.get(x, 0) + sign * k
                const += sign * c
            return terms, const
        if isinstance(e, BinOp) and e.op == "*":
            la, lb = self.linear(e.a), self.linear(e.b)
            if not la[0] or not lb[0]:
                (t, c), k = (lb, la[1]) if not la[0] else (la, lb[1])
                return {x: k * v for x, v in t.items()}, k * c
            return {self._product(la, lb): 1}, 0
        return {self.nonlinear(e): 1}, 0  # type: ignore[arg-type]

    def _new_aux(self, key: tuple, lo: int, hi: int) -> int:
        z = self.store.new_var(lo, hi)
        self._aux[key] = z
        return z

    def const_var(self, c: int) -> int:
        key = ("const", c)
        if key not in self._aux:
            self._new_aux(key, c, c)
        return self._aux[key]

    def var_of(self, e: Operand) -> int:
        """Index of a variable equal to `e`."""
        if isinstance(e, IntVar):
            return e.index
        t, c = self.linear(e)
        if not t:
            return self.const_var(c)
        if c == 0 and len(t) == 1:
            (x, k), = t.items()
            if k == 1:
                return x
        return self._lin_var(t, c)

    def _lin_var(self, t: dict[int, int], c: int) -> int:
        key = ("lin", tuple(sorted(t.items())), c)
        if key in self._aux:
            return self._aux[key]
        lo, hi = self.store.lo, self.store.hi
        zl = zh = c
        for x, k in t.items():
            zl += min(k * lo[x], k * hi[x])
            zh += max(k * lo[x], k * hi[x])
        z = self._new_aux(key, zl, zh)
        self.register(Linear([(k, x) for x, k in t.items()] + [(-1, z)], c, EQ))
        return z

    def _product(self, la: Lin, lb: Lin) -> int:
        x, y = self._lin_to_var(la), self._lin_to_var(lb)
        return self._binary("*", x, y)

    def _lin_to_var(self, lin: Lin) -> int:
        t, c = lin
        if not t:
            return self.const_var(c)
        if c == 0 and len(t) == 1 and next(iter(t.values())) == 1:
            return next(iter(t))
        return self._lin_var(t, c)

    def _binary(self, op: str, x: int, y: int) -> int:
        if op == "*" and x > y:
            x, y = y, x
        key = (op, x, y)
        if key in self._aux:
            return self._aux[key]
        lo, hi = self.store.lo, self.store.hi
        if op == "*" and x == y:
            return self._power(x, 2)
        bounds = binary_interval(op, lo[x], hi[x], lo[y], hi[y]) or (0, 0)
        z = self._new_aux(key, *bounds)
        self.register({"*": Times, "//": FloorDiv, "%": Mod}[op](x, y, z))
        return z

    def _power(self, x: int, k: int) -> int:
        if k == 0:
            return self.const_var(1)
        if k == 1:
            return x
        key = ("**", x, k)
        if key not in self._aux:
            z = self._new_aux(key, *pow_interval(self.store.lo[x], self.store.hi[x], k))
            self.register(Power(x, k, z))
        return self._aux[key]

    def nonlinear(self, e: BinOp) -> int:
        if e.op == "**":
            return self._power(self.var_of(e.a), e.b)  # type: ignore[arg-type]
        return self._binary(e.op, self.var_of(e.a), self.var_of(e.b))


def _is_linear(e: Operand) -> bool:
    if isinstance(e, (int, IntVar)):
        return True
    if isinstance(e, Neg):
        return _is_linear(e.a)
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        return all(_is_linear(t) for _, t in sum_terms(e))
    if isinstance(e, BinOp) and e.op == "*":
        return (isinstance(e.a, int) and _is_linear(e.b)) or (isinstance(e.b, int) and _is_linear(e.a))
    return False


def _divisibility(c: Compare) -> tuple[Operand, Operand] | None:
    """(divisor, multiple) when `c` reads `multiple % divisor == 0` (either side), else None."""
    if c.op != "==":
        return None
    for a, b in ((c.lhs, c.rhs), (c.rhs, c.lhs)):
        if isinstance(a, BinOp) and a.op == "%" and isinstance(b, int) and b == 0:
            return a.b, a.a
    return None
