"""constrint.lp: each solve of a Program kept between solves is optimal for its own box (checked by its certificate)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from constrint import lp

TOL = 1e-6


def _certified(c, a_ub, b_ub, a_eq, b_eq, box, solved: lp.Solved) -> None:
    """The optimality conditions of min c x: x in the box and the rows, duals of the <= rows <= 0 and zero where the
    row is slack, each reduced cost c - A^T y of the right sign at the bound x sits on (zero strictly inside)."""
    x, y = solved.x, solved.duals
    assert np.all(x >= box[:, 0] - TOL) and np.all(x <= box[:, 1] + TOL)
    a = np.vstack([m for m in (a_ub, a_eq) if m is not None])
    m_ub = 0 if a_ub is None else len(a_ub)
    if m_ub:
        assert np.allclose(solved.slack, b_ub - a_ub @ x, atol=TOL) and np.all(solved.slack >= -TOL)
        assert np.all(y[:m_ub] <= TOL) and np.all(np.abs(y[:m_ub] * solved.slack) <= TOL)
    if a_eq is not None:
        assert np.allclose(a_eq @ x, b_eq, atol=TOL)
    reduced = c - a.T @ y
    at_lower, at_upper = np.isclose(x, box[:, 0], atol=TOL), np.isclose(x, box[:, 1], atol=TOL)
    assert np.all(reduced[at_lower & ~at_upper] >= -TOL) and np.all(reduced[at_upper & ~at_lower] <= TOL)
    assert np.all(np.abs(reduced[~at_lower & ~at_upper]) <= TOL)
    assert abs(solved.fun - c @ x) <= TOL * (1 + abs(solved.fun))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 8), st.integers(1, 4), st.integers(0, 2))
def test_every_solve_of_a_kept_program_is_optimal_for_its_box(seed, n, m_ub, m_eq):
    """Twenty boxes in turn (each solve starting from the last's basis): every optimum carries its certificate, and
    where a box holds no point, a program built for that box alone agrees."""
    rng = np.random.default_rng(seed)
    c = rng.integers(-5, 6, n).astype(float)
    a_ub, b_ub = rng.integers(-4, 5, (m_ub, n)).astype(float), rng.integers(-5, 10, m_ub).astype(float)
    a_eq, b_eq = (rng.integers(-3, 4, (m_eq, n)).astype(float), rng.integers(-4, 5, m_eq).astype(float)) if m_eq \
        else (None, None)
    program = lp.Program(c, a_ub, b_ub, a_eq, b_eq)
    statuses = set()
    for _ in range(20):
        lower = rng.integers(-5, 1, n)
        box = np.stack([lower, lower + rng.integers(0, 7, n)], 1).astype(float)
        solved = program.solve(box)
        statuses.add(solved.status)
        if solved.status == lp.OPTIMAL:
            _certified(c, a_ub, b_ub, a_eq, b_eq, box, solved)
        else:
            assert solved.status == lp.INFEASIBLE
            assert lp.Program(c, a_ub, b_ub, a_eq, b_eq).solve(box).status == lp.INFEASIBLE
    assert statuses


def test_a_box_without_a_point_is_infeasible():
    program = lp.Program(np.array([1.0, 1.0]), np.array([[1.0, 1.0]]), np.array([-20.0]), None, None)
    assert program.solve(np.array([[-5.0, 5.0], [-5.0, 5.0]])).status == lp.INFEASIBLE
    solved = program.solve(np.array([[-15.0, 5.0], [-5.0, 5.0]]))
    assert solved.status == lp.OPTIMAL and abs(solved.fun + 20.0) <= TOL
