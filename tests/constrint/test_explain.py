"""Minimal infeasible cores: minimal, named as written, found fast on kernel models."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from constrint import Infeasible, Model
from constrint.explain import minimal_core

from constrint_kernel_models import PREFER, kernel_tile_model
from constrint_strategies import brute_force, models


def _sub(m: Model, keep) -> Model:
    """A model with the same variables and only the constraints in `keep`."""
    out = Model()
    for name, v in m.variables.items():
        d = v.domain
        if d.values is not None:
            out.int_var(values=d.values, name=name)
        else:
            out.int_var(d.lo, d.hi, name)
    out._constraints = list(keep)  # constraints refer to variables by name and index, both identical
    return out


def test_deletion_filter_on_sets():
    # infeasible iff the chosen set covers {1, 2, 3}
    items = [{1}, {2, 9}, {4}, {3}, {2}, {1, 3}]

    def feasible(sub):
        return not {1, 2, 3} <= set().union(*sub)

    core = minimal_core(items, feasible)
    assert not feasible(core)
    assert all(feasible(core[:i] + core[i + 1 :]) for i in range(len(core)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(max_vars=3, max_constraints=4))
def test_core_is_minimal(m):
    if brute_force(m):
        return
    try:
        m.solve()
        raise AssertionError("brute force found no solution, so solve must raise")
    except Infeasible as e:
        core, text = e.core, str(e)
    assert core and all(c in m.constraints for c in core)
    assert not brute_force(_sub(m, core))
    for i in range(len(core)):
        assert brute_force(_sub(m, core[:i] + core[i + 1 :])), "dropping a core constraint must make it feasible"
    assert all(str(c) in text for c in core)


def test_kernel_model_core_names_the_culprits():
    m = kernel_tile_model(head_dim=2976, smem_bytes=32000)
    try:
        m.solve(prefer=PREFER)
        raise AssertionError("the model should be infeasible")
    except Infeasible as e:
        names = [str(c) for c in e.core]
    assert any("shared memory" in n for n in names)
    assert len(names) < len(m.constraints) // 2
