"""Cutting planes for DualBound's relaxation: mixed-integer rounding (MIR) of aggregated rows, computed in integers.

For a row sum(a x) <= r over integers lo <= x <= hi, put y = x - lo or y = hi - x (the end nearer the relaxation's
point), so that y >= 0: sum(a' y) <= r'. For an integer divisor d > 0 with r' = q d + f (0 < f < d), and each
a' = p d + s (0 <= s < d),

    sum((p (d - f) + max(0, s - f)) y) <= q (d - f)

holds at every integer y >= 0: the MIR inequality of sum(a' y / d) <= r' / d, times d - f. Rows aggregated: each row
alone (an equality in both directions; earlier cuts too), each of the model's rows added to the objective's cutoff row
(sum(-c x) <= -w: true of every solution branch and bound still looks for, those reaching w), and the cutoff row times k
plus all rows times their duals times k rounded to integers (k = 1, 2, 4). Divisors: the coefficients of variables the
point leaves strictly inside their bounds, each also halved up to three times. A strongly correlated knapsack (values =
weights + 100) shows what they do: the cutoff row plus the capacity row is -100 times the number of items taken <=
capacity - w, and its MIR with d = 100 is the rounded-up least number of items, which the other capacities may refute at
once.
"""
from __future__ import annotations

from math import gcd
from operator import itemgetter

import numpy as np

MAX_MAGNITUDE = 1 << 40  # rows (and bounds) with larger numbers get no cuts: MIR's products stay inside int64
DUAL_SCALES = (1, 2, 4)
DIVISORS = 6  # the most distinct coefficients tried as divisors per aggregated row
HALVINGS = 4  # each divisor d also tried as d // 2, d // 4, d // 8
MIN_EFFICACY = 1e-4  # a cut's violation at the point over its norm (in the variables' units)


def mir_cuts(rows: np.ndarray, rhs: list[int], base: int, cutoff: tuple[np.ndarray, int], duals: list[float],
             lo: list[int], hi: list[int], point: np.ndarray, count: int) -> list[tuple[list[int], int]]:
    """Up to `count` MIR cuts (coefficients per variable, right-hand side) of `rows` (int64, one per row, rows[i] x <=
    rhs[i]; an equality comes twice, negated; rows from `base` on are earlier cuts) and the `cutoff` row that `point`
    violates most, by efficacy, distinct.
    `duals` >= 0 per row (where both directions of an equality have duals, give their parts). Every cut holds at every
    integer point of the box [lo, hi] that meets the rows and the cutoff row."""
    c_row, c_rhs = cutoff
    sums, right = [rows, rows[:base] + c_row], [*rhs, *(r + c_rhs for r in rhs[:base])]
    for k in DUAL_SCALES:
        mult = [round(k * u) for u in duals]
        if any(mult):
            weights = np.array(mult, dtype=np.int64)
            if float(np.abs(weights) @ np.abs(rows).max(axis=1)) + k * float(np.abs(c_row).max()) < MAX_MAGNITUDE:
                sums.append((k * c_row + weights @ rows)[None, :])
                right.append(k * c_rhs + sum(m * r for m, r in zip(mult, rhs)))
    alpha = np.vstack(sums)
    low, high = np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64)
    upper = point * 2 > low + high  # substituted from the upper bound
    inside = (point > low + 1e-9) & (point < high - 1e-9)
    y_point = np.where(upper, high - point, point - low)
    ends = np.where(upper, np.array(hi, dtype=object), np.array(lo, dtype=object))  # exact, as Python integers
    a = np.where(upper, -alpha, alpha)
    b = [r - v for r, v in zip(right, alpha.astype(object) @ ends)]
    divisors = _divisors(np.where(inside & (a != 0), np.abs(a), 0))
    step = max(1, (1 << 20) // (divisors.shape[1] * len(point) + 1))  # aggregates per chunk of the 3-d arrays (8 MB)
    best = []  # (efficacy, cut over y, its right-hand side): the best few per chunk
    for i in range(0, len(a), step):
        d = divisors[i:i + step]
        fits = np.array([abs(v) < MAX_MAGNITUDE << 12 for v in b[i:i + step]])  # q (d - f) fits int64
        q, f = np.divmod(np.array([v if ok else 0 for v, ok in zip(b[i:i + step], fits)], dtype=np.int64)[:, None],
                         np.maximum(d, 1))
        p, s = np.divmod(a[i:i + step, None, :], np.maximum(d, 1)[:, :, None])
        g = p * (d - f)[:, :, None] + np.maximum(0, s - f[:, :, None])
        norms = np.sqrt((g.astype(np.float64) ** 2).sum(axis=2))
        efficacy = np.where((d > 0) & (f > 0) & fits[:, None], (g @ y_point - q * (d - f)) / np.maximum(norms, 1.0), 0)
        for k in np.argsort(efficacy, axis=None)[::-1][:2 * count]:  # duplicates come in pairs and more
            row, col = divmod(int(k), d.shape[1])
            if efficacy[row, col] > MIN_EFFICACY:
                best.append((float(efficacy[row, col]), g[row, col], int(q[row, col] * (d - f)[row, col])))
    found: dict[tuple[tuple[int, ...], int], None] = {}
    for _, over_y, limit in sorted(best, key=itemgetter(0), reverse=True):
        cut = _in_x(over_y.tolist(), limit, upper, lo, hi)
        if cut is not None and max(map(abs, cut[0])) < MAX_MAGNITUDE:  # cuts of cuts stay inside int64 too
            found[cut] = None
            if len(found) == count:
                break
    return [(list(coefs), r) for coefs, r in found]


def _divisors(values: np.ndarray) -> np.ndarray:
    """Per row of `values` (>= 0, 0: none), its DIVISORS greatest distinct values, each also shifted right by 1 to
    HALVINGS - 1 bits (0 where there are fewer)."""
    ordered = np.sort(values, axis=1)
    ordered[:, 1:][ordered[:, 1:] == ordered[:, :-1]] = 0
    top = np.sort(ordered, axis=1)[:, -DIVISORS:]
    return np.concatenate([top >> k for k in range(HALVINGS)], axis=1)


def _in_x(g: list[int], right: int, upper: np.ndarray, lo: list[int], hi: list[int]
          ) -> tuple[tuple[int, ...], int] | None:
    """The cut sum(g y) <= right back in x (y = x - lo, or hi - x where `upper`), divided by its coefficients' gcd."""
    coefs = []
    for gj, u, l, h in zip(g, upper, lo, hi):
        if u:
            coefs.append(-gj)
            right -= gj * h
        else:
            coefs.append(gj)
            right += gj * l
    common = 0
    for k in coefs:
        common = gcd(common, k)
    if common == 0:  # 0 <= right: a refutation where right < 0
        return (tuple(coefs), -1) if right < 0 else None
    return tuple(k // common for k in coefs), right // common
