"""Compiled checks (Python predicates and numpy block checks) agree with Constraint.holds."""
from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings

from constrint import Model
from constrint.check import conjunction, constraint_fits, predicates
from constrint.vector import block_check

from constrint_strategies import models


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(max_vars=3, max_constraints=4))
def test_compiled_checks_agree_with_holds(m):
    names = list(m.variables)
    domains = [v.domain.values or range(v.domain.lo, v.domain.hi + 1) for v in m.variables.values()]
    rows = list(itertools.product(*domains))
    checks = predicates(m.constraints)
    lo = [min(d) for d in domains]
    hi = [max(d) for d in domains]
    shape = tuple(len(d) for d in domains)
    # every variable on its own axis; then the first one fixed (a plain int) at its first value
    axes = [np.array(d, dtype=np.int64).reshape(tuple(-1 if k == i else 1 for k in range(len(shape))))
            for i, d in enumerate(domains)]
    fixed = [domains[0][0], *(a.reshape(a.shape[1:]) for a in axes[1:])]
    for c in m.constraints:
        check = block_check([c], lo, hi)
        truth = [c.holds(dict(zip(names, r))) for r in rows]
        assert [checks[id(c)](r) for r in rows] == truth
        if constraint_fits(c, lo, hi):
            assert np.broadcast_to(check(axes)[0], shape).reshape(-1).tolist() == truth
            first = len(rows) // shape[0]
            assert np.broadcast_to(check(fixed)[0], shape[1:]).reshape(-1).tolist() == truth[:first]


def test_block_check_tests_only_divisors_that_may_be_zero():
    from constrint import Model

    m = Model()
    x = m.int_var(-3, 3, "x")
    y = m.int_var(-2, 2, "y")
    c = x // y >= 1
    cols = [np.arange(-3, 4).reshape(-1, 1), np.arange(-2, 3).reshape(1, -1)]
    may_be_zero = block_check([c], [-3, -2], [3, 2])
    assert not may_be_zero(cols)[0][:, 2].any()  # y == 0: undefined, so false
    assert may_be_zero([3, 0]) == (np.False_,)
    never_zero = block_check([c], [-3, 1], [3, 2])
    assert never_zero([np.arange(-3, 4), 1])[0].tolist() == [x >= 1 for x in range(-3, 4)]


def test_block_check_gives_one_mask_per_set_of_variables():
    from constrint import Model

    m = Model()
    x, y, z = (m.int_var(0, 3, n) for n in "xyz")
    cs = [x != y, x - y != 1, y // z == 1, m.any_of([x == 0, y == 0])]
    cols = [np.arange(4).reshape(-1, 1, 1), np.arange(4).reshape(1, -1, 1), np.arange(4).reshape(1, 1, -1)]
    masks = block_check(cs, [0, 0, 0], [3, 3, 3])(cols)
    names = list(m.variables)
    assert len(masks) == 2
    for mask, group in zip(masks, (cs[:2] + cs[3:], cs[2:3])):
        mask = np.broadcast_to(mask, (4, 4, 4))
        for r in np.ndindex(4, 4, 4):
            assert mask[r] == all(c.holds(dict(zip(names, r))) for c in group)


def test_overflowing_constraints_are_not_vectorised():
    from constrint import Model

    m = Model()
    x = m.int_var(1, 10**12, "x")
    assert not constraint_fits(x * x * x <= 5, [1], [10**12])
    assert constraint_fits(x * 1000 <= 5, [1], [10**12])


def test_expressions_nested_beyond_what_python_compiles_are_checked_through_holds():
    m = Model()
    x, y = m.int_var(-5, 5, "x"), m.int_var(0, 1, "y")
    e = x
    for _ in range(250):  # the source would nest 250 parentheses deep; Python's parser stops at 200
        e = e // 2
    c = m.add(e + y == -1 + y)
    check = predicates([c])[id(c)]
    assert [check((v, 0)) for v in range(-5, 6)] == [v < 0 for v in range(-5, 6)] and check.__doc__ == c.text()
    assert conjunction([c], m._domains())((-3, 1)) and not conjunction([c], m._domains())((3, 1))
    assert m.count() == 10 and len(list(m.solutions())) == 10 and m.solve(prefer=[("x", "max")])["x"] == -1
