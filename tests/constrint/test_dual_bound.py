"""The objective's bound through the linear relaxation of several constraints (constrint.dual_bound)."""
from __future__ import annotations

import itertools
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constrint import Model
from constrint.dual_bound import DualBound
from constrint.flatten import Flattener
from constrint.store import Conflict
from constrint_strategies import boxes as small_boxes
from constrint_strategies import GRID, relaxed_models, store_of


def _flattened(m: Model) -> Flattener:
    flat = Flattener(list(m.variables.values()))
    for c in m.constraints:
        flat.add(c)
    return flat


def test_root_bound_is_the_floor_of_the_relaxation_optimum():
    # max 3 x + 2 y + 1 with x + y <= 4, x + 3 y <= 5 over [0, 3]^2: x = 3, y = 2 / 3, 10 1/3 + 1
    s = store_of([(0, 3), (0, 3), (-100, 100)])
    DualBound(2, 1, {0: 3, 1: 2}, 1, [({0: 1, 1: 1}, 4), ({0: 1, 1: 3}, 5)], []).propagate(s)
    assert s.hi[2] == 11
    s = store_of([(0, 3), (0, 3), (-100, 100)])  # the least of 3 x + 2 y + 1 with x + y == 3 and y <= 2: x = 1, y = 2
    DualBound(2, -1, {0: 3, 1: 2}, 1, [({1: 1}, 2)], [({0: 1, 1: 1}, 3)]).propagate(s)
    assert s.lo[2] == 8


def test_reduced_costs_fix_what_cannot_reach_the_held_objective():
    # knapsack: values 10, 9, 1, 1 and weights 5, 5, 2, 5 under two capacities of 11; the relaxation's optimum is
    # 19 1/2 (x2 = 1/2: duals summing to 1/2, reduced costs 7.5, 6.5, 0, -1.5). Held to at least 19 by branch and
    # bound, the first two items must be in and the last out; x2 is left to search
    weights = {0: 5, 1: 5, 2: 2, 3: 5}
    bound = DualBound(4, 1, {0: 10, 1: 9, 2: 1, 3: 1}, 0, [(weights, 11), (dict(weights), 11)], [])
    s = store_of([(0, 1)] * 4 + [(19, 100)])
    bound.propagate(s)
    assert (s.lo, s.hi) == ([1, 1, 0, 0, 19], [1, 1, 1, 0, 19])
    s = store_of([(0, 1)] * 4 + [(20, 100)])  # 20 is out of reach: refuted
    with pytest.raises(Conflict):
        bound.propagate(s)


def test_a_box_without_a_point_of_the_relaxation_is_refuted():
    s = store_of([(0, 3), (0, 3), (-100, 100)])  # x + y >= 7 (as -x - y <= -7) beside x <= 3, y <= 3
    with pytest.raises(Conflict):
        DualBound(2, 1, {0: 1, 1: 1}, 0, [({0: -1, 1: -1}, -7), ({0: 1}, 3)], []).propagate(s)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_bound_and_fixing_keep_every_integer_point_that_reaches_the_held_objective(data):
    boxes = data.draw(small_boxes(-4))
    n, coef = len(boxes), st.integers(-4, 4)
    rows = [({x: data.draw(coef) for x in range(n)}, data.draw(st.integers(-10, 10)))
            for _ in range(data.draw(st.integers(0, 3)))]
    equalities = [({x: data.draw(coef) for x in range(n)}, data.draw(st.integers(-6, 6)))
                  for _ in range(data.draw(st.integers(0, 2)))]
    c, c0 = {x: data.draw(coef) for x in range(n)}, data.draw(st.integers(-5, 5))
    sign = data.draw(st.sampled_from([1, -1]))
    held = data.draw(st.integers(-40, 40))  # branch and bound's bound: z >= held (maximum) or z <= held (minimum)
    s = store_of(boxes + [(held, 100) if sign > 0 else (-100, held)])
    points = [p for p in itertools.product(*(range(lo, hi + 1) for lo, hi in boxes))
              if all(sum(a[x] * v for x, v in enumerate(p)) <= r for a, r in rows)
              and all(sum(a[x] * v for x, v in enumerate(p)) == r for a, r in equalities)]
    reaching = [p for p in points if sign * (sum(c[x] * v for x, v in enumerate(p)) + c0 - held) >= 0]
    try:
        DualBound(n, sign, c, c0, rows, equalities).propagate(s)
    except Conflict:
        assert not reaching
        return
    for p in reaching:
        assert all(s.lo[x] <= v <= s.hi[x] for x, v in enumerate(p)), (p, s.lo, s.hi)
        assert s.lo[n] <= sum(c[x] * v for x, v in enumerate(p)) + c0 <= s.hi[n]


def test_objectives_held_by_several_constraints_are_proven_quickly():
    rng = random.Random(1)  # a 0/1 knapsack of 60 items and three capacities: past 60 s with the pairwise bounds alone
    m = Model()
    xs = [m.int_var(0, 1, f"x{i}") for i in range(60)]
    weights = [[rng.randint(5, 40) for _ in xs] for _ in range(3)]
    for row in weights:
        m.add(sum(w * x for w, x in zip(row, xs)) <= sum(row) // 3)
    values = [rng.randint(5, 60) for _ in xs]
    start = time.perf_counter()
    best = m.maximize(sum(v * x for v, x in zip(values, xs)), time_limit=60)
    assert best.objective == 1061  # CP-SAT's optimum too
    assert all(sum(w * best[x] for w, x in zip(row, xs)) <= sum(row) // 3 for row in weights)
    rng = random.Random(2)  # a 15 x 15 assignment: 43 s before, its relaxation's optimum is whole
    m = Model()
    x = [[m.int_var(0, 1, f"x{i}_{j}") for j in range(15)] for i in range(15)]
    for i in range(15):
        m.add(sum(x[i]) == 1)
        m.add(sum(x[r][i] for r in range(15)) == 1)
    cost = [[rng.randint(1, 100) for _ in range(15)] for _ in range(15)]
    best = m.minimize(sum(cost[i][j] * x[i][j] for i in range(15) for j in range(15)), time_limit=60)
    assert best.objective == 201  # CP-SAT's optimum too
    assert sorted(j for i in range(15) for j in range(15) if best[x[i][j]]) == list(range(15))
    assert time.perf_counter() - start < 20  # 0.1 s here (2-core EPYC)


def test_huge_domains_are_clipped_for_the_solver_only():
    m = Model()
    x, y = m.int_var(0, 10**400, "x"), m.int_var(0, 10**400, "y")  # past the float range
    m.add(x + y <= 10**25 + 3)
    m.add(y <= x)
    assert m.maximize(x + 2 * y, time_limit=30).objective == 10**25 + 3 + (10**25 + 3) // 2


def test_optima_through_the_relaxation_agree_with_brute_force():
    """Models whose boxes are large enough for the relaxation (MIN_LP_POINTS): the optimum found through it is the
    best point of the box."""
    from constrint.dual_bound import MIN_LP_POINTS, dual_bounds
    from constrint.errors import Infeasible

    assert len(GRID) >= MIN_LP_POINTS
    for m, rows, weights, objective, values in relaxed_models(random.Random(5), 40, ops=("<=", "==")):
        for sense, optimise in (("min", m.minimize), ("max", m.maximize)):
            flat = _flattened(m)
            assert dual_bounds(flat.props, flat.var_of(objective), flat.n_user, sense, flat.store)
            if not len(values):
                with pytest.raises(Infeasible):
                    optimise(objective)
            else:
                expected = values.min() if sense == "min" else values.max()
                assert optimise(objective).objective == expected, (rows, weights, sense)


def _max_min(sense: str, seed: int, n: int):
    """(model, t, items, the two rows of values, the optimum over every subset): max t with t <= each row's sum
    under a capacity, or min t with t >= each over a covering row."""
    import numpy as np

    rng = random.Random(seed)
    weights = [rng.randint(5, 40) for _ in range(n)]
    values = [[rng.randint(0, 60) for _ in range(n)] for _ in range(2)]
    m = Model()
    xs = [m.int_var(0, 1, f"x{i}") for i in range(n)]
    t = m.int_var(0, 10**5, "t")
    load = sum(w * x for w, x in zip(weights, xs))
    m.add(load <= sum(weights) // 3 if sense == "max" else load >= sum(weights) // 2)
    for row in values:
        total = sum(v * x for v, x in zip(row, xs))
        m.add(t <= total if sense == "max" else t >= total)
    subsets = (np.arange(1 << n)[:, None] >> np.arange(n)) & 1
    loads = subsets @ np.array(weights)
    fits = loads <= sum(weights) // 3 if sense == "max" else loads >= sum(weights) // 2
    sums = [subsets[fits] @ np.array(row) for row in values]
    return m, t, xs, values, np.minimum(*sums).max() if sense == "max" else np.maximum(*sums).min()


def test_a_max_min_objective_is_bounded_through_its_sums():
    """maximize t with t <= each of two sums under a capacity (a variable, not a sum, is the objective): past 30 s
    at 40 items without the relaxation, at once with it; 16 items here, against every subset."""
    from constrint.dual_bound import dual_bounds

    m, t, xs, values, expected = _max_min("max", 3, 16)
    flat = _flattened(m)
    assert dual_bounds(flat.props, flat.var_of(t), flat.n_user, "max", flat.store)
    best = m.maximize(t, time_limit=60)
    assert best.objective == expected
    assert all(sum(v * best[x] for v, x in zip(row, xs)) >= best.objective for row in values)


@pytest.mark.parametrize("sense", ["max", "min"])
def test_a_node_solve_leaves_the_held_side_of_a_variable_objective_open(sense, monkeypatch):
    """max t with t <= each sum (min t with t >= each): the nodes' programs take t's held side (t >= the best so far
    + 1, or t <= the best - 1) from the root's box, so that a node short of the held value gets an optimum below it,
    which the bound prunes, instead of an infeasible program and a second, elastic one; the optimum is every
    subset's best."""
    from constrint import dual_bound

    boxes = []  # t's column bounds (column 0: the objective's variables come first) in the nodes' solves
    optimum = dual_bound._Program.optimum

    def recorded(self, lo, hi, cuts):
        if not cuts:
            boxes.append((lo[0], hi[0]))
        return optimum(self, lo, hi, cuts)

    monkeypatch.setattr(dual_bound._Program, "optimum", recorded)
    m, t, _, _, expected = _max_min(sense, 5, 15)
    best = m.maximize(t, time_limit=60) if sense == "max" else m.minimize(t, time_limit=60)
    assert best.objective == expected
    assert len(boxes) > 3
    held_side, root = (0, 0) if sense == "max" else (1, 10**5)
    assert all(box[held_side] == root for box in boxes)
