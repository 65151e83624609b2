"""Log-sum-exp: the corrected Function is torch.logsumexp; the naive one overflows where exp does; the
unnormalised one is off by exp(x − m)(1 − 1/Σ exp(x − m))."""

import math

import pytest
import torch

from gradient_lab.app.functions.logsumexp import FAMILY
from tests.app.functions.checks import (
    assert_conformant,
    assert_corrected_is_reference,
    assert_reference_matches_finite_differences,
    non_finite_analytic,
    report,
    worst,
)

F32, F64 = torch.float32, torch.float64
CASES = {"2-D dim=-1": ((4, 5), -1), "2-D dim=0": ((4, 5), 0), "3-D dim=1": ((3, 4, 2), 1), "1-D": ((6,), 0)}


def x_of(shape=(4, 6), *, dtype=F64, seed=0):
    return FAMILY.build_inputs(shape, seed=seed, dtype=dtype)[0]


@pytest.mark.parametrize("name", CASES)
def test_corrected_is_torch_logsumexp(name):
    shape, dim = CASES[name]
    assert_corrected_is_reference(FAMILY, 3 * x_of(shape), dim=dim)


def test_corrected_is_stable_where_exp_overflows():
    x = x_of()
    x[1, 2], x[3, :] = 800.0, -800.0  # exp(800) = inf, exp(-800) = 0 in float64
    assert_corrected_is_reference(FAMILY, x)


@pytest.mark.parametrize("dim", [-1, 0])
def test_corrected_passes_every_conformance_check(dim):
    assert_conformant(FAMILY, x_of((3, 5)), dim=dim)


def test_reference_agrees_with_finite_differences():
    assert_reference_matches_finite_differences(FAMILY, x_of((3, 5)))
    assert_reference_matches_finite_differences(FAMILY, x_of((3, 4, 2)), dim=1)


@pytest.mark.parametrize("dtype, big", [(F32, 100.0), (F64, 800.0)])
def test_naive_overflows_to_nan_exactly_at_the_large_entry(dtype, big):
    x = x_of(dtype=dtype)
    x[2, 3] = big  # exp overflows past 88.7 in float32, 709.8 in float64
    result = report(FAMILY, "naive", x)
    assert not result.verdict.passed
    assert "not finite" in result.verdict.summary and "x[2, 3]" in result.verdict.summary
    # exp(x)/Σexp(x): inf/inf at the large entry, finite/inf = 0 beside it
    assert non_finite_analytic(result) == {(2, 3)}
    assert result.forward_max_error > 1e300  # the forward is inf there (reported as the largest float)
    assert report(FAMILY, "corrected", x).verdict.passed


def test_naive_is_right_below_the_overflow():
    x = x_of(dtype=F32)
    x[2, 3] = 80.0  # exp(80) ≈ 5.5e34 still fits in float32
    assert report(FAMILY, "naive", x).verdict.passed


def test_unnormalised_is_worst_at_the_max_of_the_flattest_row():
    # analytic − true = g·exp(x − m)·(1 − 1/S), S = Σ exp(x − m): largest at a row's max (exp(0) = 1)
    # in the row with the largest S. Row 2 is nearly flat (S ≈ 5.5); the others are spread out.
    x = 4 * x_of()
    x[2] = torch.tensor([1.0, 0.9, 0.9, 0.9, 0.9, 0.9], dtype=F64)
    result = report(FAMILY, "unnormalised", x, ones=True)
    assert not result.verdict.passed
    assert worst(result) == (2, 0)
    assert worst(result, ("analytic", "numerical")) == (2, 0)
    s = 1 + 5 * math.exp(-0.1)
    assert result.input("x").errors[("analytic", "reference")].max_abs == pytest.approx(1 - 1 / s, rel=1e-9)


def test_family_declares_its_formulas_and_maths():
    assert list(FAMILY.formulas) == ["naive", "unnormalised", "corrected"]
    assert [n for n, f in FAMILY.formulas.items() if f.correct] == ["corrected"]
    assert all(f.latex and f.summary for f in FAMILY.formulas.values())
    assert FAMILY.forward_latex and FAMILY.gradient_latex and "BUG" in FAMILY.specimen
    assert FAMILY.params == {"dim": -1} and FAMILY.input_names == ("x",)
