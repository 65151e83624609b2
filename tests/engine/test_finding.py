"""A failing verdict's finding: the comparison that failed, whatever upstream showed it. Every number
and picture beside a failing verdict comes from it, so a card never says "right" beside "fail"."""

import math

import numpy as np
import pytest
import torch

from gradient_lab.engine.finding import KINDS
from gradient_lab.present.cards import card
from gradient_lab.present.figures.cards import card_figure
from gradient_lab.testing import check_gradients
from tests.specimens import conditions, zoo
from tests.specimens.grad_output import (Softmax, SoftmaxAveragesGradOutput, SoftmaxIgnoresGradOutput, SoftmaxRollsRows,
                                          StraightThroughClamp)


def _x():
    return torch.randn(6, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


BROKEN = [
    (SoftmaxIgnoresGradOutput, lambda x: torch.softmax(x, -1), _x),
    (SoftmaxAveragesGradOutput, lambda x: torch.softmax(x, -1), _x),
    (SoftmaxRollsRows, lambda x: torch.softmax(x, -1), _x),
    (StraightThroughClamp, lambda x: x.clamp(-0.5, 0.5), _x),
    *[(s.function, s.reference, s.inputs) for s in zoo.WRONG],
]


@pytest.mark.parametrize("function, reference, inputs", BROKEN, ids=[f.__name__ for f, _, _ in BROKEN])
def test_a_failing_card_shows_the_error_its_verdict_found(function, reference, inputs):
    report = check_gradients(function, inputs(), reference=reference, conditions="none", training=0, order=2)
    if report.verdict.passed:  # a bug of the double backward alone: the first order is right, and its card says so
        assert report.second_order.failed and report.verdict.found is None
        return
    assert report.verdict.outcome == "fail"
    found = report.verdict.found
    assert found is not None and found.kind in KINDS
    assert found.wrong > 0  # the evidence holds the values the verdict found wrong
    shown = card(report)
    worst = next(n for n in shown.numbers if n.label == "worst error")
    # not "right": out of tolerance (a zero upstream must give exactly 0, so any error is one)
    assert found.worst_error > (0 if found.kind == "zero upstream" else report.tolerances.atol)
    if math.isfinite(found.worst_error):
        assert float(worst.value.rstrip("×")) == pytest.approx(found.worst_error, rel=0.5)  # as rounded for the card
    else:
        assert worst.value == "not finite"
    svg = card_figure(shown, report)
    assert svg is not None
    if shown.picture == "scatter":  # its count of wrong values is the finding's
        assert f"aria-label='{found.wrong:,} of" in svg
    else:
        assert "darkest: 0'" not in svg


def test_the_maps_show_the_upstream_that_exposed_a_backward_that_ignores_grad_output():
    report = check_gradients(SoftmaxIgnoresGradOutput, _x(), reference=lambda x: torch.softmax(x, -1), conditions="none", training=0)
    assert report.upstream == "finding"
    gradients = report.inputs[0].gradients
    assert np.abs(gradients["analytic"] - gradients["reference"]).max() > 1e-3  # the maps show it wrong, as the verdict says
    assert report.verdict.found is not None


def test_a_passing_verdict_has_no_finding_and_its_card_shows_what_was_covered():
    report = check_gradients(Softmax, _x(), reference=lambda x: torch.softmax(x, -1), conditions="none", training=0)
    assert report.verdict.passed and report.verdict.found is None and report.upstream == "loss"
    numbers = {n.label: n.value for n in card(report).numbers}
    assert numbers["entries checked"] == f"{48 * 48:,}"


def test_the_finding_is_written_once_from_its_facts():
    report = check_gradients(SoftmaxRollsRows, _x(), reference=lambda x: torch.softmax(x, -1), conditions="none", training=0)
    found = report.verdict.found
    assert report.verdict.finding == found.describe()
    assert found.at in found.describe() and math.isfinite(found.formula)


CONDITION_BUGS = [s for s in conditions.BROKEN if s.raises is None and not s.missed]


@pytest.mark.parametrize("specimen", CONDITION_BUGS, ids=[s.name for s in CONDITION_BUGS])
def test_a_card_failing_under_a_condition_shows_the_conditions_error(specimen):
    report = check_gradients(specimen.function, specimen.inputs(), reference=specimen.reference, training=0,
                             conditions="all" if specimen.group == "ties" else "default")
    assert report.verdict.outcome == "fail" and report.verdict.condition
    found = report.verdict.found
    assert found is not None and found.wrong > 0  # the changed case's values, not the plain case's right ones
    numbers = {n.label: n.value for n in card(report).numbers}
    assert numbers["worst error"] not in ("—", "0e+00×")


class SquarePlusOne(torch.autograd.Function):
    """x² + 1 forward against a reference of x²: its backward is right for its own forward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x + 1

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


def test_a_forward_that_differs_is_the_cards_finding_though_its_backward_is_right_for_it():
    report = check_gradients(SquarePlusOne, _x(), reference=lambda x: x * x, conditions="none", training=0)
    assert report.verdict.outcome == "fail" and report.verdict.forward and not report.verdict.finding
    found = report.verdict.found
    assert found.kind == "forward" and found.wrong == 48 and found.formula - found.truth == pytest.approx(1.0)
    assert report.verdict.forward == found.describe()
    shown = card(report)
    assert "aria-label='48 of 48" in card_figure(shown, report)
