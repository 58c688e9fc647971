"""constrint against python-constraint2 and OR-Tools CP-SAT, side by side in one process, on the same models.

Rows: (1) enumerate every tile configuration of a GEMM (8 variables); (2) count n-queens solutions; (3) a
70-variable fused-kernel tile model: the first solution under lexicographic preferences, and proofs of infeasibility
for two variants; (4) proven optima (python-constraint2 does not optimise): a 0/1 knapsack of 40 items, one of 60
items and three capacities, a 15 x 15 assignment, a max-min selection of 40 items, and a knapsack and a covering of
100 strongly correlated items (value or cost = weight + 100; three rows). Each model is one text in
constrint's python dialect (the files under benchmarks/models/, the other texts are generated): constrint parses it;
python-constraint2 gets its declared domains and its constraint texts, which are Python expressions it compiles
itself; CP-SAT gets a translation of the same texts (products, quotients and remainders through auxiliary
variables). constrint's times include parsing the text; the others' include building their model from the parsed
domains and texts. Each time is the median of several runs of time.perf_counter, the solvers of a row taking turns;
the answers of the three solvers are compared before timing.

Targets: the 70-variable model within 30 ms end to end; enumeration no slower than python-constraint2; no row
slower than 10x CP-SAT. A missed target is reported as missed.

Usage: python benchmarks/bench_solver.py [--repeat N] [--quick] [--profile]
Writes benchmarks/results/solver.csv and solver.md (or under $BENCH_RESULTS_DIR).
"""
from __future__ import annotations

import argparse
import ast
import cProfile
import io
import operator
import os
import platform
import pstats
import random
import statistics
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable

import constraint as pc2
from ortools.sat.python import cp_model

import common
from constrint import Infeasible, Model, TimeLimit, parse
from constrint.textformat import parse_expression

MODELS = Path(__file__).resolve().parent / "models"
KERNEL_PREFER = [
    ("FW_MMA_BATCH", "max"), ("BW_MMA_BATCH", "max"), ("FW_TILES_HEAD", "max"), ("BW_TILES_HEAD", "max"),
    ("FW_TILES_HIDDEN", "min"), ("BW_TILES_GATE", "min"), ("FW_TILES_GATE", "max"), ("BW_TILES_HIDDEN", "max"),
    ("FW_WARPS", "max"), ("BW_WARPS", "max"), ("FW_CACHED", "max"), ("BW_CACHED", "max"),
    ("FW_LOOP_BATCH", "max"), ("BW_LOOP_BATCH", "max"),
]
# infeasible variants of the kernel model: (label, line replaced, replacement)
KERNEL_VARIANTS = [
    ("head dim 2976, 54 gate tiles (54 does not divide 4 * 2976)", "HEAD_DIM == 768\n",
     "HEAD_DIM == 2976\nFW_TILES_GATE == 54\n"),
    ("head dim 2976 (R exceeds all registers + shared memory)", "HEAD_DIM == 768\n", "HEAD_DIM == 2976\n"),
]
KNAPSACK_ITEMS, KNAPSACK_CAPACITY, KNAPSACK_SEED = 40, 300, 1
QUEENS = (6, 7, 8, 9)
QUEENS_COUNTS = {6: 4, 7: 40, 8: 92, 9: 352}  # known counts, a check on all three solvers
CPSAT_LIMIT = 2**62
CORE_TIME_LIMIT = 30.0  # seconds for the one minimal-core run of each infeasible variant


@dataclass(frozen=True)
class Spec:
    """A model as the other solvers receive it: declared domains and constraint texts (Python expressions)."""

    domains: dict[str, tuple[int, int, tuple[int, ...] | None]]
    constraints: list[str]

    @staticmethod
    def of(model: Model) -> "Spec":
        domains = {n: (v.domain.lo, v.domain.hi, v.domain.values) for n, v in model.variables.items()}
        return Spec(domains, [str(c) for c in model.constraints])


def queens_text(n: int) -> str:
    """n-queens in the python dialect: one queen per column, row q<i>, pairwise constraints."""
    lines = [f"q{i} in [0..{n - 1}]" for i in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            lines += [f"q{i} != q{j}", f"q{i} - q{j} != {j - i}", f"q{j} - q{i} != {j - i}"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- python-constraint2


def pc2_problem(spec: Spec) -> pc2.Problem:
    problem = pc2.Problem()
    for name, (lo, hi, values) in spec.domains.items():
        problem.addVariable(name, list(values) if values is not None else list(range(lo, hi + 1)))
    for text in spec.constraints:
        problem.addConstraint(text)
    return problem


def pc2_domain_problem(spec: Spec, most: int = 100_000) -> str | None:
    """Why python-constraint2 cannot take `spec` (it lists every domain value: one is too large), or None."""
    size, name = max((hi - lo + 1 if values is None else len(values), name)
                     for name, (lo, hi, values) in spec.domains.items())
    return f"n/a: it lists every domain value ({name} has {size:,})" if size > most else None


# ---------------------------------------------------------------------------------------------- CP-SAT

_CP_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
               ast.Gt: operator.gt, ast.GtE: operator.ge}


class CpSat:
    """A CP-SAT model of `spec`: linear parts stay linear, * // % ** of variables get auxiliary variables."""

    def __init__(self, spec: Spec) -> None:
        self.model = cp_model.CpModel()
        self.vars: dict[str, cp_model.IntVar] = {}
        self.bounds: dict[str, tuple[int, int]] = {}
        for name, (lo, hi, values) in spec.domains.items():
            domain = cp_model.Domain.FromValues(list(values)) if values is not None else cp_model.Domain(lo, hi)
            self.vars[name] = self.model.NewIntVarFromDomain(domain, name)
            self.bounds[name] = (lo, hi)
        for text in spec.constraints:
            self._constraint(ast.parse(text, mode="eval").body, text)

    def _constraint(self, node: ast.AST, text: str) -> None:
        if not isinstance(node, ast.Compare):
            raise ValueError(f"no CP-SAT translation for the constraint {text!r}")
        left = self._expr(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            right = self._expr(right_node)
            self.model.Add(_CP_COMPARE[type(op)](left[0], right[0]))
            left = right

    def _aux(self, lo: int, hi: int) -> cp_model.IntVar:
        if lo < -CPSAT_LIMIT or hi > CPSAT_LIMIT:
            raise ValueError(f"an intermediate value in [{lo}, {hi}] exceeds CP-SAT's 64-bit range")
        return self.model.NewIntVar(lo, hi, "")

    def _expr(self, node: ast.AST) -> tuple[Any, int, int]:
        """(CP-SAT expression, lower bound, upper bound) of an integer expression."""
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value, node.value, node.value
        if isinstance(node, ast.Name):
            return (self.vars[node.id], *self.bounds[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            e, lo, hi = self._expr(node.operand)
            return -e, -hi, -lo
        if not isinstance(node, ast.BinOp):
            raise ValueError(f"no CP-SAT translation for {ast.unparse(node)!r}")
        (a, alo, ahi), (b, blo, bhi) = self._expr(node.left), self._expr(node.right)
        if isinstance(node.op, ast.Add):
            return a + b, alo + blo, ahi + bhi
        if isinstance(node.op, ast.Sub):
            return a - b, alo - bhi, ahi - blo
        if isinstance(node.op, ast.Mult):
            corners = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
            if isinstance(a, int) or isinstance(b, int):
                return a * b, min(corners), max(corners)
            z = self._aux(min(corners), max(corners))
            self.model.AddMultiplicationEquality(z, [a, b])
            return z, min(corners), max(corners)
        if isinstance(node.op, ast.Pow) and isinstance(b, int) and b >= 1:
            result = (a, alo, ahi)
            for _ in range(b - 1):
                corners = (result[1] * alo, result[1] * ahi, result[2] * alo, result[2] * ahi)
                z = self._aux(min(corners), max(corners))
                self.model.AddMultiplicationEquality(z, [result[0], a])
                result = (z, min(corners), max(corners))
            return result
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and alo >= 0 and blo > 0:
            # on non-negative operands CP-SAT's truncating division and modulo are Python's floor versions
            if isinstance(node.op, ast.FloorDiv):
                z = self._aux(alo // bhi, ahi // blo)
                self.model.AddDivisionEquality(z, a, b)
                return z, alo // bhi, ahi // blo
            z = self._aux(0, min(ahi, bhi - 1))
            self.model.AddModuloEquality(z, a, b)
            return z, 0, min(ahi, bhi - 1)
        raise ValueError(f"no CP-SAT translation for {ast.unparse(node)!r}")


class _Collect(cp_model.CpSolverSolutionCallback):
    def __init__(self, variables: list[cp_model.IntVar], keep: bool) -> None:
        super().__init__()
        self.variables, self.keep = variables, keep
        self.count = 0
        self.solutions: list[tuple[int, ...]] = []

    def on_solution_callback(self) -> None:
        self.count += 1
        if self.keep:
            self.solutions.append(tuple(self.Value(v) for v in self.variables))


def cpsat_enumerate(spec: Spec, keep: bool) -> _Collect:
    translation = CpSat(spec)
    solver = cp_model.CpSolver()
    solver.parameters.enumerate_all_solutions = True
    collect = _Collect(list(translation.vars.values()), keep)
    status = solver.Solve(translation.model, collect)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.INFEASIBLE):
        raise RuntimeError(f"CP-SAT enumeration ended with status {solver.StatusName(status)}")
    return collect


def cpsat_optimum(spec: Spec, objective: str, sense: str) -> int:
    """The proven maximum (`sense` "max") or minimum of the expression `objective` (default parameters: all
    workers)."""
    translation = CpSat(spec)
    expr = translation._expr(ast.parse(objective, mode="eval").body)[0]
    translation.model.Maximize(expr) if sense == "max" else translation.model.Minimize(expr)
    solver = cp_model.CpSolver()
    status = solver.Solve(translation.model)
    if status != cp_model.OPTIMAL:
        raise RuntimeError(f"CP-SAT's optimisation ended with status {solver.StatusName(status)}")
    return int(solver.ObjectiveValue())


def cpsat_first(spec: Spec, prefer: list[tuple[str, str]]) -> dict[str, int] | None:
    """The first solution of a fixed search taking the `prefer` variables in order; None when infeasible."""
    translation = CpSat(spec)
    for name, direction in prefer:
        select = cp_model.SELECT_MAX_VALUE if direction == "max" else cp_model.SELECT_MIN_VALUE
        translation.model.AddDecisionStrategy([translation.vars[name]], cp_model.CHOOSE_FIRST, select)
    solver = cp_model.CpSolver()
    if prefer:
        solver.parameters.search_branching = cp_model.FIXED_SEARCH
        solver.parameters.num_workers = 1
    status = solver.Solve(translation.model)
    if status == cp_model.INFEASIBLE:
        return None
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"CP-SAT ended with status {solver.StatusName(status)}")
    return {name: solver.Value(var) for name, var in translation.vars.items()}


# ---------------------------------------------------------------------------------------------- timing and rows


def medians_ms(fns: list[Callable[[], Any]], repeat: int) -> list[float]:
    """The median time of each function, run in turns (one run of each per round), so that a change in
    the machine's load falls on all of them alike."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, spent in zip(fns, times):
            start = time.perf_counter()
            fn()
            spent.append((time.perf_counter() - start) * 1e3)
    return [statistics.median(spent) for spent in times]


def _ms(value: float) -> float | int:
    return int(round(value)) if value >= 1000 else round(value, 2)


def row(benchmark: str, result: str, ours: float, solve_only: float, pc2_ms: float | str, cpsat_ms: float,
        target_ms: float | None = None, vs_pc2: bool = False) -> dict:
    """One table row; the targets met or missed are spelled out."""
    missed = []
    if target_ms is not None and ours > target_ms:
        missed.append(f"over {target_ms:g} ms")
    if vs_pc2 and isinstance(pc2_ms, float) and ours > pc2_ms:
        missed.append("slower than python-constraint2")
    if ours > 10 * cpsat_ms:
        missed.append("over 10x CP-SAT")
    targets = ([f"<= {target_ms:g} ms"] if target_ms is not None else []) + (
        ["<= python-constraint2"] if vs_pc2 else []) + ["<= 10x CP-SAT"]
    return {
        "benchmark": benchmark,
        "result": result,
        "constrint_ms": _ms(ours),
        "constrint_solve_ms": _ms(solve_only),
        "python_constraint2_ms": _ms(pc2_ms) if isinstance(pc2_ms, float) else pc2_ms,
        "cpsat_ms": _ms(cpsat_ms),
        "vs_python_constraint2": f"{ours / pc2_ms:.3g}x" if isinstance(pc2_ms, float) else "",
        "vs_cpsat": f"{ours / cpsat_ms:.3g}x",
        "target": ", ".join(targets),
        "met": "yes" if not missed else "MISSED: " + "; ".join(missed),
    }


def gemm_row(repeat: int) -> dict:
    text = (MODELS / "gemm_tiles.model").read_text()
    model = parse(text)
    spec = Spec.of(model)
    names = list(spec.domains)
    ours = {tuple(s[n] for n in names) for s in model.solutions()}
    theirs = {tuple(s[n] for n in names) for s in pc2_problem(spec).getSolutions()}
    cpsat = set(cpsat_enumerate(spec, keep=True).solutions)
    if not ours == theirs == cpsat:
        raise AssertionError(f"GEMM solution sets differ: {len(ours)}, {len(theirs)}, {len(cpsat)}")
    combos = 1
    for lo, hi, values in spec.domains.values():
        combos *= len(values) if values is not None else hi - lo + 1
    return row(
        "GEMM tile space: enumerate (8 variables)", f"{len(ours):,} solutions of {combos:,}; all three agree",
        *medians_ms([lambda: list(parse(text).solutions()), lambda: list(model.solutions()),
                     lambda: pc2_problem(spec).getSolutions(), lambda: cpsat_enumerate(spec, keep=True)], repeat),
        vs_pc2=True)


def queens_rows(sizes: tuple[int, ...], repeat: int) -> list[dict]:
    rows = []
    for n in sizes:
        text = queens_text(n)
        model = parse(text)
        spec = Spec.of(model)
        counts = (model.count(), len(pc2_problem(spec).getSolutions()), cpsat_enumerate(spec, keep=False).count)
        if set(counts) != {QUEENS_COUNTS[n]}:
            raise AssertionError(f"{n}-queens counts {counts}, expected {QUEENS_COUNTS[n]}")
        rows.append(row(
            f"{n}-queens: count", f"{QUEENS_COUNTS[n]} solutions; all three agree",
            *medians_ms([lambda: parse(text).count(), model.count, lambda: len(pc2_problem(spec).getSolutions()),
                         lambda: cpsat_enumerate(spec, keep=False).count], repeat)))
    return rows


def kernel_rows(repeat: int) -> list[dict]:
    text = (MODELS / "kernel_tiles.model").read_text()
    model = parse(text)
    spec = Spec.of(model)
    why_not = pc2_domain_problem(spec)
    ours = dict(model.solve(prefer=KERNEL_PREFER))
    theirs = cpsat_first(spec, KERNEL_PREFER)
    if theirs is None or not all(c.holds(theirs) for c in model.constraints):
        raise AssertionError("CP-SAT's kernel solution does not satisfy the model")
    same = [n for n, _ in KERNEL_PREFER if ours[n] == theirs[n]]
    agree = "CP-SAT agrees on all" if len(same) == len(KERNEL_PREFER) else \
        f"CP-SAT differs on {len(KERNEL_PREFER) - len(same)}"
    ours_ms, solve_ms, cpsat_ms = medians_ms([lambda: parse(text).solve(prefer=KERNEL_PREFER),
                                              lambda: model.solve(prefer=KERNEL_PREFER),
                                              lambda: cpsat_first(spec, KERNEL_PREFER)], repeat)
    rows = [row(
        f"kernel model: first solution under {len(KERNEL_PREFER)} preferences ({len(spec.domains)} variables)",
        f"{len(spec.constraints)} constraints; {agree} preferred values",
        ours_ms, solve_ms, why_not or "n/a", cpsat_ms, target_ms=30.0)]
    for label, old, new in KERNEL_VARIANTS:
        if old not in text:
            raise AssertionError(f"the kernel model no longer has the line {old!r} that the variant replaces")
        variant = text.replace(old, new)
        vmodel = parse(variant)
        vspec = Spec.of(vmodel)
        if next(vmodel.solutions(limit=1), None) is not None or cpsat_first(vspec, []) is not None:
            raise AssertionError(f"the variant '{label}' has a solution")
        ours_ms, solve_ms, cpsat_ms = medians_ms([lambda: next(parse(variant).solutions(limit=1), None),
                                                  lambda: next(vmodel.solutions(limit=1), None),
                                                  lambda: cpsat_first(vspec, [])], repeat)
        rows.append(row(f"kernel model, {label}: prove infeasible", "infeasible; CP-SAT agrees",
                        ours_ms, solve_ms, pc2_domain_problem(vspec) or "n/a", cpsat_ms))
        start = time.perf_counter()
        try:
            vmodel.solve(time_limit=CORE_TIME_LIMIT)
        except Infeasible as exc:
            core_ms = (time.perf_counter() - start) * 1e3
            kind = "minimal core" if exc.minimal else "core (not proven minimal)"
            rows[-1]["result"] += f"; {kind} of {len(exc.core)} in {core_ms:.0f} ms (one run)"
        except TimeLimit:
            rows[-1]["result"] += f"; no minimal core within {CORE_TIME_LIMIT:g} s"
    return rows


def knapsack_text(n: int, capacity: int, seed: int) -> tuple[str, str]:
    """A 0/1 knapsack in the python dialect (weights 5-40, values 5-60, drawn with `seed`) and its objective."""
    rng = random.Random(seed)
    weights, values = [rng.randint(5, 40) for _ in range(n)], [rng.randint(5, 60) for _ in range(n)]
    lines = [f"k{i} in [0..1]" for i in range(n)] + [" + ".join(f"{w} * k{i}" for i, w in enumerate(weights))
                                                     + f" <= {capacity}"]
    return "\n".join(lines), " + ".join(f"{v} * k{i}" for i, v in enumerate(values))


def multi_knapsack_text(n: int, capacities: int, seed: int) -> tuple[str, str]:
    """A 0/1 knapsack of several capacities (each row's weights 5-40, capacity a third of their sum; values 5-60)."""
    rng = random.Random(seed)
    lines = [f"k{i} in [0..1]" for i in range(n)]
    for _ in range(capacities):
        weights = [rng.randint(5, 40) for _ in range(n)]
        lines.append(" + ".join(f"{w} * k{i}" for i, w in enumerate(weights)) + f" <= {sum(weights) // 3}")
    return "\n".join(lines), " + ".join(f"{rng.randint(5, 60)} * k{i}" for i in range(n))


def correlated_text(n: int, rows: int, seed: int, cover: bool = False) -> tuple[str, str]:
    """Strongly correlated 0/1 items (weights 100-1000 per row, value or cost = first weight + 100): a knapsack (each
    row at most half its sum) or, with `cover`, a covering (each row at least half its sum)."""
    rng = random.Random(seed)
    weights = [[rng.randint(100, 1000) for _ in range(n)] for _ in range(rows)]
    lines = [f"k{i} in [0..1]" for i in range(n)]
    lines += [" + ".join(f"{w} * k{i}" for i, w in enumerate(row)) + (" >= " if cover else " <= ") + str(sum(row) // 2)
              for row in weights]
    return "\n".join(lines), " + ".join(f"{w + 100} * k{i}" for i, w in enumerate(weights[0]))


def assignment_text(n: int, seed: int) -> tuple[str, str]:
    """An n x n assignment (each row and each column of 0/1 variables sums to 1) and its cost (1-100 per cell)."""
    rng = random.Random(seed)
    cells = [[f"x{i}_{j}" for j in range(n)] for i in range(n)]
    lines = [f"{cell} in [0..1]" for row in cells for cell in row]
    lines += [" + ".join(row) + " == 1" for row in cells] + [" + ".join(col) + " == 1" for col in zip(*cells)]
    return "\n".join(lines), " + ".join(f"{rng.randint(1, 100)} * {cell}" for row in cells for cell in row)


def max_min_text(n: int, sums: int, seed: int) -> tuple[str, str]:
    """Items under one capacity (weights 5-40, a third of their sum) maximising the least of several sums (values
    0-60): t <= each sum, the objective t alone."""
    rng = random.Random(seed)
    weights = [rng.randint(5, 40) for _ in range(n)]
    lines = [f"k{i} in [0..1]" for i in range(n)] + ["t in [0..100000]"]
    lines.append(" + ".join(f"{w} * k{i}" for i, w in enumerate(weights)) + f" <= {sum(weights) // 3}")
    for _ in range(sums):
        lines.append("t <= " + " + ".join(f"{rng.randint(0, 60)} * k{i}" for i in range(n)))
    return "\n".join(lines), "t"


def optimum_row(label: str, text: str, objective: str, sense: str, repeat: int) -> dict:
    """A proven optimum of `objective` over the model `text`, constrint's against CP-SAT's."""
    model = parse(text)
    spec = Spec.of(model)

    def ours(parsed: Model) -> int:
        expr = parse_expression(objective, parsed)
        return (parsed.maximize(expr) if sense == "max" else parsed.minimize(expr)).objective

    found, theirs = ours(model), cpsat_optimum(spec, objective, sense)
    if found != theirs:
        raise AssertionError(f"{label}: optima differ: constrint {found}, CP-SAT {theirs}")
    ours_ms, solve_ms, cpsat_ms = medians_ms([lambda: ours(parse(text)), lambda: ours(model),
                                              lambda: cpsat_optimum(spec, objective, sense)], repeat)
    return row(label, f"{found}; CP-SAT agrees", ours_ms, solve_ms, "n/a: it does not optimise", cpsat_ms)


def optimum_rows(repeat: int) -> list[dict]:
    return [
        optimum_row(f"0/1 knapsack, {KNAPSACK_ITEMS} items: prove the maximum value",
                    *knapsack_text(KNAPSACK_ITEMS, KNAPSACK_CAPACITY, KNAPSACK_SEED), "max", repeat),
        optimum_row("0/1 knapsack, 60 items, 3 capacities: prove the maximum value", *multi_knapsack_text(60, 3, 1),
                    "max", repeat),
        optimum_row("assignment, 15 x 15: prove the least cost", *assignment_text(15, 2), "min", repeat),
        optimum_row("max-min, 40 items, 2 sums: prove the greatest least sum", *max_min_text(40, 2, 1), "max", repeat),
        optimum_row("strongly correlated knapsack, 100 items, 3 capacities: prove the maximum value",
                    *correlated_text(100, 3, 1), "max", repeat),
        optimum_row("strongly correlated covering, 100 items, 3 rows: prove the least cost",
                    *correlated_text(100, 3, 1, cover=True), "min", repeat),
        optimum_row("strongly correlated knapsack, 100 items, 5 capacities: prove the maximum value",
                    *correlated_text(100, 5, 5), "max", repeat),
    ]


def profile_ours() -> str:
    """cProfile of constrint on the kernel model, the GEMM enumeration and 8-queens: where the time goes."""
    kernel = (MODELS / "kernel_tiles.model").read_text()
    gemm = (MODELS / "gemm_tiles.model").read_text()
    out = io.StringIO()
    for label, fn in [("kernel model, first solution under preferences",
                       lambda: parse(kernel).solve(prefer=KERNEL_PREFER)),
                      ("GEMM enumeration", lambda: list(parse(gemm).solutions())),
                      ("8-queens count", lambda: parse(queens_text(8)).count())]:
        profiler = cProfile.Profile()
        profiler.runcall(fn)
        out.write(f"\n### {label}\n")
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    return out.getvalue()


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs per timing (median); default 7")
    parser.add_argument("--quick", action="store_true", help="one run each, 6- and 7-queens only")
    parser.add_argument("--profile", action="store_true", help="also print a profile of constrint's runs")
    args = parser.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    rows = [gemm_row(repeat), *queens_rows(QUEENS[:2] if args.quick else QUEENS, repeat), *kernel_rows(repeat),
            *optimum_rows(repeat)]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    versions = (f"Python {platform.python_version()} · ortools {version('ortools')} · "
                f"python-constraint2 {version('python-constraint2')} · {os.cpu_count()} CPUs, load average "
                f"{load} at the end of the run")
    notes = [
        f"{versions}. Times in ms, median of {repeat} run(s), the solvers of a row taking turns. constrint_ms is "
        "end to end from the model text (parse + solve); constrint_solve_ms is the search alone on the parsed model. "
        "vs_* = constrint_ms / "
        "other (below 1 means constrint is faster). CP-SAT's first solution under preferences is a fixed "
        "search over the preferred variables in order (one worker).",
        "python-constraint2 2.9.0 finds no solution for the string constraint "
        "`(BM // WARP_M) * (BN // WARP_N) == WARPS`, so the GEMM model states it as the equivalent "
        "`BM * BN == WARPS * WARP_M * WARP_N` (beside `BM % WARP_M == 0` and `BN % WARP_N == 0`). "
        "python-constraint2 cannot take the kernel model: it lists every value of every domain.",
    ]
    print(common.write_results("solver", rows, title="Solver benchmark: constrint, python-constraint2, CP-SAT",
                               notes=notes))
    if args.profile:
        print(profile_ours())
    return rows


if __name__ == "__main__":
    main()
