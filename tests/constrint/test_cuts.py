"""MIR cuts of the relaxation (constrint.cuts) and their use in DualBound: every cut keeps each integer point that meets
the rows and reaches the cutoff, and a cutoff out of reach is refuted over the whole box."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constrint import Model
from constrint.cuts import mir_cuts
from constrint.dual_bound import DualBound
from constrint.store import Conflict
from constrint.textformat import parse, parse_expression
from constrint_knapsack import correlated_knapsack
from constrint_strategies import boxes as small_boxes
from constrint_strategies import store_of


def _points(boxes, rows, c, held):
    """The integer points of the boxes meeting every row (a, r): a x <= r, with c x >= held."""
    return [p for p in itertools.product(*(range(lo, hi + 1) for lo, hi in boxes))
            if all(np.dot(a, p) <= r for a, r in rows) and np.dot(c, p) >= held]


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_every_cut_keeps_the_integer_points_of_the_rows_and_the_cutoff(data):
    boxes = data.draw(small_boxes(-3))
    n, coef = len(boxes), st.integers(-9, 9)
    rows = [([data.draw(coef) for _ in range(n)], data.draw(st.integers(-20, 20)))
            for _ in range(data.draw(st.integers(1, 3)))]
    if data.draw(st.booleans()):  # an equality: the row and its negation
        a, r = [data.draw(coef) for _ in range(n)], data.draw(st.integers(-8, 8))
        rows += [(a, r), ([-k for k in a], -r)]
    base = data.draw(st.integers(1, len(rows)))  # rows past `base` are earlier cuts: not added to the cutoff
    c = [data.draw(coef) for _ in range(n)]
    held = data.draw(st.integers(-30, 30))
    point = np.array([data.draw(st.floats(lo, hi)) for lo, hi in boxes])
    duals = [data.draw(st.floats(0, 3)) for _ in rows]
    cuts = mir_cuts(np.array([a for a, _ in rows], dtype=np.int64), [r for _, r in rows], base,
                    (-np.array(c, dtype=np.int64), -held), duals, [lo for lo, _ in boxes], [hi for _, hi in boxes],
                    point, 20)
    for p in _points(boxes, rows, c, held):
        for a, r in cuts:
            assert np.dot(a, p) <= r, (p, a, r)


def test_the_cutoff_and_a_correlated_capacity_round_up_the_number_of_items():
    # values = weights + 100 under a capacity of 1000: reaching 1201 takes 2.01 items' worth of the 100s, so 3 items;
    # the point takes 2.6 items (weight 1000, value 1260)
    weights = np.array([[300, 400, 500, 600]], dtype=np.int64)
    cuts = mir_cuts(weights, [1000], 1, (-(weights[0] + 100), -1201), [0.0], [0] * 4, [1] * 4,
                    np.array([1.0, 1.0, 0.6, 0.0]), 10)
    assert ([-1, -1, -1, -1], -3) in cuts


def test_cuts_keep_every_point_that_reaches_the_sought_objective():
    """DualBound told the objective sought (as branch and bound tells it after a solution) makes cuts over the root's
    box and may refute the box: brute force over small boxes, maximising and minimising."""
    rng = np.random.default_rng(7)
    refuted = 0
    for _ in range(100):
        n = int(rng.integers(2, 5))
        boxes = [(int(lo), int(lo + w)) for lo, w in zip(rng.integers(-2, 2, n), rng.integers(1, 4, n))]
        rows = [(list(rng.integers(-6, 7, n)), int(rng.integers(-6, 12))) for _ in range(int(rng.integers(1, 4)))]
        c, c0 = [int(k) for k in rng.integers(-6, 7, n)], int(rng.integers(-3, 4))
        values = [int(np.dot(c, p)) + c0 for p in _points(boxes, rows, c, -10**9)]
        for sign in (1, -1):
            best = max((sign * v for v in values), default=0)
            for sought in (sign * best, sign * (best + 1)):  # z >= sought (maximum) or z <= sought (minimum)
                s = store_of(boxes + [(sought, 1000) if sign > 0 else (-1000, sought)])
                bound = DualBound(n, sign, dict(enumerate(c)), c0,
                                  [(dict(enumerate(map(int, a))), r) for a, r in rows], [])
                bound.seek(sought)
                reaching = _points(boxes, rows, [sign * k for k in c], sign * (sought - c0))
                try:
                    for _ in range(4):  # a round of cuts per run
                        bound.propagate(s)
                except Conflict:
                    assert not reaching
                    refuted += 1
                    continue
                for p in reaching:
                    assert all(s.lo[x] <= v <= s.hi[x] for x, v in enumerate(p))
    assert refuted > 100


def test_a_floating_point_verdict_alone_refutes_nothing(monkeypatch):
    """A solve that reports the box infeasible where it is not (as a numerical failure might) must not refute it:
    only duals checked in integers do."""
    from types import SimpleNamespace

    import constrint.dual_bound as dual_bound

    def wrong(self, lo, hi, cuts):
        return SimpleNamespace(status=2, fun=0.0), *self.ub

    monkeypatch.setattr(dual_bound._Program, "optimum", wrong)
    s = store_of([(0, 1)] * 3 + [(-100, 100)])
    bound = DualBound(3, 1, {0: 3, 1: 2, 2: 2}, 0, [({0: 2, 1: 2, 2: 1}, 3)], [])  # best: x0 + x2, 5
    bound.seek(5)
    s.set_lo(3, 5)
    for _ in range(4):
        bound.propagate(s)
    assert bound.refuted is None and (s.lo[0], s.hi[0]) == (0, 1)


def test_a_strongly_correlated_knapsack_is_proven_through_its_cuts(monkeypatch):
    """100 items, values = first weight + 100, three capacities: past 30 s without cuts (CP-SAT: 0.09 s); the cut
    rounds at the cutoff 34,407 refute it over the whole box."""
    rounds = []
    cut_round = DualBound._cut_round

    def spy(self, held):
        cut_round(self, held)
        rounds.append((held, self.refuted))

    monkeypatch.setattr(DualBound, "_cut_round", spy)
    knapsack = correlated_knapsack(capacities=3, seed=1)
    m = parse(knapsack.text)
    best = m.maximize(parse_expression(knapsack.objective, m), time_limit=30)
    assert best.objective == 34406 == knapsack.value(best) and knapsack.fits(best)  # CP-SAT's optimum too
    assert (34407, 34407) in rounds


def test_a_strongly_correlated_covering_is_minimised_through_its_cuts(monkeypatch):
    """The minimising side: 100 items whose chosen weights must reach half of each of three weight rows, at the least
    cost (first weight + 100 per item): not proven in 20 s without cuts (CP-SAT: 0.14 s)."""
    refuted = []
    cut_round = DualBound._cut_round

    def spy(self, held):
        cut_round(self, held)
        refuted.append(self.refuted)

    monkeypatch.setattr(DualBound, "_cut_round", spy)
    rng = random.Random(1)
    weights = [[rng.randint(100, 1000) for _ in range(100)] for _ in range(3)]
    m = Model()
    xs = [m.int_var(0, 1, f"x{i}") for i in range(100)]
    for row in weights:
        m.add(sum(w * x for w, x in zip(row, xs)) >= sum(row) // 2)
    best = m.minimize(sum((w + 100) * x for w, x in zip(weights[0], xs)), time_limit=30)
    assert best.objective == 32606  # CP-SAT's optimum too
    assert all(sum(w * best[x] for w, x in zip(row, xs)) >= sum(row) // 2 for row in weights)
    assert refuted[-1] is not None


@pytest.mark.parametrize("huge", [2**39, 2**41, 2**70])
def test_large_numbers_stay_exact(huge):
    """Cuts are made in int64 where the rows' numbers are below 2^40 and skipped past it; the optimum is exact."""
    m = parse(f"x in [0..{huge}]\ny in [0..{huge}]\nx + y <= {huge + 3}\ny <= x")
    assert m.maximize(parse_expression("x + 2 * y", m), time_limit=30).objective == huge + 3 + (huge + 3) // 2
