"""Independent parts of a model: search them one by one and combine their solutions.

After root propagation, constraints that share no unfixed variable cannot influence each other, so the
solutions of the model are the product of the solutions of its components. Searching components separately
avoids re-solving one part for every choice made in another (and a part without solutions ends the search).
"""
from __future__ import annotations

from typing import Callable, Iterator, Sequence

from .check import predicates, verifier
from .errors import SolverBug
from .constraints import Constraint
from .propagate import deadline_after, seconds_left
from .search import Search, root_fixpoint
from .store import Store


def split(constraints: Sequence[Constraint], fixed: Sequence[bool]) -> list[list[int]]:
    """Groups of unfixed variable indices linked through constraints, ordered by their smallest index.

    Variables that no constraint mentions form one group of their own (last), whatever their number.
    """
    parent = list(range(len(fixed)))
    used = [False] * len(fixed)

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for c in constraints:
        free = [v.index for v in c.variables().values() if not fixed[v.index]]
        for j in free:
            used[j] = True
        for j in free[1:]:
            parent[root(j)] = root(free[0])
    groups: dict[int, list[int]] = {}
    unused = []
    for i, is_fixed in enumerate(fixed):
        if not is_fixed:
            if used[i]:
                groups.setdefault(root(i), []).append(i)
            else:
                unused.append(i)
    return sorted(groups.values()) + ([unused] if unused else [])


class Replay:
    """An iterator whose items are kept, so it can be walked from the start many times."""

    def __init__(self, items: Iterator) -> None:
        self._items = items
        self._seen: list = []
        self._done = False

    def __iter__(self) -> Iterator:
        k = 0
        while True:
            if k < len(self._seen):
                yield self._seen[k]
            elif self._done:
                return
            else:
                try:
                    self._seen.append(next(self._items))
                except StopIteration:
                    self._done = True
                    return
                yield self._seen[k]
            k += 1


def product(parts: Sequence[Replay]) -> Iterator[tuple]:
    """Lazy cartesian product in lexicographic order (the first item of each part comes first)."""
    if not parts:
        yield ()
        return
    for head in parts[0]:
        for tail in product(parts[1:]):
            yield (head,) + tail


def _groups(store: Store, props: list, n_user: int, constraints: Sequence[Constraint],
            deadline: float | None) -> tuple[list[bool], list[list[int]]] | None:
    """(which user variables root propagation fixes, the groups of the others as `split` makes them), or None when
    propagation refutes the model."""
    if not root_fixpoint(store, props, deadline):
        return None
    fixed = [store.lo[i] == store.hi[i] for i in range(n_user)]
    return fixed, split(constraints, fixed)


def independent_parts(constraints: Sequence[Constraint], store: Store, props: list, n_user: int,
                      deadline: float | None = None) -> list[list[Constraint]]:
    """The constraints of each component after root propagation, each list with the constraints whose variables
    are all fixed there, in model order: one list when the model does not split, none when propagation refutes it.

    A part holds every constraint that narrows its variables, so when a part has no solution (tested, not
    assumed: a constraint of another part may have fixed one of its variables) it explains the model's.
    """
    found = _groups(store, props, n_user, constraints, deadline)
    if found is None:
        return []
    groups = [set(g) for g in found[1]]
    if len(groups) < 2:
        return [list(constraints)]
    home = [next((k for k, g in enumerate(groups) for v in c.variables().values() if v.index in g), -1)
            for c in constraints]
    return [[c for c, h in zip(constraints, home) if h in (k, -1)] for k in range(len(groups))
            if k in home]


def _in_preference_order(groups: list[list[int]], order: Sequence[tuple[int, str]]) -> list[list[int]]:
    """`groups` in the order the preference list first names their variables, the unnamed groups last, so that the
    product of their solutions comes in preference order. That holds where the list names each group's variables
    together and every named group but the last has all its variables named (else its solutions repeat the
    preferred values with other values elsewhere, and the next group's would start over); otherwise the named
    groups become one, whose search keeps the order."""
    home = {v: k for k, group in enumerate(groups) for v in group}
    named = [home[v] for v, _ in order if v in home]
    runs = [k for i, k in enumerate(named) if i == 0 or named[i - 1] != k]
    rest = [g for k, g in enumerate(groups) if k not in runs]
    preferred = {v for v, _ in order}
    if len(runs) == len(set(runs)) and all(preferred.issuperset(groups[k]) for k in runs[:-1]):
        return [groups[k] for k in runs] + rest
    return [sorted(v for k in set(runs) for v in groups[k])] + rest


def _components(store: Store, props: list, n_user: int, constraints: Sequence[Constraint],
                domains: Sequence[tuple[int, int, frozenset | None]], deadline: float | None,
                block_rows: int, order: Sequence[tuple[int, str]] = ()
                ) -> list[tuple[list[int], list[Constraint], Callable]] | None:
    """(variable group, its constraints, their verifier) per component after root propagation, with the
    constraints it fixes verified, in the order of `order` (_in_preference_order); None when propagation refutes
    the model."""
    found = _groups(store, props, n_user, constraints, deadline)
    if found is None:
        return None
    fixed, groups = found
    groups = _in_preference_order(groups, order)
    ground = [c for c in constraints if all(fixed[v.index] for v in c.variables().values())]
    verifier(ground, domains, compiled=False)(tuple(store.lo[:n_user]))
    compiled = block_rows > 0  # enumerating: many candidates to check, worth compiling the checks
    checks = predicates(constraints) if compiled and len(groups) > 1 else {}
    components = []
    for group in groups:
        inside = set(group)
        local = [c for c in constraints if any(v.index in inside for v in c.variables().values())]
        components.append((group, local, _local_verifier(local, checks, domains, compiled, len(groups))))
    return components


def solve_parts(store: Store, props: list, n_user: int, constraints: Sequence[Constraint],
                domains: Sequence[tuple[int, int, frozenset | None]], order: list[tuple[int, str]],
                time_limit: float | None, block_rows: int) -> Iterator[tuple[int, ...]]:
    """Every solution (values of the user variables), verified, in the preference order `order`."""
    deadline = deadline_after(time_limit)
    components = _components(store, props, n_user, constraints, domains, deadline, block_rows, order)
    if components is None:
        return
    base = tuple(store.lo[:n_user])
    if not components:
        yield base
        return
    searches = [Search(store.copy() if len(components) > 1 else store, props, n_user, order,
                       time_limit=seconds_left(deadline), constraints=local, block_rows=block_rows, verify=verify,
                       domains=domains, component=group)
                for group, local, verify in components]
    if len(searches) == 1:
        yield from searches[0].run(root=False)
        return
    parts = [Replay(s.run(root=False)) for s in searches]
    if any(next(iter(p), None) is None for p in parts):
        return
    for combo in product(parts):
        values = list(base)
        for (group, _, _), sol in zip(components, combo):
            for i in group:
                values[i] = sol[i]
        yield tuple(values)


def count_parts(store: Store, props: list, n_user: int, constraints: Sequence[Constraint],
                domains: Sequence[tuple[int, int, frozenset | None]], time_limit: float | None,
                block_rows: int) -> int:
    """The number of solutions: the product of the components' counts."""
    deadline = deadline_after(time_limit)
    components = _components(store, props, n_user, constraints, domains, deadline, block_rows)
    if components is None:
        return 0
    total = 1
    for group, local, verify in components:
        if not local:  # variables no constraint mentions
            for i in group:
                total *= store.size(i)
            continue
        search = Search(store.copy(), props, n_user, [], time_limit=seconds_left(deadline), constraints=local,
                        block_rows=block_rows, verify=verify, domains=domains, component=group)
        total *= search.count(root=False)
        if not total:
            return 0
    return total


def _local_verifier(local: Sequence[Constraint], checks: dict, domains, compiled: bool, n_groups: int):
    """Interpreted checks for few candidates; else one compiled conjunction for a single component, and
    the shared per-constraint compiled checks for several."""
    if not compiled or n_groups == 1:
        return verifier(local, domains, compiled)
    mine = [checks[id(c)] for c in local]

    def verify(values: Sequence[int]) -> None:
        for check in mine:
            if not check(values):
                raise SolverBug(f"candidate {tuple(values)} violates {check.__doc__}")

    return verify
