"""Softmax: the corrected Function is torch.softmax; forgetting the subtraction, or subtracting over the
whole batch, is caught where the softmax is largest."""

import pytest
import torch

from gradient_lab.app.functions.softmax import FAMILY
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
def test_corrected_is_torch_softmax(name):
    shape, dim = CASES[name]
    assert_corrected_is_reference(FAMILY, 3 * x_of(shape), dim=dim)


def test_corrected_is_stable_for_large_inputs():
    x = x_of()
    x[1, 2] = 800.0
    assert_corrected_is_reference(FAMILY, x)


@pytest.mark.parametrize("dim", [-1, 0])
def test_corrected_passes_every_conformance_check(dim):
    assert_conformant(FAMILY, x_of((3, 5)), dim=dim)


def test_reference_agrees_with_finite_differences():
    assert_reference_matches_finite_differences(FAMILY, x_of((3, 5)))
    assert_reference_matches_finite_differences(FAMILY, x_of((3, 4, 2)), dim=1)


def dominant():
    """Random rows, and one output close to 1: softmax(x)[2, 3] ≈ 0.98."""
    x = x_of()
    x[2, 3] = 6.0
    return x


def test_under_a_plain_sum_the_true_gradient_is_zero():
    # the outputs of each row sum to 1 whatever x is: why the family's loss weighs them instead
    result = report(FAMILY, "corrected", dominant(), ones=True)
    assert abs(result.input("x").gradients["reference"]).max() < 1e-15


def test_no_subtract_is_worst_at_the_largest_probability():
    # with g = 1: analytic = y, true = 0, so the error is y itself
    result = report(FAMILY, "no-subtract", dominant(), ones=True)
    assert not result.verdict.passed
    assert worst(result) == worst(result, ("analytic", "numerical")) == (2, 3)
    assert result.input("x").errors[("analytic", "reference")].max_abs == pytest.approx(float(torch.softmax(dominant(), -1)[2, 3]))


def test_no_subtract_fails_under_the_family_loss():
    assert not report(FAMILY, "no-subtract", x_of()).verdict.passed


def test_batch_sum_is_right_for_one_row_and_wrong_for_several():
    one = report(FAMILY, "batch-sum", x_of((1, 6)))
    assert one.jacobian.passed and one.verdict.condition == "the batch has 2 rows"  # right at one row, and the verdict says where not
    # with g = 1 and 4 rows: analytic = y (1 − 4), true = 0
    result = report(FAMILY, "batch-sum", dominant(), ones=True)
    assert not result.verdict.passed
    assert worst(result) == (2, 3)
    assert result.input("x").errors[("analytic", "reference")].max_abs == pytest.approx(3 * float(torch.softmax(dominant(), -1)[2, 3]))


def test_family_declares_its_formulas_and_maths():
    assert list(FAMILY.formulas) == ["no-subtract", "batch-sum", "corrected"]
    assert [n for n, f in FAMILY.formulas.items() if f.correct] == ["corrected"]
    assert all(f.latex and f.summary for f in FAMILY.formulas.values())
    assert FAMILY.forward_latex and FAMILY.gradient_latex and "BUG" in FAMILY.specimen
    assert FAMILY.params == {"dim": -1} and FAMILY.input_names == ("x",)
