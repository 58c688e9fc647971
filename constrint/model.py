"""Model (variables and constraints, with solve / solutions / count / minimize / maximize) and Solution."""
from __future__ import annotations

import time
from itertools import count, islice, repeat
from types import MappingProxyType
from typing import Iterable, Iterator, Mapping, Sequence, Union

from .check import verifier
from .components import count_parts, independent_parts, solve_parts
from .constraints import AllDifferent, AnyOf, Constraint, Divides
from .domain import Domain, check_int
from .dual_bound import dual_bounds
from .errors import ConstrintError, Infeasible, TimeLimit, UnknownVariable
from .explain import minimal_core
from .expr import Expr, IntVar, Operand, evaluate, has_division, operand, variables
from .flatten import Flattener
from .propagate import objective_relaxations, seconds_left
from .search import MAX, MIN, Search, root_fixpoint

CORE_CHECK_SECONDS = 0.5
"""Budget of one subset test while shrinking an infeasible core; an unsettled test keeps its constraints."""
CORE_SECONDS = 5.0
"""Most time for all subset tests of one core (less where the caller's time limit leaves less)."""
CORE_RATIO = 2.0
"""Most time for all subset tests of one core, as a multiple of the time the search took to find no solution
(at least CORE_CHECK_SECONDS): explaining an infeasible model costs a bounded share of proving it."""

BLOCK_ROWS = 1 << 14  # near the leaves, check numpy blocks of at most this many combinations at once
VarRef = Union[IntVar, str]
Prefer = Union[Sequence[Union[VarRef, "tuple[VarRef, str]"]], Mapping[VarRef, str]]


class Solution(Mapping[str, int]):
    """A read-only mapping variable name -> value, also indexable by IntVar; `objective` when optimised."""

    __slots__ = ("_index", "_values", "objective")

    def __init__(self, index: Mapping[str, int], values: Sequence[int], objective: int | None = None) -> None:
        self._index = index  # name -> position in values, shared by all solutions of a model
        self._values = tuple(values)
        self.objective = objective

    def __getitem__(self, key: VarRef) -> int:
        name = key.name if isinstance(key, IntVar) else key
        try:
            return self._values[self._index[name]]
        except KeyError:
            known = _names(self._index)
            raise UnknownVariable(f"the solution has no variable named {name!r}; known: {known}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        extra = "" if self.objective is None else f", objective={self.objective}"
        return f"Solution({dict(self)!r}{extra})"


class Model:
    """Integer variables and the constraints over them."""

    def __init__(self) -> None:
        self._vars: dict[str, IntVar] = {}
        self._constraints: list[Constraint] = []

    def __repr__(self) -> str:
        decls = ", ".join(f"{n} in {v.domain}" for n, v in self._vars.items())
        return f"Model({decls}; " + "; ".join(c.text() for c in self._constraints) + ")"

    @property
    def variables(self) -> Mapping[str, IntVar]:
        """Variables by name, in creation order (read-only view)."""
        return MappingProxyType(self._vars)

    @property
    def constraints(self) -> tuple[Constraint, ...]:
        return tuple(self._constraints)

    def int_var(self, lo: int | None = None, hi: int | None = None, name: str | None = None, *,
                values: Iterable[int] | None = None) -> IntVar:
        """A new variable with inclusive bounds `lo..hi`, or the explicit `values`."""
        if name is None:  # the first free automatic name (a user may have taken "_x<n>")
            name = next(f"_x{k}" for k in count(len(self._vars)) if f"_x{k}" not in self._vars)
        if not isinstance(name, str) or not name:
            raise ConstrintError(f"variable name must be a non-empty string, got {name!r}")
        if name in self._vars:
            raise ConstrintError(f"variable {name!r} exists already; use m.var({name!r}) or another name")
        if values is not None:
            if lo is not None or hi is not None:
                raise ConstrintError(f"give either lo/hi or values for {name!r}, not both")
            domain = Domain.of_values(values, name)
        elif lo is None or hi is None:
            raise ConstrintError(f"variable {name!r} needs bounds lo and hi, or values=[...]")
        else:
            domain = Domain.interval(lo, hi, name)
        var = IntVar(name, len(self._vars), domain, self)
        self._vars[name] = var
        return var

    def var(self, name: str) -> IntVar:
        """The existing variable called `name`."""
        try:
            return self._vars[name]
        except KeyError:
            raise UnknownVariable(f"no variable named {name!r}; known: {_names(self._vars)}") from None

    def add(self, constraint: Constraint, name: str | None = None) -> Constraint:
        """Add a constraint (a comparison, divides, all_different or any_of); `name` labels it in messages.

        An assignment under which the constraint's expression is undefined (x // 0, x % 0) violates it.
        """
        if not isinstance(constraint, Constraint):
            hint = " (a comparison of plain numbers is already a bool)" if isinstance(constraint, bool) else ""
            raise ConstrintError(f"Model.add takes a constraint such as x <= 4, got {constraint!r}{hint}")
        self._check_owned(constraint.variables().values())
        if name is not None:
            constraint.label = str(name)
        self._constraints.append(constraint)
        return constraint

    def divides(self, divisor: Operand, multiple: Operand) -> Divides:
        """The constraint `multiple % divisor == 0` (false when divisor is 0)."""
        return Divides(divisor, multiple)

    def all_different(self, items: Iterable[Operand]) -> AllDifferent:
        return AllDifferent(list(items))

    def any_of(self, constraints: Iterable[Constraint]) -> AnyOf:
        """Disjunction: at least one of `constraints` holds."""
        return AnyOf(list(constraints))

    def solve(self, prefer: Prefer | None = None, time_limit: float | None = None) -> Solution:
        """The first solution (the lexicographic optimum under `prefer`); raises Infeasible or TimeLimit.

        `prefer` lists variables (or names), most important first, each alone (meaning 'min') or in a pair with
        its direction: [("x", "max"), "y"]; or maps them to directions: {"x": "max", "y": "min"}, in that order.
        A bare pair ("x", "max") is refused, as it reads as two variables as much as one with a direction.
        """
        start = time.perf_counter()
        time_limit = _check_time_limit(time_limit)
        for sol in self.solutions(limit=1, prefer=prefer, time_limit=time_limit):
            return sol
        raise self._infeasible(start, time_limit)

    def solutions(self, limit: int | None = None, prefer: Prefer | None = None,
                  time_limit: float | None = None) -> Iterator[Solution]:
        """Generate distinct solutions, all of them unless `limit` is given; preferred ones first."""
        if limit is not None:
            limit = check_int(limit, "limit")
            if limit < 0:
                raise ConstrintError(f"limit must be >= 0 or None, got {limit}")
        order = self._prefer(prefer)
        return self._generate(limit, order, _check_time_limit(time_limit))

    def _generate(self, limit: int | None, order: list[tuple[int, str]], time_limit: float | None):
        if limit == 0:
            return
        flat = self._flatten(self._constraints)
        index = {name: i for i, name in enumerate(self._vars)}
        found = solve_parts(flat.store, flat.props, flat.n_user, self._constraints, self._domains(), order,
                            time_limit, BLOCK_ROWS)
        yield from map(Solution, repeat(index), found if limit is None else islice(found, limit))

    def count(self, time_limit: float | None = None) -> int:
        """The number of solutions."""
        time_limit = _check_time_limit(time_limit)
        flat = self._flatten(self._constraints)
        return count_parts(flat.store, flat.props, flat.n_user, self._constraints, self._domains(),
                           time_limit, BLOCK_ROWS)

    def minimize(self, expr: Operand, time_limit: float | None = None) -> Solution:
        """A solution with the least value of `expr` (proven); `.objective` holds that value. Past `time_limit`,
        TimeLimit carries the best solution found so far as `.best`."""
        return self._optimize(expr, MIN, time_limit)

    def maximize(self, expr: Operand, time_limit: float | None = None) -> Solution:
        """A solution with the greatest value of `expr` (proven); `.objective` holds that value. Past `time_limit`,
        TimeLimit carries the best solution found so far as `.best`."""
        return self._optimize(expr, MAX, time_limit)

    def _optimize(self, expr: Operand, sense: str, time_limit: float | None) -> Solution:
        start = time.perf_counter()
        time_limit = _check_time_limit(time_limit)
        expr = operand(expr, "objective")
        if isinstance(expr, Expr):
            self._check_owned(variables(expr, {}).values())
        flat = self._flatten(self._constraints)
        obj = flat.var_of(expr)
        for relaxation in (dual_bounds(flat.props, obj, flat.n_user, sense, flat.store)
                           or objective_relaxations(flat.props, obj, flat.n_user)):
            flat.register(relaxation)
        best = None
        domains = self._domains()
        search = Search(flat.store, flat.props, flat.n_user, [], objective=(obj, sense, expr),
                        time_limit=time_limit, constraints=self._constraints, block_rows=BLOCK_ROWS,
                        verify=verifier(self._constraints, domains), domains=domains)
        try:
            for values in search.run():
                best = values
        except TimeLimit as exc:
            if best is None:
                raise
            found = self._optimum(best, expr)
            raise TimeLimit(f"{exc}; the best solution found has objective {found.objective}, not proven optimal",
                            best=found) from None
        if best is None:
            raise self._no_optimum(expr, start, time_limit)
        return self._optimum(best, expr)

    def _optimum(self, values: Sequence[int], expr: Operand) -> Solution:
        solution = Solution({name: i for i, name in enumerate(self._vars)}, values)
        solution.objective = evaluate(expr, solution)
        return solution

    def _flatten(self, constraints: Sequence[Constraint]) -> Flattener:
        flat = Flattener(list(self._vars.values()))
        for c in constraints:
            flat.add(c)
        return flat

    def _feasible(self, constraints: list[Constraint], time_limit: float | None) -> bool:
        flat = self._flatten(constraints)
        found = solve_parts(flat.store, flat.props, flat.n_user, constraints, self._domains(), [], time_limit,
                            BLOCK_ROWS)
        return next(found, None) is not None

    def _no_optimum(self, expr: Operand, start: float, time_limit: float | None) -> Infeasible:
        """Infeasible when an optimisation found nothing: the constraints' core, unless the objective is to blame,
        being undefined (x // 0, x % 0) for every value of its variables or in every solution."""
        alone = self._flatten([])
        alone.var_of(expr)
        if not root_fixpoint(alone.store, alone.props):
            where = "for every value of its variables"
        else:
            try:
                undefined = has_division(expr) and self._feasible(self._constraints, _remaining(start, time_limit))
            except TimeLimit:
                undefined = False
            if not undefined:
                return self._infeasible(start, time_limit)
            where = "in every solution of the constraints"
        return Infeasible([], reason=f"the objective {expr} is undefined (division or modulo by zero) {where}")

    def _infeasible(self, start: float, time_limit: float | None) -> Infeasible:
        """Infeasible with a core, after a search from `start` (time.perf_counter()) under `time_limit` found no
        solution: minimal when every subset test settles within the budget (CORE_RATIO, CORE_SECONDS)."""
        now = time.perf_counter()
        budget = min(CORE_SECONDS, max(CORE_CHECK_SECONDS, CORE_RATIO * (now - start)))
        deadline = now + (budget if time_limit is None else min(budget, _remaining(start, time_limit)))
        proven = True

        def feasible(cs: list[Constraint]) -> bool:
            nonlocal proven
            if not cs:  # every declared domain has a value: nothing to test, even with no time left
                return True
            left = deadline - time.perf_counter()
            try:
                if left > 0:
                    return self._feasible(cs, min(left, CORE_CHECK_SECONDS))
            except TimeLimit:
                pass
            proven = False  # unsettled: keep the constraints tested, so the core stays infeasible
            return True

        def root_consistent(cs: list[Constraint]) -> bool:
            flat = self._flatten(cs)
            try:
                return root_fixpoint(flat.store, flat.props, deadline)
            except TimeLimit:
                return True  # unsettled: keep the constraints tested

        # Where propagation alone refutes the model, first shrink to a set that propagation refutes (cheap
        # tests, no search); where the model splits into independent parts, start from one without a solution.
        # Then make that set minimal with the complete test.
        suspects = self._constraints
        flat = self._flatten(suspects)
        try:
            parts = independent_parts(suspects, flat.store, flat.props, flat.n_user, deadline)
        except TimeLimit:
            parts = [suspects]  # unsettled: keep every constraint
        if not parts:
            suspects = minimal_core(suspects, root_consistent)
        elif len(parts) > 1:
            suspects = next((part for part in parts if not feasible(part)), suspects)
        core = minimal_core(suspects, feasible)
        return Infeasible(core, minimal=proven)

    def _domains(self) -> list[tuple[int, int, frozenset | None]]:
        return [(v.domain.lo, v.domain.hi, None if v.domain.values is None else frozenset(v.domain.values))
                for v in self._vars.values()]

    def _prefer(self, prefer: Prefer | None) -> list[tuple[int, str]]:
        if prefer is None:
            return []
        expected = "a list such as [('x', 'max'), ('y', 'min')] or a dict such as {'x': 'max', 'y': 'min'}"
        if isinstance(prefer, Mapping):
            prefer = list(prefer.items())
        elif isinstance(prefer, tuple) and len(prefer) == 2 and isinstance(prefer[1], str) and prefer[1] in (MIN, MAX):
            raise ConstrintError(f"prefer must be {expected}, got the bare pair {prefer!r}; write [{prefer!r}]")
        elif isinstance(prefer, (str, IntVar)) or not isinstance(prefer, Iterable):
            raise ConstrintError(f"prefer must be {expected}, got {prefer!r}")
        order: list[tuple[int, str]] = []
        seen: set[int] = set()
        for item in prefer:
            ref, direction = item if isinstance(item, tuple) and len(item) == 2 else (item, MIN)
            if direction not in (MIN, MAX):
                raise ConstrintError(f"direction for {ref} must be 'min' or 'max', got {direction!r}")
            if isinstance(ref, IntVar):
                self._check_owned([ref])
                var = ref
            elif isinstance(ref, str):
                if ref not in self._vars:
                    raise UnknownVariable(f"prefer names unknown variable {ref!r}; known: {_names(self._vars)}")
                var = self._vars[ref]
            else:
                raise ConstrintError(
                    f"prefer items are variables or names (optionally with a direction), got {item!r}")
            if var.index not in seen:
                seen.add(var.index)
                order.append((var.index, direction))
        return order

    def _check_owned(self, variables: Iterable[IntVar]) -> None:
        for v in variables:
            if v.owner is not self:
                raise ConstrintError(f"variable {v.name!r} belongs to another Model; create it with this one")


def _names(vars_: Mapping[str, object]) -> str:
    names = list(vars_)
    return ", ".join(names[:10]) + (", ..." if len(names) > 10 else "") if names else "(none)"


def _check_time_limit(time_limit: object) -> float | None:
    if time_limit is None:
        return None
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit >= 0:
        raise ConstrintError(f"time_limit must be a number of seconds >= 0 or None, got {time_limit!r}")
    return float(time_limit)


def _remaining(start: float, time_limit: float | None) -> float | None:
    """Seconds left of `time_limit` counted from `start` (a time.perf_counter() reading; None: no limit)."""
    return seconds_left(None if time_limit is None else start + time_limit)
