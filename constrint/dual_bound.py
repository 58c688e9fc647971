"""A bound on a linear objective from the linear relaxation of its constraints together (Lagrangian duality).

For max c x under rows A x <= b (and E x == e) and the box lo <= x <= hi, every u >= 0 (and any v) gives

    c x <= u b + v e + sum_j max(d_j lo_j, d_j hi_j),   d = c - u A - v E   (the reduced costs),

for every x of the box that meets the rows, integer or not. The best u, v are the duals of the linear program, which
HiGHS (constrint.lp) solves in floating point; they are then rounded to multiples of 1 / DUAL_SCALE (u rounded down, so
still >= 0) and the bound is computed in integers, so it holds whatever the floating-point solve got wrong: a poor
dual only gives a weaker bound. The same inequality narrows the variables (reduced-cost fixing): with the objective
held to at least w by branch and bound, x_j can move at most (bound - w) / |d_j| away from its best end.

Duals are solved at the first run (the root) and again every RESOLVE_EVERY runs, each over the box of its node; a box
with no point of the relaxation is refuted by the duals of the program that minimises the rows' violations, checked in
integers the same way. Search branches first on what the latest optimum leaves fractional (DualBound.split), toward its
value.

Once branch and bound has a solution and seeks sum(c x) >= w (DualBound.seek), the relaxation over the root's box is
tightened by MIR cuts (constrint.cuts) that may use that cutoff (so hold only where the objective reaches w), in rounds
(CUT_ROUNDS) until the relaxation has no point of objective w: then no box has one, which its duals prove in integers
as above, and every later run fails at once. The nodes' own solves leave the cuts out (on knapsacks whose
values are not tied to a weight they cost more per solve than they prune).
"""
from __future__ import annotations

from math import floor, prod
from operator import itemgetter, mul

import numpy as np

from . import lp
from .cuts import MAX_MAGNITUDE, mir_cuts
from .propagate import EQ, NE, Linear, objective_sum
from .store import Conflict, Store

DUAL_SCALE = 1 << 24
MAX_LP_VARS = 2000  # larger relaxations are not built (a dense solve per node would cost more than it cuts)
MIN_LP_POINTS = 1 << 16  # nor smaller ones: a box of fewer points is searched faster than a solve per few nodes
# costs (random knapsacks of three capacities on a 2-core EPYC, mean of five: 1.1-2.4 against 0.7-1.9 ms at 6 to 14
# items, level at 16 (4.5 / 4.4 ms); with scipy's linprog, 1.2 ms a solve, it was 3.5 against 4.9 ms at 16)
LP_BOUND = 10**15  # column bounds passed to HiGHS are clipped to +-LP_BOUND (past 2^53 floats lose integers)
RESOLVE_EVERY = 8  # runs between solves of the linear program (random knapsacks of 100 items and five capacities:
# 1.15 s at 8, 2.3 s at 1, 1.6 s at 64; of 200 items, 2.9 s at 4 or 8, 5.2 s at 64; assignments level; with the
# cheaper solves of constrint.lp, 8 is still the fastest of 1, 2, 4, 8 on nine knapsacks, assignments and max-mins)
CUTS_PER_ROUND = 10  # the cuts a round adds, those the relaxation's optimum violates most
MAX_CUTS = 64  # the newest kept
CUT_ROUNDS = 2, 4  # a DualBound runs CUT_ROUNDS[0] rounds of cuts, then one more per CUT_ROUNDS[1] solves at nodes:
# strongly correlated knapsacks need from one to about ten rounds, easy ones finish before many are spent

Row = tuple[list[tuple[int, int]], int]  # (index in DualBound.xs, coefficient) pairs, right-hand side


class DualBound:
    """Bounds z = sum(c x) + c0 from the direction `sign` (1: z's upper bound, for a maximisation; -1: its lower
    bound) through rows sum(a x) <= r (`rows`) and sum(a x) == r (`equalities`), and narrows each x from the bound
    that branch and bound holds z to."""

    __slots__ = ("z", "sign", "c0", "xs", "c", "rows", "equalities", "vars", "duals", "runs", "point", "split",
                 "program", "cuts", "sought", "stalled", "refuted", "rounds", "solves", "cut_point", "z_column")

    def __init__(self, z: int, sign: int, c: dict[int, int], c0: int, rows: list[tuple[dict[int, int], int]],
                 equalities: list[tuple[dict[int, int], int]]) -> None:
        self.z, self.sign, self.c0 = z, sign, c0
        self.xs = list(dict.fromkeys([*c, *(x for a, _ in rows + equalities for x in a)]))
        self.z_column = self.xs.index(z) if z in self.xs else None  # z among the columns (DualBound._open_objective)
        self.c = [sign * c.get(x, 0) for x in self.xs]  # maximised
        index = {x: j for j, x in enumerate(self.xs)}
        self.rows: list[Row] = [([(index[x], k) for x, k in a.items()], r) for a, r in rows]
        self.equalities: list[Row] = [([(index[x], k) for x, k in a.items()], r) for a, r in equalities]
        self.vars = (z, *self.xs)
        self.duals: list[tuple[int, list[int]]] = []  # (scaled u b + v e, scaled reduced costs per x)
        self.runs = 0
        self.program: _Program | None = None  # made at the first run
        self.point: list[float] = []  # the latest solve's optimum, per x
        # search's branching hint, for a maximisation and a minimisation alike (PairedRelaxation's form): the free x
        # with a reduced cost of 0 that the latest optimum leaves farthest from a whole number (else any free x), with
        # whether that optimum lies in the upper half of its domain
        self.split: tuple[tuple[int, bool] | None, tuple[int, bool] | None] = (None, None)
        self.cuts: list[tuple[list[int], int]] = []  # (a per x, r): sum(a x) <= r where sum(c x) >= sought
        self.sought: int | None = None  # the least sum(c x) that branch and bound still seeks (DualBound.seek)
        self.stalled: int | None = None  # the value of `sought` at which a round found no cut
        self.refuted: int | None = None  # a value of sum(c x) proven out of reach over the root's box (so everywhere)
        self.rounds = self.solves = 0
        self.cut_point: dict[int, float] = {}  # the latest cut round's optimum, per variable (guides neighbourhoods)

    def propagate(self, s: Store) -> None:
        lo, hi, xs = s.lo, s.hi, self.xs
        los, his = [lo[x] for x in xs], [hi[x] for x in xs]
        held = lo[self.z] - self.c0 if self.sign > 0 else self.c0 - hi[self.z]  # sum(c x) >= held is sought
        if self.refuted is not None and held >= self.refuted:
            raise Conflict
        if self.program is None:
            self.program = _Program(self, los, his)  # the first run is at the root: its box bounds the cuts'
        if (self.sought is not None and self.sought != self.stalled
                and self.rounds < CUT_ROUNDS[0] + self.solves // CUT_ROUNDS[1]):
            self._cut_round(self.sought)
            if self.refuted is not None and held >= self.refuted:
                raise Conflict
        if self.runs % RESOLVE_EVERY == 0:
            self.solves += 1
            dual = self.program.solve(self, *self._open_objective(los, his))
            self.point = self.program.point
            if dual is False:
                raise Conflict
            if dual is not None:
                self.duals = [self.duals[0], dual] if self.duals else [dual]
        self.runs += 1
        if not self.duals:
            return
        g, d = min(((_bound(const, d, los, his), d) for const, d in self.duals), key=itemgetter(0))
        top = g // DUAL_SCALE  # max of sign * (z - c0)
        if self.sign > 0:
            s.set_hi(self.z, self.c0 + top)
        else:
            s.set_lo(self.z, self.c0 - top)
        slack = g - DUAL_SCALE * held
        if slack < 0:
            raise Conflict
        hint, farthest, point = None, -2.0, self.point
        for j, dj in enumerate(d):
            if dj > 0:
                if his[j] - los[j] > slack // dj:
                    s.set_lo(xs[j], his[j] - slack // dj)
            elif dj < 0:
                if his[j] - los[j] > slack // -dj:
                    s.set_hi(xs[j], los[j] + slack // -dj)
            if los[j] != his[j]:
                off = abs(point[j] - round(point[j])) if dj == 0 else -1.0
                if off > farthest:
                    hint, farthest = (xs[j], 2 * point[j] >= los[j] + his[j]), off
        self.split = (hint, hint)

    def _open_objective(self, los: list[int], his: list[int]) -> tuple[list[int], list[int]]:
        """The box of a node's solve: where z is itself a column (a max-min objective's t), its side that branch and
        bound holds (lo for a maximisation, hi for a minimisation) opened to the root's, so that a node that cannot
        reach the held value shows it by the optimum's own bound instead of an infeasible program (whose proof took
        a second, elastic program: max-min of 40 items 0.4-0.6x the time). The bound below is still computed over the
        node's box."""
        j = self.z_column
        if j is None:
            return los, his
        root_lo, root_hi = self.program.root
        if self.sign > 0:
            los = los.copy()
            los[j] = root_lo[j]
        else:
            his = his.copy()
            his[j] = root_hi[j]
        return los, his

    def seek(self, bound: int) -> None:
        """Branch and bound now seeks z >= bound (a maximisation) or z <= bound (a minimisation) everywhere."""
        sought = bound - self.c0 if self.sign > 0 else self.c0 - bound
        if self.sought is not None and sought < self.sought:
            self.cuts = []  # made for a greater cutoff
        self.sought = sought

    def _cut_round(self, held: int) -> None:
        """One round of cuts for the points of objective `held` or more over the root's box: solve the relaxation with
        the cuts so far and add those its optimum violates most (constrint.cuts), or prove `held` out of reach."""
        program = self.program
        if program.int_rows is None or abs(held) >= MAX_MAGNITUDE:
            self.stalled = held
            return
        self.rounds += 1
        lo, hi = program.root
        solved = program.optimum(lo, hi, self.cuts)
        result = solved[0]
        if result.status != lp.OPTIMAL or -result.fun < held:  # no optimum, or one short of held: proven in integers?
            dual = program.duals(self, lo, hi, self.cuts, *solved)
            if dual is False or (dual is not None and _bound(*dual, lo, hi) < DUAL_SCALE * held):
                self.refuted = held if self.refuted is None else min(self.refuted, held)
            self.stalled = held
            return
        self.cut_point = {x: v for x, v in zip(self.xs, result.x)}
        rows, rhs, duals = program.integer_rows(result, self.cuts)
        found = mir_cuts(rows, rhs, len(rhs) - len(self.cuts), (-program.int_c, -held), duals, lo, hi, result.x,
                         CUTS_PER_ROUND)
        if not found:
            self.stalled = held
            return
        if self.cuts:  # the cuts the optimum leaves slack are dropped (knapsacks of 100 items: 0.9x the time)
            slack = result.slack[len(result.slack) - len(self.cuts):]
            self.cuts = [cut for cut, gap in zip(self.cuts, slack) if gap <= 1e-6 * (1 + abs(cut[1]))]
        self.cuts = (self.cuts + found)[-MAX_CUTS:]


class _Program:
    """The linear program of a DualBound, its matrices built once; each solve takes the box of its node (and the cuts,
    over the root's box)."""

    def __init__(self, p: DualBound, lo: list[int], hi: list[int]) -> None:
        n = len(p.xs)

        def matrix(rows: list[Row], dtype=np.float64):
            a = np.zeros((len(rows), n), dtype=dtype)
            for i, (terms, _) in enumerate(rows):
                for j, k in terms:
                    a[i, j] = k
            return a

        def program_rows(rows: list[Row]):
            return (matrix(rows), np.array([float(r) for _, r in rows])) if rows else (None, None)

        self.ub, self.eq = program_rows(p.rows), program_rows(p.equalities)
        self.cost = np.array([-float(k) for k in p.c])  # HiGHS minimises -c x
        self.root = (lo, hi)
        self.nodes: lp.Program | None = None  # the program of the nodes' solves (no cuts), made at the first
        self.point: list[float] = []  # the latest solve's optimum
        # for cuts: the rows in integers, each equality also negated, where every number is below MAX_MAGNITUDE
        numbers = [k for terms, r in p.rows + p.equalities for k in (r, *(k for _, k in terms))] + p.c + lo + hi
        self.int_rows: np.ndarray | None = None
        if max(map(abs, numbers)) < MAX_MAGNITUDE:
            negated = [([(j, -k) for j, k in terms], -r) for terms, r in p.equalities]
            rows = p.rows + p.equalities + negated
            self.int_rows = matrix(rows, np.int64)
            self.int_rhs = [r for _, r in rows]
            self.int_c = np.array(p.c, dtype=np.int64)

    def optimum(self, lo: list[int], hi: list[int], cuts: list) -> tuple:
        """The optimum (lp.Solved) over the box [lo, hi] with the rows and `cuts`; the <= rows' matrix and right-hand
        sides. Without cuts (the nodes' solves) one lp.Program serves every solve, each starting from the last's
        basis; with them (the cut rounds, a few per search) a program is built for the solve."""
        a_ub, b_ub = self.ub
        a_eq, b_eq = self.eq
        if not cuts:
            if self.nodes is None:
                self.nodes = lp.Program(self.cost, a_ub, b_ub, a_eq, b_eq)
            return self.nodes.solve(_box(lo, hi)), a_ub, b_ub
        a_cut, b_cut = np.array([a for a, _ in cuts], dtype=np.float64), np.array([float(r) for _, r in cuts])
        a_ub, b_ub = (a_cut, b_cut) if a_ub is None else (np.vstack([a_ub, a_cut]), np.concatenate([b_ub, b_cut]))
        return lp.Program(self.cost, a_ub, b_ub, a_eq, b_eq).solve(_box(lo, hi)), a_ub, b_ub

    def integer_rows(self, result, cuts: list) -> tuple[np.ndarray, list[int], list[float]]:
        """The rows (<=, ==, negated ==) and `cuts` in integers, with the duals of `result` for each (>= 0)."""
        duals = result.duals
        m = len(self.ub[1]) if self.ub[0] is not None else 0
        u = [max(0.0, -y) for y in duals]
        v = [-y for y in duals[m + len(cuts):]]
        weights = u[:m] + [max(0.0, w) for w in v] + [max(0.0, -w) for w in v] + u[m:m + len(cuts)]
        rows, rhs = self.int_rows, self.int_rhs
        if cuts:
            rows = np.vstack([rows, np.array([a for a, _ in cuts], dtype=np.int64)])
            rhs = rhs + [r for _, r in cuts]
        return rows, rhs, weights

    def solve(self, p: DualBound, lo: list[int], hi: list[int]) -> tuple[int, list[int]] | bool | None:
        """The duals over the box [lo, hi] (`duals`)."""
        return self.duals(p, lo, hi, (), *self.optimum(lo, hi, ()))

    def duals(self, p: DualBound, lo: list[int], hi: list[int], cuts: list, result, a_ub, b_ub
              ) -> tuple[int, list[int]] | bool | None:
        """The duals of `result` (from `optimum` over the box [lo, hi] with `cuts`; scaled, rounded: DualBound's doc),
        the optimum kept as `point`; False where the box holds no point of the relaxation (an elastic program's duals
        prove it, in integers); None where neither."""
        rows = p.rows + [([(j, k) for j, k in enumerate(a) if k], r) for a, r in cuts]
        a_eq, b_eq = self.eq
        if result.status == lp.OPTIMAL:
            self.point = list(result.x)
            return _dual(p.c, rows, p.equalities, result.duals)
        if result.status != lp.INFEASIBLE:
            return None
        # infeasible: minimise the rows' violations; duals u with u b + max over the box of -u A x < 0 refute the box
        m, e = len(rows), len(p.equalities)
        zeros = np.zeros
        elastic_ub = None if a_ub is None else np.hstack([a_ub, -np.eye(m), zeros((m, 2 * e))])
        elastic_eq = None if a_eq is None else np.hstack([a_eq, zeros((e, m)), np.eye(e), -np.eye(e)])
        bounds = np.vstack([_box(lo, hi), np.tile([0.0, np.inf], (m + 2 * e, 1))])
        cost = np.concatenate([zeros(len(p.xs)), np.ones(m + 2 * e)])
        result = lp.Program(cost, elastic_ub, b_ub, elastic_eq, b_eq).solve(bounds)
        if result.status != lp.OPTIMAL:
            return None
        const, d = _dual([0] * len(p.xs), rows, p.equalities, result.duals)
        return False if _bound(const, d, lo, hi) < 0 else None


def _bound(const: int, d: list[int], los: list[int], his: list[int]) -> int:
    """const + sum_j max(d_j lo_j, d_j hi_j): the scaled bound of a dual (`_dual`) over the box [los, his]."""
    return const + sum(map(max, map(mul, d, los), map(mul, d, his)))


def _box(lo: list[int], hi: list[int]) -> np.ndarray:
    """[[lo, hi]] per column for HiGHS, clipped to +-LP_BOUND: it then solves over a smaller box, which only changes
    the duals it finds (the bound is computed over the store's box)."""
    try:
        box = np.array([lo, hi], dtype=np.float64).T
    except OverflowError:  # past the float range
        box = np.array([[float(max(-LP_BOUND, min(LP_BOUND, v))) for v in side] for side in (lo, hi)]).T
    return np.clip(box, -LP_BOUND, LP_BOUND)


def _dual(c: list[int], rows: list[Row], equalities: list[Row], row_dual) -> tuple[int, list[int]]:
    """(scaled u b + v e, scaled reduced costs c - u A - v E) for the row duals of min -c x (u = -dual, rounded down
    to a multiple of 1 / DUAL_SCALE and kept >= 0 on the <= rows; v = -dual rounded)."""
    n = len(rows)
    weights = [floor(max(0.0, -y) * DUAL_SCALE) for y in row_dual[:n]] + [round(-y * DUAL_SCALE)
                                                                           for y in row_dual[n:]]
    d = [DUAL_SCALE * k for k in c]
    const = 0
    for w, (terms, r) in zip(weights, rows + equalities):
        if w:
            const += w * r
            for j, k in terms:
                d[j] -= w * k
    return const, d


def dual_bounds(props: list, z: int, n_user: int, sense: str, s: Store) -> list[DualBound]:
    """A DualBound of objective variable z where z is one of the model's own variables (as a max-min objective's: t
    <= each sum) or an == propagator defines it as a sum of two or more of them (propagate.objective_sum), and linear
    constraints (<=, ==) over the model's own variables connect to it through shared variables (every such constraint
    is a row), over a box of MIN_LP_POINTS points or more (the domains of `s`) and at most MAX_LP_VARS variables. One
    row is enough: PairedRelaxation bounds the objective as well there, but fixes no variable (a 40-item knapsack 7.6
    ms with the reduced costs' fixing, 17.7 without)."""
    found = objective_sum(props, z, n_user)
    if found is None and z >= n_user:
        return []
    definer, c, c0 = found or (None, {z: 1}, 0)  # a sum, or one of the model's own variables
    linear = [p for p in props if p is not definer and isinstance(p, Linear) and p.kind != NE
              and all(x < n_user for x in p.vars)]
    reached, chosen, taken, grown = set(c), [], set(), True
    while grown:  # the constraints connected to the objective's variables through shared ones
        grown = False
        for k, p in enumerate(linear):
            if k not in taken and reached.intersection(p.vars):
                taken.add(k)
                chosen.append(p)
                reached.update(p.vars)
                grown = True
    if not chosen or len(reached) > MAX_LP_VARS or prod(s.size(x) for x in reached) < MIN_LP_POINTS:
        return []
    rows = [({x: k for k, x in p.terms}, -p.const) for p in chosen if p.kind != EQ]
    equalities = [({x: k for k, x in p.terms}, -p.const) for p in chosen if p.kind == EQ]
    return [DualBound(z, 1 if sense == "max" else -1, c, c0, rows, equalities)]
