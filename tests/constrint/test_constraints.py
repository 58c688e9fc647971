"""Constraints: holds() semantics (undefined operations violate), text, labels, bad input."""
from __future__ import annotations

import pytest

from constrint import ConstrintError, Model


def test_holds_and_text():
    m = Model()
    x, y = m.int_var(0, 9, "x"), m.int_var(0, 9, "y")
    c = x * y <= 12
    assert c.holds({"x": 3, "y": 4}) and not c.holds({"x": 4, "y": 4})
    assert str(c) == "x * y <= 12"
    d = m.divides(y, x)
    assert str(d) == "divides(y, x)"
    assert d.holds({"x": 6, "y": 3}) and not d.holds({"x": 6, "y": 4})
    a = m.all_different([x, y, x + 1])
    assert a.holds({"x": 1, "y": 5}) and not a.holds({"x": 1, "y": 2})
    o = m.any_of([x <= 1, x >= 8])
    assert str(o) == "any_of(x <= 1, x >= 8)"
    assert o.holds({"x": 9, "y": 0}) and not o.holds({"x": 5, "y": 0})


def test_undefined_operations_violate():
    m = Model()
    x, y = m.int_var(0, 9, "x"), m.int_var(0, 9, "y")
    assert not (x % y == 0).holds({"x": 4, "y": 0})
    assert not (x // y != 7).holds({"x": 4, "y": 0})
    assert not m.divides(y, x).holds({"x": 0, "y": 0})
    assert m.divides(y, x).holds({"x": 0, "y": 3})
    assert m.any_of([x // y >= 1, y == 0]).holds({"x": 4, "y": 0})


def test_undefined_in_a_disjunct_is_solved_correctly():
    m = Model()
    x, y = m.int_var(0, 3, "x"), m.int_var(0, 2, "y")
    m.add(m.any_of([x // y >= 2, y == 0]))
    expected = {(a, b) for a in range(4) for b in range(3) if b == 0 or a // b >= 2}
    assert {(s["x"], s["y"]) for s in m.solutions()} == expected


def test_label_replaces_text_in_str():
    m = Model()
    x = m.int_var(0, 9, "x")
    c = m.add(x >= 3, name="at least three")
    assert str(c) == "at least three" and c.text() == "x >= 3"


@pytest.mark.parametrize("bad", [True, 3, "x <= 3", None])
def test_add_rejects_non_constraints(bad):
    with pytest.raises(ConstrintError, match="takes a constraint"):
        Model().add(bad)


def test_any_of_rejects_expressions_and_empty():
    m = Model()
    x = m.int_var(0, 9, "x")
    with pytest.raises(ConstrintError, match="any_of takes constraints"):
        m.any_of([x + 1])
    with pytest.raises(ConstrintError, match="at least one"):
        m.any_of([])
