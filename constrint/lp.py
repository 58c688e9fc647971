"""Linear programs min c x over rows A x <= b, E x == e and a box of the columns, solved by HiGHS (highspy).

A Program keeps its HiGHS model between solves: a solve changes only the columns' bounds, so it starts from the
previous solve's basis (a node's box differs from the last node's in a few bounds). On 60 columns and 3 rows a solve
takes about 0.2 ms that way, against 1.2 ms through scipy's linprog, which builds the model again every call.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

OPTIMAL, INFEASIBLE, OTHER = "optimal", "infeasible", "other"


class Solved(NamedTuple):
    status: str  # OPTIMAL, INFEASIBLE or OTHER (x, slack and duals are meaningful only where OPTIMAL)
    fun: float  # min c x
    x: np.ndarray
    slack: np.ndarray  # b - A x of the <= rows
    duals: np.ndarray  # of the <= rows, then of the == rows (HiGHS's signs: <= 0 on a binding <= row)


class Program:
    """min cost x over the rows (a_ub x <= b_ub, a_eq x == b_eq; either may be None), for boxes given per solve."""

    def __init__(self, cost: np.ndarray, a_ub: np.ndarray | None, b_ub: np.ndarray | None, a_eq: np.ndarray | None,
                 b_eq: np.ndarray | None) -> None:
        import highspy  # here: small models never build a program

        n = len(cost)
        blocks = [a for a in (a_ub, a_eq) if a is not None]
        a = np.vstack(blocks) if blocks else np.zeros((0, n))
        self.m_ub = 0 if a_ub is None else len(a_ub)
        self.b_ub = np.zeros(0) if b_ub is None else np.asarray(b_ub, dtype=np.float64)
        inf = highspy.kHighsInf
        lower = np.concatenate([np.full(self.m_ub, -inf), b_eq if b_eq is not None else []])
        upper = np.concatenate([b_ub if b_ub is not None else [], b_eq if b_eq is not None else []])
        model = highspy.HighsLp()
        model.num_col_, model.num_row_ = n, len(a)
        model.col_cost_ = np.asarray(cost, dtype=np.float64)
        model.col_lower_, model.col_upper_ = np.zeros(n), np.zeros(n)  # each solve sets the box
        model.row_lower_, model.row_upper_ = lower, upper
        rows, cols = np.nonzero(a)
        model.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        model.a_matrix_.start_ = np.searchsorted(rows, np.arange(len(a) + 1)).astype(np.int32)
        model.a_matrix_.index_ = cols.astype(np.int32)
        model.a_matrix_.value_ = a[rows, cols].astype(np.float64)
        # highspy's Highs class enables its callbacks first, which prints HiGHS's banner before output_flag can be set;
        # the core class it wraps (exported by highspy as _Highs) does nothing before the option is set
        self.highs = highspy._Highs()
        self.highs.setOptionValue("output_flag", False)
        self.highs.setOptionValue("threads", 1)  # a simplex solve of this size runs on one; more only wait (3-10%)
        self.highs.passModel(model)
        self.columns = np.arange(n, dtype=np.int32)
        self.statuses = {highspy.HighsModelStatus.kOptimal: OPTIMAL, highspy.HighsModelStatus.kInfeasible: INFEASIBLE}

    def solve(self, box: np.ndarray) -> Solved:
        """The optimum over `box` ([[lower, upper]] per column; np.inf allowed)."""
        h = self.highs
        h.changeColsBounds(len(self.columns), self.columns, box[:, 0], box[:, 1])
        h.run()
        status = self.statuses.get(h.getModelStatus(), OTHER)
        if status != OPTIMAL:
            empty = np.zeros(0)
            return Solved(status, np.inf, empty, empty, empty)
        solution = h.getSolution()
        return Solved(status, h.getInfo().objective_function_value, np.asarray(solution.col_value),
                      self.b_ub - np.asarray(solution.row_value)[:self.m_ub], np.asarray(solution.row_dual))
