"""Primitive propagators and the fixpoint loop.

Each propagator narrows domains in a `Store` and raises `Conflict` when it proves its relation impossible.
All are exact once their inputs are fixed: a functional output (z of z = x * y, x // y, x % y, x ** k) is then
fixed, and a check-only relation (!=, divides, any_of) is decided, so a leaf of the search is a solution.
"""
from __future__ import annotations

import time
from fractions import Fraction
from math import gcd

from .disjunction import AnyOf
from .domain import divisors, solve_congruence
from .errors import TimeLimit
from .expr import iroot
from .store import Conflict, Store

LE, EQ, NE = "<=", "==", "!="
CLOCK_EVERY = 1024  # propagator runs between looks at the clock (bounds may shrink one unit per run)
KEEP_SUMS_FROM = 16  # terms of a sum whose bounds Linear keeps between runs
RHO_STEPS = 1 << 16  # factoring effort per factor: a fixed product or multiple too hard to factor restricts nothing
PIGEONHOLE_VALUES = 4096  # domain values all_different collects to count the values its unfixed variables have left


def deadline_after(time_limit: float | None) -> float | None:
    """The time.perf_counter() reading at which `time_limit` seconds from now run out (None: no limit)."""
    return None if time_limit is None else time.perf_counter() + time_limit


def seconds_left(deadline: float | None) -> float | None:
    """Seconds left until `deadline`, at least 0 (None: no limit)."""
    return None if deadline is None else max(deadline - time.perf_counter(), 0.0)


def fixpoint(s: Store, props: list, deadline: float | None = None) -> bool:
    """Run queued propagators, first in first out, until nothing changes; False on a conflict, whose propagator
    is then `s.culprit`.

    Raises TimeLimit once time.perf_counter() passes `deadline` (when given).
    """
    queue, queued = s.queue, s.queued
    k = 0
    try:
        while k < len(queue):
            p = queue[k]
            k += 1
            queued[p] = False
            props[p].propagate(s)
            if deadline is not None and not k % CLOCK_EVERY and time.perf_counter() > deadline:
                raise TimeLimit(f"propagation stopped at its time limit after {k} steps")
    except Conflict:
        s.culprit = queue[k - 1]
        return False
    finally:
        for p in queue[k:]:
            queued[p] = False
        queue.clear()
    return True


DIFFERENCE_WORK = 1 << 22
"""Edge relaxations the root's look for contradictory difference constraints may take (Bellman-Ford, nodes times
edges per search)."""


def _difference_edges(props: list, s: Store) -> tuple[list[tuple[int, int, int, int]],
                                                      list[tuple[int, int, int, int]],
                                                      list[tuple[int, int, int, int, int]]]:
    """The two-variable Linear propagators a (x - y) + c (<= | == | !=) 0 as difference constraints: edges (y, x, w,
    k) for x - y <= w (an equality gives one each way), and (x, y, d, k) for x - y != d; k: the propagator. A
    remainder z = x % y whose divisor has one sign in `s` adds the bound it implies: z <= y - 1 (y > 0) or z >= y + 1
    (y < 0); and two quotients z1 = x1 // b, z2 = x2 // b by the same fixed b > 0 carry each edge between them over to
    their dividends: z1 - z2 <= w gives x1 - x2 <= b w + b - 1 (x1 // 7 == x2 // 7 bounds x1 - x2 by 6). Third,
    congruences (x, y, d, b, k) for x - y = d (mod b): two remainders z1 = x1 % b, z2 = x2 % b by the same fixed b > 0
    with z1 - z2 == d."""
    edges, unequal, congruent = [], [], []
    quotients, remainders = {}, {}  # z -> (x, b) for z = x // b, z = x % b with b fixed and positive
    for k, p in enumerate(props):
        if isinstance(p, FloorDiv) and s.lo[p.y] == s.hi[p.y] > 0:
            quotients[p.z] = (p.x, s.lo[p.y])
            continue
        if isinstance(p, Mod):
            if s.lo[p.y] == s.hi[p.y] > 0:
                remainders[p.z] = (p.x, s.lo[p.y])
            if s.lo[p.y] > 0:
                edges.append((p.y, p.z, -1, k))  # z - y <= -1
            elif s.hi[p.y] < 0:
                edges.append((p.z, p.y, -1, k))  # y - z <= -1
            continue
        if not isinstance(p, Linear) or len(p.terms) != 2 or p.terms[0][0] != -p.terms[1][0]:
            continue
        (a, x), (_, y) = p.terms
        if a < 0:  # a (x - y) = -a (y - x)
            a, x, y = -a, y, x
        c = p.const
        if p.kind == NE:
            if c % a == 0:
                unequal.append((x, y, -c // a, k))
            continue
        edges.append((y, x, -c // a, k))  # x - y <= floor(-c / a)
        if p.kind == EQ:
            edges.append((x, y, c // a, k))  # y - x <= floor(c / a)
            if c % a == 0 and x in remainders and y in remainders and remainders[x][1] == remainders[y][1]:
                b = remainders[x][1]
                congruent.append((remainders[x][0], remainders[y][0], -c // a % b, b, k))
    for u, v, w, k in list(edges):
        if u in quotients and v in quotients and quotients[u][1] == quotients[v][1]:
            b = quotients[u][1]
            edges.append((quotients[u][0], quotients[v][0], b * w + b - 1, k))
    return edges, unequal, congruent


def _on_cycles(edges: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """The edges left once every edge from a node that no edge enters, or to one that no edge leaves, is dropped
    (again and again): those that may lie on a cycle."""
    while True:
        heads, tails = {v for _, v, _, _ in edges}, {u for u, _, _, _ in edges}
        kept = [e for e in edges if e[0] in heads and e[1] in tails]
        if len(kept) == len(edges):
            return kept
        edges = kept


def _shortest(nodes: set[int], edges: list[tuple[int, int, int, int]], source: int | None = None
              ) -> dict[int, int] | None:
    """Bellman-Ford path lengths over `edges` from `source` (from every node at once where None); None where a
    cycle of negative length is reached."""
    dist = dict.fromkeys(nodes, 0) if source is None else {source: 0}
    for _ in range(len(nodes)):
        changed = False
        for u, v, w, _ in edges:
            if u in dist and (v not in dist or dist[u] + w < dist[v]):
                dist[v] = dist[u] + w
                changed = True
        if not changed:
            return dist
    return None


def contradictory_differences(props: list, s: Store) -> int | None:
    """A propagator of difference constraints (x - y <= w, ==, != from two-variable sums, and the bound a remainder
    puts below its divisor) that contradict each other: a cycle whose bounds sum below 0 (x < y, y < x; x % y == y),
    or an x - y != d where they force x - y = d, or an x - y = d (mod b) where they leave x - y no such value
    (x % 1000 == y % 1000 with 1 <= x - y <= 999); else a disjunction each of whose disjuncts, compiled to such sums,
    contradicts them (x == y with any_of(x < y, y < x)); None where there is none, or the system is too large to
    look. Bounds propagation finds such a contradiction only by moving the bounds one step per round (x < y, y < x
    over [1, 2^30]: half an hour)."""
    edges, unequal, congruent = _difference_edges(props, s)
    found = _contradiction(edges, unequal, congruent)
    if found is not None:
        return found
    for k, p in enumerate(props):
        if isinstance(p, AnyOf) and all(p.direct):
            alternatives = (_difference_edges(direct, s) for direct in p.direct)
            if all(_contradiction(edges + more, unequal + other, congruent + other_congruent) is not None
                   for more, other, other_congruent in alternatives):
                return k
    return None


def _contradiction(edges: list[tuple[int, int, int, int]], unequal: list[tuple[int, int, int, int]],
                   congruent: list[tuple[int, int, int, int, int]]) -> int | None:
    """The propagator of an edge on a cycle of negative length, of an x - y != d that the edges force to d, or of an
    x - y = d (mod b) whose range under the edges holds no such value (see `contradictory_differences`); None where
    there is none or the system is too large to look."""
    edges = _on_cycles(edges)  # a contradiction needs a cycle: x - y forced to d takes paths both ways too
    nodes = {u for u, _, _, _ in edges} | {v for _, v, _, _ in edges}
    if not edges or len(nodes) * len(edges) * (1 + 2 * len(unequal) + 2 * len(congruent)) > DIFFERENCE_WORK:
        return None
    if _shortest(nodes, edges) is None:
        return edges[0][3]
    for x, y, d, k in unequal:
        if _difference_range(nodes, edges, x, y) == (d, d):
            return k
    for x, y, d, b, k in congruent:
        low, high = _difference_range(nodes, edges, x, y)
        if low is not None and high is not None and low + (d - low) % b > high:  # none in [low, high] is d mod b
            return k
    return None


def _difference_range(nodes: set[int], edges: list[tuple[int, int, int, int]], x: int, y: int
                      ) -> tuple[int | None, int | None]:
    """The least and greatest x - y that the edges (no cycle of negative length) allow; None where unbounded."""
    if x not in nodes or y not in nodes:
        return None, None
    up, down = _shortest(nodes, edges, y).get(x), _shortest(nodes, edges, x).get(y)  # type: ignore[union-attr]
    return (None if down is None else -down), up


class Linear:
    """sum(coef * var) + const  (<= | == | !=)  0.

    The bound sums are kept between runs: while the store's trail still holds the entries it had at the last run,
    only the changes recorded since then are applied (a run costs the changes, not the terms, when a search fixes
    one variable of a long sum per node). The narrowing pass is skipped when no term's range can exceed the slack.
    """

    __slots__ = ("terms", "const", "kind", "vars", "coef", "kept")

    def __init__(self, terms: list[tuple[int, int]], const: int, kind: str) -> None:
        self.terms = tuple((a, x) for a, x in terms if a)
        self.const = const
        self.kind = kind
        self.vars = tuple(x for _, x in self.terms)
        long = len(self.terms) >= KEEP_SUMS_FROM and kind != NE  # flatten merges repeated variables:
        self.coef = {x: a for a, x in self.terms} if long else None
        self.kept: tuple | None = None  # (store, trail length, last trail entry, smin, smax, span, free)

    def _replay(self, s: Store) -> tuple[int, int, int, int] | None:
        """(smin, smax, span, free) now, from the values kept at the last run and the trail entries since: the
        first entry of a variable holds its bounds of then. None when the trail no longer leads from there."""
        c, trail = self.kept, s.trail
        if c is None or c[0] is not s:
            return None
        pos, n = c[1], len(trail)
        if pos > n or (pos and trail[pos - 1] is not c[2]) or n - pos > len(self.terms):
            return None
        smin, smax, span, free = c[3:]
        lo, hi, coef, seen = s.lo, s.hi, self.coef, set()
        for k in range(pos, n):
            x, old_lo, old_hi = trail[k][:3]
            if x in coef and x not in seen:  # type: ignore[operator]
                seen.add(x)
                a, new_lo, new_hi = coef[x], lo[x], hi[x]  # type: ignore[index]
                if a > 0:
                    smin += a * (new_lo - old_lo)
                    smax += a * (new_hi - old_hi)
                else:
                    smin += a * (new_hi - old_hi)
                    smax += a * (new_lo - old_lo)
                free -= old_lo != old_hi and new_lo == new_hi
        return smin, smax, span, free

    def propagate(self, s: Store) -> None:
        lo, hi = s.lo, s.hi
        if self.kind == NE:
            rest, free_term = self.const, None
            for a, x in self.terms:
                if lo[x] == hi[x]:
                    rest += a * lo[x]
                elif free_term is None:
                    free_term = (a, x)
                else:
                    return
            if free_term is None:
                if rest == 0:
                    raise Conflict
            elif rest % free_term[0] == 0:
                s.remove(free_term[1], -rest // free_term[0])
            return
        replayed = self._replay(s) if self.coef is not None else None  # long sums only
        smin, smax, span, free = replayed or self._sums(s)
        if smin > 0:
            raise Conflict
        slack = -smin
        eq = self.kind == EQ
        if eq and smax < 0:
            raise Conflict
        if span > slack or (eq and span > smax):  # a term may narrow: one pass over all of them
            free = self._narrow(s, slack, smax if eq else None)
            if self.coef is not None:
                smin, smax, span, free = self._sums(s)
        if self.coef is not None:
            trail = s.trail
            self.kept = (s, len(trail), trail[-1] if trail else None, smin, smax, span, free)
        if eq and free == 2:
            self._congruences(s)

    def _sums(self, s: Store) -> tuple[int, int, int, int]:
        """(smin, smax, span, free): the sum's bounds, the largest |a| * (hi - lo) of a term, the unfixed terms."""
        lo, hi = s.lo, s.hi
        smin = smax = self.const
        span = free = 0
        for a, x in self.terms:
            l, h = lo[x], hi[x]
            if a > 0:
                smin += a * l
                smax += a * h
                r = a * (h - l)
            else:
                smin += a * h
                smax += a * l
                r = -a * (h - l)
            if r:
                free += 1
                if r > span:
                    span = r
        return smin, smax, span, free

    def _narrow(self, s: Store, slack: int, excess: int | None) -> int:
        """Bound each term by the slack (and, for ==, by the excess of the largest sum over 0); returns the number
        of terms that were unfixed."""
        lo, hi = s.lo, s.hi
        free = 0
        for a, x in self.terms:
            l, h = lo[x], hi[x]
            if l == h:
                continue
            free += 1
            if a > 0:
                if l + slack // a < h:
                    s.set_hi(x, l + slack // a)
                if excess is not None and h - excess // a > l:
                    s.set_lo(x, h - excess // a)
            else:
                if h - slack // -a > l:
                    s.set_lo(x, h - slack // -a)
                if excess is not None and l + excess // -a < h:
                    s.set_hi(x, l + excess // -a)
        return free

    def _congruences(self, s: Store) -> None:
        """For a*x + (others) + c == 0: a*x = -(c + others) modulo the gcd of the others' steps."""
        lo, hi, md, rs = s.lo, s.hi, s.md, s.rs
        for a, x in self.terms:
            if lo[x] == hi[x]:
                continue
            g, rest = 0, self.const
            for b, y in self.terms:
                if y == x:
                    continue
                if lo[y] == hi[y]:
                    rest += b * lo[y]
                else:
                    g = gcd(g, b * md[y])
                    rest += b * rs[y]
            if g > 1:
                sol = solve_congruence(a, -rest, g)
                if sol is None:
                    raise Conflict
                if sol[1] > 1:
                    s.congruence(x, sol[0], sol[1])


def _quotient_bounds(zlo: int, zhi: int, ylo: int, yhi: int) -> tuple[int, int]:
    """Bounds of z / y (rational) for y of one sign: (ceil of min, floor of max)."""
    c = [(zlo, ylo), (zlo, yhi), (zhi, ylo), (zhi, yhi)]
    return min(-((-p) // q) for p, q in c), max(p // q for p, q in c)


class _Binary:
    """Shared state of the propagators of z = x (op) y over store indices x, y, z."""

    __slots__ = ("x", "y", "z", "vars")

    def __init__(self, x: int, y: int, z: int) -> None:
        self.x, self.y, self.z = x, y, z
        self.vars = (x, y, z)


class Times(_Binary):
    """z = x * y."""

    __slots__ = ("done",)

    def __init__(self, x: int, y: int, z: int) -> None:
        super().__init__(x, y, z)
        self.done: tuple | None = None  # (v, m_u, r_u, m_z, r_z) after the last congruence step

    def propagate(self, s: Store) -> None:
        lo, hi = s.lo, s.hi
        x, y, z = self.x, self.y, self.z
        xl, xh, yl, yh = lo[x], hi[x], lo[y], hi[y]
        if xl > 0 and yl > 0:  # the common case of positive sizes
            if xl * yl > lo[z]:
                s.set_lo(z, xl * yl)
            if xh * yh < hi[z]:
                s.set_hi(z, xh * yh)
            zl, zh = lo[z], hi[z]
            if -(-zl // yh) > xl:
                s.set_lo(x, -(-zl // yh))
            if zh // yl < xh:
                s.set_hi(x, zh // yl)
            xl, xh = lo[x], hi[x]
            if -(-zl // xh) > yl:
                s.set_lo(y, -(-zl // xh))
            if zh // xl < yh:
                s.set_hi(y, zh // xl)
            if xl != xh and yl != hi[y] and zl != zh:
                return
        else:
            c = (xl * yl, xl * yh, xh * yl, xh * yh)
            s.set_lo(z, min(c))
            s.set_hi(z, max(c))
            for u, v in ((x, y), (y, x)):
                vl, vh = lo[v], hi[v]
                if vl > 0 or vh < 0:
                    ql, qh = _quotient_bounds(lo[z], hi[z], vl, vh)
                    s.set_lo(u, ql)
                    s.set_hi(u, qh)
        md, rs = s.md, s.rs
        for u, v in ((x, y), (y, x)):
            vl = lo[v]
            if vl == hi[v]:
                if vl == 0:
                    s.fix(z, 0)
                    continue
                state = (vl, md[u], rs[u], md[z], rs[z])
                if state == self.done:  # the congruences below changed nothing in this very state
                    continue
                # z = v * u: z = v * r_u (mod |v| * m_u); v * u = r_z (mod m_z)
                s.congruence(z, vl * rs[u], abs(vl) * md[u])
                if md[z] > 1 and lo[u] != hi[u]:
                    sol = solve_congruence(vl, rs[z], md[z])
                    if sol is None:
                        raise Conflict
                    if sol[1] > 1:
                        s.congruence(u, sol[0], sol[1])
                self.done = (vl, md[u], rs[u], md[z], rs[z])
        zl, zh = lo[z], hi[z]
        if zl == zh:
            if zl != 0:
                for u in (x, y):
                    if lo[u] != hi[u]:
                        _restrict_to_divisors(s, u, zl)
            elif lo[x] > 0 or hi[x] < 0:
                s.fix(y, 0)
            elif lo[y] > 0 or hi[y] < 0:
                s.fix(x, 0)
        if lo[x] == hi[x] and lo[y] == hi[y]:
            s.fix(z, lo[x] * lo[y])


def _restrict_to_divisors(s: Store, u: int, n: int) -> None:
    """Keep the values of u that divide n != 0; skipped when n is too hard to factor quickly."""
    ds = divisors(n, RHO_STEPS)
    if ds is None:
        return
    lo, hi = s.lo[u], s.hi[u]
    out = [d for d in ds if lo <= d <= hi] if hi > 0 else []
    if lo < 0:
        out += [-d for d in ds if lo <= -d <= hi]
    s.restrict(u, out)


class FloorDiv(_Binary):
    """z = x // y (y != 0)."""

    __slots__ = ()

    def propagate(self, s: Store) -> None:
        lo, hi = s.lo, s.hi
        x, y, z = self.x, self.y, self.z
        s.remove(y, 0)
        xl, xh, yl, yh = lo[x], hi[x], lo[y], hi[y]
        parts = [(p, q) for p, q in ((yl, min(yh, -1)), (max(yl, 1), yh)) if p <= q]
        los, his = [], []
        for p, q in parts:
            c = (xl // p, xl // q, xh // p, xh // q)
            los.append(min(c))
            his.append(max(c))
        s.set_lo(z, min(los))
        s.set_hi(z, max(his))
        if yl == yh:
            b, zl, zh = yl, lo[z], hi[z]
            if b > 0:
                s.set_lo(x, zl * b)
                s.set_hi(x, zh * b + b - 1)
            else:
                s.set_lo(x, (zh + 1) * b + 1)
                s.set_hi(x, zl * b)
            if lo[x] == hi[x]:
                s.fix(z, lo[x] // b)


class Mod(_Binary):
    """z = x % y (y != 0), Python's sign convention: z has the sign of y."""

    __slots__ = ()

    def propagate(self, s: Store) -> None:
        lo, hi = s.lo, s.hi
        x, y, z = self.x, self.y, self.z
        s.remove(y, 0)
        yl, yh = lo[y], hi[y]
        zl = yl + 1 if yl < 0 else 0
        zh = yh - 1 if yh > 0 else 0
        if lo[x] >= 0 and yl > 0:
            zh = min(zh, hi[x])
        if hi[x] <= 0 and yh < 0:
            zl = max(zl, lo[x])
        s.set_lo(z, zl)
        s.set_hi(z, zh)
        if yl != yh:
            return
        b = yl
        q = lo[x] // b
        if q == hi[x] // b:  # x = q * b + z on the whole domain of x
            s.set_lo(z, lo[x] - q * b)
            s.set_hi(z, hi[x] - q * b)
            s.set_lo(x, q * b + lo[z])
            s.set_hi(x, q * b + hi[z])
        if lo[z] == hi[z]:
            s.congruence(x, lo[z], abs(b))
        if lo[x] == hi[x]:
            s.fix(z, lo[x] % b)


class Power:
    """z = x ** k for a constant k >= 2."""

    __slots__ = ("x", "k", "z", "vars")

    def __init__(self, x: int, k: int, z: int) -> None:
        self.x, self.k, self.z = x, k, z
        self.vars = (x, z)

    def propagate(self, s: Store) -> None:
        lo, hi = s.lo, s.hi
        x, k, z = self.x, self.k, self.z
        xl, xh = lo[x], hi[x]
        if k % 2 or xl >= 0:
            zl, zh = xl**k, xh**k
        elif xh <= 0:
            zl, zh = xh**k, xl**k
        else:
            zl, zh = 0, max(xl**k, xh**k)
        s.set_lo(z, zl)
        s.set_hi(z, zh)
        zl, zh = lo[z], hi[z]
        if k % 2:
            r_hi = iroot(zh, k) if zh >= 0 else -_iroot_up(-zh, k)
            r_lo = _iroot_up(zl, k) if zl >= 0 else -iroot(-zl, k)
            s.set_lo(x, r_lo)
            s.set_hi(x, r_hi)
        else:
            r = iroot(zh, k)
            s.set_lo(x, -r)
            s.set_hi(x, r)
            inner = _iroot_up(max(zl, 0), k)
            if lo[x] > -inner:
                s.set_lo(x, inner)
            elif hi[x] < inner:
                s.set_hi(x, -inner)
        if lo[z] == hi[z]:
            r = iroot(abs(lo[z]), k)
            if r**k != abs(lo[z]) or (lo[z] < 0 and k % 2 == 0):
                raise Conflict
            s.restrict(x, [-r, r] if k % 2 == 0 else [r if lo[z] >= 0 else -r])
        if lo[x] == hi[x]:
            s.fix(z, lo[x] ** k)


def _iroot_up(n: int, k: int) -> int:
    r = iroot(n, k)
    return r if r**k == n else r + 1


class Divides:
    """d divides n: d != 0 and n % d == 0."""

    __slots__ = ("d", "n", "vars")

    def __init__(self, d: int, n: int) -> None:
        self.d, self.n = d, n
        self.vars = (d, n)

    def propagate(self, s: Store) -> None:
        lo, hi = s.lo, s.hi
        d, n = self.d, self.n
        s.remove(d, 0)
        nl, nh = lo[n], hi[n]
        if nl > 0 or nh < 0:  # n != 0, so |d| <= |n|
            big = max(-nl, nh)
            s.set_lo(d, -big)
            s.set_hi(d, big)
            if nl > 0 and lo[d] > 0:
                s.set_lo(n, lo[d])
        if lo[d] == hi[d]:
            s.congruence(n, 0, abs(lo[d]))
        elif lo[n] == hi[n] and lo[n] != 0:
            _restrict_to_divisors(s, d, lo[n])
        if lo[d] == hi[d] and lo[n] == hi[n] and lo[n] % lo[d]:
            raise Conflict


class AllDifferent:
    """Pairwise different values: fixed values leave the other domains, and the unfixed variables need as many
    values left as there are of them (pigeonhole: in the span of their bounds, and among their domains' values where
    those are few)."""

    __slots__ = ("vars",)

    def __init__(self, xs: list[int]) -> None:
        self.vars = tuple(xs)

    def propagate(self, s: Store) -> None:
        lo, hi = s.lo, s.hi
        seen: set[int] = set()
        free: list[int] = []
        for x in self.vars:
            if lo[x] == hi[x]:
                if lo[x] in seen:
                    raise Conflict
                seen.add(lo[x])
            else:
                free.append(x)
        if free:
            low, high = min(lo[x] for x in free), max(hi[x] for x in free)
            if high - low + 1 - sum(low <= v <= high for v in seen) < len(free):
                raise Conflict
            if sum(s.size(x) for x in free) <= PIGEONHOLE_VALUES:  # the values left, not their span
                if len(set().union(*(s.values(x) for x in free)) - seen) < len(free):
                    raise Conflict
        if seen:
            for x in self.vars:
                if lo[x] != hi[x]:
                    for v in seen:
                        if lo[x] <= v <= hi[x]:
                            s.remove(x, v)


MAX_RELAXATIONS = 16  # linear constraints (== counting twice) an optimisation pairs with its objective


class PairedRelaxation:
    """z = sum(c x) + c0 bounded through one linear constraint sum(a x) <= r on the current box: z's extremes over
    the linear relaxation of that constraint and the bounds (a greedy fill in order of |c| / |a|, the relaxation's own
    optimum). Bounds propagation judges the objective's sum and a constraint each alone; together they bound what the
    objective can reach (a knapsack's value under its capacity), which lets branch and bound cut."""

    __slots__ = ("z", "c0", "r", "upper", "lower", "vars", "split")

    def __init__(self, z: int, c: dict[int, int], c0: int, a: dict[int, int], r: int) -> None:
        self.z, self.c0, self.r = z, c0, r
        self.upper, self.lower = _fill_order(c, a), _fill_order({x: -k for x, k in c.items()}, a)
        self.vars = (z, *dict.fromkeys([*c, *a]))
        # the variables the last run's optima of z's upper and lower bound left between their bounds (_relaxed_max)
        self.split: tuple[tuple[int, bool] | None, tuple[int, bool] | None] = (None, None)

    def propagate(self, s: Store) -> None:
        (top, upper), (bottom, lower) = _relaxed_max(self.upper, self.r, s), _relaxed_max(self.lower, self.r, s)
        self.split = (upper, lower)
        if top is None or bottom is None:  # no point of the box meets the constraint
            raise Conflict
        s.set_hi(self.z, self.c0 + top)
        s.set_lo(self.z, self.c0 - bottom)


FillOrder = tuple[list[tuple[int, int, int, bool]], list[tuple[int, int, int, bool]]]


def _fill_order(c: dict[int, int], a: dict[int, int]) -> FillOrder:
    """For _relaxed_max of sum(c x) under sum(a x) <= r: every variable as (x, c, a, whether it starts at its upper
    bound: its best for the objective, or for c = 0 the one that uses least of the constraint), and those that free
    some of the constraint by moving toward their other bound, as (x, |c|, a freed per unit, the same flag), least
    |c| / freed first (the order depends on c and a alone)."""
    every, movers = [], []
    for x in dict.fromkeys([*c, *a]):
        cx, ax = c.get(x, 0), a.get(x, 0)
        top = cx > 0 or (cx == 0 and ax < 0)
        every.append((x, cx, ax, top))
        freed = ax if top else -ax
        if cx and freed > 0:
            movers.append((x, abs(cx), freed, top))
    movers.sort(key=lambda m: Fraction(m[1], m[2]))
    return every, movers


def _relaxed_max(order: FillOrder, r: int, s: Store) -> tuple[int | None, tuple[int, bool] | None]:
    """(floor of max sum(c x) subject to sum(a x) <= r and the bounds of x in `s`, x rational, or None where no x
    meets the constraint; the variable that the optimum leaves between its bounds, with whether its best bound is the
    upper, or None). `order`: _fill_order of c and a. Every x starts at its best bound; while the constraint is
    exceeded, the x that lose least objective per unit of the constraint freed move toward their other bound."""
    every, movers = order
    lo, hi = s.lo, s.hi
    value = usage = 0
    for x, cx, ax, top in every:
        at = hi[x] if top else lo[x]
        value += cx * at
        usage += ax * at
    excess = usage - r
    if excess <= 0:
        return value, None
    for x, cost, freed, top in movers:
        units = hi[x] - lo[x]
        if freed * units < excess:
            excess -= freed * units
            value -= cost * units
        else:  # the last one moves part of the way
            return value - -(-cost * excess // freed), (x, top)
    return None, None


def objective_sum(props: list, z: int, n_user: int) -> tuple[Linear, dict[int, int], int] | None:
    """(the == propagator, c, c0) where one defines objective variable z as sum(c x) + c0 over two or more of the
    model's own variables, else None."""
    definer = next((p for p in props if isinstance(p, Linear) and p.kind == EQ
                    and any(x == z and k in (1, -1) for k, x in p.terms)
                    and all(x < n_user for x in p.vars if x != z)), None)
    if definer is None or len(definer.terms) < 3:
        return None
    unit = dict((x, k) for k, x in definer.terms)[z]  # unit z + sum(k x) + const = 0: z = -unit (sum(k x) + const)
    return definer, {x: -unit * k for k, x in definer.terms if x != z}, -unit * definer.const


def objective_relaxations(props: list, z: int, n_user: int) -> list[PairedRelaxation]:
    """PairedRelaxation of objective variable z, where an == propagator defines it as a sum of two or more of the
    model's own variables (z = sum(c x) + c0), with each linear constraint (<=, and == as two) over all of them (a
    knapsack's capacity). A constraint over some of them bounds z little, at the cost of the whole sum per run (a
    10 x 10 assignment's rows and columns made its optimisation 0.35 -> 11 s), and a sum of products (as the kernel
    plans minimise) gains nothing (its planning took 1.3x as long)."""
    found = objective_sum(props, z, n_user)
    if found is None:
        return []
    definer, c, c0 = found
    pairs = []
    for p in props:
        if p is not definer and isinstance(p, Linear) and p.kind != NE and z not in p.vars and c.keys() <= set(p.vars):
            terms = {x: k for k, x in p.terms}
            pairs.append((terms, -p.const))
            if p.kind == EQ:
                pairs.append(({x: -k for x, k in terms.items()}, p.const))
    return [PairedRelaxation(z, c, c0, a, r) for a, r in pairs[:MAX_RELAXATIONS]]
