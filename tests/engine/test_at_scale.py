"""The verdict at scale: from SCALE_ELEMENTS input elements on, every element's gradient under random
upstreams against the reference's, sampled rows entry by entry, and the coverage said in numbers.
Local bugs that gradcheck's fast mode dilutes into one scalar are found at their own element."""

import pytest
import torch

from gradient_lab.engine.at_scale import SCALE_ELEMENTS, SCALE_ENTRIES, UPSTREAMS
from gradient_lab.testing import check_gradients
from tests.specimens.scale import (Matmul, MatmulWeightTransposed, Softmax, SoftmaxRowReadsItsNeighbour, Square, SquareOneElementOff,
                                   SquareSignFlipped)

F64 = torch.float64
FIRST = dict(order=1, conditions="none")


def randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


X = randn(2**17)  # at the threshold: sampled
ROWS = randn(256, 512, seed=1)
XW = (randn(512, 256, seed=2), randn(256, 256, seed=3) / 16)


def test_a_right_elementwise_function_passes_with_its_coverage_in_numbers():
    assert X.numel() >= SCALE_ELEMENTS
    report = check_gradients(Square.apply, (X,), reference=lambda x: x * x, **FIRST)
    coverage = report.jacobian.coverage
    assert report.verdict.passed and coverage.sampled == (X.numel(),) and coverage.probes == 1 + UPSTREAMS  # the drawn one too
    assert coverage.probed == (1 + UPSTREAMS) * X.numel()  # every element's gradient under every upstream
    assert f"every input element's gradient under {1 + UPSTREAMS} upstream gradients, the drawn one and {UPSTREAMS} random" in report.verdict.summary
    assert coverage.entries == X.numel() ** 2  # of the whole Jacobian, said as what it is


def test_a_dense_jacobian_of_more_than_scale_entries_is_sampled_below_the_element_threshold():
    rows = ROWS[:128, :256]  # 32,768 elements, each feeding 256 outputs: a billion entries
    assert rows.numel() < SCALE_ELEMENTS and rows.numel() ** 2 > SCALE_ENTRIES
    report = check_gradients(SoftmaxRowReadsItsNeighbour.apply, (rows,), reference=lambda x: torch.softmax(x, -1), **FIRST)
    assert report.jacobian.coverage.sampled and not report.verdict.passed and report.verdict.found.element // 256 == 5


def test_below_the_threshold_the_whole_jacobian_is_still_read():
    small = X[:8192]  # 67M entries, 8k elements: below both thresholds
    report = check_gradients(Square.apply, (small,), reference=lambda x: x * x, **FIRST)
    assert report.verdict.passed and report.jacobian.coverage.sampled == () and report.jacobian.coverage.compared == small.numel()


@pytest.mark.parametrize("function, inputs, reference, wrong_input, where", [
    (SquareOneElementOff, (X,), lambda x: x * x, "x", lambda element, shape: element == X.numel() // 3),
    (SoftmaxRowReadsItsNeighbour, (ROWS,), lambda x: torch.softmax(x, -1), "x", lambda element, shape: element // shape[1] == 5),
    (MatmulWeightTransposed, XW, lambda x, w: x @ w, "x2", lambda element, shape: True),  # the second input: w
], ids=["one element 1% off", "a row reads its neighbour's grad_output", "a transposed weight gradient"])
def test_a_local_bug_is_found_at_its_own_element(function, inputs, reference, wrong_input, where):
    report = check_gradients(function.apply, inputs, reference=reference, **FIRST)
    found = report.verdict.found
    assert not report.verdict.passed and report.jacobian.coverage.sampled
    assert found is not None and found.input == wrong_input and where(found.element, found.shape), report.verdict.summary
    right = {SquareOneElementOff: Square, SoftmaxRowReadsItsNeighbour: Softmax, MatmulWeightTransposed: Matmul}[function]
    assert check_gradients(right.apply, inputs, reference=reference, **FIRST).verdict.passed  # its right twin passes


def test_fast_gradcheck_dilutes_the_one_element_bug_that_the_sampled_verdict_finds():
    x = X.clone().requires_grad_()
    torch.manual_seed(0)
    assert torch.autograd.gradcheck(SquareOneElementOff.apply, (x,), fast_mode=True, raise_exception=False)
    assert not check_gradients(SquareOneElementOff.apply, (X,), reference=lambda x: x * x, **FIRST).verdict.passed


def test_without_a_reference_sampled_columns_and_a_direction_judge_it():
    right = check_gradients(Square.apply, (X,), **FIRST)
    assert right.verdict.passed and right.jacobian.coverage.truths == ("numerical",)
    assert 0 < right.jacobian.coverage.sampled[0] < X.numel()  # sampled elements, said as such
    assert "sampled input elements' gradients" in right.verdict.summary
    assert not check_gradients(SquareSignFlipped.apply, (X,), **FIRST).verdict.passed


def test_a_reference_that_is_not_the_forwards_derivative_is_no_truth_at_scale():
    report = check_gradients(Square.apply, (X,), reference=lambda x: x * x * 1.5, **FIRST)
    # its forward differs too: judged against the formula's own differences, where it is right
    assert report.jacobian.coverage.truths == ("numerical",)


class DoubleWritingIntoGradOutput(torch.autograd.Function):
    """2x, whose backward doubles grad_output in place and returns it (right, and legal for autograd)."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.mul_(2)


class RaisesInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        raise ValueError("no backward here")


def test_the_drawn_gradients_are_the_first_probes_products():
    report = check_gradients(Square.apply, (X,), reference=lambda x: x * x, **FIRST)
    drawn = report.jacobian.probes[0]
    assert torch.equal(torch.as_tensor(drawn.upstream), torch.ones(X.numel(), dtype=F64))  # the sum's upstream: ones
    comparison = report.inputs[0]
    assert (comparison.gradients["analytic"].reshape(-1) == drawn.products["analytic"][0]).all()
    assert (comparison.gradients["reference"].reshape(-1) == drawn.products["reference"][0]).all()
    assert torch.allclose(torch.from_numpy(comparison.gradients["reference"]), 2 * X)


@pytest.mark.parametrize("reference", [lambda x: 2 * x, lambda x: 2 * x + 1 - 1], ids=["2x", "a gradient that is its upstream"])
def test_a_backward_writing_into_grad_output_changes_no_other_products(reference):
    report = check_gradients(DoubleWritingIntoGradOutput.apply, (X,), reference=reference, **FIRST)
    assert report.verdict.passed, report.verdict.summary
    assert all((p.products["reference"][0] == 2 * p.upstream).all() for p in report.jacobian.probes)


def test_a_backward_that_raises_at_scale_is_its_own_failure_not_a_later_calls():
    report = check_gradients(RaisesInBackward.apply, (X,), reference=lambda x: x * x, **FIRST)
    failure = report.verdict.failure
    assert failure is not None and failure.stage == "backward" and failure.kind == "ValueError" and failure.when == ""
