"""Depth-first search over the user variables with propagation to a fixpoint at every node.

Branching is binary, x = v or x != v, where v is the end of x's domain in its preferred direction, so the
search undoes through the store's trail and never copies domains. Preferred variables are branched first, in
order (which makes the first solution the lexicographic optimum); the rest by first-fail (smallest domain) until
the first conflict, then by domain size over weighted degree: every conflict adds one to the weight of the user
variables its propagator is built from (through the auxiliary variables of products and quotients), so that the
search branches first where its refutations come from instead of re-refuting one part under every value of an
unrelated variable. Which of several equal optima branch and bound returns therefore depends on the conflicts met on
the way: a caller that needs one answer puts its tie-breaks into the objective.
With an objective, every solution tightens a bound on it (branch and bound) until the search space is empty. Solutions
come from the ordinary variable order, which on tile models reaches the optimum in a few steps, until progress is
too slow for the range left (BISECT_RATIO); from then on the objective's domain is bisected first (better half
first), so that even a huge objective range that improves one unit at a time takes few steps. Bisection stops
again when BISECT_GIVE_UP nodes pass without an improvement: an objective whose bound prunes nothing (a weak
relaxation) makes every refuted half cost the whole tree, so plain branch and bound is faster there.

Branch and bound through a linear relaxation (DualBound) that has gone NEIGHBOURHOOD_AFTER nodes without improving
searches a neighbourhood of its latest solution (Search._neighbourhood: most variables fixed to their values there,
those the relaxation puts elsewhere free) for a few nodes, never taking more nodes in such searches than it takes
itself: on strongly correlated knapsacks of five capacities it had found no optimum in 30 s where such neighbourhoods
find it in about a second. What is proven is unchanged: branch and bound still covers the whole search space, with
the better bound. (Neighbourhoods chosen at random helped one of four such knapsacks and slowed another, and made the
searches of the kernels' tile models 1.09x as long.)

Every leaf is passed to `verify` (a check against the original constraints) before it is yielded. Near the
leaves, once the unfixed user variables span at most `block_rows` combinations, the block is enumerated at
once with numpy against the declared domains and every original constraint (when every subexpression fits in
int64): cheaper than a propagation per node when enumerating many solutions, and verified by construction.
Rows come in the same lexicographic order (preferred variables first, by direction) that branching gives.
"""
from __future__ import annotations

import random
import time
from itertools import chain, repeat
from typing import Callable, Iterator, Sequence

import numpy as np

from .check import TOO_DEEP, constraint_fits, fits_int64
from .constraints import Constraint
from .dual_bound import DualBound
from .errors import SolverBug, TimeLimit
from .expr import Operand
from .propagate import PairedRelaxation, contradictory_differences, deadline_after, fixpoint
from .store import Conflict, Store
from .vector import BlockCheck, block_check, block_value

MIN, MAX = "min", "max"
SPLIT_MIN, SPLIT_MAX = "split-min", "split-max"  # domain bisection, lower / upper half first
BISECT_PATIENCE = 4  # improving solutions before the rate of progress is judged
BISECT_RATIO = 256  # then bisect the objective if the range left exceeds this many times the progress so far
BISECT_GIVE_UP = 2048  # nodes without an improvement after which bisection stops (the bound is not propagating)
NEIGHBOURHOOD_AFTER = 256  # nodes without an improvement before a neighbourhood search (Search._neighbourhood)
NEIGHBOURHOOD_NODES = 256  # nodes of one neighbourhood search
NEIGHBOURHOOD_FREE = 0.25, 0.05  # share of the decided variables a neighbourhood frees at first, and at least


class Search:
    """One search over a flattened model; `nodes` counts branching decisions taken so far."""

    def __init__(self, store: Store, props: list, n_user: int, prefer: list[tuple[int, str]],
                 objective: tuple[int, str, Operand] | None = None, time_limit: float | None = None,
                 constraints: Sequence[Constraint] = (), block_rows: int = 0,
                 verify: Callable[[tuple[int, ...]], None] | None = None,
                 domains: Sequence[tuple[int, int, frozenset | None]] = (),
                 component: Sequence[int] | None = None) -> None:
        self.store, self.props, self.n_user = store, props, n_user
        branch = range(n_user) if component is None else component  # the variables this search decides
        inside = set(branch)
        self.prefer = [(i, d) for i, d in prefer if i in inside]
        chosen = {i for i, _ in prefer}
        self.others = [i for i in branch if i not in chosen]
        self.order = [i for i, _ in self.prefer] + self.others  # this search's variables, preferred ones first
        self.objective = objective
        self.relaxations = ([p for p in props if isinstance(p, (PairedRelaxation, DualBound))] if objective is not None
                            else [])
        self.bound: int | None = None
        self.first_value: int | None = None  # objective of the first solution
        self.improvements = 0
        self.objective_limit = 0  # the objective's best bound at the root
        self.bisecting = False
        self.improved_at = 0  # node count at the last improvement
        self.deadline = deadline_after(time_limit)
        self.nodes = 0
        self.block_rows = block_rows
        self.fit_everywhere = False
        self.constraints = constraints if component is None else [
            c for c in constraints if any(v.index in inside for v in c.variables().values())]
        self.verify = verify
        self.domains = domains
        self.check: BlockCheck | None = None  # compiled at the root of a search that enumerates blocks
        self.objective_value: BlockCheck | None = None
        self.weight = [0] * n_user  # conflicts blamed on each user variable
        self.conflicts = 0
        self._blamed: dict[int, tuple[int, ...]] = {}  # propagator -> the user variables it is built from
        self._definer: dict[int, int] | None = None  # auxiliary variable -> the propagator defining it
        self.node_limit: int | None = None  # a neighbourhood search stops after this many nodes
        self.best: int | None = None  # the objective of the latest solution
        self.incumbent: tuple[int, ...] | None = None  # that solution
        self.root: Store | None = None  # the root's domains (branch and bound with neighbourhood searches)
        self.neighbourhood_at = 0  # node count before which no neighbourhood search starts
        self.free_share = NEIGHBOURHOOD_FREE[0]
        self.random = random.Random(0)

    def _propagate(self) -> bool:
        s = self.store
        if self.bound is not None:
            obj, sense, _ = self.objective  # type: ignore[misc]
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
        if fixpoint(s, self.props, self.deadline):
            return True
        self.conflicts += 1
        weight = self.weight
        for x in self._blame(s.culprit):
            weight[x] += 1
        return False

    def _blame(self, p: int) -> tuple[int, ...]:
        """The user variables propagator `p` is built from, through the definitions of its auxiliary variables."""
        found = self._blamed.get(p)
        if found is not None:
            return found
        if self._definer is None:
            self._definer = {}
            for q, prop in enumerate(self.props):
                z = getattr(prop, "z", None)
                if z is not None and z >= self.n_user:
                    self._definer.setdefault(z, q)
        users: set[int] = set()
        seen, todo = {p}, [p]
        while todo:
            for x in self.props[todo.pop()].vars:
                if x < self.n_user:
                    users.add(x)
                else:
                    q = self._definer.get(x)
                    if q is not None and q not in seen:
                        seen.add(q)
                        todo.append(q)
        found = self._blamed[p] = tuple(sorted(users))
        return found

    def _improved(self, value: int) -> None:
        """A solution of objective `value`: require better ones, and bisect when progress is slow."""
        _, sense, _ = self.objective  # type: ignore[misc]
        self.best = value
        self.bound = value - 1 if sense == MIN else value + 1
        for relaxation in self.relaxations:
            if isinstance(relaxation, DualBound):
                relaxation.seek(self.bound)
        if self.first_value is None:
            self.first_value = value
        self.improvements += 1
        self.improved_at = self.nodes
        done, left = abs(self.first_value - value), abs(value - self.objective_limit)
        self.bisecting = self.bisecting or (self.improvements > BISECT_PATIENCE and left > BISECT_RATIO * done)

    def _pivot(self, var: int, direction: str) -> int:
        """The value v of a choice: x = v first (MIN, MAX), or x <= v (SPLIT_MIN) / x >= v (SPLIT_MAX) first."""
        lo, hi = self.store.lo[var], self.store.hi[var]
        if direction == MIN:
            return lo
        if direction == MAX:
            return hi
        return (lo + hi) // 2 if direction == SPLIT_MIN else (lo + hi + 1) // 2

    def _choose(self) -> tuple[int, str]:
        lo, hi = self.store.lo, self.store.hi
        if self.bisecting and self.nodes - self.improved_at > BISECT_GIVE_UP:
            self.bisecting = False  # refuted halves cost too much: the bound is not pruning
        if self.bisecting:  # bisect the objective's domain first, better half first
            obj, sense, _ = self.objective
            if lo[obj] != hi[obj]:
                return obj, SPLIT_MIN if sense == MIN else SPLIT_MAX
        for i, d in self.prefer:
            if lo[i] != hi[i]:
                return i, d
        if self.relaxations:  # the variable a relaxation's optimum leaves between its bounds, its best bound first
            side = int(self.objective[1] == MIN)  # type: ignore[index]  # p.split: (for a maximum, for a minimum)
            for p in self.relaxations:
                split = p.split[side]
                if split is not None and lo[split[0]] != hi[split[0]]:
                    return split[0], MAX if split[1] else MIN
        best, best_size, best_weight = -1, 0, 1  # the least size / (1 + weight), compared without division
        size_of, weight = self.store.size, self.weight
        least_possible = 2 if not self.conflicts else 0  # without weights nothing beats a domain of two
        for i in self.others:
            if lo[i] != hi[i]:
                size = size_of(i)
                w = weight[i] + 1
                if best < 0 or size * best_weight < best_size * w:
                    best, best_size, best_weight = i, size, w
                    if size == least_possible:
                        break
        return best, MIN

    def run(self, root: bool = True) -> Iterator[tuple[int, ...]]:
        """Yield each solution (values of the user variables, in order); with an objective, each improves.

        With root=False the store is taken to be at a fixpoint already.
        """
        return chain.from_iterable(
            (found,) if isinstance(found, tuple) else found.rows() for found in self._walk(root))

    def count(self, root: bool = True) -> int:
        """The number of solutions (without building them)."""
        return sum(1 if isinstance(found, tuple) else found.size for found in self._walk(root))

    def _walk(self, root: bool) -> Iterator["tuple[int, ...] | Block"]:
        """Single solutions as tuples, and blocks of solutions."""
        s = self.store
        if root and not root_fixpoint(s, self.props, self.deadline):
            return
        if self.check is None:  # a neighbourhood search takes its parent's
            # bounds only shrink below this point: what fits in int64 here fits at every node
            self.fit_everywhere = self.block_rows > 0 and self._fits()
            if self.block_rows:  # compiled for the root bounds, which hold at every node below
                try:
                    self.check = block_check(self.constraints, s.lo, s.hi)
                    if self.objective is not None:
                        self.objective_value = block_value(self.objective[2], s.lo, s.hi)
                except TOO_DEEP:  # Python cannot compile expressions nested this deeply: branch down to the leaves
                    self.block_rows = 0
        if self.objective is not None:
            obj, sense, _ = self.objective
            self.objective_limit = s.lo[obj] if sense == MIN else s.hi[obj]
            if self.node_limit is None and any(isinstance(p, DualBound) for p in self.relaxations):
                self.root = s.copy()  # neighbourhoods guided by the relaxation
        stack: list[tuple[int, int, int, str]] = []
        lo = s.lo
        while True:
            rows = self._block() if self.block_rows else None
            var, direction = (-1, MIN) if rows is not None else self._choose()
            if var >= 0:
                if self.node_limit is not None and self.nodes >= self.node_limit:
                    return
                if (self.incumbent is not None and self.root is not None and self.nodes >= self.neighbourhood_at
                        and self.nodes - self.improved_at >= NEIGHBOURHOOD_AFTER):
                    # the bound it may raise holds from the propagation after this branch on
                    yield from self._neighbourhood()
                self.nodes += 1
                if self.deadline is not None and not self.nodes & 127 and time.perf_counter() > self.deadline:
                    raise TimeLimit(f"search stopped at its time limit after {self.nodes} nodes")
                v = self._pivot(var, direction)
                stack.append((s.mark(), var, v, direction))
                try:
                    if direction == MIN or direction == MAX:
                        s.fix(var, v)
                    elif direction == SPLIT_MIN:
                        s.set_hi(var, v)
                    else:
                        s.set_lo(var, v)
                except Conflict:
                    pass
                else:
                    if self._propagate():
                        continue
            elif rows is not None:
                if rows.size:
                    if self.objective is not None:  # one row, the block's best
                        self.incumbent = next(rows.rows())
                    yield rows
            else:
                values = tuple(lo[: self.n_user])
                if self.verify is not None:
                    self.verify(values)
                if self.objective is not None:
                    self.incumbent = values
                    self._improved(lo[self.objective[0]])
                yield values
            while stack:  # backtrack: undo the latest choice and take its alternative
                mark, var, v, direction = stack.pop()
                s.undo(mark)
                if direction == MIN or direction == SPLIT_MIN:  # x = v / x <= v failed: x > v
                    s.set_lo(var, v + 1)
                else:  # x = v / x >= v failed: x < v
                    s.set_hi(var, v - 1)
                if self._propagate():
                    break
            else:
                return

    def _neighbourhood(self) -> Iterator["tuple[int, ...] | Block"]:
        """Large neighbourhood search: branch and bound over the root's domains with the decided variables fixed to the
        incumbent's values but for a share of them, for at most NEIGHBOURHOOD_NODES nodes; yields what it finds (each
        better than the incumbent) and holds this search to it. Freed first are the variables whose values the latest
        optimum of the relaxation with cuts (DualBound.cut_point) differs from the incumbent's in, then others at
        random. The share grows while such searches end before their limit (too small a neighbourhood) and shrinks
        while they reach it."""
        root = self.root
        decided = [i for i in self.order if root.lo[i] != root.hi[i]]  # type: ignore[union-attr]
        size = max(1, round(self.free_share * len(decided)))
        # first those the relaxation's latest optimum with cuts puts elsewhere (relaxation induced), then at random
        point = next((p.cut_point for p in self.relaxations if isinstance(p, DualBound) and p.cut_point), {})
        away = [i for i in decided if i in point and abs(point[i] - self.incumbent[i]) > 1e-6]  # type: ignore[index]
        free = set(self.random.sample(away, size) if len(away) > size else away)
        free.update(self.random.sample([i for i in decided if i not in free], size - len(free)))
        store = root.copy()  # type: ignore[union-attr]
        for i in decided:
            if i not in free:
                store.fix(i, self.incumbent[i])  # type: ignore[index]  # within the root's domains: no conflict
        obj, sense, _ = self.objective  # type: ignore[misc]
        try:  # the root's propagation does not apply the bound (_propagate does)
            store.set_hi(obj, self.bound) if sense == MIN else store.set_lo(obj, self.bound)  # type: ignore[arg-type]
        except Conflict:  # the bound lies past the objective's root domain: branch and bound ends soon
            self.neighbourhood_at = self.nodes + NEIGHBOURHOOD_NODES
            return
        sub = Search(store, self.props, self.n_user, self.prefer, self.objective, constraints=self.constraints,
                     block_rows=self.block_rows, verify=self.verify, domains=self.domains)
        # the bound too: the blocks' rows are checked against it, not against the objective's domain
        sub.deadline, sub.node_limit, sub.weight = self.deadline, NEIGHBOURHOOD_NODES, self.weight
        sub.bound = self.bound
        sub.fit_everywhere, sub.check, sub.objective_value = self.fit_everywhere, self.check, self.objective_value
        for found in sub._walk(root=True):
            self.incumbent = sub.incumbent
            self._improved(sub.best)  # type: ignore[arg-type]
            yield found
        if sub.nodes < NEIGHBOURHOOD_NODES:
            self.free_share = min(1.0, 1.25 * self.free_share)
        else:
            self.free_share = max(NEIGHBOURHOOD_FREE[1], self.free_share / 1.25)
        self.neighbourhood_at = self.nodes + max(1, sub.nodes)

    def _fits(self) -> bool:
        """True when every subexpression of the constraints and objective fits in int64 at the current bounds."""
        lo, hi = self.store.lo, self.store.hi
        if self.objective is not None and not fits_int64(self.objective[2], lo, hi):
            return False
        return all(constraint_fits(c, lo, hi) for c in self.constraints)

    def _block(self) -> Block | None:
        """All solutions below this node when its unfixed user variables span few enough combinations."""
        s = self.store
        lo, hi = s.lo, s.hi
        free, rows = [], 1
        for i in self.order:
            if lo[i] != hi[i]:
                free.append(i)
                rows *= s.size(i)
                if rows > self.block_rows:
                    return None
        if not free:
            return None
        if not self.fit_everywhere and not self._fits():
            return None
        values: list = lo[: self.n_user]
        for i, (dlo, dhi, allowed) in enumerate(self.domains[: self.n_user]):
            if lo[i] < dlo or hi[i] > dhi:
                raise SolverBug(f"variable {i} has bounds {lo[i]}..{hi[i]} outside its declared domain")
            if allowed is not None and lo[i] == hi[i] and lo[i] not in allowed:
                raise SolverBug(f"variable {i} has value {lo[i]} outside its declared domain")
        direction = dict(self.prefer)
        axes = []
        last = len(free) - 1
        for k, i in enumerate(free):
            vals = s.values(i)
            allowed = self.domains[i][2]
            if allowed is not None and not allowed.issuperset(vals):
                raise SolverBug(f"variable {i} has values {list(vals)} outside its declared domain")
            axis = np.array(vals[::-1] if direction.get(i) == MAX else vals, dtype=np.int64)
            axes.append(axis)
            values[i] = axis.reshape((1,) * k + (-1,) + (1,) * (last - k))
        parts: dict = {}  # where the constraints hold, ANDed per set of axes they read (told by the shape)
        for m in self.check(values):  # type: ignore[misc]
            shape = getattr(m, "shape", ())
            parts[shape] = parts[shape] & m if shape in parts else m
        mask = np.zeros(tuple(len(a) for a in axes), dtype=bool)
        if not parts.pop((), True):
            return Block(free, axes, lo[: self.n_user], mask)
        mask[...] = True
        for m in parts.values():
            mask &= m
        if self.objective is not None and mask.any():
            _, sense, _ = self.objective
            value, defined = self.objective_value(values)  # type: ignore[misc]
            mask &= defined  # rows where the objective is undefined are no solutions
            hits = np.nonzero(mask)
            objective = np.broadcast_to(value, mask.shape)[hits]
            pick = int(np.argmin(objective) if sense == MIN else np.argmax(objective))
            best = int(objective[pick])
            mask[...] = False
            if self.bound is None or (best <= self.bound if sense == MIN else best >= self.bound):
                self._improved(best)
                mask[tuple(h[pick] for h in hits)] = True
        return Block(free, axes, lo[: self.n_user], mask)


class Block:
    """The solutions of a block: those where `mask` is true, axis k of the mask being the values `axes[k]`
    of user variable `free[k]`; the other user variables keep their values in `fixed`."""

    __slots__ = ("free", "axes", "fixed", "mask", "size")

    def __init__(self, free: list[int], axes: list[np.ndarray], fixed: list[int], mask: np.ndarray) -> None:
        self.free, self.axes, self.fixed, self.mask = free, axes, fixed, mask
        self.size = int(np.count_nonzero(mask))

    def rows(self) -> Iterator[tuple[int, ...]]:
        """The solutions as tuples, in the block's (lexicographic) order."""
        cols: list = [repeat(v) for v in self.fixed]
        for i, axis, hit in zip(self.free, self.axes, np.nonzero(self.mask)):
            cols[i] = axis[hit].tolist()
        return zip(*cols)


def root_fixpoint(s: Store, props: list, deadline: float | None = None) -> bool:
    """Run every propagator once and then to a fixpoint; False when the root is already inconsistent (difference
    constraints that contradict each other are found first: `contradictory_differences`).

    Raises TimeLimit once time.perf_counter() passes `deadline` (when given).
    """
    culprit = contradictory_differences(props, s)
    if culprit is not None:
        s.culprit = culprit
        return False
    s.queue[:] = range(len(props))
    s.queued[:] = [True] * len(props)
    return fixpoint(s, props, deadline)
