"""Softplus: the corrected Function is F.softplus, threshold included; exp(βx)/(1 + exp(βx)) is NaN
exactly where exp overflows; σ(−βx) is worst where |x| is largest and right at 0."""

import math

import pytest
import torch

from gradient_lab.app.functions.softplus import FAMILY
from tests.app.functions.checks import (
    assert_conformant,
    assert_corrected_is_reference,
    assert_reference_matches_finite_differences,
    non_finite_analytic,
    report,
    worst,
)

F32, F64 = torch.float32, torch.float64


def x_of(shape=(4, 6), *, dtype=F64, seed=0):
    return FAMILY.build_inputs(shape, seed=seed, dtype=dtype)[0]


@pytest.mark.parametrize("shape", [(4, 5), (3, 4, 2), (6,)])
@pytest.mark.parametrize("beta", [1.0, 2.0, 0.5])
def test_corrected_is_f_softplus(shape, beta):
    # scale 15: some βx beyond the threshold of 20, where y = x and the slope is 1
    assert_corrected_is_reference(FAMILY, 15 * x_of(shape), beta=beta)


def test_corrected_is_f_softplus_for_huge_inputs():
    x = x_of()
    x[0, 0], x[1, 1] = 800.0, -800.0
    assert_corrected_is_reference(FAMILY, x)


@pytest.mark.parametrize("beta", [1.0, 2.0])
def test_corrected_passes_every_conformance_check(beta):
    assert_conformant(FAMILY, x_of((3, 5)), beta=beta)


def test_reference_agrees_with_finite_differences():
    assert_reference_matches_finite_differences(FAMILY, x_of((3, 5)))
    assert_reference_matches_finite_differences(FAMILY, x_of((3, 5)), beta=2.0)


@pytest.mark.parametrize("dtype, big", [(F32, 100.0), (F64, 800.0)])
def test_overflowing_is_nan_exactly_at_the_large_entry(dtype, big):
    x = x_of(dtype=dtype)
    x[1, 4] = big  # exp overflows past 88.7 in float32, 709.8 in float64: inf / (1 + inf) = NaN
    result = report(FAMILY, "overflowing", x)
    assert not result.verdict.passed
    assert "not finite" in result.verdict.summary and "x[1, 4]" in result.verdict.summary
    assert non_finite_analytic(result) == {(1, 4)}
    assert report(FAMILY, "corrected", x).verdict.passed


def test_overflowing_is_right_below_the_overflow():
    x = x_of(dtype=F32)
    x[1, 4] = 80.0
    assert report(FAMILY, "overflowing", x).verdict.passed


def test_flipped_is_worst_at_the_largest_entry():
    # analytic − true = g (σ(−x) − σ(x)) = −g tanh(x/2): with g = 1, largest where |x| is
    x = 0.3 * x_of()
    x[3, 2] = -4.0
    result = report(FAMILY, "flipped", x, ones=True)
    assert not result.verdict.passed
    assert worst(result) == worst(result, ("analytic", "numerical")) == (3, 2)
    signed = result.input("x").errors[("analytic", "reference")].signed
    assert signed[3, 2] == pytest.approx(math.tanh(2.0), rel=1e-12)


def test_flipped_is_right_at_zero():
    assert report(FAMILY, "flipped", torch.zeros(4, 6, dtype=F64)).verdict.passed


def test_family_declares_its_formulas_and_maths():
    assert list(FAMILY.formulas) == ["overflowing", "flipped", "corrected"]
    assert [n for n, f in FAMILY.formulas.items() if f.correct] == ["corrected"]
    assert all(f.latex and f.summary for f in FAMILY.formulas.values())
    assert FAMILY.forward_latex and FAMILY.gradient_latex and "BUG" in FAMILY.specimen
    assert FAMILY.params == {"beta": 1.0, "threshold": 20.0} and FAMILY.input_names == ("x",)
