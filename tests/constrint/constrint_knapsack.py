"""A strongly correlated 0/1 knapsack with three capacities (100 items, each value its first weight + 100) whose
optimum takes this solver far longer than the time-limit tests wait (past 30 s, where one of the same size with
values drawn apart from the weights takes 0.6 s with the objective's linear relaxation), while improving solutions
come at once: text in the python dialect."""
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


def hard_knapsack() -> Knapsack:
    rng = random.Random(1)
    weights = [[rng.randint(100, 1000) for _ in range(ITEMS)] for _ in range(3)]
    capacities = [sum(row) // 2 for row in weights]
    values = [w + 100 for w in weights[0]]
    lines = [f"k{i} in [0..1]" for i in range(ITEMS)]
    lines += [" + ".join(f"{w} * k{i}" for i, w in enumerate(row)) + f" <= {capacity}"
              for row, capacity in zip(weights, capacities)]
    return Knapsack("\n".join(lines), " + ".join(f"{v} * k{i}" for i, v in enumerate(values)), weights, capacities,
                    values)
