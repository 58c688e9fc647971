"""Disjunctions: pruning through the last possible disjunct, exact judgement once variables are fixed."""
from __future__ import annotations

from constrint import Model
from constrint.disjunction import possible
from constrint.flatten import Flattener
from constrint.search import root_fixpoint


def test_any_of_prunes_the_last_possible_disjunct():
    m = Model()
    x = m.int_var(0, 100, "x")
    y = m.int_var(0, 100, "y")
    flat = Flattener([x, y])
    flat.add(y <= 10)
    flat.add(m.any_of([y >= 50, x + y >= 90]))
    assert root_fixpoint(flat.store, flat.props)
    assert flat.store.lo[0] == 80  # y >= 50 is impossible, so x + y >= 90 with y <= 10


def test_possible_is_exact_on_fixed_values():
    m = Model()
    x, y = m.int_var(-5, 5, "x"), m.int_var(-3, 3, "y")
    c = m.any_of([x == -2 % y, m.divides(y, x), m.all_different([x, y, x - y])])
    for a in range(-5, 6):
        for b in range(-3, 4):
            lo = hi = [a, b]
            assert possible(c, lo, hi) == c.holds({"x": a, "y": b})
