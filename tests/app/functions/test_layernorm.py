"""Layer normalisation: the corrected Function is F.layer_norm; dropping the mean's or the variance's
term is caught in the row with the smallest spread; a plain sum cannot see the variance's."""

import numpy as np
import pytest
import torch

from gradient_lab.app.functions.layernorm import FAMILY
from tests.app.functions.checks import (
    assert_conformant,
    assert_corrected_is_reference,
    assert_reference_matches_finite_differences,
    report,
    worst,
)

F64 = torch.float64
CASES = {"2-D dim=-1": ((4, 5), -1), "2-D dim=0": ((4, 5), 0), "3-D dim=1": ((3, 4, 2), 1), "1-D": ((6,), 0)}


def x_of(shape=(4, 6), *, seed=0):
    return FAMILY.build_inputs(shape, seed=seed)[0]


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_corrected_is_f_layer_norm(name, eps):
    shape, dim = CASES[name]
    assert_corrected_is_reference(FAMILY, 3 * x_of(shape), dim=dim, eps=eps, rtol=1e-10, atol=1e-12)


def test_corrected_is_f_layer_norm_on_a_constant_row():
    # variance 0: ŷ = 0 and r = 1/√eps
    x = x_of()
    x[1] = 2.5
    assert_corrected_is_reference(FAMILY, x, rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("dim", [-1, 0])
def test_corrected_passes_every_conformance_check(dim):
    assert_conformant(FAMILY, x_of((3, 5)), dim=dim)


def test_reference_agrees_with_finite_differences():
    assert_reference_matches_finite_differences(FAMILY, x_of((3, 5)))
    assert_reference_matches_finite_differences(FAMILY, x_of((3, 4, 2)), dim=1)


def narrow_row():
    """Row 1 shrunk 100×: r = 1/√(σ² + eps) is ~100× larger there, and so are both bugs' errors."""
    x = x_of()
    x[1] = x[1] * 0.01
    return x


def test_mean_ignored_is_off_by_a_constant_along_the_narrow_row():
    # analytic − true = r · mean(g): the same for every element of a row
    result = report(FAMILY, "mean-ignored", narrow_row())
    assert not result.verdict.passed
    assert worst(result)[0] == worst(result, ("analytic", "numerical"))[0] == 1
    signed = result.input("x").errors[("analytic", "reference")].signed
    np.testing.assert_allclose(signed[1], signed[1, 0], rtol=1e-9)


def test_variance_ignored_is_worst_at_the_narrow_row_s_largest_deviation():
    # analytic − true = r · ŷ · mean(g ⊙ ŷ): in a row, largest where |x − mean x| is
    x = narrow_row()
    result = report(FAMILY, "variance-ignored", x)
    assert not result.verdict.passed
    expected = (1, int((x[1] - x[1].mean()).abs().argmax()))
    assert worst(result) == worst(result, ("analytic", "numerical")) == expected


def test_the_whole_jacobian_sees_the_missing_variance_term_that_a_plain_sum_hides():
    # g = 1: mean(g ⊙ ŷ) = mean(ŷ) = 0, so the dropped term is zero in the drawn gradient...
    ones = report(FAMILY, "variance-ignored", x_of(), ones=True)
    np.testing.assert_allclose(ones.input("x").gradients["analytic"], ones.input("x").gradients["reference"], atol=1e-9)
    # ...but not in the Jacobian's entries, which the verdict compares one by one
    assert not ones.verdict.passed and "Jacobian entry" in ones.verdict.summary
    assert not report(FAMILY, "variance-ignored", x_of()).verdict.passed
    assert not report(FAMILY, "mean-ignored", x_of(), ones=True).verdict.passed


def test_family_declares_its_formulas_and_maths():
    assert list(FAMILY.formulas) == ["variance-ignored", "mean-ignored", "corrected"]
    assert [n for n, f in FAMILY.formulas.items() if f.correct] == ["corrected"]
    assert all(f.latex and f.summary for f in FAMILY.formulas.values())
    assert FAMILY.forward_latex and FAMILY.gradient_latex and "BUG" in FAMILY.specimen
    assert FAMILY.params == {"dim": -1, "eps": 1e-5} and FAMILY.input_names == ("x",)
