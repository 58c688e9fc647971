"""Hypothesis strategies for random small models, and a brute-force oracle."""
from __future__ import annotations

import itertools
import random
from typing import Iterator

import numpy as np
from hypothesis import strategies as st

from constrint import Model
from constrint.expr import Undefined, evaluate
from constrint.store import Store

OPS = ["+", "-", "*", "//", "%", "**"]
CMPS = ["==", "!=", "<=", "<", ">=", ">"]


def store_of(boxes: list[tuple[int, int]]) -> Store:
    """A store of one variable per box (lo, hi), nothing queued (as a propagator finds it)."""
    s = Store()
    for lo, hi in boxes:
        s.new_var(lo, hi)
    s.queued[:] = []
    return s


GRID = np.stack(np.meshgrid(*[np.arange(-8, 9)] * 4, indexing="ij"), -1).reshape(-1, 4)  # [-8, 8]^4, 83,521 points


def relaxed_models(rng: random.Random, count: int, ops: tuple[str, ...] = ("<=",),
                   products: bool = False) -> Iterator[tuple[Model, list, list[int], object, np.ndarray]]:
    """`count` models over x0..x3 in [-8, 8] (a box large enough for the linear relaxation, MIN_LP_POINTS) of two to
    four random rows (each of an op from `ops`), half of them with x0 * x1 >= k too where `products`: each as (model,
    its rows, objective weights, objective = weights . x - 3, the objective's values at the box's points that meet
    every constraint, by brute force over GRID)."""
    for _ in range(count):
        m = Model()
        xs = [m.int_var(-8, 8, f"x{i}") for i in range(4)]
        rows = [([rng.randint(-4, 4) for _ in xs], rng.randint(-12, 12), rng.choice(ops))
                for _ in range(rng.randint(2, 4))]
        keep = np.ones(len(GRID), dtype=bool)
        for coef, rhs, op in rows:
            total = sum(k * x for k, x in zip(coef, xs))
            m.add(total <= rhs if op == "<=" else total == rhs)
            lhs = GRID @ np.array(coef)
            keep &= (lhs <= rhs) if op == "<=" else (lhs == rhs)
        if products and rng.random() < 0.5:  # a constraint outside the relaxation
            k = rng.randint(-20, 20)
            m.add(xs[0] * xs[1] >= k)
            keep &= GRID[:, 0] * GRID[:, 1] >= k
        weights = [rng.randint(-5, 5) or 1 for _ in xs]
        objective = sum(w * x for w, x in zip(weights, xs)) - 3
        yield m, rows, weights, objective, GRID[keep] @ np.array(weights) - 3


@st.composite
def boxes(draw, least: int) -> list[tuple[int, int]]:
    """One to four integer boxes (lo, hi), lo in [least, 2], each 1 to 5 values wide."""
    return [(lo, lo + w) for lo, w in draw(st.lists(st.tuples(st.integers(least, 2), st.integers(0, 4)),
                                                       min_size=1, max_size=4))]


@st.composite
def expressions(draw, variables, depth=2):
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(variables)) if draw(st.booleans()) else draw(st.integers(-3, 5))
    op = draw(st.sampled_from(OPS + ["neg"]))
    a = draw(expressions(variables, depth - 1))
    if op == "neg":
        return -a if not isinstance(a, int) else -a
    if op == "**":
        return a ** draw(st.integers(0, 3))
    b = draw(expressions(variables, depth - 1))
    if isinstance(a, int) and isinstance(b, int):  # plain ints: keep one side symbolic
        a = variables[0]
    return {"+": a + b, "-": a - b, "*": a * b}.get(op) if op in "+-*" else (a // b if op == "//" else a % b)


def _as_expr(e, variables):
    return e if not isinstance(e, int) else variables[0] + e


@st.composite
def constraints(draw, m, variables, depth=1):
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "divides", "alldiff", "anyof"] if depth else ["cmp"]))
    if kind == "cmp":
        lhs = _as_expr(draw(expressions(variables)), variables)
        rhs = draw(expressions(variables))
        op = draw(st.sampled_from(CMPS))
        return {"==": lhs == rhs, "!=": lhs != rhs, "<=": lhs <= rhs, "<": lhs < rhs, ">=": lhs >= rhs,
                ">": lhs > rhs}[op]
    if kind == "divides":
        return m.divides(draw(expressions(variables, 1)), draw(expressions(variables, 1)))
    if kind == "alldiff":
        return m.all_different(draw(st.lists(expressions(variables, 1), min_size=2, max_size=3)))
    return m.any_of(draw(st.lists(constraints(m, variables, depth - 1), min_size=1, max_size=3)))


@st.composite
def models(draw, max_vars=3, max_constraints=3):
    m = Model()
    n = draw(st.integers(1, max_vars))
    variables = []
    for i in range(n):
        if draw(st.booleans()):
            lo = draw(st.integers(-5, 5))
            variables.append(m.int_var(lo, lo + draw(st.integers(0, 7)), f"v{i}"))
        else:
            variables.append(m.int_var(values=draw(st.sets(st.integers(-6, 12), min_size=1, max_size=6)),
                                       name=f"v{i}"))
    for _ in range(draw(st.integers(0, max_constraints))):
        m.add(draw(constraints(m, variables)))
    return m


def brute_force(m: Model) -> list[dict[str, int]]:
    """Every solution, by trying every combination of the declared domains."""
    names = list(m.variables)
    domains = [v.domain.values or range(v.domain.lo, v.domain.hi + 1) for v in m.variables.values()]
    out = []
    for combo in itertools.product(*domains):
        a = dict(zip(names, combo))
        if all(c.holds(a) for c in m.constraints):
            out.append(a)
    return out


def value_or_none(expr, assignment):
    try:
        return evaluate(expr, assignment)
    except Undefined:
        return None
