"""L2 normalisation: the corrected Function is F.normalize, zero rows and clamped rows included; the
unclamped backward fails on a zero row (NaN) and below eps; the projection-free one is worst in the
row with the smallest norm."""

import numpy as np
import pytest
import torch

from gradient_lab.app.functions.normalize import FAMILY
from tests.app.functions.checks import (
    assert_conformant,
    assert_corrected_is_reference,
    assert_reference_matches_finite_differences,
    derivatives,
    non_finite_analytic,
    report,
    worst,
)

F64 = torch.float64
CASES = {"2-D dim=-1": ((4, 5), -1), "2-D dim=0": ((4, 5), 0), "3-D dim=1": ((3, 4, 2), 1), "1-D": ((6,), 0)}


def x_of(shape=(4, 6), *, seed=0):
    return FAMILY.build_inputs(shape, seed=seed)[0]


@pytest.mark.parametrize("name", CASES)
def test_corrected_is_f_normalize(name):
    shape, dim = CASES[name]
    assert_corrected_is_reference(FAMILY, x_of(shape), dim=dim)


def test_corrected_matches_pytorch_on_zero_and_clamped_rows():
    # a zero row, and a row of norm 1e-4 below eps = 1e-3: PyTorch's gradient there is g / eps
    x = x_of()
    x[0] = 0.0
    x[2] = x[2] * 1e-4 / x[2].norm()
    for eps in (1e-3, 1e-12):  # gradients ~ 1e12 on the zero row at eps = 1e-12
        got = derivatives(lambda t: FAMILY.run("corrected", (t,), eps=eps), x)  # noqa: B023 - called at once
        want = derivatives(lambda t: FAMILY.run(None, (t,), eps=eps), x)  # noqa: B023 - called at once
        torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-15)
        torch.testing.assert_close(got[1], want[1], rtol=1e-12, atol=1e-15)
        # second derivatives: PyTorch's norm has a NaN double backward at 0; ours is 0, the truth
        # (y = x / eps is linear on a zero row)
        assert torch.isnan(want[2][0]).all() and torch.equal(got[2][0], torch.zeros(6, dtype=F64))
        torch.testing.assert_close(got[2][1:], want[2][1:], rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("dim", [-1, 0])
def test_corrected_passes_every_conformance_check(dim):
    assert_conformant(FAMILY, x_of((3, 5)), dim=dim)


def test_reference_agrees_with_finite_differences():
    assert_reference_matches_finite_differences(FAMILY, x_of((3, 5)))
    assert_reference_matches_finite_differences(FAMILY, x_of((3, 4, 2)), dim=1)


def test_unclamped_is_nan_on_exactly_the_zero_row():
    x = x_of()
    x[2] = 0.0
    result = report(FAMILY, "unclamped", x)
    assert not result.verdict.passed
    assert "not finite" in result.verdict.summary and "x[2, 0]" in result.verdict.summary
    assert non_finite_analytic(result) == {(2, j) for j in range(6)}
    assert np.isfinite(result.input("x").gradients["reference"]).all()


def test_unclamped_is_far_off_on_a_row_below_eps():
    # norm 1e-4 < eps = 1e-3: the forward is x / eps, linear; the unclamped backward divides by 1e-4
    x = x_of()
    x[1] = x[1] * 1e-4 / x[1].norm()
    result = report(FAMILY, "unclamped", x, eps=1e-3)
    assert not result.verdict.passed
    assert worst(result)[0] == 1 and worst(result, ("analytic", "numerical"))[0] == 1
    c = result.input("x")
    assert c.errors[("reference", "numerical")].max_abs < 1e-6  # the reference is right there
    assert report(FAMILY, "corrected", x, eps=1e-3).verdict.passed


def test_no_projection_is_worst_at_the_largest_entry_of_the_shortest_row():
    # analytic − true = y (y·g) / ‖x‖: a row shrunk 100× has errors 100× larger, largest where |y| is
    x = x_of()
    x[1] = x[1] * 0.01
    result = report(FAMILY, "no-projection", x)
    assert not result.verdict.passed
    expected = (1, int(x[1].abs().argmax()))
    assert worst(result) == worst(result, ("analytic", "numerical")) == expected


def test_no_projection_and_unclamped_are_right_where_they_should_be():
    # on generic rows well above eps the unclamped backward is the true one
    assert report(FAMILY, "unclamped", x_of()).verdict.passed
    assert not report(FAMILY, "no-projection", x_of()).verdict.passed


def test_family_declares_its_formulas_and_maths():
    assert list(FAMILY.formulas) == ["unclamped", "no-projection", "corrected"]
    assert [n for n, f in FAMILY.formulas.items() if f.correct] == ["corrected"]
    assert all(f.latex and f.summary for f in FAMILY.formulas.values())
    assert FAMILY.forward_latex and FAMILY.gradient_latex and "BUG" in FAMILY.specimen
    assert FAMILY.params == {"dim": -1, "eps": 1e-12} and FAMILY.input_names == ("x",)
