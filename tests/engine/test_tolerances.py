"""The verdict's tolerances: float32 holds the gallery to 1e-4 (atol in units of the gradient's own
size, finite differences judged against their own error), so every correct formula passes in
float32 at defaults and at row norm 1e3, and every bug that float64 catches there is caught in
float32 too; PyTorch's gradcheck keeps its looser float32 defaults."""

import pytest
import torch

from gradient_lab.app import views
from gradient_lab.app.case import Case
from gradient_lab.app.family import families
from gradient_lab.explore.perturb import Perturbation
from gradient_lab.engine.tolerances import default_tolerances, gradcheck_tolerances
from tests.app.functions.test_gallery import GALLERY

CASES = {"defaults": Perturbation(), "row norm 1e3": Perturbation(norm1=1e3, norm2=1e3)}


@pytest.mark.parametrize("where", list(CASES))
@pytest.mark.parametrize("name", ("cosine", *GALLERY))
def test_float32_passes_every_correct_formula_and_fails_every_bug_float64_fails(name, where):
    family = families()[name]
    for formula, declared in family.formulas.items():
        reports = {dtype: views.gradient_report(Case(family=name, formulas=(formula,), dtype=dtype, perturbation=CASES[where]), formula)
                   for dtype in ("float32", "float64")}
        if declared.correct:
            assert reports["float32"].verdict.passed, (formula, reports["float32"].verdict.summary)
        elif not reports["float64"].verdict.passed:
            assert not reports["float32"].verdict.passed, (formula, reports["float32"].verdict.summary)


def test_the_verdict_holds_float32_tighter_than_gradcheck_can():
    ours, theirs = default_tolerances(torch.float32), gradcheck_tolerances(torch.float32)
    assert ours.atol < theirs.atol and ours.rtol < theirs.rtol
    assert default_tolerances(torch.float64) == gradcheck_tolerances(torch.float64)
    assert default_tolerances(torch.float32, atol=0.5).atol == 0.5


def test_round_up_never_rounds_a_suggested_tolerance_down():
    from gradient_lab.engine.tolerances import round_up

    assert round_up(0.0031000000000000003) == 0.0031 and round_up(3.21e-3) == 0.0033 and round_up(1.2e-7) == 1.2e-7
    assert round_up(4.4e-15, digits=1) == 5e-15 and round_up(2e-15, digits=1) == 2e-15
    assert round_up(0.0) == 0.0 and round_up(float("inf")) == float("inf")
