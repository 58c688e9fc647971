"""Components: splitting by shared unfixed variables, lazy products."""
from __future__ import annotations

from constrint import Model
from constrint.components import Replay, product, split


def test_split_groups_linked_variables():
    m = Model()
    a, b, c, d, e = (m.int_var(0, 5, n) for n in "abcde")
    cs = [a + b <= 3, m.all_different([b, c]), d >= 1]
    assert split(cs, [False] * 5) == [[0, 1, 2], [3], [4]]
    assert split(cs, [False, True, False, False, False]) == [[0], [2], [3], [4]]


def test_product_is_lazy_and_lexicographic():
    pulled = []

    def gen(tag, n):
        for i in range(n):
            pulled.append((tag, i))
            yield (tag, i)

    parts = [Replay(gen("x", 3)), Replay(gen("y", 2))]
    it = product(parts)
    assert next(it) == (("x", 0), ("y", 0))
    assert pulled == [("x", 0), ("y", 0)]
    assert list(it) == [(("x", 0), ("y", 1)), (("x", 1), ("y", 0)), (("x", 1), ("y", 1)),
                        (("x", 2), ("y", 0)), (("x", 2), ("y", 1))]


def test_count_multiplies_components_and_free_variables():
    m = Model()
    x, y = m.int_var(0, 9, "x"), m.int_var(0, 9, "y")
    m.int_var(1, 10**9, "free")
    z = m.int_var(0, 4, "z")
    m.add(x + y == 9)
    m.add(z != 2)
    assert m.count() == 10 * 10**9 * 4
    sols = list(Model.solutions(_small(), limit=None))
    assert len(sols) == len({tuple(s.values()) for s in sols}) == 10 * 3 * 4


def _small() -> Model:
    m = Model()
    x, y = m.int_var(0, 9, "x"), m.int_var(0, 9, "y")
    m.int_var(1, 3, "free")
    z = m.int_var(0, 4, "z")
    m.add(x + y == 9)
    m.add(z != 2)
    return m


def test_solutions_of_several_components_come_in_preference_order():
    import itertools
    import random

    rng = random.Random(7)
    for _ in range(60):
        m = Model()
        a, b, c, d = (m.int_var(0, 3, n) for n in "abcd")
        s, k = rng.randrange(1, 6), rng.randrange(4)
        linked = rng.random() < 0.5  # components {a, b} and {c, d}, or {a, b}, {c} and {d}
        m.add(a + b != s)
        m.add(c != d if linked else c != k)
        prefer = [(n, rng.choice(["min", "max"])) for n in rng.sample("abcd", rng.randrange(1, 5))]
        found = [tuple(sol[n] for n in "abcd") for sol in m.solutions(prefer=prefer)]
        every = [r for r in itertools.product(range(4), repeat=4)
                 if r[0] + r[1] != s and (r[2] != r[3] if linked else r[2] != k)]
        assert sorted(found) == every

        def key(row):
            return tuple(row["abcd".index(n)] * (1 if sense == "min" else -1) for n, sense in prefer)

        assert [key(r) for r in found] == sorted(key(r) for r in found), prefer  # lexicographic in the preferences


def test_objective_undefined_in_a_block_is_no_solution():
    m = Model()
    x = m.int_var(0, 3, "x")
    best = m.maximize(10 // (x - 1) - x)  # x = 1 divides by 0: not a candidate
    assert (best["x"], best.objective) == (2, 8)
    assert m.minimize(10 // (x - 1) - x).objective == -10
