"""Model: classic counts, brute-force agreement on random models, preferences, optimisation, errors."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import constrint.model as model_module
import constrint.propagate as propagate_module
from constrint import ConstrintError, Infeasible, Model, Solution, TimeLimit
from constrint.expr import evaluate
from constrint.textformat import parse, parse_expression

from constrint_knapsack import hard_knapsack
from constrint_strategies import brute_force, models
from constrint_timing import finishes_within

KEEP_SUMS_FROM = propagate_module.KEEP_SUMS_FROM
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def queens(n: int) -> Model:
    m = Model()
    q = [m.int_var(0, n - 1, f"q{i}") for i in range(n)]
    m.add(m.all_different(q))
    m.add(m.all_different([q[i] + i for i in range(n)]))
    m.add(m.all_different([q[i] - i for i in range(n)]))
    return m


@pytest.mark.parametrize("n, expected", [(4, 2), (5, 10), (6, 4), (7, 40), (8, 92)])
def test_queens_counts(n, expected):
    m = queens(n)
    assert m.count() == expected
    sols = list(m.solutions())
    assert len(sols) == expected == len({tuple(s.values()) for s in sols})


def test_queens_counts_without_blocks(monkeypatch):
    monkeypatch.setattr(model_module, "BLOCK_ROWS", 0)
    assert queens(6).count() == 4
    assert len(list(queens(7).solutions())) == 40


def test_send_more_money_is_unique():
    m = Model()
    letters = {ch: m.int_var(0, 9, ch) for ch in "SENDMORY"}
    S, E, N, D, M, O, R, Y = (letters[ch] for ch in "SENDMORY")
    m.add(m.all_different(list(letters.values())))
    m.add(S >= 1)
    m.add(M >= 1)
    m.add(1000 * S + 100 * E + 10 * N + D + 1000 * M + 100 * O + 10 * R + E
          == 10000 * M + 1000 * O + 100 * N + 10 * E + Y)
    sols = list(m.solutions())
    assert [dict(s) for s in sols] == [dict(S=9, E=5, N=6, D=7, M=1, O=0, R=8, Y=2)]
    assert m.count() == 1


def test_magic_square_count():
    m = Model()
    cells = [m.int_var(1, 9, f"c{i}") for i in range(9)]
    m.add(m.all_different(cells))
    lines = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
    for a, b, c in lines:
        m.add(cells[a] + cells[b] + cells[c] == 15)
    assert m.count() == 8
    for s in m.solutions():
        assert sorted(s.values()) == list(range(1, 10))


@SETTINGS
@given(models(), st.booleans(), st.booleans())
def test_random_models_match_brute_force(m, blocks, keep_sums):
    """With and without numpy blocks; with keep_sums every sum, not only long ones, keeps its bounds between
    propagator runs and replays the trail (propagate.Linear)."""
    if not blocks:
        model_module.BLOCK_ROWS = 0
    if keep_sums:
        propagate_module.KEEP_SUMS_FROM = 1
    try:
        expected = {tuple(a.values()) for a in brute_force(m)}
        found = [tuple(s.values()) for s in m.solutions()]
        assert len(found) == len(set(found))
        assert set(found) == expected
        assert m.count() == len(expected)
    finally:
        model_module.BLOCK_ROWS = 1 << 14
        propagate_module.KEEP_SUMS_FROM = KEEP_SUMS_FROM


@SETTINGS
@given(models(), st.data())
def test_prefer_gives_lexicographic_optimum(m, data):
    names = list(m.variables)
    order = data.draw(st.permutations(names))[: data.draw(st.integers(1, len(names)))]
    prefer = [(n, data.draw(st.sampled_from(["min", "max"]))) for n in order]
    expected = brute_force(m)
    if not expected:
        with pytest.raises(Infeasible):
            m.solve(prefer=prefer)
        return

    def key(a):
        return tuple(a[n] if d == "min" else -a[n] for n, d in prefer)

    best = min(key(a) for a in expected)
    assert key(dict(m.solve(prefer=prefer))) == best
    assert key(dict(next(m.solutions(prefer=prefer)))) == best


@SETTINGS
@given(models(max_constraints=2), st.sampled_from(["min", "max"]))
def test_optimisation_matches_brute_force(m, sense):
    names = list(m.variables)
    objective = m.variables[names[0]] * 2 - (m.variables[names[-1]] if len(names) > 1 else 0)
    expected = brute_force(m)
    run = m.minimize if sense == "min" else m.maximize
    if not expected:
        with pytest.raises(Infeasible):
            run(objective)
        return
    values = [evaluate(objective, a) for a in expected]
    sol = run(objective)
    assert sol.objective == (min(values) if sense == "min" else max(values))
    assert evaluate(objective, dict(sol)) == sol.objective
    assert all(c.holds(sol) for c in m.constraints)


def test_solution_is_read_only_mapping():
    m = Model()
    x = m.int_var(1, 3, "x")
    m.add(x >= 2)
    sol = m.solve()
    assert isinstance(sol, Solution)
    assert sol["x"] == sol[x] == 2
    assert dict(sol) == {"x": 2}
    with pytest.raises(TypeError):
        sol["x"] = 3  # type: ignore[index]


def test_solution_lookup_of_an_unknown_name_lists_the_known_ones():
    m = Model()
    m.int_var(1, 3, "x")
    m.int_var(1, 3, "y")
    sol = m.solve()
    with pytest.raises(KeyError, match="no variable named 'z'; known: x, y"):
        sol["z"]
    assert "z" not in sol and sol.get("z") is None


def test_limit_and_distinct_solutions():
    m = Model()
    x, y = m.int_var(0, 9, "x"), m.int_var(0, 9, "y")
    m.add(x + y == 9)
    assert len(list(m.solutions(limit=3))) == 3
    assert len(list(m.solutions(limit=0))) == 0
    assert m.count() == 10
    with pytest.raises(ConstrintError, match="limit"):
        list(m.solutions(limit=-1))


def test_huge_divisibility_domain_solves_by_propagation():
    m = Model()
    x = m.int_var(1, 10**12, "x")
    d = m.int_var(values=[7, 11, 13], name="d")
    m.add(m.divides(d, x))
    m.add(x % 1000 == 0)
    m.add(x >= 10**12 - 10**6)
    sol = m.solve(prefer=[("x", "max"), ("d", "max")])
    best = max(v for v in range(10**12 - 10**6, 10**12 + 1, 1000) if any(v % p == 0 for p in (7, 11, 13)))
    assert sol["x"] == best
    assert sol["d"] == max(p for p in (7, 11, 13) if best % p == 0)


def test_time_limit_raises():
    m = queens(12)
    with pytest.raises(TimeLimit):
        sum(1 for _ in m.solutions(time_limit=0.05))
    with pytest.raises(TimeLimit):
        queens(14).count(time_limit=0.05)


def test_optimisation_past_its_time_limit_keeps_the_best_solution_found():
    knapsack = hard_knapsack()
    m = parse(knapsack.text)
    with pytest.raises(TimeLimit, match="not proven optimal") as info:
        m.maximize(parse_expression(knapsack.objective, m), time_limit=0.3)
    best = info.value.best
    assert best is not None and best.objective == knapsack.value(best) > 0 and knapsack.fits(best)
    m = Model()  # the square root of 2 is irrational: no solution, and none found before the limit
    x, y = m.int_var(0, 10**9, "x"), m.int_var(1, 10**9, "y")
    m.add(x * x == 2 * y * y)
    with pytest.raises(TimeLimit) as info:
        m.minimize(x, time_limit=0.05)
    assert info.value.best is None


def test_minimize_proves_optimum_on_product():
    m = Model()
    a, b = m.int_var(1, 100, "a"), m.int_var(1, 100, "b")
    m.add(a * b == 360)
    sol = m.minimize(a + b)
    assert sol.objective == min(p + 360 // p for p in range(1, 101) if 360 % p == 0 and 360 // p <= 100)
    assert m.maximize(a - b).objective == 90 - 4


@pytest.mark.parametrize("make, match", [
    (lambda m: m.int_var(5, 1, "x"), "lo=5 > hi=1"),
    (lambda m: m.int_var(1.5, 3, "x"), "must be an integer, got 1.5"),
    (lambda m: m.int_var(True, 3, "x"), "must be an integer, got True"),
    (lambda m: m.int_var(values=[], name="x"), "empty domain"),
    (lambda m: m.int_var(values=[1, 1.5], name="x"), "got 1.5"),
    (lambda m: m.int_var(values=[1], lo=1, name="x"), "either lo/hi or values"),
    (lambda m: m.int_var(1, name="x"), "needs bounds"),
    (lambda m: (m.int_var(1, 2, "x"), m.int_var(1, 2, "x")), "exists already"),
    (lambda m: m.var("nope"), "no variable named 'nope'"),
])
def test_model_input_errors(make, match):
    with pytest.raises(ConstrintError, match=match):
        make(Model())


def test_prefer_errors():
    m = Model()
    x = m.int_var(1, 3, "x")
    with pytest.raises(ConstrintError, match="unknown variable 'y'"):
        m.solve(prefer=[("y", "min")])
    with pytest.raises(ConstrintError, match="'min' or 'max', got 'up'"):
        m.solve(prefer=[(x, "up")])
    with pytest.raises(ConstrintError, match="prefer must be a list"):
        m.solve(prefer="x")
    assert m.solve(prefer=[x])["x"] == 1
    assert m.solve(prefer=[("x", "max")])["x"] == 3


def test_prefer_as_a_dict_keeps_directions_and_order():
    m = Model()
    x, y = m.int_var(0, 3, "x"), m.int_var(0, 3, "y")
    m.add(x + y <= 4)
    assert dict(m.solve(prefer={"x": "max", "y": "max"})) == {"x": 3, "y": 1}
    assert dict(m.solve(prefer={y: "max", x: "max"})) == {"x": 1, "y": 3}
    assert [dict(s) for s in m.solutions(limit=2, prefer={"x": "min", "y": "max"})] == [{"x": 0, "y": 3},
                                                                                          {"x": 0, "y": 2}]
    with pytest.raises(ConstrintError, match=r"got the bare pair \('x', 'max'\); write \[\('x', 'max'\)\]"):
        m.solve(prefer=("x", "max"))
    with pytest.raises(ConstrintError, match="'min' or 'max', got 'up'"):
        m.solve(prefer={"x": "up"})


def test_unknown_names_are_key_errors_too():
    m = Model()
    m.int_var(1, 2, "a")
    with pytest.raises(KeyError):
        m.var("b")
    with pytest.raises(ConstrintError, match="no variable named 'b'; known: a"):
        m.var("b")


@pytest.mark.parametrize("bad", [-1, "1s", True, float("nan")])
def test_bad_time_limits(bad):
    m = Model()
    m.int_var(1, 2, "a")
    for run in (lambda: m.solve(time_limit=bad), lambda: m.count(time_limit=bad),
                lambda: list(m.solutions(time_limit=bad)), lambda: m.minimize(m.var("a"), time_limit=bad)):
        with pytest.raises(ConstrintError, match="time_limit must be"):
            run()


def test_variables_of_another_model_are_rejected():
    m1, m2 = Model(), Model()
    x = m1.int_var(1, 3, "x")
    m2.int_var(1, 3, "x")
    with pytest.raises(ConstrintError, match="another Model"):
        m2.add(x >= 2)
    with pytest.raises(ConstrintError, match="another Model"):
        m2.minimize(x)


def test_variables_view_and_lookup():
    m = Model()
    a, b = m.int_var(1, 2, "a"), m.int_var(values=[4, 8], name="b")
    assert list(m.variables) == ["a", "b"] and m.variables["b"] is b and m.var("a") is a
    with pytest.raises(TypeError):
        m.variables["c"] = a  # type: ignore[index]


def test_infeasible_model_raises_with_core_everywhere():
    m = Model()
    x = m.int_var(1, 10, "x")
    m.add(x >= 5)
    m.add(x <= 3, name="small x")
    for run in (m.solve, lambda: m.minimize(x), lambda: m.maximize(x)):
        with pytest.raises(Infeasible, match="small x") as info:
            run()
        assert [str(c) for c in info.value.core] == ["x >= 5", "small x"]
    assert m.count() == 0 and list(m.solutions()) == []


def test_optimisation_over_huge_ranges_bisects_the_objective():
    m = Model()
    x, y = m.int_var(1, 10**12, "x"), m.int_var(1, 10**12, "y")
    m.add(x % 7 == 3)
    m.add(x + y <= 10**12)
    m.add(m.divides(1000, y))
    best = m.maximize(x - y, time_limit=10)
    top = 10**12 - 1000
    assert best["y"] == 1000 and best["x"] == top - (top - 3) % 7 and best.objective == best["x"] - 1000
    low = m.minimize(3 * x + y, time_limit=10)
    assert (low["x"], low["y"], low.objective) == (3, 1000, 1009)


def test_huge_domains_keep_the_time_limit_and_solve_fast():
    m = Model()
    x = m.int_var(-10**25, 10**25, "x")
    m.add(x * x == 4)
    with finishes_within(10):
        assert m.solve(time_limit=1)["x"] == -2
        assert m.count(time_limit=1) == 2
        assert [s["x"] for s in m.solutions(time_limit=1)] == [-2, 2]


def test_sums_of_thousands_of_terms():
    m = Model()
    xs = [m.int_var(0, 1, f"x{i}") for i in range(1000)]
    m.add(sum(xs) == 1)
    assert sum(m.solve().values()) == 1
    big = Model()
    ys = [big.int_var(0, 1, f"y{i}") for i in range(10_000)]
    big.add(sum(ys) - ys[0] <= 0)
    big.add(big.any_of([sum(ys) == 1, ys[1] == 1]))
    assert dict(big.solve()) == {f"y{i}": int(i == 0) for i in range(10_000)}
    assert big.count() == 1


def test_a_search_through_long_sums_costs_the_changes_per_node():
    # each node fixes one of 10,000 variables: re-summing both sums at every node took a minute
    m = Model()
    xs = [m.int_var(0, 10, f"x{i}") for i in range(10_000)]
    m.add(sum(xs) <= 5)
    m.add(sum((i % 7 + 1) * x for i, x in enumerate(xs)) >= 3)
    with finishes_within(30):
        assert sum(m.solve().values()) == 1


def test_infeasibility_proof_by_solve_costs_about_what_count_costs():
    # solve() searched without numpy blocks and took about 6 times as long as count() to find nothing
    m = Model()
    xs = [m.int_var(1, 9, f"x{i}") for i in range(8)]
    m.add(m.all_different(xs))
    m.add(sum(xs) == 35)  # eight different digits 1..9 sum to 36 at least
    started = time.perf_counter()
    assert m.count() == 0
    counting = time.perf_counter() - started
    started = time.perf_counter()
    with pytest.raises(Infeasible):
        m.solve()
    assert time.perf_counter() - started < 2 * counting + 0.1


def test_pigeonhole_refutes_all_different_at_once():
    m = Model()
    xs = [m.int_var(0, 10, f"x{i}") for i in range(12)]
    m.add(m.all_different(xs), name="twelve different values in 0..10")
    with finishes_within(10), pytest.raises(Infeasible) as info:
        m.solve()
    assert [str(c) for c in info.value.core] == ["twelve different values in 0..10"]


def test_an_objective_undefined_everywhere_is_named_as_the_cause():
    m = Model()
    x = m.int_var(1, 5, "x")
    with pytest.raises(Infeasible, match=r"objective x // 0 is undefined \(division or modulo by zero\) for every "
                                         r"value") as info:
        m.minimize(x // 0)
    assert info.value.core == [] and "domains alone" not in str(info.value)
    y = m.int_var(0, 3, "y")
    m.add(y == 0)  # feasible, but x % y is undefined in every solution: y == 0 is no core
    with pytest.raises(Infeasible, match=r"objective x % y is undefined .* in every solution") as info:
        m.maximize(x % y)
    assert info.value.core == []
    m.add(x >= 6, name="too big")
    with pytest.raises(Infeasible, match="too big"):
        m.maximize(x % y)


def test_automatic_names_skip_names_taken_already():
    m = Model()
    m.int_var(0, 1, "_x1")
    assert [str(m.int_var(0, 1)) for _ in range(2)] == ["_x2", "_x3"]
