"""A bound on a linear objective from the linear relaxation of several constraints together (Lagrangian duality).

For max c x under rows A x <= b (and E x == e) and the box lo <= x <= hi, every u >= 0 (and any v) gives

    c x <= u b + v e + sum_j max(d_j lo_j, d_j hi_j),   d = c - u A - v E   (the reduced costs),

for every x of the box that meets the rows, integer or not. The best u, v are the duals of the linear program, which
HiGHS (highspy) solves in floating point; they are then rounded to multiples of 1 / DUAL_SCALE (u rounded down, so
still >= 0) and the bound is computed in integers, so it holds whatever the floating-point solve got wrong: a poor
dual only gives a weaker bound. The same inequality narrows the variables (reduced-cost fixing): with the objective
held to at least w by branch and bound, x_j can move at most (bound - w) / |d_j| away from its best end.

Duals are solved at the first run (the root) and again every RESOLVE_EVERY runs, each over the box of its node
(HiGHS's dual simplex from the previous basis); a box with no point of the relaxation is refuted by HiGHS's dual ray,
checked in integers the same way. Every dual vector is valid everywhere, so a run takes the lesser bound of the root's
and the latest.
"""
from __future__ import annotations

from math import floor
from operator import itemgetter, mul

from .propagate import EQ, NE, Linear, objective_sum
from .store import Conflict, Store

DUAL_SCALE = 1 << 24
MAX_LP_VARS = 2000  # larger relaxations are not built (a dense solve per node would cost more than it cuts)
RESOLVE_EVERY = 4  # runs between solves of the linear program at a node


class DualBound:
    """Bounds z = sum(c x) + c0 from the direction `sign` (1: z's upper bound, for a maximisation; -1: its lower
    bound) through rows sum(a x) <= r (`rows`) and sum(a x) == r (`equalities`), and narrows each x from the bound
    that branch and bound holds z to."""

    __slots__ = ("z", "sign", "c0", "xs", "c", "rows", "equalities", "vars", "duals", "runs", "point", "split", "program")

    def __init__(self, z: int, sign: int, c: dict[int, int], c0: int, rows: list[tuple[dict[int, int], int]],
                 equalities: list[tuple[dict[int, int], int]]) -> None:
        self.z, self.sign, self.c0 = z, sign, c0
        self.xs = list(dict.fromkeys([*c, *(x for a, _ in rows + equalities for x in a)]))
        self.c = [sign * c.get(x, 0) for x in self.xs]  # maximised
        self.rows, self.equalities = rows, equalities
        self.vars = (z, *self.xs)
        self.duals: list[tuple[int, list[int]]] = []  # (scaled u b + v e, scaled reduced costs per x)
        self.runs = 0
        self.program: _Program | None = None  # made at the first run
        self.point: list[float] = []  # the latest solve's optimum, per x
        # search's branching hint, for a maximisation and a minimisation alike (PairedRelaxation's form): the free x
        # the relaxation's optimum leaves farthest from a whole number, with whether its upper end is the nearer
        self.split: tuple[tuple[int, bool] | None, tuple[int, bool] | None] = (None, None)

    def propagate(self, s: Store) -> None:
        if self.runs % RESOLVE_EVERY == 0:
            if self.program is None:
                self.program = _Program(self)
            dual = self.program.solve(self, s)
            if dual is False:
                raise Conflict
            if dual is not None:
                self.duals = [self.duals[0], dual] if self.duals else [dual]
        self.runs += 1
        if not self.duals:
            return
        lo, hi, xs = s.lo, s.hi, self.xs
        los, his = [lo[x] for x in xs], [hi[x] for x in xs]
        g, d = min(((const + sum(map(max, map(mul, d, los), map(mul, d, his))), d) for const, d in self.duals),
                   key=itemgetter(0))
        top = g // DUAL_SCALE  # max of sign * (z - c0)
        if self.sign > 0:
            s.set_hi(self.z, self.c0 + top)
            held = s.lo[self.z] - self.c0
        else:
            s.set_lo(self.z, self.c0 - top)
            held = self.c0 - s.hi[self.z]
        slack = g - DUAL_SCALE * held
        if slack < 0:
            raise Conflict
        hint, farthest, point = None, -1.0, self.point
        for j, dj in enumerate(d):
            if dj > 0:
                if his[j] - los[j] > slack // dj:
                    s.set_lo(xs[j], his[j] - slack // dj)
            elif dj < 0:
                if his[j] - los[j] > slack // -dj:
                    s.set_hi(xs[j], los[j] + slack // -dj)
            elif los[j] != his[j] and abs(point[j] - round(point[j])) > farthest:
                farthest = abs(point[j] - round(point[j]))
                hint = (xs[j], point[j] - floor(point[j]) >= 0.5)
        self.split = (hint, hint)


class _Program:
    """The linear program of a DualBound in HiGHS, built once; each solve changes the columns' bounds and starts
    from the previous basis."""

    def __init__(self, p: DualBound) -> None:
        import highspy
        import numpy as np

        self.np, self.highspy = np, highspy
        self.index = {x: j for j, x in enumerate(p.xs)}
        rows = p.rows + p.equalities
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = len(p.xs), len(rows)
        lp.col_cost_ = np.array([-float(k) for k in p.c])  # HiGHS minimises -c x
        lp.col_lower_, lp.col_upper_ = np.zeros(len(p.xs)), np.zeros(len(p.xs))
        lp.row_lower_ = np.array([-highspy.kHighsInf] * len(p.rows) + [float(r) for _, r in p.equalities])
        lp.row_upper_ = np.array([float(r) for _, r in rows])
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        starts, cols, values = [0], [], []
        for terms, _ in rows:
            cols += [self.index[x] for x in terms]
            values += [float(k) for k in terms.values()]
            starts.append(len(cols))
        lp.a_matrix_.start_, lp.a_matrix_.index_ = np.array(starts), np.array(cols)
        lp.a_matrix_.value_ = np.array(values)
        self.highs = highspy._Highs()  # the plain binding (exported): highspy.Highs logs a banner before options apply
        self.highs.setOptionValue("output_flag", False)
        self.highs.passModel(lp)
        self.columns = np.arange(len(p.xs), dtype=np.int32)

    def solve(self, p: DualBound, s: Store) -> tuple[int, list[int]] | bool | None:
        """The duals over the box of `s` (scaled, rounded: DualBound's doc) and the optimum (p.point); False where the
        box holds no point of the relaxation (proven with HiGHS's dual ray, in integers); None where neither."""
        np, h = self.np, self.highs
        h.changeColsBounds(len(p.xs), self.columns, np.array([float(s.lo[x]) for x in p.xs]),
                           np.array([float(s.hi[x]) for x in p.xs]))
        h.run()
        status = h.getModelStatus()
        if status == self.highspy.HighsModelStatus.kOptimal:
            solution = h.getSolution()
            p.point = list(solution.col_value)
            return _dual(p, p.c, solution.row_dual, self.index)
        if status == self.highspy.HighsModelStatus.kInfeasible:
            _, found, ray = h.getDualRay()
            if found:
                zero = [0] * len(p.xs)
                for sign in (-1, 1):  # a Farkas ray: u with u b + max over the box of -u A x < 0
                    const, d = _dual(p, zero, [sign * r for r in ray], self.index)
                    lo, hi = s.lo, s.hi
                    if const + sum(dj * (hi[x] if dj > 0 else lo[x]) for dj, x in zip(d, p.xs)) < 0:
                        return False
        return None


def _dual(p: DualBound, c: list[int], row_dual, index: dict[int, int]) -> tuple[int, list[int]]:
    """(scaled u b + v e, scaled reduced costs c - u A - v E) for HiGHS's row duals of min -c x (u = -dual, rounded
    down to a multiple of 1 / DUAL_SCALE and kept >= 0 on the <= rows; v = -dual rounded)."""
    n = len(p.rows)
    weights = [floor(max(0.0, -y) * DUAL_SCALE) for y in row_dual[:n]] + [round(-y * DUAL_SCALE)
                                                                           for y in row_dual[n:]]
    d = [DUAL_SCALE * k for k in c]
    const = 0
    for w, (terms, r) in zip(weights, p.rows + p.equalities):
        if w:
            const += w * r
            for x, k in terms.items():
                d[index[x]] -= w * k
    return const, d


def dual_bounds(props: list, z: int, n_user: int, sense: str) -> list[DualBound]:
    """A DualBound of objective variable z where an == propagator defines it as a sum of two or more of the model's
    own variables (propagate.objective_sum) and two or more linear constraints (<=, ==) over the model's own variables
    connect to it through shared variables: every such constraint is a row."""
    found = objective_sum(props, z, n_user)
    if found is None:
        return []
    definer, c, c0 = found
    linear = [p for p in props if p is not definer and isinstance(p, Linear) and p.kind != NE
              and all(x < n_user for x in p.vars)]
    reached, chosen, grown = set(c), [], True
    while grown:
        grown = False
        for p in linear:
            if p not in chosen and reached.intersection(p.vars):
                chosen.append(p)
                reached.update(p.vars)
                grown = True
    if len(chosen) < 2 or len(reached) > MAX_LP_VARS:
        return []
    rows = [({x: k for k, x in p.terms}, -p.const) for p in chosen if p.kind != EQ]
    equalities = [({x: k for k, x in p.terms}, -p.const) for p in chosen if p.kind == EQ]
    return [DualBound(z, 1 if sense == "max" else -1, c, c0, rows, equalities)]
