"""Compiled checks (Python and numpy) agree with Constraint.holds."""
from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings

from constrint.check import constraint_fits, np_mask, predicates

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
    cols = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(len(names))]
    for c in m.constraints:
        truth = [c.holds(dict(zip(names, r))) for r in rows]
        assert [checks[id(c)](r) for r in rows] == truth
        if constraint_fits(c, lo, hi):
            mask = np.broadcast_to(np_mask(c, cols), (len(rows),))
            assert mask.tolist() == truth


def test_overflowing_constraints_are_not_vectorised():
    from constrint import Model

    m = Model()
    x = m.int_var(1, 10**12, "x")
    assert not constraint_fits(x * x * x <= 5, [1], [10**12])
    assert constraint_fits(x * 1000 <= 5, [1], [10**12])
