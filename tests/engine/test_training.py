"""Does it train: gradient descent with the formula's gradient beside the truth's, from the same point."""

import numpy as np
import pytest
import torch

from gradient_lab.engine.training import PART_RTOLS, train
from gradient_lab.testing import check_gradients
from tests.specimens.zoo import Square, SquareIgnoresGradOutput


class SquareOffByHalf(Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * g  # 3x, not 2x


def _x():
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _sum(y):
    return (y * y).sum()  # a loss whose upstream varies by element, so a backward that ignores it is wrong


def test_a_right_backward_follows_the_truths_path_to_the_end():
    result = train(Square.apply, lambda x: x * x, _sum, (_x(),), steps=15, rtol=1e-3)
    assert result.outcome == "pass" and result.parted == -1
    assert result.losses["formula"].shape == (16,) and np.allclose(result.losses["formula"], result.losses["truth"], rtol=1e-12)
    assert result.losses["truth"][-1] < result.losses["truth"][0]  # the truth's path descends
    assert result.distance.max() <= PART_RTOLS * 1e-3


def test_a_wrong_backward_parts_at_the_first_step_and_says_where():
    result = train(SquareIgnoresGradOutput.apply, lambda x: x * x, _sum, (_x(),), steps=10, rtol=1e-3)
    assert result.outcome == "fail" and result.parted == 1
    assert result.distance[1] > result.allowed
    assert "parts" in result.describe() and "step 1" in result.describe()


def test_a_backward_that_raises_on_the_way_is_a_fact_of_the_path():
    class Breaks(torch.autograd.Function):
        calls = 0

        @staticmethod
        def forward(ctx, x):
            return x * x

        @staticmethod
        def backward(ctx, g):
            Breaks.calls += 1
            if Breaks.calls > 3:
                raise RuntimeError("out of shared memory")
            return 2 * g

    result = train(Breaks.apply, lambda x: x * x, _sum, (_x(),), steps=10, rtol=1e-3)
    assert result.outcome == "raises" and result.failure.kind == "RuntimeError"
    assert len(result.losses["formula"]) == 3


def test_nothing_to_follow_where_the_truths_gradient_is_zero():
    assert train(Square.apply, lambda x: x * x, _sum, (torch.zeros(3, dtype=torch.float64),), steps=5, rtol=1e-3) is None


@pytest.mark.parametrize("reference", [lambda x: x * x, None], ids=["reference", "finite differences"])
def test_the_stage_runs_in_check_against_the_reference_or_finite_differences(reference):
    right = check_gradients(Square, _x(), reference=reference, conditions="none")
    wrong = check_gradients(SquareOffByHalf, _x(), reference=reference, conditions="none")
    assert right.training.truth == ("reference" if reference else "numerical") and right.training.outcome == "pass"
    assert wrong.training.outcome == "fail"
    assert check_gradients(Square, _x(), reference=reference, conditions="none", training=0).training is None


def test_a_loss_that_hides_the_wrong_entries_is_said_so_not_passed():
    # the check's loss sums the output: a backward that ignores grad_output is right for it, wrong for any other
    report = check_gradients(SquareIgnoresGradOutput, _x(), reference=lambda x: x * x, conditions="none")
    assert not report.verdict.passed
    assert report.training.parted == -1 and report.training.outcome == "hides it"


def test_a_loss_that_is_flat_at_the_point_has_nothing_to_follow():
    # the sum of a row softmax is the number of rows wherever x is: its gradient is rounding, not a direction
    softmax = lambda x: torch.softmax(x, -1)  # noqa: E731
    assert train(softmax, softmax, lambda y: y.sum(), (_x(),), steps=5, rtol=1e-3) is None
