"""Integer domains and the number theory behind them.

A declared `Domain` is an interval `[lo, hi]` or an explicit value set. During search the store keeps each
variable as (lo, hi, modulus, residue, values-or-None): the interval, a congruence `x = residue (mod modulus)`,
and, where known and small, the explicit set of values left.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

SMALL_SET = 4096  # an interval this small may become an explicit value set when a hole is punched in it


def check_int(value: object, what: str) -> int:
    """`value` as an int; bools, floats and other types raise ConstrintError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int):
        from .errors import ConstrintError

        raise ConstrintError(f"{what} must be an integer, got {value!r} ({type(value).__name__})")
    return value


@dataclass(frozen=True)
class Domain:
    """Declared domain of a variable: inclusive `[lo, hi]`, restricted to `values` when given."""

    lo: int
    hi: int
    values: tuple[int, ...] | None = None

    @staticmethod
    def interval(lo: int, hi: int, name: str) -> "Domain":
        from .errors import ConstrintError

        lo = check_int(lo, f"lower bound of {name!r}")
        hi = check_int(hi, f"upper bound of {name!r}")
        if lo > hi:
            raise ConstrintError(f"empty domain for {name!r}: lo={lo} > hi={hi}; use lo <= hi")
        return Domain(lo, hi)

    @staticmethod
    def of_values(values: object, name: str) -> "Domain":
        from .errors import ConstrintError

        try:
            items = list(values)  # type: ignore[call-overload]
        except TypeError:
            raise ConstrintError(f"values of {name!r} must be an iterable of integers, got {values!r}") from None
        vals = tuple(sorted({check_int(v, f"domain value of {name!r}") for v in items}))
        if not vals:
            raise ConstrintError(f"empty domain for {name!r}: give at least one value")
        return Domain(vals[0], vals[-1], vals)

    def __str__(self) -> str:
        if self.values is not None:
            return "[" + ", ".join(map(str, self.values)) + "]"
        return f"[{self.lo}..{self.hi}]"


def crt(r1: int, m1: int, r2: int, m2: int) -> tuple[int, int] | None:
    """(r, m) with x = r (mod m) iff x = r1 (mod m1) and x = r2 (mod m2); None when incompatible."""
    g = math.gcd(m1, m2)
    if (r2 - r1) % g:
        return None
    lcm = m1 // g * m2
    if g == m2:
        return r1 % lcm, lcm
    if g == m1:
        return r2 % lcm, lcm
    k = (r2 - r1) // g * pow(m1 // g, -1, m2 // g) % (m2 // g)
    return (r1 + m1 * k) % lcm, lcm


def solve_congruence(a: int, b: int, m: int) -> tuple[int, int] | None:
    """(r, n) with a*x = b (mod m) iff x = r (mod n); None when there is no x (m >= 1, a != 0 mod m or b = 0)."""
    g = math.gcd(a, m)
    if b % g:
        return None
    n = m // g
    if n == 1:
        return 0, 1
    return (b // g) * pow(a // g, -1, n) % n, n


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _rho(n: int, steps: float = math.inf) -> int | None:
    """A non-trivial factor of the odd composite n (Pollard's rho, Brent's cycle finding); None when `steps`
    iterations find none."""
    c = 1
    while True:
        x = y = 2
        d = 1
        while d == 1:
            if steps <= 0:
                return None
            steps -= 1
            x = (x * x + c) % n
            y = (y * y + c) % n
            y = (y * y + c) % n
            d = math.gcd(abs(x - y), n)
        if d != n:
            return d
        c += 1


@lru_cache(maxsize=4096)
def factorize(n: int, steps: float = math.inf) -> tuple[tuple[int, int], ...] | None:
    """Prime factorisation of n >= 1 as ((prime, exponent), ...); None when some factor takes Pollard's rho over
    `steps` iterations to split off (a 2**32 prime factor takes about 2**16)."""
    counts: dict[int, int] = {}
    for p in (2, 3, 5, 7, 11, 13):
        while n % p == 0:
            counts[p] = counts.get(p, 0) + 1
            n //= p
    stack = [n] if n > 1 else []
    while stack:
        k = stack.pop()
        if _is_prime(k):
            counts[k] = counts.get(k, 0) + 1
            continue
        d = _rho(k, steps)
        if d is None:
            return None
        stack += [d, k // d]
    return tuple(sorted(counts.items()))


@lru_cache(maxsize=4096)
def divisors(n: int, steps: float = math.inf) -> tuple[int, ...] | None:
    """Positive divisors of |n| (n != 0), ascending; None when factorising n takes too long (see `factorize`)."""
    factors = factorize(abs(n), steps)
    if factors is None:
        return None
    divs = [1]
    for p, e in factors:
        divs = [d * p**k for d in divs for k in range(e + 1)]
    return tuple(sorted(divs))
