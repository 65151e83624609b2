"""Every correct gallery formula passes under the sidebar's own settings (``benchmarks/sweep_gallery.py``
runs them all; here, those where false alarms were found: rows near zero, tiny rows, exactly
parallel inputs, a reduction along the batch dim, bfloat16)."""

import dataclasses

import pytest

from benchmarks.sweep_gallery import settings
from gradient_lab.app import views
from gradient_lab.app.case import Case
from gradient_lab.app.family import families

LABELS = ("2 rows near zero at 0.1·eps", "2 rows near zero at 10·eps", "row norm 1e-06", "parallel within 0°",
          "(4, 6, 8) along dim 0", "bfloat16")
CASES = [(family.name, label, fields) for family in families().values() for label, fields in settings(family) if label in LABELS]


@pytest.mark.parametrize("family, label, fields", CASES, ids=[f"{f}-{label}" for f, label, _ in CASES])
def test_every_correct_gallery_formula_passes_under_the_sidebars_settings(family, label, fields):
    correct = tuple(name for name, formula in families()[family].formulas.items() if formula.correct)
    case = dataclasses.replace(Case(family=family, formulas=correct), **fields)
    for formula in correct:
        report = views.gradient_report(case, formula)
        assert report.verdict.passed, (formula, report.verdict.condition, report.verdict.finding)
