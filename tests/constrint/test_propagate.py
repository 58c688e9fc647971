"""Propagators never remove a value that belongs to a solution, and decide fixed inputs exactly."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constrint import Infeasible, Model, TimeLimit
from constrint import propagate as P
from constrint.domain import divisors
from constrint.store import Conflict, Store

from constrint_timing import finishes_within


def _store(domains):
    s = Store()
    for vals in domains:
        s.new_var(min(vals), max(vals), tuple(sorted(set(vals))))
    s.queued[:] = []
    return s


RELATIONS = {
    "times": (lambda x, y, z: z == x * y, lambda: P.Times(0, 1, 2)),
    "floordiv": (lambda x, y, z: y != 0 and z == x // y, lambda: P.FloorDiv(0, 1, 2)),
    "mod": (lambda x, y, z: y != 0 and z == x % y, lambda: P.Mod(0, 1, 2)),
    "divides": (lambda x, y, z: x != 0 and y % x == 0, lambda: P.Divides(0, 1)),
    "power3": (lambda x, y, z: y == x**3, lambda: P.Power(0, 3, 1)),
    "power2": (lambda x, y, z: y == x**2, lambda: P.Power(0, 2, 1)),
    "linear_eq": (lambda x, y, z: 2 * x - 3 * y + z == 1, lambda: P.Linear([(2, 0), (-3, 1), (1, 2)], -1, P.EQ)),
    "linear_le": (lambda x, y, z: 4 * x + y - 2 * z <= 3, lambda: P.Linear([(4, 0), (1, 1), (-2, 2)], -3, P.LE)),
    "linear_ne": (lambda x, y, z: x - y != 2, lambda: P.Linear([(1, 0), (-1, 1)], -2, P.NE)),
    "alldiff": (lambda x, y, z: len({x, y, z}) == 3, lambda: P.AllDifferent([0, 1, 2])),
}

domain = st.sets(st.integers(-9, 30), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(RELATIONS)), domain, domain, domain)
def test_propagation_is_sound_and_exact_when_fixed(name, dx, dy, dz):
    relation, make = RELATIONS[name]
    s = _store([dx, dy, dz])
    prop = make()
    support = [t for t in itertools.product(sorted(dx), sorted(dy), sorted(dz)) if relation(*t)]
    try:
        for _ in range(10):  # a few rounds stand in for the fixpoint loop
            prop.propagate(s)
    except Conflict:
        assert not support
        return
    for t in support:
        for i, v in enumerate(t):
            assert s.lo[i] <= v <= s.hi[i] and (s.vs[i] is None or v in s.vs[i])
    fixed = all(s.lo[i] == s.hi[i] for i in prop.vars)
    if fixed:
        assert support, f"{name} accepted fixed values that violate it"


def test_fixed_multiple_restricts_divisor_to_divisors():
    s = Store()
    d, n = s.new_var(1, 10**12), s.new_var(360, 360)
    P.Divides(d, n).propagate(s)
    assert s.values(d) == list(divisors(360))


def test_fixed_divisor_gives_congruence_on_huge_domain():
    s = Store()
    x, y, z = s.new_var(1, 10**12), s.new_var(48, 48), s.new_var(1, 10**15)
    P.Times(x, y, z).propagate(s)
    assert s.md[z] == 48 and s.lo[z] == 48 and s.hi[z] == 48 * 10**12
    t = Store()
    a, b = t.new_var(1, 10**12), t.new_var(1000, 1000)
    P.Divides(b, a).propagate(t)
    assert (t.md[a], t.rs[a], t.lo[a]) == (1000, 0, 1000)


def test_all_different_counts_the_values_left_pigeonhole():
    s = _store([range(0, 11)] * 12)  # 12 variables, 11 values
    with pytest.raises(Conflict):
        P.AllDifferent(list(range(12))).propagate(s)
    t = _store([[2], [1, 2, 3], [1, 3], [1, 3]])  # 2 is taken: three variables share the values 1 and 3
    with pytest.raises(Conflict):
        P.AllDifferent([0, 1, 2, 3]).propagate(t)
    u = _store([[2], [1, 2, 3], [1, 3], [1, 3, 4]])
    P.AllDifferent([0, 1, 2, 3]).propagate(u)
    assert u.values(1) == [1, 3]


def test_a_fixed_product_of_two_huge_primes_is_not_factored():
    p, q = 100000000000000000039, 100000000000000000129  # primes: Pollard's rho would take hours
    m = Model()
    x, y = m.int_var(2, 10**45, "x"), m.int_var(2, 10**45, "y")
    m.add(x * y == p * q)
    with finishes_within(10), pytest.raises(TimeLimit):
        m.solve(time_limit=0.5)
    easy = Model()  # a huge product of small primes still restricts its factors to divisors
    x, y = easy.int_var(1, 2**100, "x"), easy.int_var(1, 2**100, "y")
    easy.add(x * y == 2**100)
    assert easy.count(time_limit=5) == 101


def test_propagation_that_shrinks_a_huge_domain_a_unit_at_a_time_keeps_the_time_limit():
    m = Model()
    x, y = m.int_var(0, 10**25, "x"), m.int_var(0, 10**25, "y")
    z = m.int_var(0, 1, "z")  # a three-variable sum: not the difference constraints the root refutes at once
    m.add(x < y)
    m.add(y < x + z)
    with finishes_within(10):  # (an objective over a product: a linear one gets the relaxation, which refutes it)
        for run in (lambda: m.solve(time_limit=0.3), lambda: m.count(time_limit=0.3),
                    lambda: m.minimize(x * z, time_limit=0.3)):
            with pytest.raises(TimeLimit, match="propagation stopped"):
                run()
    with finishes_within(10), pytest.raises(Infeasible):  # x < y < x + z with z <= 1: no rational point either
        m.minimize(x, time_limit=5)


def test_relaxation_of_one_constraint_is_its_fractional_optimum():
    s = _store([range(0, 2)] * 3)  # x in {0, 1}: 60 x0 + 100 x1 + 120 x2 with 10 x0 + 20 x1 + 30 x2 <= 50
    c, a = {0: 60, 1: 100, 2: 120}, {0: 10, 1: 20, 2: 30}
    assert P._relaxed_max(P._fill_order(c, a), 50, s) == (240, (2, True))  # x0 = x1 = 1, x2 = 2/3 (best: 1)
    assert P._relaxed_max(P._fill_order(c, a), -1, s) == (None, None)  # no point of the box uses less than 0
    assert P._relaxed_max(P._fill_order({x: -k for x, k in c.items()}, a), 50, s) == (0, None)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_relaxation_bounds_every_integer_point(data):
    n = data.draw(st.integers(1, 4))
    boxes = [data.draw(st.tuples(st.integers(-4, 4), st.integers(0, 4))) for _ in range(n)]
    s = _store([range(lo, lo + w + 1) for lo, w in boxes])
    c = {x: data.draw(st.integers(-5, 5)) for x in range(n)}
    a = {x: data.draw(st.integers(-5, 5)) for x in range(n)}
    r = data.draw(st.integers(-20, 20))
    points = [p for p in itertools.product(*(range(lo, lo + w + 1) for lo, w in boxes))
              if sum(a[x] * v for x, v in enumerate(p)) <= r]
    top, _ = P._relaxed_max(P._fill_order(c, a), r, s)
    if not points:
        return  # the relaxation may still hold rational points
    assert top is not None and top >= max(sum(c[x] * v for x, v in enumerate(p)) for p in points)
