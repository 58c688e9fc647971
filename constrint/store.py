"""Domain store with a trail: every change records the old domain so search can undo to a mark.

Variable i has bounds lo[i]..hi[i], a congruence i = rs[i] (mod md[i]) and optionally vs[i], a sorted tuple of
values that all meet the congruence (None when only the interval and congruence are known): the values left are
those of vs[i] within the bounds, so tightening a bound moves it to the next value of vs[i] (a bisection) and copies
nothing. Bounds always lie on values of the domain.
A change wakes the propagators watching the variable; an emptied domain raises Conflict, and the fixpoint loop
records in `culprit` the propagator whose run raised it.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

from .domain import SMALL_SET, crt


class Conflict(Exception):
    """A domain became empty (internal to propagation and search)."""


class Store:
    __slots__ = ("lo", "hi", "md", "rs", "vs", "trail", "watch", "queue", "queued", "culprit")

    def __init__(self) -> None:
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.md: list[int] = []
        self.rs: list[int] = []
        self.vs: list[tuple[int, ...] | None] = []
        self.trail: list[tuple] = []
        self.watch: list[list[int]] = []
        self.queue: list[int] = []
        self.queued: list[bool] = []
        self.culprit = -1  # the propagator of the last conflict in a fixpoint (-1: none yet)

    def new_var(self, lo: int, hi: int, values: tuple[int, ...] | None = None) -> int:
        """A variable over lo..hi, or over `values` (sorted, from lo to hi)."""
        self.lo.append(lo)
        self.hi.append(hi)
        self.md.append(1)
        self.rs.append(0)
        self.vs.append(values)
        self.watch.append([])
        return len(self.lo) - 1

    def copy(self) -> "Store":
        """An independent store with the same domains, an empty trail and the same watch lists."""
        other = Store()
        other.lo, other.hi, other.md, other.rs, other.vs = self.lo[:], self.hi[:], self.md[:], self.rs[:], self.vs[:]
        other.watch = self.watch
        other.queued = [False] * len(self.queued)
        return other

    def size(self, i: int) -> int:
        vs = self.vs[i]
        if vs is None:
            return (self.hi[i] - self.lo[i]) // self.md[i] + 1
        return bisect_right(vs, self.hi[i]) - bisect_left(vs, self.lo[i])

    def values(self, i: int):
        """The values left, ascending (a range or a list)."""
        vs = self.vs[i]
        if vs is None:
            return range(self.lo[i], self.hi[i] + 1, self.md[i])
        return list(vs[bisect_left(vs, self.lo[i]): bisect_right(vs, self.hi[i])])

    def _save(self, i: int) -> None:
        self.trail.append((i, self.lo[i], self.hi[i], self.md[i], self.rs[i], self.vs[i]))

    def _wake(self, i: int) -> None:
        queued = self.queued
        for p in self.watch[i]:
            if not queued[p]:
                queued[p] = True
                self.queue.append(p)

    def mark(self) -> int:
        return len(self.trail)

    def undo(self, mark: int) -> None:
        trail = self.trail
        lo, hi, md, rs, vs = self.lo, self.hi, self.md, self.rs, self.vs
        while len(trail) > mark:
            i, lo[i], hi[i], md[i], rs[i], vs[i] = trail.pop()

    def set_lo(self, i: int, v: int) -> None:
        if v <= self.lo[i]:
            return
        hi = self.hi[i]
        if v > hi:
            raise Conflict
        m = self.md[i]
        if m != 1:
            v += (self.rs[i] - v) % m
            if v > hi:
                raise Conflict
        vs = self.vs[i]
        if vs is not None:  # the next value left (all of vs meets the congruence)
            k = bisect_left(vs, v)
            if k == len(vs) or vs[k] > hi:
                raise Conflict
            v = vs[k]
        self.trail.append((i, self.lo[i], hi, m, self.rs[i], vs))
        self.lo[i] = v
        queued = self.queued
        for p in self.watch[i]:
            if not queued[p]:
                queued[p] = True
                self.queue.append(p)

    def set_hi(self, i: int, v: int) -> None:
        if v >= self.hi[i]:
            return
        lo = self.lo[i]
        if v < lo:
            raise Conflict
        m = self.md[i]
        if m != 1:
            v -= (v - self.rs[i]) % m
            if v < lo:
                raise Conflict
        vs = self.vs[i]
        if vs is not None:  # the previous value left
            k = bisect_right(vs, v) - 1
            if k < 0 or vs[k] < lo:
                raise Conflict
            v = vs[k]
        self.trail.append((i, lo, self.hi[i], m, self.rs[i], vs))
        self.hi[i] = v
        queued = self.queued
        for p in self.watch[i]:
            if not queued[p]:
                queued[p] = True
                self.queue.append(p)

    def fix(self, i: int, v: int) -> None:
        lo, hi = self.lo[i], self.hi[i]
        if lo == hi:
            if v != lo:
                raise Conflict
            return
        if v < lo or v > hi or (v - self.rs[i]) % self.md[i]:
            raise Conflict
        vs = self.vs[i]
        if vs is not None:
            k = bisect_left(vs, v)
            if k == len(vs) or vs[k] != v:
                raise Conflict
        self._save(i)
        self.lo[i] = self.hi[i] = v
        self._wake(i)

    def remove(self, i: int, v: int) -> None:
        """Remove value v; a hole inside a large interval without a value set is not represented."""
        lo, hi = self.lo[i], self.hi[i]
        if v == lo:
            self.set_lo(i, v + 1)
        elif v == hi:
            self.set_hi(i, v - 1)
        elif lo < v < hi:
            vs = self.vs[i]
            if vs is not None:
                k = bisect_left(vs, v)
                if vs[k] == v:  # lo < v < hi, both in vs: k is in range
                    self._save(i)
                    self.vs[i] = vs[bisect_left(vs, lo): k] + vs[k + 1: bisect_right(vs, hi)]
                    self._wake(i)
            elif (v - self.rs[i]) % self.md[i] == 0 and (hi - lo) // self.md[i] < SMALL_SET:
                self._save(i)
                self.vs[i] = tuple(x for x in range(lo, hi + 1, self.md[i]) if x != v)
                self._wake(i)

    def restrict(self, i: int, allowed) -> None:
        """Keep only values in the iterable `allowed`."""
        lo, hi, m, r, vs = self.lo[i], self.hi[i], self.md[i], self.rs[i], self.vs[i]
        if vs is None:
            keep = sorted({x for x in allowed if lo <= x <= hi and (x - r) % m == 0})
        else:
            keep = sorted(set(self.values(i)).intersection(allowed))
        if len(keep) == self.size(i):
            return
        if not keep:
            raise Conflict
        self._save(i)
        self.vs[i] = tuple(keep)
        self.lo[i] = keep[0]
        self.hi[i] = keep[-1]
        self._wake(i)

    def congruence(self, i: int, r: int, m: int) -> None:
        """Impose i = r (mod m), m >= 1."""
        old_m, old_r = self.md[i], self.rs[i]
        if old_m % m == 0 and (old_r - r) % m == 0:
            return
        both = crt(old_r, old_m, r % m, m)
        if both is None:
            raise Conflict
        r, m = both
        lo, hi = self.lo[i], self.hi[i]
        lo += (r - lo) % m
        hi -= (hi - r) % m
        if lo > hi:
            raise Conflict
        self._save(i)
        vs = self.vs[i]
        if vs is not None:
            vs = tuple([x for x in vs[bisect_left(vs, lo): bisect_right(vs, hi)] if (x - r) % m == 0])
            if not vs:
                raise Conflict
            self.vs[i] = vs
            lo, hi = vs[0], vs[-1]
        self.md[i], self.rs[i], self.lo[i], self.hi[i] = m, r, lo, hi
        self._wake(i)
