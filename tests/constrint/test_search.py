"""Search: node budgets on huge divisibility domains, kernel models, blocks agree with branching, conflicts steer
branching."""
from __future__ import annotations

import time

import pytest

from constrint import Infeasible, Model, TimeLimit
from constrint.components import solve_parts
from constrint.flatten import Flattener
from constrint.search import Search

from constrint_kernel_models import PREFER, kernel_tile_model


def _search(m: Model, prefer=(), minimize=None, **kw) -> Search:
    flat = Flattener(list(m.variables.values()))
    for c in m.constraints:
        flat.add(c)
    if minimize is not None:
        kw["objective"] = (flat.var_of(minimize), "min", minimize)
    return Search(flat.store, flat.props, flat.n_user, m._prefer(list(prefer)), constraints=m.constraints,
                  domains=m._domains(), **kw)


def test_huge_domains_finish_by_propagation():
    m = Model()
    x = m.int_var(1, 10**12, "x")
    y = m.int_var(1, 10**12, "y")
    t = m.int_var(values=[16, 32, 64, 128], name="t")
    m.add(m.divides(t, x))
    m.add(x * y == 2**36 * 3**5)
    m.add(y % 27 == 0)
    m.add(x >= 10**9)
    search = _search(m, prefer=[("x", "max"), ("t", "max")])
    first = next(search.run())
    assert search.nodes <= 60
    expected_x = max(d for d in _divs(2**36 * 3**5) if d >= 10**9 and (2**36 * 3**5 // d) % 27 == 0 and d % 16 == 0)
    assert first[0] == expected_x and first[2] == 128


def _divs(n):
    from constrint.domain import divisors

    return divisors(n)


def test_infeasible_huge_divisibility_is_proved_at_the_root():
    m = Model()
    x = m.int_var(1, 10**12, "x")
    m.add(x % 6 == 0)
    m.add(x % 10 == 5)
    search = _search(m)
    assert list(search.run()) == [] and search.nodes == 0


def test_kernel_model_first_preferred_solution_within_node_budget():
    m = kernel_tile_model()
    sol = m.solve(prefer=PREFER)
    assert all(c.holds(sol) for c in m.constraints)
    # preferences: the fewest forward blocks, and no feasible plan with as few blocks has more warps
    fw_only = kernel_tile_model(passes=("FW",))
    fw_only.add(fw_only.var("FW_BLOCKS") <= sol["FW_BLOCKS"] - 1)
    assert fw_only.count() == 0 if sol["FW_BLOCKS"] > 1 else True
    search = _search(kernel_tile_model(passes=("FW",)), prefer=[p for p in PREFER if p[0].startswith("FW")])
    next(search.run())
    assert search.nodes <= 400


def test_blocks_and_branching_enumerate_the_same_solutions():
    def gemm():
        m = Model()
        bm = m.int_var(values=[16, 32, 64, 128], name="bm")
        bn = m.int_var(values=[16, 32, 64, 128], name="bn")
        wm = m.int_var(values=[8, 16, 32], name="wm")
        wn = m.int_var(values=[8, 16, 32], name="wn")
        w = m.int_var(values=[1, 2, 4, 8], name="w")
        st = m.int_var(1, 4, "st")
        m.add(bm % wm == 0)
        m.add(m.divides(wn, bn))
        m.add((bm // wm) * (bn // wn) == w)
        m.add((bm + bn) * 32 * st * 2 <= 32768)
        return m

    a = _search(gemm(), block_rows=1 << 14)
    b = _search(gemm(), block_rows=0)
    rows_a, rows_b = list(a.run()), list(b.run())
    assert sorted(rows_a) == sorted(rows_b) and len(set(rows_a)) == len(rows_a) > 50
    assert b.nodes > a.nodes


def test_time_limit_in_search():
    m = Model()
    xs = [m.int_var(0, 30, f"x{i}") for i in range(12)]
    m.add(sum(x * (i + 1) for i, x in enumerate(xs)) == 1_001)  # feasible, with a huge number of solutions
    m.add(m.all_different(xs))
    started = time.perf_counter()
    with pytest.raises(TimeLimit):
        m.count(time_limit=0.2)
    assert time.perf_counter() - started < 5


def test_components_are_solved_separately():
    m = Model()
    a = [m.int_var(0, 9, f"a{i}") for i in range(6)]
    b = [m.int_var(0, 9, f"b{i}") for i in range(6)]
    m.add(sum(a) == 53)  # feasible on its own: five 9s and an 8
    m.add(m.all_different(b))
    m.add(sum(b) == 100)  # infeasible on its own: six different digits sum to at most 39
    flat = Flattener(list(m.variables.values()))
    for c in m.constraints:
        flat.add(c)
    started = time.perf_counter()
    assert next(solve_parts(flat.store, flat.props, flat.n_user, m.constraints, m._domains(), [], None, 0),
                None) is None
    assert time.perf_counter() - started < 2
    assert m.count() == 0


def _unrelated_bits_and_an_impossible_pair(m: Model):
    """a * a == 2 * b * b has no solution (sqrt 2 is irrational), which only search shows; twelve 0/1 variables in
    the same component have smaller domains, so first-fail alone branches on them first and refutes the pair under
    each of their 4,096 assignments."""
    bits = [m.int_var(0, 1, f"x{i}") for i in range(12)]
    a, b = m.int_var(1, 200, "a"), m.int_var(1, 200, "b")
    m.add(sum(bits) <= a)
    m.add(a * a == 2 * b * b)
    return a


def test_conflicts_steer_branching_to_their_variables():
    m = Model()
    _unrelated_bits_and_an_impossible_pair(m)
    search = _search(m)
    assert list(search.run()) == []
    assert search.nodes <= 5000  # first-fail alone: about 2 million nodes
    assert search.conflicts > 0 and search.weight[m.var("a").index] > search.weight[m.var("x0").index]


def test_conflicts_steer_branch_and_bound():
    m = Model()
    search = _search(m, minimize=_unrelated_bits_and_an_impossible_pair(m))
    assert list(search.run()) == [] and search.nodes <= 5000


@pytest.mark.parametrize("build", [
    lambda m, x, y, z: [x < y, y < x],
    lambda m, x, y, z: [x == y, x != y],
    lambda m, x, y, z: [x < y, y < z, z <= x],
    lambda m, x, y, z: [2 * x - 2 * y <= -1, 3 * y - 3 * x <= -1],
    lambda m, x, y, z: [x - y == 3, y - x != -3],
    lambda m, x, y, z: [x % y == y],
    lambda m, x, y, z: [x % -y == z, z <= -y],
    lambda m, x, y, z: [x % y >= z, z >= y],
    lambda m, x, y, z: [m.any_of([x < y, y < x]), x == y],
    lambda m, x, y, z: [m.any_of([x < y, y < z]), z <= x, y <= x, z <= y],
    lambda m, x, y, z: [x // 7 == y // 7, x >= y + 7],
    lambda m, x, y, z: [x // 7 <= (y + 3) // 7 - 2, x >= y - 4],
    lambda m, x, y, z: [x % 1000 == y % 1000, x >= y + 1, x <= y + 999],
    lambda m, x, y, z: [x % 1000 == z % 1000 + 3, x >= y + 4, y >= z, x <= z + 1002],
], ids=["two", "equal-unequal", "three", "scaled", "difference-unequal", "remainder-divisor", "negative-divisor",
        "remainder-through-a-third", "disjunction", "disjunction-of-paths", "equal-quotients", "quotients-apart",
        "equal-remainders", "remainders-through-a-path"])
def test_contradictory_differences_are_refuted_at_once(build):
    # bounds propagation alone moves the bounds one step per round: half an hour over [1, 2^30]
    m = Model()
    x, y, z = (m.int_var(1, 2**30, n) for n in "xyz")
    for c in build(m, x, y, z):
        m.add(c)
    with pytest.raises(Infeasible):
        m.solve(time_limit=5)


def test_difference_reasoning_agrees_with_brute_force():
    import itertools
    import random

    rng = random.Random(3)
    for _ in range(300):
        m = Model()
        xs = [m.int_var(0, 3, f"x{i}") for i in range(3)]
        rows = []
        for _ in range(rng.randrange(1, 5)):
            i, j = rng.sample(range(3), 2)
            a, c, op = rng.choice([1, 2, -3]), rng.randrange(-4, 5), rng.choice(["<=", "==", "!="])
            rows.append((i, j, a, c, op))
            e = a * (xs[i] - xs[j]) + c
            m.add(e <= 0 if op == "<=" else e == 0 if op == "==" else e != 0)
        holds = {"<=": lambda v: v <= 0, "==": lambda v: v == 0, "!=": lambda v: v != 0}
        every = [r for r in itertools.product(range(4), repeat=3)
                 if all(holds[op](a * (r[i] - r[j]) + c) for i, j, a, c, op in rows)]
        assert m.count() == len(every), rows


QUOTIENT_OPS = {"<=": lambda v: v <= 0, "==": lambda v: v == 0, "!=": lambda v: v != 0}


def _quotient_relation(rng):
    """x1 // b - (x2 + shift) // b (<= | ==) w: the difference carried to x1 - x2 (<= b w + b - 1)."""
    b, shift, op, w = rng.randrange(1, 6), rng.randrange(-2, 3), rng.choice(["<=", "=="]), rng.randrange(-2, 3)
    return (lambda x1, x2: x1 // b - (x2 + shift) // b - w), op


def _remainder_relation(rng):
    """x1 % b - x2 % b == d: x1 - x2 = d (mod b), which the differences' bounds on x1 - x2 may leave no room."""
    b, d = rng.randrange(1, 6), rng.randrange(-3, 4)
    return (lambda x1, x2: x1 % b - x2 % b - d), "=="


@pytest.mark.parametrize("relation", [_quotient_relation, _remainder_relation], ids=["quotients", "remainders"])
def test_difference_reasoning_through_quotients_and_remainders_agrees_with_brute_force(relation):
    import itertools
    import random

    rng = random.Random(11)
    for _ in range(300):
        m = Model()
        xs = [m.int_var(0, 12, f"x{i}") for i in range(2)]
        f, f_op = relation(rng)
        rows = [(rng.choice([1, -1]), rng.randrange(-14, 15), rng.choice(list(QUOTIENT_OPS)))
                for _ in range(rng.randrange(1, 3))]
        for e, op in [(f(*xs), f_op)] + [(a * (xs[0] - xs[1]) + c, op) for a, c, op in rows]:
            m.add(e <= 0 if op == "<=" else e == 0 if op == "==" else e != 0)
        every = [r for r in itertools.product(range(13), repeat=2)
                 if QUOTIENT_OPS[f_op](f(*r)) and all(QUOTIENT_OPS[op](a * (r[0] - r[1]) + c) for a, c, op in rows)]
        assert m.count() == len(every), rows


def test_difference_reasoning_with_disjunctions_and_remainders_agrees_with_brute_force():
    import itertools
    import random

    rng = random.Random(5)
    ops = {"<=": lambda v: v <= 0, "==": lambda v: v == 0, "!=": lambda v: v != 0}

    def row():
        i, j = rng.sample(range(3), 2)
        return i, j, rng.choice([1, -2]), rng.randrange(-3, 4), rng.choice(list(ops))

    def constraint(xs, r):
        i, j, a, c, op = r
        e = a * (xs[i] - xs[j]) + c
        return e <= 0 if op == "<=" else e == 0 if op == "==" else e != 0

    for _ in range(200):
        m = Model()
        xs = [m.int_var(0, 4, f"x{i}") for i in range(3)] + [m.int_var(1, 4, "d")]
        rows, options = [row() for _ in range(rng.randrange(0, 3))], [row() for _ in range(2)]
        for r in rows:
            m.add(constraint(xs, r))
        m.add(m.any_of([constraint(xs, r) for r in options]))
        if rng.random() < 0.5:
            m.add(xs[0] % xs[3] >= xs[1])  # the remainder's bound below its divisor joins the differences
        every = [v for v in itertools.product(range(5), range(5), range(5), range(1, 5))
                 if all(ops[r[4]](r[2] * (v[r[0]] - v[r[1]]) + r[3]) for r in rows)
                 and any(ops[r[4]](r[2] * (v[r[0]] - v[r[1]]) + r[3]) for r in options)
                 and (len(m.constraints) == len(rows) + 1 or v[0] % v[3] >= v[1])]
        assert m.count() == len(every), (rows, options)


def _linear_rows(rng, xs, count):
    rows = []
    for _ in range(count):
        coef = [rng.randint(-3, 3) for _ in xs]
        rows.append((coef, rng.randint(-6, 6), rng.choice(["<=", "=="])))
    return rows


def test_optimising_linear_objectives_agrees_with_brute_force():
    """The objective's relaxations against each linear constraint cut branch and bound: the optimum stays exact."""
    import itertools
    import random

    rng = random.Random(11)
    for _ in range(150):
        m = Model()
        boxes = [(rng.randint(-3, 1), rng.randint(1, 3)) for _ in range(4)]
        xs = [m.int_var(lo, hi, f"x{i}") for i, (lo, hi) in enumerate(boxes)]
        rows = _linear_rows(rng, xs, rng.randint(1, 3))
        for coef, rhs, op in rows:
            total = sum(k * x for k, x in zip(coef, xs))
            m.add(total <= rhs if op == "<=" else total == rhs)
        weights = [rng.randint(-4, 4) for _ in xs]
        objective = sum(w * x for w, x in zip(weights, xs)) + 7
        points = [p for p in itertools.product(*(range(lo, hi + 1) for lo, hi in boxes))
                  if all((sum(k * v for k, v in zip(coef, p)) <= rhs) if op == "<=" else
                         (sum(k * v for k, v in zip(coef, p)) == rhs) for coef, rhs, op in rows)]
        values = [sum(w * v for w, v in zip(weights, p)) + 7 for p in points]
        for optimise, expected in ((m.minimize, min(values, default=None)), (m.maximize, max(values, default=None))):
            if expected is None:
                with pytest.raises(Infeasible):
                    optimise(objective)
            else:
                assert optimise(objective).objective == expected, (boxes, rows, weights)


def test_knapsack_optimum_is_proven_quickly():
    import random

    rng = random.Random(1)
    weights, values = [rng.randint(5, 40) for _ in range(40)], [rng.randint(5, 60) for _ in range(40)]
    m = Model()
    xs = [m.int_var(0, 1, f"k{i}") for i in range(40)]
    m.add(sum(w * x for w, x in zip(weights, xs)) <= 300)
    start = time.perf_counter()
    best = m.maximize(sum(v * x for v, x in zip(values, xs)), time_limit=60)
    assert best.objective == 905 and sum(w * best[x] for w, x in zip(weights, xs)) <= 300
    assert time.perf_counter() - start < 15  # bounds alone: not proven in 60 s (148,000 nodes); 0.4 s here


def test_objective_pairs_only_with_constraints_over_all_its_variables():
    from constrint.propagate import objective_relaxations

    m = Model()
    x = [[m.int_var(0, 1, f"x{i}{j}") for j in range(3)] for i in range(3)]
    for i in range(3):  # an assignment: each row and column holds a third of the objective's variables
        m.add(sum(x[i]) == 1)
        m.add(sum(x[r][i] for r in range(3)) == 1)
    cost = sum((i + 2 * j) * x[i][j] for i in range(3) for j in range(3))
    m.add(sum(x[i][j] for i in range(3) for j in range(3)) <= 3)  # over all of them: one pair
    flat = Flattener(list(m.variables.values()))
    for c in m.constraints:
        flat.add(c)
    relaxations = objective_relaxations(flat.props, flat.var_of(cost), flat.n_user)
    assert len(relaxations) == 1 and relaxations[0].r == 3
    pairs = objective_relaxations(flat.props, flat.var_of(x[0][0] + x[0][1]), flat.n_user)
    assert sorted(p.r for p in pairs) == [-1, 1, 3]  # row 0 (== 1, both ways) and the total


def test_all_different_counts_the_values_left_not_their_span():
    m = Model()
    xs = [m.int_var(values=range(0, 100, 10), name=f"x{i}") for i in range(11)]  # 11 variables, 10 values
    m.add(m.all_different(xs))
    with pytest.raises(Infeasible):
        m.solve(time_limit=5)


def test_counting_over_large_value_sets_branches_in_constant_time_per_bound():
    m = Model()
    x = m.int_var(values=range(0, 60_000, 2), name="x")
    y = m.int_var(values=range(0, 60_000, 2), name="y")
    m.add(x + y == 60_000)
    start = time.perf_counter()
    assert m.count(time_limit=30) == 29_999  # x = 2 .. 59998
    assert time.perf_counter() - start < 10  # each bound move had copied the 30,000-value set: 20 s for 1,500 nodes
