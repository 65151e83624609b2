"""The pytest assertion: a wrong backward raises AssertionError whose message names the bug (every
diagnosis class of the zoo), its worst element and the coverage; a right one passes, with or
without a reference, any callable or autograd.Function."""

import pytest
import torch

from gradient_lab.testing import assert_gradients_match, check_gradients
from tests.specimens import zoo


@pytest.mark.parametrize("with_reference", [True, False], ids=["reference", "no reference"])
@pytest.mark.parametrize("specimen", zoo.WRONG, ids=[s.name for s in zoo.WRONG])
def test_the_message_names_the_bug(specimen, with_reference):
    with pytest.raises(AssertionError) as raised:
        assert_gradients_match(specimen.function, specimen.inputs(), reference=specimen.reference if with_reference else None, order=2)
    message = " ".join(str(raised.value).split())  # the message is wrapped at 100 columns
    report = check_gradients(specimen.function, specimen.inputs(), reference=specimen.reference if with_reference else None, order=2)
    named = [f for f in report.diagnosis.findings if f.kind == specimen.diagnosis]
    assert named and named[0].words in message, message
    assert message.startswith(f"gradients of {specimen.function.__name__} do not match")
    assert "Jacobian entries" in message  # the coverage


@pytest.mark.parametrize("specimen", zoo.RIGHT, ids=[s.name for s in zoo.RIGHT])
def test_a_right_backward_passes_to_second_order(specimen):
    report = assert_gradients_match(specimen.function, specimen.inputs(), reference=specimen.reference, order=2)
    assert report.verdict.passed and report.second_order.passed


def test_a_first_order_check_ignores_a_wrong_double_backward_and_order_2_catches_it():
    specimen = next(s for s in zoo.WRONG if s.name == "double backward")
    assert_gradients_match(specimen.function, specimen.inputs(), reference=specimen.reference)  # first order is right
    with pytest.raises(AssertionError, match="second order fail"):
        assert_gradients_match(specimen.function, specimen.inputs(), reference=specimen.reference, order=2)


def test_any_callable_works_and_a_forward_that_is_not_the_references_is_the_finding():
    def half_square(x):  # a plain function: autograd's own backward of x·x/2 is right for it, but it is not the reference x·x
        return x * x / 2

    x = torch.linspace(-2, 2, 12, dtype=torch.float64).reshape(3, 4)
    with pytest.raises(AssertionError) as raised:
        assert_gradients_match(half_square, x, reference=lambda x: x * x)
    message = " ".join(str(raised.value).split())
    assert "forward differs from the reference's: out[0, 0] is 2 by the formula, 4 by the reference" in message
    assert "its backward passes" in message  # right for its own forward


def test_the_worst_element_is_named_with_its_three_values():
    class HalfGradient(torch.autograd.Function):  # x·x with half its gradient
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x

    x = torch.linspace(-2, 2, 12, dtype=torch.float64).reshape(3, 4)
    with pytest.raises(AssertionError) as raised:
        assert_gradients_match(lambda x: HalfGradient.apply(x), x, reference=lambda x: x * x)
    message = " ".join(str(raised.value).split())
    assert "off by a constant factor 0.5" in message
    assert "worst element of the gradient of sum(output): x[0, 0]: analytic -2, reference -4, numerical -4" in message
    with pytest.raises(AssertionError) as raised:  # without a reference, finite differences are the truth, and called so
        assert_gradients_match(HalfGradient, x)
    message = " ".join(str(raised.value).split())
    assert "x[0, 0]: analytic -2, numerical -4" in message and "reference" not in message


def test_tolerances_can_be_loosened_and_the_inputs_are_left_alone():
    specimen = next(s for s in zoo.WRONG if s.name == "factor")
    x = specimen.inputs()[0]
    before = x.clone()
    with pytest.raises(AssertionError):
        assert_gradients_match(specimen.function, (x,), reference=specimen.reference)
    assert_gradients_match(specimen.function, (x,), reference=specimen.reference, rtol=10.0, atol=10.0)
    assert torch.equal(x, before) and x.grad is None


def test_bad_arguments_are_refused_in_words():
    with pytest.raises(TypeError, match="callable"):
        assert_gradients_match(3, torch.ones(2, dtype=torch.float64))
    with pytest.raises(TypeError, match="floating-point"):
        assert_gradients_match(torch.sin, torch.ones(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="order"):
        assert_gradients_match(torch.sin, torch.ones(2, dtype=torch.float64), order=3)


def test_a_straight_through_estimator_passes_against_its_declared_surrogate_and_fails_without_it():
    from tests.specimens.corpus import cases, functions as corpus

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    report = assert_gradients_match(corpus.StraightThroughRound, x, surrogate=cases.straight_through_round)
    assert report.jacobian.coverage.role == "surrogate"
    with pytest.raises(AssertionError, match="surrogate="):  # the message says how to declare the intention
        assert_gradients_match(corpus.StraightThroughRound, x)


def test_parity_true_asserts_the_gradient_however_it_is_run():
    from tests.specimens import parity as zoo

    report = assert_gradients_match(zoo.Sine.apply, zoo._x(), zoo.sine, parity=["eager", "aot_eager", "vmap"], conditions="none")
    assert [c.outcome for c in report.parity.cells] == ["agrees"] * 3
    with pytest.raises(AssertionError) as raised:
        assert_gradients_match(zoo.FallbackUnderCompile.apply, zoo._x(), zoo.sine, parity=["aot_eager"], conditions="none")
    message = str(raised.value)
    assert "parity: differs under torch.compile (aot_eager): the gradient at x[" in message and "in eager" in message
    assert check_gradients(zoo.Sine.apply, zoo._x(), reference=zoo.sine, conditions="none").parity is None  # opt-in: it compiles


def test_dtype_asserts_the_precision_too_and_the_message_gives_the_tolerances():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "specimens" / "modules"))
    import precision_functions as pf

    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 40
    report = assert_gradients_match(pf.ShiftedSoftmax.apply, x, lambda v: torch.softmax(v, -1), dtype=torch.bfloat16)
    assert report.dtype == "bfloat16" and report.precision.passed and report.precision.results[0].tolerance.usable
    assert x.dtype == torch.float64  # the caller's tensor is left alone
    with pytest.raises(AssertionError) as raised:
        assert_gradients_match(pf.UnshiftedSoftmax.apply, x, lambda v: torch.softmax(v, -1), dtype=torch.float16)
    message = str(raised.value)
    assert "(float16 on cpu;" in message and "precision: in float16, the gradient of x is not finite" in message
    assert "what PyTorch's own (autograd through the reference) in float16 needs" in message
    with pytest.raises(TypeError, match="floating-point torch.dtype"):
        check_gradients(pf.ShiftedSoftmax.apply, x, dtype=torch.int64)


def test_the_message_says_whether_it_trains():
    class SquareOffByHalf(zoo.Square):
        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x * g

    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with pytest.raises(AssertionError) as raised:
        assert_gradients_match(SquareOffByHalf, x, reference=lambda x: x * x)
    message = " ".join(str(raised.value).split())
    assert "Does it train: its path parts from the reference's at step 1" in message and "[fail]" in message


def test_sparse_inputs_are_refused_with_a_clear_message():
    from gradient_lab.errors import LabError

    x = torch.eye(3, dtype=torch.float64).to_sparse_csr()
    with pytest.raises(LabError, match="sparse inputs .*sparse_csr.* not supported"):
        check_gradients(lambda x: x.to_dense() * 2, x)


def test_the_assertion_says_how_long_the_check_took_and_what_it_covered():
    import re

    from tests.engine.test_at_scale import X, SquareOneElementOff

    with pytest.raises(AssertionError) as raised:
        assert_gradients_match(SquareOneElementOff.apply, (X,), reference=lambda x: x * x, order=1, conditions="none")
    message = str(raised.value)
    took = re.search(r"checked in ([0-9.e+-]+) s", message)
    assert took is not None and 0 < float(took.group(1)) < 600
    assert "every input element's gradient under" in message and "sampled at scale" in " ".join(message.split())
