"""Domains and number theory."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from constrint import ConstrintError
from constrint.domain import Domain, crt, divisors, factorize, solve_congruence


@given(st.integers(-50, 50), st.integers(1, 30), st.integers(-50, 50), st.integers(1, 30))
def test_crt_matches_search(r1, m1, r2, m2):
    lcm = m1 * m2 // math.gcd(m1, m2)
    common = [x for x in range(lcm) if x % m1 == r1 % m1 and x % m2 == r2 % m2]
    got = crt(r1, m1, r2, m2)
    if not common:
        assert got is None
    else:
        assert got == (common[0], lcm) and len(common) == 1


@given(st.integers(-40, 40), st.integers(-40, 40), st.integers(1, 40))
def test_solve_congruence_matches_search(a, b, m):
    xs = [x for x in range(m) if (a * x - b) % m == 0]
    got = solve_congruence(a, b, m)
    if not xs:
        assert got is None
    else:
        r, n = got
        assert xs == [x for x in range(m) if x % n == r]


@pytest.mark.parametrize("n", [1, 2, 360, 4096, 2976, 999_999_999_989, 2**40 * 3**5, 600_851_475_143,
                               (10**9 + 7) * (10**9 + 9)])
def test_factorize_and_divisors(n):
    f = factorize(n)
    assert math.prod(p**e for p, e in f) == n
    ds = divisors(n)
    assert ds == tuple(sorted(ds)) and all(n % d == 0 for d in ds)
    assert len(ds) == math.prod(e + 1 for _, e in f)
    if n < 10**5:
        assert ds == tuple(d for d in range(1, n + 1) if n % d == 0)


def test_domain_constructors():
    assert Domain.interval(1, 5, "x") == Domain(1, 5)
    assert Domain.of_values([3, 1, 3], "y") == Domain(1, 3, (1, 3))
    assert str(Domain.of_values([8, 16], "y")) == "[8, 16]"


@pytest.mark.parametrize("make, match", [
    (lambda: Domain.interval(5, 1, "x"), "lo=5 > hi=1"),
    (lambda: Domain.interval(1.5, 3, "x"), "lower bound of 'x' must be an integer, got 1.5"),
    (lambda: Domain.interval(1, True, "x"), "upper bound of 'x' must be an integer, got True"),
    (lambda: Domain.of_values([], "y"), "empty domain for 'y'"),
    (lambda: Domain.of_values([1, 2.0], "y"), "domain value of 'y' must be an integer, got 2.0"),
    (lambda: Domain.of_values(5, "y"), "iterable of integers"),
])
def test_domain_errors(make, match):
    with pytest.raises(ConstrintError, match=match):
        make()


def test_factoring_with_a_step_budget_gives_up_on_two_large_primes():
    p, q = 2**61 - 1, 2**89 - 1  # primes
    assert factorize(p * q, 1 << 16) is None and divisors(6 * p * q, 1 << 16) is None
    assert divisors(2**100 * 3, 1 << 16) == tuple(sorted(2**i * 3**j for i in range(101) for j in range(2)))
    assert factorize(6 * p, 1 << 16) == ((2, 1), (3, 1), (p, 1))
