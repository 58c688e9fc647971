"""Store: bounds snap to the congruence and value set, the trail undoes, emptied domains conflict."""
from __future__ import annotations

import pytest

from constrint.store import Conflict, Store


def test_bounds_follow_congruence_and_values():
    s = Store()
    x = s.new_var(0, 100)
    s.watch[x].append(0)
    s.queued.append(False)
    s.congruence(x, 3, 8)
    assert (s.lo[x], s.hi[x], s.size(x)) == (3, 99, 13)
    s.set_lo(x, 4)
    assert s.lo[x] == 11
    s.restrict(x, [19, 27, 40, 200])
    assert s.values(x) == [19, 27] and (s.lo[x], s.hi[x]) == (19, 27)
    assert s.queue == [0]


def test_undo_restores_every_change():
    s = Store()
    x = s.new_var(1, 1000)
    y = s.new_var(values=(2, 4, 8), lo=2, hi=8)
    before = [list(a) for a in (s.lo, s.hi, s.md, s.rs, s.vs)]
    mark = s.mark()
    s.set_lo(x, 10)
    s.congruence(x, 0, 7)
    s.remove(x, 14)
    s.remove(y, 4)
    s.fix(y, 8)
    assert s.lo[x] == 21 and s.values(y) == [8] and s.size(y) == 1
    s.undo(mark)
    assert [list(a) for a in (s.lo, s.hi, s.md, s.rs, s.vs)] == before


def test_hole_in_small_interval_becomes_value_set():
    s = Store()
    x = s.new_var(1, 10)
    s.remove(x, 5)
    assert s.size(x) == 9 and 5 not in s.values(x)
    big = s.new_var(1, 10**12)
    s.remove(big, 5)  # not representable: kept, never wrong
    assert s.size(big) == 10**12


@pytest.mark.parametrize("change", [
    lambda s, x: s.set_lo(x, 11),
    lambda s, x: s.set_hi(x, 0),
    lambda s, x: s.fix(x, 12),
    lambda s, x: s.restrict(x, [20, 30]),
    lambda s, x: (s.congruence(x, 0, 4), s.congruence(x, 1, 2)),
    lambda s, x: (s.set_lo(x, 10), s.remove(x, 10)),
])
def test_emptied_domain_conflicts(change):
    s = Store()
    x = s.new_var(1, 10)
    with pytest.raises(Conflict):
        change(s, x)


def test_copy_is_independent():
    s = Store()
    x = s.new_var(1, 10)
    t = s.copy()
    t.set_lo(x, 5)
    assert s.lo[x] == 1 and t.lo[x] == 5


def test_bounds_of_a_value_set_move_without_copying_it():
    s = Store()
    evens = tuple(range(0, 60_000, 2))
    x = s.new_var(0, 59_998, evens)
    s.set_lo(x, 101)
    s.set_hi(x, 59_001)
    assert (s.lo[x], s.hi[x], s.size(x)) == (102, 59_000, 29_450) and s.vs[x] is evens
    with pytest.raises(Conflict):
        s.fix(x, 103)  # inside the bounds, not a value
    s.remove(x, 200)
    assert s.size(x) == 29_449 and 200 not in s.values(x) and s.values(x)[:2] == [102, 104]
