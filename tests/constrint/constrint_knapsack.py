"""A 0/1 knapsack with three capacities (100 items) whose optimum takes this solver far longer than the time-limit
tests wait (60 items already run past 20 s), while improving solutions come at once: text in the python dialect."""
from __future__ import annotations

import random
from dataclasses import dataclass

ITEMS, CAPACITY = 100, 750


@dataclass(frozen=True)
class Knapsack:
    text: str
    objective: str
    weights: list[list[int]]
    values: list[int]

    def value(self, chosen) -> int:
        return sum(v * chosen[f"k{i}"] for i, v in enumerate(self.values))

    def fits(self, chosen) -> bool:
        return all(sum(w * chosen[f"k{i}"] for i, w in enumerate(row)) <= CAPACITY for row in self.weights)


def hard_knapsack() -> Knapsack:
    rng = random.Random(1)
    weights = [[rng.randint(5, 40) for _ in range(ITEMS)] for _ in range(3)]
    values = [rng.randint(5, 60) for _ in range(ITEMS)]
    lines = [f"k{i} in [0..1]" for i in range(ITEMS)]
    lines += [" + ".join(f"{w} * k{i}" for i, w in enumerate(row)) + f" <= {CAPACITY}" for row in weights]
    return Knapsack("\n".join(lines), " + ".join(f"{v} * k{i}" for i, v in enumerate(values)), weights, values)
