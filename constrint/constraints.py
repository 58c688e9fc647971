"""User-level constraints: what `Model.add` accepts. Each has a readable str and `holds(assignment)`.

`holds` is the ground truth every answer is checked against: an assignment under which a constraint's
expression is undefined (x // 0, x % 0, or a divisor of 0 in `Divides`) violates that constraint.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from .errors import ConstrintError
from .expr import IntVar, Operand, Undefined, evaluate, operand, variables

COMPARE = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
}


class Constraint:
    """Base of all constraints; `label` (set by Model.add) replaces the text in messages."""

    __slots__ = ("label", "_vars")

    def __init__(self) -> None:
        self.label: str | None = None
        self._vars: dict[str, IntVar] | None = None  # found once: a constraint's expressions never change

    def holds(self, assignment: Mapping[str, int]) -> bool:
        """True when the constraint is satisfied by `assignment` (variable name -> int)."""
        try:
            return self._holds(assignment)
        except Undefined:
            return False

    def _holds(self, assignment: Mapping[str, int]) -> bool:
        raise NotImplementedError

    def variables(self) -> dict[str, IntVar]:
        """The variables this constraint mentions, by name (a new dict)."""
        if self._vars is None:
            self._vars = self._variables()
        return dict(self._vars)

    def _variables(self) -> dict[str, IntVar]:
        raise NotImplementedError

    def text(self) -> str:
        """The constraint as written, ignoring any label."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.label if self.label is not None else self.text()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"

    def __bool__(self) -> bool:
        raise ConstrintError(f"the constraint {self.text()} has no truth value here; pass it to Model.add")


class Compare(Constraint):
    """`lhs op rhs` with op one of == != <= < >= >."""

    __slots__ = ("lhs", "op", "rhs")

    def __init__(self, lhs: Operand, op: str, rhs: Operand) -> None:
        super().__init__()
        if op not in COMPARE:
            raise ConstrintError(f"unknown comparison {op!r}; use one of {', '.join(COMPARE)}")
        self.lhs, self.op, self.rhs = lhs, op, rhs

    def _holds(self, assignment: Mapping[str, int]) -> bool:
        return COMPARE[self.op](evaluate(self.lhs, assignment), evaluate(self.rhs, assignment))

    def _variables(self) -> dict[str, IntVar]:
        return variables(self.rhs, variables(self.lhs, {}))

    def text(self) -> str:
        return f"{self.lhs} {self.op} {self.rhs}"


class Divides(Constraint):
    """`divisor` divides `multiple`: multiple % divisor == 0 with divisor != 0."""

    __slots__ = ("divisor", "multiple")

    def __init__(self, divisor: Operand, multiple: Operand) -> None:
        super().__init__()
        self.divisor = operand(divisor, "divisor")
        self.multiple = operand(multiple, "multiple")

    def _holds(self, assignment: Mapping[str, int]) -> bool:
        d = evaluate(self.divisor, assignment)
        return d != 0 and evaluate(self.multiple, assignment) % d == 0

    def _variables(self) -> dict[str, IntVar]:
        return variables(self.multiple, variables(self.divisor, {}))

    def text(self) -> str:
        return f"divides({self.divisor}, {self.multiple})"


class AllDifferent(Constraint):
    """All the expressions take pairwise different values."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[Operand]) -> None:
        super().__init__()
        self.items = tuple(operand(x, "all_different item") for x in items)

    def _holds(self, assignment: Mapping[str, int]) -> bool:
        vals = [evaluate(x, assignment) for x in self.items]
        return len(set(vals)) == len(vals)

    def _variables(self) -> dict[str, IntVar]:
        out: dict[str, IntVar] = {}
        for x in self.items:
            variables(x, out)
        return out

    def text(self) -> str:
        return "all_different(" + ", ".join(map(str, self.items)) + ")"


class AnyOf(Constraint):
    """At least one of the constraints holds (a disjunction)."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[Constraint]) -> None:
        super().__init__()
        items = tuple(items)
        for c in items:
            if not isinstance(c, Constraint):
                raise ConstrintError(f"any_of takes constraints such as x <= 4, got {c!r}")
        if not items:
            raise ConstrintError("any_of needs at least one constraint")
        self.items = items

    def _holds(self, assignment: Mapping[str, int]) -> bool:
        return any(c.holds(assignment) for c in self.items)

    def _variables(self) -> dict[str, IntVar]:
        out: dict[str, IntVar] = {}
        for c in self.items:
            out.update((k, v) for k, v in c.variables().items() if k not in out)
        return out

    def text(self) -> str:
        return "any_of(" + ", ".join(c.text() for c in self.items) + ")"

