"""The memory guard refuses in words, with the estimate and the limit; what a gradient report
needs is judged from its Jacobian's pattern, and refused before it is built."""

import dataclasses
from collections import OrderedDict

import pytest
import torch

from gradient_lab.app import budget
from gradient_lab.errors import LabError
from gradient_lab.engine.tolerances import default_tolerances


def test_budget_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("GRADIENT_LAB_MEMORY_MB", raising=False)
    assert budget.memory_budget() == 2048 * 2**20
    monkeypatch.setenv("GRADIENT_LAB_MEMORY_MB", "64")
    assert budget.memory_budget() == 64 * 2**20
    monkeypatch.setenv("GRADIENT_LAB_MEMORY_MB", "lots")
    assert budget.memory_budget() == 2048 * 2**20


def test_refusal_names_the_estimate_and_the_limit():
    budget.require(1000, "A thing", "Make it smaller.", budget=2000)
    with pytest.raises(LabError) as refused:
        budget.require(3 * 2**30, "A surface of 40401 points", "Lower the resolution.", budget=2**30)
    text = str(refused.value)
    assert "3.0 GiB" in text and "1.0 GiB" in text and "Lower the resolution." in text and "GRADIENT_LAB_MEMORY_MB" in text
    with pytest.raises(LabError):
        budget.require(float("inf"), "Anything", "", budget=2**30)


def test_human_bytes():
    assert budget.human_bytes(512) == "512 B"
    assert budget.human_bytes(1536) == "1.5 KiB"
    assert budget.human_bytes(5 * 2**40) == "5.0 TiB"


def test_estimates_grow_with_the_work():
    assert budget.trajectory_bytes(2000, 10**6, 5) > budget.trajectory_bytes(20, 10**6, 5) > budget.trajectory_bytes(20, 10**6, 1)
    assert budget.field_bytes(41 * 41, 8192) == 41 * 41 * 8192 * 8 * budget.FIELD_FACTOR
    assert budget.surface_bytes(201 * 201, 8192, 4, 256) < 2**30  # chunked: a 201² surface fits


def test_a_report_estimate_grows_with_every_term_and_bounds_its_phases():
    base = budget.report_bytes([8192, 8192], 64, [8192, 8192], 2**20)
    assert 0 < base.kept < base.peak
    for larger in (budget.report_bytes([8192, 8192], 64, [16384, 8192], 2**20), budget.report_bytes([8192, 8192], 128, [8192, 8192], 2**20),
                   budget.report_bytes([16384, 8192], 64, [8192, 8192], 2**20), budget.report_bytes([8192, 8192], 64, [8192, 8192], 2**30)):
        assert larger.peak > base.peak
    entries = 10**7
    big = budget.report_bytes([8192], 8192, [entries], 2**20)
    assert big.kept >= budget.ENTRY_KEPT * entries and big.peak >= (budget.ENTRY_KEPT + budget.ENTRY_WORK) * entries
    # phases that never overlap count once: the largest
    chunky = budget.report_bytes([10], 10, [10], 2**30)
    assert budget.CHUNK_FACTOR * 2**30 <= chunky.peak - chunky.kept < budget.CHUNK_FACTOR * 2**30 + 2**20


def test_the_engine_limits_the_estimate_assumes_are_the_engines():
    from gradient_lab.engine.pipeline import DEFAULT_JACOBIAN_LIMIT
    from gradient_lab.engine.diagnosis import MAX_ENTRIES_BY_HAND
    from gradient_lab.engine.evaluate import MAX_SECOND_LOOK

    defaults = budget.report_bytes.__kwdefaults__
    assert defaults == {"looked": MAX_SECOND_LOOK, "drawn_jacobian": DEFAULT_JACOBIAN_LIMIT, "by_hand": MAX_ENTRIES_BY_HAND}


def test_a_pattern_that_fails_at_the_point_is_refused_before_its_whole_jacobian_is_built():
    """Normalisation with a zero row: the reference's pattern does not reproduce the differences
    there, so the engine would difference all 8,192 × 8,192 entries (about 15 GiB): refused, in words."""
    from gradient_lab.app import views
    from gradient_lab.app.case import Case
    from gradient_lab.explore.perturb import Perturbation

    case = Case(family="normalize", formulas=("corrected",), shape=(64, 128), perturbation=Perturbation(near_zero_rows=2, near_zero_factor=0.0))
    with pytest.raises(LabError) as refused:
        views.gradient_report(case, "corrected")
    text = str(refused.value)
    assert "pattern does not hold at this point for x" in text and "67,108,864 entries" in text and "budget of 2.0 GiB" in text
    assert views.gradient_report(Case(family="normalize", formulas=("corrected",), shape=(64, 128)), "corrected").verdict.passed


def test_a_large_pattern_is_counted_once_planned_once_and_a_whole_jacobian_without_one_refused(monkeypatch):
    from gradient_lab.app import guard, views
    from gradient_lab.app.case import Case
    from gradient_lab.engine import planning

    counted, planned = [], []
    real_count, real_plan = guard.pattern_entries, planning.plan_differences
    monkeypatch.setattr(guard, "pattern_entries", lambda *a, **k: counted.append(1) or real_count(*a, **k))
    monkeypatch.setattr(planning, "plan_differences", lambda *a, **k: planned.append(1) or real_plan(*a, **k))
    monkeypatch.setattr(guard, "_PATTERN_COUNTS", OrderedDict())  # counted afresh, whatever ran before
    # 8,192² whole, 1,048,576 in its pattern; without the conditions, whose changed cases (a few rows) are planned afresh
    case = Case(family="softmax", formulas=("corrected", "batch-sum"), shape=(64, 128), conditions="none")
    assert [r.formula for r in views.verdicts(case)] == ["corrected", "batch-sum"]
    assert counted == [1]  # by the guard, once for both formulas: the engine reads its own pattern
    assert planned == [1, 1]  # one plan per formula: the guard's, which the engine runs as it is
    family = dataclasses.replace(case.get_family(), reference=None)  # no reference: no pattern, every entry
    problem = family.problem("corrected", case.inputs(), case.param_values())
    with pytest.raises(LabError, match=r"every entry of its Jacobian compared, 8,192 outputs by 8,192 input elements"):
        guard.require_report_memory(problem, default_tolerances(torch.float64), "Checking")


def test_pytorchs_checks_are_guarded_too(monkeypatch):
    from gradient_lab.app import views
    from gradient_lab.app.case import Case

    assert budget.conformance_bytes(4096, 4096) < budget.memory_budget()  # the largest allowed shape fits the default budget
    monkeypatch.setenv("GRADIENT_LAB_MEMORY_MB", "64")
    with pytest.raises(LabError, match="PyTorch's checks of shape"):
        views.conformance(Case(family="softmax", shape=(64, 64)), "corrected")


def test_freed_memory_is_handed_back_where_the_allocator_allows():
    resident = budget.resident_bytes()
    released = budget.release_freed_memory()
    if resident is None:
        pytest.skip("needs Linux's /proc to read resident memory")
    assert resident > 0 and isinstance(released, bool)
