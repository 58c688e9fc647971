"""Expressions: operators, printing, evaluation, interval bounds, bad input."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constrint import ConstrintError, Model
from constrint.expr import MAX_DEPTH, Undefined, evaluate, interval, iroot

from constrint_strategies import expressions, value_or_none
from constrint_timing import finishes_within


@pytest.fixture
def xy():
    m = Model()
    return m, m.int_var(-3, 5, "x"), m.int_var(1, 4, "y")


def test_printing_keeps_python_precedence(xy):
    _, x, y = xy
    assert str(x * y <= 4096) == "x * y <= 4096"
    assert str((x + y) * 2 == y) == "(x + y) * 2 == y"
    assert str(x - (y - 1) != 0) == "x - (y - 1) != 0"
    assert str(-x ** 2 >= 3) == "-x ** 2 >= 3"
    assert str((-x) ** 2 > 0) == "(-x) ** 2 > 0"
    assert str(x // y % 3 < 1) == "x // y % 3 < 1"
    assert str(2 - x) == "2 - x"


def test_evaluate_uses_floor_semantics_and_flags_undefined(xy):
    _, x, y = xy
    assert evaluate(x // y, {"x": -7, "y": 2}) == -4
    assert evaluate(x % y, {"x": -7, "y": 2}) == 1
    assert evaluate(x % -y, {"x": 7, "y": 2}) == -1
    with pytest.raises(Undefined):
        evaluate(x // (y - 2), {"x": 1, "y": 2})
    with pytest.raises(Undefined):
        evaluate(x % (y - 2), {"x": 1, "y": 2})


@pytest.mark.parametrize("build, match", [
    (lambda x, y: x ** y, "exponent .* must be a constant integer"),
    (lambda x, y: x ** -1, "exponent -1 .* negative"),
    (lambda x, y: (x + 1) ** 10**7, "exponent 10000000 of x \\+ 1 is over 4096"),
    (lambda x, y: x + 1.5, "right operand of '\\+' must be an integer, got 1.5"),
    (lambda x, y: x * True, "must be an integer, got True"),
    (lambda x, y: x / y, "use '//'"),
    (lambda x, y: x <= 2.5, "right side of '<=' must be an integer"),
])
def test_bad_operands_raise(xy, build, match):
    _, x, y = xy
    with pytest.raises(ConstrintError, match=match):
        build(x, y)


def test_truth_value_raises(xy):
    _, x, y = xy
    with pytest.raises(ConstrintError, match="no truth value"):
        bool(x < y)
    with pytest.raises(ConstrintError, match="no truth value"):
        if x + 1:
            pass


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_interval_contains_every_defined_value(data):
    m = Model()
    x = m.int_var(-3, 4, "x")
    y = m.int_var(-2, 3, "y")
    e = data.draw(expressions([x, y]))
    if isinstance(e, int):
        return
    xlo, ylo = data.draw(st.integers(-3, 4)), data.draw(st.integers(-2, 3))
    xhi, yhi = data.draw(st.integers(xlo, 4)), data.draw(st.integers(ylo, 3))
    bounds = interval(e, [xlo, ylo], [xhi, yhi])
    values = [value_or_none(e, {"x": a, "y": b}) for a, b in itertools.product(range(xlo, xhi + 1),
                                                                              range(ylo, yhi + 1))]
    defined = [v for v in values if v is not None]
    if bounds is None:
        assert not defined
    else:
        assert all(bounds[0] <= v <= bounds[1] for v in defined)


def test_iroot_is_exact_and_fast_on_huge_numbers():
    # a float first guess is off by about 1e9 at 10**50: stepping one unit at a time from there never ends
    with finishes_within(5):
        for n in (10**50 - 1, 10**50, 10**50 + 1, 3**2000, 2**4096 - 1, 10**25):
            for k in range(1, 9):
                r = iroot(n, k)
                assert r**k <= n < (r + 1) ** k, (n, k)
        assert iroot(10**50, 2) == 10**25 and iroot(10**75, 3) == 10**25 and iroot(10**75 - 1, 3) == 10**25 - 1


def test_long_sums_print_evaluate_and_bound_without_recursion():
    m = Model()
    xs = [m.int_var(0, 1, f"x{i}") for i in range(10_000)]
    total = sum(xs) - xs[0] + 2
    assert str(total == 1).startswith("0 + x0 + x1 + x2") and str(total == 1).endswith("x9999 - x0 + 2 == 1")
    assert str((xs[0] - xs[1]) * (xs[2] + xs[3] - xs[4])) == "(x0 - x1) * (x2 + x3 - x4)"
    assert evaluate(total, {x.name: 1 for x in xs}) == 10_001
    assert interval(total, [0] * 10_000, [1] * 10_000) == (1, 10_002)  # x0 counted apart from - x0


def _nested(x, y, levels: int):
    e = x
    for k in range(levels):
        e = (e * y, e // 1, e % 7, -e)[k % 4]
    return e


def test_deep_nesting_is_a_clear_error_and_the_deepest_allowed_solves_far_down_the_stack():
    m = Model()
    x, y = m.int_var(0, 2, "x"), m.int_var(1, 1, "y")
    with pytest.raises(ConstrintError, match=f"more than {MAX_DEPTH} levels deep.*name a part with a variable"):
        _nested(x, y, MAX_DEPTH + 1)
    with pytest.raises(ConstrintError, match="levels deep"):
        y - _nested(x, y, MAX_DEPTH)  # a term of a sum is one level further down

    def deep_call(frames: int) -> tuple:  # solving and printing need no more than the default recursion limit
        if frames:
            return deep_call(frames - 1)
        e = _nested(x, y, MAX_DEPTH)
        values = [evaluate(e, {"x": v, "y": 1}) for v in range(3)]
        m.add(m.any_of([e == values[2], e == 10**6]))
        return str(e), m.count(), values

    text, count, values = deep_call(300)
    assert text.count("//") == len(range(1, MAX_DEPTH, 4)) and count == values.count(values[2])
