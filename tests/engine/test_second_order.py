"""The second-order verdict at kinks of the gradient and for backwards that are not meant to be
differentiated twice: a correct hardswish on its knees passes (gradgradcheck fails it there), the
elements where the products differ at a kink or jump of the gradient are left out and named, a
kink that a row's sum sits on but no element does leaves the whole row out (coupling), and a wrong
double backward still fails away from the kinks. A backward marked @once_differentiable is "by
design", not a failure; order 1 runs nothing."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gradient_lab.engine.second_order import check_second_order
from gradient_lab.engine.tolerances import default_tolerances
from tests.specimens import zoo

KNEES = (-3.0, 3.0)


def inside(x, closed: bool = False):
    return (x >= -3) & (x <= 3) if closed else (x > -3) & (x < 3)


def hardswish_function(slope, closed: bool = False) -> type[torch.autograd.Function]:
    """x·relu6(x + 3)/6 with a backward made of torch ops on saved x: ``slope(x)`` between the knees,
    1 above, 0 below; the knees themselves belong to the middle piece if ``closed``, else to the outer ones."""

    class Hardswish(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * F.relu6(x + 3) / 6

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * torch.where(inside(x, closed), slope(x), (x >= 3).to(x))

    return Hardswish


class SlopeTwice(torch.autograd.Function):
    """(2x + 3)/6, whose derivative it gives as 2/3 instead of 1/3."""

    @staticmethod
    def forward(ctx, x):
        return (2 * x + 3) / 6

    @staticmethod
    def backward(ctx, g):
        return g * 2 / 3


RIGHT = {
    "knees in the outer pieces": hardswish_function(lambda x: (2 * x + 3) / 6),
    "knees in the middle piece": hardswish_function(lambda x: (2 * x + 3) / 6, closed=True),
}
WRONG = {  # first order right, double backward wrong: (factor, on elements inside the knees)
    "derivative off by 2": (hardswish_function(SlopeTwice.apply), 2.0),
    "a term missing": (hardswish_function(lambda x: (x + x.detach() + 3) / 6), 0.5),  # the tutorial's detach of one factor
}


def on_knees(dtype=torch.float64, knees: bool = True) -> torch.Tensor:
    """2·standard normals (most inside the knees), with every third element moved exactly onto a knee."""
    x = 2 * torch.randn(6, 5, generator=torch.Generator().manual_seed(0), dtype=dtype)
    if knees:
        x.view(-1)[::3] = torch.tensor(KNEES, dtype=dtype).repeat(5)
    return x


def check(function, reference, inputs, **options):
    tolerances = default_tolerances(inputs[0].dtype)
    return check_second_order(function, reference, inputs, lambda y: y.sum(), tolerances, first_order_passed=True, names=["x"], **options)


def knees_of(x: torch.Tensor) -> set[int]:
    return set(np.flatnonzero(np.isin(x.reshape(-1).numpy(), KNEES)).tolist())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("with_reference", [True, False], ids=["reference", "no reference"])
@pytest.mark.parametrize("name", list(RIGHT))
def test_a_right_hardswish_on_its_knees_passes_and_where_it_differs_there_is_left_out(name, with_reference, dtype):
    x = on_knees(dtype)
    verdict = check(RIGHT[name].apply, F.hardswish if with_reference else None, (x,))
    assert verdict.passed and not verdict.failed, verdict.summary
    truth = verdict.products["reference" if with_reference else "differences of its gradient"]
    tolerance = default_tolerances(dtype)
    differs = set().union(*(np.flatnonzero(np.abs(a - b) > tolerance.atol + tolerance.rtol * np.abs(b)).tolist()
                            for a, b in zip(verdict.products["double backward"], truth)))
    assert set(verdict.left_out) == differs and differs <= knees_of(x)  # what differs is left out, and only knees differ
    assert bool(differs) == (name == "knees in the middle piece" or not with_reference)  # torch's double backward takes the outer pieces
    if differs:
        assert f"{len(differs)} elements left out" in verdict.text and "x[0, 0]" in verdict.text  # counted and named
    if dtype == torch.float64 and not with_reference:  # the false alarm the verdict does not raise
        assert not torch.autograd.gradgradcheck(RIGHT[name].apply, (x.clone().requires_grad_(),), raise_exception=False)


def test_a_right_hardswish_off_its_knees_leaves_nothing_out():
    verdict = check(RIGHT["knees in the middle piece"].apply, F.hardswish, (on_knees(knees=False),))
    assert verdict.passed and not verdict.left_out and "left out" not in verdict.text


@pytest.mark.parametrize("knees", [True, False], ids=["on and off the knees", "off the knees"])
@pytest.mark.parametrize("with_reference", [True, False], ids=["reference", "no reference"])
@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_double_backward_fails_away_from_the_knees(name, with_reference, knees):
    function, factor = WRONG[name]
    x = on_knees(knees=knees)
    verdict = check(function.apply, F.hardswish if with_reference else None, (x,))
    assert verdict.outcome == "fail" and verdict.failed, verdict.summary
    truth = verdict.products["reference" if with_reference else "differences of its gradient"][0]
    interior = (inside(x) & ~torch.isin(x, torch.tensor(KNEES, dtype=x.dtype))).reshape(-1).numpy()
    np.testing.assert_allclose(verdict.products["double backward"][0][interior], factor * truth[interior], rtol=1e-6)


class ReluOfRowSumSquared(torch.autograd.Function):
    """relu(Σ_j x_ij)² per row: a kink where a row sums to 0, which no single element is on. The
    backward's clamp_min takes slope 1 there where the reference's relu takes 0, so both are right,
    yet every element of such a row has Hessian-vector products that differ (coupling)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.relu(x.sum(-1)) ** 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (g * 2 * x.sum(-1).clamp_min(0))[:, None].expand_as(x)


class ReluOfRowSumSquaredTwice(ReluOfRowSumSquared):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        row = x.sum(-1).clamp_min(0)
        return (g * 2 * (2 * row - row.detach()))[:, None].expand_as(x)  # its derivative doubled


def rows_summing_to_0() -> torch.Tensor:
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64).abs()  # other rows: on the parabola
    x[0] = x[2] = torch.tensor([0.5, -1.25, 2.0, -0.75, -0.5])  # exact sums of 0, no element 0
    return x


def reference_of_row_sum(x):
    return torch.relu(x.sum(-1)) ** 2


def test_a_kink_that_reaches_elements_by_coupling_leaves_them_out():
    verdict = check(ReluOfRowSumSquared.apply, reference_of_row_sum, (rows_summing_to_0(),))
    assert verdict.passed, verdict.summary
    differs = set().union(*(np.flatnonzero(np.abs(a - b) > 1e-6).tolist()
                            for a, b in zip(verdict.products["double backward"], verdict.products["reference"])))
    assert differs == set(range(0, 5)) | set(range(10, 15))  # every element of the two rows, though none sits on a kink itself
    assert set(verdict.left_out) == differs  # each is left out: none is judged wrongly


def test_a_wrong_coupled_double_backward_fails_in_the_rows_off_the_kink():
    verdict = check(ReluOfRowSumSquaredTwice.apply, reference_of_row_sum, (rows_summing_to_0(),))
    assert verdict.failed, verdict.summary
    assert "at x[1, " in verdict.text or "at x[3, " in verdict.text  # the worst element is in a row that does not sum to 0


class SquareOnce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


@pytest.mark.parametrize("function", [SquareOnce.apply, lambda x: SquareOnce.apply(x) * x.sin()], ids=["alone", "inside a function"])
def test_a_backward_marked_once_differentiable_is_so_by_design_not_a_failure(function):
    verdict = check(function, None, (on_knees(knees=False),))
    assert verdict.outcome == "by design" and not verdict.passed and not verdict.failed
    assert verdict.summary == "not differentiable twice by design: its backward is marked @once_differentiable"


def test_failed_is_true_only_for_a_wrong_or_missing_double_backward():
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    cube = lambda x: x**3  # noqa: E731
    detached, wrong = check(zoo.CubeDetachedBackward.apply, cube, (x,)), check(zoo.CubeWrongDoubleBackward.apply, cube, (x,))
    right = check(RIGHT["knees in the outer pieces"].apply, F.hardswish, (x,))
    assert (detached.outcome, detached.failed) == ("not differentiable", True)
    assert (wrong.outcome, wrong.failed) == ("fail", True)
    assert (right.outcome, right.failed, right.passed) == ("pass", False, True)


def test_declared_order_1_runs_nothing_and_says_so():
    calls = []
    verdict = check(lambda x: calls.append(x) or x * x, None, (torch.ones(3, dtype=torch.float64),), declared_order=1)
    assert not calls and verdict.products == {}
    assert (verdict.outcome, verdict.passed, verdict.failed) == ("not checked", False, False)
    assert verdict.summary == "not checked: declared differentiable once (order=1)"


def test_a_reference_without_a_double_backward_is_the_references_lack_not_the_formulas():
    from gradient_lab.testing import check_gradients
    from tests.specimens.corpus.functions import MemoryEfficientHardSigmoid

    x = 3 * torch.randn(4, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    report = check_gradients(MemoryEfficientHardSigmoid, x, reference=torch.nn.functional.hardsigmoid, order=2, conditions="none",
                             training=0)
    assert report.second_order.outcome == "pass"  # judged by finite differences of its own gradient, as gradgradcheck passes it
    assert "the reference has no double backward" in report.second_order.text
    assert torch.autograd.gradgradcheck(MemoryEfficientHardSigmoid.apply, (x.clone().requires_grad_(),))
