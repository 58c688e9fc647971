"""constrint: an integer constraint solver in Python (numpy; HiGHS through highspy for linear relaxations) with
divisibility propagation.

Usage::

    from constrint import Model, Infeasible

    m = Model()
    x = m.int_var(1, 1024, "x")                   # inclusive bounds
    y = m.int_var(values=[8, 16, 32], name="y")   # explicit domain
    m.add(x * y <= 4096)
    m.add(x % y == 0)                             # Python floor semantics; x % 0 and x // 0 violate
    m.add(m.any_of([x <= 4, x >= 64]), name="small or large x")
    sol = m.solve(prefer=[("x", "max"), ("y", "min")])   # lexicographic optimum: x = 512, y = 8
    sol["x"] == sol[x]
    best = m.maximize(x + y)                      # proven optimum, best.objective == 520
    m.count()                                     # number of solutions; m.solutions() generates them
    try:
        m.add(x >= 2000, name="too big")
        m.solve()
    except Infeasible as e:
        e.core                                    # minimal: [too big], as str(e) says

Domains are intervals with a congruence (x = r mod m) and, where small, explicit value sets. Constraints are
flattened once into primitive propagators run to a fixpoint at every node of a depth-first search; every
answer is re-checked against the original constraints before it is returned.
"""
from .errors import ConstrintError, Infeasible, ParseError, TimeLimit
from .model import Model, Solution
from .textformat import parse

__all__ = ["Model", "Solution", "parse", "ConstrintError", "ParseError", "Infeasible", "TimeLimit"]
