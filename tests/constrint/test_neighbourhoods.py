"""Large neighbourhood searches inside branch and bound (Search._neighbourhood)."""
from __future__ import annotations

import random

import pytest

import constrint.model as model_module
import constrint.search as search_module
from constrint import Infeasible, TimeLimit
from constrint.textformat import parse, parse_expression

from constrint_knapsack import correlated_knapsack
from constrint_strategies import relaxed_models


@pytest.fixture
def neighbourhoods(monkeypatch):
    """Neighbourhood searches of two nodes from the first node on; counts those run and those that improved, and
    checks that each solution one yields improves on the search's best so far."""
    counts = {"runs": 0, "improved": 0}
    neighbourhood = search_module.Search._neighbourhood

    def counted(self):
        before = best = self.best
        better = (lambda a, b: a < b) if self.objective[1] == "min" else (lambda a, b: a > b)
        for found in neighbourhood(self):
            assert better(self.best, best)
            best = self.best
            yield found
        counts["runs"] += 1
        counts["improved"] += self.best != before

    monkeypatch.setattr(search_module, "NEIGHBOURHOOD_AFTER", 1)
    monkeypatch.setattr(search_module, "NEIGHBOURHOOD_NODES", 2)
    monkeypatch.setattr(search_module.Search, "_neighbourhood", counted)
    return counts


@pytest.mark.parametrize("block_rows, least_runs", [(0, 100), (64, 8)])
def test_optima_through_relaxation_guided_neighbourhoods_agree_with_brute_force(neighbourhoods, monkeypatch,
                                                                                 block_rows, least_runs):
    """Models of linear rows (half with a product too) over boxes large enough for the relaxation (so its cut rounds
    pick what a neighbourhood frees), neighbourhoods of two nodes from the first node on, every leaf reached by
    branching or blocks of at most 64 rows enumerated near the leaves: the optimum is still the best point of the
    box."""
    monkeypatch.setattr(model_module, "BLOCK_ROWS", block_rows)
    for m, rows, weights, objective, values in relaxed_models(random.Random(11), 30, products=True):
        for sense, optimise in (("min", m.minimize), ("max", m.maximize)):
            if not len(values):
                with pytest.raises(Infeasible):
                    optimise(objective)
                continue
            expected = values.min() if sense == "min" else values.max()
            assert optimise(objective).objective == expected, (rows, weights, sense)
    assert neighbourhoods["runs"] > least_runs and neighbourhoods["improved"] > 0


def test_a_neighbourhood_finds_the_optimum_of_a_correlated_knapsack(monkeypatch):
    """100 items, five capacities, values = first weight + 100 (seed 5): CP-SAT (one worker) proves it in 2.1 s, this
    solver's branch and bound alone had found 32,088 after 30 s; the neighbourhoods that free first the items the cut
    relaxation's optimum takes otherwise find 32,111, which the cut rounds then prove (about a second)."""
    found_by = []
    neighbourhood = search_module.Search._neighbourhood

    def spy(self):
        for found in neighbourhood(self):
            found_by.append(self.best)
            yield found

    monkeypatch.setattr(search_module.Search, "_neighbourhood", spy)
    knapsack = correlated_knapsack(capacities=5, seed=5)
    m = parse(knapsack.text)
    best = m.maximize(parse_expression(knapsack.objective, m), time_limit=30)
    assert best.objective == 32111 == knapsack.value(best) and knapsack.fits(best)  # CP-SAT's optimum
    assert found_by and found_by[-1] == 32111


def test_neighbourhoods_with_blocks_only_improve(neighbourhoods, monkeypatch):
    """A five-capacity correlated knapsack for two seconds, neighbourhoods of 64 nodes whose leaves are blocks of up
    to BLOCK_ROWS rows: every solution they yield beats the one before (the fixture checks it), and the best found at
    the time limit is the best yielded."""
    monkeypatch.setattr(search_module, "NEIGHBOURHOOD_NODES", 64)
    knapsack = correlated_knapsack(capacities=5, seed=6)
    m = parse(knapsack.text)
    values = []
    improved = search_module.Search._improved

    def spy(self, value):
        values.append(value)
        improved(self, value)

    monkeypatch.setattr(search_module.Search, "_improved", spy)
    with pytest.raises(TimeLimit) as info:
        m.maximize(parse_expression(knapsack.objective, m), time_limit=2)
    assert neighbourhoods["runs"] > 3 and info.value.best.objective == max(values)
