"""Integer expressions: variables, operator nodes, evaluation, interval bounds and printing.

Operator table (Python operator -> node created):

    a + b, a - b, a * b, a // b, a % b -> BinOp(op, a, b)   (ints mix in on either side)
    a ** k                            -> BinOp("**", a, k)  (k a constant int >= 0)
    -a                                -> Neg(a)
    a == b, a != b, a <= b, a < b, a >= b, a > b -> constraints.Compare (never a bool)

`//` and `%` follow Python's floor semantics; dividing by zero is undefined, and an assignment under which an
expression is undefined violates the constraint that contains it.
"""
from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Mapping, Union

from .domain import Domain, check_int
from .errors import ConstrintError

if TYPE_CHECKING:
    from .constraints import Compare

# symbol -> (precedence, evaluator); higher binds tighter, ** is right-associative.
BINARY = {
    "+": (1, operator.add),
    "-": (1, operator.sub),
    "*": (2, operator.mul),
    "//": (2, operator.floordiv),
    "%": (2, operator.mod),
    "**": (4, operator.pow),
}
NEG_PRECEDENCE = 3


class Undefined(ArithmeticError):
    """An expression has no value under an assignment (division or modulo by zero)."""


MAX_DEPTH = 250
"""How deeply operations may nest in one expression: solving and printing recurse once per level (a sum of any
length is walked without recursion: one level for the sum, one more for a term that is itself nested)."""

MAX_EXPONENT = 4096
"""The largest constant exponent of a power of an expression: bounds of x ** k grow k times x's bits, and
propagation computes them at every step (x in [1, 3] with k = 10 ** 7 ran a minute past a one-second limit)."""


class Expr:
    """Base of every integer expression; Python operators build new nodes. `depth`: the nesting of operations, a
    chain of + and - counting once (at most MAX_DEPTH)."""

    __slots__ = ()
    depth = 0

    def __add__(self, other: Operand) -> Expr:
        return BinOp("+", self, other)

    def __radd__(self, other: Operand) -> Expr:
        return BinOp("+", other, self)

    def __sub__(self, other: Operand) -> Expr:
        return BinOp("-", self, other)

    def __rsub__(self, other: Operand) -> Expr:
        return BinOp("-", other, self)

    def __mul__(self, other: Operand) -> Expr:
        return BinOp("*", self, other)

    def __rmul__(self, other: Operand) -> Expr:
        return BinOp("*", other, self)

    def __floordiv__(self, other: Operand) -> Expr:
        return BinOp("//", self, other)

    def __rfloordiv__(self, other: Operand) -> Expr:
        return BinOp("//", other, self)

    def __mod__(self, other: Operand) -> Expr:
        return BinOp("%", self, other)

    def __rmod__(self, other: Operand) -> Expr:
        return BinOp("%", other, self)

    def __pow__(self, other: Operand) -> Expr:
        return BinOp("**", self, other)

    def __rpow__(self, other: Operand) -> Expr:
        return BinOp("**", other, self)

    def __neg__(self) -> Expr:
        return Neg(self)

    def __pos__(self) -> Expr:
        return self

    def __truediv__(self, other: object) -> Expr:
        raise ConstrintError(f"'/' is not an integer operation in ({self}) / {other}; use '//' (floor division)")

    __rtruediv__ = __truediv__

    def __eq__(self, other: Operand) -> Compare:  # type: ignore[override]
        return _compare(self, "==", other)

    def __ne__(self, other: Operand) -> Compare:  # type: ignore[override]
        return _compare(self, "!=", other)

    def __le__(self, other: Operand) -> Compare:
        return _compare(self, "<=", other)

    def __lt__(self, other: Operand) -> Compare:
        return _compare(self, "<", other)

    def __ge__(self, other: Operand) -> Compare:
        return _compare(self, ">=", other)

    def __gt__(self, other: Operand) -> Compare:
        return _compare(self, ">", other)

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise ConstrintError(f"the expression {self} has no truth value; compare it and pass it to Model.add")

    def __str__(self) -> str:
        return _render(self, 0)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"


Operand = Union[Expr, int]


class IntVar(Expr):
    """A decision variable of one Model; `index` is its position in that model."""

    __slots__ = ("name", "index", "domain", "owner")

    def __init__(self, name: str, index: int, domain: Domain, owner: object) -> None:
        self.name = name
        self.index = index
        self.domain = domain
        self.owner = owner

    def __repr__(self) -> str:
        return f"IntVar({self.name!r}, {self.domain})"


class BinOp(Expr):
    __slots__ = ("op", "a", "b", "depth")

    def __init__(self, op: str, a: Operand, b: Operand) -> None:
        self.a = operand(a, f"left operand of {op!r}")
        self.b = operand(b, f"right operand of {op!r}")
        da, db = _depth(self.a), _depth(self.b)
        self.depth = _checked_depth(max(da, db + 1) if op in ("+", "-") else max(da, db) + 1)
        if op == "**":
            if not isinstance(self.b, int):
                raise ConstrintError(
                    f"exponent of {self.a} ** ({self.b}) must be a constant integer, not an expression")
            if self.b < 0:
                raise ConstrintError(f"exponent {self.b} of {self.a} is negative; use an integer >= 0")
            if self.b > MAX_EXPONENT and isinstance(self.a, Expr):
                raise ConstrintError(f"exponent {self.b} of {self.a} is over {MAX_EXPONENT}: its bounds would have "
                                     f"about {self.b} times the bits of {self.a}'s; use a smaller exponent")
        self.op = op


class Neg(Expr):
    __slots__ = ("a", "depth")

    def __init__(self, a: Expr) -> None:
        self.a = a
        self.depth = _checked_depth(a.depth + 1)


def _depth(e: Operand) -> int:
    return e.depth if isinstance(e, Expr) else 0


def _checked_depth(depth: int) -> int:
    if depth > MAX_DEPTH:
        raise ConstrintError(
            f"the expression nests operations more than {MAX_DEPTH} levels deep (a sum of any length counts as one "
            f"level); name a part with a variable (t = m.int_var(lo, hi, 't'); m.add(t == part)) and use t in its "
            f"place")
    return depth


def operand(value: object, what: str) -> Operand:
    """`value` as an expression operand: an Expr or a plain int (bools and floats raise)."""
    if isinstance(value, Expr):
        return value
    return check_int(value, what)


def _compare(a: Expr, op: str, b: object) -> Compare:
    from .constraints import Compare

    return Compare(a, op, operand(b, f"right side of {op!r}"))


def sum_terms(e: Operand) -> list[tuple[int, Operand]]:
    """The terms of the left-deep sum `e` with their signs, found without recursion: a - b + c gives
    [(1, a), (-1, b), (1, c)], and an expression that is no sum or difference gives [(1, e)]."""
    terms: list[tuple[int, Operand]] = []
    while isinstance(e, BinOp) and e.op in ("+", "-"):
        terms.append((1 if e.op == "+" else -1, e.b))
        e = e.a
    terms.append((1, e))
    terms.reverse()
    return terms


def evaluate(e: Operand, values: Mapping[str, int]) -> int:
    """Value of `e` with variables read by name from `values`; raises Undefined on x // 0 or x % 0."""
    if isinstance(e, int):
        return e
    if isinstance(e, IntVar):
        return values[e.name]
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        return sum(sign * evaluate(t, values) for sign, t in sum_terms(e))
    if isinstance(e, BinOp):
        a = evaluate(e.a, values)
        b = evaluate(e.b, values)
        if b == 0 and (e.op == "//" or e.op == "%"):
            raise Undefined(f"{e} with {e.b} == 0")
        return BINARY[e.op][1](a, b)
    if isinstance(e, Neg):
        return -evaluate(e.a, values)
    raise TypeError(f"not an expression: {e!r}")


def variables(e: Operand, out: dict[str, IntVar]) -> dict[str, IntVar]:
    """Add the variables of `e` to `out` (by name, in first-seen order) and return it."""
    stack = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, IntVar):
            out.setdefault(node.name, node)
        elif isinstance(node, BinOp):
            stack += [node.b, node.a]
        elif isinstance(node, Neg):
            stack.append(node.a)
    return out


def has_division(e: Operand) -> bool:
    """True when `e` holds a // or % (the only operations that can be undefined)."""
    stack = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, BinOp):
            if node.op in ("//", "%"):
                return True
            stack += [node.a, node.b]
        elif isinstance(node, Neg):
            stack.append(node.a)
    return False


def interval(e: Operand, lo: list[int], hi: list[int]) -> tuple[int, int] | None:
    """Bounds of `e` with variable i in [lo[i], hi[i]]; None when `e` is undefined for every value."""
    if isinstance(e, int):
        return e, e
    if isinstance(e, IntVar):
        i = e.index
        return lo[i], hi[i]
    if isinstance(e, Neg):
        r = interval(e.a, lo, hi)
        return None if r is None else (-r[1], -r[0])
    if e.op in ("+", "-"):  # type: ignore[attr-defined]
        low = high = 0
        for sign, t in sum_terms(e):
            r = interval(t, lo, hi)
            if r is None:
                return None
            low, high = (low + r[0], high + r[1]) if sign > 0 else (low - r[1], high - r[0])
        return low, high
    ra = interval(e.a, lo, hi)  # type: ignore[attr-defined]
    if ra is None:
        return None
    if e.op == "**":  # type: ignore[attr-defined]
        return pow_interval(ra[0], ra[1], e.b)  # type: ignore[attr-defined]
    rb = interval(e.b, lo, hi)  # type: ignore[attr-defined]
    if rb is None:
        return None
    return binary_interval(e.op, ra[0], ra[1], rb[0], rb[1])  # type: ignore[attr-defined]


def binary_interval(op: str, alo: int, ahi: int, blo: int, bhi: int) -> tuple[int, int] | None:
    """Bounds of `a op b` for a in [alo, ahi], b in [blo, bhi]; None when b can only be 0 for // and %.

    Exact (a single value) when both operands are fixed.
    """
    if alo == ahi and blo == bhi:
        if blo == 0 and op in ("//", "%"):
            return None
        v = BINARY[op][1](alo, blo)
        return v, v
    if op == "+":
        return alo + blo, ahi + bhi
    if op == "-":
        return alo - bhi, ahi - blo
    if op == "*":
        c = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
        return min(c), max(c)
    parts = [(p, q) for p, q in ((blo, min(bhi, -1)), (max(blo, 1), bhi)) if p <= q]
    if not parts:
        return None
    los, his = [], []
    for p, q in parts:
        if op == "//":
            c = (alo // p, alo // q, ahi // p, ahi // q)
            los.append(min(c))
            his.append(max(c))
        elif q < 0:  # a % b for b in [p, q] < 0 lies in [p + 1, 0]
            los.append(max(p + 1, alo) if ahi <= 0 else p + 1)
            his.append(0)
        else:  # b in [p, q] > 0: a % b lies in [0, q - 1]
            los.append(0)
            his.append(min(q - 1, ahi) if alo >= 0 else q - 1)
    return min(los), max(his)


def pow_interval(lo: int, hi: int, k: int) -> tuple[int, int]:
    if k == 0:
        return 1, 1
    if k % 2 or lo >= 0:
        return lo**k, hi**k
    if hi <= 0:
        return hi**k, lo**k
    return 0, max(lo**k, hi**k)


def iroot(n: int, k: int) -> int:
    """floor(n ** (1/k)) for n >= 0, k >= 1, exact: math.isqrt, else integer Newton from above."""
    if n < 2 or k == 1:
        return n
    if k == 2:
        return math.isqrt(n)
    r = 1 << -(-n.bit_length() // k)  # above the root: Newton's steps then decrease to it
    while True:
        s = ((k - 1) * r + n // r ** (k - 1)) // k
        if s >= r:
            return r
        r = s


def _render(e: Operand, parent: int, right: bool = False) -> str:
    if isinstance(e, int):
        text, prec = str(e), (NEG_PRECEDENCE if e < 0 else 9)
    elif isinstance(e, IntVar):
        return e.name
    elif isinstance(e, Neg):
        text, prec = "-" + _render(e.a, NEG_PRECEDENCE), NEG_PRECEDENCE
    elif e.op in ("+", "-"):  # type: ignore[attr-defined]
        prec = BINARY["+"][0]
        (_, first), *rest = sum_terms(e)
        text = _render(first, prec) + "".join(
            f" {'+' if sign > 0 else '-'} {_render(t, prec + 1)}" for sign, t in rest)
    else:
        prec = BINARY[e.op][0]  # type: ignore[attr-defined]
        left_prec = prec + 1 if e.op == "**" else prec  # type: ignore[attr-defined]
        right_prec = prec if e.op == "**" else prec + 1  # type: ignore[attr-defined]
        text = f"{_render(e.a, left_prec)} {e.op} {_render(e.b, right_prec)}"  # type: ignore[attr-defined]
    return f"({text})" if prec < parent else text

