"""Strongly correlated 0/1 knapsacks (100 items, each value its first weight + 100) in the python dialect. With three
capacities (seed 1) the relaxation's cuts prove the optimum in about 0.1 s (past 30 s without them; CP-SAT 0.09 s);
`hard_knapsack`, with five (seed 6), takes this solver far longer than the time-limit tests wait (about 30 s; CP-SAT
8.9 s), while improving solutions come at once."""
from __future__ import annotations

import random
from dataclasses import dataclass

ITEMS = 100


@dataclass(frozen=True)
class Knapsack:
    text: str
    objective: str
    weights: list[list[int]]
    capacities: list[int]
    values: list[int]

    def value(self, chosen) -> int:
        return sum(v * chosen[f"k{i}"] for i, v in enumerate(self.values))

    def fits(self, chosen) -> bool:
        return all(sum(w * chosen[f"k{i}"] for i, w in enumerate(row)) <= capacity
                   for row, capacity in zip(self.weights, self.capacities))


def correlated_knapsack(capacities: int, seed: int) -> Knapsack:
    rng = random.Random(seed)
    weights = [[rng.randint(100, 1000) for _ in range(ITEMS)] for _ in range(capacities)]
    limits = [sum(row) // 2 for row in weights]
    values = [w + 100 for w in weights[0]]
    lines = [f"k{i} in [0..1]" for i in range(ITEMS)]
    lines += [" + ".join(f"{w} * k{i}" for i, w in enumerate(row)) + f" <= {limit}"
              for row, limit in zip(weights, limits)]
    return Knapsack("\n".join(lines), " + ".join(f"{v} * k{i}" for i, v in enumerate(values)), weights, limits, values)


def hard_knapsack() -> Knapsack:
    return correlated_knapsack(capacities=5, seed=6)
